"""Uncertainty signals of one image that do not trust the model's own confidence.

A model is overconfident off its training data: on another scanner's images its token probabilities and
mask entropy stayed low even where the mask missed the lesion entirely (Spearman +0.23 with IoU, the wrong
sign). Two signals need no calibration because they compare the model with itself:

- flip disagreement: the same prompt on the image and on its mirror image; a model that understands the
  anatomy draws the same mask (mirrored back), one that keys on texture does not;
- task disagreement: the segment mask's bounding box against the detect task's box for the same target.

Each is 0 when the two answers agree and 1 when they share nothing; two empty answers agree. Which ranks
errors best is measured by benchmarks/bench_annotation_loop.py (Spearman against the true IoU).
"""

from __future__ import annotations

import numpy as np

from umind_core.evaluation.metrics import box_iou, mask_iou
from umind_core.masks import mask_box
from umind_core.answers.results import Result

from ..conf import SIGNALS

__all__ = ["union_mask", "confidence_score", "flip_disagreement", "task_disagreement", "SIGNALS"]


def union_mask(result: Result, shape: tuple[int, int]) -> np.ndarray:
    out = np.zeros(shape, dtype=bool)
    for obj in result.objects:
        if obj.mask is not None and obj.mask.shape == shape:
            out |= obj.mask
    return out


def confidence_score(result: Result) -> float:
    """0 (sure) .. 1 (unsure) from the answer's token probability and mask entropy (the model's own view)."""
    conf = result.confidence or {}
    parts = []
    if "token_prob_mean" in conf:
        parts.append(1.0 - float(conf["token_prob_mean"]))
    if "mask_entropy" in conf:
        parts.append(float(conf["mask_entropy"]))
    return float(sum(parts) / len(parts)) if parts else 1.0


def flip_disagreement(mask: np.ndarray, mask_of_mirror: np.ndarray) -> float:
    """1 - IoU of the mask and the mirror image's mask flipped back."""
    return 1.0 - mask_iou(mask, mask_of_mirror[:, ::-1])


def task_disagreement(mask: np.ndarray, detect: Result) -> float:
    """1 - IoU of the mask's bounding box and the best-matching detected box (1 when only one is empty).

    IoU is `metrics.box_iou` counting pixels (``inclusive``: the mask's box, `masks.mask_box`, is its first and
    last pixel), the convention the signal's published Spearman (benchmarks/README.md) was measured with."""
    boxes = [o.box for o in detect.objects if o.box is not None]
    if not mask.any():
        return 0.0 if not boxes else 1.0
    if not boxes:
        return 1.0
    return 1.0 - max(box_iou(mask_box(mask), b, inclusive=True) for b in boxes)
