"""Drafted answers against step-by-step answers, in one run: the same prompts on the same images through two
static-decode Predictors of the demo model, one feeding drafts (the default) and one not; every answer's text and
every mask compared, and the time each spent answering (images encoded beforehand, not timed).

40 held-out images (seeds 1,000,400+, the four sites in turn), 8 prompts each, asked twice (the second pass is where
an answer's earlier ones are drafted).

    .venv/bin/python benchmarks/bench_drafts.py [--images 40] [--out benchmarks/results/decode/drafts.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

CALLS = [("segment", "lesion"), ("segment", "thyroid"), ("segment", "kidney"), ("detect", "lesion"),
         ("keypoints", None), ("measure", "lesion"), ("diagnose", None), ("report", None)]


def _masks(result) -> list[np.ndarray]:
    return [o.mask for o in result.objects if o.mask is not None]


def _difference(ma: list, mb: list, task: str, prompt) -> dict:
    """How far two answers' masks differ: pixels that differ and the IoU of each pair (a count of differing masks
    alone cannot tell a flipped pixel on a threshold from another object)."""
    from umind_core.evaluation.metrics import mask_iou  # the one mask IoU
    pairs = list(zip(ma, mb))
    return {"task": task, "prompt": prompt, "masks": [len(ma), len(mb)],
            "pixels": [int(np.count_nonzero(x != y)) for x, y in pairs],
            "iou": [round(float(mask_iou(x, y)), 5) for x, y in pairs]}


def compare(n_images: int, model_dir: str | None = None) -> dict:
    from umind_core import demo
    from umind_core.data.synthetic import SITES, generate
    from umind_core.inference.predictor import Predictor

    model = demo.load_model(model_dir)
    # the decoder's own answers (boxes and lines as written): drafts must reproduce every kind of token
    drafted, stepped = (Predictor(model, decode="static", readout="tokens") for _ in range(2))
    stepped._engine.drafts = None  # the step-by-step decode this benchmark compares against
    images = [generate(seed=1_000_400 + i, site=SITES[i % len(SITES)], size=256).image for i in range(n_images)]
    out = {"model": model_dir or "bundled demo model", "answers": 0, "text_differences": 0, "mask_differences": 0, "draft_tokens": 0, "draft_tokens_kept": 0,
           "seconds_drafts_on": 0.0, "seconds_drafts_off": 0.0, "differing_masks": []}
    for _ in range(2):
        for image in images:
            drafted.set_image(image)
            stepped.set_image(image)
            for task, prompt in CALLS:
                t0 = time.perf_counter()
                a = drafted.predict(task, prompt)
                t1 = time.perf_counter()
                b = stepped.predict(task, prompt)
                out["seconds_drafts_on"] += t1 - t0
                out["seconds_drafts_off"] += time.perf_counter() - t1
                out["answers"] += 1
                out["draft_tokens"] += drafted.last_stats["draft_tokens"]
                out["draft_tokens_kept"] += drafted.last_stats["draft_tokens_kept"]
                out["text_differences"] += a.text != b.text
                ma, mb = _masks(a), _masks(b)
                if len(ma) != len(mb) or any(not np.array_equal(x, y) for x, y in zip(ma, mb)):
                    out["mask_differences"] += 1
                    out["differing_masks"].append(_difference(ma, mb, task, prompt))
    out["off_over_on"] = out["seconds_drafts_off"] / out["seconds_drafts_on"]
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--images", type=int, default=40)
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "decode" / "drafts.json")
    ap.add_argument("--model", default=None, help="UMind folder (default: the bundled demo model)")
    args = ap.parse_args(argv)
    out = compare(args.images, args.model)
    from umind_core.atomic import write_text

    write_text(args.out, json.dumps(out, indent=2) + "\n")
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
