"""Held-out score of a model: mean Dice and IoU of its segment answers against the final labels.

The same prompt the server answers (`segment` with the label's name) is asked for every labeled object of
every held-out record; the predicted masks of that answer are merged and compared with the label's mask.
An empty answer scores 0, so a model that stops answering is worse, never "undefined".
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from umind_core.data.manifest import read_manifest
from umind_core.evaluation.metrics import mask_dice, mask_iou
from umind_core.predictor import Predictor

__all__ = ["evaluate_segmentation"]


def evaluate_segmentation(model, manifest: Path, max_new_tokens: int = 256) -> dict:
    predictor = Predictor(model, max_new_tokens=max_new_tokens)
    dices, ious = [], []
    for rec in read_manifest(manifest):
        objects = rec.annotations.objects
        if not objects:
            continue
        image = rec.load_image()
        gts = rec.load_masks()
        by_label: dict[str, np.ndarray] = {}
        for obj, gt in zip(objects, gts):
            if gt is None:
                continue
            by_label[obj.label] = gt if obj.label not in by_label else (by_label[obj.label] | gt)
        for label, gt in by_label.items():
            result = predictor.predict_batch([image], "segment", label)[0]
            pred = np.zeros_like(gt, dtype=bool)
            for o in result.objects:
                if o.mask is not None and o.mask.shape == gt.shape:
                    pred |= o.mask
            dices.append(mask_dice(pred, gt))
            ious.append(mask_iou(pred, gt))
    if not dices:
        return {"dice": None, "iou": None, "n": 0}
    return {"dice": float(np.mean(dices)), "iou": float(np.mean(ious)), "n": len(dices)}
