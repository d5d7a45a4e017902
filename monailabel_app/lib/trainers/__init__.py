"""The UMind train task and what it needs: label export, rehearsal, scoring and the promotion gate."""

from .gate import Tolerance, decide
from .umind_lora import UMindLoRATrain

__all__ = ["UMindLoRATrain", "Tolerance", "decide"]
