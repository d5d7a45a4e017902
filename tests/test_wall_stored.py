"""The server's side of the wall in-process: stored values bounded, an old bad index repaired at start, the studies
folder served as regular files only, names without control or format characters, escaped logs, request JSON
nested too deep refused, images with bytes after their data refused, and commands that stop their background
builds before they exit."""

from __future__ import annotations

import io
import json
import logging
import os
import sys
import threading
import time
import zipfile
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "monailabel_app"))

from lib.datastore import GuardedDatastore  # noqa: E402
from lib.index_repair import repair_index  # noqa: E402
from lib.wall.errors import BadRequest, Conflict, check_params_json  # noqa: E402
from lib.wall.finite_json import finite_json  # noqa: E402
from lib.wall.image_end import trailing_bytes  # noqa: E402
from lib.wall.json_limits import (MAX_STORED_BYTES, MAX_STORED_DEPTH, check_stored, json_depth,  # noqa: E402
                                  parse_request_json)
from lib.wall.names import name_problem  # noqa: E402
from lib.wall.server_log import EscapingFormatter, scrub_paths  # noqa: E402
from test_datastore_writes import extensions, image_array, label_array, png  # noqa: E402


def nested(depth: int) -> dict:
    value: dict = {"leaf": 1}
    for _ in range(depth - 1):
        value = {"k": value}
    return value


def open_store(studies: Path) -> GuardedDatastore:
    return GuardedDatastore(str(studies), extensions=extensions(), auto_reload=False, read_only=False)


# ---- JSON depth and size --------------------------------------------------------------------------------


def test_json_depth_is_measured_on_text_without_recursion():
    assert json_depth('{"a": [1, {"b": "[[[[{{{{"}]}') == 3  # brackets inside strings do not count
    assert json_depth("[" * 100_000 + "]" * 100_000) == 100_000
    with pytest.raises(BadRequest, match="nested 100000 levels"):
        parse_request_json("[" * 100_000 + "]" * 100_000, "params")
    with pytest.raises(Exception) as info:
        check_params_json('{"a":' * 100_000 + "1" + "}" * 100_000, "infer")
    assert info.value.status_code == 400 and "nested" in info.value.detail


def test_stored_values_are_capped_in_depth_and_size():
    check_stored(nested(MAX_STORED_DEPTH), "label info")
    with pytest.raises(BadRequest, match="nested 21 levels"):
        check_stored(nested(MAX_STORED_DEPTH + 1), "label info")
    with pytest.raises(BadRequest, match="bytes as JSON"):
        check_stored({"x": "a" * MAX_STORED_BYTES}, "label info")
    with pytest.raises(BadRequest, match="JSON"):
        check_stored({"x": float("nan")}, "label info")


def test_replies_are_finite_json():
    body = {"a": float("nan"), "b": [1.0, float("inf"), {"c": np.float32("-inf")}], "d": 2.5}
    out = finite_json(body)
    assert out == {"a": None, "b": [1.0, None, {"c": None}], "d": 2.5}
    json.dumps(out, allow_nan=False)


# ---- the datastore ----------------------------------------------------------------------------------------


def test_the_datastore_refuses_deep_or_large_info_and_keeps_working(tmp_path):
    studies = tmp_path / "studies"
    studies.mkdir()
    png(studies / "a.png", image_array())
    store = open_store(studies)
    lab = png(tmp_path / "l.png", label_array())
    with pytest.raises(BadRequest, match="nested"):
        store.save_label("a", str(lab), "final", nested(500))
    with pytest.raises(BadRequest, match="bytes"):
        store.save_label("a", str(lab), "final", {"x": "y" * 100_000})
    store.save_label("a", str(lab), "final", {"ok": 1})
    with pytest.raises(BadRequest, match="nested"):
        store.update_label_info("a", "final", nested(30))
    with pytest.raises(BadRequest, match="nested"):
        store.update_image_info("a", nested(30))
    store.update_label_info("a", "final", {"more": 2})
    assert store.get_label_info("a", "final")["more"] == 2
    assert open_store(studies).get_label_info("a", "final")["ok"] == 1  # the index still loads


