"""What the MONAI Label server adds to one `umind_segment` call, measured as paired differences in one run.

Starts the real server with the shipped demo model (or --model DIR) on a loopback port and loads the same model
in this process. Each round makes one HTTP call (POST /infer/umind_segment on a stored PNG) and one direct
Predictor call on the same frame and prompt, back to back, alternating which goes first; the overhead is the
median of the per-round differences, so a slow phase of a busy machine hits both halves of a pair instead of
one series. Both sides answer the same question, and the label map the server returns is checked against
the direct masks, so the two halves do the same work.

    .venv/bin/python benchmarks/bench_server.py [--model DIR] [--size 256] [--repeats 30]

`--clients 8` measures instead what batching concurrent requests (umind_core.inference.scheduler) buys: the same mixed
requests (segment, detect, interactive clicks, interpret; one per client and round, on 8 different images)
sent one by one, then by that many clients at once; every concurrent reply is checked against the reply the
same request got alone. It prints throughput and latency ratios measured in this one run.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from umind_core.inference.fast_decode import GRAPH_MODES
from umind_core.testing.server import same_reply, start_server

PROMPT = "lesion"


def _image(size: int) -> np.ndarray:
    """A held-out synthetic breast scan (seed outside the demo model's training seeds), RGB uint8."""
    from umind_core.data.synthetic import generate

    sample = generate(seed=1_000_001, site="breast", size=size)
    return np.repeat(sample.image[..., None], 3, axis=2)


def _label_map(resp) -> np.ndarray:
    """The label map of a multipart /infer reply."""
    import io

    from PIL import Image
    from requests_toolbelt.multipart import decoder

    for part in decoder.MultipartDecoder(resp.content, resp.headers["content-type"]).parts:
        if b'name="params"' not in part.headers.get(b"Content-Disposition", b""):
            return np.asarray(Image.open(io.BytesIO(part.content)))
    raise RuntimeError("no label map in the reply")


def _rounds(server_url: str, predictor, frame, repeats: int, warmup: int):
    """(http seconds, direct seconds, http label map, direct masks) per round; warm-up rounds dropped."""
    import requests

    def http():
        t0 = time.perf_counter()
        r = requests.post(f"{server_url}/infer/umind_segment?image=img",
                          data={"params": json.dumps({"prompt": PROMPT})}, timeout=600)
        r.raise_for_status()
        return time.perf_counter() - t0, r

    # The app runs inference on a worker thread (off its event loop); the direct call does the same. On this
    # machine a Predictor driven from the main thread measured several times slower than from a worker thread
    # (1.4-1.6 s against 0.3 s, same process, same model), which would otherwise pass for server "overhead".
    worker = ThreadPoolExecutor(max_workers=1)

    def direct():
        t0 = time.perf_counter()
        res = worker.submit(predictor.predict_batch, [frame], "segment", PROMPT).result()[0]
        return time.perf_counter() - t0, res

    out = []
    for i in range(warmup + repeats):
        if i % 2:
            (td, res), (th, r) = direct(), http()
        else:
            (th, r), (td, res) = http(), direct()
        if i >= warmup:
            out.append((th, td, r, res))
    return out


def _bootstrap_ci(values: list[float], n: int = 2000, seed: int = 0) -> tuple[float, float]:
    """A 95% percentile-bootstrap interval of the median: how far the reported median could move by chance."""
    rng = np.random.default_rng(seed)
    arr = np.asarray(values, dtype=float)
    meds = np.median(rng.choice(arr, size=(n, arr.size), replace=True), axis=1)
    return float(np.percentile(meds, 2.5)), float(np.percentile(meds, 97.5))


def _same_work(resp, res) -> bool:
    """True when the server's label map marks the pixels the direct masks mark."""
    labels = _label_map(resp)
    masks = [o.mask for o in res.objects if o.mask is not None]
    direct = np.logical_or.reduce(masks) if masks else np.zeros(labels.shape, bool)
    return labels.shape == direct.shape and bool(((labels > 0) == direct).all())


MIXED = (("umind_segment", {"prompt": "lesion"}), ("umind_detect", {"prompt": "lesion"}),
         ("umind_interactive", {"foreground": [[128, 120, 0]], "background": [[12, 12, 0]]}),
         ("umind_interpret", {"task": "diagnose"}))


def _mixed_requests(clients: int, per_client: int, images: int) -> list[list[tuple[str, str, dict]]]:
    """Per client, its requests: the four kinds in turn, each on another image."""
    def request(c: int, j: int) -> tuple[str, str, dict]:
        task, params = MIXED[(c + j) % len(MIXED)]
        return task, f"img{(c * per_client + j) % images}", params

    return [[request(c, j) for j in range(per_client)] for c in range(clients)]


def _send(server_url: str, req) -> tuple[float, int, tuple[object, bytes]]:
    import requests

    task, image, params = req
    t0 = time.perf_counter()
    r = requests.post(f"{server_url}/infer/{task}?image={image}", data={"params": json.dumps(params)}, timeout=600)
    return time.perf_counter() - t0, r.status_code, _answer_of(r)


def _answer_of(resp) -> tuple[object, bytes]:
    """What a reply answers: its JSON (timings left for `same_reply` to skip) and the label map or markups bytes."""
    from requests_toolbelt.multipart import decoder

    if "multipart" not in resp.headers.get("content-type", ""):
        return resp.json(), b""
    body, data = None, b""
    for part in decoder.MultipartDecoder(resp.content, resp.headers["content-type"]).parts:
        if b'name="params"' in part.headers.get(b"Content-Disposition", b""):
            body = json.loads(part.text)
        else:
            data += part.content
    return body, data


def _same_answer(a: tuple[object, bytes], b: tuple[object, bytes]) -> bool:
    return a[1] == b[1] and same_reply(a[0], b[0])


def _first_difference(alone: tuple[object, bytes], together: tuple[object, bytes], context: int = 60) -> str:
    """Where two answers part: the label bytes' first differing offset, or the JSON around its first difference."""
    if alone[1] != together[1]:
        i = next((k for k, (x, y) in enumerate(zip(alone[1], together[1])) if x != y),
                 min(len(alone[1]), len(together[1])))
        return f"label/markups bytes differ at byte {i} ({len(alone[1])} / {len(together[1])} bytes)"
    a, b = (json.dumps(x[0], sort_keys=True) for x in (alone, together))
    i = next((k for k, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    lo = max(0, i - context)
    return f"JSON: alone ...{a[lo:i + context]} / together ...{b[lo:i + context]}"


def _pct(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values) * 1000, q))


def _wait_for_graphs(server_url: str, timeout: float = 1800.0) -> float:
    """Seconds until the server's background step builds (decode "auto", `/info` umind.decode.steps) are all built
    or failed, so that the timed passes replay graphs instead of racing their builds."""
    import requests

    t0 = time.perf_counter()
    while time.perf_counter() - t0 < timeout:
        steps = (requests.get(f"{server_url}/info/", timeout=60).json()["umind"].get("decode") or {}).get("steps", [])
        if all(s["state"] in ("tuned", "compiled") or s["state"].startswith("failed") for s in steps):
            break
        time.sleep(2.0)
    return time.perf_counter() - t0


def _batching(server_url: str) -> dict:
    """The server's batching stats (`/info` umind.batching)."""
    import requests

    return requests.get(f"{server_url}/info/", timeout=60).json()["umind"].get("batching") or {}


def _batch_fill(before: dict, after: dict) -> str:
    """Batches and callers per batch between two /info readings (both within the scheduler's last 1000 batches):
    how full the concurrent pass kept the batches, which the totals over both passes hide."""
    n0, n1 = int(before.get("batches") or 0), int(after.get("batches") or 0)
    callers = n1 * float(after.get("mean_callers") or 0.0) - n0 * float(before.get("mean_callers") or 0.0)
    if n1 <= n0:
        return "no batches"
    return f"{n1 - n0} batches, {callers / (n1 - n0):.2f} callers per batch"


def _busy_s(batching: dict) -> float:
    """Seconds the server's Predictor has spent in batches (its last 1000)."""
    return float(batching.get("batches") or 0) * float(batching.get("mean_batch_s") or 0.0)


class _CpuMeter:
    """CPU seconds this benchmark (the clients) and the server process tree used during one pass: on a small
    machine the clients share the server's cores, which an in-process run does not pay."""

    def __init__(self, server_pid: int | None):
        import psutil

        self.server = psutil.Process(server_pid) if server_pid else None

    def _server_cpu(self) -> float:
        if self.server is None:
            return float("nan")
        procs = [self.server, *self.server.children(recursive=True)]
        return sum(sum(p.cpu_times()[:2]) for p in procs if p.is_running())

    def __enter__(self):
        self.t, self.client, self.srv = time.perf_counter(), time.process_time(), self._server_cpu()
        return self

    def __exit__(self, *exc):
        self.wall = time.perf_counter() - self.t
        self.client = time.process_time() - self.client
        self.srv = self._server_cpu() - self.srv

    def line(self, busy_s: float) -> str:
        cores = os.cpu_count() or 1
        return (f"wall {self.wall:.2f} s; Predictor busy {busy_s:.2f} s ({100 * busy_s / self.wall:.0f}%); CPU s: "
                f"server {self.srv:.2f}, clients {self.client:.2f} ({100 * self.client / (cores * self.wall):.0f}% "
                f"of {cores} cores)")


def _bursts(server_url: str, flat: list, clients: int) -> None:
    """Bursts of 1, 2, 4, ... `clients` requests sent at once (twice each): the batch sizes a compiled or tuned
    decoder builds a step graph for (its row buckets), met before the timing rather than in it."""
    sizes = [1 << i for i in range(clients.bit_length()) if 1 << i <= clients]
    for k in sizes + sizes:
        gate = threading.Barrier(k)

        def send(req, gate=gate):
            gate.wait()
            _send(server_url, req)

        with ThreadPoolExecutor(k) as pool:
            list(pool.map(send, flat[:k]))


def _concurrency(server_url: str, clients: int, per_client: int, images: int, server_pid: int | None = None,
                 warm_concurrent: bool = False) -> bool:
    """Sequential pass, then concurrent pass, of the same requests; prints ratios; True when every reply matched.

    `warm_concurrent`: untimed bursts of 1, 2, 4, 8 requests and one concurrent pass first, so that the step
    graphs a compiled or tuned decoder builds once per batch size are built before the timing (a size the warm-up
    did not form still builds in the timed pass; the server log lines printed at the end say which were built)."""
    plan = _mixed_requests(clients, per_client, images)
    flat = [req for reqs in plan for req in reqs]
    for req in flat[: 2 * len(MIXED)]:  # warm-up: every kind, the model loaded
        _send(server_url, req)
    if warm_concurrent:
        t0 = time.perf_counter()
        _bursts(server_url, flat, clients)
        with ThreadPoolExecutor(clients) as pool:
            list(pool.map(lambda reqs: [_send(server_url, req) for req in reqs], plan))
        print(f"untimed warm-up (bursts of 1, 2, 4, ..., {clients} requests, then a concurrent pass): "
              f"{time.perf_counter() - t0:.1f} s; then {_wait_for_graphs(server_url):.1f} s until the background "
              "builds (decode auto) ended")
    busy0 = _busy_s(_batching(server_url))
    with _CpuMeter(server_pid) as seq_cpu:
        alone = [_send(server_url, req) for req in flat]
    batching1 = _batching(server_url)
    busy1 = _busy_s(batching1)
    seq_s = seq_cpu.wall

    def client(reqs):
        return [_send(server_url, req) for req in reqs]

    with _CpuMeter(server_pid) as conc_cpu, ThreadPoolExecutor(clients) as pool:
        together = [out for outs in pool.map(client, plan) for out in outs]
    conc_s = conc_cpu.wall
    batching = _batching(server_url)
    busy2 = _busy_s(batching)
    ok = all(a[1] == 200 for a in alone) and all(t[1] == 200 and _same_answer(t[2], a[2])
                                                 for t, a in zip(together, alone))
    mismatched = sum(not _same_answer(t[2], a[2]) for t, a in zip(together, alone))
    lone = [a[0] for a in alone]
    conc = [t[0] for t in together]
    n = len(flat)
    print(f"{clients} clients x {per_client} mixed requests (segment, detect, interactive, interpret) on {images} "
          f"images, shipped demo model unless --model; batch window from the server's conf")
    print(f"one by one : {n} requests in {seq_s:6.2f} s = {n / seq_s:6.2f} req/s; latency p50 {_pct(lone, 50):.0f} ms, "
          f"p95 {_pct(lone, 95):.0f} ms")
    print(f"concurrent : {n} requests in {conc_s:6.2f} s = {n / conc_s:6.2f} req/s; latency p50 {_pct(conc, 50):.0f} "
          f"ms, p95 {_pct(conc, 95):.0f} ms")
    print(f"throughput ratio concurrent/one-by-one: {seq_s / conc_s:.2f}x; p95 latency concurrent / lone p95: "
          f"{_pct(conc, 95) / _pct(lone, 95):.2f}x (/ lone p50: {_pct(conc, 95) / _pct(lone, 50):.2f}x)")
    by_kind = {kind: [i for i, req in enumerate(flat) if req[0] == kind] for kind in dict.fromkeys(r[0] for r in flat)}
    print("p50 latency by kind, concurrent (lone): " + ", ".join(
        f"{kind} {_pct([conc[i] for i in idx], 50):.0f} ({_pct([lone[i] for i in idx], 50):.0f}) ms"
        for kind, idx in by_kind.items()))
    print(f"replies equal to the same request sent alone (label bytes equal, JSON floats within 1e-5): "
          f"{n - mismatched}/{n}")
    for req, t, a in zip(flat, together, alone):
        if not _same_answer(t[2], a[2]):
            print(f"  differs: {req[0]} on {req[1]}: {_first_difference(a[2], t[2])}")
    print(f"server batching over both passes (/info): {batching}")
    print(f"  concurrent pass alone: {_batch_fill(batching1, batching)}")
    print(f"  one by one: {seq_cpu.line(busy1 - busy0)}")
    print(f"  concurrent: {conc_cpu.line(busy2 - busy1)}")
    print(f"  machine load average at the end: {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    return ok


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=None, help="UMind folder (default: the shipped demo model)")
    ap.add_argument("--size", type=int, default=256, help="side of the square test image in pixels")
    ap.add_argument("--repeats", type=int, default=30, help="timed rounds (each one HTTP + one direct call)")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--clients", type=int, default=0, help="measure concurrent clients instead (e.g. 8)")
    ap.add_argument("--per-client", type=int, default=10, help="requests per client with --clients")
    ap.add_argument("--window-ms", type=float, default=None, help="the server's batch_window_ms (default: its own)")
    ap.add_argument("--regroup-ms", type=float, default=None,
                    help="the server's batch_regroup_ms (default: its own; in process: the scheduler's default)")
    ap.add_argument("--decode", default=None,
                    help="the server's decode conf (in process: the Predictor's); compiled and tuned build a step "
                         "graph per batch size, so an untimed warm-up forms those batches first")
    ap.add_argument("--out", default=None, help="without --clients: also write the overhead figures to this JSON")
    ap.add_argument("--in-process", action="store_true",
                    help="with --clients: the same plan through a BatchScheduler in this process, no HTTP")
    args = ap.parse_args(argv)
    if args.clients and args.in_process:
        return _main_in_process(args)
    if args.clients:
        return _main_concurrency(args)

    from PIL import Image

    from umind_core import demo
    from umind_core.imageio import read_image
    from umind_core.inference.predictor import Predictor

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        studies = root / "studies"
        studies.mkdir()
        Image.fromarray(_image(args.size)).save(studies / "img.png")
        conf = {"workdir": str(root / "work"), "max_new_tokens": str(args.max_new_tokens), "retrain_every": "0"}
        if args.model:
            conf["model"] = args.model
        predictor = Predictor(demo.load_model(args.model), max_new_tokens=args.max_new_tokens)
        frame = read_image(studies / "img.png")
        server = start_server(studies, conf, root / "server.log", env={"MONAI_LABEL_AUTO_UPDATE_SCORING": "false"})
        try:
            rounds = _rounds(server.url, predictor, frame, args.repeats, args.warmup)
        except Exception:
            print(server.log_tail(), file=sys.stderr)
            raise
        finally:
            server.stop()
    same = all(_same_work(r, res) for _, _, r, res in rounds)
    diffs = [(th - td) * 1000 for th, td, _, _ in rounds]
    q1, med, q3 = statistics.quantiles(sorted(diffs), n=4, method="inclusive")
    lo, hi = _bootstrap_ci(diffs)
    first = [d for i, d in enumerate(diffs) if (i + args.warmup) % 2 == 0]  # rounds where HTTP went first
    second = [d for i, d in enumerate(diffs) if (i + args.warmup) % 2 == 1]
    print(f"model: {args.model or 'shipped demo model'}; image {args.size}x{args.size} PNG; prompt {PROMPT!r}; "
          f"max_new_tokens {args.max_new_tokens}; {args.repeats} paired rounds after {args.warmup} warm-up")
    print(f"HTTP call median   {statistics.median(t[0] for t in rounds) * 1000:8.1f} ms")
    print(f"direct call median {statistics.median(t[1] for t in rounds) * 1000:8.1f} ms")
    print(f"server overhead: median of paired differences {med:.1f} ms (quartiles {q1:.1f} .. {q3:.1f} ms; "
          f"95% bootstrap interval of the median {lo:.1f} .. {hi:.1f} ms)")
    print(f"  by order: HTTP first {statistics.median(first):.1f} ms ({len(first)} rounds), direct first "
          f"{statistics.median(second):.1f} ms ({len(second)} rounds)")
    print(f"  machine load average at the end: {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    print(f"label maps equal to the direct masks in every round: {same}")
    if args.out:
        from umind_core.atomic import write_text

        def ms(v: float) -> float:
            return round(v, 1)

        write_text(args.out, json.dumps({
            "model": args.model or "shipped demo model", "size": args.size, "prompt": PROMPT,
            "max_new_tokens": args.max_new_tokens, "repeats": args.repeats, "warmup": args.warmup,
            "http_median_ms": ms(statistics.median(t[0] for t in rounds) * 1000),
            "direct_median_ms": ms(statistics.median(t[1] for t in rounds) * 1000),
            "overhead_median_ms": ms(med), "overhead_quartiles_ms": [ms(q1), ms(q3)],
            "overhead_median_ci95_ms": [ms(lo), ms(hi)], "load_average": round(os.getloadavg()[0], 2),
            "label_maps_equal": same}, indent=2) + "\n")
    return 0 if same else 1


IMAGES = 8


def _bench_images(size: int) -> list[np.ndarray]:
    """Held-out seeds (outside the demo model's training seeds), several sites, RGB uint8."""
    from umind_core.data.synthetic import generate

    sites = ("breast", "thyroid", "kidney", "fetal_head")
    return [np.repeat(generate(seed=1_000_100 + i, site=sites[i % 4], size=size).image[..., None], 3, axis=2)
            for i in range(IMAGES)]


def _main_in_process(args) -> int:
    """The concurrency plan without the server: what the scheduler and the batched Predictor give on their own."""
    from umind_core import demo
    from umind_core.inference.predictor import Job, Predictor
    from umind_core.inference.scheduler import DEFAULT_REGROUP_MS, DEFAULT_WINDOW_MS, BatchScheduler, model_thread

    images = _bench_images(args.size)
    kinds = {"umind_segment": ("segment", "lesion", {}), "umind_detect": ("detect", "lesion", {}),
             "umind_interactive": ("segment", "lesion", {"points": [[128, 120], [12, 12]], "labels": [1, 0]}),
             "umind_interpret": ("diagnose", None, {})}

    def job(req):
        task, prompt, visual = kinds[req[0]]
        # a copy per job, as the server reads every request's image anew: the Predictor encodes each distinct
        # frame object once per batch, and two clients ask about the same image at each step of the plan
        return Job(images[int(req[1][3:])].copy(), task, prompt, **visual)

    plan = [[job(r) for r in reqs] for reqs in _mixed_requests(args.clients, args.per_client, IMAGES)]
    flat = [j for jobs in plan for j in jobs]
    window = DEFAULT_WINDOW_MS if args.window_ms is None else args.window_ms
    # the model loads and runs on one thread, as in the server (umind_core.inference.scheduler: where the model runs)
    executor = model_thread()
    predictor = executor.submit(lambda: Predictor(demo.load_model(args.model), max_new_tokens=args.max_new_tokens,
                                                  decode=args.decode)).result()
    scheduler = BatchScheduler(predictor, window, executor=executor,
                               regroup_ms=DEFAULT_REGROUP_MS if args.regroup_ms is None else args.regroup_ms)

    def timed(j):
        t0 = time.perf_counter()
        (res,) = scheduler.predict([j])
        return time.perf_counter() - t0, res

    for j in flat[: 2 * len(MIXED)]:
        timed(j)
    if args.decode in GRAPH_MODES:  # the step graphs of the batch sizes met, built outside the timing
        t0 = time.perf_counter()
        with ThreadPoolExecutor(args.clients) as pool:
            list(pool.map(lambda jobs: [timed(j) for j in jobs], plan))
        print(f"untimed concurrent warm-up pass: {time.perf_counter() - t0:.1f} s")
    t0 = time.perf_counter()
    alone = [timed(j) for j in flat]
    seq_s = time.perf_counter() - t0
    scheduler.reset_stats()
    t0 = time.perf_counter()
    with ThreadPoolExecutor(args.clients) as pool:
        together = [out for outs in pool.map(lambda jobs: [timed(j) for j in jobs], plan) for out in outs]
    conc_s = time.perf_counter() - t0
    same = sum(a[1].text == t[1].text and len(a[1].objects) == len(t[1].objects) for a, t in zip(alone, together))
    lone, conc, n = [a[0] for a in alone], [t[0] for t in together], len(flat)
    print(f"in process: {args.clients} threads x {args.per_client} mixed jobs, one BatchScheduler "
          f"(window {window} ms, up to {scheduler.max_jobs} jobs per batch)")
    print(f"one by one : {n / seq_s:6.2f} jobs/s; latency p50 {_pct(lone, 50):.0f} ms, p95 {_pct(lone, 95):.0f} ms")
    print(f"concurrent : {n / conc_s:6.2f} jobs/s; latency p50 {_pct(conc, 50):.0f} ms, p95 {_pct(conc, 95):.0f} ms; "
          f"batches {scheduler.stats()}")
    print(f"throughput ratio: {seq_s / conc_s:.2f}x; p95 latency concurrent / lone p95: "
          f"{_pct(conc, 95) / _pct(lone, 95):.2f}x; answers equal to alone: {same}/{n}")
    return 0 if same == n else 1


def _main_concurrency(args) -> int:
    from PIL import Image

    images = IMAGES
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        studies = root / "studies"
        studies.mkdir()
        for i, pixels in enumerate(_bench_images(args.size)):
            Image.fromarray(pixels).save(studies / f"img{i}.png")
        conf = {"workdir": str(root / "work"), "max_new_tokens": str(args.max_new_tokens), "retrain_every": "0"}
        if args.model:
            conf["model"] = args.model
        if args.window_ms is not None:
            conf["batch_window_ms"] = str(args.window_ms)
        if args.regroup_ms is not None:
            conf["batch_regroup_ms"] = str(args.regroup_ms)
        if args.decode:
            conf["decode"] = args.decode
        server = start_server(studies, conf, root / "server.log", env={"MONAI_LABEL_AUTO_UPDATE_SCORING": "false"})
        try:
            ok = _concurrency(server.url, args.clients, args.per_client, images, server.proc.pid,
                              warm_concurrent=args.decode in GRAPH_MODES)
            builds = [line for line in server.log_tail(100000).splitlines() if "decode step" in line]
            print(f"decode step graphs the server built ({len(builds)}):" + "".join(f"\n  {b}" for b in builds))
        except Exception:
            print(server.log_tail(), file=sys.stderr)
            raise
        finally:
            server.stop()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
