"""UMindLib under pytest: headless MRML from slicer-core; the HTTP client and whole round trips against the
real UMind MONAI Label server (tests/real_server.py), through a proxy that keeps each request and reply."""

from __future__ import annotations

import email.parser
import email.policy
import io
import json
import socket
import sys
import time
from pathlib import Path

import numpy as np
import pytest

slicer = pytest.importorskip("slicer")
vtk = pytest.importorskip("vtk")
if not hasattr(slicer, "vtkMRMLScene"):
    pytest.skip("slicer-core (headless MRML) is not installed", allow_module_level=True)

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "slicer_module" / "UMind"))

from UMindLib import geometry as geo  # noqa: E402
from UMindLib import labelfiles as lf  # noqa: E402
from UMindLib import mrml, submit  # noqa: E402
from UMindLib.client import MultipartFile, UMindClient, UMindServerError  # noqa: E402
from UMindLib.replies import (ExamReply, InferReply, ParsedReply, ReplyError, ServerResult,  # noqa: E402
                              parse_reply, train_progress)
from UMindLib.requests import (ImageTarget, RequestError, RoiBox, RunRequest,  # noqa: E402
                               build_exam_frames_request, build_exam_request, build_infer_request, exam_tasks,
                               model_for_task)
from UMindLib.workflow import UMindSession, markup_positions, roi_box  # noqa: E402

SPACING = (0.5, 0.25, 2.0)
ORIGIN = (10.0, 20.0, 30.0)
DIMS = (60, 40, 3)  # I, J, K


@pytest.fixture
def scene():
    s = slicer.vtkMRMLScene()
    mrml.ensure_node_classes(s)
    s.AddNewNodeByClass("vtkMRMLSelectionNode")  # quiets the unit look-ups of measurements
    return s


def make_volume(scene, dims=DIMS, spacing=SPACING, origin=ORIGIN, name="img", values=None):
    vol = scene.AddNewNodeByClass("vtkMRMLScalarVolumeNode", name)
    img = vtk.vtkImageData()
    img.SetDimensions(*dims)
    from vtk.util import numpy_support

    arr = values if values is not None else \
        (np.arange(np.prod(dims)) % 251).astype(np.uint8).reshape(dims[::-1])
    img.GetPointData().SetScalars(numpy_support.numpy_to_vtk(arr.ravel(), deep=True))
    vol.SetAndObserveImageData(img)
    vol.SetSpacing(*spacing)
    vol.SetOrigin(*origin)
    vol.SetIJKToRASDirections(-1, 0, 0, 0, -1, 0, 0, 0, 1)  # a file in LPS, as Slicer loads it
    return vol


@pytest.fixture
def volume(scene):
    return make_volume(scene)


def frame_labels():
    lab = np.zeros(DIMS[1::-1], np.uint8)
    lab[5:10, 5:20] = 1
    lab[20:30, 30:50] = 2
    return lab


def server_result_dict(frame_index=1, spacing=SPACING[:2]):
    """A Result dict exactly as umind_core writes it (its to_dict), with physical filled."""
    from umind_core.answers.results import GroundedObject, Result

    mask = np.zeros(DIMS[1::-1], bool)
    mask[5:10, 5:20] = True
    res = Result(task="measure", prompt="Measure the nodule.", answer="A 9 mm nodule.",
                 frame_index=frame_index, image_size=DIMS[:2], objects=[
                     GroundedObject(label="nodule", box=(5, 5, 20, 10), points=[(7, 6), (18, 9)],
                                    line=(5, 5, 20, 10), mask=mask, score=0.9),
                     GroundedObject(label="cyst", points=[(40, 25)])])
    res.attach_geometry(spacing)
    return res.to_dict({0: "r.mask0.png"})


# geometry -------------------------------------------------------------------------------

def test_ras_ijk_round_trip_and_lps_flip(volume):
    g = mrml.volume_geometry(volume)
    ras = geo.ijk_to_ras(g.ijk_to_ras, (4, 6, 2))
    assert np.allclose(ras, [10 - 4 * 0.5, 20 - 6 * 0.25, 30 + 2 * 2.0])
    assert np.allclose(geo.ras_to_ijk(g.ras_to_ijk, ras), (4, 6, 2))
    assert geo.ras_to_lps([1, 2, 3]) == [-1, -2, 3] and geo.lps_to_ras([-1, -2, 3]) == [1, 2, 3]
    assert np.allclose(g.spacing, SPACING)
    with pytest.raises(geo.GeometryError, match="outside the image"):
        geo.ijk_index((60.2, 0, 0), DIMS)
    with pytest.raises(geo.GeometryError, match="4x4"):
        geo.as_matrix(np.eye(3))


def test_roi_extent_is_clipped_and_refuses_boxes_outside(volume):
    g = mrml.volume_geometry(volume)
    corners = [geo.ijk_to_ras(g.ijk_to_ras, c) for c in [(-5, 3, 0), (10, 12, 1)]]
    assert geo.box_ras_to_ijk_extent(g.ras_to_ijk, corners, DIMS) == [0, 10, 3, 12, 0, 1]
    far = [geo.ijk_to_ras(g.ijk_to_ras, c) for c in [(100, 3, 0), (120, 12, 1)]]
    with pytest.raises(geo.GeometryError, match="outside the image"):
        geo.box_ras_to_ijk_extent(g.ras_to_ijk, far, DIMS)


# label files ----------------------------------------------------------------------------

@pytest.mark.parametrize("ext", [".nrrd", ".nii.gz", ".nii"])
def test_decodes_label_maps_written_by_simpleitk(tmp_path, ext):
    sitk = pytest.importorskip("SimpleITK")
    v = (np.arange(3 * 7 * 12).reshape(3, 7, 12) % 4).astype(np.uint8)
    img = sitk.GetImageFromArray(v)
    img.SetSpacing((0.5, 0.3, 2.0))
    sitk.WriteImage(img, str(tmp_path / f"x{ext}"), True)
    out = lf.decode_label_file((tmp_path / f"x{ext}").read_bytes(), f"x{ext}")
    assert out.array.dtype == np.uint8 and np.array_equal(out.array, v)


@pytest.mark.parametrize("optimize", [False, True])
def test_decodes_png_label_maps_written_by_pillow(optimize):
    from PIL import Image

    rng = np.random.default_rng(0)
    a = rng.integers(0, 6, (37, 53)).astype(np.uint8)
    a[:, :10] = np.arange(10)  # smooth rows make Pillow choose Sub/Paeth filters
    buf = io.BytesIO()
    Image.fromarray(a).save(buf, format="PNG", optimize=optimize)
    out = lf.decode_label_file(buf.getvalue(), "x.png")
    assert out.array.shape == (1, 37, 53) and np.array_equal(out.array[0], a)  # row 0 on top


def test_float_and_colour_label_files_are_refused_for_the_right_reason(tmp_path):
    from PIL import Image

    sitk = pytest.importorskip("SimpleITK")
    v = np.full((2, 3, 4), np.nan, np.float32)
    v[0, 0, 0] = 1
    sitk.WriteImage(sitk.GetImageFromArray(v), str(tmp_path / "n.nii.gz"))  # ITK would read NaN as 0
    with pytest.raises(lf.LabelFileError, match="NaN"):
        lf.decode_label_file((tmp_path / "n.nii.gz").read_bytes(), "n.nii.gz")
    a = np.arange(12, dtype=np.uint8).reshape(3, 4)
    for mode, px, why in [("RGB", np.stack([a, 2 * a, a], -1), "channels differ"),
                          ("LA", np.stack([a, a], -1), "grey\\+alpha")]:
        buf = io.BytesIO()
        Image.fromarray(px, mode=mode).save(buf, format="PNG")
        with pytest.raises(lf.LabelFileError, match=why):
            lf.decode_label_file(buf.getvalue(), "c.png")


def test_own_encoders_read_back_by_simpleitk(tmp_path):
    sitk = pytest.importorskip("SimpleITK")
    v = (np.arange(3 * 7 * 12).reshape(3, 7, 12) % 5).astype(np.uint8)
    m = geo.ijk_to_ras_matrix(ORIGIN, SPACING, np.diag([-1.0, -1.0, 1.0]))
    (tmp_path / "o.nrrd").write_bytes(lf.encode_nrrd(v, m))
    img = sitk.ReadImage(str(tmp_path / "o.nrrd"))
    assert np.array_equal(sitk.GetArrayFromImage(img), v)
    assert np.allclose(img.GetSpacing(), SPACING)
    assert np.allclose(img.GetOrigin(), [-10, -20, 30])  # LPS on disk
    assert np.array_equal(lf.decode_label_file(lf.encode_png(v[1])).array[0], v[1])
    rgb = np.random.default_rng(1).integers(0, 255, (1, 7, 12, 3)).astype(np.uint8)
    (tmp_path / "rgb.nrrd").write_bytes(lf.encode_image_nrrd(rgb, m))
    img = sitk.ReadImage(str(tmp_path / "rgb.nrrd"))
    assert img.GetNumberOfComponentsPerPixel() == 3
    assert np.array_equal(sitk.GetArrayFromImage(img), rgb)


