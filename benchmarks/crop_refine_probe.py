"""Would a second look at the fetal head, cropped around the first mask, segment it better? A probe on HC18 images.

Demo model 4's worst held-out heads are the small ones (the head a few dozen of the model's 256 input pixels
across). A cascade (segment, crop a square around the mask with a margin, segment the crop, paste its mask back)
gives a small head more input pixels without a larger input. The crop keeps the image's pixel size, so the head
circumference read off the crop's mask is in mm as before; outside the image the crop is black, as an
ultrasound frame's surround is. Measured on training images of `WORK/hc18/train.jsonl` (never on the held-out
split: this chooses whether to build it), the bundled model or `--model`, each margin beside the plain reading.

    .venv/bin/python benchmarks/crop_refine_probe.py --manifest WORK/hc18/train.jsonl --limit 60 \
        --margins 0.1,0.25,0.5,0.75 --out benchmarks/results/crop_refine_probe.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from real_heldout import read_head  # noqa: E402  the held-out benchmark's reading of a head, the same calls


def square_crop(image: np.ndarray, mask: np.ndarray, margin: float) -> tuple[np.ndarray, tuple[int, int, int]]:
    """A square around the mask's box, grown by `margin` of its longer side on each side, black outside the image;
    and where it sits (top, left, side) in the image's pixels."""
    ys, xs = np.nonzero(mask)
    cy, cx = (ys.min() + ys.max()) / 2, (xs.min() + xs.max()) / 2
    side = int(round(max(np.ptp(ys) + 1, np.ptp(xs) + 1) * (1 + 2 * margin)))
    top, left = int(round(cy - side / 2)), int(round(cx - side / 2))
    out = np.zeros((side, side) + image.shape[2:], image.dtype)
    y0, x0 = max(0, top), max(0, left)
    y1, x1 = min(image.shape[0], top + side), min(image.shape[1], left + side)
    out[y0 - top:y1 - top, x0 - left:x1 - left] = image[y0:y1, x0:x1]
    return out, (top, left, side)


def paste(shape: tuple[int, ...], crop_mask: np.ndarray, where: tuple[int, int, int]) -> np.ndarray:
    """The crop's mask in the image's pixels (what falls outside the image is dropped)."""
    top, left, side = where
    full = np.zeros(shape[:2], bool)
    y0, x0 = max(0, top), max(0, left)
    y1, x1 = min(shape[0], top + side), min(shape[1], left + side)
    full[y0:y1, x0:x1] = crop_mask[y0 - top:y1 - top, x0 - left:x1 - left]
    return full


def _figures(rows: list[tuple[float, float | None]]) -> dict:
    dice = np.array([d for d, _ in rows])
    err = np.array([e for _, e in rows if e is not None])
    return {"dice_mean": round(float(dice.mean()), 4), "dice_median": round(float(np.median(dice)), 4),
            "dice_min": round(float(dice.min()), 4), "hc_mad_mm": round(float(np.abs(err).mean()), 2),
            "hc_median_abs_mm": round(float(np.median(np.abs(err))), 2),
            "hc_mean_signed_mm": round(float(err.mean()), 2), "hc_missing": len(rows) - len(err)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--manifest", required=True, type=Path, help="HC18 training manifest (never the held-out split)")
    ap.add_argument("--limit", type=int, default=60, help="its first N images")
    ap.add_argument("--margins", default="0.1,0.25,0.5,0.75", help="crop margins, a fraction of the mask's side")
    ap.add_argument("--model", help="a UMind folder (default: the bundled demo model)")
    ap.add_argument("--out", required=True, type=Path)
    args = ap.parse_args(argv)
    from umind_core.atomic import write_text
    from umind_core.data.manifest import read_manifest
    from umind_core.demo import load_model
    from umind_core.evaluation.metrics import mask_dice
    from umind_core.imageio import Frame
    from umind_core.inference.predictor import Predictor

    margins = [float(m) for m in args.margins.split(",")]
    predictor = Predictor(load_model(args.model))
    rows: dict[str, list] = {"plain": [], **{f"crop {m}": [] for m in margins}}
    for rec in read_manifest(args.manifest)[: args.limit]:
        truth, image = rec.load_masks()[0] > 0, rec.load_image()
        spacing = tuple(float(v) for v in rec.spacing)
        true_hc = rec.annotations.measurements["HC mm"]
        first, hc, _ = read_head(predictor, Frame(pixels=image, spacing=spacing, index=0, source=rec.id))
        rows["plain"].append((mask_dice(first, truth), None if hc is None else hc - true_hc))
        for m in margins:
            if not first.any():  # nothing to crop around: the plain reading stands
                rows[f"crop {m}"].append(rows["plain"][-1])
                continue
            crop, where = square_crop(image, first, m)
            mask, hc, _ = read_head(predictor, Frame(pixels=crop, spacing=spacing, index=0, source=rec.id))
            rows[f"crop {m}"].append((mask_dice(paste(image.shape, mask, where), truth),
                                      None if hc is None else hc - true_hc))
    result = {"command": " ".join(["crop_refine_probe.py", *(argv if argv is not None else sys.argv[1:])]),
              "model": args.model or "demo", "images": len(rows["plain"]),
              "readings": {k: _figures(v) for k, v in rows.items()}}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_text(args.out, json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
