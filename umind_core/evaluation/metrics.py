"""Metrics of the UMind-VL report (sections 5.2-5.5): numpy in, floats out.

Segmentation is scored by IoU per image, averaged per anatomical site, and the headline number is the
unweighted mean over sites (Table 2's "Average" row is the plain mean of its 11 site rows). Detection
from an LLM has no confidence scores, so precision / recall / F1 come straight from the boxes it wrote,
matched one-to-one at IoU >= 0.5 (Table 3); `detection_best_f1` gives the "Best F1" used for scored
specialist detectors. Keypoints use the mean distance error (Table 4) and diagnosis the accuracy
(Table 5), where an answer outside the label set (e.g. "uncertain") counts as an error.

Mask and box IoU come from MONAI (`monai.metrics.compute_iou` / `compute_dice`,
`monai.data.box_utils.box_iou`), imported lazily so that importing this module stays cheap.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = [
    "MetricInputError",
    "PRF",
    "REFUSAL_PHRASES",
    "NON_REFUSAL_PHRASES",
    "mask_iou",
    "mean_over_sites",
    "mask_dice",
    "segmentation_miou",
    "box_iou",
    "box_iou_matrix",
    "match_boxes",
    "detection_prf",
    "detection_best_f1",
    "keypoint_errors",
    "measurement_error",
    "measurement_errors",
    "classification_metrics",
    "is_refusal",
    "refusal_accuracy",
]


class MetricInputError(ValueError):
    """An input to a metric has the wrong shape, type or value; the message names it."""


# --------------------------------------------------------------------------------------------- masks


def _as_mask(x: Any, name: str) -> np.ndarray:
    """Binary mask as bool; probabilities are refused so that thresholding stays the caller's choice."""
    arr = np.asarray(x)
    if arr.ndim < 2:
        raise MetricInputError(f"{name}: expected a mask with at least 2 dimensions, got shape {arr.shape}")
    if arr.dtype == bool:
        return arr
    if not (np.issubdtype(arr.dtype, np.integer) or np.issubdtype(arr.dtype, np.floating)):
        raise MetricInputError(f"{name}: expected a bool or numeric mask, got dtype {arr.dtype}")
    if arr.size and not np.isin(arr, (0, 1)).all():
        raise MetricInputError(f"{name}: mask values must be 0/1 or bool (threshold probabilities first)")
    return arr.astype(bool)


def _mask_pair(pred: Any, gt: Any) -> tuple[Any, Any]:
    p, g = _as_mask(pred, "pred"), _as_mask(gt, "gt")
    if p.shape != g.shape:
        raise MetricInputError(f"pred and gt: shapes differ, {p.shape} vs {g.shape}")
    import torch

    # MONAI wants (batch, channel, spatial...).
    return (torch.from_numpy(p.astype(np.float32))[None, None], torch.from_numpy(g.astype(np.float32))[None, None])


def mask_iou(pred: np.ndarray, gt: np.ndarray) -> float:
    """IoU of two binary masks. Both empty -> 1.0: a correct "nothing here" is a perfect answer,
    and scoring it NaN would silently drop such images from the site mean."""
    from monai.metrics import compute_iou

    p, g = _mask_pair(pred, gt)
    return float(compute_iou(p, g, include_background=True, ignore_empty=False).item())


def mask_dice(pred: np.ndarray, gt: np.ndarray) -> float:
    """Dice of two binary masks; both empty -> 1.0, as for `mask_iou`."""
    from monai.metrics import compute_dice

    p, g = _mask_pair(pred, gt)
    return float(compute_dice(p, g, include_background=True, ignore_empty=False).item())


def mean_over_sites(per_site_values: dict[str, list[float]]) -> float:
    """The unweighted mean over sites of each site's mean IoU (sites without a value left out): the rule
    `segmentation_miou` reports, also what a bootstrap over its per-sample IoUs recomputes."""
    return float(np.mean([np.mean(v) for v in per_site_values.values() if v]))