def test_bad_label_files_raise_clear_errors():
    with pytest.raises(lf.LabelFileError, match="empty"):
        lf.decode_label_file(b"", "a.nrrd")
    with pytest.raises(lf.LabelFileError, match="not a NRRD"):
        lf.decode_label_file(b"hello world", "a.bin")
    with pytest.raises(lf.LabelFileError, match=r"short.nrrd: .*only 2 .*not 16"):  # data shorter than sizes
        lf.decode_label_file(b"NRRD0004\ntype: uchar\ndimension: 2\nsizes: 4 4\n"
                             b"encoding: raw\n\n\x00\x01", "short.nrrd")
    with pytest.raises(lf.LabelFileError, match="detached"):  # never follow a header to another file
        lf.decode_label_file(b"NRRD0004\ntype: uchar\ndimension: 2\nsizes: 4 4\n"
                             b"data file: /etc/passwd\nencoding: raw\n\n", "det.nrrd")
    with pytest.raises(lf.LabelFileError, match="0..255"):
        lf.encode_png(np.full((2, 2), 300, np.uint16))


# replies --------------------------------------------------------------------------------

def test_parses_the_servers_multipart_reply():
    from requests_toolbelt import MultipartEncoder  # what MONAI Label 0.8.5 answers with

    params = {"label_names": {"nodule": 1}, "umind": {"version": 3, "results": [server_result_dict()]}}
    enc = MultipartEncoder(fields={
        "params": (None, json.dumps(params), "application/json"),
        "image": ("/tmp/tmpab12.png", io.BytesIO(lf.encode_png(frame_labels())), "image/png")})
    parsed = parse_reply(enc.to_string(), enc.content_type)
    assert parsed.params == params and parsed.label_filename == "tmpab12.png"
    assert np.array_equal(lf.decode_label_file(parsed.label_bytes).array[0], frame_labels())
    reply = InferReply.from_parsed(parsed)
    assert reply.label_names == {"nodule": 1} and reply.version == "3"
    # taken from the result when params lack one; it states the line's measured length, not the model's 9 mm
    assert reply.answer == "A 7.60 mm nodule."
    obj = reply.result.objects[0]
    assert obj.label == "nodule" and obj.box == (5, 5, 20, 10) and obj.points[1] == (18, 9)
    assert obj.physical["length_mm"] == pytest.approx(np.hypot(15 * 0.5, 5 * 0.25))


def test_json_only_and_file_only_replies():
    parsed = parse_reply(b'{"answer": "benign", "label_names": {}}', "application/json")
    assert parsed.label_bytes is None and InferReply.from_parsed(parsed).answer == "benign"
    parsed = parse_reply(b"\x89PNG...", "image/png", 'attachment; filename="lab.png"')
    assert parsed.params == {} and parsed.label_filename == "lab.png"
    with pytest.raises(ReplyError, match="invalid JSON"):
        parse_reply(b"{nope", "application/json")
    with pytest.raises(ReplyError, match="label_names"):
        InferReply.from_parsed(ParsedReply({"label_names": {"a": "x"}}))
    with pytest.raises(ReplyError, match=r"objects\[0\]\.box"):
        ServerResult.from_dict({"objects": [{"box": [1, 2, 3]}]})
    # umind_detect answers with its .mrk.json as the file part; umind_landmarks (JSON only) with the list
    doc = {"@schema": "https://raw.githubusercontent.com/slicer/slicer/main/x.json", "markups": [{"type": "ROI"}]}
    reply = InferReply.from_parsed(ParsedReply({"umind": {"version": 1}}, json.dumps(doc).encode(), "r.mrk.json"))
    assert reply.markups == doc and reply.label_bytes is None and reply.version == "1"
    assert InferReply.from_parsed(ParsedReply({"markups": [{"type": "Line"}]})).markups == \
        {"markups": [{"type": "Line"}]}
    with pytest.raises(ReplyError, match="markups"):
        InferReply.from_parsed(ParsedReply({"markups": "Line"}))


def test_train_progress_from_the_jobs_log_lines():
    running = {"status": "RUNNING", "details": [
        "[2026-12-03 10:00:01] [INFO] (umind_core.training.trainer) - umind train: step 10/40 loss 0.52 lr 1e-04",
        "[2026-12-03 10:00:02] [INFO] (umind_core.training.trainer) - saving checkpoint"]}
    assert train_progress(running) == 25.0
    assert train_progress({"status": "RUNNING", "details": ["Epoch 3/12 loss 0.1"]}) == 25.0
    assert train_progress({"status": "RUNNING", "details": ["loading the model"]}) == 0.0
    assert train_progress({"status": "DONE", "details": []}) == 100.0
    assert train_progress({"progress": 140}) == 100.0 and train_progress({"progress": "x"}) == 0.0
    assert train_progress(None) == 0.0


# requests -------------------------------------------------------------------------------

def test_request_converts_clicks_and_roi_from_ras_to_voxels(volume):
    g = mrml.volume_geometry(volume)
    fg = geo.ijk_to_ras(g.ijk_to_ras, (12, 7, 1))
    bg = geo.ijk_to_ras(g.ijk_to_ras, (40.3, 30.4, 1))
    roi = RoiBox(center=geo.ijk_to_ras(g.ijk_to_ras, (20, 15, 1)), size=(10 * 0.5, 8 * 0.25, 2.0))
    ask = RunRequest(task="segment", prompt="segment the nodule", foreground=[fg], background=[bg], roi=roi)
    req = build_infer_request(ask, ImageTarget("im1", g.ras_to_ijk, g.dims, n_frames=g.dims[2], frame=1))
    assert req.model == "umind_interactive" and req.output == "all" and req.image_id == "im1"
    p = req.params
    assert p["foreground"] == [[12, 7, 1]] and p["background"] == [[40, 30, 1]]
    assert p["roi"] == [15, 25, 11, 19, 1, 1]
    assert (p["prompt"], p["task"], p["frames"], p["slice"]) == \
        ("segment the nodule", "segment", "current", 1)
    # a clip's proxy holds one frame (k = 0) while the server holds the clip: clicks land on the current frame
    proxy_dims = (g.dims[0], g.dims[1], 1)
    on_proxy = [geo.ijk_to_ras(g.ijk_to_ras, (12, 7, 0))]
    clip = ImageTarget("clip", g.ras_to_ijk, proxy_dims, n_frames=5, frame=3, clip=True)
    p = build_infer_request(RunRequest(task="segment", foreground=on_proxy, roi=RoiBox(
        center=geo.ijk_to_ras(g.ijk_to_ras, (20, 15, 0)), size=(10 * 0.5, 8 * 0.25, 2.0))), clip).params
    assert p["foreground"] == [[12, 7, 3]] and p["roi"] == [15, 25, 11, 19, 3, 3] and p["slice"] == 3
    with pytest.raises(RequestError, match="current frame 5 is outside"):
        build_infer_request(RunRequest(task="report"), ImageTarget("im1", g.ras_to_ijk, g.dims, 5, 5))


def test_request_presets_and_errors(volume):
    g = mrml.volume_geometry(volume)
    target = ImageTarget("", g.ras_to_ijk, g.dims, n_frames=g.dims[2], frame=0)
    req = build_infer_request(RunRequest(task="report"), target)
    assert req.model == "umind_interpret" and req.output == "json"
    assert req.params["task"] == "report" and "prompt" not in req.params  # the server's default applies
    assert "foreground" not in req.params
    req = build_infer_request(RunRequest(task="landmarks", prompt="kidney"), target)
    assert (req.model, req.params["task"], req.params["prompt"]) == ("umind_landmarks", "keypoints", "kidney")
    assert req.params["readout"] == "mask"  # the default: points read off the kidney's mask
    assert build_infer_request(RunRequest(task="detect", readout="tokens"), target).params["readout"] == "tokens"
    assert "readout" not in build_infer_request(RunRequest(task="segment", readout="tokens"), target).params
    with pytest.raises(RequestError, match="readout must be one of mask, tokens, got 'ruler'"):
        build_infer_request(RunRequest(task="measure", readout="ruler"), target)
    req = build_infer_request(RunRequest(task="ask", prompt="Is it cystic?"), target)
    assert req.params["question"] == "Is it cystic?" and "prompt" not in req.params
    with pytest.raises(RequestError, match="needs a question"):
        build_infer_request(RunRequest(task="ask"), target)
    with pytest.raises(RequestError, match="unknown task"):
        build_infer_request(RunRequest(task="paint"), target)
    outside = geo.ijk_to_ras(g.ijk_to_ras, (70, 1, 0))
    with pytest.raises(RequestError, match="positive point .* outside"):
        build_infer_request(RunRequest(task="segment", foreground=[outside]), target)
    assert model_for_task("segment", True, ["umind_segment"]) == "umind_segment"
    with pytest.raises(RequestError, match="no model"):
        model_for_task("detect", False, ["umind_segment"])
    with pytest.raises(RequestError, match="non-negative size"):
        RoiBox([0.0, 0.0, 0.0], [4.0, -2.0, 1.0]).corners()
    assert RoiBox([0.0, 0.0, 0.0], [4.0, 2.0, 0.0]).corners().shape == (8, 3)  # a flat ROI on one slice is fine


# MRML builders --------------------------------------------------------------------------

