"""Operations that refuse what they cannot do, without a server: rollback checks, base references that survive a
move, `umind versions`, killed runs settled, progress lines, the PACS listing, serve.sh's address and the Orthanc
helper's SIGTERM."""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from version_fixtures import make_version, save_conf_model

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "monailabel_app"))

from umind_core.base_ref import REF_FILE, HashCache, read_ref  # noqa: E402
from umind_core.versions import VersionError, VersionStore, check_rollback  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def workdir_with_versions(tmp_path, tiny_model_factory):
    """A workdir serving version 1 (promoted) with version 2 rejected, both on the base of `conf_model`."""
    conf_model = save_conf_model(tiny_model_factory, tmp_path / "conf_model")
    store = VersionStore(tmp_path / "work", search_paths=[])
    make_version(store, conf_model, 1, "promoted")
    make_version(store, conf_model, 2, "rejected")
    return store, conf_model


def _config_base(folder: Path) -> str:
    return json.loads((folder / "umind_config.json").read_text())["base_model"]


# ------------------------------------------------------------------------------------------------------- rollback
def test_rollback_refuses_a_missing_version_and_a_rejected_one_without_force(workdir_with_versions):
    store, _ = workdir_with_versions
    assert check_rollback(store, None) is None and check_rollback(store, "") is None
    with pytest.raises(VersionError, match=r"version 7 does not exist; available versions: 0, 1, 2 \(rejected\)"):
        check_rollback(store, 7)
    with pytest.raises(VersionError, match="must be a version number"):
        check_rollback(store, True)
    with pytest.raises(VersionError, match=r"version 2 was rejected by the gate \(segment got worse.*\"force\": true"):
        check_rollback(store, "2")
    with pytest.raises(VersionError, match="force must be true or false"):
        check_rollback(store, 2, "maybe")
    assert check_rollback(store, "2", "true") == 2 and check_rollback(store, 0) == 0
    with pytest.raises(VersionError, match="rejected by the gate"):
        store.rollback(2)
    assert store.current() == 1  # a refused rollback changes nothing


def test_a_forced_rollback_shows_until_a_version_is_promoted(workdir_with_versions):
    store, conf_model = workdir_with_versions
    out = store.rollback(2, force=True)
    assert out == {"rolled_back_from": 1, "current_version": 2, "forced": True}
    summary = store.summary()
    assert summary["current_version"] == 2 and summary["current_forced"] is True
    assert any("which the gate rejected" in w for w in summary["warnings"])
    assert store.rollback(1, force=True)["forced"] is False  # force on a promoted version forces nothing
    assert store.summary()["current_forced"] is False
    store.rollback(2, force=True)
    make_version(store, conf_model, 3, "promoted")
    assert store.summary()["current_version"] == 3 and store.summary()["current_forced"] is False


# ------------------------------------------------------------------------------------------------- base reference
def test_a_version_loads_after_its_base_moved_and_refuses_a_changed_base(workdir_with_versions, tmp_path):
    from umind_core.modeling.umind import UMindVL

    store, conf_model = workdir_with_versions
    folder = store.version_dir(1) / "model"
    ref = read_ref(folder)
    assert ref["saved_path"] == str((conf_model / "base").resolve()) and ref["relative_to_workdir"] is None
    moved = tmp_path / "checkout_moved" / "conf_model"
    moved.parent.mkdir()
    shutil.move(str(conf_model), str(moved))  # the checkout (and the demo/base folder in it) moved

    lost = VersionStore(store.workdir, search_paths=[])
    assert lost.base_status(1).startswith("MISSING") and "not found" in lost.base_status(1)
    assert lost.model_dir(1) == folder and _config_base(folder) == str(conf_model / "base")  # left as it was

    found = VersionStore(store.workdir, search_paths=[moved])  # the new checkout's search path
    assert found.model_dir(1) == folder
    assert _config_base(folder) == str((moved / "base").resolve())
    model = UMindVL.from_pretrained(found.model_dir(1))
    assert model.config.lora is not None and model.peft_model is not None

    # an upgraded base at the same path (same size, other weights) is not the base version 1 was trained on
    weights = moved / "base" / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-8:] = bytes(8) if data[-8:] != bytes(8) else b"\x01" * 8
    weights.write_bytes(bytes(data))
    fresh = VersionStore(store.workdir, search_paths=[moved])
    assert fresh.base_status(1).startswith("MISSING")