def segmentation_miou(samples: Iterable[tuple[str, np.ndarray, np.ndarray]]) -> dict[str, Any]:
    """mIoU per site (mean of per-image IoUs) and their unweighted mean over sites.

    Averaging over sites rather than images keeps a large site (e.g. breast) from drowning a small one,
    which is how the report's Table 2 average is formed.
    Returns {"per_site": {site: mIoU}, "mean": float, "n": images, "n_per_site": {site: images}}.
    """
    per_site_values: dict[str, list[float]] = {}
    for i, item in enumerate(samples):
        try:
            site, pred, gt = item
        except (TypeError, ValueError) as exc:
            raise MetricInputError(f"samples[{i}]: expected (site, pred, gt), got {type(item).__name__}") from exc
        if not isinstance(site, str) or not site:
            raise MetricInputError(f"samples[{i}]: site must be a non-empty string, got {site!r}")
        try:
            value = mask_iou(pred, gt)
        except MetricInputError as exc:
            raise MetricInputError(f"samples[{i}] ({site}): {exc}") from exc
        per_site_values.setdefault(site, []).append(value)
    if not per_site_values:
        raise MetricInputError("samples: empty, no site to average")
    per_site = {s: float(np.mean(v)) for s, v in per_site_values.items()}
    return {
        "per_site": per_site,
        "mean": mean_over_sites(per_site_values),
        "n": sum(len(v) for v in per_site_values.values()),
        "n_per_site": {s: len(v) for s, v in per_site_values.items()},
    }


# --------------------------------------------------------------------------------------------- boxes


