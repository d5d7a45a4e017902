"""The UMind train task and what it needs: datastore export, held-out evaluation."""

from .umind_lora import UMindLoRATrain, promotes

__all__ = ["UMindLoRATrain", "promotes"]
