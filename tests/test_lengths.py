"""One length from one geometry: every length UMind reports (answer text, results.json, markups, server replies,
Slicer line nodes) is the drawn line measured with the calibrated spacing by `imageio.line_length`; images without
spacing say px; degenerate answers are not results; nothing found writes the same files from the CLI and the server.

The model path is real (the untrained tiny model encodes the frames and decodes) but its answer is forced: the
Predictor's `_result` gets the tokens of a fixed text, so the real parser, mask path and geometry run on it.
"""

from __future__ import annotations

import json
import math
import re
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import SimpleITK as sitk

import fixtures_imaging as fx
from umind_core import batch, demo
from umind_core.answers import grounding
from umind_core.cli import main
from umind_core.imageio import line_length, read_markups_json, read_study
from umind_core.answers.results import GroundedObject, Result

ROOT = Path(__file__).resolve().parents[1]
COL_MM, ROW_MM = 0.15, 0.30  # non-square pixels: x (columns) 0.015 cm, y (rows) 0.03 cm, as the regions say
H, W = 96, 128
LINE_GRID = grounding.Line(100, 200, 700, 650)
MEASURE = (f"{grounding.format_line(LINE_GRID, 'kidney length')} Length: 140.2 mm.")


def _regions_cine(path: Path, n: int = 30) -> Path:
    """A US cine whose only calibration is SequenceOfUltrasoundRegions (in cm), with non-square pixels."""
    from pydicom.sequence import Sequence

    ds = fx._dataset(path, fx.US_MULTIFRAME_STORAGE)
    fx._set_pixels(ds, np.stack([fx.ramp(H, W, seed=i) for i in range(n)]), "MONOCHROME2", frames=n)
    ds.SequenceOfUltrasoundRegions = Sequence([fx.region(0, 0, W - 1, H - 1, COL_MM / 10, ROW_MM / 10)])
    ds.save_as(str(path), write_like_original=False)
    return path


def _force_answer(monkeypatch, text: str, mask: np.ndarray | None = None) -> None:
    """Every answer the Predictor builds is ``text`` (and its mask groups decode to ``mask``)."""
    from umind_core.inference import predictor as P
    from umind_core.inference.decode_batch import Decoded

    original = P.Predictor._result

    def _result(self, state, b, dec, task, prompt, warnings):
        ids = self.model.tokenizer.encode(text, add_special_tokens=False)
        forced = Decoded(token_ids=ids, token_probs=[1.0] * len(ids), forced=[False] * len(ids))
        return original(self, state, b, forced, task, prompt, warnings)

    monkeypatch.setattr(P.Predictor, "_result", _result)
    if mask is not None:
        monkeypatch.setattr(P.Predictor, "_masks", lambda self, features, queries, size: ([mask], [0.9], 0.1))
    monkeypatch.setattr(demo, "has_demo_model", lambda: False)  # the untrained tiny model, no --model


def _infer(capsys, *argv) -> dict:
    rc = main(["infer", *map(str, argv), "--max-new-tokens", "2", "--quiet"])
    err = capsys.readouterr().err
    assert rc == 0, err
    return json.loads((Path(argv[argv.index("--out") + 1]) / _stem(argv[0]) / "results.json").read_text())


def _stem(path) -> str:
    return Path(path).name.split(".")[0]


def _task(cls_name: str, module: str):
    """A server infer task without a server: its writers need only the labels of the app's conf."""
    sys.path.insert(0, str(ROOT / "monailabel_app"))
    mod = __import__(f"lib.infers.{module}", fromlist=[cls_name])
    return getattr(mod, cls_name)(SimpleNamespace(conf=SimpleNamespace(labels=("lesion",))))


def _stated_mm(text: str) -> float:
    (value,) = re.findall(r"Length: ([\d.]+) mm", text)
    return float(value)


# ------------------------------------------------------------------ the owner


