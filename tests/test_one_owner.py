"""One owner per rule, so that two places can never disagree: each rule below lives in one module, the others
import it, and the copies that cannot import it (the Slicer module's Lib, which runs inside Slicer without
umind_core or the app) are held to the owner here, on tables of cases.

- the finding list: `umind_core.answers.findings` (the app's trainer and answers, the evaluation, the Slicer module);
- the wire contract of the label info and the task presets: `monailabel_app/lib/wire.py` (Slicer: `contract`,
  `requests.TASK_PRESETS`; the browser viewer: `web/src/contract.json`);
- label painting: `umind_core.painter.LabelPainter` (Slicer: `UMindLib.painter`);
- box IoU: `umind_core.evaluation.metrics.box_iou`; mask IoU: `metrics.mask_iou` (the benchmarks too);
- a mask's box: `umind_core.masks.mask_box` (the app's trainer export and active-learning signal too);
- a line's length: `umind_core.imageio.line_length` (the generator, the evaluation and the importers, no wrappers);
- format sniffing and header reading: `umind_core.imageio` (`sniff_format`, `detect_format`, `read_header`; the
  files `umind infer` takes from a folder; Slicer: `UMindLib.labelfiles.sniff_label_format` for label files);
- an examination's view count and a request's view: `umind_core.exam_views` (the CLI, the server's door and frames);
- the current frame: `umind_core.frames.current_frame` (the server's frame specs and interactive requests;
  Slicer: `UMindLib.requests.current_frame`, used by the session and the panel);
- training settings: `umind_core.training.config.TrainConfig` (names, types, ranges, defaults) and its one
  validator `check_setting` (the CLI's flags, the app's recipe `lib/conf.py SERVER_RECIPE`, conf keys and train
  requests; the app's loop settings are declared with the same `setting`);
- an ellipse's outline (a head circumference's closed curve): `umind_core.answers.landmarks.ellipse_outline` (Slicer:
  `UMindLib.geometry.ellipse_outline`).
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

from umind_core.answers import findings  # noqa: E402
from umind_core.evaluation import runner  # noqa: E402
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
    ("normal", "normal"), ("Benign, not malignant.", "benign"), ("No malignancy; benign cyst.", "benign"),
    ("Non-malignant.", None), ("Not malignant.", None), ("Benignity likely.", "benign"),
    ("Suspicious for malignancy.", "malignant"), ("I cannot tell.", None), ("", None),
])
def test_the_class_of_a_diagnose_answer(text, cls):
    """The server and the evaluation read an answer alike (they once disagreed on "Benign, not malignant.")."""
    assert findings.answer_finding(text) == cls
    assert runner.parse_diagnosis(text) == cls


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


def test_the_browser_viewers_copy_of_the_wire_contract_is_the_apps():
    """web/src/contract.json (bundled into the viewer) says what the app and the Slicer module say."""
    import json

    web = json.loads((ROOT / "web" / "src" / "contract.json").read_text())
    assert web["client_marker"][0] == wire.CLIENT_KEY and web["client_marker"][1] != wire.CLIENT_VALUE
    assert tuple(web["label_info_keys"].values()) == wire.LABEL_INFO_KEYS
    assert all(k == v for k, v in web["label_info_keys"].items())
    assert (web["interactive_model"], web["trainer"]) == (wire.INTERACTIVE_MODEL, wire.TRAINER)
    assert tuple(web["findings"]) == contract.FINDINGS
    slicer = {p.task: (p.model, p.server_task, p.prompt_key, p.hint, p.output, p.needs_prompt)
              for p in TASK_PRESETS.values()}
    viewer = {t["task"]: (t["model"], t["server_task"], t["prompt_key"], t["hint"], t["output"],
                          t.get("needs_prompt", False)) for t in web["tasks"]}
    assert viewer == slicer


def test_the_app_serves_the_contracts_models_and_tasks():
    """The names the contract promises are the app's own infer models, each running the tasks sent to it."""
    import main

    runtime = types.SimpleNamespace(conf=types.SimpleNamespace(labels=("lesion",)))
    infers = main.UMindApp.init_infers(types.SimpleNamespace(runtime=runtime))
    assert tuple(infers) == wire.INFER_MODELS
    for task, model in wire.TASK_MODELS.items():
        assert task in infers[model].umind_tasks and not infers[model].interactive, (task, model)
    assert infers[wire.INTERACTIVE_MODEL].interactive


