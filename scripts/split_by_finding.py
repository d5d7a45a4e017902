"""A training manifest split by finding, each part weighted to about as many images as the commonest finding.

    python scripts/split_by_finding.py MANIFEST [--copies N]

Writes MANIFEST's records of each image-level diagnosis beside it (``<stem>_<finding>.jsonl``; records without one
go to ``<stem>_none.jsonl``) and prints one `umind mix` part a line, ``<folder>-<finding>=<file>*<copies>``, where copies is
N times round(commonest / this finding's count): what `train_demo_model4.sh BUSI_BALANCE=1` mixes so that a rare
finding (BUSI's normals, 76 of 434 training images) is seen about as often as the commonest.
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from pathlib import Path

from umind_core.data.manifest import ManifestError, read_manifest, write_manifest


def parts(manifest: Path, copies: int) -> list[str]:
    groups = defaultdict(list)
    for rec in read_manifest(manifest):
        groups[rec.annotations.diagnosis or "none"].append(rec)
    most = max(len(v) for v in groups.values())
    out = []
    for finding, records in sorted(groups.items()):
        path = manifest.with_name(f"{manifest.stem}_{finding}.jsonl")
        write_manifest(records, path)
        out.append(f"{manifest.parent.name}-{finding}={path}*{copies * max(1, round(most / len(records)))}")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("manifest", type=Path)
    ap.add_argument("--copies", type=int, default=1, help="times each part's weight (BUSI_COPIES)")
    args = ap.parse_args(argv)
    if args.copies < 1:
        print("split_by_finding: --copies must be at least 1", file=sys.stderr)
        return 2
    try:
        print("\n".join(parts(args.manifest, args.copies)))
    except (ManifestError, OSError, ValueError) as exc:
        print(f"split_by_finding: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
