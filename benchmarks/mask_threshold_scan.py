"""How much of a new look's segmentation loss is the mask threshold: IoU per label at logit thresholds from -3 to
+2, on the demo model card's held-out default-look and `scanner_b` images, and what per-label thresholds fitted on
half of the `scanner_b` images buy on the other half and cost on the default look.

Why: the loop learns little from 20 corrections. If the model's masks on a new look were only
under- or over-confident, a handful of labels could fit a threshold per label, a far smaller thing to learn than
a LoRA; this measures the most that could give before anyone builds it.

    .venv/bin/python benchmarks/mask_threshold_scan.py --work /tmp/readout \\
        --out benchmarks/results/mask_threshold_scan.json
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from readout_from_masks import HELD_OUT as LOOKS
from readout_from_masks import held_out_set

THRESHOLDS = (-3.0, -2.0, -1.5, -1.0, -0.5, 0.0, 0.5, 1.0, 2.0)


def scan(predictor, manifest: Path) -> list[dict]:
    """One row per (image, label with a truth mask): the IoU of the label's predicted mask at every threshold."""
    from umind_core.data.manifest import read_manifest
    from umind_core.evaluation.metrics import mask_iou
    from umind_core.evaluation.runner import record_frame

    rows = []
    for rec in read_manifest(manifest):
        predictor.set_image(record_frame(rec))
        truth: dict[str, np.ndarray] = {}
        for obj, mask in zip(rec.annotations.objects, rec.load_masks()):
            if mask is not None:
                truth[obj.label] = mask if obj.label not in truth else truth[obj.label] | mask
        for label, gt in truth.items():
            ious = []
            for t in THRESHOLDS:
                predictor.mask_threshold = t
                pred = np.zeros_like(gt, bool)
                for o in predictor.predict("segment", label).objects:
                    if o.mask is not None:
                        pred |= o.mask
                ious.append(mask_iou(pred, gt))
            rows.append({"id": rec.id, "label": label, "iou": ious})
    predictor.mask_threshold = 0.0
    return rows


def _mean_at(rows: list[dict], pick: dict[str, int] | int) -> float:
    return float(np.mean([r["iou"][pick if isinstance(pick, int) else pick.get(r["label"], ZERO)] for r in rows]))


ZERO = THRESHOLDS.index(0.0)


def fit(rows: list[dict]) -> dict[str, int]:
    """Per label, the threshold index with the highest mean IoU on `rows`."""
    by = defaultdict(list)
    for r in rows:
        by[r["label"]].append(r["iou"])
    return {label: int(np.argmax(np.mean(v, 0))) for label, v in by.items()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("-n", type=int, default=200)
    ap.add_argument("--model", default=None, help="UMind folder (default: the bundled demo model)")
    args = ap.parse_args(argv)

    from umind_core import demo
    from umind_core.inference.predictor import Predictor

    predictor = Predictor(demo.load_model(args.model))
    rows = {look: scan(predictor, held_out_set(Path(args.work), look, args.n)) for look in LOOKS}
    out: dict = {"command": " ".join(["benchmarks/mask_threshold_scan.py", *(argv or sys.argv[1:])]),
                 "thresholds": THRESHOLDS, "looks": {}}
    for look, rs in rows.items():
        labels = sorted({r["label"] for r in rs})
        out["looks"][look] = {"n_masks": len(rs), "mean_iou": [_mean_at(rs, k) for k in range(len(THRESHOLDS))],
                              "by_label": {lb: {"n": sum(r["label"] == lb for r in rs),
                                                "mean_iou": [_mean_at([r for r in rs if r["label"] == lb], k)
                                                             for k in range(len(THRESHOLDS))]} for lb in labels}}
    b, default = rows["scanner_b"], rows["default"]
    ids = sorted({r["id"] for r in b})
    halves = [set(ids[: len(ids) // 2]), set(ids[len(ids) // 2:])]
    out["fitted_on_half_of_scanner_b"] = []
    for k in (0, 1):
        fit_rows = [r for r in b if r["id"] in halves[k]]
        test_rows = [r for r in b if r["id"] in halves[1 - k]]
        picked = fit(fit_rows)
        entry = {"fitted_on": f"half {k + 1} ({len(fit_rows)} masks)",
                 "thresholds": {lb: THRESHOLDS[i] for lb, i in sorted(picked.items())},
                 "scanner_b_other_half": [_mean_at(test_rows, ZERO), _mean_at(test_rows, picked)],
                 "default_look": [_mean_at(default, ZERO), _mean_at(default, picked)]}
        out["fitted_on_half_of_scanner_b"].append(entry)
        print(f"fitted on half {k + 1}: {entry['thresholds']}; scanner_b other half "
              f"{entry['scanner_b_other_half'][0]:.3f} -> {entry['scanner_b_other_half'][1]:.3f}; default look "
              f"{entry['default_look'][0]:.3f} -> {entry['default_look'][1]:.3f}", flush=True)
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