def test_the_slicer_module_asks_for_a_readout_where_the_app_takes_one():
    """`contract.READOUTS` is the Predictor's list (default first), and the presets that send a readout are those
    whose model lists the choice in its config (the stock extension's view of the same param)."""
    import main

    from umind_core.inference.predictor import READOUTS

    assert contract.READOUTS == READOUTS
    runtime = types.SimpleNamespace(conf=types.SimpleNamespace(labels=("lesion",)))
    infers = main.UMindApp.init_infers(types.SimpleNamespace(runtime=runtime))
    for preset in TASK_PRESETS.values():
        assert preset.reads_masks == (contract.READOUT in infers[preset.model].default_config), preset


def test_the_slicer_module_sends_an_examination_where_the_app_reads_one():
    """`contract.EXAM_MODEL` / `EXAM_TASKS` are the app's one infer model with `exam_tasks`, and those tasks."""
    import main

    runtime = types.SimpleNamespace(conf=types.SimpleNamespace(labels=("lesion",)))
    infers = main.UMindApp.init_infers(types.SimpleNamespace(runtime=runtime))
    readers = {name: task.exam_tasks for name, task in infers.items() if task.exam_tasks}
    assert readers == {contract.EXAM_MODEL: contract.EXAM_TASKS}


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
    "overlap, the smaller keeps it": ((4, 5), [("a", _m((4, 5), slice(0, 3), slice(0, 3)), ()),
                                               ("b", _m((4, 5), slice(2, 4), slice(2, 5)), ())]),
    "a gland painted after its nodule": ((4, 5), [("nodule", _m((4, 5), slice(1, 3), slice(1, 3)), ()),
                                                  ("gland", _m((4, 5), slice(0, 4), slice(0, 5)), ())]),
    "equal sizes, the later": ((4, 5), [("a", _m((4, 5), 0, slice(0, 3)), ()), ("b", _m((4, 5), 0, slice(1, 4)), ())]),
    "sizes count per frame": ((2, 4, 5), [("a", _m((4, 5), slice(None), slice(None)), 0),
                                          ("a", _m((4, 5), 0, 1), 1), ("b", _m((4, 5), slice(0, 2), 1), 1)]),
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


def test_a_nested_structure_survives_the_label_map_and_its_organ_gets_it_back():
    """The rule itself: a gland answered after its nodule leaves the nodule visible (the loop's thyroid labels had
    lost every nodule under "later paints over"); at equal size the later mask wins; and `unpainted` returns the
    gland with the nodule's pixels, as the manifests draw an organ, while a ring around background stays a ring."""
    from umind_core.painter import unpainted

    _, paints = PAINT_CASES["a gland painted after its nodule"]
    painter = LabelPainter((4, 5))
    for name, mask, index in paints:
        painter.paint(name, mask, index)
    labels = painter.labels()
    nodule, gland = paints[0][1], paints[1][1]
    assert (labels[nodule] == 1).all() and (labels[gland & ~nodule] == 2).all()
    assert np.array_equal(unpainted(labels, 2), gland) and np.array_equal(unpainted(labels, 1), nodule)
    _, equal = PAINT_CASES["equal sizes, the later"]
    tie = LabelPainter((4, 5))
    for name, mask, index in equal:
        tie.paint(name, mask, index)
    assert tie.labels()[0].tolist() == [1, 2, 2, 2, 0]
    # "a" covers all of frame 0, yet on frame 1 its one pixel is the smaller mask there and keeps it from "b"
    _, frames = PAINT_CASES["sizes count per frame"]
    stack = LabelPainter((2, 4, 5))
    for name, mask, index in frames:
        stack.paint(name, mask, index)
    assert stack.labels()[1][:, 1].tolist() == [1, 2, 0, 0]
    ring = np.zeros((5, 5), np.uint8)
    ring[0, :] = ring[4, :] = ring[:, 0] = ring[:, 4] = 3
    ring[2, 2] = 4  # something inside the ring, background around it
    assert np.array_equal(unpainted(ring, 3), ring == 3)
    ring[1:4, 1:4] = 4  # the ring's inside wholly another structure: it lies inside the ring's outline
    assert unpainted(ring, 3).all()