def test_line_length_takes_the_row_spacing_for_y_and_the_column_spacing_for_x():
    assert line_length((0, 0, 10, 0), (COL_MM, ROW_MM)).value == pytest.approx(10 * COL_MM)
    assert line_length((0, 0, 0, 10), (COL_MM, ROW_MM)).value == pytest.approx(10 * ROW_MM)
    assert line_length((0, 0, 3, 4), None).value == 5.0 and line_length((0, 0, 3, 4), None).unit == "px"
    assert line_length((0, 0, 3, 4), (0.5, 0.5)).unit == "mm" and str(line_length((0, 0, 3, 4), None)) == "5.00 px"


@pytest.mark.parametrize("where", ["PixelSpacing", "regions"])
def test_a_2d_image_measures_y_with_its_row_spacing(tmp_path, where):
    """Single-frame DICOMs (the 2D geometry path): PixelSpacing is (row, column), the regions (x, y)."""
    from pydicom.sequence import Sequence

    if where == "PixelSpacing":
        path = fx.dicom_mono(tmp_path / "one.dcm", fx.ramp(H, W), pixel_spacing=(ROW_MM, COL_MM))
    else:
        import pydicom

        path = fx.dicom_mono(tmp_path / "one.dcm", fx.ramp(H, W), pixel_spacing=None)
        ds = pydicom.dcmread(str(path))
        ds.SequenceOfUltrasoundRegions = Sequence([fx.region(0, 0, W - 1, H - 1, COL_MM / 10, ROW_MM / 10)])
        ds.save_as(str(path))
    study = read_study(path)
    assert study.geometry.kind == "2d"
    res = Result(task="measure", objects=[GroundedObject(line=(0, 0, 0, 20)), GroundedObject(line=(0, 0, 20, 0))])
    res.attach_geometry(study.geometry)
    assert [o.physical["length_mm"] for o in res.objects] == pytest.approx([20 * ROW_MM, 20 * COL_MM])
    assert res.answer == f"Length: {20 * ROW_MM:.2f} mm. Length: {20 * COL_MM:.2f} mm."
    (m, _) = res.to_markups(study.output_geometry())
    assert np.linalg.norm(np.subtract(*m["points_lps"])) == pytest.approx(20 * ROW_MM)


# ------------------------------------------------------------------ one length in four places


def test_cine_calibrated_only_in_ultrasound_regions_states_one_length_everywhere(tmp_path, capsys, monkeypatch):
    clip = _regions_cine(tmp_path / "clip.dcm")
    _force_answer(monkeypatch, MEASURE)
    doc = _infer(capsys, clip, "--out", tmp_path / "out", "--task", "measure", "--prompt", "kidney length",
                 "--frames", "3-4", "--readout", "tokens")  # the line the scripted answer draws, not one off a mask
    out = tmp_path / "out" / "clip"

    # the line the model drew, in pixels (the grammar's conversion), measured by hand with the regions' spacing
    x1, y1, x2, y2 = grounding.line_from_grid(LINE_GRID, W, H)
    truth = math.hypot((x2 - x1) * COL_MM, (y2 - y1) * ROW_MM)
    assert abs(truth - math.hypot((x2 - x1) * ROW_MM, (y2 - y1) * COL_MM)) > 1.0  # a swap of row/col would show

    assert doc["output_geometry"]["spacing_source"] == "ultrasound_regions" and doc["output_geometry"]["calibrated"]
    markups = read_markups_json(out / doc["outputs"]["markups"])
    raw = json.loads((out / doc["outputs"]["markups"]).read_text())["markups"]
    assert [m["name"] for m in markups] == ["kidney length (frame 3)", "kidney length (frame 4)"]
    for k, res in enumerate(doc["results"]):
        obj = res["objects"][0]
        assert obj["line"] == pytest.approx([x1, y1, x2, y2])
        answer_mm = _stated_mm(res["answer"])  # 1. the answer text users see
        results_mm = obj["physical"]["length_mm"]  # 2. results.json
        markup_mm = raw[k]["measurements"][0]["value"]  # 3. the markups file's measurement
        a, b = (np.array(p) for p in markups[k]["points_lps"])
        slicer_mm = float(np.linalg.norm(b - a))  # 4. what Slicer computes from the markup's coordinates
        for mm in (answer_mm, results_mm, markup_mm, slicer_mm):
            assert mm == pytest.approx(truth, abs=0.01)
        assert raw[k]["measurements"][0]["units"] == "mm"
        # the model's own number is a raw field only
        assert "140.2" not in res["answer"] and "140.2 mm" in res["raw_answer"]
        assert obj["physical"]["model_length"] == "140.2 mm"

    # the image is beside its outputs in the calibrated geometry, and the markups lie on its pixels there
    img = sitk.ReadImage(str(out / doc["outputs"]["image"]))
    assert img.GetSpacing()[:2] == pytest.approx((COL_MM, ROW_MM)) and img.GetSize() == (W, H, 30)
    idx = img.TransformPhysicalPointToContinuousIndex(markups[1]["points_lps"][1])
    assert idx == pytest.approx((x2, y2, 4), abs=1e-6)


