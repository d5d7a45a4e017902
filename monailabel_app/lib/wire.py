"""The wire contract between the UMind Slicer module and this app: the names both sides must spell alike.

What the module writes into a label's info (PUT /datastore/label) the trainer reads back
(`trainers.corrections`, `trainers.dataset`); which server model runs which task and under which parameter the
typed text travels is what the module's task presets send and the infer tasks read. A key renamed on one side
only is not an error anywhere: the trainer just finds nothing and the correction is lost in silence. So the
names live here, once, and the app imports them.

The Slicer module cannot import the app (nor umind_core) inside Slicer. Its copy is
``slicer_module/UMind/UMindLib/contract.py`` plus the task presets of ``UMindLib/requests.py``;
tests/test_one_owner.py holds that copy to this module.
"""

from __future__ import annotations

from umind_core.answers.findings import FINDINGS

__all__ = ["FINDINGS", "LABEL_NAMES", "ANSWER", "MARKUPS", "FINDING", "REPORT", "LANDMARK_TARGET", "LABEL_INFO_KEYS",
           "PARAMS", "CLIENT_KEY", "CLIENT_VALUE", "SEGMENT_MODEL", "INTERACTIVE_MODEL", "DETECT_MODEL",
           "LANDMARKS_MODEL", "INTERPRET_MODEL", "INFER_MODELS", "TASK_MODELS", "TRAINER", "prompt_key"]

# ---------------------------------------------------------------- the label info (PUT /datastore/label params)
#: {segment name: label value} of the label map
LABEL_NAMES = "label_names"
#: the corrected answer text (kept with the label; not trained on by itself)
ANSWER = "answer"
#: corrected markups: one Slicer .mrk.json dict in LPS (fiducials = landmarks, lines = measurements, ROIs = boxes)
MARKUPS = "markups"
#: the image's finding, one of `FINDINGS`
FINDING = "finding"
#: a corrected report
REPORT = "report"
#: the structure the landmarks belong to (the keypoints prompt's target)
LANDMARK_TARGET = "landmark_target"
LABEL_INFO_KEYS: tuple[str, ...] = (LABEL_NAMES, ANSWER, MARKUPS, FINDING, REPORT, LANDMARK_TARGET)
#: a client may put the keys at the top level or under this one (`trainers.corrections.info_fields`)
PARAMS = "params"

# ---------------------------------------------------------------- infer requests
#: params key (and value) that marks a request as the UMind module's, not the stock MONAILabel extension's
CLIENT_KEY = "umind_client"
CLIENT_VALUE = "slicer-module"
SEGMENT_MODEL = "umind_segment"
INTERACTIVE_MODEL = "umind_interactive"  # clicks and ROI (DEEPGROW)
DETECT_MODEL = "umind_detect"
LANDMARKS_MODEL = "umind_landmarks"
INTERPRET_MODEL = "umind_interpret"
#: the infer models the app serves, as `UMindApp.init_infers` names them
INFER_MODELS: tuple[str, ...] = (SEGMENT_MODEL, INTERACTIVE_MODEL, DETECT_MODEL, LANDMARKS_MODEL, INTERPRET_MODEL)
#: the model a client sends each Predictor task to (a segmentation with clicks or a ROI goes to INTERACTIVE_MODEL)
TASK_MODELS: dict[str, str] = {
    "segment": SEGMENT_MODEL, "detect": DETECT_MODEL, "keypoints": LANDMARKS_MODEL, "measure": LANDMARKS_MODEL,
    "diagnose": INTERPRET_MODEL, "report": INTERPRET_MODEL, "ask": INTERPRET_MODEL,
}
#: the trainer's name (POST /train/<name>)
TRAINER = "umind_lora"


def prompt_key(task: str) -> str:
    """The request parameter a task's typed text travels in: a free question is `question` (it is the whole
    prompt, not a target to fill into a template), every other task's text is the `prompt`'s targets."""
    return "question" if task == "ask" else "prompt"