def test_results_and_stacks_paint_with_the_painter():
    from umind_core.imageio import Geometry
    from umind_core.outputs import label_stack
    from umind_core.answers.results import GroundedObject, Result

    _, paints = PAINT_CASES["a gland painted after its nodule"]
    objects = [GroundedObject(label=name, mask=mask) for name, mask, _ in paints]
    expected = LabelPainter((4, 5))
    for name, mask, _ in paints:
        expected.paint(name, mask)
    labels, names = Result(task="segment", objects=objects).label_map()
    assert np.array_equal(labels, expected.labels()) and names == {1: "nodule", 2: "gland"}
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
    from umind_core.answers.results import GroundedObject, Result

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
    from lib.wall import caps, uploads
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


# ------------------------------------------------------------------------------------------ training settings

def test_the_servers_training_defaults_are_trainconfigs_but_the_declared_recipe():
    """The app states no trainer default of its own: TrainConfig's, except the SERVER_RECIPE table."""
    import dataclasses

    from lib.conf import SERVER_RECIPE, TrainParams, parse_conf, server_recipe
    from umind_core.training.config import TrainConfig

    defaults = TrainConfig(output_dir="x")
    for params in (TrainParams(), parse_conf({}, "/nonexistent/studies").train):
        run = params.trainer_config("out")
        for f in dataclasses.fields(TrainConfig):
            want = "out" if f.name == "output_dir" else SERVER_RECIPE.get(f.name, getattr(defaults, f.name))
            assert getattr(run, f.name) == want, f.name
    assert set(SERVER_RECIPE) < {f.name for f in dataclasses.fields(TrainConfig)}
    # the values the server has trained with (the loop benchmark's recipe, docs/configuration.md)
    run = server_recipe()
    assert (run.epochs, run.max_steps, run.lr, run.batch_size, run.warmup_ratio, run.seed) == (5, 120, 3e-4, 4, 0.05, 0)
    assert (run.val_fraction, run.full, run.progress, run.keep_checkpoints) == (0.0, False, False, 1)


def test_conf_keeps_no_validator_table_of_its_own():
    """lib/conf.py reads train keys through TrainConfig's validator; its own parsers serve the other conf keys."""
    import ast

    import lib.conf as conf

    tree = ast.parse((ROOT / "monailabel_app" / "lib" / "conf.py").read_text(encoding="utf-8"))
    called = [node.args[0].value for node in ast.walk(tree)
              if isinstance(node, ast.Call) and getattr(node.func, "id", "") in ("_int", "_float", "_bool", "_choice")
              and node.args and isinstance(node.args[0], ast.Constant)]
    assert called and not set(called) & set(conf.train_keys()), set(called) & set(conf.train_keys())
    tables = [name for name, value in vars(conf).items() if isinstance(value, dict) and value
              and all(callable(v) for v in value.values())]
    assert tables == [], tables


@pytest.mark.parametrize("values,words", [
    ({"lr": "fast"}, "lr must be a number"), ({"lr": True}, "lr must be a number"),
    ({"warmup_ratio": "1"}, "warmup_ratio"),
    ({"batch_size": "1.5"}, "batch_size must be an integer"), ({"batch_size": 2.0}, "batch_size must be an integer"),
    ({"max_steps": "-1"}, "max_steps"), ({"seed": "-1"}, "seed"), ({"epochs": "0"}, "epochs"),
    ({"val_fraction": "0.95"}, "val_fraction"), ({"promote_tolerance": "2"}, "promote_tolerance"),
    ({"gate_noise_z": "11"}, "gate_noise_z"), ({"rehearsal_pool": "-1"}, "rehearsal_pool"),
])
def test_every_door_refuses_a_bad_train_value_by_its_name(values, words):
    """The conf and a train request (lib/wall/task_requests.py calls parse_train_params) read with one validator."""
    from lib.conf import ConfError, parse_conf, parse_train_params

    with pytest.raises(ConfError, match=words):
        parse_train_params(values)
    with pytest.raises(ConfError, match=words):
        parse_conf({k: str(v) for k, v in values.items()}, "/nonexistent/studies")


