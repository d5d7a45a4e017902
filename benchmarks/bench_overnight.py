"""Overnight batch inference on a CPU-only machine: a folder of studies through `umind infer`, images per hour.

    python scripts/make_qwen_layout.py /tmp/qwen3-vl-4b-random --variant 4b
    python benchmarks/bench_overnight.py --model /tmp/qwen3-vl-4b-random --studies 20 \\
        --out benchmarks/results/overnight_4b.json

Writes `--studies` single-frame studies (speckled 256x256 PNG frames with a dark lesion, `qwen_timing.speckle_frame`,
one seed each) to a folder, then runs `umind infer --task segment` over the folder in a child process exactly as a
user would (the default decode, one process), and records the wall time, images per hour and the child's peak
resident memory (`getrusage(RUSAGE_CHILDREN)`), with the machine's read bandwidth and bf16 throughput measured in
the same run (machine_limits.py). Random weights never end an answer, so `--max-new-tokens` (default 24, the length
of a grounded answer with one mask: `<|object_ref_start|>lesion<|object_ref_end|>` and 16 mask tokens) bounds each
answer at the length a trained model writes. Not in CI.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from PIL import Image

from machine_limits import measure as measure_machine
from qwen_timing import speckle_frame

from umind_core.atomic import write_text

GiB = 2**30


def write_studies(folder: Path, n: int, size: int) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for k in range(n):
        path = folder / f"study-{k:03d}.png"
        Image.fromarray(np.asarray(speckle_frame(size, seed=k))[..., 0]).save(path)
        paths.append(path)
    return paths


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="a UMind model folder or a Qwen3-VL base folder")
    ap.add_argument("--studies", type=int, default=20)
    ap.add_argument("--size", type=int, default=256)
    ap.add_argument("--max-new-tokens", type=int, default=24)
    ap.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float32"))
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    record = {"model": args.model, "studies": args.studies, "size": args.size, "dtype": args.dtype,
              "max_new_tokens": args.max_new_tokens, "machine": measure_machine()}
    print("machine:", record["machine"], flush=True)
    with tempfile.TemporaryDirectory(prefix="umind-overnight-") as tmp:
        studies = Path(tmp) / "studies"
        write_studies(studies, args.studies, args.size)
        cmd = [sys.executable, "-m", "umind_core.cli", "infer", str(studies), "--out", str(Path(tmp) / "out"),
               "--task", "segment", "--prompt", "lesion", "--model", args.model, "--dtype", args.dtype,
               "--max-new-tokens", str(args.max_new_tokens), "--quiet"]
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True)
        wall = time.perf_counter() - t0
        if proc.returncode != 0:
            raise SystemExit(f"bench: umind infer exited {proc.returncode}: {proc.stderr.strip()[-2000:]}")
        done = sum(1 for p in (Path(tmp) / "out").glob("*/results.json"))
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024 / GiB
    record.update(command=" ".join(cmd[1:]), wall_s=round(wall, 1), done=done,
                  images_per_hour=round(done / wall * 3600, 1), s_per_image=round(wall / max(done, 1), 2),
                  peak_rss_gib=round(peak, 2), summary=proc.stdout.strip().splitlines()[-1:])
    print(json.dumps(record, indent=2), flush=True)
    write_text(args.out, json.dumps(record, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
