"""How much IoU can a mask decoder lose to its own output grid alone? The resolution ceiling, no model involved.

The Dynamic Conv Mask Decoder grows the merged token grid by 2 x 2 twice (two stride-2 transposed convolutions)
and then interpolates bilinearly to the image: an 8x8 grid (256 px input) gives 32x32 logits, a 16x16 grid
(512 px) gives 64x64. Even a perfect decoder can only draw what those logits can hold. Here every held-out
ground-truth mask is passed through that bottleneck as well as it can be (area-averaged down to the logit grid,
which is the best a grid of that size can carry, bilinearly upsampled back, thresholded at 0.5) and compared
with itself. The gap between 1.0 and this IoU is what the grid costs before any learning.

`python benchmarks/mask_resolution_ceiling.py --work /tmp/ceiling` writes
benchmarks/results/mask_resolution_ceiling.json (held-out seeds 1,000,000+ of the default look; masks do not
depend on the look, so scanner_b's are the same shapes).

`--hc18 WORK/hc18/test.jsonl` does the same for real fetal heads (the held-out split of `umind import hc18 --split`)
at the grid each image really gets (the processor resizes an 800 x 540 scan to 288 x 192: a 36 x 24 logit grid)
and measures the head circumference the moment ellipse reads off the mask that comes back, against the one it reads
off the annotation and against the sonographer's: what the grid alone costs the HC18 readout
(benchmarks/results/hc18_resolution_ceiling.json).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image

from umind_core.atomic import write_text
from umind_core.evaluation.metrics import mask_iou  # the one mask IoU (both empty: 1.0)

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "mask_resolution_ceiling.json"
#: merged token grid -> decoder logit grid (two 2x transposed convolutions)
GRIDS = {"8x8 (256 px)": 32, "16x16 (512 px)": 64}


def through_grid(mask: np.ndarray, logits: int | tuple[int, int]) -> np.ndarray:
    """The mask after the decoder's bottleneck: area-averaged to the logit grid (logits x logits, or rows x
    columns), bilinear back, > 0.5."""
    t = torch.from_numpy(mask.astype(np.float32))[None, None]
    small = F.adaptive_avg_pool2d(t, logits if isinstance(logits, tuple) else (logits, logits))
    back = F.interpolate(small, size=mask.shape, mode="bilinear", align_corners=False)
    return back[0, 0].numpy() > 0.5


#: pixels the demo model's processor resizes every image to (`modeling.tiny.build_processor`: 256 x 256), the side a
#: merged token covers (patch 16 x merge 2) and the logit cell (two 2x transposed convolutions: 32 / 4 px)
MODEL_PIXELS, TOKEN_PX, LOGIT_PX = 256 * 256, 32, 8


def hc18_ceiling(manifest: Path) -> dict:
    """Per HC18 image: the head circumference (mm) off the annotation's mask and off that mask after the grid."""
    from transformers.models.qwen2_vl.image_processing_qwen2_vl import smart_resize

    from umind_core.answers.landmarks import mask_perimeter
    from umind_core.data.manifest import read_manifest
    from umind_core.evaluation.metrics import mask_dice

    rows = []
    for rec in read_manifest(manifest):
        truth = rec.load_masks()[0]
        h, w = smart_resize(*truth.shape, TOKEN_PX, MODEL_PIXELS, MODEL_PIXELS)
        grid = (h // LOGIT_PX, w // LOGIT_PX)
        back = through_grid(truth, grid)
        rows.append({"id": rec.id, "logits": list(grid), "sonographer_mm": rec.annotations.measurements["HC mm"],
                     "annotation_mm": round(mask_perimeter(truth, rec.spacing).value, 2),
                     "through_grid_mm": round(mask_perimeter(back, rec.spacing).value, 2),
                     "dice": round(float(mask_dice(back, truth)), 5)})

    def mad(a: str, b: str) -> float:
        return round(float(np.mean([abs(r[a] - r[b]) for r in rows])), 3)

    return {"manifest": manifest.name, "images": len(rows),
            "logit_grids": sorted({tuple(r["logits"]) for r in rows}),
            "grid_vs_annotation_mad_mm": mad("through_grid_mm", "annotation_mm"),
            "grid_vs_sonographer_mad_mm": mad("through_grid_mm", "sonographer_mm"),
            "annotation_vs_sonographer_mad_mm": mad("annotation_mm", "sonographer_mm"),
            "annotation_minus_sonographer_mm": round(float(np.mean([r["annotation_mm"] - r["sonographer_mm"]
                                                                    for r in rows])), 3),
            "dice_mean": round(float(np.mean([r["dice"] for r in rows])), 4), "per_image": rows}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", type=Path, help="folder for the synthetic held-out set (made once)")
    ap.add_argument("-n", type=int, default=200)
    ap.add_argument("--hc18", type=Path, help="an HC18 manifest (the held-out split) instead of synthetic images")
    ap.add_argument("--out", type=Path, help="result JSON (default: results/mask_resolution_ceiling.json, or "
                                             "results/hc18_resolution_ceiling.json with --hc18)")
    args = ap.parse_args()
    if args.hc18:
        result = hc18_ceiling(args.hc18)
        write_text(args.out or OUT.with_name("hc18_resolution_ceiling.json"), json.dumps(result, indent=2) + "\n")
        print({k: v for k, v in result.items() if k != "per_image"})
        return
    if args.work is None:
        ap.error("--work is required without --hc18")
    data = args.work / "test_default"
    if not (data / "manifest.jsonl").is_file():
        subprocess.run([sys.executable, "-m", "umind_core.cli", "synth", "--out", str(data), "-n", str(args.n),
                        "--seed0", "1000000", "--size", "256", "--no-conversations"], check=True)
    scores: dict[str, dict[str, list[float]]] = {g: defaultdict(list) for g in GRIDS}
    for line in (data / "manifest.jsonl").read_text().splitlines():
        rec = json.loads(line)
        for obj in rec["annotations"]["objects"]:
            if not obj.get("mask"):
                continue
            mask = np.asarray(Image.open(data / obj["mask"])) > 0
            for grid, logits in GRIDS.items():
                scores[grid][obj["label"]].append(mask_iou(mask, through_grid(mask, logits)))
    result = {"images": args.n, "seed0": 1_000_000, "size": 256, "grids": {}}
    for grid, by_label in scores.items():
        result["grids"][grid] = {label: {"mean_iou": round(float(np.mean(v)), 4), "min_iou": round(float(np.min(v)), 4),
                                         "n": len(v)} for label, v in sorted(by_label.items())}
    write_text(args.out or OUT, json.dumps(result, indent=2))
    for grid, rows in result["grids"].items():
        print(grid, {k: v["mean_iou"] for k, v in rows.items()})


if __name__ == "__main__":
    main()
