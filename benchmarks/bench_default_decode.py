"""The server's default decode before and after issue 36, in one run: `static` (the old default) against `auto`.

What a user of the default configuration meets, on the bundled demo model at its own input size (256 px):
- the first request after start (a fresh Predictor each, cold image: `set_image` + `predict`), which `auto` must not
  slow down: it decodes its first steps with the static step while the tuned graph builds in the background;
- segment latency p50 once warm (`auto` after its background builds finished), alternating the two modes;
- a second prompt on a cached image against a cold one (image encoded per call), per mode.

    .venv/bin/python benchmarks/bench_default_decode.py [--images 8] [--out benchmarks/results/default_decode.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

MODES = ("static", "auto")


def _images(n: int) -> list[np.ndarray]:
    """Held-out synthetic scans (seeds 1,000,200+: no demo model trained on them)."""
    from umind_core.data.synthetic import generate

    return [np.repeat(generate(seed=1_000_200 + i, site=("breast", "thyroid")[i % 2], size=256).image[..., None], 3,
                      axis=2) for i in range(n)]


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def _first_request(mode: str, image: np.ndarray):
    """A fresh Predictor's first segment (what the first request after a start costs), and the Predictor."""
    from umind_core import demo
    from umind_core.predictor import Predictor

    predictor = Predictor(demo.load_model(None), decode=mode)

    def first():
        predictor.set_image(image)
        predictor.predict("segment", "lesion")

    return _timed(first), predictor


def _wait_built(predictor, timeout: float) -> float:
    """Seconds until every step graph `auto` queued is tuned (or failed), polling its status."""
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < timeout:
        steps = predictor.decode_status()["steps"]
        if steps and all(s["state"] == "tuned" or s["state"].startswith("failed") for s in steps):
            break
        time.sleep(1.0)
    return time.perf_counter() - t0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--images", type=int, default=8)
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "default_decode.json")
    args = ap.parse_args(argv)
    images = _images(args.images)
    out: dict = {"first_request_s": {}, "segment_s": {m: [] for m in MODES}, "cold_s": {m: [] for m in MODES},
                 "cached_s": {m: [] for m in MODES}}
    preds = {}
    for mode in MODES:
        out["first_request_s"][mode], preds[mode] = _first_request(mode, images[0])
    out["auto_build_wait_s"] = _wait_built(preds["auto"], 600)
    for i, img in enumerate([images[0]] + images):  # a warm-up round for the new shapes, not kept
        for mode in (MODES if i % 2 else MODES[::-1]):
            p = preds[mode]
            seg = _timed(lambda: (p.set_image(img), p.predict("segment", "lesion")))
            cached = _timed(lambda: p.predict("detect", "lesion"))
            cold = _timed(lambda: (p.set_image(img), p.predict("detect", "lesion")))
            if i:
                out["segment_s"][mode].append(seg)
                out["cached_s"][mode].append(cached)
                out["cold_s"][mode].append(cold)
    _wait_built(preds["auto"], 600)  # the rounds may have met new capacities
    out["auto_steps"] = preds["auto"].decode_status()["steps"]
    med = {k: {m: statistics.median(out[k][m]) for m in MODES} for k in ("segment_s", "cold_s", "cached_s")}
    out["summary"] = {
        "first_request_auto_over_static": out["first_request_s"]["auto"] / out["first_request_s"]["static"],
        "segment_p50_ms": {m: 1000 * med["segment_s"][m] for m in MODES},
        "segment_static_over_auto": med["segment_s"]["static"] / med["segment_s"]["auto"],
        "cold_over_cached": {m: med["cold_s"][m] / med["cached_s"][m] for m in MODES},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=2))
    print(json.dumps(out["summary"], indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