def test_a_base_inside_the_workdir_is_found_after_the_workdir_moved(tmp_path, tiny_model_factory):
    work = tmp_path / "work"
    conf_model = save_conf_model(tiny_model_factory, work / "models" / "m")
    store = VersionStore(work, search_paths=[])
    folder = make_version(store, conf_model, 1, "promoted")
    assert read_ref(folder)["relative_to_workdir"] == "models/m/base"
    shutil.move(str(work), str(tmp_path / "elsewhere"))
    moved = VersionStore(tmp_path / "elsewhere", search_paths=[])
    assert moved.base_status(1).endswith("(weights verified)")
    assert _config_base(moved.version_dir(1) / "model") == str((tmp_path / "elsewhere/models/m/base").resolve())


def test_a_version_saved_before_references_is_read_as_saved(workdir_with_versions):
    store, conf_model = workdir_with_versions
    folder = store.version_dir(1) / "model"
    (folder / REF_FILE).unlink()
    assert store.model_dir(1) == folder and _config_base(folder) == str((conf_model / "base").resolve())
    assert "saved before base references" in store.base_status(1)


def test_file_hashes_are_cached_by_size_and_mtime(tmp_path):
    f = tmp_path / "base" / "model.safetensors"
    f.parent.mkdir()
    f.write_bytes(b"x" * 100)
    cache = HashCache(tmp_path / "hashes.json")
    first = cache.folder_sha(f.parent)
    entries = json.loads((tmp_path / "hashes.json").read_text())
    key = str(f.resolve())
    entries[key][2] = "0" * 64  # a cached value is trusted while size and mtime hold...
    (tmp_path / "hashes.json").write_text(json.dumps(entries))
    assert HashCache(tmp_path / "hashes.json").folder_sha(f.parent) != first
    f.write_bytes(b"y" * 100)  # ...and recomputed when the file changed
    os.utime(f, ns=(time.time_ns(), time.time_ns() + 10**9))
    assert HashCache(tmp_path / "hashes.json").folder_sha(f.parent)[0] not in (first[0],)
    assert json.loads((tmp_path / "hashes.json").read_text())[key][2] != "0" * 64


# ------------------------------------------------------------------------------------------------ umind versions
def umind(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "umind_core.cli", "versions", *args], capture_output=True,
                          text=True, timeout=300, cwd=str(REPO))


def test_umind_versions_lists_rolls_back_and_exports(workdir_with_versions, tmp_path):
    from umind_core.modeling.umind import UMindVL

    store, _ = workdir_with_versions
    work = str(store.workdir)
    listing = umind(work)
    assert listing.returncode == 0, listing.stderr
    assert "served: version 1" in listing.stdout and "run 2: rejected" in listing.stdout
    assert "new labels | segment | 0.50 | 0.10" in listing.stdout and "(weights verified)" in listing.stdout

    refused = umind(work, "--rollback", "2")
    assert refused.returncode == 2 and "rejected by the gate" in refused.stderr and "Traceback" not in refused.stderr
    assert umind(work, "--rollback", "9").stderr.strip().endswith("available versions: 0, 1, 2 (rejected)")
    forced = umind(work, "--rollback", "2", "--force")
    assert forced.returncode == 0 and "serving version 2 (forced)" in forced.stdout
    assert "a forced rollback" in umind(work).stdout
    assert json.loads(umind(work, "--json").stdout)["current_forced"] is True

    dest = tmp_path / "exported"
    out = umind(work, "--export", "1", str(dest))
    assert out.returncode == 0, out.stderr
    assert {p.name for p in dest.iterdir()} >= {"adapter", "processor", "mask_decoder.safetensors",
                                                 "umind_config.json", REF_FILE, "run.json"}
    ref = json.loads((dest / REF_FILE).read_text())
    assert ref["relative_to_workdir"] is None and ref["exported_version"] == 1
    assert ref["weights_sha256"] == read_ref(store.version_dir(1) / "model")["weights_sha256"]
    assert UMindVL.from_pretrained(dest).config.lora is not None  # loads on its own
    again = umind(work, "--export", "1", str(dest))
    assert again.returncode == 2 and "not an empty folder" in again.stderr
    assert umind(work, "--export", "0", str(tmp_path / "e0")).returncode == 2


