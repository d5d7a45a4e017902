"""The annotation loop against the real server: a Slicer submission with markups and a finding becomes every
task's training data, a model without adapter retrains as LoRA with rehearsal and a per-task gate, and faults
(a killed run, a corrupt versions.json, a corrupt promoted version) leave a server that serves and trains.

One server for the file (tests run in order): a tiny fully trained model, small rehearsal and regression sets.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import signal
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import requests
from PIL import Image

from conftest import make_image
from server_utils import start_server

slicer = pytest.importorskip("slicer")
vtk = pytest.importorskip("vtk")
if not hasattr(slicer, "vtkMRMLScene"):
    pytest.skip("slicer-core (headless MRML) is not installed", allow_module_level=True)

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "slicer_module" / "UMind"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "monailabel_app"))

from UMindLib import mrml  # noqa: E402
from UMindLib.client import UMindClient  # noqa: E402
from UMindLib.workflow import UMindSession  # noqa: E402

pytestmark = [pytest.mark.server, pytest.mark.slow]

SPACING, ORIGIN = 0.5, (10.0, 20.0, 30.0)
KP, LINE, BOX = (100, 80), ((40, 60), (140, 60)), (60, 90, 120, 150)  # pixels (x, y); box x1, y1, x2, y2


@pytest.fixture(scope="module")
def server(tmp_path_factory, trained_tiny):
    root = tmp_path_factory.mktemp("umind_loop")
    studies, model_dir, workdir = root / "studies", root / "model", root / "work"
    studies.mkdir()
    trained_tiny.save_pretrained(model_dir)
    for i in range(3):
        Image.fromarray(make_image(i)).save(studies / f"img{i}.png")
    conf = {"model": str(model_dir), "workdir": str(workdir), "retrain_every": "0", "max_new_tokens": "64",
            "max_steps": "2", "epochs": "1", "batch_size": "2", "val_fraction": "0.3", "rehearsal_pool": "4",
            "regression_size": "2", "seed": "0"}
    srv = start_server(studies, conf, root / "server.log", env={"MONAI_LABEL_AUTO_UPDATE_SCORING": "false"})
    srv.root, srv.workdir, srv.model_dir = root, workdir, model_dir
    yield srv
    srv.stop()


def ras(x: float, y: float) -> list[float]:
    """RAS of pixel (x, y) of the scan volume below (IJK->RAS directions -1, -1, 1)."""
    return [ORIGIN[0] - SPACING * x, ORIGIN[1] - SPACING * y, ORIGIN[2]]


def scan_volume(scene):
    from vtk.util import numpy_support

    vol = scene.AddNewNodeByClass("vtkMRMLScalarVolumeNode", "loop scan")
    img = vtk.vtkImageData()
    img.SetDimensions(256, 256, 1)
    img.GetPointData().SetScalars(numpy_support.numpy_to_vtk(make_image(5)[..., 0].ravel(), deep=True))
    vol.SetAndObserveImageData(img)
    vol.SetSpacing(SPACING, SPACING, 1.0)
    vol.SetOrigin(*ORIGIN)
    vol.SetIJKToRASDirections(-1, 0, 0, 0, -1, 0, 0, 0, 1)
    return vol


def markup_nodes(scene):
    fid = scene.AddNewNodeByClass("vtkMRMLMarkupsFiducialNode", "upper pole")
    fid.AddControlPoint(vtk.vtkVector3d(*ras(*KP)), "upper pole")
    line = scene.AddNewNodeByClass("vtkMRMLMarkupsLineNode", "lesion length")
    for p in LINE:
        line.AddControlPoint(vtk.vtkVector3d(*ras(*p)))
    roi = scene.AddNewNodeByClass("vtkMRMLMarkupsROINode", "lesion")
    x1, y1, x2, y2 = BOX
    roi.SetCenter(*ras((x1 + x2) / 2, (y1 + y2) / 2))
    roi.SetSize(SPACING * (x2 - x1), SPACING * (y2 - y1), 1.0)
    outside = scene.AddNewNodeByClass("vtkMRMLMarkupsFiducialNode", "apex")
    outside.AddControlPoint(vtk.vtkVector3d(*ras(400, 10)), "apex")  # beyond the 256-pixel image
    return [fid, line, roi, outside]


def save_png_label(server, image: str, names=None) -> dict:
    m = np.zeros((256, 256), np.uint8)
    m[60:140, 50:130] = 1
    buf = io.BytesIO()
    Image.fromarray(m).save(buf, format="PNG")
    resp = requests.put(f"{server.url}/datastore/label?image={image}&tag=final",
                        files={"label": (f"{image}.png", buf.getvalue())},
                        data={"params": json.dumps({"label_names": names or {"lesion": 1}})}, timeout=60)
    assert resp.status_code == 200, resp.text
    return resp.json()


def train(server, params: dict, timeout: float = 600) -> dict:
    resp = requests.post(f"{server.url}/train/umind_lora", json=params, timeout=60)
    assert resp.status_code == 200, resp.text
    return wait_train(server, timeout)


def wait_train(server, timeout: float = 600) -> dict:  # against a hang only; a run here takes under a minute
    return server.wait_train(timeout)


def info(server) -> dict:
    resp = requests.get(f"{server.url}/info/", timeout=30)
    assert resp.status_code == 200, resp.text
    return resp.json()["umind"]


def exported(server, version: int) -> dict:
    """The records of a version's training run by datastore image (train and held-out manifests)."""
    from umind_core.data.manifest import read_manifest

    data = server.workdir / "versions" / f"{version:04d}" / "data"
    out = {}
    for name in ("train.jsonl", "val.jsonl"):
        for rec in read_manifest(data / name):
            out.setdefault(rec.extra.get("source", {}).get("datastore_image", rec.id), []).append(rec)
    return out