def _as_boxes(x: Any, name: str) -> np.ndarray:
    """(n, 4) float64 array of (x1, y1, x2, y2) boxes with x1 <= x2 and y1 <= y2."""
    try:
        arr = np.asarray(x, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise MetricInputError(f"{name}: expected numeric boxes, got {x!r}") from exc
    if arr.size == 0:
        arr = arr.reshape(0, 4)
    if arr.ndim == 1 and arr.shape[0] == 4:
        arr = arr[None]
    if arr.ndim != 2 or arr.shape[1] != 4:
        raise MetricInputError(f"{name}: expected boxes of shape (n, 4) as (x1, y1, x2, y2), got shape {arr.shape}")
    if not np.isfinite(arr).all():
        raise MetricInputError(f"{name}: box coordinates must be finite")
    if (arr[:, 2] < arr[:, 0]).any() or (arr[:, 3] < arr[:, 1]).any():
        raise MetricInputError(f"{name}: boxes must satisfy x1 <= x2 and y1 <= y2")
    return arr


def box_iou_matrix(a: Any, b: Any, inclusive: bool = False) -> np.ndarray:
    """Pairwise IoU, shape (len(a), len(b)); zero-area boxes overlap nothing (IoU 0). The one box IoU of UMind
    (scoring, the recipe sweep and the active-learning signal use it); see `box_iou` for the convention."""
    A, B = _as_boxes(a, "a"), _as_boxes(b, "b")
    if len(A) == 0 or len(B) == 0:
        return np.zeros((len(A), len(B)), dtype=np.float64)
    if inclusive:  # the last row and column are pixels too: their far edges are one pixel on
        A, B = A + (0.0, 0.0, 1.0, 1.0), B + (0.0, 0.0, 1.0, 1.0)
    from monai.data.box_utils import box_iou as monai_box_iou

    return np.asarray(monai_box_iou(A, B), dtype=np.float64)


def box_iou(a: Any, b: Any, inclusive: bool = False) -> float:
    """IoU of two single (x1, y1, x2, y2) boxes, in pixels.

    How boxes are stored: the manifest's boxes are inclusive pixel indices (a mask's box is its first and last
    column and row) and the model is trained on those numbers, so its boxes, read back from the 0..1000 grid, are
    the same kind of number. The IoU nevertheless treats the four numbers as continuous corners by default, area
    (x2 - x1) * (y2 - y1) (MONAI's `box_iou`), because every published detection figure (recall, F1 at IoU 0.5 in
    benchmarks/README.md and the results' NOTES.md) was measured so, and the boxes they were measured on are not
    kept to re-score: counting pixels instead raises the IoU of small boxes ([0, 0, 9, 9] against [5, 0, 14, 9]:
    0.29 as corners, 0.33 as pixels) and would move which boxes match. ``inclusive=True`` counts pixels (one more
    column and row each); the active-learning task signal uses it, as its published Spearman was measured so.
    """
    A, B = _as_boxes(a, "a"), _as_boxes(b, "b")
    if len(A) != 1 or len(B) != 1:
        raise MetricInputError(f"box_iou: expected one box each, got {len(A)} and {len(B)} (use box_iou_matrix)")
    return float(box_iou_matrix(A, B, inclusive)[0, 0])


def _as_labels(x: Any, n: int, name: str) -> list[Any]:
    labels = list(x)
    if len(labels) != n:
        raise MetricInputError(f"{name}: {len(labels)} labels for {n} boxes")
    return labels


def match_boxes(
    pred: Any,
    gt: Any,
    iou_threshold: float = 0.5,
    pred_labels: Sequence[Any] | None = None,
    gt_labels: Sequence[Any] | None = None,
) -> list[tuple[int, int, float]]:
    """Greedy one-to-one matching in one image: pairs taken by descending IoU, each box used once.

    A pair qualifies when IoU >= iou_threshold (and, with labels, when labels agree). An LLM's boxes
    carry no scores, so IoU is the only order there is. Returns (pred_index, gt_index, iou) triples.
    """
    if not 0.0 < iou_threshold <= 1.0:
        raise MetricInputError(f"iou_threshold: must be in (0, 1], got {iou_threshold}")
    P, G = _as_boxes(pred, "pred"), _as_boxes(gt, "gt")
    ious = box_iou_matrix(P, G)
    ok = ious >= iou_threshold
    if (pred_labels is None) != (gt_labels is None):
        raise MetricInputError("pred_labels and gt_labels: give both or neither")
    if pred_labels is not None and gt_labels is not None:
        pl = _as_labels(pred_labels, len(P), "pred_labels")
        gl = _as_labels(gt_labels, len(G), "gt_labels")
        ok &= np.array([[p == g for g in gl] for p in pl], dtype=bool).reshape(len(P), len(G))
    pi, gi = np.nonzero(ok)
    # Stable sort on -IoU: ties keep row-major order, so the result is deterministic.
    order = np.argsort(-ious[pi, gi], kind="stable")
    used_p: set[int] = set()
    used_g: set[int] = set()
    matches: list[tuple[int, int, float]] = []
    for k in order:
        p, g = int(pi[k]), int(gi[k])
        if p in used_p or g in used_g:
            continue
        used_p.add(p)
        used_g.add(g)
        matches.append((p, g, float(ious[p, g])))
    return matches


@dataclass(frozen=True)
class PRF:
    """Detection counts and the rates derived from them.

    A zero denominator means that side made no claims: precision with no predictions is 1.0 only if
    there was nothing to find (else 0.0), recall with nothing to find is 1.0 only if nothing was
    falsely predicted (else 0.0). So a silent model is not rewarded, and an empty image answered
    with nothing is perfect.
    """

    tp: int
    fp: int
    fn: int

    @property
    def precision(self) -> float:
        if self.tp + self.fp == 0:
            return 1.0 if self.fn == 0 else 0.0
        return self.tp / (self.tp + self.fp)

    @property
    def recall(self) -> float:
        if self.tp + self.fn == 0:
            return 1.0 if self.fp == 0 else 0.0
        return self.tp / (self.tp + self.fn)

    @property
    def f1(self) -> float:
        p, r = self.precision, self.recall
        return 0.0 if p + r == 0 else 2 * p * r / (p + r)

    def as_dict(self) -> dict[str, float | int]:
        return {"precision": self.precision, "recall": self.recall, "f1": self.f1,
                "tp": self.tp, "fp": self.fp, "fn": self.fn}


def _per_image(x: Any, n: int | None, name: str) -> list[Any]:
    if isinstance(x, (str, bytes)) or not isinstance(x, (Sequence, np.ndarray)):
        raise MetricInputError(f"{name}: expected a list with one entry per image, got {type(x).__name__}")
    if n is not None and len(x) != n:
        raise MetricInputError(f"{name}: {len(x)} images, expected {n}")
    return list(x)


def detection_prf(
    preds: Sequence[Any],
    gts: Sequence[Any],
    iou_threshold: float = 0.5,
    pred_labels: Sequence[Sequence[Any]] | None = None,
    gt_labels: Sequence[Sequence[Any]] | None = None,
) -> dict[str, float | int]:
    """Precision / recall / F1 over a data set from per-image box lists (the LLM rows of Table 3).

    Counts are pooled over images (micro average). Optional per-image label lists make matching
    label-aware. Returns dict(precision, recall, f1, tp, fp, fn).
    """
    if (pred_labels is None) != (gt_labels is None):
        raise MetricInputError("pred_labels and gt_labels: give both or neither")
    P = _per_image(preds, None, "preds")
    G = _per_image(gts, len(P), "gts")
    PL = _per_image(pred_labels, len(P), "pred_labels") if pred_labels is not None else [None] * len(P)
    GL = _per_image(gt_labels, len(P), "gt_labels") if gt_labels is not None else [None] * len(P)
    tp = fp = fn = 0
    for i, (p, g, pl, gl) in enumerate(zip(P, G, PL, GL)):
        try:
            n_p, n_g = len(_as_boxes(p, "pred")), len(_as_boxes(g, "gt"))
            m = len(match_boxes(p, g, iou_threshold, pl, gl))
        except MetricInputError as exc:
            raise MetricInputError(f"image {i}: {exc}") from exc
        tp += m
        fp += n_p - m
        fn += n_g - m
    return PRF(tp, fp, fn).as_dict()


def detection_best_f1(
    preds: Sequence[Any],
    scores: Sequence[Sequence[float]],
    gts: Sequence[Any],
    iou_threshold: float = 0.5,
) -> dict[str, float | int]:
    """The point of the precision-recall curve with the highest F1 ("Best F1", specialist rows of Table 3).

    Every distinct score is tried as a cut-off (keep boxes with score >= cut-off); ties in F1 go to the
    higher cut-off. Returns detection_prf's dict plus "score_threshold" (None when no boxes at all).
    """
    P = _per_image(preds, None, "preds")
    S = _per_image(scores, len(P), "scores")
    G = _per_image(gts, len(P), "gts")
    boxes = [_as_boxes(p, f"preds[{i}]") for i, p in enumerate(P)]
    sc = []
    for i, (b, s) in enumerate(zip(boxes, S)):
        arr = np.asarray(s, dtype=np.float64).reshape(-1)
        if len(arr) != len(b) or not np.isfinite(arr).all():
            raise MetricInputError(f"scores[{i}]: expected {len(b)} finite scores, got {arr.tolist()}")
        sc.append(arr)
    cutoffs = np.unique(np.concatenate(sc)) if sc else np.zeros(0)
    best: dict[str, Any] = {**detection_prf([np.zeros((0, 4))] * len(P), G, iou_threshold), "score_threshold": None}
    for t in cutoffs[::-1]:  # descending, so an F1 tie keeps the higher cut-off
        kept = [b[s >= t] for b, s in zip(boxes, sc)]
        res = detection_prf(kept, G, iou_threshold)
        if res["f1"] > best["f1"]:
            best = {**res, "score_threshold": float(t)}
    return best


# ----------------------------------------------------------------------------------------- keypoints


def _per_point(value: Any, n: int, width: int, name: str) -> np.ndarray:
    """Broadcast to (n, width), positive and finite. width 2 (spacing): a scalar, (sx, sy) for all
    points, or (n, 2) per point. width 1 (image width): a scalar or (n,) per point."""
    arr = np.asarray(value, dtype=np.float64)
    if arr.ndim == 1:
        arr = arr[None, :] if width == 2 else arr[:, None]
    try:
        out = np.broadcast_to(arr, (n, width))
    except ValueError as exc:
        raise MetricInputError(f"{name}: cannot apply shape {arr.shape} to {n} points") from exc
    if not (np.isfinite(out).all() and (out > 0).all()):
        raise MetricInputError(f"{name}: values must be finite and > 0")
    return out


def keypoint_errors(
    pred_pts: Sequence[Any],
    gt_pts: Any,
    spacing: Any = None,
    image_width: Any = None,
) -> dict[str, Any]:
    """Mean distance error of keypoints (Table 4's MDE), in pixels and optionally mm / image widths.

    pred_pts[i] is (x, y) in pixels, or None / NaN when the model gave no point; a missing point is
    counted in "n_missing" and left out of the means, never scored as a zero error. spacing is mm per
    pixel as a scalar, (sx, sy), or one per point (n, 2); image_width is pixels, scalar or one per
    point, so points from many images can be pooled. Means are None when no point was predicted.
    """
    G = np.asarray(gt_pts, dtype=np.float64)
    if G.ndim != 2 or G.shape[1] != 2 or not np.isfinite(G).all():
        raise MetricInputError(f"gt_pts: expected finite points of shape (n, 2), got shape {G.shape}")
    preds = list(pred_pts)
    if len(preds) != len(G):
        raise MetricInputError(f"pred_pts: {len(preds)} points for {len(G)} ground-truth points")
    Pm = np.full_like(G, np.nan)
    for i, p in enumerate(preds):
        if p is None:
            continue
        arr = np.asarray(p, dtype=np.float64).reshape(-1)
        if arr.shape != (2,):
            raise MetricInputError(f"pred_pts[{i}]: expected (x, y), got {p!r}")
        Pm[i] = arr
    missing = ~np.isfinite(Pm).all(axis=1)
    diff = Pm - G
    per_point_px = np.hypot(diff[:, 0], diff[:, 1])
    hit = ~missing

    def mean(v: np.ndarray) -> float | None:
        return float(v[hit].mean()) if hit.any() else None

    out: dict[str, Any] = {
        "mean_px": mean(per_point_px),
        "per_point": [None if m else float(e) for m, e in zip(missing, per_point_px)],
        "n": int(len(G)),
        "n_missing": int(missing.sum()),
    }
    if spacing is not None:
        sp = _per_point(spacing, len(G), 2, "spacing")
        mm = np.hypot(diff[:, 0] * sp[:, 0], diff[:, 1] * sp[:, 1])
        out["mean_mm"] = mean(mm)
        out["per_point_mm"] = [None if m else float(e) for m, e in zip(missing, mm)]
    if image_width is not None:
        w = _per_point(image_width, len(G), 1, "image_width")[:, 0]
        out["mean_rel_width"] = mean(per_point_px / w)
    return out


def measurement_error(pred_len: float, gt_len: float) -> float:
    """Relative error |pred - gt| / gt of one measurement (a length, an angle, a clinical value)."""
    try:
        p, g = float(pred_len), float(gt_len)
    except (TypeError, ValueError) as exc:
        raise MetricInputError(f"measurement_error: numbers expected, got {pred_len!r}, {gt_len!r}") from exc
    if not math.isfinite(p):
        raise MetricInputError(f"pred_len: must be finite, got {pred_len!r}")
    if not (math.isfinite(g) and g > 0):
        raise MetricInputError(f"gt_len: must be finite and > 0, got {gt_len!r}")
    return abs(p - g) / g


def measurement_errors(preds: Sequence[float | None], gts: Sequence[float]) -> dict[str, Any]:
    """Aggregate of `measurement_error`: None / NaN predictions are counted as missing, not as errors of 0.

    Returns dict(mean_rel, median_rel, mean_abs, n, n_missing); means are None when nothing was predicted.
    """
    P, G = list(preds), list(gts)
    if len(P) != len(G):
        raise MetricInputError(f"preds: {len(P)} values for {len(G)} ground truths")
    rel, absolute, missing = [], [], 0
    for i, (p, g) in enumerate(zip(P, G)):
        if p is None or (isinstance(p, float) and math.isnan(p)):
            missing += 1
            continue
        try:
            rel.append(measurement_error(p, g))
        except MetricInputError as exc:
            raise MetricInputError(f"item {i}: {exc}") from exc
        absolute.append(abs(float(p) - float(g)))
    return {
        "mean_rel": float(np.mean(rel)) if rel else None,
        "median_rel": float(np.median(rel)) if rel else None,
        "mean_abs": float(np.mean(absolute)) if absolute else None,
        "n": len(G),
        "n_missing": missing,
    }


# ------------------------------------------------------------------------------------ classification


def classification_metrics(
    y_true: Sequence[Any], y_pred: Sequence[Any], labels: Sequence[Any] | None = None
) -> dict[str, Any]:
    """Accuracy, macro F1, per-class precision/recall/F1/support and a confusion table.

    With `labels`, a prediction outside them (e.g. "uncertain", an unparsable answer) is simply wrong
    - the report's rule for diagnosis - and does not become a class of its own. Without `labels`, the
    classes are the sorted union of both lists. A class never predicted has precision 0.
    confusion is {true_label: {predicted_label: count}}, only non-zero cells.
    """
    T, P = list(y_true), list(y_pred)
    if len(T) != len(P):
        raise MetricInputError(f"y_pred: {len(P)} predictions for {len(T)} labels")
    if not T:
        raise MetricInputError("y_true: empty")
    if labels is None:
        classes = sorted(set(T) | set(P), key=str)
    else:
        classes = list(dict.fromkeys(labels))
        unknown = sorted({t for t in T if t not in set(classes)}, key=str)
        if unknown:
            raise MetricInputError(f"y_true: labels {unknown} are not in labels={classes}")
    confusion: dict[Any, dict[Any, int]] = {}
    for t, p in zip(T, P):
        row = confusion.setdefault(t, {})
        row[p] = row.get(p, 0) + 1
    per_class: dict[Any, dict[str, float | int]] = {}
    for c in classes:
        tp = sum(1 for t, p in zip(T, P) if t == c and p == c)
        n_pred = sum(1 for p in P if p == c)
        support = sum(1 for t in T if t == c)
        prec = tp / n_pred if n_pred else 0.0
        rec = tp / support if support else 0.0
        f1 = 2 * prec * rec / (prec + rec) if prec + rec else 0.0
        per_class[c] = {"precision": prec, "recall": rec, "f1": f1, "support": support}
    return {
        "accuracy": sum(1 for t, p in zip(T, P) if t == p) / len(T),
        "macro_f1": float(np.mean([v["f1"] for v in per_class.values()])),
        "per_class": per_class,
        "confusion": confusion,
        "n": len(T),
    }


# ---------------------------------------------------------------------------------------- refusals

#: Phrases that mark an answer as a refusal: the target is absent or the question does not apply
#: (section 4's alignment data teaches answers like "The question is not applicable to this
#: anatomical region"). Matched as substrings of the lower-cased answer.
REFUSAL_PHRASES: tuple[str, ...] = (
    "not visible",
    "not visualized",
    "not visualised",
    "not shown",
    "not present",
    "not applicable",
    "no such",
    "does not show",
    "doesn't show",
    "does not contain",
    "doesn't contain",
    "cannot",
    "can not",
    "can't",
    "unable to",
)

#: Clinical hedges that contain a refusal word but answer the question ("malignancy cannot be
#: excluded"); they are removed before matching.
NON_REFUSAL_PHRASES: tuple[str, ...] = (
    "cannot be excluded",
    "can not be excluded",
    "can't be excluded",
    "cannot be ruled out",
    "can not be ruled out",
    "can't be ruled out",
)


def is_refusal(text: str) -> bool:
    """True when `text` declines or says the target is absent (see REFUSAL_PHRASES)."""
    if not isinstance(text, str):
        raise MetricInputError(f"text: expected a string, got {type(text).__name__}")
    t = re.sub(r"\s+", " ", text.lower().replace("\u2019", "'")) + " "
    for phrase in NON_REFUSAL_PHRASES:
        t = t.replace(phrase, " ")
    return any(phrase in t for phrase in REFUSAL_PHRASES)


def refusal_accuracy(answers: Sequence[str], should_refuse: Sequence[bool]) -> float:
    """Fraction of answers whose refusal matches the expectation: refuse ill-posed questions, answer the rest."""
    A, S = list(answers), list(should_refuse)
    if len(A) != len(S):
        raise MetricInputError(f"should_refuse: {len(S)} flags for {len(A)} answers")
    if not A:
        raise MetricInputError("answers: empty")
    return sum(1 for a, s in zip(A, S) if is_refusal(a) == bool(s)) / len(A)