@pytest.mark.parametrize("kind", ["palette", "ybr422", "jpeg_ybr", "jpeg2000"])
def test_every_kind_of_clinic_dicom_states_one_length_in_text_results_and_markups(tmp_path, capsys, monkeypatch,
                                                                                  kind):
    """Palette colour, uncompressed YBR 4:2:2, JPEG (YBR) and JPEG 2000, each calibrated only in its ultrasound
    region with non-square pixels: the answer text, results.json, the markups' measurement and the distance
    between its points all state the length of the drawn line at that spacing."""
    makers = {"palette": fx.dicom_palette, "ybr422": fx.dicom_ybr422, "jpeg_ybr": fx.dicom_jpeg_ybr,
              "jpeg2000": fx.dicom_jpeg2000}
    path = fx.with_regions(makers[kind](tmp_path / f"{kind}.dcm")[0], COL_MM, ROW_MM)
    _force_answer(monkeypatch, MEASURE)
    doc = _infer(capsys, path, "--out", tmp_path / "out", "--task", "measure", "--prompt", "kidney length",
                 "--readout", "tokens")
    out = tmp_path / "out" / _stem(path)
    h, w = read_study(path).frames[0].pixels.shape[:2]
    x1, y1, x2, y2 = grounding.line_from_grid(LINE_GRID, w, h)
    truth = math.hypot((x2 - x1) * COL_MM, (y2 - y1) * ROW_MM)
    assert doc["output_geometry"]["spacing_source"] == "ultrasound_regions"
    (res,) = doc["results"]
    (obj,) = res["objects"]
    raw = json.loads((out / doc["outputs"]["markups"]).read_text())["markups"]
    a, b = (np.array(p) for p in read_markups_json(out / doc["outputs"]["markups"])[0]["points_lps"])
    stated = (_stated_mm(res["answer"]), obj["physical"]["length_mm"], raw[0]["measurements"][0]["value"],
              float(np.linalg.norm(b - a)))
    assert stated == pytest.approx((truth,) * 4, abs=0.01), stated