def test_conf_strings_and_request_values_mean_the_same_setting():
    from lib.conf import TrainParams, parse_train_params

    sent = {"max_steps": "0", "lr": " 1e-3 ", "epochs": "2", "promote_tolerance": "0.05", "seed": "3",
            "rehearsal_pool": "4"}
    p = parse_train_params(sent)
    assert (p.trainer.max_steps, p.trainer.lr, p.trainer.epochs, p.score_tolerance, p.seed) == (
        None, 1e-3, 2.0, 0.05, 3)
    assert parse_train_params({"max_steps": 0, "lr": 1e-3, "epochs": 2, "score_tolerance": 0.05, "seed": 3,
                               "rehearsal_pool": 4}) == p
    assert parse_train_params({"score_tolerance": "0.1", "promote_tolerance": "0.3"}).score_tolerance == 0.1
    assert parse_train_params({}, base=p) == p and parse_train_params({"lr": None, "seed": ""}) == TrainParams()


def test_the_train_keys_are_declared_once():
    """The request check, the task's /info config and the run record all name conf.train_keys()."""
    from lib.conf import TRAIN_ALIASES, TrainParams, train_keys
    from lib.wall.task_requests import DECLARED

    assert DECLARED["train"] == set(train_keys()) | {"rollback", "force"}
    record = TrainParams().record()
    assert set(record) == set(train_keys()) - set(TRAIN_ALIASES)


def test_every_trainconfig_field_is_a_cli_flag():
    import argparse
    import dataclasses

    from umind_core.commands.train import add_train_arguments
    from umind_core.training.config import TrainConfig

    parser = argparse.ArgumentParser()
    add_train_arguments(parser)
    flags = {a.dest for a in parser._actions}
    own = {"output_dir": "out", "full": "full", "pack": "no_pack", "progress": "no_progress"}
    for f in dataclasses.fields(TrainConfig):
        assert own.get(f.name, f.name) in flags, f.name
    args = parser.parse_args(["--manifest", "m", "--out", "o"])
    defaults = TrainConfig(output_dir="o")
    for f in dataclasses.fields(TrainConfig):
        if f.name not in own and f.name != "mixed_precision":  # its flag adds "auto"
            assert getattr(args, f.name) == getattr(defaults, f.name), f.name


def test_mask_loss_weight_has_one_owner_the_training_run(caplog):
    """TrainConfig owns it; the trainer writes it into the model config and says so when it replaces another."""
    import logging

    from umind_core.training.config import TrainConfig
    from umind_core.training.trainer import _apply_mask_loss_weight

    model = types.SimpleNamespace(config=types.SimpleNamespace(mask_loss_weight=1.0))
    with caplog.at_level(logging.INFO, logger="umind_core.training.trainer"):
        _apply_mask_loss_weight(model, TrainConfig(output_dir="x"))
        assert model.config.mask_loss_weight == 1.0 and "mask_loss_weight" not in caplog.text
        _apply_mask_loss_weight(model, TrainConfig(output_dir="x", mask_loss_weight=0.5))
    assert model.config.mask_loss_weight == 0.5 and "replaces the model's stored 1.0" in caplog.text


# ------------------------------------------------------------------------------------------- current frame

