"""One owner per rule (docs: DESIGN "One owner per rule"): each rule below lives in one module, the others import
it, and the copies that cannot import it (the Slicer module's Lib, which runs inside Slicer without umind_core or
the app) are held to the owner here, on tables of cases.

- the finding list: `umind_core.findings` (the app's trainer and answers, the evaluation, the Slicer module);
- the wire contract of the label info and the task presets: `monailabel_app/lib/wire.py` (Slicer: `contract`,
  `requests.TASK_PRESETS`);
- label painting: `umind_core.painter.LabelPainter` (Slicer: `UMindLib.painter`);
- box IoU: `umind_core.evaluation.metrics.box_iou`;
- format sniffing and header reading: `umind_core.imageio` (`sniff_format`, `detect_format`, `read_header`).
"""

from __future__ import annotations

import sys
import types
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "monailabel_app"))
sys.path.insert(0, str(ROOT / "slicer_module" / "UMind"))

from lib import wire  # noqa: E402
from UMindLib import contract  # noqa: E402
from UMindLib import painter as slicer_painter  # noqa: E402
from UMindLib.requests import TASK_PRESETS  # noqa: E402

from umind_core import findings  # noqa: E402
from umind_core.painter import LabelPainter  # noqa: E402

# ------------------------------------------------------------------------------------------------ findings


def test_every_finding_list_is_the_one_list():
    from lib.trainers import corrections
    from umind_core.evaluation import runner
    from umind_core.prompts import TEMPLATES

    assert wire.FINDINGS is findings.FINDINGS and corrections.FINDINGS is findings.FINDINGS
    assert contract.FINDINGS == findings.FINDINGS  # the Slicer copy
    assert runner.DIAGNOSIS_LABELS == findings.SCORED_FINDINGS
    assert set(findings.SCORED_FINDINGS) <= set(findings.FINDINGS)
    for wording in TEMPLATES["diagnose"].variants[:3]:  # the wordings that name the classes name all of them
        assert all(f in wording for f in findings.FINDINGS), wording
    assert all(runner.parse_diagnosis(f.capitalize() + ".") == f for f in findings.FINDINGS)


def test_the_slicer_finding_box_offers_the_finding_list():
    tree = ET.parse(ROOT / "slicer_module" / "UMind" / "Resources" / "UI" / "UMind.ui")
    box = next(w for w in tree.iter("widget") if w.get("name") == "findingComboBox")
    items = tuple((item.findtext("property/string") or "") for item in box.findall("item"))
    assert items == ("",) + findings.FINDINGS  # empty = no finding sent


@pytest.mark.parametrize("text,cls", [
    ("Malignant.", "malignant"), ("malignant, not benign", "malignant"), ("Benign. Oval, parallel.", "benign"),
    ("normal", "normal"),
    ("Suspicious for malignancy.", None), ("I cannot tell.", None), ("", None),
])
def test_the_class_of_a_diagnose_answer(text, cls):
    assert findings.answer_finding(text) == cls


@pytest.mark.parametrize("value,out", [(" Benign ", "benign"), ("MALIGNANT", "malignant"), ("cyst", None),
                                       (3, None), (None, None)])
def test_a_finding_as_sent_in_its_one_spelling(value, out):
    assert findings.normal_finding(value) == out


# ------------------------------------------------------------------------------------------- wire contract


def test_the_slicer_copy_of_the_wire_contract_is_the_apps():
    for key in ("LABEL_NAMES", "ANSWER", "MARKUPS", "FINDING", "REPORT", "LANDMARK_TARGET", "LABEL_INFO_KEYS",
                "SEGMENT_MODEL", "INTERACTIVE_MODEL", "TRAINER"):
        assert getattr(contract, key) == getattr(wire, key), key
    assert contract.CLIENT_MARKER == (wire.CLIENT_KEY, wire.CLIENT_VALUE)
    for preset in TASK_PRESETS.values():
        assert preset.model == wire.TASK_MODELS[preset.server_task], preset
        assert preset.prompt_key == wire.prompt_key(preset.server_task), preset


def test_the_app_serves_the_contracts_models_and_tasks():
    """The names the contract promises are the app's own infer models, each running the tasks sent to it."""
    import main

    runtime = types.SimpleNamespace(conf=types.SimpleNamespace(labels=("lesion",)))
    infers = main.UMindApp.init_infers(types.SimpleNamespace(runtime=runtime))
    assert tuple(infers) == wire.INFER_MODELS
    for task, model in wire.TASK_MODELS.items():
        assert task in infers[model].umind_tasks and not infers[model].interactive, (task, model)
    assert infers[wire.INTERACTIVE_MODEL].interactive