def test_the_slicer_volume_gets_the_servers_calibration_and_its_line_measures_the_stated_length(tmp_path):
    slicer = pytest.importorskip("slicer")
    if not hasattr(slicer, "vtkMRMLScene"):
        pytest.skip("slicer-core (headless MRML) is not installed")
    sys.path.insert(0, str(ROOT / "slicer_module" / "UMind"))
    from UMindLib import mrml
    from UMindLib.replies import InferReply, ParsedReply, hidden_calibration

    clip = _regions_cine(tmp_path / "clip.dcm", n=3)
    study = read_study(clip)
    res = Result(task="measure", raw_answer="kidney length Length: 140.2 mm.", frame_index=2, image_size=(W, H),
                 objects=[GroundedObject(label="kidney length", line=(10, 5, 90, 70))])
    res.attach_geometry(study.geometry)
    path, body = _task("UMindLandmarks", "landmarks")._write(study, {"task": "measure"},
                                                             [("measure", "kidney length", [res])])
    Path(path).unlink()  # the reply's markups file; the test reads the reply's JSON
    reply = InferReply.from_parsed(ParsedReply(json.loads(json.dumps(body))))
    assert hidden_calibration(reply.geometry) == pytest.approx((COL_MM, ROW_MM))
    assert body["measurements"][0]["length_mm"] == pytest.approx(_stated_mm(res.answer), abs=0.01)

    scene = slicer.vtkMRMLScene()
    mrml.ensure_node_classes(scene)
    scene.AddNewNodeByClass("vtkMRMLSelectionNode")
    logic = slicer.vtkSlicerVolumesLogic()
    logic.SetMRMLScene(scene)
    volume = logic.AddArchetypeVolume(str(clip), "clip", 8)  # as Slicer loads it: ITK, 1 mm per pixel
    assert volume.GetSpacing()[:2] == pytest.approx((1.0, 1.0))
    assert mrml.set_calibrated_spacing(volume, hidden_calibration(reply.geometry)) is True
    assert mrml.set_calibrated_spacing(volume, (COL_MM, ROW_MM)) is False  # already there
    (line,) = mrml.build_result_nodes(scene, volume, reply, None).lines
    assert line.GetLineLengthWorld() == pytest.approx(res.objects[0].physical["length_mm"], abs=0.01)
    assert line.GetLineLengthWorld() == pytest.approx(math.hypot(80 * COL_MM, 65 * ROW_MM), abs=0.01)
    with pytest.raises(mrml.MRMLBuildError, match="positive"):
        mrml.set_calibrated_spacing(volume, (0.0, 0.3))


# ------------------------------------------------------------------ no spacing: px, never mm


def test_an_image_without_spacing_never_says_mm(tmp_path, capsys, monkeypatch):
    png = fx.write_png(tmp_path / "scan.png", fx.ramp(H, W))
    _force_answer(monkeypatch, f"{grounding.format_line(LINE_GRID, 'width')} Length: 11.2 mm.")
    doc = _infer(capsys, png, "--out", tmp_path / "out", "--task", "measure", "--prompt", "width")
    (res,) = doc["results"]
    x1, y1, x2, y2 = grounding.line_from_grid(LINE_GRID, W, H)
    px = math.hypot(x2 - x1, y2 - y1)
    assert "mm" not in res["answer"] and f"Length: {px:.2f} px." in res["answer"]
    phys = res["objects"][0]["physical"]
    assert phys["length_unit"] == "px" and phys["length"] == pytest.approx(px) and "length_mm" not in phys
    assert doc["output_geometry"]["calibrated"] is False and doc["output_geometry"]["spacing_source"] is None
    raw = json.loads((tmp_path / "out" / "scan" / "markups.mrk.json").read_text())
    assert raw["markups"][0]["measurements"][0]["units"] == "px"
    assert read_markups_json(tmp_path / "out" / "scan" / "markups.mrk.json")[0]["length_px"] == pytest.approx(px)

    # a length stated without a line: a warning, and on this image no "mm" survives in the text either
    report = Result(task="report", answer="Finding: oval lesion. Size: 12.3 x 8.1 mm.")
    report.attach_geometry(read_study(png).geometry)
    assert "mm" not in report.answer and "12.3 x 8.1 mm" in report.raw_answer
    assert any("states a length (12.3 x 8.1 mm) but draws no line" in w for w in report.warnings)
    calibrated = Result(task="report", answer="Size: 12.3 x 8.1 mm.")
    calibrated.attach_geometry((0.2, 0.2))
    assert calibrated.answer == "Size: 12.3 x 8.1 mm." and len(calibrated.warnings) == 1


# ------------------------------------------------------------------ degenerate answers


