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

from umind_core.evaluation.metrics import mask_iou  # the one mask IoU (both empty: 1.0)

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "mask_resolution_ceiling.json"
#: merged token grid -> decoder logit grid (two 2x transposed convolutions)
GRIDS = {"8x8 (256 px)": 32, "16x16 (512 px)": 64}


def through_grid(mask: np.ndarray, logits: int) -> np.ndarray:
    """The mask after the decoder's bottleneck: area-averaged to logits x logits, bilinear back, > 0.5."""
    t = torch.from_numpy(mask.astype(np.float32))[None, None]
    small = F.adaptive_avg_pool2d(t, (logits, logits))
    back = F.interpolate(small, size=mask.shape, mode="bilinear", align_corners=False)
    return back[0, 0].numpy() > 0.5


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", required=True, type=Path)
    ap.add_argument("-n", type=int, default=200)
    args = ap.parse_args()
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
    OUT.write_text(json.dumps(result, indent=2))
    for grid, rows in result["grids"].items():
        print(grid, {k: v["mean_iou"] for k, v in rows.items()})


if __name__ == "__main__":
    main()
