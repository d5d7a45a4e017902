"""Synthetic ultrasound generation speed: seconds per 256x256 image, per site, on this machine.

A timing goal ("hundreds of images a minute") belongs here, not in a test: a busy machine slows a timed test
without anything being wrong. Prints the median time per image and images per minute.

    .venv/bin/python benchmarks/bench_synthetic.py [--size 256] [--repeats 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=256)
    ap.add_argument("--repeats", type=int, default=5, help="images per site")
    args = ap.parse_args(argv)

    from umind_core.data.synthetic import SITES, generate

    generate(0, size=args.size)  # imports and caches outside the timing
    per_site = {}
    for k, site in enumerate(SITES):
        times = []
        for i in range(args.repeats):
            t0 = time.perf_counter()
            generate(900 + 100 * k + i, site=site, size=args.size)
            times.append(time.perf_counter() - t0)
        per_site[site] = statistics.median(times)
    for site, t in per_site.items():
        print(f"{site:12s} {t * 1000:7.1f} ms per {args.size}x{args.size} image")
    overall = statistics.median(per_site.values())
    print(f"median over sites: {overall * 1000:.1f} ms per image, {60 / overall:.0f} images per minute")
    return 0


if __name__ == "__main__":
    sys.exit(main())
