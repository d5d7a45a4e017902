"""End to end: the Slicer module's Lib against the real UMind MONAI Label server.

A headless scene (slicer-core) holds the volume a user would have loaded; `UMindSession` uploads it, runs every
task of the Widget's task list on the real server (a tiny model that has memorised one answer per task on this
image), builds the nodes, and submits a corrected label that the test then finds in the server's datastore.
An examination (several volumes, or frames of a clip, read as one) answers once and puts each object on its view's
volume. What the stub tests in test_slicer_lib.py cannot show: that the Lib's requests are the ones the app accepts,
and that the app's replies land on the right geometry.
"""

from __future__ import annotations

import json
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from conftest import lesion_boxes, make_image
from server_utils import start_server

slicer = pytest.importorskip("slicer")
vtk = pytest.importorskip("vtk")
if not hasattr(slicer, "vtkMRMLScene"):
    pytest.skip("slicer-core (headless MRML) is not installed", allow_module_level=True)

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "slicer_module" / "UMind"))

from UMindLib import geometry as geo  # noqa: E402
from UMindLib import labelfiles as lf  # noqa: E402
from UMindLib import mrml  # noqa: E402
from UMindLib.client import UMindClient, UMindServerError  # noqa: E402
from UMindLib.requests import TASK_PRESETS, RoiBox, RunRequest  # noqa: E402
from UMindLib.workflow import UMindSession  # noqa: E402

pytestmark = [pytest.mark.server, pytest.mark.slow]

SPACING = (0.5, 0.5, 1.0)
ORIGIN = (10.0, 20.0, 30.0)
(Y0, Y1, X0, X1), = lesion_boxes(256, 256, 1)


@pytest.fixture(scope="module")
def server(tmp_path_factory, trained_tiny):
    root = tmp_path_factory.mktemp("umind_slicer_e2e")
    studies, model_dir = root / "studies", root / "model"
    studies.mkdir()
    trained_tiny.save_pretrained(model_dir)
    conf = {"model": str(model_dir), "workdir": str(root / "work"), "retrain_every": "0",
            "max_new_tokens": "64", "rehearsal_pool": "4", "regression_size": "2"}
    srv = start_server(studies, conf, root / "server.log", env={"MONAI_LABEL_AUTO_UPDATE_SCORING": "false"})
    srv.studies = studies
    yield srv
    srv.stop()


@pytest.fixture
def scene():
    s = slicer.vtkMRMLScene()
    mrml.ensure_node_classes(s)
    s.AddNewNodeByClass("vtkMRMLSelectionNode")
    return s


def scan_volume(scene, name: str, pixels: np.ndarray, spacing=SPACING):
    """A 256x256 frame as Slicer loads a 2D scan: one slice, LPS file directions, 0.5 mm pixels (or ``spacing``)."""
    from vtk.util import numpy_support

    vol = scene.AddNewNodeByClass("vtkMRMLScalarVolumeNode", name)
    img = vtk.vtkImageData()
    img.SetDimensions(256, 256, 1)
    img.GetPointData().SetScalars(numpy_support.numpy_to_vtk(np.ascontiguousarray(pixels).ravel(), deep=True))
    vol.SetAndObserveImageData(img)
    vol.SetSpacing(*spacing)
    vol.SetOrigin(*ORIGIN)
    vol.SetIJKToRASDirections(-1, 0, 0, 0, -1, 0, 0, 0, 1)
    return vol


@pytest.fixture
def volume(scene):
    return scan_volume(scene, "us scan", make_image(0)[..., 0])


@pytest.fixture
def session(server, scene):
    return UMindSession(scene, UMindClient(server.url, timeout=120))


def lesion_mask() -> np.ndarray:
    m = np.zeros((256, 256), bool)
    m[Y0:Y1, X0:X1] = True
    return m


def dice(a: np.ndarray, b: np.ndarray) -> float:
    return float(2 * (a & b).sum() / max(a.sum() + b.sum(), 1))


def ras(volume, i: float, j: float, k: float = 0.0) -> list[float]:
    return [float(v) for v in geo.ijk_to_ras(mrml.volume_geometry(volume).ijk_to_ras, (i, j, k))]