def test_label_map_becomes_named_segments_on_the_volume_geometry(scene, volume):
    seg = mrml.label_map_to_segmentation(scene, volume, frame_labels(), {"nodule": 1, "cyst": 2},
                                         frame_index=1)
    s = seg.GetSegmentation()
    names = [s.GetNthSegment(i).GetName() for i in range(s.GetNumberOfSegments())]
    colors = {s.GetNthSegment(i).GetColor() for i in range(s.GetNumberOfSegments())}
    assert names == ["nodule", "cyst"] and len(colors) == 2
    for i, value in enumerate((1, 2)):
        a = mrml.segment_array(scene, seg, s.GetNthSegmentID(i), volume)
        assert a.shape == DIMS[::-1]
        assert np.array_equal(a[1], frame_labels() == value) and a[0].sum() == a[2].sum() == 0
    # one labelmap voxel sits exactly on the volume's voxel: same IJK->RAS
    img = s.GetNthSegment(0).GetRepresentation("Binary labelmap")
    m = vtk.vtkMatrix4x4()
    img.GetImageToWorldMatrix(m)
    assert np.allclose(geo.as_matrix(m), mrml.volume_geometry(volume).ijk_to_ras)


def test_replace_or_add_segments(scene, volume):
    seg = mrml.label_map_to_segmentation(scene, volume, frame_labels(), {"nodule": 1, "cyst": 2})
    first_colors = {seg.GetSegmentation().GetNthSegment(i).GetColor() for i in range(2)}
    lab = np.zeros_like(frame_labels())
    lab[0:3, 0:3] = 1
    mrml.label_map_to_segmentation(scene, volume, lab, {"nodule": 1}, seg, replace=False)
    s = seg.GetSegmentation()
    names = [s.GetNthSegment(i).GetName() for i in range(s.GetNumberOfSegments())]
    assert names == ["nodule", "cyst", "nodule 2"]
    assert s.GetNthSegment(2).GetColor() not in first_colors
    mrml.label_map_to_segmentation(scene, volume, lab, {"vessel": 1}, seg, replace=True)
    assert seg.GetSegmentation().GetNumberOfSegments() == 1
    assert seg.GetSegmentation().GetNthSegment(0).GetName() == "vessel"
    with pytest.raises(mrml.MRMLBuildError, match="fits neither"):
        mrml.label_map_to_segmentation(scene, volume, np.zeros((5, 5), np.uint8), {"a": 1})


def test_segmentation_saved_as_seg_nrrd_reads_back_identical(scene, volume, tmp_path):
    seg = mrml.label_map_to_segmentation(scene, volume, frame_labels(), {"nodule": 1, "cyst": 2},
                                         frame_index=2)
    storage = scene.AddNewNodeByClass("vtkMRMLSegmentationStorageNode")
    storage.SetFileName(str(tmp_path / "umind.seg.nrrd"))
    assert storage.WriteData(seg)
    seg2 = scene.AddNewNodeByClass("vtkMRMLSegmentationNode")
    reader = scene.AddNewNodeByClass("vtkMRMLSegmentationStorageNode")
    reader.SetFileName(str(tmp_path / "umind.seg.nrrd"))
    assert reader.ReadData(seg2)
    a, b = seg.GetSegmentation(), seg2.GetSegmentation()
    assert b.GetNumberOfSegments() == 2
    for i in range(2):
        assert b.GetNthSegment(i).GetName() == a.GetNthSegment(i).GetName()
        assert np.allclose(b.GetNthSegment(i).GetColor(), a.GetNthSegment(i).GetColor(), atol=1e-5)
        assert np.array_equal(mrml.segment_array(scene, seg2, b.GetNthSegmentID(i), volume),
                              mrml.segment_array(scene, seg, a.GetNthSegmentID(i), volume))


def test_points_lines_rois_and_answer_nodes(scene, volume):
    res = ServerResult.from_dict(server_result_dict(frame_index=2))
    g = mrml.volume_geometry(volume)
    fid = mrml.add_fiducials(scene, volume, res)
    assert fid.GetNumberOfControlPoints() == 3
    assert [fid.GetNthControlPointLabel(i) for i in range(3)] == ["nodule", "nodule", "cyst"]
    assert np.allclose(fid.GetNthControlPointPositionVector(0), geo.ijk_to_ras(g.ijk_to_ras, (7, 6, 2)))
    (line,) = mrml.add_lines(scene, volume, res)
    assert line.GetName() == "nodule"
    assert line.GetLineLengthWorld() == pytest.approx(res.objects[0].physical["length_mm"], rel=1e-9)
    (roi,) = mrml.add_rois(scene, volume, res)
    center = [0.0, 0.0, 0.0]
    roi.GetCenter(center)
    assert np.allclose(center, geo.ijk_to_ras(g.ijk_to_ras, (12.5, 7.5, 2)))
    assert np.allclose(roi.GetSize(), (15 * 0.5, 5 * 0.25, 2.0))
    assert np.allclose(roi.GetSize()[:2], res.objects[0].physical["box_size_mm"])
    text = mrml.set_answer_text(scene, res.answer)
    assert text.GetText() == f"A {res.objects[0].physical['length_mm']:.2f} mm nodule."
    assert mrml.set_answer_text(scene, "edited", text) is text and text.GetText() == "edited"
    single = make_volume(scene, dims=(60, 40, 1), name="frame")
    assert mrml.add_fiducials(scene, single, res).GetNthControlPointPositionVector(0)[2] == \
        pytest.approx(ORIGIN[2])  # a one-frame volume: the result sits on its only slice


def test_markups_saved_as_mrk_json_are_lps_and_read_back_identical(scene, volume, tmp_path):
    res = ServerResult.from_dict(server_result_dict())
    nodes = [mrml.add_fiducials(scene, volume, res)] + mrml.add_lines(scene, volume, res) + \
        mrml.add_rois(scene, volume, res)
    for i, node in enumerate(nodes):
        path = tmp_path / f"n{i}.mrk.json"
        storage = node.CreateDefaultStorageNode()
        storage.SetFileName(str(path))
        assert storage.WriteData(node)
        doc = json.loads(path.read_text())
        m = doc["markups"][0]
        assert m["coordinateSystem"] == "LPS"
        p0 = node.GetNthControlPointPositionVector(0)
        assert np.allclose(m["controlPoints"][0]["position"], geo.ras_to_lps(p0))
        back = scene.AddNewNodeByClass(node.GetClassName())
        reader = back.CreateDefaultStorageNode()
        reader.SetFileName(str(path))
        assert reader.ReadData(back)
        assert back.GetNumberOfControlPoints() == node.GetNumberOfControlPoints()
        for k in range(node.GetNumberOfControlPoints()):
            assert np.allclose(back.GetNthControlPointPositionVector(k),
                               node.GetNthControlPointPositionVector(k))
            assert back.GetNthControlPointLabel(k) == node.GetNthControlPointLabel(k)
    assert back.GetSize() == pytest.approx(nodes[-1].GetSize())


def test_server_markups_json_becomes_nodes(scene, volume, tmp_path):
    from umind_core.imageio import write_markups_json

    write_markups_json([{"type": "Fiducial", "name": "landmarks",
                         "points_lps": [[-8.0, -18.0, 32.0], [-1.0, -2.0, 3.0]]},
                        {"type": "Line", "name": "diameter",
                         "points_lps": [[0.0, 0.0, 30.0], [3.0, 4.0, 30.0]]}],
                       tmp_path / "m.mrk.json")
    nodes = mrml.markups_dict_to_nodes(scene, json.loads((tmp_path / "m.mrk.json").read_text()))
    assert [n.GetName() for n in nodes] == ["landmarks", "diameter"]
    assert np.allclose(nodes[0].GetNthControlPointPositionVector(0), [8.0, 18.0, 32.0])  # RAS
    assert nodes[1].GetLineLengthWorld() == pytest.approx(5.0)
    with pytest.raises(mrml.MRMLBuildError, match="unsupported type"):
        mrml.markups_dict_to_nodes(scene, {"markups": [{"type": "Hologram"}]})


def _on_head(ij_mm: np.ndarray, centre, a: float, b: float, tilt: float) -> np.ndarray:
    """Normalised radius of in-plane mm points against an ellipse (1 on it)."""
    c, s = np.cos(tilt), np.sin(tilt)
    dx, dy = ij_mm[:, 0] - centre[0], ij_mm[:, 1] - centre[1]
    return np.hypot((dx * c + dy * s) / a, (-dx * s + dy * c) / b)


