"""The same Predictor work on the main thread and on a second thread, one process.

Why this exists: the server answered every /infer on the batch scheduler's worker thread after loading the model
on a request thread, and in 10 of 12 runs of `bench_server.py --clients 8` (benchmarks/results/batching_history.md)
the server process kept 1.08-1.13 cores busy during the one-by-one pass, 1.80-1.81 in the other 2, which took half
the time. This script shows the gap without HTTP: 15 segment requests (set_image + predict) on one thread, then on the
other, with the wall time per request and the cores the process kept busy (process CPU time / wall time).
The cause is libgomp's: every thread that has run a parallel region keeps its own pool of helper threads, and
while the helpers outnumber the cores (`gomp_managed_threads > gomp_available_cpus`) they spin only briefly
before sleeping, so each of the many small parallel regions of a decode waits for its helpers to wake. The server
now loads and answers on one thread (`monailabel_app/lib/model_holder.MODEL_THREAD`).

    .venv/bin/python benchmarks/bench_worker_thread.py [--first main|worker] [--decode static]
"""

from __future__ import annotations

import argparse
import threading
import time

import torch

from umind_core import demo
from umind_core.data import synthetic
from umind_core.inference.predictor import Predictor


def run(pred: Predictor, image, label: str, requests: int) -> None:
    for _ in range(3):  # warm-up on this thread
        pred.set_image(image)
        pred.predict("segment", "lesion")
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(requests):
        pred.set_image(image)
        pred.predict("segment", "lesion")
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    print(f"{label:6}: {1e3 * wall / requests:5.1f} ms per request, cores busy {cpu / wall:.2f} "
          f"(torch threads {torch.get_num_threads()})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--first", choices=("main", "worker"), default="main")
    ap.add_argument("--decode", default="static")
    ap.add_argument("--requests", type=int, default=15)
    args = ap.parse_args()
    pred = Predictor(demo.load_model(None), decode=args.decode)
    image = synthetic.generate(3, site="breast", size=256).image
    order = ["main", "worker"] if args.first == "main" else ["worker", "main"]
    for where in order:
        if where == "main":
            run(pred, image, "main", args.requests)
        else:
            worker = threading.Thread(target=run, args=(pred, image, "worker", args.requests))
            worker.start()
            worker.join()


if __name__ == "__main__":
    main()