def test_a_degenerate_answer_is_a_warning_and_writes_no_label_map_and_no_object_n(tmp_path, capsys, monkeypatch):
    png = fx.write_png(tmp_path / "neck.png", fx.ramp(H, W))
    mask = np.zeros((H, W), bool)
    mask[10:40, 20:60] = True
    _force_answer(monkeypatch, grounding.SEG_MASK * 16 + "...33773thyroidthyroid6A773", mask=mask)
    doc = _infer(capsys, png, "--out", tmp_path / "out", "--task", "segment", "--prompt", "thyroid")
    (res,) = doc["results"]
    assert res["unparsable"] is True and res["objects"] == [] and res["answer"] == ""
    assert any(w.startswith("unparsable answer:") for w in res["warnings"])
    assert "33773thyroidthyroid6A773" in res["text"]  # the raw text stays for whoever wants to look
    assert doc["outputs"]["labels"] is None and not list((tmp_path / "out" / "neck").glob("labels.*"))
    assert "object 1" not in json.dumps(doc)

    # the server writes no file for it either, and names nothing
    study = read_study(png)
    path, body = _task("UMindSegment", "segment")._write(study, {}, [("segment", "thyroid", [_result_of(res)])])
    assert path is None and "label_names" not in body

    # an ordinary answer with the same mask is a result (the rule is about the text, not about masks)
    assert grounding.degenerate(grounding.parse(grounding.format_mask("thyroid") + " BI-RADS 4A, 85 px")) is None


def _result_of(d: dict) -> Result:
    return Result(task=d["task"], text=d["text"], answer=d["answer"], warnings=d["warnings"],
                  frame_index=d["frame_index"], image_size=d["image_size"], unparsable=d["unparsable"])


# ------------------------------------------------------------------ nothing found


def _empty(study, task: str) -> list[Result]:
    return [Result(task=task, frame_index=k, image_size=(W, H)) for k in range(study.geometry.n_frames)]


def test_nothing_found_writes_the_same_empty_loadable_files_from_the_cli_and_the_server(tmp_path):
    clip = _regions_cine(tmp_path / "clip.dcm", n=3)
    study = read_study(clip)

    # segment: a label map of zeros in the calibrated geometry, from both
    cli = batch.write_outputs(tmp_path / "cli", study, study.frames, _empty(study, "segment"),
                              {"task": "segment", "prompt": "lesion"}, "m")
    server, body = _task("UMindSegment", "segment")._write(study, {}, [("segment", "lesion", _empty(study, "segment"))])
    a, b = sitk.ReadImage(str(tmp_path / "cli" / cli.labels)), sitk.ReadImage(server)
    assert sitk.GetArrayFromImage(a).shape == (3, H, W) and not sitk.GetArrayFromImage(a).any()
    assert np.array_equal(sitk.GetArrayFromImage(a), sitk.GetArrayFromImage(b))
    for get in ("GetSpacing", "GetOrigin", "GetDirection"):
        assert getattr(a, get)() == pytest.approx(getattr(b, get)())
    assert a.GetSpacing()[:2] == pytest.approx((COL_MM, ROW_MM)) and body["geometry"]["calibrated"]
    Path(server).unlink()
    assert cli.image == "image.nrrd"  # the image the label map overlays, in the same geometry

    # measure: one empty point list, named by what was asked, byte for byte the same
    cli = batch.write_outputs(tmp_path / "cli2", study, study.frames, _empty(study, "measure"),
                              {"task": "measure", "prompt": "kidney length"}, "m")
    server, _ = _task("UMindLandmarks", "landmarks")._write(study, {"task": "measure"},
                                                            [("measure", "kidney length", _empty(study, "measure"))])
    assert (tmp_path / "cli2" / cli.markups).read_bytes() == Path(server).read_bytes()
    (item,) = read_markups_json(server)
    Path(server).unlink()
    assert item["name"] == "umind: nothing found (kidney length)" and item["points_lps"] == []