def test_a_head_circumference_becomes_a_closed_curve_on_its_ellipse_with_its_length(scene, tmp_path):
    """A reply's HC ellipse (non-square pixels, on frame 2 of a volume) -> a vtkMRMLMarkupsClosedCurveNode whose
    points lie on the ellipse, whose length Slicer shows (the length measurement on, as a line's) and measures
    within 1% of the stated perimeter; the server's markups file with that curve loads as the same curve."""
    from umind_core.imageio import write_markups_json
    from umind_core.answers.landmarks import OUTLINE_POINTS, ellipse_axes
    from umind_core.answers.results import GroundedObject, Result

    dims, (sx, sy) = (200, 160, 3), SPACING[:2]
    volume = make_volume(scene, dims=dims, name="head")
    centre, a, b, tilt = (50.0, 20.0), 30.0, 15.0, 0.3  # mm of the image plane
    jj, ii = np.mgrid[0:dims[1], 0:dims[0]].astype(float)
    mask = (_on_head(np.stack([ii.ravel() * sx, jj.ravel() * sy], 1), centre, a, b, tilt) <= 1).reshape(jj.shape)
    long_axis, short_axis = ellipse_axes(mask, (sx, sy))
    res = Result(task="measure", raw_answer="", frame_index=2, image_size=dims[:2],
                 objects=[GroundedObject(label="head circumference", ellipse=(*long_axis, *short_axis))])
    res.attach_geometry((sx, sy))
    stated = res.objects[0].physical["perimeter_mm"]
    reply = InferReply(results=[ServerResult.from_dict(json.loads(json.dumps(res.to_dict())))])

    nodes = mrml.build_result_nodes(scene, volume, reply, None)
    (curve,) = nodes.curves
    assert curve.IsA("vtkMRMLMarkupsClosedCurveNode") and curve.GetName() == "head circumference"
    assert curve in nodes.all_markups() and not nodes.lines
    g = mrml.volume_geometry(volume)
    ijk = np.array([geo.ras_to_ijk(g.ras_to_ijk, curve.GetNthControlPointPositionVector(i))
                    for i in range(curve.GetNumberOfControlPoints())])
    assert ijk.shape == (OUTLINE_POINTS, 3) and ijk[:, 2] == pytest.approx(2.0)  # on the result's frame
    plane = ijk[:, :2] * (sx, sy)
    fitted = _on_head(plane, np.add(long_axis[:2], long_axis[2:]) / 2 * (sx, sy),
                      float(np.hypot(*np.subtract(long_axis[2:], long_axis[:2]) * (sx, sy))) / 2,
                      float(np.hypot(*np.subtract(short_axis[2:], short_axis[:2]) * (sx, sy))) / 2,
                      float(np.arctan2(*(np.subtract(long_axis[2:], long_axis[:2]) * (sx, sy))[::-1])))
    assert fitted == pytest.approx(np.ones(OUTLINE_POINTS), abs=1e-6)  # on the ellipse the reply states
    assert _on_head(plane, centre, a, b, tilt) == pytest.approx(np.ones(OUTLINE_POINTS), abs=min(sx, sy) / b)
    assert curve.GetCurveLengthWorld() == pytest.approx(stated, rel=0.01)
    length = curve.GetMeasurement("length")
    assert length.GetEnabled() and length.GetValue() == pytest.approx(curve.GetCurveLengthWorld())
    assert float(curve.GetAttribute("UMind.ServerLengthMm")) == pytest.approx(stated)

    # the server's markups file (the writer `umind infer` and the infer tasks share) -> the same closed curve
    points = [geo.ras_to_lps(curve.GetNthControlPointPositionVector(i)) for i in range(OUTLINE_POINTS)]
    write_markups_json([{"type": "ClosedCurve", "name": "head circumference", "points_lps": points,
                         "length": stated, "length_unit": "mm"}], tmp_path / "hc.mrk.json")
    (loaded,) = mrml.markups_dict_to_nodes(scene, json.loads((tmp_path / "hc.mrk.json").read_text()))
    assert loaded.IsA("vtkMRMLMarkupsClosedCurveNode") and loaded.GetNumberOfControlPoints() == OUTLINE_POINTS
    assert np.allclose([loaded.GetNthControlPointPositionVector(i) for i in range(OUTLINE_POINTS)],
                       [curve.GetNthControlPointPositionVector(i) for i in range(OUTLINE_POINTS)])
    assert loaded.GetCurveLengthWorld() == pytest.approx(stated, rel=0.01)
    assert loaded.GetMeasurement("length").GetEnabled()


# submitting -----------------------------------------------------------------------------

def test_segments_to_label_map_round_trip(scene, volume):
    full = np.zeros(DIMS[::-1], np.uint8)
    full[1] = frame_labels()
    full[2, 30:35, 2:8] = 3
    names = {"nodule": 1, "cyst": 2, "vessel": 3}
    seg = mrml.label_map_to_segmentation(scene, volume, full, names)
    labels, back = submit.segmentation_to_label_map(scene, seg, volume)
    assert back == names and np.array_equal(labels, full)
    seg2 = mrml.label_map_to_segmentation(scene, volume, labels, back)
    labels2, _ = submit.segmentation_to_label_map(scene, seg2, volume)
    assert np.array_equal(labels2, full)


def test_markups_json_and_label_info_round_trip(scene, volume):
    res = ServerResult.from_dict(server_result_dict())
    nodes = [mrml.add_fiducials(scene, volume, res)] + mrml.add_lines(scene, volume, res)
    doc = submit.markups_to_json(scene, nodes)
    assert [m["type"] for m in doc["markups"]] == ["Fiducial", "Line"]
    assert all(m["coordinateSystem"] == "LPS" for m in doc["markups"])
    again = mrml.markups_dict_to_nodes(scene, doc)
    for a, b in zip(nodes, again):
        assert b.GetNumberOfControlPoints() == a.GetNumberOfControlPoints()
        assert np.allclose(b.GetNthControlPointPositionVector(0), a.GetNthControlPointPositionVector(0))
    info = submit.label_info({"nodule": 1}, "Corrected: benign.", doc)
    assert json.loads(json.dumps(info)) == {"label_names": {"nodule": 1},
                                            "answer": "Corrected: benign.", "markups": doc}
    assert submit.markups_to_json(scene, []) is None


def test_prepare_submission_files_and_errors(scene, volume):
    single = make_volume(scene, dims=(60, 40, 1), name="frame")
    seg = mrml.label_map_to_segmentation(scene, single, frame_labels(), {"nodule": 1, "cyst": 2})
    sub = submit.prepare_submission(scene, single, "img7", seg, answer=" benign ")
    assert sub.file.filename == "img7.png" and sub.info["answer"] == "benign"
    assert np.array_equal(lf.decode_label_file(sub.file.data).array[0], frame_labels())
    seg3 = mrml.label_map_to_segmentation(scene, volume, frame_labels(), {"nodule": 1}, frame_index=1)
    sub3 = submit.prepare_submission(scene, volume, "vol", seg3)
    assert sub3.file.filename == "vol.nrrd"
    assert np.array_equal(lf.decode_label_file(sub3.file.data).array[1], frame_labels())
    assert sub3.info["label_names"] == {"nodule": 1, "label 2": 2}  # unnamed values keep a name
    with pytest.raises(submit.SubmitError, match="no server id"):
        submit.prepare_submission(scene, single, "", seg)
    with pytest.raises(submit.SubmitError, match="nothing to submit"):
        submit.prepare_submission(scene, single, "img7")


# examinations ---------------------------------------------------------------------------
# A stand-in server made of the app's own parts: it keeps what the Lib uploads (or holds a DICOM "in its
# datastore") and answers /infer/umind_interpret with the app's `lib/exam.py exam_reply` on those files as
# umind_core reads them. Only the model's answer (the objects) is given by the test; the door's rules (sites,
# caps, duplicates) are the real server's, in tests/test_exam_server.py and test_slicer_e2e.py.

class ExamStub:
    def __init__(self, tmp_path, objects, answer="One lesion in the second view."):
        self.tmp, self.objects, self.answer = tmp_path, objects, answer
        self.files: dict[str, Path] = {}
        self.proxy, self.httpd = None, None

    def __enter__(self):
        from real_server import start_proxy

        self.proxy, self.httpd = start_proxy("http://127.0.0.1:9")  # every route used is local
        self.proxy.routes[("PUT", "/datastore/image")] = self.put_image
        self.proxy.routes[("POST", "/infer/umind_interpret")] = self.infer
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()

    def put_image(self, ex):
        name, data = multipart_fields(ex)["file"]
        image_id = ex.query["image"]
        self.files[image_id] = self.tmp / f"{image_id}{Path(name).suffix}"
        self.files[image_id].write_bytes(data)
        return 200, "application/json", json.dumps({"image": image_id}).encode()

    def infer(self, ex):
        import copy

        from umind_core.imageio import read_study
        from umind_core.answers.results import Result

        sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "monailabel_app"))
        from lib.exam import exam_reply
        from umind_core.exam_views import read_views

        p = json.loads(multipart_fields(ex)["params"][1])
        own = read_study(self.files[ex.query["image"]])
        if p.get("exam") == "frames":
            exam = read_views([ex.query["image"]] * len(p["frames"]), [own] * len(p["frames"]), p["frames"])
        else:
            studies = [own] + [read_study(self.files[i]) for i in p["images"][1:]]
            exam = read_views(p["images"], studies, [0] * len(studies))
        result = Result(task=p["task"], answer=self.answer, objects=copy.deepcopy(self.objects))
        result.attach_views(exam.frames)
        body = exam_reply(result, exam, p["task"], p.get("prompt"), calibrate=True)
        body.update(geometry=body["exam"]["views"][0]["geometry"], umind={"version": 0, "tasks": [p["task"]]})
        return 200, "application/json", json.dumps(body).encode()