def ijk(volume, point) -> np.ndarray:
    return np.asarray(geo.ras_to_ijk(mrml.volume_geometry(volume).ras_to_ijk, point))


def test_info_offers_a_model_for_every_task_of_the_widget(session):
    info = session.info()
    assert info.model_version == "0"
    models = {preset.model for preset in TASK_PRESETS.values()} | {"umind_interactive"}
    assert models <= set(info.models)
    assert "umind_lora" in info.trainers and "umind_uncertainty" in info.strategies


def test_segment_becomes_a_named_segment_on_the_lesion(session, scene, volume):
    reply, nodes = session.run(volume, RunRequest("segment", prompt="lesion",
                                                  available_models=list(session.info().models)))
    assert reply.label_names == {"lesion": 1}
    seg = nodes.segmentation.GetSegmentation()
    assert seg.GetNumberOfSegments() == 1 and seg.GetNthSegment(0).GetName() == "lesion"
    mask = mrml.segment_array(scene, nodes.segmentation, seg.GetNthSegmentID(0), volume)[0].astype(bool)
    assert dice(mask, lesion_mask()) > 0.7  # the memorised lesion, on the volume's own voxels


def test_interactive_click_and_roi_go_to_the_deepgrow_task(session, scene, volume, monkeypatch):
    sent = []
    infer = session.client.infer
    monkeypatch.setattr(session.client, "infer", lambda model, *a, **kw: sent.append(model) or infer(model, *a, **kw))
    models = list(session.info().models)
    centre = ras(volume, (X0 + X1) / 2, (Y0 + Y1) / 2)
    reply, nodes = session.run(volume, RunRequest("segment", foreground=[centre], background=[ras(volume, 5, 5)],
                                                  available_models=models))
    assert nodes.segmentation is not None and reply.label_names
    roi = RoiBox(center=centre, size=[(X1 - X0) * SPACING[0], (Y1 - Y0) * SPACING[1], SPACING[2]])
    reply, nodes = session.run(volume, RunRequest("segment", prompt="lesion", roi=roi, available_models=models))
    assert sent == ["umind_interactive", "umind_interactive"]
    seg = nodes.segmentation.GetSegmentation()
    mask = mrml.segment_array(scene, nodes.segmentation, seg.GetNthSegmentID(0), volume)[0].astype(bool)
    assert mask.shape == (256, 256)
    # the memorised model never saw a visual prompt, so only the routing and the geometry are checked here;
    # the ROI reached the server as the lesion's voxel box (or the app would have answered 400 for outside)


def test_detect_places_an_roi_over_the_lesion(session, volume):
    _, nodes = session.run(volume, RunRequest("detect", prompt="lesion"))
    assert len(nodes.rois) == 1
    centre = [0.0, 0.0, 0.0]
    nodes.rois[0].GetCenter(centre)
    i, j, _ = ijk(volume, centre)
    assert abs(i - (X0 + X1) / 2) < 12 and abs(j - (Y0 + Y1) / 2) < 12


def test_landmarks_become_fiducials_on_the_lesion(session, volume):
    _, nodes = session.run(volume, RunRequest("landmarks", prompt="lesion centre"))
    points = [p for node in nodes.fiducials for p in
              (node.GetNthControlPointPositionVector(i) for i in range(node.GetNumberOfControlPoints()))]
    assert points
    i, j, _ = ijk(volume, list(points[0]))
    assert abs(i - (X0 + X1) / 2) < 12 and abs(j - (Y0 + Y1) / 2) < 12


def test_measure_line_length_in_mm_matches_the_server(session, volume):
    reply, nodes = session.run(volume, RunRequest("measure", prompt="lesion width"))
    assert len(nodes.lines) == 1
    server_mm = reply.result.objects[0].physical["length_mm"]
    assert nodes.lines[0].GetLineLengthWorld() == pytest.approx(server_mm, rel=1e-3)
    assert server_mm == pytest.approx((X1 - 1 - X0) * SPACING[0], abs=6)  # the memorised width, in mm


@pytest.mark.parametrize("task,prompt,answer", [("diagnose", "", "Benign."),
                                                ("report", "", "Site: breast. Finding: oval lesion."),
                                                ("ask", "Is there a lesion?", "Yes, one lesion.")])