FRAME_CASES = [(kind, n, current) for kind in ("2d", "cine", "volume") for n in (1, 2, 3, 7, 8)
               for current in (None, 0, n - 1, n // 2)]


@pytest.mark.parametrize("kind,n,current", FRAME_CASES)
def test_the_slicer_current_frame_is_the_core_rule(kind, n, current):
    from UMindLib.requests import current_frame as slicer_current_frame

    from umind_core.frames import current_frame

    assert slicer_current_frame(kind, n, current) == current_frame(kind, n, current)


def _frames_geometry(kind: str, n: int):
    from umind_core.imageio import Geometry

    eye = tuple(float(v) for v in np.eye(3).ravel())
    if kind == "2d":
        return Geometry("2d", (20, 20), (1.0, 1.0), (0.0, 0.0), (1.0, 0.0, 0.0, 1.0))
    return Geometry(kind, (n, 20, 20), (1.0,) * 3, (0.0,) * 3, eye, format="nrrd")


@pytest.mark.parametrize("kind,n", [("2d", 1), ("cine", 7), ("volume", 7), ("volume", 8)])
def test_the_servers_frame_choices_take_the_core_rule(kind, n):
    """Without a `slice` or prompts, an interactive request and frames=current land where the core rule says;
    the Slicer session, given no view, picks the same frame of the same image."""
    from lib.params import visual_prompt
    from UMindLib.requests import current_frame as slicer_current_frame

    from umind_core.frames import current_frame, parse_frames

    geometry = _frames_geometry(kind, n)
    want = current_frame(kind, n)
    assert visual_prompt({}, geometry)[0] == want == parse_frames("current").select(geometry)[0]
    assert slicer_current_frame(kind, n) == want
    last = n - 1
    assert visual_prompt({"slice": last}, geometry)[0] == last
    assert parse_frames("current").select(geometry, current=last) == [last]
    if kind != "2d":  # a click names its frame when no slice is sent
        assert visual_prompt({"foreground": [[3, 4, last]]}, geometry)[0] == last


def test_what_the_slicer_module_sends_as_frames_the_server_reads():
    from UMindLib.requests import ImageTarget, RunRequest, build_infer_request

    from umind_core.frames import parse_frames

    target = ImageTarget("im", np.eye(4), (20, 20, 7), 7, 5)
    for all_frames, want in ((False, [5]), (True, list(range(7)))):
        params = build_infer_request(RunRequest("segment", prompt="lesion", all_frames=all_frames), target).params
        assert parse_frames(params["frames"]).select(_frames_geometry("volume", 7), current=params["slice"]) == want


# ------------------------------------------------------------------------------------------------ ellipse outline


@pytest.mark.parametrize("axes, n", [((10.0, 50.0, 90.0, 20.0, 45.5, 23.0, 54.5, 47.0), None),
                                     ((3.2, 7.1, 61.9, 7.1, 32.55, 0.4, 32.55, 13.8), 17)])
def test_the_slicer_ellipse_outline_is_the_core_rule(axes, n):
    """A head circumference's closed curve goes through the same points in the Slicer module as in the server's
    markups file: `UMindLib.geometry.ellipse_outline` is a copy of `umind_core.answers.landmarks.ellipse_outline`."""
    from UMindLib import geometry as slicer_geometry

    from umind_core.answers import landmarks

    assert slicer_geometry.OUTLINE_POINTS == landmarks.OUTLINE_POINTS
    kw = {} if n is None else {"n": n}
    assert np.array_equal(slicer_geometry.ellipse_outline(axes, **kw), landmarks.ellipse_outline(axes, **kw))


# ------------------------------------------------------------------------------------------------ a mask's box

def test_the_apps_mask_boxes_are_the_core_rule():
    """The trainer's manifest boxes and the active-learning task signal box a mask with `masks.mask_box` (each once
    had its own two lines of np.nonzero): the box of a mask is its first and last column and row."""
    import ast

    from lib.activelearning import signals
    from lib.trainers import dataset

    from umind_core import masks

    assert dataset.mask_box is masks.mask_box and signals.mask_box is masks.mask_box
    for module in (dataset, signals):
        tree = ast.parse(Path(module.__file__).read_text(encoding="utf-8"))
        calls = [n.func.attr for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)]
        assert "nonzero" not in calls, module.__name__
    mask = np.zeros((20, 30), bool)
    mask[4:9, 7:21] = True
    assert masks.mask_box(mask) == (7, 4, 20, 8)


# ----------------------------------------------------------------------------------------------- line lengths

@pytest.mark.parametrize("line, s", [((10.0, 20.0, 40.0, 60.0), 0.1), ((0.5, 0.25, 100.75, 3.5), 0.27),
                                     ((12.34, 56.78, 12.34, 56.78), 0.3), ((3.0, 4.0, 0.0, 0.0), 0.123456)])
def test_every_length_is_imageio_line_length(line, s):
    """A line's length in mm is `imageio.line_length(...).mm` everywhere: the generator's manifests (rounded to
    0.01 mm as they store it), the evaluation's measured answer and the Slicer importer's lines keep no wrapper or
    formula of their own (the evaluation and the importers once each wrapped it, the generator recomputed it)."""
    from umind_core.data import synthetic
    from umind_core.evaluation import scoring
    from umind_core.imageio import line_length
    from umind_core.importers import common
    from umind_core.importers import slicer as slicer_import

    assert synthetic._length_mm(*line, s) == round(line_length(line, (s, s)).mm, 2)
    assert slicer_import.line_length is line_length and scoring.line_length is line_length
    assert not hasattr(common, "line_length_mm") and not hasattr(scoring, "_line_mm")
    assert not hasattr(runner, "_line_mm")


def test_a_folder_of_inputs_takes_the_files_imageio_reads(tmp_path):
    """`umind infer FOLDER` takes a file when `imageio.detect_format` names its format (`batch._is_image_candidate`
    once kept its own suffix list and DICM check, which left a detached `.nhdr` out without a word)."""
    from umind_core import batch, imageio

    dicm = b"\0" * 128 + b"DICM" + b"\0" * 16
    files = {"a.png": b"x", "b.JPG": b"x", "c.nii.gz": b"x", "d.mha": b"x", "e.nhdr": b"NRRD0004\n", "IM0001": dicm,
             "IM0002": b"\0" * 200, "short": dicm[:131], "notes.txt": b"x", "f.dcm.bak": b"x", "g.dicom": b"x"}
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    for name in files:
        try:
            imageio.detect_format(tmp_path / name)
            read = True
        except imageio.ImageReadError:
            read = False
        assert batch._is_image_candidate(tmp_path / name) is read, name
    found = {p.name for p in batch.discover_inputs([str(tmp_path)])[0]}
    assert found == {"a.png", "b.JPG", "c.nii.gz", "d.mha", "e.nhdr", "IM0001", "g.dicom"}


# -------------------------------------------------------------------------------------------------- mask IoU

#: benchmarks still computing their own IoU, left to the engineer editing them (listed so a new copy is not added)
_OWN_IOU_LEFT = {"real_heldout.py"}


def test_the_benchmarks_score_masks_with_the_one_mask_iou():
    """A benchmark's mask IoU is `umind_core.evaluation.metrics.mask_iou` (both empty: 1.0), not an intersection
    over union of its own: three benchmarks once each kept a copy."""
    import re

    own = re.compile(r"logical_and\(|\(\w+ & \w+\)\.sum\(\)")
    copies = sorted(p.name for p in (ROOT / "benchmarks").glob("*.py") if own.search(p.read_text(encoding="utf-8")))
    assert set(copies) <= _OWN_IOU_LEFT, copies
    rng = np.random.default_rng(0)
    from umind_core.evaluation.metrics import mask_iou

    for _ in range(5):
        a, b = rng.random((40, 50)) > 0.6, rng.random((40, 50)) > 0.4
        assert mask_iou(a, b) == pytest.approx((a & b).sum() / (a | b).sum(), rel=1e-6)
    assert mask_iou(np.zeros((4, 4), bool), np.zeros((4, 4), bool)) == 1.0


# ------------------------------------------------------------------------------------ an examination's views

def test_the_number_of_an_examinations_views_has_one_rule():
    """`umind infer --exam`, the server's door (`images`) and its frames mode count views with
    `exam_views.check_view_count` and read them with `exam_views.read_views` (the count was written three times and
    the view twice, as `_View` and `lib.exam.View`)."""
    import re

    from lib import exam
    from lib.wall import exam_ref
    from lib.wall.errors import BadRequest

    from umind_core import exam_views
    from umind_core.commands import _infer_exam

    assert exam_ref.check_view_count is exam_views.check_view_count and exam.check_exam_count is exam_ref.check_exam_count
    assert "check_view_count" in Path(_infer_exam.__file__).read_text(encoding="utf-8")
    assert exam.read_views is exam_views.read_views and "read_views" in Path(_infer_exam.__file__).read_text("utf-8")
    for count, ok in ((0, False), (1, False), (2, True), (exam_views.MAX_EXAM_VIEWS, True),
                      (exam_views.MAX_EXAM_VIEWS + 1, False)):
        try:
            exam_views.check_view_count(count, "files")
        except exam_views.ExamViewError as exc:
            assert not ok and f"({'files'})" in str(exc)
        else:
            assert ok, count
    with pytest.raises(BadRequest, match=r"4 views \(x\), more than the 3 allowed by max_exam_views = 3"):
        exam_ref.check_exam_count(4, "x", 3)
    again = re.compile(r"at least 2 (views|frames)|views?\)? *< *2\b")
    copies = [str(p.relative_to(ROOT)) for top in ("umind_core", "monailabel_app") for p in (ROOT / top).rglob("*.py")
              if p.name != "exam_views.py" and again.search(p.read_text(encoding="utf-8"))]
    assert not copies, copies


def test_a_view_is_the_manifests_view_wherever_it_is_read():
    """One view class: a request's examination (`exam_views.read_views`, the CLI's and the server's) holds the
    manifest's `View` (where it came from, its frame, spacing and site) in a `Record`; the pixels stay beside it.
    Only the Slicer module (no umind_core in Slicer's Python) keeps a copy of its own."""
    import re

    import numpy as np

    from umind_core.data.manifest import Record, View
    from umind_core.exam_views import ExamViewError, read_views
    from umind_core.imageio import Frame, Geometry, Study

    def study(path, n, spacing):
        frames = [Frame(np.full((20, 30), k * 10, np.uint8), spacing, k, path) for k in range(n)]
        kind, shape = ("2d", (20, 30)) if n == 1 else ("clip", (n, 20, 30))
        return Study(path, frames, Geometry(kind, shape, (*spacing, 1.0)[: len(shape)], (0.0,) * len(shape),
                                            (1.0,) * len(shape) ** 2))

    kinds = re.compile(r"^class (\w*View)\b", re.M)
    found = sorted(f"{p.relative_to(ROOT)}:{m}" for top in ("umind_core", "monailabel_app") for p in (ROOT / top).rglob("*.py")
                   for m in kinds.findall(p.read_text(encoding="utf-8")))
    assert found == ["umind_core/data/manifest.py:View"], found
    clip, still = study("clip", 3, (0.2, 0.3)), study("still", 1, (0.5, 0.5))
    exam = read_views(["clip", "still"], [clip, still], [2, 0], sites=["kidney", None])
    assert isinstance(exam.record, Record) and all(type(v) is View for v in exam.views)
    assert [(v.image, v.frame, v.spacing, v.site) for v in exam.views] == [("clip", 2, (0.2, 0.3), "kidney"),
                                                                            ("still", 0, (0.5, 0.5), None)]
    assert [f.pixels[0, 0] for f in exam.frames] == [20, 0] and exam.record.site == "kidney"
    with pytest.raises(ExamViewError, match=r"view 2 \('still'\) shows 'thyroid', an earlier view 'kidney'"):
        read_views(["clip", "still"], [clip, still], [0, 0], sites=["kidney", "thyroid"])
    with pytest.raises(ExamViewError, match="at least 2 views"):
        read_views(["clip"], [clip], [0])
    with pytest.raises(ValueError, match="2 views, 2 studies, 2 frames, 1 sites"):  # never a view dropped by zip
        read_views(["clip", "still"], [clip, still], [0, 0], sites=["kidney"])
    # a study read as one view: the client's current frame where the study has it, else the opening one; a clip
    # says which frame was read, a still says nothing
    from umind_core.exam_views import view_frame

    assert view_frame(clip, 1) == (1, ["a clip of 3 frames: frame 1 was read as the view"])
    assert view_frame(clip, 7) == (0, ["a clip of 3 frames: frame 0 was read as the view"])  # not a frame of it
    assert view_frame(clip, -1)[0] == 0 and view_frame(still, 5) == (0, [])


def test_the_slicer_label_file_sniffing_is_imageios_rule(tmp_path):
    """The Slicer module tells a reply's label file by its first bytes with its own copy (Slicer's Python has no
    umind_core): on real files of every format imageio sniffs, and on near misses, it names the same format where it
    reads one (NRRD, PNG, NIfTI-1, gzipped NIfTI-1) and none elsewhere."""
    import gzip

    import SimpleITK as sitk
    from PIL import Image
    from UMindLib import labelfiles

    from umind_core.imageio import sniff_format

    labels = (np.arange(48, dtype=np.uint8).reshape(6, 8) % 3)
    files = {}
    for name in ("a.nrrd", "a.nii", "a.nii.gz", "a.mha"):
        sitk.WriteImage(sitk.GetImageFromArray(labels), str(tmp_path / name))
        files[name] = tmp_path / name
    Image.fromarray(labels).save(tmp_path / "a.png")
    Image.fromarray(labels * 80).convert("RGB").save(tmp_path / "a.jpg")
    files.update({"a.png": tmp_path / "a.png", "a.jpg": tmp_path / "a.jpg"})
    nifti = (tmp_path / "a.nii").read_bytes()
    near = {"NRRD-short": b"NRRD\n" + b"x" * 600, "nifti-2": nifti[:344] + b"n+2\x00" + nifti[348:],
            "nifti-no-null": nifti[:344] + b"n+1x" + nifti[348:], "dicom": b"\x00" * 128 + b"DICM" + b"\x00" * 500,
            "junk": b"\x01" * 600}
    for name, data in near.items():
        (tmp_path / name).write_bytes(data)
        files[name] = tmp_path / name
    readable = {"nrrd": "nrrd", "png": "png", "nifti": "nifti", "nifti-gz": "nifti"}
    for name, path in files.items():
        raw = path.read_bytes()
        raw = gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw
        owner = sniff_format(path)
        want = None if name == "nifti-2" else readable.get(owner)  # NIfTI-2 is no label file of the module's
        assert labelfiles.sniff_label_format(raw) == want, (name, owner)


# ------------------------------------------------------------------------------------------------ one record type

_KIND_BRANCH = __import__("re").compile(
    r"\b(ManifestRecord|ExamRecord|ExamView|AnyRecord|is_exam|_exam_row|_exam_fixes|check_exam)\b"
    r"|isinstance\([^)]*\b(ExamState|ImageState)\b")


def test_one_record_type_and_no_branch_on_a_records_kind():
    """A record is a list of views (`data.manifest.Record`, `View`): no second record or view class of the
    manifest, no test of which kind a record or a decode state is (a view count is what differs), no exam twin
    of a single-image row or fix. Planting ``isinstance(state, ExamState)`` back into the Predictor fails here."""
    import ast

    from umind_core.data import manifest

    hits = []
    for folder in ("umind_core", "monailabel_app", "benchmarks", "scripts"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            for n, line in enumerate(path.read_text().splitlines(), start=1):
                if _KIND_BRANCH.search(line):
                    hits.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
    assert not hits, "\n".join(hits)
    tree = ast.parse(Path(manifest.__file__).read_text())
    classes = {node.name for node in tree.body if isinstance(node, ast.ClassDef)}
    assert {"Record", "View"} <= classes and not {c for c in classes if c.endswith(("Record", "View"))} - {"Record", "View"}