def test_exam_requests_name_every_view_and_refuse_what_the_server_would_not_read(volume, monkeypatch):
    g = mrml.volume_geometry(volume)
    a, b = (ImageTarget(i, g.ras_to_ijk, g.dims, n_frames=3, frame=f) for i, f in (("a", 2), ("b", 1)))
    req = build_exam_request(RunRequest("report"), [a, b])
    assert (req.model, req.image_id, req.output) == ("umind_interpret", "a", "json")
    assert req.params == {"task": "report", "images": ["a", "b"], "slice": 2, "umind_client": "slicer-module"}
    kidney = build_exam_request(RunRequest("landmarks", prompt=" kidney ", readout="tokens"), [a, b]).params
    assert (kidney["prompt"], kidney["readout"]) == ("kidney", "tokens")
    ask = build_exam_request(RunRequest("ask", prompt="Same lesion?"), [a, b]).params
    assert ask["task"] == "ask" and ask["question"] == "Same lesion?" and "prompt" not in ask
    assert exam_tasks() == ["segment", "detect", "landmarks", "measure", "diagnose", "report", "ask"]
    clip = ImageTarget("clip", g.ras_to_ijk, (60, 40, 1), n_frames=5, frame=0, clip=True)
    req = build_exam_frames_request(RunRequest("measure", prompt="kidney length"), clip, [3, 0, 3])
    assert req.image_id == "clip" and req.params == {"task": "measure", "prompt": "kidney length", "exam": "frames",
                                                     "frames": [0, 3], "umind_client": "slicer-module",
                                                     "readout": "mask"}
    for make, words in [
            (lambda: build_exam_request(RunRequest("report"), [a]), "at least two images"),
            (lambda: build_exam_request(RunRequest("ask"), [a, b]), "needs a question"),
            (lambda: build_exam_request(RunRequest("report", foreground=[[0, 0, 0]]), [a, b]), "belong to one image"),
            (lambda: build_exam_request(RunRequest("report", available_models=["umind_segment"]), [a, b]),
             "offers no umind_interpret"),
            (lambda: build_exam_request(RunRequest("report", model="umind_detect"), [a, b]), "read by umind_interpret"),
            (lambda: build_exam_frames_request(RunRequest("report"), clip, [1, 5]), "frame 5 is outside"),
            (lambda: build_exam_frames_request(RunRequest("report"), clip, [1, True]), "frame numbers")]:
        with pytest.raises(RequestError, match=words):
            make()
    import UMindLib.requests as requests_mod

    monkeypatch.setattr(requests_mod, "EXAM_TASKS", ("report",))  # a server whose exams read reports only
    with pytest.raises(RequestError, match="examination runs report, not 'segment'"):
        build_exam_request(RunRequest("segment"), [a, b])


def _exam_params(views=2, objects=()):
    return {"task": "detect", "answer": "ok", "objects": list(objects),
            "exam": {"views": [{"view": k, "image": f"i{k}", "frame": k, "geometry": {"kind": "2d"}, "markups": [],
                                "warnings": []} for k in range(views)]}}


def test_exam_reply_puts_each_object_in_its_view_and_refuses_one_without():
    reply = ExamReply.from_parsed(ParsedReply(_exam_params(objects=[
        {"label": "lesion", "box": [1, 2, 3, 4], "view": 1}, {"label": "cyst", "points": [[5, 6]], "view": 0}])))
    assert [[o.label for o in v.objects] for v in reply.views] == [["cyst"], ["lesion"]]
    assert [(v.image, v.frame) for v in reply.views] == [("i0", 0), ("i1", 1)]
    one = reply.views[1].infer_reply("detect")
    assert one.result.frame_index == 1 and one.result.objects[0].box == (1, 2, 3, 4) and one.answer == ""
    assert one.geometry == {"kind": "2d"}  # the view's own: what `hidden_calibration` reads for its volume
    for params, words in [(_exam_params(objects=[{"box": [1, 2, 3, 4], "view": 2}]), r"objects\[0\]\.view: 2"),
                          (_exam_params(objects=[{"box": [1, 2, 3, 4]}]), r"objects\[0\]\.view: None"),
                          (_exam_params(objects=[{"view": -1}]), "expected a view number"),
                          (_exam_params(views=0), "exam.views"), ({"answer": "a single image's"}, "exam.views")]:
        with pytest.raises(ReplyError, match=words):
            ExamReply.from_parsed(ParsedReply(params))


def _dicom_from_datastore(scene, tmp_path, stub, image_id, col_mm, row_mm):
    """A DICOM calibrated only in its ultrasound regions, held by the server and loaded as Next sample loads it
    (ITK: 1 mm per pixel), with the id attribute that says the server holds it."""
    import fixtures_imaging as fx

    path = fx.with_regions(fx.dicom_mono(tmp_path / f"{image_id}.dcm", fx.ramp(40, 60)), col_mm, row_mm)
    stub.files[image_id] = path
    logic = slicer.vtkSlicerVolumesLogic()
    logic.SetMRMLScene(scene)
    volume = logic.AddArchetypeVolume(str(path), image_id, 8)
    volume.SetAttribute(mrml.IMAGE_ID_ATTRIBUTE, image_id)
    return volume


def _lps(node):
    return [geo.ras_to_lps(node.GetNthControlPointPositionVector(i)) for i in range(node.GetNumberOfControlPoints())]


def test_session_runs_an_exam_and_places_each_views_markups_on_its_volume_in_its_geometry(scene, tmp_path):
    from umind_core.answers.results import GroundedObject

    objects = [GroundedObject(label="lesion", line=(5, 6, 40, 30), view=0),
               GroundedObject(label="lesion", line=(10, 8, 50, 20), box=(10, 8, 50, 20), view=1)]
    with ExamStub(tmp_path, objects) as stub:
        first = _dicom_from_datastore(scene, tmp_path, stub, "us-dicom", 0.15, 0.30)
        second = make_volume(scene, dims=(60, 40, 1), name="second view")  # uploaded by the session
        assert first.GetSpacing()[:2] == pytest.approx((1.0, 1.0))  # ITK does not read the regions
        session = UMindSession(scene, UMindClient(stub.proxy.url, timeout=60))
        reply, nodes = session.run_exam([first, second], RunRequest("measure", prompt="lesion"))
        uploads = [e for e in stub.proxy.exchanges if e.path == "/datastore/image"]
        assert [e.query["image"] for e in uploads] == ["second_view"]  # the datastore's DICOM is not sent again
        infer = stub.proxy.last("POST", "/infer/umind_interpret")
        assert infer.query == {"image": "us-dicom", "output": "json"}
        assert json.loads(multipart_fields(infer)["params"][1]) == {
            "task": "measure", "prompt": "lesion", "images": ["us-dicom", "second_view"], "slice": 0,
            "umind_client": "slicer-module", "readout": "mask"}
        body = json.loads(infer.reply)
        assert [v.image for v in reply.views] == ["us-dicom", "second_view"]
        # each view's own calibration: the hidden one onto the DICOM's volume, the NRRD's own header left as it was
        assert first.GetSpacing() == pytest.approx((0.15, 0.30, 1.0))
        assert second.GetSpacing() == pytest.approx(SPACING)
        assert nodes.text.GetName() == "UMind exam measure" and nodes.text.GetText() == body["answer"]
        assert nodes.volumes == [first, second] and [len(v.lines) for v in nodes.views] == [1, 1]
        for k, (view, volume) in enumerate(zip(body["exam"]["views"], (first, second))):
            (line,) = nodes.views[k].lines
            (obj,) = [o for o in body["objects"] if o["view"] == k]
            assert line.GetName() == f"lesion (view {k + 1})" and line.GetAttribute(mrml.EXAM_VIEW_ATTRIBUTE) == str(k)
            ijk = [geo.ras_to_ijk(mrml.volume_geometry(volume).ras_to_ijk, line.GetNthControlPointPositionVector(i))
                   for i in range(2)]
            assert np.allclose(np.ravel([p[:2] for p in ijk]), obj["line"])  # on this view's pixels
            (server_line,) = [m for m in view["markups"] if m["type"] == "Line"]
            assert np.allclose(_lps(line), server_line["points_lps"])  # where the server's markups put it
            assert line.GetLineLengthWorld() == pytest.approx(obj["physical"]["length_mm"], rel=1e-6)
        (roi,) = nodes.views[1].rois
        assert roi.GetName() == "lesion (view 2)" and np.allclose(roi.GetSize()[:2], (40 * 0.5, 12 * 0.25))
        _, again = session.run_exam([first, second], RunRequest("measure", prompt="lesion"), previous=nodes)
        assert again.text is nodes.text and sum(e.path == "/datastore/image" for e in stub.proxy.exchanges) == 1


def test_a_segment_exam_places_each_views_label_map_on_its_volume(scene, tmp_path):
    """The server's inline label map of each view (`lib/exam.py _view_label`) -> a segmentation on that view's
    volume with exactly that view's mask; a view without an object gets its (empty) segment too, so a rerun clears
    it."""
    from umind_core.answers.results import GroundedObject

    mask = np.zeros((40, 60), bool)  # the second volume's frame: 40 rows of 60
    mask[10:25, 20:45] = True
    with ExamStub(tmp_path, [GroundedObject(label="lesion", mask=mask, view=1)]) as stub:
        first = make_volume(scene, dims=(50, 30, 1), name="first view")
        second = make_volume(scene, dims=(60, 40, 1), name="second view")
        session = UMindSession(scene, UMindClient(stub.proxy.url, timeout=60))
        reply, nodes = session.run_exam([first, second], RunRequest("segment", prompt="lesion"))
        assert [v.label_names for v in reply.views] == [{"lesion": 1}, {"lesion": 1}]
        for k, (volume, want) in enumerate(((first, np.zeros((30, 50), bool)), (second, mask))):
            seg_node = nodes.views[k].segmentation
            assert seg_node.GetName().endswith(f"(view {k + 1})")
            assert seg_node.GetAttribute(mrml.EXAM_VIEW_ATTRIBUTE) == str(k)
            seg = seg_node.GetSegmentation()
            assert seg.GetNumberOfSegments() == 1 and seg.GetNthSegment(0).GetName() == "lesion"
            got = mrml.segment_array(scene, seg_node, seg.GetNthSegmentID(0), volume)[0].astype(bool)
            assert got.shape == want.shape and np.array_equal(got, want)