def test_text_answers_land_in_a_text_node(session, volume, task, prompt, answer):
    reply, nodes = session.run(volume, RunRequest(task, prompt=prompt))
    assert reply.answer == answer and nodes.text.GetText() == answer


def test_corrected_label_reaches_the_datastore(session, server, scene, volume):
    _, nodes = session.run(volume, RunRequest("segment", prompt="lesion"))
    seg_node = nodes.segmentation
    corrected = np.zeros((1, 256, 256), np.uint8)
    corrected[0, Y0:Y1, X0:(X0 + X1) // 2] = 1  # the user keeps only the left half
    mrml.label_map_to_segmentation(scene, volume, corrected, {"lesion": 1}, seg_node, True, 0)
    assert seg_node.GetSegmentation().GetNumberOfSegments() == 1
    reply = session.submit(volume, seg_node, nodes.all_markups(), "Benign, corrected by the reader.")
    image_id = volume.GetAttribute(mrml.IMAGE_ID_ATTRIBUTE)
    assert image_id and reply.get("image") == image_id
    with urllib.request.urlopen(f"{server.url}/datastore/label?label={image_id}&tag=final", timeout=60) as r:
        stored = lf.decode_label_file(r.read(), "label.nrrd").array
    assert stored.reshape(-1, 256, 256)[0].astype(bool).tolist() == corrected[0].astype(bool).tolist()
    with urllib.request.urlopen(f"{server.url}/datastore/?output=all", timeout=60) as r:
        ds = json.loads(r.read())
    info = ds["objects"][image_id]["labels"]["final"]["info"]
    assert info["label_names"] == {"lesion": 1}
    assert info["answer"] == "Benign, corrected by the reader."


def test_server_errors_reach_the_user_verbatim(session, volume):
    with pytest.raises(UMindServerError) as err:
        session.client.infer("umind_segment", "no-such-image", {"prompt": "lesion"})
    assert err.value.status == 404 and "no-such-image" in err.value.message


def cine_clip(scene, name: str = "cine"):
    """A clip loaded as a Slicer sequence: the lesion scan, a blank frame, the lesion scan; its browser and proxy."""
    frames = [make_image(0)[..., 0], np.full((256, 256), 200, np.uint8), make_image(0)[..., 0]]
    seq = scene.AddNewNodeByClass("vtkMRMLSequenceNode", name)
    seq.SetIndexName("frame")
    seq.SetIndexType(seq.NumericIndex)
    for f, pixels in enumerate(frames):
        seq.SetDataNodeAtValue(scan_volume(slicer.vtkMRMLScene(), f"f{f}", pixels), str(f))
    browser = scene.AddNewNodeByClass("vtkMRMLSequenceBrowserNode", f"{name} browser")
    browser.SetAndObserveMasterSequenceNodeID(seq.GetID())
    proxy = scan_volume(scene, f"{name} proxy", frames[0])
    browser.AddProxyNode(proxy, seq, False)
    return seq, browser, proxy


def test_cine_clip_runs_on_every_frame_and_results_follow_the_frames(session, scene):
    """A clip loaded as a Slicer sequence: uploaded once, all frames segmented as a segmentation sequence that
    the clip's browser keeps in step, and a run on the current frame lands on the proxy volume."""
    _, browser, proxy = cine_clip(scene)

    _, nodes = session.run(proxy, RunRequest("segment", prompt="lesion", all_frames=True), browser)
    seg_seq = nodes.segmentation_sequence
    assert nodes.segmentation is None
    assert seg_seq.IsA("vtkMRMLSequenceNode") and seg_seq.GetNumberOfDataNodes() == 3
    assert browser.IsSynchronizedSequenceNode(seg_seq)
    overlap = []
    for f in range(3):
        item = seg_seq.GetDataNodeAtValue(str(f))
        names = [item.GetSegmentation().GetNthSegment(i).GetName()
                 for i in range(item.GetSegmentation().GetNumberOfSegments())]
        assert names == ["lesion"]
        mask = mrml.segment_array(scene, item, item.GetSegmentation().GetNthSegmentID(0), proxy)[0].astype(bool)
        overlap.append(dice(mask, lesion_mask()))
    assert overlap[0] > 0.7 and overlap[2] > 0.7  # the lesion frames; frame 1 is a blank frame

    browser.SetSelectedItemNumber(2)
    reply, one = session.run(proxy, RunRequest("detect", prompt="lesion"), browser)
    assert [r.frame_index for r in reply.results] == [2]
    centre = [0.0, 0.0, 0.0]
    one.rois[0].GetCenter(centre)
    i, j, k = ijk(proxy, centre)
    assert abs(i - (X0 + X1) / 2) < 12 and abs(j - (Y0 + Y1) / 2) < 12 and abs(k) < 0.5  # on the proxy's slice


def test_an_examination_of_two_volumes_answers_once_with_each_object_on_its_views_volume(session, scene, monkeypatch):
    """Two volumes uploaded and read as one examination: one answer in the exam's text node, every object
    the model found on the volume of its view, on that view's pixels and measured with that view's spacing (the two
    volumes' spacings differ, so an object placed on the other view would measure otherwise)."""
    first = scan_volume(scene, "exam first view", make_image(0)[..., 0])
    second = scan_volume(scene, "exam second view", make_image(1)[..., 0], spacing=(0.25, 0.25, 1.0))
    sent = []
    infer = session.client.infer
    monkeypatch.setattr(session.client, "infer", lambda model, image, params, **kw:
                        sent.append((model, image, params)) or infer(model, image, params, **kw))
    for task, prompt in (("report", ""), ("measure", "lesion width")):
        reply, nodes = session.run_exam([first, second], RunRequest(task, prompt=prompt))
        ids = [v.GetAttribute(mrml.IMAGE_ID_ATTRIBUTE) for v in (first, second)]
        assert all(ids) and [(v.image, v.frame) for v in reply.views] == [(ids[0], 0), (ids[1], 0)]
        assert sent[-1][:2] == ("umind_interpret", ids[0]) and sent[-1][2]["images"] == ids
        if task == "report":
            assert reply.answer.strip(), "the model answers the examination"
        if reply.answer:
            assert nodes.text.GetName() == f"UMind exam {task}" and nodes.text.GetText() == reply.answer
        for k, volume in enumerate((first, second)):
            for node in nodes.views[k].all_markups():
                assert node.GetAttribute(mrml.EXAM_VIEW_ATTRIBUTE) == str(k) and f"(view {k + 1})" in node.GetName()
                for p in range(node.GetNumberOfControlPoints()):
                    i, j, kk = ijk(volume, node.GetNthControlPointPositionVector(p))
                    # grounding coordinates run over [0, 256] (a box edge or point may sit on the far border)
                    assert -0.5 <= i <= 256 and -0.5 <= j <= 256 and abs(kk) < 0.5
            lines = [o for o in reply.views[k].objects if o.line is not None]
            assert len(nodes.views[k].lines) == len(lines)
            for line, obj in zip(nodes.views[k].lines, lines):
                ends = [ijk(volume, line.GetNthControlPointPositionVector(p))[:2] for p in range(2)]
                assert np.allclose(np.ravel(ends), obj.line, atol=1e-6)
                assert line.GetLineLengthWorld() == pytest.approx(obj.physical["length_mm"], rel=1e-3)
    assert sum(len(v.objects) for v in reply.views) == len(reply.objects)


def test_a_segment_examination_puts_each_views_mask_on_its_volume(session, scene):
    """A segment of two volumes as one examination: each view's label map (inline in the reply) becomes a
    segmentation on that view's volume, named after the view, holding exactly the view's objects' mask pixels."""
    first = scan_volume(scene, "seg exam first", make_image(0)[..., 0])
    second = scan_volume(scene, "seg exam second", make_image(1)[..., 0], spacing=(0.25, 0.25, 1.0))
    reply, nodes = session.run_exam([first, second], RunRequest("segment", prompt="lesion"))
    for k, volume in enumerate((first, second)):
        view = reply.views[k]
        assert view.label_names == {"lesion": 1} and view.label_bytes
        seg_node = nodes.views[k].segmentation
        assert seg_node is not None and seg_node.GetAttribute(mrml.EXAM_VIEW_ATTRIBUTE) == str(k)
        assert f"(view {k + 1})" in seg_node.GetName()
        seg = seg_node.GetSegmentation()
        assert seg.GetNumberOfSegments() == 1 and seg.GetNthSegment(0).GetName() == "lesion"
        mask = mrml.segment_array(scene, seg_node, seg.GetNthSegmentID(0), volume)[0].astype(bool)
        assert mask.shape == (256, 256)
        expected = sum((o.mask or {}).get("pixels", 0) for o in view.objects)
        assert int(mask.sum()) == expected


def test_the_frames_of_a_clip_read_as_one_examination(session, scene):
    seq, browser, proxy = cine_clip(scene, "exam cine")
    reply, nodes = session.run_exam_frames(proxy, RunRequest("report"), [2, 0], browser)
    clip_id = seq.GetAttribute(mrml.IMAGE_ID_ATTRIBUTE)
    assert clip_id and [(v.image, v.frame) for v in reply.views] == [(clip_id, 0), (clip_id, 2)]
    assert reply.answer.strip() and nodes.text.GetText() == reply.answer


def test_bad_examinations_are_the_servers_4xx_verbatim_and_place_nothing(session, scene):
    views = [scan_volume(scene, f"exam cap {k}", make_image(0)[..., 0]) for k in range(5)]
    with pytest.raises(UMindServerError) as err:
        session.run_exam(views, RunRequest("report"))
    assert err.value.status == 400 and "max_exam_views = 4" in err.value.message
    twin = scan_volume(scene, "exam twin", make_image(0)[..., 0])
    twin.SetAttribute(mrml.IMAGE_ID_ATTRIBUTE, views[0].GetAttribute(mrml.IMAGE_ID_ATTRIBUTE))
    with pytest.raises(UMindServerError) as err:
        session.run_exam([views[0], views[1], twin], RunRequest("report"))
    assert err.value.status == 400 and "listed twice" in err.value.message
    gone = scan_volume(scene, "exam gone", make_image(0)[..., 0])
    gone.SetAttribute(mrml.IMAGE_ID_ATTRIBUTE, "no-such-image")
    with pytest.raises(UMindServerError) as err:
        session.run_exam([views[0], gone], RunRequest("diagnose"))
    assert err.value.status == 404 and "no-such-image" in err.value.message
    assert scene.GetNodesByClass("vtkMRMLTextNode").GetNumberOfItems() == 0
    assert scene.GetNodesByClass("vtkMRMLMarkupsNode").GetNumberOfItems() == 0


def test_next_sample_then_train_from_the_panel_with_progress(session, server, scene, volume):
    """Next sample, then Train: the job's progress reaches the panel through /train/ and a new version is
    recorded. The earlier test saved one label; a second image labelled here gives the held-out split one."""
    from UMindLib.replies import train_progress

    image_id, data, name = session.next_sample("first")
    assert image_id and data and name
    second = volume
    second.SetName("second scan")
    _, nodes = session.run(second, RunRequest("segment", prompt="lesion"))
    assert session.submit(second, nodes.segmentation).get("image") == second.GetAttribute(mrml.IMAGE_ID_ATTRIBUTE)

    started = session.client.train_start("umind_lora", {"max_steps": 2, "val_fraction": 0.5})
    assert started.get("status") in ("SUBMITTED", "RUNNING"), started
    status, deadline = {}, time.monotonic() + 300
    while time.monotonic() < deadline:
        status = session.client.train_status()
        if status.get("status") not in ("SUBMITTED", "RUNNING"):
            break
        assert 0.0 <= train_progress(status) <= 100.0
        time.sleep(1.0)
    assert status.get("status") == "DONE", json.dumps(status)[:2000]
    assert any("umind train: step 2/2" in line for line in status["details"])
    assert train_progress(dict(status, status="RUNNING")) == 100.0  # from the job's own last step line
    runs = session.info().raw["train_stats"]["umind_lora"]["runs"]
    assert runs and runs[-1]["version"] == 1 and runs[-1]["status"] in ("promoted", "rejected")
