"""Boxes, lesion calipers, organ landmarks and lengths two ways, on the demo model card's held-out sets: read off
the mask the model segments for the target (`readout="mask"`, the Predictor's default: `masks.drawn_objects`,
`calipers.mask_axes`, `landmarks.ellipse_axes`) and the coordinates the model writes (`readout="tokens"`).

Why: the boxes, lines and points demo model 3 writes as coordinates are looser than its masks, and the truth's boxes,
calipers and organ landmarks follow the truth masks by the rules `masks`, `calipers` and `landmarks` own, so the
model's mask, read the same way, is a second reading of the same object. Both readings come from one model, on the
same 200 default-look and 200 `scanner_b` images (a look it never trained on) and 100 examinations, in one run.
`drawn_objects`' share for stray pieces was chosen on separate tuning images (seeds 5,000,000+ and 5,500,000+); the
sweep is rerun here.

    .venv/bin/python benchmarks/readout_from_masks.py --work /tmp/readout \\
        --out benchmarks/results/readout_from_masks.json [--model DIR]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

HELD_OUT = {"default": ("1000000", []), "scanner_b": ("3000000", ["--appearance", "scanner_b"])}
TUNING = {"tune_default": ("5000000", []), "tune_scanner_b": ("5500000", ["--appearance", "scanner_b"])}
EXAMS = ("9500000", ["--exams"])  # the exam continuation's 100 held-out examinations
READOUTS = ("mask", "tokens")
SHARES = (0.0, 0.25, 0.5, 1.0)


def held_out_set(work: Path, name: str, n: int) -> Path:
    """The manifest of one named set (`umind synth` with that set's seeds), made once in `work`."""
    seed0, extra = EXAMS if name == "exams" else {**HELD_OUT, **TUNING}[name]
    out = work / f"test_{name}"
    if not (out / "manifest.jsonl").is_file():
        subprocess.run([sys.executable, "-m", "umind_core.cli", "synth", "--out", str(out), "-n", str(n),
                        "--seed0", seed0, "--size", "256", *extra], check=True)
    return out / "manifest.jsonl"


def _images(model, manifest: Path, readout: str) -> dict:
    from umind_core.evaluation.runner import evaluate

    report = evaluate(model, manifest, tasks=["detect", "measure", "keypoints"], progress=False, readout=readout)
    det, meas, kp = report.metrics["detection"], report.metrics["measurement"], report.metrics["keypoints"]
    return {"detection": {k: det[k] for k in ("f1", "precision", "recall")},
            "lesion_detection_f1": _lesion_f1(report.samples),
            "measurement": {k: meas[k] for k in ("mean_rel", "median_rel", "n", "n_missing")},
            "lesion_calipers": meas["by_kind"]["lesion calipers"],
            "organ_lines": {k: meas["by_kind"][k] for k in ("kidney length", "BPD")},
            "keypoints": {k: kp[k] for k in ("mean_rel_width", "mean_px", "n", "n_missing")},
            "lesion_caliper_placement": _placement(report.samples)}


def _placement(samples: list[dict]) -> dict:
    """Where the lesion calipers lie, not only how long they are: the mean distance of their endpoints from the
    truth's (pixels, the closer pairing) and the angle between the two lines (degrees, 0-90)."""
    import math

    import numpy as np

    ends, angles = [], []
    for s in samples:
        if s["task"] != "measure" or not s["label"].endswith(("long axis", "short axis")) or s["pred_line"] is None:
            continue
        g, p = np.reshape(s["gt_line"], (2, 2)), np.reshape(s["pred_line"], (2, 2))
        ends.append(min(np.linalg.norm(g - p, axis=1).mean(), np.linalg.norm(g - p[::-1], axis=1).mean()))
        turn = abs(math.degrees(math.atan2(*(g[1] - g[0])[::-1]) - math.atan2(*(p[1] - p[0])[::-1]))) % 180
        angles.append(min(turn, 180 - turn))
    return {"n": len(ends), "endpoint_px_mean": float(np.mean(ends)), "endpoint_px_median": float(np.median(ends)),
            "angle_deg_mean": float(np.mean(angles)), "angle_deg_median": float(np.median(angles))}


def _lesion_f1(samples: list[dict]) -> float | None:
    """Detection F1 over the lesion kinds' boxes alone (breast lesions, thyroid nodules, cysts)."""
    from umind_core.masks import is_lesion_kind

    tp = fp = fn = 0
    for s in samples:
        if s["task"] == "detect" and is_lesion_kind(s["label"]):
            tp, fp, fn = tp + s["tp"], fp + s["fp"], fn + s["fn"]
    return None if tp + fp + fn == 0 else 2 * tp / (2 * tp + fp + fn)


def _exams(model, manifest: Path, readout: str) -> dict:
    """Every view asked alone, and the examination read whole. A caliper is missing where the answer drew none (a
    mask reading inherits the segment answer's refusals: the model may take a view for another site)."""
    from umind_core.evaluation.runner import evaluate

    objects = evaluate(model, manifest, tasks=["detect", "measure", "keypoints"], progress=False,
                       readout=readout).metrics["exam"]["objects"]
    out = {}
    for reading in ("view_alone", "exam"):
        o = objects[reading]
        out[reading] = {"detection_f1": o["detection"]["f1"],
                        "measurement": {k: o["measurement"][k] for k in ("mean_rel", "n", "n_missing")},
                        "keypoints": {k: o["keypoints"][k] for k in ("mean_rel_width", "n", "n_missing")}}
    return out


def _tuning(model, work: Path, n: int) -> dict:
    """Detection F1 on the tuning images at each share `drawn_objects` may keep stray pieces at."""
    from umind_core import masks
    from umind_core.evaluation.runner import evaluate

    out, kept = {}, masks.LEAST_SHARE
    try:
        for share in SHARES:
            masks.LEAST_SHARE = share
            out[str(share)] = {name: evaluate(model, held_out_set(work, name, n), tasks=["detect"], progress=False
                                              ).metrics["detection"]["f1"] for name in TUNING}
            print(f"tuning  share {share}: detection F1 {out[str(share)]}", flush=True)
    finally:
        masks.LEAST_SHARE = kept
    return out


#: what the latency benchmark asks, and on which site's images
LATENCY_ASKS = (("detect", "breast lesion", "breast"), ("measure", "breast lesion long axis", "breast"),
                ("keypoints", "kidney", "kidney"))


def _latency(model, manifest: Path, images: int = 8, rounds: int = 3) -> dict:
    """p50 of one answer on a cached image, each readout, alternating in one process: detect "breast lesion" and
    measure "breast lesion long axis" on breast images, the kidney's landmarks on kidney images (the mask readout
    decodes a segment answer instead)."""
    import time

    from umind_core.data.manifest import read_manifest
    from umind_core.evaluation.runner import record_frame
    from umind_core.inference.predictor import Predictor

    records = read_manifest(manifest)
    frames = {site: [record_frame(r) for r in records if r.site == site][:images] for _, _, site in LATENCY_ASKS}
    preds = {r: Predictor(model, readout=r) for r in READOUTS}
    times: dict[str, list[float]] = {f"{task} {r}": [] for task, _, _ in LATENCY_ASKS for r in READOUTS}
    for k in range(rounds + 1):  # round 0 warms up
        for i in range(images):
            for r in (READOUTS if k % 2 else READOUTS[::-1]):
                for site in dict.fromkeys(site for _, _, site in LATENCY_ASKS):
                    preds[r].set_image(frames[site][i])
                    for task, prompt, _ in (a for a in LATENCY_ASKS if a[2] == site):
                        t0 = time.perf_counter()
                        preds[r].predict(task, prompt)
                        if k:
                            times[f"{task} {r}"].append(time.perf_counter() - t0)
    p50 = {k: 1000 * sorted(v)[len(v) // 2] for k, v in times.items()}
    return {"p50_ms": p50, "images": images, "rounds": rounds,
            "ratios": {task: p50[f"{task} mask"] / p50[f"{task} tokens"] for task, _, _ in LATENCY_ASKS}}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", required=True, help="folder for the held-out sets")
    ap.add_argument("--out", required=True, help="result JSON")
    ap.add_argument("-n", type=int, default=200, help="images per look")
    ap.add_argument("--exams", type=int, default=100, help="examinations: each view alone, and read whole")
    ap.add_argument("--model", default=None, help="UMind folder (default: the bundled demo model)")
    args = ap.parse_args(argv)

    from umind_core import demo

    work = Path(args.work)
    model = demo.load_model(args.model)
    out: dict = {"command": " ".join(["benchmarks/readout_from_masks.py", *(argv or sys.argv[1:])]),
                 "model": args.model or "bundled demo model",
                 "images_per_look": args.n, "tuning": _tuning(model, work, args.n), "looks": {}, "exams": {}}
    for look in HELD_OUT:
        manifest = held_out_set(work, look, args.n)
        out["looks"][look] = {r: _images(model, manifest, r) for r in READOUTS}
        for r, d in out["looks"][look].items():
            print(f"{look:9s} {r:6s}: detection F1 {d['detection']['f1']:.3f} (lesions {d['lesion_detection_f1']:.3f})"
                  f", lesion calipers {d['lesion_calipers']['mean_rel']:.3f} (missing "
                  f"{d['lesion_calipers']['n_missing']}), all lines {d['measurement']['mean_rel']:.3f}, keypoints "
                  f"{d['keypoints']['mean_rel_width']:.4f} of the width; caliper placement "
                  f"{json.dumps(d['lesion_caliper_placement'])}", flush=True)
    out["latency"] = _latency(model, held_out_set(work, "default", args.n))
    print(f"latency: {json.dumps(out['latency'])}", flush=True)
    if args.exams:
        manifest = held_out_set(work, "exams", args.exams)
        out["exams"] = {r: _exams(model, manifest, r) for r in READOUTS}
        print(f"exams: {json.dumps(out['exams'])}", flush=True)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