def test_the_slicer_copies_ship_with_the_module():
    """Slicer installs the scripts its CMakeLists names: a copy left out would be missing inside Slicer only."""
    module = ROOT / "slicer_module" / "UMind"
    listed = (module / "CMakeLists.txt").read_text(encoding="utf-8")
    for path in sorted((module / "UMindLib").glob("*.py")):
        assert f"${{MODULE_NAME}}Lib/{path.name}" in listed, path.name


def test_what_the_slicer_module_writes_the_trainer_reads(tmp_path):
    pytest.importorskip("slicer")  # UMindLib.submit builds MRML nodes (slicer-core under pytest)
    from fixtures_imaging import sitk_volume
    from lib.trainers.corrections import read_corrections
    from lib.trainers.dataset import _label_names
    from UMindLib import submit
    from umind_core.imageio import read_study

    markups = {"markups": [{"type": "Fiducial", "name": "pole", "coordinateSystem": "LPS",
                            "controlPoints": [{"label": "pole", "position": [3.0, 4.0, 0.0]}]}]}
    info = submit.label_info({"kidney": 1}, "Benign.", markups, finding=" Benign ", report="Finding: solid.",
                             landmark_target="kidney")
    assert set(info) == set(wire.LABEL_INFO_KEYS)
    study = read_study(sitk_volume(tmp_path / "scan.nrrd", np.zeros((20, 30), np.uint8), spacing=(1.0, 1.0),
                                   origin=(0.0, 0.0)))
    for sent in (info, {wire.PARAMS: info}):  # at the top level, or under "params" as the client sends it
        c = read_corrections(sent, study)
        assert (c.finding, c.report, c.landmark_target, c.skipped) == ("benign", "Finding: solid.", "kidney", [])
        assert c.frames[0].keypoints == [("pole", (3.0, 4.0))]
        assert _label_names(sent, ()) == {1: "kidney"}


# ------------------------------------------------------------------------------------------ label painting

def _m(shape, *slices) -> np.ndarray:
    m = np.zeros(shape, bool)
    m[slices] = True
    return m


PAINT_CASES = {
    "nothing": ((4, 5), []),
    "overlap, later paints over": ((4, 5), [("a", _m((4, 5), slice(0, 3), slice(0, 3)), ()),
                                            ("b", _m((4, 5), slice(2, 4), slice(2, 5)), ())]),
    "a name keeps its value": ((4, 5), [("a", _m((4, 5), 0, 0), ()), ("b", _m((4, 5), 1, 1), ()),
                                        ("a", _m((4, 5), 3, slice(None)), ())]),
    "nonzero masks are inside": ((4, 5), [("a", _m((4, 5), 1, 2).astype(np.uint8) * 7, ())]),
    "frames of a stack": ((3, 4, 5), [("a", _m((4, 5), 0, 0), 2), ("b", _m((4, 5), slice(None), 1), 0),
                                      ("a", _m((4, 5), 3, 4), 0)]),
    "past 255 widens": ((8, 10), [(f"t{i}", _m((8, 10), i % 8, i % 10), ()) for i in range(300)]),
    "an empty 300th label": ((8, 10), [(f"t{i}", _m((8, 10), i % 8, i % 10) & (i < 255), ()) for i in range(300)]),
}


@pytest.mark.parametrize("case", list(PAINT_CASES))
def test_the_slicer_painter_is_the_core_rule(case):
    shape, paints = PAINT_CASES[case]
    core, copy = LabelPainter(shape), slicer_painter.LabelPainter(shape)
    for name, mask, index in paints:
        assert core.paint(name, mask, index) == copy.paint(name, mask, index)
    a, b = core.labels(), copy.labels()
    assert a.dtype == b.dtype and np.array_equal(a, b) and core.values == copy.values, case


def test_results_and_stacks_paint_with_the_painter():
    from umind_core.imageio import Geometry
    from umind_core.outputs import label_stack
    from umind_core.results import GroundedObject, Result

    _, paints = PAINT_CASES["overlap, later paints over"]
    objects = [GroundedObject(label=name, mask=mask) for name, mask, _ in paints]
    expected = LabelPainter((4, 5))
    for name, mask, _ in paints:
        expected.paint(name, mask)
    labels, names = Result(task="segment", objects=objects).label_map()
    assert np.array_equal(labels, expected.labels()) and names == {1: "a", 2: "b"}
    flat = Geometry("2d", (4, 5), (1.0, 1.0), (0.0, 0.0), (1.0, 0.0, 0.0, 1.0))
    stack = label_stack([Result(task="segment", objects=objects, frame_index=0)], flat)
    assert np.array_equal(stack.volume(), expected.labels()) and stack.values == expected.values