def test_an_index_holding_an_over_deep_info_is_repaired_at_start(tmp_path, caplog):
    studies = tmp_path / "studies"
    studies.mkdir()
    png(studies / "a.png", image_array())
    store = open_store(studies)
    store.save_label("a", str(png(tmp_path / "l.png", label_array())), "final", {"ok": 1})
    index = studies / "datastore_v2.json"
    doc = json.loads(index.read_text())
    doc["objects"]["a"]["labels"]["final"]["info"]["deep"] = nested(500)  # what the old server stored
    index.write_text(json.dumps(doc))
    with caplog.at_level(logging.ERROR):
        store = open_store(studies)
    assert "label 'final' of image 'a'" in caplog.text
    info = store.get_label_info("a", "final")
    assert "deep" not in info and "nested 50" in info["umind_info_removed"]
    assert store.get_label_uri("a", "final").endswith("a.png")  # the label itself is kept
    assert list(studies.glob("datastore_v2.json.bak-*"))  # and the old index beside it


def test_an_index_that_does_not_parse_is_rebuilt_from_the_files(tmp_path):
    studies = tmp_path / "studies"
    studies.mkdir()
    png(studies / "a.png", image_array())
    (studies / "datastore_v2.json").write_text('{"objects": ' + "[" * 50_000)
    assert repair_index(str(studies / "datastore_v2.json")) == ["the whole index"]
    assert open_store(studies).list_images() == ["a"]


def test_symlinks_in_the_studies_folder_are_not_served_written_or_followed_on_delete(tmp_path):
    studies, outside = tmp_path / "studies", tmp_path / "outside"
    studies.mkdir()
    outside.mkdir()
    victim = png(outside / "victim.png", image_array(3))
    before = victim.read_bytes()
    png(studies / "a.png", image_array())
    (studies / "link.png").symlink_to(victim)
    store = open_store(studies)
    assert store.list_images() == ["a"]
    store.add_image("link", str(png(tmp_path / "new.png", image_array(5))), {})  # replaces the link itself
    assert victim.read_bytes() == before and not (studies / "link.png").is_symlink()
    store.remove_image("link")
    assert victim.read_bytes() == before
    # a label file swapped for a link after it was indexed: not served, and deleting removes only the link
    store.save_label("a", str(png(tmp_path / "l.png", label_array())), "final", {})
    label = studies / "labels" / "final" / "a.png"
    label.unlink()
    label.symlink_to(victim)
    with pytest.raises(BadRequest, match="link"):
        store.get_label_uri("a", "final")
    assert store.datalist() == []
    store.remove_image("a")
    assert victim.exists() and victim.read_bytes() == before and not label.is_symlink()


def test_a_linked_folder_inside_the_studies_folder_is_not_served_or_followed_on_delete(tmp_path):
    """Every component below the studies folder is checked, not only the file: a label folder swapped for a link
    to an outside folder holding a file of the same name must not serve or delete that file."""
    studies, outside = tmp_path / "studies", tmp_path / "outside"
    studies.mkdir()
    outside.mkdir()
    png(studies / "a.png", image_array())
    store = open_store(studies)
    store.save_label("a", str(png(tmp_path / "l.png", label_array())), "final", {})
    final = studies / "labels" / "final"
    victim = outside / "a.png"
    (final / "a.png").rename(victim)
    before = victim.read_bytes()
    final.rmdir()
    final.symlink_to(outside, target_is_directory=True)
    with pytest.raises(BadRequest, match="link"):
        store.get_label_uri("a", "final")
    assert store.datalist() == []
    with pytest.raises(Conflict, match="'labels/final' in the studies folder is a link"):
        store.save_label("a", str(png(tmp_path / "l2.png", label_array())), "final", {})
    assert victim.read_bytes() == before and sorted(os.listdir(outside)) == ["a.png"]
    store.remove_image("a")
    assert victim.exists() and victim.read_bytes() == before
    assert store.list_images() == []


# ---- names and logs ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["a\u2028b", "a\u0085b", "a\u009bb", "a\u202eb", "a\u200bb", "<b>x</b>", "a&b",
                                  'a"b', "a\x1b[31mb", "a\nb"])
def test_names_refuse_control_format_and_markup_characters(name):
    assert name_problem(name) is not None


def test_ordinary_names_still_pass():
    for name in ("case_001", "benign (12)", "Pätient-3", "头部 1"):
        assert name_problem(name) is None, name


def test_log_records_cannot_forge_lines_or_carry_escapes():
    fmt = EscapingFormatter("[%(levelname)s] %(message)s")
    rec = logging.LogRecord("x", logging.INFO, __file__, 1, "Infer Request: %s", ("id\n[INFO] forged\x1b[2J",),
                            None)
    text = fmt.format(rec)
    assert "\n" not in text and "\x1b" not in text and "\\n[INFO] forged\\x1b[2J" in text
    try:
        raise ValueError("bad\n[ERROR] forged too")
    except ValueError:
        rec = logging.LogRecord("x", logging.ERROR, __file__, 1, "failed", None, sys.exc_info())
    lines = fmt.format(rec).splitlines()
    assert lines[0] == "[ERROR] failed" and all(line.startswith("    | ") for line in lines[1:])


