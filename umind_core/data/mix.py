"""One training manifest from several: real imports beside synthetic rehearsal, each record's files left in place.

Demo model 4 trains on the real training splits (HC18, BUSI) and on synthetic images of the four sites it must not
forget. `umind train` reads one manifest, so the parts are rebased into one folder's manifest (paths stay
relative, pointing back into each part's folder: nothing is copied) with ids kept unique by a per-part prefix.
A record of a test split (`split.is_test_split`, the one rule: "test", "test_set", "testing", any case) is refused
here whatever file it came from: held-out cases never reach training through a mix.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from .manifest import read_manifest, rebase, write_manifest
from .split import GROUP_KEY, is_test_split

__all__ = ["mix_manifests"]


def mix_manifests(parts: Sequence[tuple[str, str | os.PathLike] | tuple[str, str | os.PathLike, int]],
                  out: str | os.PathLike) -> dict[str, int]:
    """Write `out` (a manifest path) from `parts`, (prefix, manifest path[, copies]) tuples; records per prefix.

    A part given `copies` > 1 is repeated that many times (ids `<prefix>-<id>-c<k>` after the first), every copy
    in the original's group (`split.GROUP_KEY`, the record's id when it has none), so the trainer's own
    validation split never puts one copy in training and another in validation.
    ValueError when a part holds a held-out record, two parts share a prefix or copies is below 1."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    prefixes = [part[0] for part in parts]
    if len(set(prefixes)) != len(prefixes):
        raise ValueError(f"mix: prefixes must differ, got {prefixes}")
    records, counts = [], {}
    for prefix, path, *rest in parts:
        copies = int(rest[0]) if rest else 1
        if copies < 1:
            raise ValueError(f"mix: {prefix} copies must be at least 1, got {copies}")
        held = [r.id for r in read_manifest(path) if is_test_split(r)]
        if held:
            raise ValueError(f"mix: {path} holds {len(held)} held-out record(s) (a test split), e.g. {held[0]!r}")
        for k in range(copies):
            for rec in read_manifest(path):  # a fresh read per copy: records are changed in place below
                rebase(rec, out.parent)
                group = rec.extra.get(GROUP_KEY) or rec.id
                rec.id = f"{prefix}-{rec.id}" + (f"-c{k}" if k else "")
                if copies > 1:
                    rec.extra[GROUP_KEY] = f"{prefix}-{group}"
                records.append(rec)
        counts[prefix] = len(records) - sum(counts.values())
    write_manifest(records, out)
    return counts
