"""Lesion calipers two ways, on the demo model card's held-out sets: read off the mask the model segments for the
lesion (`calipers.axis_line`, the Predictor's default) and the line the model draws token by token.

Why: the drawn line missed a lesion's length by a quarter on average while the same model's lesion masks reach
0.71 IoU; the truth's calipers are drawn from the truth mask by the rule `calipers.lesion_axes` owns, so the model's
mask, measured the same way, is a second reading of the same length. Both readings come from one model, on
the same 200 default-look and 200 `scanner_b` images (a look it never trained on) and 100 examinations, in one run.

    .venv/bin/python benchmarks/calipers_from_mask.py --work /tmp/calipers \\
        --out benchmarks/results/calipers_from_mask.json
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

LOOKS = {"default": ("1000000", []), "scanner_b": ("3000000", ["--appearance", "scanner_b"])}
EXAMS = ("9500000", ["--exams"])  # the exam continuation's 100 held-out examinations


def _synth(work: Path, look: str, n: int) -> Path:
    seed0, extra = EXAMS if look == "exams" else LOOKS[look]
    out = work / f"test_{look}"
    if not (out / "manifest.jsonl").is_file():
        subprocess.run([sys.executable, "-m", "umind_core.cli", "synth", "--out", str(out), "-n", str(n),
                        "--seed0", seed0, "--size", "256", *extra], check=True)
    return out / "manifest.jsonl"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", required=True, help="folder for the held-out sets")
    ap.add_argument("--out", required=True, help="result JSON")
    ap.add_argument("--model", default=None, help="a UMind folder (default: the bundled demo model)")
    ap.add_argument("-n", type=int, default=200, help="images per look")
    ap.add_argument("--exams", type=int, default=100, help="examinations: each view alone, and read whole")
    args = ap.parse_args(argv)

    from umind_core import demo
    from umind_core.evaluation.runner import evaluate

    work = Path(args.work)
    model = demo.load_model(args.model)
    out: dict = {"command": " ".join(["benchmarks/calipers_from_mask.py", *(argv or sys.argv[1:])]),
                 "model": args.model or "bundled demo model", "images_per_look": args.n, "looks": {}}
    for look in LOOKS:
        manifest = _synth(work, look, args.n)
        out["looks"][look] = {}
        for source in ("mask", "model"):
            t0 = time.perf_counter()
            report = evaluate(model, manifest, tasks=["measure"], progress=False, calipers=source)
            m = report.metrics["measurement"]
            out["looks"][look][source] = {"all_lines": {k: m[k] for k in ("mean_rel", "median_rel", "n", "n_missing")},
                                         "by_kind": m["by_kind"], "seconds": round(time.perf_counter() - t0, 1)}
            lesion = m["by_kind"]["lesion calipers"]
            print(f"{look:9s} {source:5s}: lesion calipers {lesion['mean_rel']:.3f} mean, {lesion['median_rel']:.3f} "
                  f"median (n={lesion['n']}, missing {lesion['n_missing']}); all lines {m['mean_rel']:.3f}",
                  flush=True)
    if args.exams:
        out["exams"] = _exams(model, _synth(work, "exams", args.exams))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")
    return 0


def _exams(model, manifest: Path) -> dict:
    """Exam calipers both ways: every view asked alone, and the examination read whole ("in the view that shows
    it"). A caliper is missing where the answer drew none (a mask reading inherits the segment answer's refusals:
    the model may take a view for another site)."""
    from umind_core.evaluation.runner import evaluate

    out = {}
    for source in ("mask", "model"):
        report = evaluate(model, manifest, tasks=["measure"], progress=False, calipers=source)
        objects = report.metrics["exam"]["objects"]
        out[source] = {reading: {k: objects[reading]["measurement"][k] for k in ("mean_rel", "median_rel", "n",
                                                                               "n_missing")}
                       for reading in ("view_alone", "exam")}
        for reading, m in out[source].items():
            print(f"exams     {source:5s}: {reading} {m['mean_rel']:.3f} mean (n={m['n']}, missing {m['n_missing']})",
                  flush=True)
    return out


if __name__ == "__main__":
    raise SystemExit(main())
