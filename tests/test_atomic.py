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


def test_a_new_version_folder_has_the_modes_any_folder_and_file_would_have(tmp_path):
    """tempfile.mkdtemp made the staging folder 0700, and the version kept it after the rename: a server run as
    another user than the one who trained could not read the version."""
    import os

    from umind_core.atomic import new_temp_dir, replace_dir, write_text

    old = os.umask(0o022)
    try:
        tmp = new_temp_dir(tmp_path / "0001")
        write_text(tmp / "weights.bin", "x")
        replace_dir(tmp, tmp_path / "0001")
        (tmp_path / "plain").mkdir()
        (tmp_path / "plain.txt").write_text("x")
    finally:
        os.umask(old)
    mode = lambda p: p.stat().st_mode & 0o777  # noqa: E731
    assert mode(tmp_path / "0001") == mode(tmp_path / "plain") == 0o755
    assert mode(tmp_path / "0001" / "weights.bin") == mode(tmp_path / "plain.txt") == 0o644