def test_an_exam_view_label_that_is_not_base64_is_a_reply_error():
    from UMindLib.replies import ExamReply, ParsedReply, ReplyError

    views = [{"view": 0, "image": "a", "frame": 0, "geometry": {}, "markups": [],
              "label": {"file": "labels.png", "data": "%%%", "label_names": {"lesion": 1}}}]
    with pytest.raises(ReplyError, match=r"exam.views\[0\].label.data: not base64"):
        ExamReply.from_parsed(ParsedReply({"exam": {"views": views}, "objects": []}, None, None))


def test_exam_errors_reach_the_user_verbatim_and_place_nothing(scene, tmp_path):
    detail = ("the examination has 5 views (the request's image and 4 in images), more than the 4 allowed by "
              "max_exam_views = 4; choose fewer")
    with ExamStub(tmp_path, []) as stub:
        a, b = (make_volume(scene, dims=(60, 40, 1), name=n) for n in ("a", "b"))
        session = UMindSession(scene, UMindClient(stub.proxy.url, timeout=60))
        stub.proxy.routes[("POST", "/infer/umind_interpret")] = \
            lambda ex: (400, "application/json", json.dumps({"detail": detail}).encode())
        with pytest.raises(UMindServerError) as err:
            session.run_exam([a, b], RunRequest("report"))
        assert err.value.status == 400 and err.value.message == detail
        stub.proxy.routes[("POST", "/infer/umind_interpret")] = lambda ex: stub.infer(_swapped(ex))
        with pytest.raises(mrml.MRMLBuildError, match="not those asked"):
            session.run_exam([a, b], RunRequest("report"))
        assert scene.GetFirstNodeByName("UMind exam report") is None
        assert scene.GetNumberOfNodesByClass("vtkMRMLMarkupsNode") == 0


def _swapped(ex):
    """The exchange with its views in the other order: a reply about other views than those the Lib asked."""
    import dataclasses

    from UMindLib.client import encode_multipart

    p = json.loads(multipart_fields(ex)["params"][1])
    p["images"] = p["images"][::-1]
    body, ctype = encode_multipart({"params": json.dumps(p)})
    return dataclasses.replace(ex, query={**ex.query, "image": p["images"][0]}, body=body,
                               headers={**ex.headers, "Content-Type": ctype})


def test_session_reads_frames_of_a_clip_as_one_exam(scene, tmp_path):
    from umind_core.answers.results import GroundedObject

    objects = [GroundedObject(label="apex", points=[(7, 6)], view=0),
               GroundedObject(label="apex", points=[(9, 8)], view=1)]
    with ExamStub(tmp_path, objects) as stub:
        _, browser, proxy_volume = _clip(scene)
        session = UMindSession(scene, UMindClient(stub.proxy.url, timeout=60))
        reply, nodes = session.run_exam_frames(proxy_volume, RunRequest("landmarks", prompt="apex"), [2, 0], browser)
        (upload,) = [e for e in stub.proxy.exchanges if e.path == "/datastore/image"]
        assert lf.decode_label_file(multipart_fields(upload)["file"][1]).array.shape == (3, 40, 60)  # the whole clip
        sent = json.loads(multipart_fields(stub.proxy.last("POST", "/infer/umind_interpret"))["params"][1])
        assert (sent["task"], sent["exam"], sent["frames"]) == ("keypoints", "frames", [0, 2])
        assert [(v.image, v.frame) for v in reply.views] == [("clip", 0), ("clip", 2)]
        g = mrml.volume_geometry(proxy_volume)
        names = [n.GetName() for n in nodes.all_markups()]
        assert names == ["UMind points (frame 0)", "UMind points (frame 2)"]
        for node, (x, y) in zip(nodes.all_markups(), [(7, 6), (9, 8)]):  # the proxy holds one frame: k = 0
            assert np.allclose(node.GetNthControlPointPositionVector(0), geo.ijk_to_ras(g.ijk_to_ras, (x, y, 0)))
        assert nodes.text.GetName() == "UMind exam landmarks"


def test_a_segment_of_a_clips_frames_puts_each_frames_mask_on_the_proxy(scene, tmp_path):
    """Frames of one clip as views: each view's label map covers the whole clip with the mask on its frame; the
    proxy volume holds one frame, so each view's segmentation takes that frame's slice."""
    from umind_core.answers.results import GroundedObject

    mask = np.zeros((40, 60), bool)
    mask[5:15, 10:30] = True
    with ExamStub(tmp_path, [GroundedObject(label="lesion", mask=mask, view=1)]) as stub:
        _, browser, proxy_volume = _clip(scene)
        session = UMindSession(scene, UMindClient(stub.proxy.url, timeout=60))
        reply, nodes = session.run_exam_frames(proxy_volume, RunRequest("segment", prompt="lesion"), [0, 2], browser)
        assert [(v.frame, lf.decode_label_file(v.label_bytes, v.label_filename).array.shape) for v in reply.views] \
            == [(0, (3, 40, 60)), (2, (3, 40, 60))]
        got = []
        for k in range(2):
            seg_node = nodes.views[k].segmentation
            assert seg_node.GetName().endswith(f"(frame {reply.views[k].frame})")
            seg = seg_node.GetSegmentation()
            got.append(mrml.segment_array(scene, seg_node, seg.GetNthSegmentID(0), proxy_volume)[0].astype(bool))
        assert not got[0].any() and np.array_equal(got[1], mask)


# HTTP client and whole round trips against the real server ---------------------------------
# Replies come from a real `monailabel start_server` with the demo model (tests/real_server.py), through a
# proxy that keeps every request and reply; expectations are read from those bytes with other parsers
# (requests_toolbelt, PIL, SimpleITK) than the Lib's. Only a reply that never comes is made up locally.

@pytest.fixture
def proxy():
    from real_server import shared_server, start_proxy

    server = shared_server()
    p, httpd = start_proxy(server.url)
    p.studies = server.studies
    yield p
    httpd.shutdown()
    httpd.server_close()


def multipart_fields(ex):
    """The fields of a multipart request the Lib sent: {name: (filename, bytes)}."""
    head = f"Content-Type: {ex.headers['Content-Type']}\r\n\r\n".encode()
    msg = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(head + ex.body)
    return {p.get_param("name", header="content-disposition"): (p.get_filename(), p.get_payload(decode=True))
            for p in msg.iter_parts()}


def reply_parts(ex):
    """(params JSON, label file bytes, file name) of a multipart /infer reply, read with requests_toolbelt."""
    from requests_toolbelt.multipart import decoder

    params, data, name = None, None, None
    for part in decoder.MultipartDecoder(ex.reply, ex.content_type).parts:
        disp = part.headers.get(b"Content-Disposition", b"").decode()
        if 'name="params"' in disp:
            params = json.loads(part.text)
        else:
            data, name = part.content, disp.split("filename=")[-1].strip('"')
    return params, data, name


def label_array(data: bytes, name: str) -> np.ndarray:
    """A reply's label file as (frames, rows, cols), read with PIL or SimpleITK."""
    import tempfile

    import SimpleITK as sitk
    from PIL import Image

    if name.endswith(".png"):
        return np.asarray(Image.open(io.BytesIO(data)))[None]
    suffix = ".nii.gz" if name.endswith(".nii.gz") else Path(name).suffix
    with tempfile.NamedTemporaryFile(suffix=suffix) as fh:
        fh.write(data)
        fh.flush()
        return sitk.GetArrayFromImage(sitk.ReadImage(fh.name)).reshape(-1, *sitk.ReadImage(fh.name).GetSize()[1::-1])


def breast_scan():
    """A held-out synthetic breast scan with a lesion (uint8, 256 x 256) and the lesion's centre (x, y)."""
    from umind_core.data.synthetic import generate

    sample = next(s for s in (generate(seed=seed, site="breast", size=256) for seed in range(1_000_003, 1_000_100))
                  if s.objects)
    ys, xs = np.nonzero(sample.objects[0].mask)
    return sample.image, (int(xs.mean()), int(ys.mean()))


