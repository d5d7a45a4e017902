"""Datastore writes are atomic and images are replaced only on purpose (GuardedDatastore, no server).

A full disk (ENOSPC) is simulated at the copy of an image or label and at the index write, a kill is a real
SIGKILL mid-copy in a child process, and a real full disk is a 3 MB tmpfs (root only). After every failure the
old file is byte-identical and decodes, the studies tree holds no temporary and no 0-byte file, the index file
and the in-memory index are unchanged, and the error is InsufficientStorage (507) naming the id or tag, never
a path.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "monailabel_app"))

from lib.datastore import GuardedDatastore  # noqa: E402
from lib.wall.errors import BadRequest, Conflict, InsufficientStorage, to_http  # noqa: E402

from umind_core import atomic  # noqa: E402

SIDE = 64


def extensions() -> list[str]:
    """The extensions main.py gives the datastore (MONAI Label's defaults plus EXTRA_EXTENSIONS)."""
    from monailabel.config import settings

    return list(settings.MONAI_LABEL_DATASTORE_FILE_EXT) + [
        e for e in ["*.dcm"] if e not in settings.MONAI_LABEL_DATASTORE_FILE_EXT]


def open_store(studies: Path) -> GuardedDatastore:
    """As main.py's init_datastore builds it (no file watcher: the tests change files themselves)."""
    return GuardedDatastore(str(studies), extensions=extensions(), auto_reload=False, read_only=False)


def png(path: Path, arr: np.ndarray) -> Path:
    Image.fromarray(arr.astype(np.uint8)).save(path)
    return path


def image_array(seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (SIDE, SIDE), dtype=np.uint8)


def label_array(k: int = 1) -> np.ndarray:
    a = np.zeros((SIDE, SIDE), np.uint8)
    a[8:8 + 8 * k, 10:40] = k
    return a


def decode(path: Path) -> np.ndarray:
    with Image.open(path) as im:
        return np.asarray(im)


def leftovers(studies: Path) -> list[str]:
    """Temporaries and 0-byte files anywhere in the studies tree (filelock's own `.lock` is empty by design)."""
    bad = []
    for p in studies.rglob("*"):
        if p.is_file() and (atomic.is_temp_name(p.name) or (p.stat().st_size == 0 and p.name != ".lock")):
            bad.append(str(p.relative_to(studies)))
    return bad


@pytest.fixture
def env(tmp_path):
    studies = tmp_path / "studies"
    studies.mkdir()
    up = tmp_path / "uploads"
    up.mkdir()
    ds = open_store(studies)
    ds.add_image("img", str(png(up / "img.png", image_array(0))), {})
    old_label = label_array(1)
    ds.save_label("img", str(png(up / "old_label.png", old_label)), "final", {})
    return ds, studies, up, old_label


def snapshot(ds: GuardedDatastore, studies: Path) -> dict:
    return {"index_file": (studies / "datastore_v2.json").read_bytes(), "memory": json.dumps(ds.json(), sort_keys=True),
            "files": {str(p.relative_to(studies)): p.read_bytes() for p in studies.rglob("*") if p.is_file()}}


def assert_unchanged(ds, studies, before, old_label):
    assert leftovers(studies) == []
    after = snapshot(ds, studies)
    assert after["index_file"] == before["index_file"]
    json.loads(after["index_file"])  # still a whole JSON document
    assert after["memory"] == before["memory"]
    assert after["files"] == before["files"]
    label = studies / "labels" / "final" / "img.png"
    assert np.array_equal(decode(label), old_label)
    assert open_store(studies).get_label_info("img", "final") == ds.get_label_info("img", "final")


def assert_names_no_path(exc: BaseException, *words: str, tmp_path: Path) -> None:
    text = str(exc)
    assert "disk is full" in text
    for w in words:
        assert repr(w) in text, (w, text)
    assert str(tmp_path) not in text and "/" not in text, text


def enospc_mid_copy(calls: list):
    """A copyfileobj that writes half the file into a datastore temporary, then finds the disk full."""
    real = shutil.copyfileobj

    def fake(fsrc, fdst, length=0):
        if not atomic.is_temp_name(os.path.basename(getattr(fdst, "name", ""))):
            return real(fsrc, fdst, length) if length else real(fsrc, fdst)
        data = fsrc.read()
        fdst.write(data[: len(data) // 2])
        fdst.flush()
        calls.append((os.path.basename(fdst.name), len(data) // 2))
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), fdst.name)

    return fake


# ------------------------------------------------------------------------------------------ full disk, simulated
def test_label_overwrite_on_a_full_disk_keeps_the_old_label(env, tmp_path, monkeypatch):
    ds, studies, up, old_label = env
    before = snapshot(ds, studies)
    calls = []
    monkeypatch.setattr(shutil, "copyfileobj", enospc_mid_copy(calls))
    with pytest.raises(InsufficientStorage) as err:
        ds.save_label("img", str(png(up / "new_label.png", label_array(3))), "final", {"note": "new"})
    assert calls and calls[0][1] > 0  # it failed mid-copy, after writing part of the new label
    assert_names_no_path(err.value, "final", "img", tmp_path=tmp_path)
    assert_unchanged(ds, studies, before, old_label)
    http = to_http(err.value, "save label")
    assert http.status_code == 507 and "disk is full" in http.detail


def test_new_image_on_a_full_disk_is_not_stored(env, tmp_path, monkeypatch):
    ds, studies, up, old_label = env
    before = snapshot(ds, studies)
    calls = []
    monkeypatch.setattr(shutil, "copyfileobj", enospc_mid_copy(calls))
    with pytest.raises(InsufficientStorage) as err:
        ds.add_image("second", str(png(up / "second.png", image_array(1))), {})
    assert calls and calls[0][0].endswith("second.png")
    assert_names_no_path(err.value, "second", tmp_path=tmp_path)
    assert "second" not in ds.list_images() and not list(studies.glob("*second*"))
    assert_unchanged(ds, studies, before, old_label)


@pytest.mark.parametrize("op", ["save_label", "add_image", "update_image_info", "update_label_info"])
def test_index_write_on_a_full_disk_keeps_the_old_index(env, tmp_path, monkeypatch, op):
    """The index temp fails half-written: nothing is renamed, the image or label is not replaced either."""
    ds, studies, up, old_label = env
    before = snapshot(ds, studies)
    real, calls = atomic.write_into, []

    def half_then_full(tmp, data):
        if not Path(tmp).name.endswith("datastore_v2.json"):
            return real(tmp, data)
        Path(tmp).write_bytes(data[: len(data) // 2])
        calls.append(Path(tmp).name)
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(tmp))

    monkeypatch.setattr(atomic, "write_into", half_then_full)
    with pytest.raises(InsufficientStorage) as err:
        if op == "save_label":
            ds.save_label("img", str(png(up / "new_label.png", label_array(3))), "final", {})
        elif op == "add_image":
            ds.add_image("second", str(png(up / "second.png", image_array(1))), {})
        elif op == "update_image_info":
            ds.update_image_info("img", {"reviewed": True})
        else:
            ds.update_label_info("img", "final", {"reviewed": True})
    assert calls, "the index write was not reached"
    assert_names_no_path(err.value, "second" if op == "add_image" else "img", tmp_path=tmp_path)
    assert_unchanged(ds, studies, before, old_label)
    assert "reviewed" not in ds.get_image_info("img") and "reviewed" not in ds.get_label_info("img", "final")


def test_a_failure_while_labels_are_set_aside_puts_them_back(env, monkeypatch):
    """A replace that fails at its last step (renaming the image into place) leaves the old image and labels."""
    ds, studies, up, old_label = env
    before = snapshot(ds, studies)
    real = os.replace

    def fail_on_image(src, dst):
        if os.path.realpath(dst) == os.path.realpath(studies / "img.png"):
            raise OSError(errno.EIO, "simulated I/O error")
        return real(src, dst)

    monkeypatch.setattr(os, "replace", fail_on_image)
    with pytest.raises(OSError) as err:
        ds.add_image("img", str(png(up / "img2.png", image_array(5))), {"replace": True})
    assert not isinstance(err.value, InsufficientStorage) and err.value.errno == errno.EIO  # not a "full disk"
    assert_unchanged(ds, studies, before, old_label)


@pytest.mark.slow
def test_a_kill_mid_write_leaves_the_old_label_and_the_restart_clears_the_temporary(env, tmp_path):
    ds, studies, up, old_label = env
    before = snapshot(ds, studies)
    new_label = png(up / "new_label.png", label_array(3))
    child = textwrap.dedent(f"""
        import os, shutil, signal, sys
        sys.path[:0] = [{str(ROOT / 'monailabel_app')!r}, {str(ROOT)!r}]
        from lib.datastore import GuardedDatastore
        from umind_core import atomic
        real = shutil.copyfileobj
        def killed(fsrc, fdst, length=0):
            if not atomic.is_temp_name(os.path.basename(getattr(fdst, "name", ""))):
                return real(fsrc, fdst)
            data = fsrc.read()
            fdst.write(data[: len(data) // 2]); fdst.flush(); os.fsync(fdst.fileno())
            os.kill(os.getpid(), signal.SIGKILL)
        shutil.copyfileobj = killed
        ds = GuardedDatastore({str(studies)!r}, extensions={extensions()!r}, auto_reload=False)
        ds.save_label("img", {str(new_label)!r}, "final", {{}})
    """)
    proc = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, timeout=300)
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
    left = [p for p in (studies / "labels" / "final").iterdir() if atomic.is_temp_name(p.name)]
    assert len(left) == 1 and left[0].stat().st_size > 0  # killed mid-copy: a partial temporary, hidden
    assert (studies / "datastore_v2.json").read_bytes() == before["index_file"]
    assert np.array_equal(decode(studies / "labels" / "final" / "img.png"), old_label)
    assert "img" in ds.list_images() and ds.get_labels_by_image_id("img") == {"final": "img"}
    restarted = open_store(studies)  # the next start removes what the kill left
    assert leftovers(studies) == []
    assert restarted.get_label_info("img", "final") == ds.get_label_info("img", "final")
    assert np.array_equal(decode(Path(restarted.get_label_uri("img", "final"))), old_label)


def test_temporaries_are_never_indexed(tmp_path):
    studies = tmp_path / "studies"
    (studies / "labels" / "final").mkdir(parents=True)
    png(studies / "a.png", image_array(2))
    stray = f".tmp-{uuid.uuid4().hex[:12]}-b.png"
    png(studies / stray, image_array(3))
    ds = GuardedDatastore(str(studies), extensions=extensions(), auto_reload=False, read_only=True)
    assert ds._list_files(str(studies), extensions()) == {"a.png": "a.png"}
    ds.refresh()
    assert ds.list_images() == ["a"] and (studies / stray).exists()  # read-only: listed out, not deleted
    open_store(studies)
    assert not (studies / stray).exists()


# ------------------------------------------------------------------------------------------ full disk, real
@pytest.fixture
def small_tmpfs(tmp_path):
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        pytest.skip("a real full disk needs root to mount a 3 MB tmpfs; the simulated ENOSPC tests cover the rest")
    if shutil.which("mount") is None:
        pytest.skip("no mount command to make a 3 MB tmpfs")
    mnt = tmp_path / "small"
    mnt.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(mnt)], capture_output=True,
                          text=True)
    if done.returncode != 0:
        pytest.skip(f"mount -t tmpfs failed: {(done.stderr or done.stdout).strip().splitlines()[:1]}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def fill(path: Path) -> int:
    """Write into `path` until the disk says it is full; the bytes written."""
    fd, n = os.open(path, os.O_WRONLY | os.O_CREAT), 0
    try:
        for chunk in (1 << 16, 1 << 12, 1):
            while True:
                try:
                    w = os.write(fd, b"\xff" * chunk)
                except OSError as exc:
                    assert exc.errno == errno.ENOSPC, exc
                    break
                n += w
                if w < chunk:
                    break
    finally:
        os.close(fd)
    return n


def test_a_real_full_disk_keeps_the_old_label(small_tmpfs, tmp_path):
    studies = small_tmpfs / "studies"
    up = tmp_path / "uploads"
    up.mkdir()
    ds = open_store(studies)
    ds.add_image("img", str(png(up / "img.png", image_array(0))), {})
    old_label = label_array(1)
    ds.save_label("img", str(png(up / "old.png", old_label)), "final", {})
    bigger = np.random.default_rng(7).integers(0, 256, (SIDE, SIDE), dtype=np.uint8)  # noise: no compression
    big_path = png(up / "big.png", bigger)
    old_file = studies / "labels" / "final" / "img.png"
    assert big_path.stat().st_size > 4 * old_file.stat().st_size and big_path.stat().st_size > 4096
    old_bytes, index_before = old_file.read_bytes(), (studies / "datastore_v2.json").read_bytes()
    filler = small_tmpfs / "filler"
    assert fill(filler) > 2_000_000
    with pytest.raises(InsufficientStorage) as err:
        ds.save_label("img", str(big_path), "final", {})
    assert_names_no_path(err.value, "final", "img", tmp_path=tmp_path)
    assert old_file.read_bytes() == old_bytes and np.array_equal(decode(old_file), old_label)
    assert (studies / "datastore_v2.json").read_bytes() == index_before
    assert leftovers(studies) == []
    with pytest.raises(InsufficientStorage):  # an index-only write on the full disk: the index stays whole
        ds.update_image_info("img", {"reviewed": True})
    assert (studies / "datastore_v2.json").read_bytes() == index_before and leftovers(studies) == []
    filler.unlink()  # room again: the same save goes through
    ds.save_label("img", str(big_path), "final", {})
    assert np.array_equal(decode(old_file), bigger)


# ------------------------------------------------------------------------------------------ replacing on purpose
def test_an_existing_id_is_a_conflict_naming_its_labels(env, tmp_path):
    ds, studies, up, old_label = env
    ds.save_label("img", str(png(up / "rev.png", label_array(2))), "reviewed", {})
    before = snapshot(ds, studies)
    for info in ({}, {"replace": False}, {"replace": "no"}):
        with pytest.raises(Conflict) as err:
            ds.add_image("img", str(png(up / "again.png", image_array(9))), dict(info))
        assert "'final'" in str(err.value) and "'reviewed'" in str(err.value) and '"replace": true' in str(err.value)
        assert str(tmp_path) not in str(err.value)
    assert to_http(err.value, "upload image").status_code == 409
    assert snapshot(ds, studies) == before

    ds.add_image("bare", str(png(up / "bare.png", image_array(4))), {})
    with pytest.raises(Conflict) as err:
        ds.add_image("bare", str(png(up / "bare2.png", image_array(5))), {})
    assert "'bare' already exists without labels" in str(err.value)
    with pytest.raises(BadRequest) as err:
        ds.add_image("bare", str(png(up / "bare2.png", image_array(5))), {"replace": "maybe"})
    assert not isinstance(err.value, Conflict) and "replace" in str(err.value)
    assert np.array_equal(decode(studies / "bare.png"), image_array(4))


def test_replace_removes_the_old_format_and_every_label(env):
    import SimpleITK as sitk

    ds, studies, up, old_label = env
    ds.save_label("img", str(png(up / "rev.png", label_array(2))), "reviewed", {})
    ds.add_image("other", str(png(up / "other.png", image_array(6))), {})
    ds.save_label("other", str(png(up / "other_label.png", label_array(2))), "final", {})
    other_label = (studies / "labels" / "final" / "other.png").read_bytes()
    (studies / "labels" / "extra").mkdir()
    png(studies / "labels" / "extra" / "img.png", label_array(1))  # on disk, not (yet) in the index
    with pytest.raises(Conflict) as err:  # another image under the same id
        ds.add_image("img", str(png(up / "img_other.png", image_array(9))), {})
    assert "'extra'" in str(err.value)
    # the very same bytes again (a client re-sending its upload) change nothing and keep every label
    assert ds.add_image("img", str(up / "img.png"), {}) == "img"
    assert (studies / "labels" / "reviewed" / "img.png").is_file() and "reviewed" in ds.get_labels_by_image_id("img")

    new = np.full((SIDE, SIDE), 7, np.uint8)
    nii = up / "scan.nii.gz"
    sitk.WriteImage(sitk.GetImageFromArray(new), str(nii))
    assert ds.add_image("img", str(nii), {"replace": True, "user": "admin"}) == "img"

    assert not (studies / "img.png").exists() and (studies / "img.nii.gz").is_file()
    assert sitk.GetArrayFromImage(sitk.ReadImage(str(studies / "img.nii.gz"))).tolist() == new.tolist()
    assert not [p for p in (studies / "labels").rglob("img.*")]
    assert ds.get_labels_by_image_id("img") == {}
    index = json.loads((studies / "datastore_v2.json").read_text())["objects"]["img"]
    assert index["labels"] == {} and index["image"]["ext"] == ".nii.gz"
    assert set(index["image"]["info"]) == {"ts", "name", "user"} and index["image"]["info"]["name"] == "img.nii.gz"
    assert (studies / "labels" / "final" / "other.png").read_bytes() == other_label  # other ids untouched
    assert ds.get_labels_by_image_id("other") == {"final": "other"}
    assert leftovers(studies) == []
    restarted = open_store(studies)
    assert restarted.get_labels_by_image_id("img") == {} and restarted.get_image_uri("img").endswith("img.nii.gz")


def test_a_label_in_another_format_replaces_the_old_file(env):
    import SimpleITK as sitk

    ds, studies, up, old_label = env
    nii = up / "label.nii.gz"
    sitk.WriteImage(sitk.GetImageFromArray(label_array(2)), str(nii))
    ds.save_label("img", str(nii), "final", {})
    assert sorted(p.name for p in (studies / "labels" / "final").iterdir()) == ["img.nii.gz"]
    assert ds.get_label_uri("img", "final").endswith("img.nii.gz")
    assert open_store(studies).get_label_info("img", "final")["name"] == "img.nii.gz"


def test_a_dataset_export_on_a_full_disk_is_a_507_and_leaves_no_partial_archive(monkeypatch, tmp_path):
    """GET /datastore/dataset building its zip on a full disk answered 400 (the client's mistake) instead of 507."""
    import tempfile

    from lib.wall.request_files import dataset_archive_response

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    made = []

    class FullDisk:
        def datalist(self):
            return [{"image": "a", "label": "a"}]

        def get_dataset_archive(self, limit_cases):
            from lib.wall.request_files import current_scratch

            made.append(current_scratch())
            (current_scratch() / "partial.zip").write_bytes(b"PK")
            raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(InsufficientStorage) as err:
        dataset_archive_response(FullDisk(), None)
    http = to_http(err.value, "download dataset")
    assert http.status_code == 507 and "disk is full" in http.detail
    assert made and not made[0].exists()  # the request folder and its partial archive are gone


def test_the_file_watchers_reconcile_waits_for_a_label_write_in_progress(env, monkeypatch):
    """MONAI Label's file watcher reconciles from its own thread. A reconcile between a label write setting its index
    entry and renaming its file into place dropped the label ("Removing non existing Label Id") until the next event:
    the retrain trigger counted 4 of 5 labels and a strategy served the just-labeled image again."""
    import threading

    ds, studies, up, _ = env
    ds.add_image("second", str(png(up / "second.png", image_array(1))), {})
    real_copy, watcher = atomic.copy_into, []

    threads = []

    def copy_while_the_watcher_fires(src, tmp):
        if "labels" in str(tmp) and not threads:  # the index names the label, its file is not in place yet
            t = threading.Thread(target=ds.refresh)  # as the watcher calls it, past its reload of the index file
            threads.append(t)
            t.start()
            t.join(0.3)
            threads.append(t.is_alive())  # it waits for the write instead of reconciling half of it
        return real_copy(src, tmp)

    # the watcher's reload of the index file takes the file lock only for the reload; what raced was the rest of
    # its reconcile, which holds no lock: start it past the reload
    monkeypatch.setattr(type(ds), "_init_from_datastore_file", lambda self, throw_exception=False: None)
    monkeypatch.setattr(atomic, "copy_into", copy_while_the_watcher_fires)
    ds.save_label("second", str(png(up / "second_label.png", label_array(2))), "final", {})
    threads[0].join(5)
    assert threads[1] is True
    assert sorted(ds.get_labeled_images()) == ["img", "second"]
    assert sorted(open_store(studies).get_labeled_images()) == ["img", "second"]  # and so does the index file


def test_a_saved_labels_own_label_names_win_over_the_stock_extensions_list(tmp_path):
    """The stock extension's `label_info` list becomes `label_names` at the door, unless the client sent its own
    `label_names` dict: that one names the values the label map holds."""
    studies = tmp_path / "studies"
    studies.mkdir()
    png(studies / "img.png", image_array())
    ds = open_store(studies)
    listed = [{"name": "lesion", "idx": 1}, {"name": "gland", "idx": 2}]
    ds.save_label("img", str(png(tmp_path / "l.png", label_array())), "final", {"label_info": listed})
    assert ds.get_label_info("img", "final")["label_names"] == {"lesion": 1, "gland": 2}
    ds.save_label("img", str(png(tmp_path / "l2.png", label_array())), "final",
                  {"label_info": listed, "label_names": {"gland": 1}})
    assert ds.get_label_info("img", "final")["label_names"] == {"gland": 1}
