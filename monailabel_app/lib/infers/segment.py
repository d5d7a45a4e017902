"""umind_segment: a text prompt (one or more targets) -> a label map, from the stock Slicer extension too."""

from monailabel.interfaces.tasks.infer_v2 import InferType

from .base import UMindInferTask


class UMindSegment(UMindInferTask):
    infer_type = InferType.SEGMENTATION
    umind_tasks = ("segment",)
    output = "label_map"
    multi_target = True
    description_text = "UMind: segment the structures named in the prompt (comma-separated for several)"
    default_config = {"prompt": "lesion", "frames": "all"}
