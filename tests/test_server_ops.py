"""Operations that refuse what they cannot do, against the real server: a rollback to a missing version is a 400
when it arrives, a rejected version is served only when forced (and /info says so), a version whose base moved
still loads, /info shows the running train's progress, and SIGTERM to the server ends its training subprocess,
which the next start reports as killed and, with the retrain trigger on, trains again.

One server for the file, tests in order; the workdir starts with version 1, rejected, made offline on a base
folder that was then moved to where conf `model` now points.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import signal
import time

import numpy as np
import pytest
import requests
from PIL import Image

from conftest import lesion_boxes, make_image
from server_utils import start_server
from version_fixtures import make_version, save_conf_model

pytestmark = [pytest.mark.server, pytest.mark.slow]
psutil = pytest.importorskip("psutil")


@pytest.fixture(scope="module")
def server(tmp_path_factory, tiny_model_factory):
    from umind_core.versions import VersionStore

    root = tmp_path_factory.mktemp("umind_ops")
    studies, workdir = root / "studies", root / "work"
    studies.mkdir()
    for i in range(3):
        Image.fromarray(make_image(i)).save(studies / f"img{i}.png")
    original = save_conf_model(tiny_model_factory, root / "checkout_before" / "model")
    make_version(VersionStore(workdir, search_paths=[]), original, 1, "rejected")
    shutil.move(str(original.parent), str(root / "checkout_after"))  # the checkout moved after the run
    conf = {"model": str(root / "checkout_after" / "model"), "workdir": str(workdir), "retrain_every": "0",
            "max_new_tokens": "32", "max_steps": "2", "val_fraction": "0.4", "rehearsal_pool": "4",
            "regression_size": "2", "gate_min_samples": "1"}
    srv = start_server(studies, conf, root / "server.log", env={"MONAI_LABEL_AUTO_UPDATE_SCORING": "false"})
    srv.root, srv.studies, srv.workdir, srv.conf = root, studies, workdir, conf
    yield srv
    srv.stop()


def train(server, body: dict) -> requests.Response:
    return requests.post(f"{server.url}/train/umind_lora", json=body, timeout=60)


def umind_info(server) -> dict:
    return server.get_json("/info/")["umind"]


def test_a_rollback_to_a_missing_version_is_refused_when_it_arrives(server):
    resp = train(server, {"rollback": 5})
    assert resp.status_code == 400, resp.text
    assert "version 5 does not exist; available versions: 0, 1 (rejected)" in resp.json()["detail"]
    assert requests.get(f"{server.url}/train/", timeout=30).status_code == 404  # no task was queued
    assert umind_info(server)["current_version"] == 0


def test_a_rejected_version_is_served_only_when_forced_and_info_says_so(server):
    resp = train(server, {"rollback": 1})
    assert resp.status_code == 400 and "rejected by the gate" in resp.json()["detail"], resp.text
    assert train(server, {"rollback": 1, "force": True}).status_code == 200
    assert server.wait_train(300)["status"] == "DONE"
    info = umind_info(server)
    assert info["current_version"] == 1 and info["current_forced"] is True
    assert any("forced rollback" in w for w in info["warnings"])
    # version 1's base moved with the checkout: found by its hash in the conf model, and served
    reply = requests.post(f"{server.url}/infer/umind_interpret?image=img0&output=json",
                          data={"params": json.dumps({})}, timeout=300)
    assert reply.status_code == 200, reply.text
    assert reply.json()["umind"]["version"] == 1
    cfg = json.loads((server.workdir / "versions" / "0001" / "model" / "umind_config.json").read_text())
    assert cfg["base_model"] == str((server.root / "checkout_after" / "model" / "base").resolve())
    assert train(server, {"rollback": 0}).status_code == 200
    assert server.wait_train(300)["status"] == "DONE"
    assert umind_info(server)["current_forced"] is False


def _save_label(server, image: str) -> None:
    (y0, y1, x0, x1), = lesion_boxes(256, 256, 1)
    mask = np.zeros((256, 256), dtype=np.uint8)
    mask[y0:y1, x0:x1] = 1
    buf = io.BytesIO()
    Image.fromarray(mask).save(buf, format="PNG")
    resp = requests.put(f"{server.url}/datastore/label?image={image}&tag=final",
                        files={"label": (f"{image}.png", buf.getvalue())},
                        data={"params": json.dumps({"label_names": {"lesion": 1}})}, timeout=60)
    assert resp.status_code == 200, resp.text


def _wait_for_step_line(server, timeout: float = 400.0) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        progress = umind_info(server).get("train_progress") or {}
        if "umind train: step" in (progress.get("line") or ""):
            return progress
        time.sleep(1.0)
    raise AssertionError(f"no step line in /info within {timeout:.0f} s:\n{server.log_tail()}")


def test_sigterm_stops_the_training_subprocess_and_the_next_start_reports_it(server):
    for image in ("img0", "img1", "img2"):
        _save_label(server, image)
    assert train(server, {"max_steps": 400}).status_code == 200
    progress = _wait_for_step_line(server)
    assert " elapsed " in progress["line"] and " eta " in progress["line"]
    version = progress["version"]
    children = psutil.Process(server.proc.pid).children(recursive=True)
    assert children, "the train task runs in a subprocess"
    assert any(os.getsid(c.pid) != os.getsid(server.proc.pid) for c in children)  # in a session of its own

    os.kill(server.proc.pid, signal.SIGTERM)  # the server alone, as a service manager or `kill` would
    server.proc.wait(timeout=60)
    _, alive = psutil.wait_procs(children, timeout=10)
    assert not alive, f"left running: {[(p.pid, p.cmdline()[:3]) for p in alive]}"
    runs = json.loads((server.workdir / "versions.json").read_text())["runs"]
    run = next(r for r in runs if r.get("version") == version)
    assert run["status"] == "killed" and "SIGTERM" in run["error"], run
    assert not (server.workdir / "versions" / f"{version:04d}").exists()

    again = start_server(server.studies, server.conf, server.root / "server2.log",
                         env={"MONAI_LABEL_AUTO_UPDATE_SCORING": "false"})
    try:
        info = umind_info(again)
        last = next(r for r in reversed(info["runs"]) if r.get("version") == version)
        assert last["status"] == "killed" and "SIGTERM" in info["last_error"]
        assert info["train_progress"] is None and info["trigger"]["since_last_run"] == 3  # its labels count again
        assert info["trigger"]["runs_started"] == 0  # retrain_every 0: nothing starts on its own
    finally:
        again.stop()

    # with the trigger on, the killed run's labels are due at start: the server trains again without a new save
    rerun = start_server(server.studies, {**server.conf, "retrain_every": "3"}, server.root / "server3.log",
                         env={"MONAI_LABEL_AUTO_UPDATE_SCORING": "false"})
    try:
        assert umind_info(rerun)["trigger"]["runs_started"] == 1
        assert rerun.wait_train(600)["status"] == "DONE"
        runs = umind_info(rerun)["runs"]
        assert runs[-1]["status"] in ("promoted", "rejected"), runs[-1]
        assert umind_info(rerun)["trigger"]["since_last_run"] == 0
    finally:
        rerun.stop()