def test_logs_served_name_no_absolute_path():
    text = f'File "{sys.executable}", line 1\nFile "{ROOT}/umind_core/x.py" /infer/umind_segment'
    out = scrub_paths(text)
    assert sys.executable not in out and str(ROOT) not in out and "/infer/umind_segment" in out


# ---- bytes after the image -----------------------------------------------------------------------------


def _zip() -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("evil/__init__.py", "print('x')\n")
    return buf.getvalue()


@pytest.mark.parametrize("name, fmt", [("x.nii", "nifti"), ("x.nii.gz", "nifti-gz"), ("x.nrrd", "nrrd")])
def test_nifti_and_nrrd_with_bytes_after_their_data_are_caught(tmp_path, name, fmt):
    import SimpleITK as sitk

    path = tmp_path / name
    sitk.WriteImage(sitk.GetImageFromArray(image_array()), str(path), name.endswith(".gz"))
    assert trailing_bytes(path, fmt) == 0
    path.write_bytes(path.read_bytes() + _zip())
    assert trailing_bytes(path, fmt) > 0


# ---- commands stop their background builds ------------------------------------------------------------


def test_a_command_returns_only_after_a_background_build_in_progress_ended(monkeypatch):
    from umind_core import cli
    from umind_core.inference import step_builder
    from umind_core.inference.step_builder import BackgroundBuilder

    class Owner:
        def idle_seconds(self):
            return 1e9

    owner, started, finished = Owner(), threading.Event(), threading.Event()

    def slow_build(weights, args, key):
        started.set()
        time.sleep(1.0)
        finished.set()
        return lambda *a: None

    builder = BackgroundBuilder(slow_build, owner)

    def command(args):
        builder.request((1, 64, "f32", "cpu"), None, ())
        builder.request((2, 64, "f32", "cpu"), None, ())  # queued: dropped by the stop
        assert started.wait(10)
        return 0

    monkeypatch.setattr(cli, "build_parser", lambda: _parser(command))
    assert cli.main(["x"]) == 0
    assert finished.is_set() and builder._thread is None and (2, 64, "f32", "cpu") not in builder.graphs
    assert step_builder.stop_all_builders(timeout=1.0)


def _parser(func):
    import argparse

    p = argparse.ArgumentParser()
    p.add_argument("command")
    p.set_defaults(func=func)
    return p


@pytest.mark.slow
def test_a_build_that_will_not_end_is_cut_off_with_the_commands_own_status(tmp_path):
    """A build still running after BUILD_STOP_S: the process exits with the command's status (0 here), at once."""
    import subprocess

    script = tmp_path / "run.py"
    script.write_text(f"""
import sys, threading, time, argparse
sys.path.insert(0, {str(ROOT)!r})
from umind_core import cli
from umind_core.inference.step_builder import BackgroundBuilder
cli.BUILD_STOP_S = 0.5
class Owner:
    def idle_seconds(self):
        return 1e9
owner, started = Owner(), threading.Event()
def slow(weights, args, key):
    started.set()
    time.sleep(30)
builder = BackgroundBuilder(slow, owner)
def command(args):
    builder.request((1, 64, "f32", "cpu"), None, ())
    started.wait(10)
    print("work done", flush=True)
    return 0
p = argparse.ArgumentParser(); p.add_argument("command"); p.set_defaults(func=command)
cli.build_parser = lambda: p
sys.exit(cli.main(["x"]))
""")
    t0 = time.monotonic()
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-500:]
    assert "work done" in done.stdout and "stopped a background decode build" in done.stderr
    assert time.monotonic() - t0 < 20


def test_replies_name_server_folders_by_role_whole_components_only(tmp_path, monkeypatch):
    """`edge.scrub` hides the server's folders from replies: the workdir inside the studies folder is named as
    such (longest first), a sibling that only shares a prefix is left alone, and a folder given through a link is
    hidden under its real path too."""
    from lib.wall import edge

    monkeypatch.setattr(edge, "_roots", {})
    edge.set_roots("/data/st", "/data/st/work")
    assert (edge.scrub("/data/st/work/v1 and /data/st/a.png, not /data/stuff or /data/st.bak")
            == "<workdir>/v1 and <studies>/a.png, not /data/stuff or /data/st.bak")
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to(real, target_is_directory=True)
    edge.set_roots(str(tmp_path / "link"), None)
    assert edge.scrub(f"{real}/a.png and {tmp_path / 'link'}/b.png") == "<studies>/a.png and <studies>/b.png"
