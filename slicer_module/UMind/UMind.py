"""UMind: ultrasound vision-language assistant for 3D Slicer, talking to the UMind MONAI Label
server. This file only wires the Qt panel to UMindLib; everything testable lives there."""

import json
import logging
import os

import qt
import slicer
import vtk
from slicer.ScriptedLoadableModule import (ScriptedLoadableModule, ScriptedLoadableModuleLogic,
                                           ScriptedLoadableModuleTest,
                                           ScriptedLoadableModuleWidget)

from UMindLib import TASK_PRESETS, UMindClient, UMindServerError
from UMindLib.contract import READOUTS
from UMindLib.geometry import GeometryError
from UMindLib.labelfiles import LabelFileError
from UMindLib.replies import ReplyError, run_summary, train_progress
from UMindLib.requests import RequestError, RunRequest, current_frame, exam_tasks

SETTINGS_URLS = "UMind/ServerUrlHistory"
SETTINGS_PROMPTS = "UMind/PromptHistory"
DEFAULT_URL = "http://127.0.0.1:8000"
HISTORY_LENGTH = 12
TRAIN_POLL_MS = 5000
USER_ERRORS = (UMindServerError, RequestError, GeometryError, LabelFileError, ReplyError,
               ValueError)


class UMind(ScriptedLoadableModule):
    def __init__(self, parent):
        ScriptedLoadableModule.__init__(self, parent)
        self.parent.title = "UMind"
        self.parent.categories = ["Ultrasound"]
        self.parent.dependencies = ["Sequences", "Segmentations", "Markups"]
        self.parent.contributors = ["UMind contributors"]
        self.parent.helpText = (
            "Segment, detect, locate landmarks, measure and interpret ultrasound images with the "
            "UMind vision-language model served by MONAI Label. Not for clinical use.")
        self.parent.acknowledgementText = "Built on 3D Slicer, MONAI Label and Qwen3-VL."


