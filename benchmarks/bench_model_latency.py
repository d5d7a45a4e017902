"""Latency of two UMind models side by side, in one run: segment, detect and report, in process and over HTTP.

Why one run: a model's cost on a shared 2-core machine moves with whatever else runs, so two models timed in
separate runs are not comparable; here every round times model A and model B on the same held-out image and
task back to back, alternating which goes first, and the ratio B/A of the medians is reported with the medians.

In process: a Predictor per model (`set_image` + `predict`, the image encoded per call as a new request would be).
Over HTTP: one real server per model (`monailabel start_server` of the app), POST /infer/umind_segment,
umind_detect and umind_interpret (task report) on the same stored PNG.

    .venv/bin/python benchmarks/bench_model_latency.py --a DIR_A --b DIR_B [--images 12] \
        [--out benchmarks/results/demo_model3/latency.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from umind_core.testing.server import start_server

#: task -> (Predictor task, prompt, server model, server params)
TASKS = {
    "segment": ("segment", "lesion", "umind_segment", {"prompt": "lesion"}),
    "detect": ("detect", "lesion", "umind_detect", {"prompt": "lesion"}),
    "report": ("report", None, "umind_interpret", {"task": "report"}),
}


def _images(n: int, size: int) -> list[np.ndarray]:
    """Held-out synthetic scans (seeds 1,000,200+: no demo model trained on them), breast and thyroid."""
    from umind_core.data.synthetic import generate

    return [generate(seed=1_000_200 + i, site=("breast", "thyroid")[i % 2], size=size).image for i in range(n)]


def _in_process(models: dict[str, str], images: list[np.ndarray], max_new_tokens: int) -> dict:
    from umind_core import demo
    from umind_core.inference.predictor import Predictor

    preds = {k: Predictor(demo.load_model(path), max_new_tokens=max_new_tokens) for k, path in models.items()}
    times: dict[str, dict[str, list[float]]] = {k: {t: [] for t in TASKS} for k in models}
    order = list(models)
    for i, img in enumerate([images[0]] + images):  # the first round warms up and is not kept
        rgb = np.repeat(img[..., None], 3, axis=2)
        for task, (ptask, prompt, _m, _p) in TASKS.items():
            for k in (order if i % 2 else order[::-1]):
                t0 = time.perf_counter()
                preds[k].set_image(rgb)
                preds[k].predict(ptask, prompt)
                if i:
                    times[k][task].append(time.perf_counter() - t0)
    return times


def _over_http(models: dict[str, str], images: list[np.ndarray], max_new_tokens: int) -> dict:
    import requests
    from PIL import Image

    root = Path(tempfile.mkdtemp(prefix="umind_latency_"))
    servers = {}
    try:
        for k, path in models.items():
            studies = root / k
            studies.mkdir()
            for i, img in enumerate(images):
                Image.fromarray(img).save(studies / f"img{i}.png")
            servers[k] = start_server(studies, {"model": str(Path(path).resolve()), "retrain_every": "0",
                                                "max_new_tokens": str(max_new_tokens)}, root / f"{k}.log",
                                      env={"MONAI_LABEL_AUTO_UPDATE_SCORING": "false"}, timeout=300)
        times: dict[str, dict[str, list[float]]] = {k: {t: [] for t in TASKS} for k in models}
        order = list(models)
        for i in [0] + list(range(len(images))):
            for task, (_t, _pr, model, params) in TASKS.items():
                for k in (order if i % 2 else order[::-1]):
                    t0 = time.perf_counter()
                    r = requests.post(f"{servers[k].url}/infer/{model}?image=img{i}&output=json",
                                      data={"params": json.dumps(params)}, timeout=600)
                    r.raise_for_status()
                    times[k][task].append(time.perf_counter() - t0)
        for k in times:  # the first pass warmed each server up
            for t in times[k]:
                times[k][t] = times[k][t][1:]
        return times
    finally:
        for srv in servers.values():
            srv.stop()


def _table(name: str, times: dict) -> list[dict]:
    a, b = list(times)
    rows = []
    for task in TASKS:
        pa, pb = statistics.median(times[a][task]), statistics.median(times[b][task])
        rows.append({"where": name, "task": task, f"{a}_p50_ms": round(pa * 1000, 1),
                     f"{b}_p50_ms": round(pb * 1000, 1), "ratio_b_over_a": round(pb / pa, 3),
                     "n": len(times[a][task])})
        print(f"{name:11s} {task:8s} {a} p50 {pa * 1000:8.1f} ms   {b} p50 {pb * 1000:8.1f} ms   "
              f"{b}/{a} {pb / pa:5.2f}x  (n={len(times[a][task])})")
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--a", required=True, help="model A folder (the baseline)")
    ap.add_argument("--b", required=True, help="model B folder")
    ap.add_argument("--names", default="a,b", help="names of A and B in the output")
    ap.add_argument("--images", type=int, default=12)
    ap.add_argument("--size", type=int, default=256)
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--no-http", action="store_true")
    ap.add_argument("--out", default=None, help="write the table as JSON here")
    args = ap.parse_args(argv)
    name_a, name_b = args.names.split(",")
    models = {name_a: args.a, name_b: args.b}
    images = _images(args.images, args.size)
    rows = _table("in process", _in_process(models, images, args.max_new_tokens))
    if not args.no_http:
        rows += _table("over HTTP", _over_http(models, images, args.max_new_tokens))
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        given = sys.argv[1:] if argv is None else argv
        Path(args.out).write_text(json.dumps({"command": "benchmarks/bench_model_latency.py " + " ".join(given),
                                              "models": models, "rows": rows}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