# ----------------------------------------------------------------------------------------------- tests
def test_markups_and_finding_from_slicer_train_every_task_with_lora_rehearsal_and_a_gate(server):
    import random

    from umind_core.data.conversations import build_conversations

    scene = slicer.vtkMRMLScene()
    mrml.ensure_node_classes(scene)
    scene.AddNewNodeByClass("vtkMRMLSelectionNode")
    session = UMindSession(scene, UMindClient(server.url, timeout=120))
    volume = scan_volume(scene)
    labels = np.zeros((1, 256, 256), np.uint8)
    labels[0, 90:150, 60:120] = 1
    seg = mrml.label_map_to_segmentation(scene, volume, labels, {"lesion": 1}, None, True, 0)
    reply = session.submit(volume, seg, markup_nodes(scene), finding="malignant", landmark_target="lesion")
    image_id = volume.GetAttribute(mrml.IMAGE_ID_ATTRIBUTE)
    assert reply.get("image") == image_id
    for i in range(3):
        save_png_label(server, f"img{i}")

    assert train(server, {})["status"] == "DONE"
    run = info(server)["runs"][-1]
    assert run["status"] in ("promoted", "rejected") and run["adapter"] == "attached fresh"
    assert run["trained_from"] == 0  # retrain_from "start": every run trains the start model on all labels
    assert any("'apex': a point (400.0, 10.0) lies outside the 256x256 image" in n for n in run["notes"])

    (rec,) = exported(server, 1)[image_id]
    ann = rec.annotations
    assert ann.diagnosis == "malignant"
    lesion = next(o for o in ann.objects if o.label == "lesion")
    assert lesion.box == pytest.approx(BOX, abs=0.6)  # the ROI replaces the mask's own box
    assert [k.name for k in lesion.keypoints] == ["upper pole"]
    assert lesion.keypoints[0].xy == pytest.approx(KP, abs=0.6)
    (line,) = lesion.lines
    assert line.name == "lesion length" and line.xy == pytest.approx((*LINE[0], *LINE[1]), abs=0.6)
    assert line.length_mm == pytest.approx(100 * SPACING, abs=0.5)
    tasks = {c.task for c in build_conversations(rec, 256, 256, random.Random(0))}
    assert {"segment", "detect", "keypoints", "measure", "diagnose"} <= tasks

    # rehearsal in the training set; the version holds only what changed and refers to its base
    train_recs = [r for recs in exported(server, 1).values() for r in recs if r.conversations]
    assert run["n_rehearsal_records"] > 0
    assert sum(r.id.startswith("rehearsal-") for r in train_recs) == run["n_rehearsal_records"]
    vdir = server.workdir / "versions" / "0001" / "model"
    cfg = json.loads((vdir / "umind_config.json").read_text())
    assert cfg["lora"] is not None and cfg["base_model"] == str((server.model_dir / "base").resolve())
    assert (vdir / "adapter").is_dir() and not (vdir / "base").exists()
    assert run["version_bytes"] < run["base_bytes"]
    trainer = server.workdir / "versions" / "0001" / "trainer"  # no resume state, no second copy of the model
    assert not (trainer / "checkpoints").exists() and not (trainer / "final").exists()
    # every set scored per task, before and after
    assert set(run["gate"]) == {"held-out labels", "synthetic regression"}
    assert {row["task"] for row in run["gate"]["synthetic regression"]} >= {"segment", "detect"}
    assert "synthetic regression" in run["gate_table"]
    # the first run's served version is the start: the synthetic set is judged against its scores
    start = run["scores_start"]["synthetic regression"]
    assert start == run["scores_current"]["synthetic regression"]
    seg = next(row for row in run["gate"]["synthetic regression"] if row["task"] == "segment")
    assert seg["start"] == pytest.approx(start["segmentation_miou"], abs=1e-4)
    from UMindLib.replies import run_summary  # what the Slicer panel shows when the run ends

    text = run_summary(requests.get(f"{server.url}/info/", timeout=30).json())
    assert text.startswith(f"Run 1: {run['status']} in ") and run["gate_table"] in text