class UMindWidget(ScriptedLoadableModuleWidget):
    """The panel. Each slot reads the UI, calls the logic, shows the outcome or the error."""

    def __init__(self, parent=None):
        ScriptedLoadableModuleWidget.__init__(self, parent)
        self.logic = None
        self.info = None
        self.resultNodes = None
        self.examNodes = None  # the last examination's nodes (its text node is reused)
        self.answerIsExam = False  # the answer box holds an examination's answer, which Submit must not send
        self.trainTimer = None

    def setup(self):
        ScriptedLoadableModuleWidget.setup(self)
        uiWidget = slicer.util.loadUI(self.resourcePath("UI/UMind.ui"))
        self.layout.addWidget(uiWidget)
        self.ui = slicer.util.childWidgetVariables(uiWidget)
        uiWidget.setMRMLScene(slicer.mrmlScene)
        self.logic = UMindLogic()

        self.ui.taskComboBox.clear()
        for task in TASK_PRESETS:
            self.ui.taskComboBox.addItem(task)
        self._loadHistory(self.ui.serverUrlComboBox, SETTINGS_URLS, [DEFAULT_URL])
        self._loadHistory(self.ui.promptComboBox, SETTINGS_PROMPTS, [])
        self.ui.positivePointsPlaceWidget.setMRMLScene(slicer.mrmlScene)
        self.ui.negativePointsPlaceWidget.setMRMLScene(slicer.mrmlScene)
        self.ui.roiPlaceWidget.setMRMLScene(slicer.mrmlScene)
        self.ui.trainProgressBar.setValue(0)

        self.ui.connectButton.connect("clicked(bool)", self.onConnect)
        self.ui.taskComboBox.connect("currentIndexChanged(int)", self.onTaskChanged)
        self.ui.clearPromptsButton.connect("clicked(bool)", self.onClearPrompts)
        self.ui.runButton.connect("clicked(bool)", lambda: self.onRun(allFrames=False))
        self.ui.runAllFramesButton.connect("clicked(bool)", lambda: self.onRun(allFrames=True))
        self.ui.runExamButton.connect("clicked(bool)", self.onRunExam)
        self.ui.submitButton.connect("clicked(bool)", self.onSubmit)
        self.ui.nextSampleButton.connect("clicked(bool)", self.onNextSample)
        self.ui.trainButton.connect("clicked(bool)", self.onTrain)
        self.ui.stopTrainButton.connect("clicked(bool)", self.onStopTrain)

        self.trainTimer = qt.QTimer()
        self.trainTimer.setInterval(TRAIN_POLL_MS)
        self.trainTimer.connect("timeout()", self.onPollTrain)
        self._ensurePromptNodes()
        self.onTaskChanged(0)
        self._status("Not connected. Enter the server address and press Connect.")

    def cleanup(self):
        if self.trainTimer is not None:
            self.trainTimer.stop()

    # helpers ---------------------------------------------------------------------------

    def _status(self, text, error=False):
        self.ui.statusLabel.setText(text)
        self.ui.statusLabel.setStyleSheet("color: #c0392b;" if error else "")
        (logging.error if error else logging.info)("UMind: " + text)

    def _guard(self, what, fn, *args, **kwargs):
        """Run a slot body; every expected failure becomes a status message, none a traceback."""
        try:
            with slicer.util.WaitCursor():
                return fn(*args, **kwargs)
        except USER_ERRORS as exc:
            message = exc.message if isinstance(exc, UMindServerError) else str(exc)
            self._status(f"{what} failed: {message}", error=True)
        return None

    def _loadHistory(self, combo, key, default):
        values = slicer.util.settingsValue(key, default, converter=lambda v: list(v or []))
        combo.clear()
        for v in values or default:
            combo.addItem(v)

    def _remember(self, combo, key, text):
        if not text:
            return
        older = [combo.itemText(i) for i in range(combo.count)]
        items = ([text] + [v for v in older if v != text])[:HISTORY_LENGTH]
        combo.clear()
        for v in items:
            combo.addItem(v)
        combo.setCurrentIndex(0)
        qt.QSettings().setValue(key, items)

    def _ensurePromptNodes(self):
        scene = slicer.mrmlScene
        for widget, cls, name, color in (
                (self.ui.positivePointsPlaceWidget, "vtkMRMLMarkupsFiducialNode",
                 "UMind positive", (0.2, 0.9, 0.2)),
                (self.ui.negativePointsPlaceWidget, "vtkMRMLMarkupsFiducialNode",
                 "UMind negative", (0.9, 0.2, 0.2)),
                (self.ui.roiPlaceWidget, "vtkMRMLMarkupsROINode", "UMind ROI", (1.0, 0.8, 0.0))):
            node = widget.currentNode()
            if node is None:
                node = scene.GetFirstNodeByName(name) or scene.AddNewNodeByClass(cls, name)
                node.CreateDefaultDisplayNodes()
                node.GetDisplayNode().SetSelectedColor(*color)
                widget.setCurrentNode(node)

    def _volumeAndBrowser(self):
        volume = self.ui.inputVolumeSelector.currentNode()
        return volume, self._browserOf(volume)

    def _browserOf(self, volume):
        """The sequence browser whose proxy the volume is (a cine clip), or None."""
        if volume is None:
            return None
        return slicer.modules.sequences.logic().GetFirstBrowserNodeForProxyNode(volume)

    def _readout(self):
        """Where boxes, landmarks and calipers come from (UMindLib.contract.READOUTS): the mask, unless unchecked."""
        return READOUTS[0] if self.ui.maskReadoutCheckBox.checked else READOUTS[1]

    def _currentSlice(self, volume):
        """The volume's current frame (UMindLib.requests.current_frame): k of the red view's slice through it,
        the nearest slice when the view lies off the volume; without a red view, the rule's default."""
        dims = volume.GetImageData().GetDimensions()
        sliceWidget = slicer.app.layoutManager().sliceWidget("Red")
        if sliceWidget is None:  # a layout without the red view
            return current_frame("volume", dims[2])
        m = sliceWidget.mrmlSliceNode().GetSliceToRAS()
        ras = [m.GetElement(0, 3), m.GetElement(1, 3), m.GetElement(2, 3), 1.0]
        rasToIjk = vtk.vtkMatrix4x4()
        volume.GetRASToIJKMatrix(rasToIjk)
        k = int(round(rasToIjk.MultiplyPoint(ras)[2]))
        return current_frame("volume", dims[2], min(max(k, 0), dims[2] - 1))

    # slots -----------------------------------------------------------------------------

    def _askCredentials(self):
        """User name and password for a server with auth on (the name is remembered, never the password)."""
        settings = qt.QSettings()
        user = qt.QInputDialog.getText(slicer.util.mainWindow(), "UMind login", "User name:",
                                       qt.QLineEdit.Normal, str(settings.value("UMind/username", "")))
        if not user:
            return None
        password = qt.QInputDialog.getText(slicer.util.mainWindow(), "UMind login",
                                           f"Password for {user}:", qt.QLineEdit.Password, "")
        settings.setValue("UMind/username", user)
        return user, password

    def onConnect(self):
        url = self.ui.serverUrlComboBox.currentText.strip()

        def connect():
            self.info = self.logic.connect(url, credentials=self._askCredentials)
            self._remember(self.ui.serverUrlComboBox, SETTINGS_URLS, url)
            self.ui.modelComboBox.clear()
            self.ui.modelComboBox.addItem("(by task)")
            for name, spec in self.info.models.items():
                self.ui.modelComboBox.addItem(f"{name} ({spec.get('type', '?')})", name)
            self.ui.strategyComboBox.clear()
            for name in self.info.strategies:
                self.ui.strategyComboBox.addItem(name)
            self.ui.modelVersionLabel.setText(self.info.model_version or "unknown")
            self._status(f"Connected to {self.info.name or url} (MONAI Label "
                         f"{self.info.version}), {len(self.info.models)} models.")
        self._guard("Connect", connect)

    def onTaskChanged(self, index):
        task = self.ui.taskComboBox.currentText
        preset = TASK_PRESETS.get(task)
        if preset is not None:
            self.ui.promptComboBox.lineEdit().setPlaceholderText(preset.hint)
        self.ui.examRow.setVisible(task in exam_tasks())

    def onClearPrompts(self):
        for widget in (self.ui.positivePointsPlaceWidget, self.ui.negativePointsPlaceWidget,
                       self.ui.roiPlaceWidget):
            node = widget.currentNode()
            if node is not None:
                node.RemoveAllControlPoints()

    def onRun(self, allFrames=False):
        def run():
            from UMindLib.workflow import markup_positions, roi_box

            if self.logic.session is None:
                raise RequestError("connect to a server first")
            volume, browser = self._volumeAndBrowser()
            if volume is None:
                raise RequestError("select an image first")
            self._ensurePromptNodes()
            model = self.ui.modelComboBox.currentData or ""
            request = RunRequest(
                task=self.ui.taskComboBox.currentText, prompt=self.ui.promptComboBox.currentText.strip(),
                model=model,
                foreground=markup_positions(self.ui.positivePointsPlaceWidget.currentNode()),
                background=markup_positions(self.ui.negativePointsPlaceWidget.currentNode()),
                roi=roi_box(self.ui.roiPlaceWidget.currentNode()) if self.ui.useRoiCheckBox.checked else None,
                all_frames=allFrames,
                current_frame=None if browser else self._currentSlice(volume),  # a clip's: its browser's
                replace=self.ui.replaceSegmentsCheckBox.checked, readout=self._readout(),
                available_models=list(self.info.models) if self.info and not model else [])
            reply, nodes = self.logic.run(volume, request, browser=browser, previous=self.resultNodes)
            self.resultNodes, self.answerIsExam = nodes, False
            self._remember(self.ui.promptComboBox, SETTINGS_PROMPTS, request.prompt)
            self.ui.answerTextEdit.setPlainText(reply.answer)
            if reply.version:
                self.ui.modelVersionLabel.setText(reply.version)
            done = f"{len(reply.all_results)} frame(s)" if allFrames else f"frame {nodes.frame}"
            warn = ("; warnings: " + "; ".join(reply.warnings)) if reply.warnings else ""
            self._status(f"Done on {done}: {len(reply.label_names)} label(s), "
                         f"{len(nodes.all_markups())} markup(s){warn}")
        self._guard("Run", run)

    def onRunExam(self):
        """The image (first view) and the volumes checked beside it, read as one examination."""
        def runExam():
            if self.logic.session is None:
                raise RequestError("connect to a server first")
            volume, browser = self._volumeAndBrowser()
            if volume is None:
                raise RequestError("select an image first: it is the examination's first view")
            others = [n for n in self.ui.examVolumesComboBox.checkedNodes() if n.GetID() != volume.GetID()]
            request = RunRequest(
                task=self.ui.taskComboBox.currentText, prompt=self.ui.promptComboBox.currentText.strip(),
                current_frame=None if browser else self._currentSlice(volume), readout=self._readout(),
                available_models=list(self.info.models) if self.info else [])
            browsers = [browser] + [self._browserOf(n) for n in others]
            reply, nodes = self.logic.runExam([volume] + others, request, browsers, previous=self.examNodes)
            self.examNodes, self.resultNodes, self.answerIsExam = nodes, None, True
            self._remember(self.ui.promptComboBox, SETTINGS_PROMPTS, request.prompt)
            self.ui.answerTextEdit.setPlainText(reply.answer)
            finding = f" ({reply.finding})" if reply.finding else ""
            warn = ("; warnings: " + "; ".join(reply.warnings)) if reply.warnings else ""
            segs = sum(v.segmentation is not None for v in nodes.views)
            masks = f", {segs} segmentation(s)" if segs else ""
            self._status(f"Examination of {len(reply.views)} views done{finding}: "
                         f"{len(nodes.all_markups())} markup(s){masks}{warn}")
        self._guard("Run on exam", runExam)

    def onSubmit(self):
        def submit():
            if self.logic.session is None:
                raise RequestError("connect to a server first")
            if self.answerIsExam:
                raise RequestError("the answer is an examination's; Submit sends one image's label: Run on the "
                                   "image first")
            volume, browser = self._volumeAndBrowser()
            answer = self.ui.answerTextEdit.toPlainText()
            finding = self.ui.findingComboBox.currentText
            task = self.ui.taskComboBox.currentText
            target = self.ui.promptComboBox.currentText if task == "landmarks" else ""
            report = answer if task == "report" else ""  # a corrected report trains the report task
            res = self.logic.submit(volume, self.resultNodes, answer, browser, finding=finding,
                                    report=report, landmark_target=target)
            retrain = res.get("retrain")
            self._status(f"Label saved for {res.get('image', '?')}"
                         + (f"; retraining: {retrain} ({res.get('labels_since_last_run')} new label(s))"
                            if retrain else "."))
        self._guard("Submit", submit)

    def onNextSample(self):
        def nextSample():
            strategy = self.ui.strategyComboBox.currentText
            if not strategy:
                raise RequestError("the server lists no active-learning strategy")
            node = self.logic.loadNextSample(strategy)
            self.ui.inputVolumeSelector.setCurrentNode(node)
            self.resultNodes, self.answerIsExam = None, False
            self.ui.answerTextEdit.setPlainText("")
            self._status(f"Loaded sample {node.GetName()} ({strategy}).")
        self._guard("Next sample", nextSample)

    def onTrain(self):
        def train():
            trainers = list(self.info.trainers) if self.info else []
            res = self.logic.trainStart(trainers[0] if trainers else "umind_lora")
            self.trainTimer.start()
            self._status(f"Training started: {json.dumps(res)[:200]}")
        self._guard("Train", train)

    def onStopTrain(self):
        def stop():
            self.logic.trainStop()
            self.trainTimer.stop()
            self._status("Training stopped.")
        self._guard("Stop training", stop)

    def onPollTrain(self):
        def poll():
            status = self.logic.trainStatus()
            state = str(status.get("status", "")) if isinstance(status, dict) else ""
            self.ui.trainProgressBar.setValue(int(train_progress(status)))
            if state and state != "RUNNING":
                self.trainTimer.stop()
                self.info = self.logic.connect(self.logic.session.client.server_url)
                self.ui.modelVersionLabel.setText(self.info.model_version or "unknown")
                self._status(f"Training {state.lower()}; model version "
                             f"{self.info.model_version}.")
                slicer.util.infoDisplay(run_summary(self.info.raw), windowTitle="UMind training run")
        self._guard("Training status", poll)


