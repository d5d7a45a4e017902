"""The project's one train/held-out split: by a hash of each id (or of each record's group) alone.

A record keeps its side when others are added or removed, so a growing datastore never moves a training
image into validation (the trainer's split and the app's held-out labels both depend on that). `min_val`
tops validation up with the smallest hashes, so a small dataset still validates; at least one record always
trains. `salt` gives an independent split of the same ids (the app's per-seed held-out labels).

`group_split` applies the same rule to groups: records of one group (HC18's subject ``NNN``, whose up to four images
are near-duplicates) go to one side together, so no subject is both trained on and held out. A record without a
group is a group of its own and lands where `hash_split` would put it.

`is_test_split` is the one rule for the other kind of held-out record: a record whose extra key ``split`` names a
test split (nnU-Net's imagesTs/labelsTs and UltraBench's test.json give "test", HC18's test_set/ "test_set",
``umind import --split test=0.2`` "test"). Every import keeps them in DIR/manifest.jsonl beside the training cases so
that one file lists the whole source; `umind train` leaves them out of any manifest it is given, so a test case is
never trained on whichever file a user passes.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

__all__ = ["GROUP_KEY", "SPLIT_KEY", "TEST_SPLITS", "unit_hash", "hash_split", "group_split", "record_groups",
           "is_test_split", "record_split"]

#: the manifest record's extra key naming its group (HC18: the subject NNN), written by the importers
GROUP_KEY = "group"
#: the record's extra key naming the split its source put it in, written by the importers
SPLIT_KEY = "split"
#: split names (compared lower-case) that hold a source's test cases: never trained on
TEST_SPLITS: frozenset[str] = frozenset({"test", "test_set", "testing"})


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


def group_split(ids: Sequence[str], groups: Sequence[str | None], fraction: float, min_val: int = 0,
                salt: str = "umind-split") -> tuple[list[str], list[str]]:
    """(train ids, held-out ids), each in the order of `ids`, whole groups to a side: `hash_split` of the groups
    (a record whose group is None or "" is keyed by its id), `min_val` counting groups. ValueError for repeated
    ids, a group list of another length or a bad fraction."""
    ids = list(ids)
    if len(groups) != len(ids):
        raise ValueError(f"{len(groups)} groups for {len(ids)} record ids")
    if len(set(ids)) != len(ids):
        raise ValueError("record ids must be unique to split them")
    keys = [str(g) if g not in (None, "") else i for i, g in zip(ids, groups)]
    _, held_keys = hash_split(list(dict.fromkeys(keys)), fraction, min_val=min_val, salt=salt)
    held = set(held_keys)
    return [i for i, k in zip(ids, keys) if k not in held], [i for i, k in zip(ids, keys) if k in held]


def record_groups(records: Sequence) -> list[str | None]:
    """Each record's group (its extra key GROUP_KEY), None where it names none: what `group_split` takes."""
    out = []
    for rec in records:
        group = getattr(rec, "extra", {}).get(GROUP_KEY)
        out.append(group if isinstance(group, str) and group else None)
    return out


def record_split(record) -> str | None:
    """The record's split (its extra key SPLIT_KEY) as written, None where it names none."""
    split = getattr(record, "extra", {}).get(SPLIT_KEY)
    return split if isinstance(split, str) and split else None


def is_test_split(record) -> bool:
    """True when the record's split is a test split (TEST_SPLITS, any case): training must leave it out."""
    split = record_split(record)
    return split is not None and split.strip().lower() in TEST_SPLITS
