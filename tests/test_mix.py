"""`umind mix`: parts rebased into one training manifest, ids kept apart, held-out records refused."""

from __future__ import annotations

import pytest

from umind_core.data.manifest import read_manifest, write_synthetic_dataset
from umind_core.data.mix import mix_manifests


def _part(tmp_path, name, n, seed0, split=None):
    folder = tmp_path / name
    write_synthetic_dataset(folder, n, seed0=seed0, size=64)
    path = folder / "manifest.jsonl"
    if split:
        records = read_manifest(path)
        for r in records:
            r.extra["split"] = split
        from umind_core.data.manifest import write_manifest

        write_manifest(records, path)
    return path


def test_parts_are_rebased_and_prefixed(tmp_path):
    a, b = _part(tmp_path, "a", 2, 0), _part(tmp_path, "b", 3, 0)  # the same ids in both parts
    out = tmp_path / "mixed" / "train" / "manifest.jsonl"
    assert mix_manifests([("real", a), ("synth", b)], out) == {"real": 2, "synth": 3}
    records = read_manifest(out)
    assert len({r.id for r in records}) == 5 and all(r.id.split("-")[0] in ("real", "synth") for r in records)
    for r in records:
        assert r.image_path.is_file() and not r.image.startswith("/")
        assert r.load_image().shape[:2] == (64, 64)


@pytest.mark.parametrize("split", ["test", "Testing", "test_set"])
def test_a_part_holding_held_out_records_is_refused(tmp_path, split):
    """Every spelling of a test split the trainer leaves out (`split.is_test_split`), not only "test"."""
    test = _part(tmp_path, "t", 2, 0, split=split)
    with pytest.raises(ValueError, match="held-out"):
        mix_manifests([("real", test)], tmp_path / "m" / "manifest.jsonl")
    assert not (tmp_path / "m" / "manifest.jsonl").exists()


def test_copies_repeat_a_part_in_one_group_each(tmp_path):
    from umind_core.data.split import GROUP_KEY

    a = _part(tmp_path, "a", 2, 0)
    out = tmp_path / "m" / "manifest.jsonl"
    assert mix_manifests([("real", a, 3), ("synth", _part(tmp_path, "b", 1, 5))], out) == {"real": 6, "synth": 1}
    records = read_manifest(out)
    groups = {}
    for r in records[:6]:
        groups.setdefault(r.extra[GROUP_KEY], []).append(r.id)
    assert len(groups) == 2 and all(len(v) == 3 for v in groups.values())
    assert GROUP_KEY not in records[-1].extra  # a part taken once keeps its records as they were