class UMindLogic(ScriptedLoadableModuleLogic):
    """Holds the server session; hands slicer.mrmlScene to UMindLib."""

    def __init__(self):
        ScriptedLoadableModuleLogic.__init__(self)
        self.session = None

    def connect(self, url, timeout=60.0, credentials=None):
        """`credentials()` -> (user, password) is asked only when the server has auth on; the client then
        sends the bearer token with every request, as the stock MONAILabel extension does."""
        from UMindLib.workflow import UMindSession

        client = UMindClient(url, timeout=timeout)
        client.login_if_required(credentials or (lambda: None))
        self.session = UMindSession(slicer.mrmlScene, client)
        return self.session.info()

    def run(self, volume, request, browser=None, previous=None):
        """`request`: a UMindLib.requests.RunRequest; `previous`: the last run's ResultNodes (reused)."""
        reply, nodes = self.session.run(volume, request, browser, previous)
        if nodes.segmentation is not None:
            nodes.segmentation.SetReferenceImageGeometryParameterFromVolumeNode(volume)
            slicer.util.setSliceViewerLayers(background=volume)
        return reply, nodes

    def runExam(self, volumes, request, browsers=(), previous=None):
        """`volumes`: the examination's images, the first the request's; `previous`: the last exam's ExamNodes."""
        if self.session is None:
            raise RequestError("connect to a server first")
        return self.session.run_exam(volumes, request, browsers, previous)

    def runExamFrames(self, volume, request, frames, browser=None, previous=None):
        """The chosen frames of one clip or multi-frame volume as the views of one examination."""
        if self.session is None:
            raise RequestError("connect to a server first")
        return self.session.run_exam_frames(volume, request, frames, browser, previous)

    def submit(self, volume, resultNodes, answer="", browser=None, finding="", report="", landmark_target=""):
        if self.session is None:
            raise RequestError("connect to a server first")
        if volume is None:
            raise RequestError("select an image first")
        seg = resultNodes.segmentation if resultNodes is not None else None
        if seg is None and resultNodes is not None and resultNodes.segmentation_sequence is not None:
            raise RequestError("submit one frame at a time: select the frame's segmentation")
        markups = resultNodes.all_markups() if resultNodes is not None else []
        sequence = browser.GetMasterSequenceNode() if browser is not None else None
        return self.session.submit(volume, seg, markups, answer, sequence, finding=finding, report=report,
                                   landmark_target=landmark_target)

    def loadNextSample(self, strategy):
        from UMindLib.mrml import IMAGE_ID_ATTRIBUTE

        import tempfile

        image_id, data, filename = self.session.next_sample(strategy)
        # one folder per sample and singleFile: Slicer reads same-size PNGs sharing a folder as one stack
        base = os.path.join(slicer.app.temporaryPath, "UMind")
        os.makedirs(base, exist_ok=True)
        folder = tempfile.mkdtemp(prefix="sample-", dir=base)
        path = os.path.join(folder, os.path.basename(filename))
        with open(path, "wb") as fh:
            fh.write(data)
        node = slicer.util.loadVolume(path, {"name": image_id, "singleFile": True})
        node.SetAttribute(IMAGE_ID_ATTRIBUTE, image_id)
        return node

    def trainStart(self, model="umind_lora", params=None):
        return self.session.client.train_start(model, params)

    def trainStop(self):
        return self.session.client.train_stop()

    def trainStatus(self):
        return self.session.client.train_status()


