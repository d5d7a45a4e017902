"""umind_landmarks: keypoints (fiducials), measurement lines and a head circumference's ellipse (a closed curve), each
length in mm when spacing is known."""

from monailabel.interfaces.tasks.infer_v2 import InferType

from umind_core.inference.predictor import READOUTS

from .base import UMindInferTask


class UMindLandmarks(UMindInferTask):
    infer_type = InferType.OTHERS
    umind_tasks = ("keypoints", "measure")
    output = "markups"
    description_text = ("UMind: landmarks as fiducials and measurements as lines or, for a head circumference, a "
                        "closed curve (Slicer markups); the stock MONAILabel extension does not list this type: use "
                        "the UMind Slicer module")
    #: `readout`: where lesion calipers, kidney and fetal head landmarks and lengths come from, the first choice (read
    #: off the mask) the default
    default_config = {"task": ["all", "keypoints", "measure"], "prompt": "", "frames": "all",
                      "readout": list(READOUTS)}
