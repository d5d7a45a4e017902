"""The server's default decode against the old default, in one run: `auto` and `static` of this tree, and `static`
of the code before the default decode's speed work (`--before`, a checkout of it), each in its own process.

What a user of the default configuration meets, on the bundled demo model at its own input size (256 px):
- the first request after start (a fresh Predictor, cold image: `set_image` + `predict`), which `auto` must not
  slow down: it decodes with the static step while its tuned graphs build in the background;
- segment latency p50 once warm (`auto` after its background builds finished);
- a second prompt on a cached image against a cold one (image encoded per call), for detect and for segment.

Each configuration runs in a fresh process (its own first request, its own compiled graphs), in the order
before, static, auto, then again in reverse, so that a drift of the machine's speed during the run shows in both
halves; the figures pool both. The first request, one sample per process, is then timed in `--first-runs` more
fresh processes per configuration (the median of all is reported).

    git worktree add /tmp/umind-before <commit before the change>
    .venv/bin/python benchmarks/bench_default_decode.py --before /tmp/umind-before [--images 8] \
        [--out benchmarks/results/default_decode.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent


def _images(n: int) -> list[np.ndarray]:
    """Held-out synthetic scans (seeds 1,000,200+: no demo model trained on them)."""
    from umind_core.data.synthetic import generate

    return [np.repeat(generate(seed=1_000_200 + i, site=("breast", "thyroid")[i % 2], size=256).image[..., None], 3,
                      axis=2) for i in range(n)]


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def _wait_built(predictor, timeout: float) -> float:
    """Seconds until every step graph `auto` queued is tuned (or failed), polling its status."""
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < timeout:
        steps = predictor.decode_status()["steps"]
        if all(s["state"] == "tuned" or s["state"].startswith("failed") for s in steps):
            break
        time.sleep(1.0)
    return time.perf_counter() - t0


def worker(mode: str, n_images: int, first_only: bool = False) -> dict:
    """One configuration's figures, measured in this process (whose `umind_core` is the tree under test); with
    `first_only`, the first request alone."""
    import inspect

    from umind_core import demo
    from umind_core.inference.predictor import Predictor

    images = _images(n_images)
    # the decoder's own answers (boxes as written), as in trees before the mask readout existed
    tokens = {"readout": "tokens"} if "readout" in inspect.signature(Predictor).parameters else {}
    predictor = Predictor(demo.load_model(None), decode=mode, **tokens)

    def ask(task, image=None):
        if image is not None:
            predictor.set_image(image)
        predictor.predict(task, "lesion")

    out = {"first_request_s": _timed(lambda: ask("segment", images[0])), "segment_s": [],
           "cold_s": [], "cached_s": [], "cold_segment_s": [], "cached_segment_s": []}
    if first_only:
        return out
    out["build_wait_s"] = _wait_built(predictor, 900)
    for rnd in range(3):  # a warm-up round (new shapes, graphs queued by it built), then two kept
        if rnd == 1:
            _wait_built(predictor, 900)
        for img in images:
            samples = {"segment_s": _timed(lambda: ask("segment", img)),
                       "cached_s": _timed(lambda: ask("detect")),
                       "cold_s": _timed(lambda: ask("detect", img)),
                       "cached_segment_s": _timed(lambda: ask("segment")),
                       "cold_segment_s": _timed(lambda: ask("segment", img))}
            if rnd:
                for key, value in samples.items():
                    out[key].append(value)
    out["steps"] = predictor.decode_status()["steps"]
    return out


def _run_worker(tree: Path, mode: str, n_images: int, first_only: bool = False) -> dict:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    env.pop("UMIND_DECODE", None)
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", mode, "--images", str(n_images)]
    proc = subprocess.run(cmd + (["--first-only"] if first_only else []), cwd=tree, env=env, capture_output=True,
                          text=True, timeout=3600, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"the {mode} worker in {tree} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _summary(out: dict) -> dict:
    med = {k: {c: statistics.median(v) for c, v in out[k].items()}
           for k in ("segment_s", "cold_s", "cached_s", "cold_segment_s", "cached_segment_s")}
    configs = list(out["segment_s"])
    summary = {
        "first_request_ms": {c: 1000 * statistics.median(out["first_request_s"][c]) for c in configs},
        "segment_p50_ms": {c: 1000 * med["segment_s"][c] for c in configs},
        "cold_over_cached_detect": {c: med["cold_s"][c] / med["cached_s"][c] for c in configs},
        "cold_over_cached_segment": {c: med["cold_segment_s"][c] / med["cached_segment_s"][c] for c in configs},
    }
    base = "before_static" if "before_static" in configs else "static"
    summary["segment_lower_than_" + base] = {c: med["segment_s"][base] / med["segment_s"][c] for c in configs}
    summary["first_request_over_" + base] = {c: summary["first_request_ms"][c] / summary["first_request_ms"][base]
                                             for c in configs}
    return summary


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--images", type=int, default=8)
    ap.add_argument("--before", type=Path, help="a checkout of the code before the change (its `static` is measured)")
    ap.add_argument("--first-runs", type=int, default=5,
                    help="more fresh processes per configuration that time the first request alone (it is noisy)")
    ap.add_argument("--worker", choices=("static", "auto"), help=argparse.SUPPRESS)
    ap.add_argument("--first-only", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "default_decode.json")
    args = ap.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(args.worker, args.images, args.first_only)))
        return 0
    configs = ([("before_static", args.before, "static")] if args.before else []) + [
        ("static", ROOT, "static"), ("auto", ROOT, "auto")]
    keys = ("first_request_s", "segment_s", "cold_s", "cached_s", "cold_segment_s", "cached_segment_s")
    out: dict = {k: {name: [] for name, _, _ in configs} for k in keys}
    out["auto_steps"], out["order"] = [], []
    for name, tree, mode in configs + configs[::-1]:
        print(f"measuring {name} ({tree})", file=sys.stderr, flush=True)
        got = _run_worker(tree, mode, args.images)
        out["order"].append(name)
        out["first_request_s"][name].append(got["first_request_s"])
        for k in keys[1:]:
            out[k][name].extend(got[k])
        if name == "auto":
            out["auto_steps"] = got["steps"]
    for _ in range(args.first_runs):
        for name, tree, mode in configs:
            out["first_request_s"][name].append(_run_worker(tree, mode, args.images, True)["first_request_s"])
    out["summary"] = _summary(out)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=2))
    print(json.dumps(out["summary"], indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
