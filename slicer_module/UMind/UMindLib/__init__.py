"""UMindLib: everything of the UMind Slicer module that needs no Qt and no running Slicer.

Importing the package itself loads only the standard-library parts (client, replies, requests,
geometry); `mrml` and `submit` import VTK/MRML and are imported where needed, so the HTTP client
also works in a plain Python.
"""

from .client import MultipartFile, UMindClient, UMindServerError
from .geometry import GeometryError
from .replies import ExamReply, InferReply, ParsedReply, ReplyError, ServerObject, ServerResult
from .requests import (TASK_PRESETS, ImageTarget, InferRequest, RequestError, RoiBox, RunRequest,
                       build_infer_request)

__all__ = ["UMindClient", "UMindServerError", "MultipartFile", "GeometryError", "ExamReply", "InferReply",
           "ParsedReply", "ReplyError", "ServerObject", "ServerResult", "TASK_PRESETS",
           "ImageTarget", "InferRequest", "RequestError", "RoiBox", "RunRequest", "build_infer_request"]
