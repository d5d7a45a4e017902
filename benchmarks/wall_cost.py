"""What each row of the security corpus costs the server: peak memory above idle, and how fast /info answers.

The goals: peak RSS under 200 MB above idle for any request of at most 5 MB, and /info answering while
the corpus runs. One server (the corpus's own: tests/test_security_corpus.py, its caps and its tree) serves
every row in order; before each row the server's high-water mark is reset (`/proc/PID/clear_refs` 5), after it the
peak (VmHWM) is read against the RSS just before the row (the server at rest, its model loaded once a row asked
for it) and against the RSS when it first answered /info, and /info is timed right after. Every figure comes from one run; the machine's load at
the time is printed with them (a training job on the same two cores slows /info, not memory).

    .venv/bin/python benchmarks/wall_cost.py --out benchmarks/results/wall_cost.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    import requests
    from test_security_corpus import cases, proc_kb, reset_peak, send, server_pid, start

    from umind_core.atomic import write_text

    rows = []
    with tempfile.TemporaryDirectory() as d:
        srv = start(Path(d))
        try:
            pid = server_pid(srv)
            requests.get(srv.url + "/info/", timeout=60)
            idle = proc_kb(pid, "VmRSS")
            for case in cases(srv.root):
                size = sum(len(v[1]) for v in case.files.values()) + len(str(case.params or "")) + \
                    len(json.dumps(case.json_body) if case.json_body is not None else "")
                before = reset_peak(pid)
                t0 = time.perf_counter()
                status = send(srv, case).status_code
                took = time.perf_counter() - t0
                peak = proc_kb(pid, "VmHWM")
                t1 = time.perf_counter()
                requests.get(srv.url + "/info/", timeout=60)
                info_ms = (time.perf_counter() - t1) * 1000
                rows.append({"case": case.name, "status": status, "request_bytes": size,
                             "peak_above_idle_mb": round((peak - idle) / 1024, 1),
                             "peak_above_before_mb": round((peak - before) / 1024, 1), "seconds": round(took, 3),
                             "info_ms": round(info_ms, 1)})
        finally:
            srv.stop()
    small = [r for r in rows if r["request_bytes"] <= 5 * 1024 * 1024]
    result = {"idle_rss_mb": round(idle / 1024, 1), "rows": rows,
              "max_peak_above_idle_mb": max(r["peak_above_idle_mb"] for r in small),
              "max_peak_above_before_mb": max(r["peak_above_before_mb"] for r in small),
              "worst_case": max(small, key=lambda r: r["peak_above_before_mb"])["case"],
              "info_ms_max": max(r["info_ms"] for r in rows),
              "info_ms_median": sorted(r["info_ms"] for r in rows)[len(rows) // 2],
              "load_average": os.getloadavg()}
    write_text(args.out, json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "rows"}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
