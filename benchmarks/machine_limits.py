"""What this machine can do at most, measured in the same process as the model it judges.

Why: a model's decode reads every weight once a token, so its floor is weight bytes / read bandwidth; a prefill is
mostly matrix products, so its floor is its arithmetic / the bf16 matrix throughput. Both limits move with the
machine (another CPU, other jobs on the host), so a benchmark that reports a model as ratios of them measures them
in its own run rather than quoting a figure from elsewhere.

    python benchmarks/machine_limits.py            # prints both, as JSON

- read bandwidth: a STREAM-like read (a sum over a float32 array of `gib` GiB, far above any cache), best of 3;
- bf16 matrix throughput: a square bf16 product of side `n` (compute-bound), best of 5, in GFLOP/s.
"""

from __future__ import annotations

import json
import sys
import time

import torch

GiB = 2**30


def read_bandwidth_gbps(gib: float = 4.0, repeats: int = 3) -> float:
    """GB/s (10^9 bytes) of reading a float32 array of `gib` GiB once, best of `repeats`."""
    n = int(gib * GiB) // 4
    x = torch.ones(n, dtype=torch.float32)
    x.sum()  # touch every page once before timing
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        x.sum()
        best = min(best, time.perf_counter() - t0)
    del x
    return n * 4 / best / 1e9


def bf16_matmul_gflops(n: int = 4096, repeats: int = 5) -> float:
    """GFLOP/s of one n x n by n x n bf16 product (2 n^3 operations), best of `repeats`."""
    a = torch.randn(n, n).bfloat16()
    b = torch.randn(n, n).bfloat16()
    a @ b
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - t0)
    return 2 * n**3 / best / 1e9


def measure() -> dict:
    return {"read_gbps": round(read_bandwidth_gbps(), 2), "bf16_gflops": round(bf16_matmul_gflops(), 1),
            "threads": torch.get_num_threads()}


if __name__ == "__main__":
    print(json.dumps(measure()))
    sys.exit(0)