@pytest.mark.slow
def test_client_info_infer_and_errors_verbatim(proxy):
    c = UMindClient(proxy.url.replace("http://", ""), timeout=300)
    info = c.info()
    assert info == json.loads(proxy.last("GET", "/info/").reply)
    parsed = c.infer("umind_segment", "img0", {"prompt": "lesion"})
    ex = proxy.last("POST", "/infer/umind_segment")
    assert ex.query == {"image": "img0", "output": "all"}
    assert json.loads(multipart_fields(ex)["params"][1]) == {"prompt": "lesion"}
    params, data, name = reply_parts(ex)
    assert parsed.params == params and params["umind"]["results"]
    assert np.array_equal(lf.decode_label_file(parsed.label_bytes, parsed.label_filename).array,
                          label_array(data, name))
    body = c.infer("umind_interpret", "img0", {"task": "diagnose"}, output="json").params
    assert body == json.loads(proxy.last("POST", "/infer/umind_interpret").reply) and body["answer"]
    with pytest.raises(UMindServerError) as err:
        c.infer("umind_detect", "no-such-image")
    ex = proxy.last("POST", "/infer/umind_detect")
    assert err.value.status == ex.status == 404 and err.value.message == json.loads(ex.reply)["detail"]
    with pytest.raises(ValueError, match="not an http"):
        UMindClient("ftp://host")


def test_client_server_down_and_timeout(proxy):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now
    with pytest.raises(UMindServerError) as err:
        UMindClient(f"http://127.0.0.1:{port}", timeout=2).info()
    assert err.value.status is None and "cannot reach the server" in err.value.message

    def slow(ex):
        time.sleep(1.5)
        return 200, "application/json", b"{}"
    proxy.routes[("GET", "/info/")] = slow
    with pytest.raises(UMindServerError, match="did not answer within 0.3 s"):
        UMindClient(proxy.url, timeout=0.3).info()


def _label_png(image_id):
    lab = np.zeros((256, 256), np.uint8)
    lab[100:140, 90:150] = 1
    return MultipartFile(f"{image_id}.png", lf.encode_png(lab), "image/png")


def test_client_labels_samples_and_training(proxy):
    """In file order this is the first label and the first training on the shared server."""
    c = UMindClient(proxy.url, timeout=300)
    assert c.train_status() == {} and proxy.last("GET", "/train/").status == 404  # "no train task" is an answer
    sample = c.next_sample("umind_uncertainty")
    assert sample == json.loads(proxy.last("POST", "/activelearning/umind_uncertainty").reply)
    assert sample["id"] in ("img0", "img1")
    label = _label_png("img1")
    res = c.save_label("img1", label, {"label_names": {"lesion": 1}, "answer": "benign"})
    ex = proxy.last("PUT", "/datastore/label")
    assert res == json.loads(ex.reply)
    assert res["retrain"] == "counting" and res["retrain_every"] == 100 and res["labels_since_last_run"] >= 1
    assert ex.query == {"image": "img1", "tag": "final"}
    fields = multipart_fields(ex)
    assert fields["label"] == ("img1.png", label.data)
    assert json.loads(fields["params"][1]) == {"label_names": {"lesion": 1}, "answer": "benign"}
    c.save_label("img0", _label_png("img0"))
    with pytest.raises(UMindServerError, match="no sample"):  # every study labelled: the server answers {}
        c.next_sample("first")
    assert json.loads(proxy.last("POST", "/activelearning/first").reply) == {}
    data, name = c.download_image("img0")
    assert data == (proxy.studies / "img0.png").read_bytes() and name == "img0.png"
    started = c.train_start(params={"max_steps": 1})
    assert started == json.loads(proxy.last("POST", "/train/umind_lora").reply)
    # MONAI Label answers with the task's state at that instant: a loaded CI machine may already have started it.
    assert started["status"] in ("SUBMITTED", "RUNNING")
    assert c.train_status()["id"] == started["id"]
    stopped = c.train_stop()
    assert stopped == json.loads(proxy.last("DELETE", "/train/").reply)
    assert stopped["id"] == started["id"] and stopped["status"] == "STOPPED"
    assert c.train_status()["status"] == "STOPPED"


def _scan_volume(scene, pixels, name):
    return make_volume(scene, dims=(pixels.shape[1], pixels.shape[0], 1), name=name, values=pixels[None])


def test_session_run_and_submit_round_trip(proxy, scene):
    pixels, (cx, cy) = breast_scan()
    single = _scan_volume(scene, pixels, "us frame")
    session = UMindSession(scene, UMindClient(proxy.url, timeout=300))
    info = session.info()
    server_info = json.loads(proxy.last("GET", "/info/").reply)
    assert info.model_version == str(server_info["umind"]["current_version"]) and "umind_lora" in info.trainers
    pos = scene.AddNewNodeByClass("vtkMRMLMarkupsFiducialNode")
    g = mrml.volume_geometry(single)
    pos.AddControlPoint(vtk.vtkVector3d(*geo.ijk_to_ras(g.ijk_to_ras, (cx, cy, 0))))
    reply, nodes = session.run(single, RunRequest("segment", foreground=markup_positions(pos),
                                                  available_models=list(info.models)))
    upload = proxy.last("PUT", "/datastore/image")
    assert multipart_fields(upload)["file"][0] == "us_frame.nrrd"
    infer = proxy.last("POST", "/infer/umind_interactive")
    sent = json.loads(multipart_fields(infer)["params"][1])
    assert sent["foreground"] == [[cx, cy, 0]] and sent["task"] == "segment"
    assert infer.query["image"] == json.loads(upload.reply)["image"]
    params, data, name = reply_parts(infer)
    names = sorted(params["label_names"], key=params["label_names"].get)
    assert names, "the demo model segments the clicked lesion"
    s = nodes.segmentation.GetSegmentation()
    assert [s.GetNthSegment(i).GetName() for i in range(s.GetNumberOfSegments())] == names
    labels = label_array(data, name)
    for i, seg_name in enumerate(names):
        a = mrml.segment_array(scene, nodes.segmentation, s.GetNthSegmentID(i), single)
        assert np.array_equal(a, labels == params["label_names"][seg_name])
    session.run(single, RunRequest("segment", foreground=markup_positions(pos), available_models=list(info.models),
                                   model="umind_interactive"))
    assert sum(e.path == "/datastore/image" for e in proxy.exchanges) == 1  # uploaded once
    session.submit(single, nodes.segmentation, nodes.all_markups(), "One lesion, benign.")
    submitted = proxy.last("PUT", "/datastore/label")
    fields = multipart_fields(submitted)
    info_sent = json.loads(fields["params"][1])
    assert info_sent["label_names"] == params["label_names"] and info_sent["answer"] == "One lesion, benign."
    assert np.array_equal(lf.decode_label_file(fields["label"][1], fields["label"][0]).array, labels)
    assert json.loads(submitted.reply)["image"] == infer.query["image"]


def _clip(scene, n=3):
    seq = scene.AddNewNodeByClass("vtkMRMLSequenceNode", "clip")
    seq.SetIndexName("frame")
    seq.SetIndexType(seq.NumericIndex)
    for f in range(n):
        tmp = slicer.vtkMRMLScene()
        vol = make_volume(tmp, dims=(60, 40, 1), values=np.full((1, 40, 60), f * 10, np.uint8))
        seq.SetDataNodeAtValue(vol, str(f))
    browser = scene.AddNewNodeByClass("vtkMRMLSequenceBrowserNode", "clip browser")
    browser.SetAndObserveMasterSequenceNodeID(seq.GetID())
    proxy = make_volume(scene, dims=(60, 40, 1), name="clip proxy")
    browser.AddProxyNode(proxy, seq, False)
    return seq, browser, proxy


def test_cine_clip_frames_and_segmentation_sequence(scene):
    seq, browser, proxy = _clip(scene)
    frames, g = mrml.sequence_frames(seq)
    assert frames.shape == (3, 40, 60) and [int(frames[f, 0, 0]) for f in range(3)] == [0, 10, 20]
    assert np.allclose(g.spacing, SPACING)
    labels = np.stack([frame_labels() * (f % 2) for f in range(3)])
    seg_seq = mrml.segmentation_sequence(scene, browser, labels, {"nodule": 1, "cyst": 2})
    assert seg_seq.GetNumberOfDataNodes() == 3 and browser.IsSynchronizedSequenceNode(seg_seq)
    item = seg_seq.GetDataNodeAtValue("1")
    assert item.GetSegmentation().GetNumberOfSegments() == 2
    assert item.GetSegmentation().GetNthSegment(0).GetName() == "nodule"
    assert scene.GetFirstNodeByName("__umind_frame__") is None
    with pytest.raises(mrml.MRMLBuildError, match="2 label frames for 3"):
        mrml.segmentation_sequence(scene, browser, labels[:2], {"nodule": 1})


def test_the_session_decides_the_frame_once(scene, volume):
    session = UMindSession(scene, client=None)  # images the server knows: nothing to upload
    volume.SetAttribute(mrml.IMAGE_ID_ATTRIBUTE, "im1")
    assert session.image_target(volume).frame == 1  # K = 3 and no slice given: the middle one (umind_core.frames)
    t = session.image_target(volume, current_frame=2)
    assert (t.image_id, t.frame, t.n_frames, t.clip) == ("im1", 2, 3, False)
    seq, browser, proxy_volume = _clip(scene)
    seq.SetAttribute(mrml.IMAGE_ID_ATTRIBUTE, "clip1")
    browser.SetSelectedItemNumber(2)
    t = session.image_target(proxy_volume, browser, current_frame=0)  # a clip's frame is its browser's
    assert (t.image_id, t.frame, t.n_frames, t.clip, list(t.dims)) == ("clip1", 2, 3, True, [60, 40, 1])


