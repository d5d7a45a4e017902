"""UMind.py imports and wires up outside Slicer: qt, ctk and slicer.ScriptedLoadableModule are
stand-ins made here; the .ui file is well-formed and holds every widget the code looks up."""

from __future__ import annotations

import ast
import contextlib
import json
import re
import sys
import types
import xml.etree.ElementTree as ET
from pathlib import Path
from unittest.mock import MagicMock

import pytest

MODULE_DIR = Path(__file__).resolve().parents[1] / "slicer_module" / "UMind"
UI_FILE = MODULE_DIR / "Resources" / "UI" / "UMind.ui"
SOURCE = (MODULE_DIR / "UMind.py").read_text(encoding="utf-8")


def ui_widget_names() -> set[str]:
    root = ET.parse(UI_FILE).getroot()
    return {w.get("name") for w in root.iter("widget")}


def code_widget_names() -> set[str]:
    return set(re.findall(r"self\.ui\.(\w+)", SOURCE))


class _Base:
    def __init__(self, parent=None):
        self.parent = parent if parent is not None else MagicMock()

    def setup(self):
        self.layout = MagicMock()

    def resourcePath(self, rel):
        return str(MODULE_DIR / "Resources" / rel)


class _Test(_Base):
    def delayDisplay(self, msg):
        pass


def _standins() -> dict[str, types.ModuleType]:
    slm = types.ModuleType("slicer.ScriptedLoadableModule")
    slm.ScriptedLoadableModule = type("ScriptedLoadableModule", (_Base,), {})
    slm.ScriptedLoadableModuleWidget = type("ScriptedLoadableModuleWidget", (_Base,), {})
    slm.ScriptedLoadableModuleLogic = type("ScriptedLoadableModuleLogic", (), {})
    slm.ScriptedLoadableModuleTest = type("ScriptedLoadableModuleTest", (_Test,), {})
    qt = types.ModuleType("qt")
    qt.QTimer = MagicMock(name="QTimer")
    qt.QSettings = MagicMock(name="QSettings")
    ctk = types.ModuleType("ctk")
    return {"slicer.ScriptedLoadableModule": slm, "qt": qt, "ctk": ctk}


@pytest.fixture
def umind(monkeypatch):
    slicer = pytest.importorskip("slicer")
    for name, mod in _standins().items():
        monkeypatch.setitem(sys.modules, name, mod)
    monkeypatch.syspath_prepend(str(MODULE_DIR))
    for name in [n for n in sys.modules if n == "UMind" or n.startswith("UMindLib")]:
        monkeypatch.delitem(sys.modules, name)
    import UMind

    scene = slicer.vtkMRMLScene() if hasattr(slicer, "vtkMRMLScene") else MagicMock()
    monkeypatch.setattr(slicer, "mrmlScene", scene, raising=False)
    util = slicer.util
    monkeypatch.setattr(util, "loadUI", lambda path: MagicMock(name=f"ui:{path}"))
    monkeypatch.setattr(util, "WaitCursor", contextlib.nullcontext)
    monkeypatch.setattr(util, "settingsValue", lambda key, default, converter=None: default)
    yield UMind
    sys.modules.pop("UMind", None)


def make_widget(UMind, monkeypatch):
    names = ui_widget_names()
    ui = types.SimpleNamespace(**{n: MagicMock(name=n) for n in names})  # unknown names fail
    monkeypatch.setattr(UMind.slicer.util, "childWidgetVariables", lambda w: ui)
    widget = UMind.UMindWidget(MagicMock())
    widget.setup()
    return widget, ui


def test_ui_file_is_well_formed_and_has_every_widget_the_code_uses():
    root = ET.parse(UI_FILE).getroot()
    assert root.tag == "ui" and root.find("class").text == "UMind"
    used = code_widget_names()
    assert {"runButton", "runAllFramesButton", "submitButton", "nextSampleButton", "trainButton",
            "stopTrainButton", "answerTextEdit", "promptComboBox", "serverUrlComboBox"} <= used
    missing = used - ui_widget_names()
    assert not missing, f"widgets used in UMind.py but absent from UMind.ui: {sorted(missing)}"
    customs = {c.find("class").text for c in root.iter("customwidget")}
    classes = {w.get("class") for w in root.iter("widget")}
    assert {c for c in classes if not c.startswith("Q")} <= customs