# ------------------------------------------------------------------------------------------------- box IoU

def _pixel_iou(a, b) -> float:
    """The active-learning signal's former IoU, kept here to show the owner's `inclusive` gives the same."""
    ix = max(0.0, min(a[2], b[2]) - max(a[0], b[0]) + 1)
    iy = max(0.0, min(a[3], b[3]) - max(a[1], b[1]) + 1)
    area = lambda r: max(0.0, r[2] - r[0] + 1) * max(0.0, r[3] - r[1] + 1)  # noqa: E731
    union = area(a) + area(b) - ix * iy
    return 0.0 if union <= 0 else ix * iy / union


@pytest.mark.parametrize("a,b", [
    ((0, 0, 9, 9), (5, 0, 14, 9)), ((0, 0, 0, 0), (0, 0, 0, 0)), ((0, 0, 0, 0), (1, 1, 1, 1)),
    ((10, 20, 30, 40), (12.5, 18.25, 33.0, 39.5)), ((3, 3, 8, 8), (20, 20, 30, 30)), ((0, 0, 99, 49), (0, 0, 49, 99)),
])
def test_one_box_iou_in_both_conventions(a, b):
    """The owner computes in float32 (MONAI's `box_iou`), the signal's former copy in float64: equal to 1e-6."""
    from lib.activelearning.signals import task_disagreement
    from umind_core.evaluation.metrics import box_iou
    from umind_core.results import GroundedObject, Result

    assert box_iou(a, b, inclusive=True) == pytest.approx(_pixel_iou(a, b), rel=1e-6, abs=1e-6)
    if a[2] > a[0] and a[3] > a[1]:  # continuous corners: the published detection figures' convention
        x1, y1, x2, y2 = max(a[0], b[0]), max(a[1], b[1]), min(a[2], b[2]), min(a[3], b[3])
        inter = max(0, x2 - x1) * max(0, y2 - y1)
        union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
        assert box_iou(a, b) == pytest.approx(inter / union, rel=1e-6, abs=1e-6)
    if all(float(v).is_integer() for v in a):  # the signal: a mask's box (its first and last pixel) vs a detection
        mask = np.zeros((120, 120), bool)
        mask[int(a[1]):int(a[3]) + 1, int(a[0]):int(a[2]) + 1] = True
        detect = Result(task="detect", objects=[GroundedObject(box=b)])
        assert task_disagreement(mask, detect) == pytest.approx(1.0 - _pixel_iou(a, b), rel=1e-6, abs=1e-6)


def test_the_box_iou_docstring_example():
    from umind_core.evaluation.metrics import box_iou

    assert round(box_iou([0, 0, 9, 9], [5, 0, 14, 9]), 2) == 0.29
    assert round(box_iou([0, 0, 9, 9], [5, 0, 14, 9], inclusive=True), 2) == 0.33


# ----------------------------------------------------------------------------------------- image formats

def test_the_server_sniffs_and_reads_headers_with_imageio(tmp_path):
    from fixtures_imaging import dicom_mono, sitk_volume, write_png
    from lib import caps, uploads
    from umind_core import imageio

    assert uploads.sniff_format is imageio.sniff_format  # the datastore door's sniffing is imageio's
    files = {
        "png": write_png(tmp_path / "a.png", np.zeros((12, 16, 3), np.uint8)),
        "dicom": dicom_mono(tmp_path / "b.dcm", np.zeros((12, 16), np.uint16)),
        "nrrd": sitk_volume(tmp_path / "c.nrrd", np.zeros((3, 12, 16), np.int16)),
        "nifti": sitk_volume(tmp_path / "d.nii.gz", np.zeros((3, 12, 16), np.float32)),
    }
    for fmt, path in files.items():
        shape, per_pixel, read_as = imageio.read_header(path)
        assert read_as == fmt == imageio.detect_format(path)
        assert imageio.sniff_format(path) == {"nifti": "nifti-gz"}.get(fmt, fmt)
        assert caps.image_header(str(path)) == (shape, per_pixel)
        assert shape[-2:] == (12, 16), (fmt, shape)
    assert imageio.read_header(files["png"])[1] == 3 and imageio.read_header(files["nifti"])[1] == 4
    with pytest.raises(imageio.ImageReadError, match="unsupported file type '.txt'"):
        imageio.read_header(tmp_path / "x.txt")
    bad = tmp_path / "e.png"
    bad.write_bytes(b"not a png")
    with pytest.raises(imageio.ImageReadError, match=r"e\.png: cannot read png data \(header: "):
        imageio.read_header(bad)