@pytest.mark.parametrize("args, message", [
    (["{missing}"], "does not exist"),
    (["{empty}"], "is not a UMind workdir"),
    (["{empty}", "--force"], "--force goes with --rollback"),
    (["{empty}", "--rollback", "x"], "expected a version number"),
])
@pytest.mark.slow
def test_umind_versions_bad_input_exits_2_with_one_line(tmp_path, args, message):
    (tmp_path / "empty").mkdir()
    res = umind(*[a.format(missing=tmp_path / "nope", empty=tmp_path / "empty") for a in args])
    assert res.returncode == 2 and message in res.stderr and "Traceback" not in res.stderr
    assert not (tmp_path / "nope").exists()  # a typo is not created as a workdir


# ------------------------------------------------------------------------------------------ killed runs, progress
def test_a_run_whose_process_is_gone_is_settled_as_killed(tmp_path):
    store = VersionStore(tmp_path / "work", search_paths=[])
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    assert not store.training()
    store.start_run({"version": 1})
    state = store.state()
    state["runs"][-1]["pid"] = dead.pid
    store._write(state)
    assert not store.training()  # recorded as running, but its process is gone (what holds decode builds)
    state["runs"].append({"version": 2, "status": "running", "pid": os.getpid()})  # alive: left alone
    store._write(state)
    assert store.training()
    settled = store.settle_killed("the server stopped on SIGTERM")
    assert [r["version"] for r in settled] == [1]
    runs = json.loads((tmp_path / "work" / "versions.json").read_text())["runs"]
    assert runs[0]["status"] == "killed" and "the server stopped on SIGTERM" in runs[0]["error"]
    assert runs[1]["status"] == "running"
    assert store.settle_killed("again") == []


def test_progress_shows_only_for_the_running_run(tmp_path):
    store = VersionStore(tmp_path / "work", search_paths=[])
    assert store.summary()["train_progress"] is None
    state = store.state()
    state["runs"].append({"version": 1, "status": "running", "pid": os.getpid()})
    store._write(state)
    assert store.summary()["train_progress"] == {"version": 1, "line": None, "at": None}
    store.set_progress(1, "umind train: step 3/40 loss 1.2 lr 1e-04 elapsed 40s eta 8m")
    assert store.summary()["train_progress"]["line"].startswith("umind train: step 3/40")
    store.record_run({"version": 1, "status": "failed"}, promote=False)
    assert store.summary()["train_progress"] is None


@pytest.fixture(scope="module")
def manifest(tmp_path_factory):
    from umind_core.data.conversations import attach_conversations
    from umind_core.data.manifest import write_synthetic_dataset

    raw = write_synthetic_dataset(tmp_path_factory.mktemp("syn"), n=4, size=64, progress=False)
    return attach_conversations(raw, raw.parent / "train.jsonl", seed=0, tasks=("segment", "detect"))


@pytest.mark.parametrize("every_s, steps_logged", [(0.0, [1, 2, 3]), (1e9, [1, 3])])
def test_progress_lines_are_also_time_based(tiny_model_factory, manifest, tmp_path, caplog, monkeypatch, every_s,
                                            steps_logged):
    from umind_core.training import run as run_module
    from umind_core.training.config import TrainConfig
    from umind_core.training.trainer import train

    monkeypatch.setattr(run_module, "PROGRESS_EVERY_S", every_s)
    config = TrainConfig(output_dir=str(tmp_path / "out"), batch_size=2, lr=1e-3, log_every=100, val_fraction=0.0,
                         progress=False, max_steps=3)
    with caplog.at_level(logging.INFO, logger="umind_core.training.trainer"):
        train(tiny_model_factory(), manifest, config, tasks=("segment", "detect"))
    lines = [m for m in caplog.messages if m.startswith("umind train: step")]
    assert [int(m.split()[3].split("/")[0]) for m in lines] == steps_logged
    assert all(" elapsed " in m and " eta " in m for m in lines)
    rows = (tmp_path / "out" / "metrics.csv").read_text().splitlines()[1:]
    assert [int(r.split(",")[0]) for r in rows if r.split(",")[3]] == [1, 3]  # a time line adds no metrics row


# -------------------------------------------------------------------------------------------------------- PACS
class _Pacs:
    def __init__(self, series, down=False):
        self.series, self.down = series, down

    def search_for_series(self, search_filters=None):
        import requests

        if self.down:
            raise requests.ConnectionError("refused")
        return [{"0020000E": {"Value": [uid]}, "00080060": {"Value": ["US"]}} for uid in self.series]


