"""The U2-Bench scoring protocol (Dolphin AI, ICLR 2026), so UMind can be compared on its eight tasks.

U2-Bench asks localisation tasks (lesion localisation LL, organ detection OD, keypoint detection KD)
as a choice among nine image regions plus "not visible", scores clinical value estimation (CVE) by
a min-max scaled RMSE, text generation (RG, CG) by BLEU among others, classification (DD, VRA) by
accuracy, and folds the task scores into one weighted U2-Score.

The region rule follows the benchmark's evaluation kit (dolphin-sound/u2-bench-evalkit,
`new_seg_eval`): a centre coordinate below 0.45 is left/top, from 0.45 up to (not including) 0.55 is
centre, 0.55 and above is right/bottom. The benchmark spells the rows "upper / middle / lower";
`normalize_position` maps those (and "top", "bottom", "centre", hyphens) onto POSITION_CLASSES.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

__all__ = [
    "U2BenchInputError",
    "POSITION_CLASSES",
    "NOT_VISIBLE",
    "U2_WEIGHTS",
    "position_class",
    "normalize_position",
    "localization_accuracy",
    "cve_score",
    "tokenize",
    "bleu",
    "u2_score",
]


class U2BenchInputError(ValueError):
    """An input to a U2-Bench scorer is malformed; the message names it."""


POSITION_CLASSES: tuple[str, ...] = (
    "top-left", "top-center", "top-right",
    "middle-left", "center", "middle-right",
    "bottom-left", "bottom-center", "bottom-right",
)
#: The tenth answer U2-Bench offers: the target is absent.
NOT_VISIBLE = "not visible"

#: Task weights of the U2-Score (DD disease diagnosis, VRA view recognition and assessment, LL lesion
#: localisation, OD organ detection, KD keypoint detection, CVE clinical value estimation, RG report
#: generation, CG caption generation). They sum to 1.
U2_WEIGHTS: dict[str, float] = {
    "DD": 0.20, "VRA": 0.20, "LL": 0.07, "OD": 0.27, "KD": 0.07, "CVE": 0.07, "RG": 0.08, "CG": 0.04,
}

_ROWS = ("top", "middle", "bottom")
_COLS = ("left", "center", "right")


def _bin(v: float, low: float, high: float) -> int:
    return 0 if v < low else (1 if v < high else 2)


def position_class(x_rel: float, y_rel: float, low: float = 0.45, high: float = 0.55) -> str:
    """The 3 x 3 region of a point given relative to the image (0..1, origin top-left).

    v < low -> left / top; low <= v < high -> center; v >= high -> right / bottom (the evalkit's rule).
    """
    if not (0.0 < low < high < 1.0):
        raise U2BenchInputError(f"low, high: need 0 < low < high < 1, got {low}, {high}")
    for name, v in (("x_rel", x_rel), ("y_rel", y_rel)):
        if not isinstance(v, (int, float, np.number)) or not math.isfinite(v) or not 0.0 <= v <= 1.0:
            raise U2BenchInputError(f"{name}: must be a number in [0, 1], got {v!r}")
    row, col = _ROWS[_bin(y_rel, low, high)], _COLS[_bin(x_rel, low, high)]
    return "center" if (row, col) == ("middle", "center") else f"{row}-{col}"


_ROW_WORDS = {"top": "top", "upper": "top", "middle": "middle", "mid": "middle", "central": "middle",
              "bottom": "bottom", "lower": "bottom"}
_COL_WORDS = {"left": "left", "right": "right", "center": "center", "centre": "center", "middle": "center",
              "central": "center"}


def normalize_position(text: str) -> str | None:
    """Map a free-text region answer ("Upper left", "lower-centre", "not visible") to a canonical name.

    Returns a POSITION_CLASSES member, NOT_VISIBLE, or None when the text names no region (which then
    counts as a wrong answer).
    """
    if not isinstance(text, str):
        raise U2BenchInputError(f"text: expected a string, got {type(text).__name__}")
    t = text.strip().lower()
    if "not visible" in t or "invisible" in t or t in {"none", "absent"}:
        return NOT_VISIBLE
    words = re.findall(r"[a-z]+", t)
    if len(words) == 1 and words[0] in {"center", "centre", "middle", "central"}:
        return "center"
    if len(words) != 2:
        return None
    a, b = words
    if a in _ROW_WORDS and b in _COL_WORDS:
        row, col = _ROW_WORDS[a], _COL_WORDS[b]
    elif b in _ROW_WORDS and a in _COL_WORDS and a not in {"middle", "central"}:  # "left upper"
        row, col = _ROW_WORDS[b], _COL_WORDS[a]
    else:
        return None
    return "center" if (row, col) == ("middle", "center") else f"{row}-{col}"


def _region(item: Any, name: str, low: float, high: float) -> str | None:
    if item is None:
        return NOT_VISIBLE
    if isinstance(item, str):
        return normalize_position(item)
    try:
        x, y = (float(v) for v in item)
    except (TypeError, ValueError) as exc:
        raise U2BenchInputError(f"{name}: expected (x_rel, y_rel), a region name or None, got {item!r}") from exc
    try:
        return position_class(x, y, low, high)
    except U2BenchInputError as exc:
        raise U2BenchInputError(f"{name}: {exc}") from exc


def localization_accuracy(
    pred_xy_rel: Sequence[Any], gt_xy_rel: Sequence[Any], low: float = 0.45, high: float = 0.55
) -> float:
    """Fraction of items whose predicted region equals the true one (U2-Bench LL / OD / KD).

    Each entry is (x_rel, y_rel), a region name (free text is normalised), or None for "not visible".
    A prediction that names no region is wrong.
    """
    P, G = list(pred_xy_rel), list(gt_xy_rel)
    if len(P) != len(G):
        raise U2BenchInputError(f"pred_xy_rel: {len(P)} items for {len(G)} ground truths")
    if not G:
        raise U2BenchInputError("gt_xy_rel: empty")
    hits = 0
    for i, (p, g) in enumerate(zip(P, G)):
        gr = _region(g, f"gt_xy_rel[{i}]", low, high)
        if gr is None:
            raise U2BenchInputError(f"gt_xy_rel[{i}]: {g!r} names no region")
        hits += _region(p, f"pred_xy_rel[{i}]", low, high) == gr
    return hits / len(G)


def cve_score(
    pred: Sequence[float], gt: Sequence[float], vmin: float | None = None, vmax: float | None = None
) -> dict[str, float]:
    """Clinical value estimation: RMSE after min-max scaling both series to the ground-truth range.

    vmin / vmax default to the ground truth's minimum and maximum, so errors are in units of the
    observed range and different quantities (EF %, angles, mm) become comparable.
    score = clip(1 - rmse_scaled, 0, 1). Non-finite predictions are refused: drop unparsable answers
    (and report the parse rate) before calling.
    """
    p = np.asarray(pred, dtype=np.float64).reshape(-1)
    g = np.asarray(gt, dtype=np.float64).reshape(-1)
    if p.shape != g.shape:
        raise U2BenchInputError(f"pred: {p.size} values for {g.size} ground truths")
    if g.size == 0:
        raise U2BenchInputError("gt: empty")
    if not np.isfinite(p).all():
        raise U2BenchInputError("pred: values must be finite (drop unparsable answers first)")
    if not np.isfinite(g).all():
        raise U2BenchInputError("gt: values must be finite")
    lo = float(g.min()) if vmin is None else float(vmin)
    hi = float(g.max()) if vmax is None else float(vmax)
    if not hi > lo:
        raise U2BenchInputError(f"vmin, vmax: the range must be positive, got [{lo}, {hi}] (pass vmin/vmax)")
    rmse = float(np.sqrt(np.mean(((p - lo) / (hi - lo) - (g - lo) / (hi - lo)) ** 2)))
    return {"rmse_scaled": rmse, "score": float(np.clip(1.0 - rmse, 0.0, 1.0)), "vmin": lo, "vmax": hi,
            "n": int(g.size)}


# ------------------------------------------------------------------------------------------- BLEU

# Latin words and numbers stay whole; each CJK character is its own token (reports may be Chinese);
# punctuation marks are tokens.
_TOKEN = re.compile(r"[\u3400-\u9fff]|[^\W\u3400-\u9fff]+|[^\w\s]")


def tokenize(text: str) -> list[str]:
    """Lower-cased tokens for BLEU."""
    if not isinstance(text, str):
        raise U2BenchInputError(f"text: expected a string, got {type(text).__name__}")
    return _TOKEN.findall(text.lower())


def _ngrams(tokens: list[str], n: int) -> Counter:
    return Counter(tuple(tokens[i:i + n]) for i in range(len(tokens) - n + 1))


def bleu(hypotheses: Sequence[str], references: Sequence[str | Sequence[str]], max_n: int = 4) -> float:
    """Corpus BLEU (Papineni et al. 2002) in [0, 1], clipped n-gram counts pooled over the corpus.

    Smoothing is the "exp" method (sacreBLEU's default) for orders 2..max_n: the k-th such order with
    no match gets precision 1 / (2^k * total) instead of 0, so one missing order does not zero the
    score. Unlike sacreBLEU, no unigram match at all gives 0: texts that share no word get no credit
    (sacreBLEU would give a disjoint 4-word pair about 0.08). Orders for which
    the hypotheses have no n-grams at all (every hypothesis shorter than n) are left out of the
    geometric mean. A reference may be one string or a list of strings; with several, counts are
    clipped by the maximum over them and the closest reference length enters the brevity penalty.
    """
    H = list(hypotheses)
    R = list(references)
    if len(H) != len(R):
        raise U2BenchInputError(f"references: {len(R)} for {len(H)} hypotheses")
    if not H:
        raise U2BenchInputError("hypotheses: empty")
    if max_n < 1:
        raise U2BenchInputError(f"max_n: must be >= 1, got {max_n}")
    matches = [0] * max_n
    totals = [0] * max_n
    hyp_len = ref_len = 0
    for i, (h, r) in enumerate(zip(H, R)):
        refs = [r] if isinstance(r, str) else list(r)
        if not refs:
            raise U2BenchInputError(f"references[{i}]: no reference text")
        ht = tokenize(h)
        rts = [tokenize(x) for x in refs]
        hyp_len += len(ht)
        # Closest reference length; ties go to the shorter one.
        ref_len += min((abs(len(rt) - len(ht)), len(rt)) for rt in rts)[1]
        for n in range(1, max_n + 1):
            hc = _ngrams(ht, n)
            max_ref: Counter = Counter()
            for rt in rts:
                max_ref |= _ngrams(rt, n)
            matches[n - 1] += sum(min(c, max_ref[g]) for g, c in hc.items())
            totals[n - 1] += sum(hc.values())
    if hyp_len == 0 or matches[0] == 0:
        return 0.0
    log_p = []
    k = 0
    for m, t in zip(matches, totals):
        if t == 0:
            continue
        if m == 0:
            k += 1
            log_p.append(math.log(1.0 / (2 ** k * t)))
        else:
            log_p.append(math.log(m / t))
    bp = 1.0 if hyp_len > ref_len else math.exp(1.0 - ref_len / hyp_len)
    return bp * math.exp(sum(log_p) / len(log_p))


# -------------------------------------------------------------------------------------- U2-Score


def u2_score(task_scores: Mapping[str, float], weights: Mapping[str, float] = U2_WEIGHTS) -> float:
    """Weighted sum of task scores (each in [0, 1]) over the tasks given, divided by their total weight.

    Renormalising keeps a partial run (say, no report-generation data) on the same 0..1 scale; with
    all eight tasks it is the plain weighted sum. Unknown task names are refused, not ignored.
    """
    if not task_scores:
        raise U2BenchInputError("task_scores: empty, no task to score")
    total_w = 0.0
    acc = 0.0
    for task, score in task_scores.items():
        if task not in weights:
            raise U2BenchInputError(f"task_scores: unknown task {task!r}; expected some of {sorted(weights)}")
        s = float(score)
        if not (math.isfinite(s) and 0.0 <= s <= 1.0):
            raise U2BenchInputError(f"task_scores[{task!r}]: must be in [0, 1], got {score!r}")
        acc += weights[task] * s
        total_w += weights[task]
    if total_w <= 0:
        raise U2BenchInputError("weights: the tasks given have zero total weight")
    return acc / total_w
