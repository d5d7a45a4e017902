"""umind_interactive: the Slicer extension's foreground/background clicks and ROI -> a mask on one frame."""

from monailabel.interfaces.tasks.infer_v2 import InferType

from .base import UMindInferTask


class UMindInteractive(UMindInferTask):
    infer_type = InferType.DEEPGROW
    umind_tasks = ("segment",)
    output = "label_map"
    interactive = True
    description_text = "UMind: segment the structure indicated by clicks (foreground/background) and an ROI"
    default_config = {"prompt": ""}
