"""The project's one train/validation split: by a hash of each id alone.

A record keeps its side when others are added or removed, so a growing datastore never moves a training
image into validation (the trainer's split and the app's held-out labels both depend on that). `min_val`
tops validation up with the smallest hashes, so a small dataset still validates; at least one record always
trains. `salt` gives an independent split of the same ids (the app's per-seed held-out labels).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

__all__ = ["unit_hash", "hash_split"]


def unit_hash(record_id: str, salt: str = "umind-split") -> float:
    digest = hashlib.sha256(f"{salt}:{record_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2.0 ** 64


def hash_split(ids: Sequence[str], fraction: float, min_val: int = 0,
               salt: str = "umind-split") -> tuple[list[str], list[str]]:
    """(train ids, validation ids), each in the order of `ids`; ValueError for repeated ids or a bad fraction."""
    ids = list(ids)
    if len(set(ids)) != len(ids):
        raise ValueError("record ids must be unique to split them")
    if not 0.0 <= fraction < 1.0:
        raise ValueError(f"the validation fraction must be in [0, 1), got {fraction!r}")
    hashes = {i: unit_hash(i, salt) for i in ids}
    ranked = sorted(ids, key=hashes.__getitem__)
    n_val = sum(hashes[i] < fraction for i in ids)
    n_val = min(max(n_val, min_val), len(ids) - 1) if len(ids) >= 2 else 0
    val = set(ranked[:n_val])  # the hashes under the fraction are the smallest ones
    return [i for i in ids if i not in val], [i for i in ids if i in val]
