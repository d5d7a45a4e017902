"""umind_interpret: diagnosis, report or a free question -> a JSON answer (no label file)."""

from monailabel.interfaces.tasks.infer_v2 import InferType

from .base import UMindInferTask


class UMindInterpret(UMindInferTask):
    infer_type = InferType.CLASSIFICATION
    umind_tasks = ("diagnose", "report", "ask")
    #: several views as one examination (params `images`, or `exam: "frames"`): these, and the grounded tasks
    #: whose objects come back as each view's markups (a segment's masks as each view's label map, inline)
    exam_tasks = ("diagnose", "report", "ask", "measure", "detect", "keypoints", "segment")
    output = "answer"
    description_text = ("UMind: diagnosis (normal/benign/malignant), a structured report, or a free question; the "
                        "stock MONAILabel extension does not list this type: use the UMind Slicer module")
    default_config = {"task": ["diagnose", "report", "ask"], "question": "", "frames": "current"}