def test_a_killed_run_is_reported_and_its_labels_count_again(server):
    before = info(server)
    labels_before = sorted(requests.get(f"{server.url}/datastore/?output=all", timeout=30).json()["objects"])
    requests.post(f"{server.url}/train/umind_lora", json={"max_steps": 500}, timeout=60).raise_for_status()
    state_path, deadline, run = server.workdir / "versions.json", time.monotonic() + 300, None
    while time.monotonic() < deadline and run is None:
        runs = json.loads(state_path.read_text())["runs"]
        run = next((r for r in runs if r.get("status") == "running"), None)
        time.sleep(0.5)
    assert run is not None, server.log_tail()
    time.sleep(3.0)  # into the run: exporting, scoring or training
    os.kill(run["pid"], signal.SIGKILL)
    assert wait_train(server)["status"] == "ERROR"

    after = info(server)
    last = after["runs"][-1]
    assert last["version"] == run["version"] and last["status"] == "killed" and "killed" in after["last_error"]
    assert after["current_version"] == before["current_version"]
    assert not (server.workdir / "versions" / f"{run['version']:04d}").exists()  # nothing half-made
    assert sorted(requests.get(f"{server.url}/datastore/?output=all", timeout=30).json()["objects"]) == labels_before
    assert after["trigger"]["since_last_run"] == before["trigger"]["since_last_run"]  # nothing consumed

    assert train(server, {})["status"] == "DONE"  # and the next run works, cleaning the leftovers
    assert info(server)["runs"][-1]["status"] in ("promoted", "rejected")
    assert not list((server.workdir / "versions").glob(".*.tmp-*"))


def test_a_corrupt_versions_file_is_rebuilt_from_the_run_records(server):
    served = info(server)["current_version"]
    (server.workdir / "versions.json").write_text("{ half a file")
    now = info(server)
    assert any("rebuilt from" in w for w in now["warnings"])
    promoted = [r["version"] for r in now["runs"] if r.get("status") == "promoted"]
    assert now["current_version"] == (promoted[-1] if promoted else 0)
    assert served in (now["current_version"], 0)  # a rollback is the one thing a rebuild cannot know
    resp = requests.post(f"{server.url}/infer/umind_segment?image=img0&output=json",
                         data={"params": json.dumps({"prompt": "lesion"})}, timeout=120)
    assert resp.status_code == 200, resp.text


def test_a_corrupt_promoted_version_falls_back_to_the_last_good_one(server):
    state = json.loads((server.workdir / "versions.json").read_text())
    good = state["current"]
    # promote a version whose folder is broken: a copy of the served model without its adapter weights
    bad = max([r["version"] for r in state["runs"] if isinstance(r.get("version"), int)] + [good]) + 1
    src = server.workdir / "versions" / f"{good:04d}" if good else None
    bad_dir = server.workdir / "versions" / f"{bad:04d}"
    if src is not None:
        shutil.copytree(src, bad_dir)
    else:
        (bad_dir / "model").mkdir(parents=True)
    (bad_dir / "model" / "umind_config.json").write_text("not json")
    state["runs"].append({"version": bad, "status": "promoted"})
    state["current"] = bad
    (server.workdir / "versions.json").write_text(json.dumps(state))

    resp = requests.post(f"{server.url}/infer/umind_segment?image=img1&output=json",
                         data={"params": json.dumps({"prompt": "lesion"})}, timeout=120)
    assert resp.status_code == 200, resp.text
    assert resp.json()["umind"]["version"] == good
    warnings = info(server)["warnings"]
    assert any(f"version {bad} cannot be loaded" in w and f"serving version {good}" in w for w in warnings)
