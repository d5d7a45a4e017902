"""umind_detect: boxes as Slicer ROI markups (a box-filled label map on request)."""

from monailabel.interfaces.tasks.infer_v2 import InferType

from umind_core.inference.predictor import READOUTS

from .base import UMindInferTask


class UMindDetect(UMindInferTask):
    infer_type = InferType.DETECTION
    umind_tasks = ("detect",)
    output = "markups"
    multi_target = True
    description_text = "UMind: detect the structures named in the prompt as boxes (Slicer ROI markups)"
    #: `readout`: the stock extension shows the choices, the first (boxes read off the mask) the default
    default_config = {"prompt": "lesion", "frames": "all", "label_map": False, "readout": list(READOUTS)}
