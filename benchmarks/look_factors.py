"""Which of `scanner_b`'s departures from the default look costs the model its masks? One group at a time.

The annotation loop's goal is to win back, from a few corrections, what the model loses on the held-out scanner
look. What it can win back depends on what is lost: a probe footprint (geometry), a speckle grain (texture), a
grey curve (gain, dynamic range, TGC) or echogenicity and noise. This renders the same scenes (seeds 3,000,000+,
the gate's regression suite's seeds) through the default look, through `scanner_b`, and through the default look
with one group of `scanner_b`'s factors set, then scores segmentation and detection of the bundled model (or
`--model`) on each, with the change from the default look as a paired 95% bootstrap interval (images resampled;
only where the two sets' samples line up, which a changed footprint breaks).

`python benchmarks/look_factors.py --work DIR` writes benchmarks/results/look_factors.json.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

from bench_annotation_loop import (  # a sibling script: benchmarks/ is sys.path[0]
    change_interval,
    paired_samples,
)

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "look_factors.json"
SEED0 = 3_000_000

#: group -> the Appearance fields taken from scanner_b (None: all of them)
GROUPS: dict[str, tuple[str, ...] | None] = {
    "default": (),
    "scanner_b": None,
    "geometry": ("apex_radius", "fan_deg", "linear_margin"),
    "speckle": ("psf_axial", "psf_lateral", "density"),
    "grey_curve": ("dynamic_range_db", "gain_db", "tgc_error_db"),
    "echogenicity": ("lesion_amp",),
    "noise": ("noise_db",),
}


def appearance(group: str) -> str:
    """The registered appearance name of a group (the manifest records appearances by name)."""
    from umind_core.data.synthetic import APPEARANCES, Appearance

    fields = GROUPS[group]
    if fields is None or not fields:
        return "scanner_b" if fields is None else "default"
    name = f"scanner_b_{group}_only"
    b = APPEARANCES["scanner_b"]
    APPEARANCES[name] = Appearance(name=name, **{f: getattr(b, f) for f in fields})
    return name


def score(model, manifest: Path) -> dict:
    from umind_core.evaluation.runner import evaluate

    report = evaluate(model, manifest, tasks=("segment", "detect"), progress=False)
    m = report.metrics
    return {"segmentation_miou": m["summary"]["segmentation_miou"],
            "segmentation_per_site": m["segmentation"]["per_site"],
            "detection_f1": m["summary"]["detection_f1"], "detection_recall": m["summary"]["detection_recall"],
            "samples": paired_samples(report.samples)}


def main(argv=None) -> int:
    from umind_core import demo
    from umind_core.atomic import write_text
    from umind_core.data.manifest import write_synthetic_dataset
    from umind_core.data.synthetic import APPEARANCES
    from umind_core.modeling.umind import UMindVL

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", required=True, type=Path)
    ap.add_argument("-n", type=int, default=100, help="images per look")
    ap.add_argument("--model", type=Path, default=None, help="a UMind folder (default: the bundled demo model)")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    model = demo.load_model(None) if args.model is None else UMindVL.from_pretrained(args.model)
    model.eval()
    results: dict = {"setup": {"n": args.n, "seed0": SEED0, "model": str(args.model or "bundled demo model"),
                               "groups": dict(GROUPS), "scanner_b": dataclasses.asdict(APPEARANCES["scanner_b"])},
                     "looks": {}}
    for group in GROUPS:
        t = time.perf_counter()
        folder = args.work / group
        if not (folder / "manifest.jsonl").is_file():
            write_synthetic_dataset(folder, args.n, seed0=SEED0, size=256, appearance=appearance(group),
                                    progress=False)
        row = score(model, folder / "manifest.jsonl")
        base = results["looks"].get("default")
        if base is not None:
            for task, key in (("segment", "segmentation_change"), ("detect", "recall_change")):
                ci = change_interval(base, row, task)
                row[key] = None if ci is None else [round(v, 4) for v in ci]
        results["looks"][group] = row
        print(f"{group:<10} mIoU {row['segmentation_miou']:.3f} (breast {row['segmentation_per_site']['breast']:.3f}) "
              f"detection F1 {row['detection_f1']:.3f}  change {row.get('segmentation_change')}  "
              f"[{time.perf_counter() - t:.0f} s]", flush=True)
    write_text(args.out, json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
