"""One training manifest from several: real imports beside synthetic rehearsal, each record's files left in place.

Demo model 4 trains on the real training splits (HC18, BUSI) and on synthetic images of the four sites it must not
forget. `umind train` reads one manifest, so the parts are rebased into one folder's manifest (paths stay
relative, pointing back into each part's folder: nothing is copied) with ids kept unique by a per-part prefix.
A record whose split is "test" is refused here whatever file it came from: held-out cases never reach training
through a mix.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from .manifest import read_manifest, rebase, write_manifest

__all__ = ["mix_manifests", "HELD_OUT_SPLITS"]

#: split names that are never trained on
HELD_OUT_SPLITS = ("test",)


def mix_manifests(parts: Sequence[tuple[str, str | os.PathLike]], out: str | os.PathLike) -> dict[str, int]:
    """Write `out` (a manifest path) from `parts`, (prefix, manifest path) pairs; records per prefix.

    ValueError when a part holds a held-out record or two parts share a prefix."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    prefixes = [p for p, _ in parts]
    if len(set(prefixes)) != len(prefixes):
        raise ValueError(f"mix: prefixes must differ, got {prefixes}")
    records, counts = [], {}
    for prefix, path in parts:
        part = read_manifest(path)
        held = [r.id for r in part if str(getattr(r, "extra", {}).get("split", "")) in HELD_OUT_SPLITS]
        if held:
            raise ValueError(f"mix: {path} holds {len(held)} held-out record(s) (split test), e.g. {held[0]!r}")
        for rec in part:
            rebase(rec, out.parent)
            rec.id = f"{prefix}-{rec.id}" if prefix else rec.id
            records.append(rec)
        counts[prefix] = len(part)
    write_manifest(records, out)
    return counts
