"""UMind infer tasks: one class per file, all of them `UMindInferTask` with different declarations."""

from .base import UMindInferTask
from .detect import UMindDetect
from .interactive import UMindInteractive
from .interpret import UMindInterpret
from .landmarks import UMindLandmarks
from .segment import UMindSegment

__all__ = ["UMindInferTask", "UMindSegment", "UMindInteractive", "UMindDetect", "UMindLandmarks", "UMindInterpret"]