class UMindTest(ScriptedLoadableModuleTest):
    """In-Slicer smoke test: builds result nodes from a canned reply (no server needed)."""

    def setUp(self):
        slicer.mrmlScene.Clear()

    def runTest(self):
        self.setUp()
        self.test_result_nodes()

    def test_result_nodes(self):
        import numpy as np

        from UMindLib.mrml import build_result_nodes
        from UMindLib.replies import InferReply, ParsedReply

        volume = slicer.util.addVolumeFromArray(np.zeros((1, 32, 48), np.uint8))
        volume.SetSpacing(0.2, 0.2, 1.0)
        labels = np.zeros((1, 32, 48), np.uint8)
        labels[0, 4:12, 6:20] = 1
        reply = InferReply.from_parsed(ParsedReply({
            "label_names": {"nodule": 1}, "answer": "A nodule.",
            "result": {"task": "measure", "objects": [
                {"label": "nodule", "line": [6, 4, 20, 12], "physical": {"length_mm": 3.2249}}]}}))
        nodes = build_result_nodes(slicer.mrmlScene, volume, reply, labels)
        self.assertEqual(nodes.segmentation.GetSegmentation().GetNthSegment(0).GetName(), "nodule")
        self.assertAlmostEqual(nodes.lines[0].GetLineLengthWorld(), 3.2249, places=3)
        self.assertEqual(nodes.text.GetText(), "A nodule.")
        self.delayDisplay("UMind result nodes OK")
