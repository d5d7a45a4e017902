#!/usr/bin/env python
"""Write a folder in Qwen3-VL-4B-Instruct's hub layout with random bf16 weights (tests and benchmarks only).

    python scripts/make_qwen_layout.py /tmp/qwen3-vl-4b-random --variant 4b      # about 8.9 GB
    python scripts/make_qwen_layout.py /tmp/qwen3-vl-small --variant small       # real vocabulary, 2 narrow layers

Needs the `qwen-layout` extra (`dashscope`, for Qwen's BPE ranks). The weights are random: the folder exercises
loading, tokenising, serving and training on the real layout and shapes, never the model's skills.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from umind_core.tools.qwen_layout import VARIANTS, LayoutError, write_layout  # noqa: E402
from umind_core.tools.qwen_vocab import QwenVocabError  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path, help="folder to write (must be empty unless --overwrite)")
    parser.add_argument("--variant", choices=sorted(VARIANTS), default="small")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--overwrite", action="store_true")
    args = parser.parse_args(argv)
    t0 = time.perf_counter()
    try:
        folder = write_layout(args.out, args.variant, seed=args.seed, overwrite=args.overwrite)
    except (LayoutError, QwenVocabError) as exc:
        print(f"make_qwen_layout: {exc}", file=sys.stderr)
        return 2
    size = sum(p.stat().st_size for p in folder.iterdir())
    print(f"{folder}: {args.variant} layout, {size / 1e9:.2f} GB, written in {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