def test_pacs_datastore_lists_every_series_for_the_stock_client(tmp_path):
    from lib.pacs import PacsDatastore

    store = PacsDatastore("http://pacs/dicom-web", tmp_path / "cache", client=_Pacs(["1.2.3", "1.2.4"]))
    listed = store.json()  # GET /datastore/?output=all, MONAILabelClient.datastore()
    assert sorted(listed["objects"]) == ["1.2.3", "1.2.4"]
    assert listed["objects"]["1.2.3"] == {"image": {"ext": ".dcm", "info": {"SeriesInstanceUID": "1.2.3",
                                                                            "cached": False}}, "labels": {}}
    assert store.status()["total"] == 2
    down = PacsDatastore("http://pacs/dicom-web", tmp_path / "cache2", client=_Pacs([], down=True))
    listed = down.json()
    assert listed["objects"] == {} and "cannot be reached" in listed["pacs_error"]


# ----------------------------------------------------------------------------------------- serve.sh, Orthanc
def test_serve_prints_a_reachable_address_for_a_wildcard_bind(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MONAI_LABEL_AUTH", "UMIND_"))}
    env.update(UMIND_ALLOW_OPEN="1", UMIND_DRY_RUN="1", PORT="8123", UMIND_STUDIES=str(tmp_path))
    out = {}
    for host in ("0.0.0.0", "127.0.0.1", "10.9.8.7"):
        res = subprocess.run(["bash", str(REPO / "scripts" / "serve.sh"), "--host", host], env=env,
                             capture_output=True, text=True, timeout=60)
        assert res.returncode == 0, res.stderr
        out[host] = res.stdout.splitlines()[0].removeprefix("umind: clients connect to ").split()[0]
    assert out["127.0.0.1"] == "http://127.0.0.1:8123" and out["10.9.8.7"] == "http://10.9.8.7:8123"
    wildcard = out["0.0.0.0"]
    assert wildcard.endswith(":8123") and not wildcard.startswith(("http://127.", "http://0.0.0.0", "http://localhost"))
    names = subprocess.run(["hostname", "-I"], capture_output=True, text=True).stdout.split() or []
    assert wildcard.removeprefix("http://").rsplit(":", 1)[0].strip("[]") in names + [os.uname().nodename]


def test_orthanc_helper_stops_its_server_on_sigterm(tmp_path):
    psutil = pytest.importorskip("psutil")
    code = textwrap.dedent(f"""
        import subprocess, sys
        sys.path.insert(0, {str(REPO / 'tests')!r})
        from orthanc import serve_until_stopped
        from server_utils import stop_process_group

        def start():
            proc = subprocess.Popen(["sleep", "300"], start_new_session=True)  # Orthanc's stand-in: own session
            print(proc.pid, flush=True)
            return proc

        serve_until_stopped(start, lambda proc: stop_process_group(proc, 10))
    """)
    helper = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    child = int(helper.stdout.readline())
    assert psutil.pid_exists(child)
    time.sleep(0.5)  # into signal.pause()
    helper.send_signal(signal.SIGTERM)
    assert helper.wait(timeout=20) == 128 + signal.SIGTERM
    assert not psutil.pid_exists(child)


def test_a_base_beside_the_workdir_is_not_read_as_inside_it(tmp_path):
    """A sibling whose name starts with the workdir's ("work2" beside "work") is no relative of it."""
    from umind_core.base_ref import write_ref

    for name, relative in (("work/bases/b", "bases/b"), ("work2/b", None)):
        base = tmp_path / name
        base.mkdir(parents=True)
        (base / "model.safetensors").write_bytes(b"w" * 10)
        model = tmp_path / "models" / name.replace("/", "_")
        model.mkdir(parents=True)
        (model / "umind_config.json").write_text(json.dumps({"base_model": str(base)}))
        ref = write_ref(model, tmp_path / "work", HashCache(None))
        assert ref["relative_to_workdir"] == relative and ref["saved_path"] == str(base.resolve())


def test_umind_versions_takes_version_0_and_searches_the_model_folder_first(tmp_path):
    """Version 0 is the configured model (a rollback to it is valid); `--model` is searched for a moved base
    before the bundled demo model."""
    import argparse

    from umind_core.commands.versions import _store, _version
    from umind_core.demo import DEMO_MODEL_DIR

    assert _version("0") == 0
    with pytest.raises(argparse.ArgumentTypeError, match=">= 0, got -1"):
        _version("-1")
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "versions.json").write_text("{}")
    (tmp_path / "conf_model").mkdir()
    store = _store(argparse.Namespace(workdir=str(tmp_path / "work"), model=str(tmp_path / "conf_model")))
    assert list(store.search_paths) == [(tmp_path / "conf_model").resolve(), DEMO_MODEL_DIR]