def test_session_runs_on_all_frames_of_a_clip(proxy, scene):
    pixels, _ = breast_scan()
    frames = [np.full_like(pixels, 200), pixels, pixels]  # the current frame (1) is a scan with a lesion
    seq = scene.AddNewNodeByClass("vtkMRMLSequenceNode", "clip")
    seq.SetIndexName("frame")
    seq.SetIndexType(seq.NumericIndex)
    for f, frame in enumerate(frames):
        seq.SetDataNodeAtValue(_scan_volume(slicer.vtkMRMLScene(), frame, f"f{f}"), str(f))
    browser = scene.AddNewNodeByClass("vtkMRMLSequenceBrowserNode", "clip browser")
    browser.SetAndObserveMasterSequenceNodeID(seq.GetID())
    proxy_volume = _scan_volume(scene, frames[0], "clip proxy")
    browser.AddProxyNode(proxy_volume, seq, False)
    browser.SetSelectedItemNumber(1)
    session = UMindSession(scene, UMindClient(proxy.url, timeout=300))
    _, nodes = session.run(proxy_volume, RunRequest("segment", prompt="lesion", all_frames=True), browser)
    uploaded = lf.decode_label_file(multipart_fields(proxy.last("PUT", "/datastore/image"))["file"][1])  # NRRD
    assert uploaded.array.shape == (3, 256, 256) and np.array_equal(uploaded.array[2], pixels)
    infer = proxy.last("POST", "/infer/umind_segment")
    sent = json.loads(multipart_fields(infer)["params"][1])
    assert sent["frames"] == "all" and sent["slice"] == 1
    params, data, name = reply_parts(infer)
    labels = label_array(data, name)
    assert labels.shape == (3, 256, 256) and len(params["umind"]["results"]) == 3
    assert nodes.segmentation is None and nodes.frame is None  # one meaning: the per-frame ones are a sequence
    assert nodes.segmentation_sequence.IsA("vtkMRMLSequenceNode")
    assert nodes.segmentation_sequence.GetNumberOfDataNodes() == 3
    names = sorted(params["label_names"], key=params["label_names"].get)
    for f in range(3):
        item = nodes.segmentation_sequence.GetDataNodeAtValue(str(f)).GetSegmentation()
        present = [n for n in names if (labels[f] == params["label_names"][n]).any()]
        assert [item.GetNthSegment(i).GetName() for i in range(item.GetNumberOfSegments())] in (names, present)
    _, one = session.run(proxy_volume, RunRequest("segment", prompt="lesion", current_frame=0), browser)
    infer = proxy.last("POST", "/infer/umind_segment")
    sent = json.loads(multipart_fields(infer)["params"][1])
    assert sent["frames"] == "current" and sent["slice"] == 1
    params, data, name = reply_parts(infer)
    assert one.segmentation.IsA("vtkMRMLSegmentationNode") and one.frame == 1  # the browser's, not the 0 given
    current = label_array(data, name).reshape(-1, 256, 256)  # the clip's frames, only the current one answered
    assert params["label_names"], "the demo model segments the lesion of the current frame"
    seg = one.segmentation.GetSegmentation()
    a = mrml.segment_array(scene, one.segmentation, seg.GetNthSegmentID(0), proxy_volume)
    first = min(params["label_names"].values())
    assert current[one.frame].any() and not np.delete(current, one.frame, axis=0).any()
    assert np.array_equal(a[0], current[one.frame] == first)


def test_markup_helpers(scene):
    assert markup_positions(None) == [] and roi_box(None) is None
    roi = scene.AddNewNodeByClass("vtkMRMLMarkupsROINode")
    roi.SetCenter(1, 2, 3)
    roi.SetSize(4, 6, 8)
    box = roi_box(roi)
    assert np.allclose(box.center, (1, 2, 3)) and np.allclose(box.size, (4, 6, 8))
    c = box.corners()
    assert np.allclose(c.min(axis=0), (-1, -1, -1)) and np.allclose(c.max(axis=0), (3, 5, 7))


@pytest.mark.parametrize("disposition", ['attachment; filename="../../x.nrrd"', 'attachment; filename="..\\\\..\\\\x.nrrd"',
                                         "attachment; filename*=UTF-8''C%3A%5Cx.nrrd"])
def test_a_reply_names_a_file_never_a_folder(disposition):
    """A server names the files of its reply; where they go is the module's choice: folders in either separator
    (a Windows Slicer treats a backslash as one) are dropped."""
    from UMindLib.replies import filename_from_disposition

    assert filename_from_disposition(disposition) == "x.nrrd"


def test_ijk_to_ras_scales_each_direction_column_by_its_own_spacing():
    """Slicer's IJKToRASDirections are columns: i moves along column 0 by spacing[0], j along column 1 by spacing[1];
    on a rotated, anisotropic grid a row-wise product puts each step on the wrong axis."""
    turn = np.array([[0.0, -1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 1.0]])  # i -> +A, j -> -R
    m = geo.ijk_to_ras_matrix(ORIGIN, SPACING, turn)
    assert np.allclose(geo.ijk_to_ras(m, (1, 0, 0)), np.add(ORIGIN, [0.0, 0.5, 0.0]))
    assert np.allclose(geo.ijk_to_ras(m, (0, 1, 0)), np.add(ORIGIN, [-0.25, 0.0, 0.0]))
    assert np.allclose(geo.voxel_spacing(m), SPACING)


def test_only_a_calibration_hidden_in_ultrasound_regions_is_given_to_the_volume():
    """A DICOM whose spacing is in its ultrasound regions loads in Slicer at 1 mm a pixel: the reply's spacing is
    put on the volume. A calibration Slicer reads itself (pixel spacing) or none is left alone."""
    from UMindLib.replies import hidden_calibration

    regions = {"calibrated": True, "spacing_source": "ultrasound_regions", "frame_spacing": [0.2, 0.3]}
    assert hidden_calibration(regions) == (0.2, 0.3)
    assert hidden_calibration({**regions, "spacing_source": "pixel_spacing"}) is None
    assert hidden_calibration({**regions, "calibrated": False}) is None
    with pytest.raises(ReplyError, match="frame_spacing"):
        hidden_calibration({**regions, "frame_spacing": [0.2, -1]})


# rules a planted-bug round found untested -------------------------------------------------------------------

def test_the_client_quotes_file_names_reads_the_servers_id_and_treats_401_as_an_error(monkeypatch):
    from UMindLib.client import _Response, encode_multipart

    body, _ = encode_multipart({"file": MultipartFile('a"b.nrrd', b"x")})
    assert b'filename="a_b.nrrd"' in body and b'a"b' not in body
    c = UMindClient("http://127.0.0.1:9", timeout=5)
    monkeypatch.setattr(c, "_send", lambda *a, **k: _Response(200, {}, b'{"image": "img-3f2a"}'))
    assert c.upload_image(MultipartFile("x.nrrd", b"x"), "img") == "img-3f2a"  # the server's id, not the asked one

    def refuse(status):
        def send(*a, **k):
            raise UMindServerError("no", status, "/auth/")
        return send

    monkeypatch.setattr(c, "_send", refuse(404))
    assert c.auth_enabled() is False  # no /auth/ route: auth is off
    monkeypatch.setattr(c, "_send", refuse(401))
    with pytest.raises(UMindServerError):  # refused: auth is on, not off
        c.auth_enabled()


def test_label_info_takes_a_finding_in_any_case_and_a_report_alone_is_a_submission(scene):
    assert submit.label_info({}, finding=" Benign ")["finding"] == "benign"
    with pytest.raises(submit.SubmitError, match="finding must be one of"):
        submit.label_info({}, finding="suspicious")
    single = make_volume(scene, dims=(60, 40, 1), name="frame")
    sub = submit.prepare_submission(scene, single, "img7", report="Site: breast. Finding: none.")
    assert sub.info["report"] == "Site: breast. Finding: none."


def test_two_segments_of_one_name_are_refused(scene):
    single = make_volume(scene, dims=(60, 40, 1), name="frame")
    seg = mrml.label_map_to_segmentation(scene, single, frame_labels(), {"nodule": 1, "cyst": 2})
    seg.GetSegmentation().GetNthSegment(1).SetName("nodule")
    with pytest.raises(submit.SubmitError, match="two segments are named 'nodule'"):
        submit.prepare_submission(scene, single, "img7", seg)


def test_an_uploaded_images_name_never_starts_with_a_dot(scene):
    vol = make_volume(scene, dims=(60, 40, 1), name="..hidden scan")
    assert UMindSession(scene, client=None).image_file(vol).filename == "hidden_scan.nrrd"


def test_an_exam_reply_about_other_frames_than_those_asked_places_nothing(scene):
    from UMindLib.requests import InferRequest

    class Client:
        def infer(self, *a, **k):
            views = [{"view": k, "image": "clip", "frame": f, "geometry": {}, "markups": []}
                     for k, f in enumerate((0, 2))]
            return ParsedReply({"task": "report", "answer": "x", "exam": {"views": views}, "objects": []})

    session = UMindSession(scene, Client())
    req = InferRequest("umind_interpret", "clip", {"task": "report"})
    assert [v.frame for v in session._ask_exam(req, ["clip", "clip"], [0, 2]).views] == [0, 2]
    with pytest.raises(mrml.MRMLBuildError, match=r"not those asked: \['clip', 'clip'\] \(frames \[0, 1\]\)"):
        session._ask_exam(req, ["clip", "clip"], [0, 1])
