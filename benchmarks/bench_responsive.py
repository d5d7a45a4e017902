"""Does the server stay responsive while it infers? /info latency under N concurrent infer clients.

Starts the real server with the shipped demo model (or --model DIR), warms the model up, then runs
`--clients` threads that each send POST /infer/umind_segment back to back, while one more thread polls
GET /info/ (and GET /datastore/, GET /train/) every `--interval` seconds for `--seconds`. Prints the latency
percentiles of the cheap endpoints and how many infers completed, so the figure is comparable between the
stock route (inference on the event loop: /info waits behind every infer) and the app's threaded route.

    .venv/bin/python benchmarks/bench_responsive.py [--clients 8] [--seconds 60] [--model DIR]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import requests

from umind_core.testing.server import start_server


def _write_study(path: Path, size: int) -> None:
    from PIL import Image

    from umind_core.data.synthetic import generate

    Image.fromarray(generate(seed=1_000_001, site="breast", size=size).image).save(path)


def _percentile(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else float("nan")


def _infer_loop(url: str, stop: threading.Event, done: list[float], errors: list[str]) -> None:
    while not stop.is_set():
        t0 = time.perf_counter()
        try:
            r = requests.post(f"{url}/infer/umind_segment?image=study&output=json",
                              data={"params": '{"prompt": "lesion"}'}, timeout=600)
            (done if r.status_code == 200 else errors).append(time.perf_counter() - t0 if r.status_code == 200
                                                              else f"{r.status_code} {r.text[:80]}")
        except requests.RequestException as exc:
            errors.append(str(exc)[:80])


def _poll(url: str, path: str, stop: threading.Event, interval: float, out: list[float]) -> None:
    while not stop.is_set():
        t0 = time.perf_counter()
        r = requests.get(url + path, timeout=120)
        if r.status_code >= 500 or (r.status_code >= 400 and path != "/train/"):  # /train/: 404 = no run yet
            raise RuntimeError(f"{path}: {r.status_code} {r.text[:80]}")
        out.append(time.perf_counter() - t0)
        time.sleep(interval)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=None, help="UMind folder (default: the shipped demo model)")
    ap.add_argument("--clients", type=int, default=8, help="concurrent infer clients")
    ap.add_argument("--seconds", type=float, default=60.0, help="how long the load runs")
    ap.add_argument("--interval", type=float, default=0.2, help="pause between two /info polls")
    ap.add_argument("--size", type=int, default=256)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        studies = root / "studies"
        studies.mkdir()
        _write_study(studies / "study.png", args.size)
        conf = {"max_new_tokens": str(args.max_new_tokens), "retrain_every": "0"}
        if args.model:
            conf["model"] = args.model
        server = start_server(studies, conf, root / "server.log", env={"MONAI_LABEL_AUTO_UPDATE_SCORING": "false"})
        try:
            warm = requests.post(f"{server.url}/infer/umind_segment?image=study&output=json",
                                 data={"params": '{"prompt": "lesion"}'}, timeout=600)
            warm.raise_for_status()
            stop = threading.Event()
            done: list[float] = []
            errors: list[str] = []
            info: list[float] = []
            store: list[float] = []
            train: list[float] = []
            threads = [threading.Thread(target=_infer_loop, args=(server.url, stop, done, errors))
                       for _ in range(args.clients)]
            threads += [threading.Thread(target=_poll, args=(server.url, "/info/", stop, args.interval, info)),
                        threading.Thread(target=_poll, args=(server.url, "/datastore/", stop, args.interval, store)),
                        threading.Thread(target=_poll, args=(server.url, "/train/", stop, args.interval, train))]
            for t in threads:
                t.start()
            time.sleep(args.seconds)
            stop.set()
            for t in threads:
                t.join(timeout=600)
        finally:
            server.stop()
    print(f"{args.clients} infer clients for {args.seconds:.0f} s: {len(done)} infers done "
          f"(median {statistics.median(done) if done else float('nan'):.2f} s each), {len(errors)} errors")
    for name, lat in (("/info", info), ("/datastore", store), ("/train", train)):
        print(f"{name:11s} n={len(lat):4d}  p50 {_percentile(lat, 50) * 1000:7.1f} ms  "
              f"p95 {_percentile(lat, 95) * 1000:7.1f} ms  max {max(lat) * 1000 if lat else float('nan'):7.1f} ms")
    if errors:
        print("first errors:", errors[:3])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
