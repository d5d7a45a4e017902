"""What a UMind folder records about itself (umind_config.json), as plain dataclasses.

Kept apart from the model so that the CLI, the server and the trainer can read a folder's settings (where its
base lives, whether it carries LoRA) without importing torch or building a network.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..atomic import write_text

__all__ = ["LoraSettings", "UMindConfig", "CONFIG_NAME", "DEFAULT_LORA_TARGETS", "VISION_LORA_TARGETS",
           "lora_settings"]

CONFIG_NAME = "umind_config.json"
FORMAT_VERSION = 1

# The LLM's attention and MLP projections and the vision merger, as one regex over module names of
# Qwen3VLForConditionalGeneration (PEFT full-matches it against every module name).
DEFAULT_LORA_TARGETS = (
    r".*model\.(language_model\.layers\.\d+\.(self_attn\.(q|k|v|o)_proj|mlp\.(gate|up|down)_proj)"
    r"|visual\.merger\.linear_fc(1|2))"
)

# The same plus every vision block's attention and MLP: the annotation loop adapts to a new scanner's look,
# which the vision tower sees first (sweep of 2026-12-05, benchmarks/results/loop_recipe_demo3: with the vision
# blocks adapted, 20 labels moved the new look's segmentation +0.001 to +0.008 more than the same recipe without)
VISION_LORA_TARGETS = DEFAULT_LORA_TARGETS[:-1] + r"|visual\.blocks\.\d+\.(attn\.(qkv|proj)|mlp\.linear_fc(1|2)))"


@dataclass
class LoraSettings:
    r: int = 16
    alpha: int = 32
    dropout: float = 0.05
    target_modules: str | list[str] = DEFAULT_LORA_TARGETS

    def __post_init__(self) -> None:
        if self.r <= 0:
            raise ValueError(f"LoRA rank must be positive, got {self.r}")
        if self.alpha <= 0:
            raise ValueError(f"LoRA alpha must be positive, got {self.alpha}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"LoRA dropout must be in [0, 1), got {self.dropout}")


@dataclass
class UMindConfig:
    """Settings of one UMind model folder.

    base_model: where the Qwen3-VL base weights are: "base" (a copy inside the folder) or an absolute path to a
    base folder that is referenced, never duplicated. lora None means all weights are trained and stored in the
    base copy (the small demo model); otherwise the folder carries a PEFT adapter.
    """

    base_model: str = "base"
    lora: LoraSettings | None = field(default_factory=LoraSettings)
    num_mask_tokens: int = 16
    mask_channels: int = 128
    lm_loss_weight: float = 1.0
    mask_loss_weight: float = 1.0
    dice_weight: float = 1.0
    bce_weight: float = 1.0
    grounding_token_ids: dict[str, int] = field(default_factory=dict)
    added_token_ids: list[int] = field(default_factory=list)
    description: str = ""
    format_version: int = FORMAT_VERSION

    @property
    def base_is_copied(self) -> bool:
        return not os.path.isabs(self.base_model)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "UMindConfig":
        data = dict(data)
        known = {f for f in cls.__dataclass_fields__}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"{CONFIG_NAME} has unknown keys {unknown}")
        lora = data.get("lora")
        data["lora"] = LoraSettings(**lora) if isinstance(lora, dict) else None
        return cls(**data)

    def save(self, folder: str | Path) -> Path:
        path = Path(folder) / CONFIG_NAME
        write_text(path, json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n")
        return path

    @classmethod
    def load(cls, folder: str | Path) -> "UMindConfig":
        path = Path(folder) / CONFIG_NAME
        try:
            data = json.loads(path.read_text())
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path} is not valid JSON: {exc}") from None
        return cls.from_dict(data)


def lora_settings(vision: bool) -> "LoraSettings":
    """A fresh adapter's settings: the report's targets, and the vision blocks too when `vision`."""
    return LoraSettings(target_modules=VISION_LORA_TARGETS if vision else DEFAULT_LORA_TARGETS)
