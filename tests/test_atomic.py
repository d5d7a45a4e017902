"""The one place files are written atomically: a failure leaves the old file and no temporary behind."""

from __future__ import annotations

import pytest

from umind_core import atomic


def test_failed_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path):
    target = tmp_path / "labels.nii.gz"
    atomic.write_text(target, "old")
    with pytest.raises(RuntimeError):
        with atomic.atomic_path(target) as tmp:
            assert tmp.name.endswith(".nii.gz") and tmp.parent == tmp_path
            tmp.write_text("half")
            raise RuntimeError("crash mid-write")
    assert target.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["labels.nii.gz"]


def test_replace_dir_swaps_a_finished_folder(tmp_path):
    dst = tmp_path / "model"
    dst.mkdir()
    (dst / "old.txt").write_text("1")
    new = atomic.new_temp_dir(dst)
    (new / "new.txt").write_text("2")
    atomic.replace_dir(new, dst)
    assert sorted(p.name for p in dst.iterdir()) == ["new.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]


def test_remove_dir_renames_away_before_deleting(tmp_path, monkeypatch):
    doomed = tmp_path / "step-4"
    (doomed / "model").mkdir(parents=True)
    (doomed / "model" / "w.bin").write_text("x")
    seen = []
    monkeypatch.setattr(atomic.shutil, "rmtree", lambda p, ignore_errors=False: seen.append(
        (p.name, sorted(q.name for q in tmp_path.iterdir()))))
    atomic.remove_dir(doomed, ".step-4.old")
    assert seen == [(".step-4.old", [".step-4.old"])]  # by the time deletion starts, step-4 is gone
    monkeypatch.undo()
    atomic.remove_dir(tmp_path / ".step-4.old")
    assert list(tmp_path.iterdir()) == []
