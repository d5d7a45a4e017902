"""The module's copy of the server's wire contract: the names both sides must spell alike.

The owner is the app's ``monailabel_app/lib/wire.py`` (findings from ``umind_core.answers.findings``); neither can be
imported inside Slicer, so this copy holds what the module sends: the label info's keys, the finding classes,
the request marker, the interactive model, the trainer and what reads an examination (the model and its tasks,
owned by the app's ``infers/interpret.py``). The task presets (model and prompt key per task) are in
`requests.TASK_PRESETS`. tests/test_one_owner.py holds all of them, and the finding box of
``Resources/UI/UMind.ui``, to the owner: a key renamed on one side only would otherwise lose corrections in
silence (the trainer finds nothing under the old name).
"""

from __future__ import annotations

__all__ = ["FINDINGS", "LABEL_NAMES", "ANSWER", "MARKUPS", "FINDING", "REPORT", "LANDMARK_TARGET", "LABEL_INFO_KEYS",
           "CLIENT_MARKER", "SEGMENT_MODEL", "INTERACTIVE_MODEL", "TRAINER", "EXAM_MODEL", "EXAM_TASKS", "READOUT",
           "READOUTS"]

#: what the finding of a submission may be (the server's trainer reads these, and skips anything else)
FINDINGS = ("normal", "benign", "malignant")

# the label info (PUT /datastore/label params)
LABEL_NAMES = "label_names"
ANSWER = "answer"
MARKUPS = "markups"
FINDING = "finding"
REPORT = "report"
LANDMARK_TARGET = "landmark_target"
LABEL_INFO_KEYS = (LABEL_NAMES, ANSWER, MARKUPS, FINDING, REPORT, LANDMARK_TARGET)

#: params key (and value) that tells the server a request is this module's, not the stock MONAILabel
#: extension's, whose requests it adapts
CLIENT_MARKER = ("umind_client", "slicer-module")
SEGMENT_MODEL = "umind_segment"
#: where a segmentation with clicks or a ROI goes (the server's DEEPGROW model)
INTERACTIVE_MODEL = "umind_interactive"
#: the server's trainer (POST /train/<name>)
TRAINER = "umind_lora"
#: the one server model that reads an examination (several views, params `images` or `exam: "frames"`), and the
#: server tasks it reads one for (the app's `UMindInterpret.exam_tasks`; masks stay single-image)
EXAM_MODEL = "umind_interpret"
EXAM_TASKS = ("diagnose", "report", "ask", "measure", "detect", "keypoints", "segment")
#: the params key a detect, landmarks or measure request names where its coordinates come from, and its values
#: (`umind_core.inference.predictor.READOUTS`, the default first): read off the mask the model segments, or as it writes them
READOUT = "readout"
READOUTS = ("mask", "tokens")