def test_module_imports_with_standins_and_declares_itself(umind):
    assert "UMindLib" in sys.modules and "requests" not in dir(umind)  # no PyPI requests
    parent = MagicMock()
    umind.UMind(parent)
    assert parent.title == "UMind" and parent.categories == ["Ultrasound"]
    assert issubclass(umind.UMindTest, sys.modules["slicer.ScriptedLoadableModule"]
                      .ScriptedLoadableModuleTest)


def test_lib_imports_no_qt_ctk_or_slicer_app():
    banned_modules = {"qt", "ctk", "requests", "cgi", "slicer.util", "slicer.ScriptedLoadableModule"}
    banned_attrs = {"app", "mrmlScene", "util", "modules"}
    for path in sorted((MODULE_DIR / "UMindLib").glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names = {node.module or ""}
            else:
                names = set()
            assert not names & banned_modules, f"{path.name} imports {names & banned_modules}"
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                    and node.value.id == "slicer":
                assert node.attr not in banned_attrs, f"{path.name} uses slicer.{node.attr}"


def test_widget_setup_fills_tasks_and_errors_become_status_messages(umind, monkeypatch):
    widget, ui = make_widget(umind, monkeypatch)
    tasks = [c.args[0] for c in ui.taskComboBox.addItem.call_args_list]
    assert tasks == ["segment", "detect", "landmarks", "measure", "diagnose", "report", "ask"]
    ui.serverUrlComboBox.addItem.assert_called_with(umind.DEFAULT_URL)
    connected = {c.args[0] for c in ui.runButton.connect.call_args_list}
    assert connected == {"clicked(bool)"}
    widget.onRun()
    ui.statusLabel.setText.assert_called_with("Run failed: connect to a server first")
    widget.onSubmit()
    ui.statusLabel.setText.assert_called_with("Submit failed: connect to a server first")


def test_connect_fills_models_strategies_and_version(umind, monkeypatch):
    """Against the real server (tests/real_server.py): every model it lists appears with the type it states."""
    import urllib.request

    from real_server import shared_server

    server = shared_server()
    with urllib.request.urlopen(server.url + "/info/", timeout=60) as r:
        info = json.loads(r.read())
    assert info["models"]["umind_interpret"]["type"] == "classification"
    widget, ui = make_widget(umind, monkeypatch)
    ui.serverUrlComboBox.currentText = server.url
    ui.serverUrlComboBox.count = 0
    widget.onConnect()
    models = [c.args for c in ui.modelComboBox.addItem.call_args_list]
    assert models[0] == ("(by task)",)
    assert sorted(models[1:]) == sorted((f"{name} ({m['type']})", name) for name, m in info["models"].items())
    strategies = [c.args[0] for c in ui.strategyComboBox.addItem.call_args_list]
    assert sorted(strategies) == sorted(info["strategies"])
    ui.modelVersionLabel.setText.assert_called_with(str(info["umind"]["current_version"]))
    assert "Connected to UMind" in ui.statusLabel.setText.call_args.args[0]
    ui.serverUrlComboBox.currentText = "http://127.0.0.1:1"
    widget.onConnect()
    msg = ui.statusLabel.setText.call_args.args[0]
    assert msg.startswith("Connect failed: cannot reach the server at http://127.0.0.1:1")


def test_run_hands_the_logic_one_request_and_reports_the_sessions_frame(umind, monkeypatch):
    """Run reads the panel into one RunRequest; the frame in the status is the one the session decided."""
    from UMindLib.mrml import ResultNodes

    widget, ui = make_widget(umind, monkeypatch)
    volume = MagicMock(name="volume")
    monkeypatch.setattr(widget, "_volumeAndBrowser", lambda: (volume, None))
    monkeypatch.setattr(widget, "_ensurePromptNodes", lambda: None)
    monkeypatch.setattr(widget, "_currentSlice", lambda v: 4)
    ui.taskComboBox.currentText, ui.promptComboBox.currentText = "segment", " lesion "
    ui.modelComboBox.currentData, ui.useRoiCheckBox.checked, ui.replaceSegmentsCheckBox.checked = "", False, False
    ui.maskReadoutCheckBox.checked = False
    for w in (ui.positivePointsPlaceWidget, ui.negativePointsPlaceWidget, ui.roiPlaceWidget):
        w.currentNode.return_value = None
    widget.info = types.SimpleNamespace(models={"umind_segment": {}})
    widget.logic.session = object()
    previous, calls = ResultNodes(), []
    widget.resultNodes = previous
    reply = types.SimpleNamespace(answer="", version="", all_results=[], warnings=[], label_names={})
    monkeypatch.setattr(widget.logic, "run", lambda *a, **kw: calls.append((a, kw)) or (reply, ResultNodes(frame=3)))
    widget.onRun()
    (args, kw), = calls
    request = args[1]
    assert args[0] is volume and kw == {"browser": None, "previous": previous}
    assert (request.task, request.prompt, request.model, request.all_frames, request.current_frame,
            request.replace, request.readout, list(request.available_models)) == (
        "segment", "lesion", "", False, 4, False, "tokens", ["umind_segment"])
    assert request.foreground == [] and request.roi is None
    assert ui.statusLabel.setText.call_args.args[0].startswith("Done on frame 3:")


def test_run_on_exam_sends_the_image_first_then_the_checked_volumes_and_submit_refuses_its_answer(umind, monkeypatch):
    """Run on exam: the selected image is the first view and the volumes checked beside it follow (the image itself
    checked too is not sent twice); the exam's answer fills the answer box, and Submit then refuses to send it as one
    image's label. The exam row shows for the tasks an examination runs only."""
    from UMindLib.mrml import ExamNodes

    widget, ui = make_widget(umind, monkeypatch)
    image, other = MagicMock(name="image"), MagicMock(name="other")
    image.GetID.return_value, other.GetID.return_value = "vtkMRMLScalarVolumeNode1", "vtkMRMLScalarVolumeNode2"
    monkeypatch.setattr(widget, "_volumeAndBrowser", lambda: (image, None))
    monkeypatch.setattr(widget, "_browserOf", lambda v: None)
    monkeypatch.setattr(widget, "_currentSlice", lambda v: 0)
    ui.examVolumesComboBox.checkedNodes.return_value = [other, image]
    ui.taskComboBox.currentText, ui.promptComboBox.currentText = "report", " "
    ui.maskReadoutCheckBox.checked = True
    widget.info = types.SimpleNamespace(models={"umind_interpret": {}})
    widget.logic.session = object()
    calls, nodes = [], ExamNodes()
    reply = types.SimpleNamespace(answer="Two views, one benign lesion.", views=[0, 1], finding="benign", warnings=[])
    monkeypatch.setattr(widget.logic, "runExam", lambda *a, **kw: calls.append((a, kw)) or (reply, nodes))
    widget.onRunExam()
    (args, kw), = calls
    assert args[0] == [image, other] and args[2] == [None, None] and kw == {"previous": None}
    request = args[1]
    assert (request.task, request.prompt, request.current_frame, request.readout, list(request.available_models)) == \
        ("report", "", 0, "mask", ["umind_interpret"])
    ui.answerTextEdit.setPlainText.assert_called_with("Two views, one benign lesion.")
    assert ui.statusLabel.setText.call_args.args[0] == "Examination of 2 views done (benign): 0 markup(s)"
    assert widget.examNodes is nodes and widget.resultNodes is None
    widget.onRunExam()
    assert calls[-1][1] == {"previous": nodes}  # the exam's text node is reused
    widget.onSubmit()
    assert ui.statusLabel.setText.call_args.args[0].startswith("Submit failed: the answer is an examination's")
    for task, shown in (("segment", True), ("measure", True), ("ask", True)):
        ui.taskComboBox.currentText = task
        widget.onTaskChanged(0)
        ui.examRow.setVisible.assert_called_with(shown)
