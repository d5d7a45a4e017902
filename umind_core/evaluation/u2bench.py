"""The U2-Bench scoring protocol (Dolphin AI, ICLR 2026), so UMind can be compared on its eight tasks.

The definitions follow the benchmark's own evaluation code: the evaluation kit
(dolphin-sound/u2-bench-evalkit, `vlmeval/eval_func`) for per-dataset scores and the U2-Score table
script of gurenolun/Dolphin-ai-bench (`table_fill/update_table_score_format.py`) for the aggregate.
Our code is written from those definitions, not copied:

- Localisation (LL, OD, KD): the true centre falls into one of nine regions (a coordinate below 0.45 is
  left/upper, below 0.55 centre/middle, else right/lower; named "upper left" ... "center" ... "lower
  right"); a missing or NaN centre is "not visible". The answer must equal that name after lowercasing;
  non-string answers are dropped from the denominator.
- Classification (DD, VRA): accuracy after lowercasing; integer labels need an integer answer and
  unparsable answers are dropped from the denominator.
- CVE: per dataset, prediction and truth are min-max scaled by a fixed clinical range (EF 10-75 %,
  IMT 0.3-1.5 mm, AC 100-400 mm, fat 0-85 %) and the RMSE taken over parsable answers.
- RG / CG: BLEU-4 as pycocoevalcap computes it (whitespace tokens, case kept), as a fraction.
- Aggregate: each task is the unweighted mean over its datasets (fixed lists); a task without any
  dataset scores 0, except CVE whose missing RMSE counts as 0 (score 1); CVE scores 1 - mean RMSE;
  every task score is clipped to [0, 1] after averaging; the U2-Score is the weighted sum with all
  eight weights.

Lenient variants (free-text region names, ranges from the sample, our own BLEU tokenisation,
weights renormalised over the tasks present) exist only as explicit options, because they give other
numbers than the published table.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ._bleu import bleu_lenient, tokenize  # noqa: F401  (re-exported)
from ._u2bench_error import U2BenchInputError  # noqa: F401  (re-exported)

__all__ = [
    "U2BenchInputError", "POSITION_CLASSES", "NOT_VISIBLE", "U2_WEIGHTS", "U2_DATASETS", "CVE_RANGES",
    "position_class", "region_of", "normalize_position", "localization_accuracy",
    "classification_accuracy", "cve_rmse", "bleu4", "bleu_lenient", "tokenize", "task_scores", "u2_score",
]


#: The nine region answers, spelled as the benchmark spells them (row first, a space, column).
POSITION_CLASSES: tuple[str, ...] = (
    "upper left", "upper center", "upper right",
    "middle left", "center", "middle right",
    "lower left", "lower center", "lower right",
)
#: The tenth answer: the target is absent.
NOT_VISIBLE = "not visible"

#: Task weights of the U2-Score (DD disease diagnosis, VRA view recognition and assessment, LL lesion
#: localisation, OD organ detection, KD keypoint detection, CVE clinical value estimation, RG report
#: generation, CG caption generation). They sum to 1.
U2_WEIGHTS: dict[str, float] = {
    "DD": 0.20, "VRA": 0.20, "LL": 0.07, "OD": 0.27, "KD": 0.07, "CVE": 0.07, "RG": 0.08, "CG": 0.04,
}

#: The datasets each task averages over in the published table (ids as the benchmark names them).
U2_DATASETS: dict[str, tuple[str, ...]] = {
    "DD": ("21", "23", "25", "28_1", "32", "40", "42", "44", "57", "66", "70", "74is_normal", "75"),
    "VRA": ("03", "10", "18", "28", "37", "50", "53", "69", "74is_visible", "anatomy"),
    "LL": ("04", "17", "23", "32", "64"),
    "OD": ("09", "13", "16", "18", "31", "37", "38", "47", "49", "50", "52", "53", "67"),
    "KD": ("48",),
    "CVE": ("18", "27", "31", "50", "57"),
    "RG": ("39",),
    "CG": ("10", "44"),
}

#: Fixed (min, max) used to scale each CVE dataset: EF %, IMT mm, abdominal circumference mm, fat %.
#: Dataset 31 has no range in the benchmark (it is evaluated apart); pass value_range for it.
CVE_RANGES: dict[str, tuple[float, float]] = {
    "18": (10.0, 75.0), "27": (0.3, 1.5), "50": (100.0, 400.0), "57": (0.0, 85.0),
}

_ROWS = ("upper", "middle", "lower")
_COLS = ("left", "center", "right")


def _bin(v: float, low: float, high: float) -> int:
    return 0 if v < low else (1 if v < high else 2)


def position_class(x_rel: float, y_rel: float, low: float = 0.45, high: float = 0.55) -> str:
    """The region name of a centre given relative to the image (origin top-left).

    v < low -> left / upper; low <= v < high -> center / middle; v >= high -> right / lower. As in
    the benchmark, values outside [0, 1] are binned, not refused; a NaN coordinate is "not visible".
    """
    if not (0.0 < low < high < 1.0):
        raise U2BenchInputError(f"low, high: need 0 < low < high < 1, got {low}, {high}")
    if math.isnan(x_rel) or math.isnan(y_rel):
        return NOT_VISIBLE
    row, col = _ROWS[_bin(y_rel, low, high)], _COLS[_bin(x_rel, low, high)]
    return "center" if (row, col) == ("middle", "center") else f"{row} {col}"


def region_of(centre: Any, low: float = 0.45, high: float = 0.55) -> str:
    """The true region of a target: a region name is kept, a centre (x_rel, y_rel, ...) is binned,
    and None, NaN or anything without two numbers is "not visible" (the benchmark's rule)."""
    if isinstance(centre, str):
        name = centre.strip().lower()
        if name in POSITION_CLASSES or name == NOT_VISIBLE:
            return name
        raise U2BenchInputError(f"centre: {centre!r} is not a region name")
    if not isinstance(centre, (list, tuple, np.ndarray)) or len(centre) < 2:
        return NOT_VISIBLE
    try:
        x, y = float(centre[0]), float(centre[1])
    except (TypeError, ValueError):
        return NOT_VISIBLE
    return position_class(x, y, low, high)


_ROW_WORDS = {"top": "upper", "upper": "upper", "middle": "middle", "mid": "middle", "central": "middle",
              "bottom": "lower", "lower": "lower"}
_COL_WORDS = {"left": "left", "right": "right", "center": "center", "centre": "center", "middle": "center",
              "central": "center"}


def normalize_position(text: str) -> str | None:
    """Lenient only: map free text ("Top-left", "lower centre", "not visible") to a region name.

    Returns a POSITION_CLASSES member, NOT_VISIBLE, or None when the text names no region.
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
    return "center" if (row, col) == ("middle", "center") else f"{row} {col}"


def _lenient_answer(p: Any, low: float, high: float) -> str | None:
    if p is None:
        return NOT_VISIBLE
    if isinstance(p, str):
        return normalize_position(p)
    return region_of(p, low, high)


def localization_accuracy(preds: Sequence[Any], gts: Sequence[Any], *, lenient: bool = False,
                          low: float = 0.45, high: float = 0.55) -> float:
    """Accuracy of region answers on one dataset (LL / OD / KD).

    Official: an answer counts only if it is a string equal to the true region name after
    lowercasing (no trimming); non-string answers leave the denominator. NaN when no answer is left
    (the benchmark then has no row for the dataset). lenient=True normalises free text, reads
    coordinate answers, and counts a None answer as "not visible".
    """
    P, G = list(preds), list(gts)
    if len(P) != len(G):
        raise U2BenchInputError(f"preds: {len(P)} items for {len(G)} ground truths")
    if not G:
        raise U2BenchInputError("gts: empty")
    hits = n = 0
    for p, g in zip(P, G):
        truth = region_of(g, low, high)
        if lenient:
            answer = _lenient_answer(p, low, high)
        elif isinstance(p, str):
            answer = p.lower()
        else:
            continue
        n += 1
        hits += answer == truth
    return hits / n if n else float("nan")


def _label_text(g: str) -> str:
    return g.replace("[", "").replace("]", "").replace("'", "").lower()


def classification_accuracy(preds: Sequence[Any], gts: Sequence[Any]) -> float:
    """Accuracy on one classification dataset (DD / VRA), as the benchmark counts it.

    A string label (brackets and quotes removed) is compared with the lowercased answer; an integer
    label with the answer read as an integer, and an answer that is not one leaves the denominator.
    A non-string answer to a string label is dropped too (the benchmark's script would fail on it).
    """
    P, G = list(preds), list(gts)
    if len(P) != len(G):
        raise U2BenchInputError(f"preds: {len(P)} items for {len(G)} labels")
    if not G:
        raise U2BenchInputError("gts: empty")
    hits = n = 0
    for p, g in zip(P, G):
        if isinstance(g, (bool, np.bool_)) or not isinstance(g, (str, int, np.integer)):
            raise U2BenchInputError(f"gts: labels must be strings or integers, got {g!r}")
        if isinstance(g, str):
            if not isinstance(p, str):
                continue
            ok = _label_text(g) == p.lower()
        else:
            try:
                ok = int(p) == int(g)
            except (TypeError, ValueError):
                continue
        n += 1
        hits += ok
    return hits / n if n else float("nan")


def _as_float(v: Any) -> float | None:
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def cve_rmse(preds: Sequence[Any], gts: Sequence[Any], dataset: str | None = None,
             value_range: tuple[float, float] | None = None, *, sample_range: bool = False) -> dict[str, float]:
    """RMSE of one CVE dataset after min-max scaling by a fixed range (not clipped here).

    The range is value_range, else CVE_RANGES[dataset]; sample_range=True (lenient) uses the ground
    truth's own min and max instead. Answers that do not parse as numbers are dropped and counted in
    "failed"; a missing or NaN truth drops the item. Returns rmse, n (items used), failed.
    """
    P, G = list(preds), list(gts)
    if len(P) != len(G):
        raise U2BenchInputError(f"preds: {len(P)} values for {len(G)} ground truths")
    pairs, failed = [], 0
    for p, g in zip(P, G):
        gv = _as_float(g)
        if gv is None or math.isnan(gv):
            continue
        pv = _as_float(p)
        if pv is None:
            failed += 1
            continue
        pairs.append((pv, gv))
    if not pairs:
        return {"rmse": float("nan"), "n": 0, "failed": failed}
    p_arr, g_arr = np.array(pairs, dtype=np.float64).T
    if sample_range:
        lo, hi = float(g_arr.min()), float(g_arr.max())
    elif value_range is not None:
        lo, hi = (float(v) for v in value_range)
    elif dataset in CVE_RANGES:
        lo, hi = CVE_RANGES[dataset]
    else:
        raise U2BenchInputError(f"dataset: no fixed range for {dataset!r}; pass value_range")
    if not hi > lo:
        raise U2BenchInputError(f"value range: must be increasing, got [{lo}, {hi}]")
    err = (p_arr - lo) / (hi - lo) - (g_arr - lo) / (hi - lo)
    return {"rmse": float(np.sqrt(np.mean(err ** 2))), "n": len(pairs), "failed": failed}


def bleu4(hypotheses: Sequence[str], references: Sequence[str | Sequence[str]]) -> float:
    """Corpus BLEU-4 in [0, 1] exactly as pycocoevalcap's Bleu(4) scores it (the benchmark's scorer,
    which reports it x100): whitespace tokens, case kept, closest reference length."""
    import contextlib
    import io

    try:
        from pycocoevalcap.bleu.bleu import Bleu
    except ImportError as exc:  # pragma: no cover - the eval/test extras install it
        raise ImportError("bleu4 needs pycocoevalcap: pip install 'umind[eval]'") from exc
    H, R = list(hypotheses), list(references)
    if len(H) != len(R):
        raise U2BenchInputError(f"references: {len(R)} for {len(H)} hypotheses")
    if not H:
        raise U2BenchInputError("hypotheses: empty")
    res, gts = {}, {}
    for i, (h, r) in enumerate(zip(H, R)):
        refs = [r] if isinstance(r, str) else list(r)
        if not isinstance(h, str) or not refs or not all(isinstance(x, str) for x in refs):
            raise U2BenchInputError(f"item {i}: hypothesis and references must be strings")
        res[i], gts[i] = [h], refs
    with contextlib.redirect_stdout(io.StringIO()):  # the scorer prints its length ratio
        score, _ = Bleu(4).compute_score(gts, res)
    return float(score[3])


# -------------------------------------------------------------------------------------- U2-Score


def _check_per_dataset(per_dataset: Mapping[str, Mapping[str, float]],
                       datasets: Mapping[str, Sequence[str]] | None) -> None:
    for task, rows in per_dataset.items():
        if task not in U2_WEIGHTS:
            raise U2BenchInputError(f"per_dataset: unknown task {task!r}; expected some of {sorted(U2_WEIGHTS)}")
        if not isinstance(rows, Mapping):
            raise U2BenchInputError(f"per_dataset[{task!r}]: expected a mapping dataset id -> value")
        if datasets is not None:
            extra = sorted(set(rows) - set(datasets.get(task, ())))
            if extra:
                raise U2BenchInputError(
                    f"per_dataset[{task!r}]: datasets {extra} are not in the {task} list; pass datasets=None "
                    "to score your own datasets")


def task_scores(per_dataset: Mapping[str, Mapping[str, float]],
                datasets: Mapping[str, Sequence[str]] | None = U2_DATASETS) -> dict[str, float]:
    """All eight task scores from per-dataset values, as the published table computes them.

    per_dataset[task][dataset_id] is the dataset's accuracy (DD, VRA, LL, OD, KD), RMSE (CVE) or
    BLEU-4 fraction (RG, CG). NaN or infinite values are left out. A task mean over its datasets is
    taken first and clipped after; CVE scores 1 - mean RMSE; a task without values scores 0 (CVE 1).
    """
    _check_per_dataset(per_dataset, datasets)
    out = {}
    for task in U2_WEIGHTS:
        vals = [float(v) for v in per_dataset.get(task, {}).values() if math.isfinite(float(v))]
        mean = sum(vals) / len(vals) if vals else 0.0
        score = 1.0 - mean if task == "CVE" else mean
        out[task] = min(1.0, max(0.0, score))
    return out


def u2_score(per_dataset: Mapping[str, Mapping[str, float]],
             datasets: Mapping[str, Sequence[str]] | None = U2_DATASETS, *, renormalize: bool = False) -> float:
    """The U2-Score: sum of U2_WEIGHTS x task_scores over all eight tasks.

    renormalize=True (lenient) instead divides by the total weight of the tasks present in
    per_dataset, so a partial run is not penalised; the published table never does this.
    """
    scores = task_scores(per_dataset, datasets)
    tasks = [t for t in U2_WEIGHTS if t in per_dataset] if renormalize else list(U2_WEIGHTS)
    if not tasks:
        raise U2BenchInputError("per_dataset: empty, no task to score")
    total = sum(U2_WEIGHTS[t] for t in tasks)
    return sum(U2_WEIGHTS[t] * scores[t] for t in tasks) / total
