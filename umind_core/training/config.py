"""Training settings and the summary of a run: plain dataclasses the trainer, the CLI and the app all build."""

from __future__ import annotations

import math
import numbers
import os
from dataclasses import dataclass

__all__ = ["TrainingError", "TrainConfig", "TrainSummary", "METRIC_COLUMNS", "MIXED_PRECISION"]

METRIC_COLUMNS = ("step", "epoch", "lr", "loss", "lm_loss", "mask_loss", "val_loss")
MIXED_PRECISION = ("no", "bf16", "fp16")


class TrainingError(ValueError):
    """Bad training input (settings, model, data, output folder); the message names the input and the problem."""


@dataclass
class TrainConfig:
    """Training settings; the defaults are the report's (AdamW, cosine, 5% warm-up, peak lr 1e-4, 5 epochs).

    eval_every / save_every count optimizer steps; 0 means once per epoch. max_steps, when set, is the length
    of the run (the data repeats as needed) and `epochs` is ignored. keep_checkpoints bounds the disk a long run
    takes (0 keeps all). pack puts all conversations of an image into one sample on a shared image prefix
    (`modeling.packing`): the same losses for a fraction of the work; batch_size then counts images.
    decoder_lr, when set, is the mask decoder's own peak rate (same schedule): the decoder is small, trained
    from its own loss only, and can move faster than the LoRA adapter without touching the text skills.
    progress draws a tqdm bar; without it (a server's train job) every logged step is an INFO line
    "umind train: step N/TOTAL ...", which the job's status shows and the Slicer panel turns into progress.
    """

    output_dir: str
    epochs: float = 5
    batch_size: int = 1
    grad_accum: int = 1
    lr: float = 1e-4
    decoder_lr: float | None = None
    warmup_ratio: float = 0.05
    weight_decay: float = 0.0
    max_grad_norm: float = 1.0
    mask_loss_weight: float = 1.0
    val_fraction: float = 0.1
    eval_every: int = 0
    save_every: int = 0
    seed: int = 0
    mixed_precision: str = "no"
    num_workers: int = 0
    max_steps: int | None = None
    full: bool = False
    pack: bool = True
    log_every: int = 10
    progress: bool = True
    keep_checkpoints: int = 3

    def __post_init__(self) -> None:
        if not isinstance(self.output_dir, (str, os.PathLike)) or not str(self.output_dir):
            raise TrainingError(f"output_dir must be a non-empty path, got {self.output_dir!r}")
        self.output_dir = str(self.output_dir)

        def number(name: str, lo: float, hi: float = math.inf, lo_open: bool = False, hi_open: bool = False):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, numbers.Real) or not math.isfinite(float(v)):
                raise TrainingError(f"{name} must be a finite number, got {v!r}")
            if (v <= lo if lo_open else v < lo) or (v >= hi if hi_open else v > hi):
                lo_b, hi_b = "(" if lo_open else "[", ")" if hi_open else "]"
                raise TrainingError(f"{name} must be in {lo_b}{lo}, {hi}{hi_b}, got {v!r}")

        def integer(name: str, lo: int, optional: bool = False):
            v = getattr(self, name)
            if optional and v is None:
                return
            if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < lo:
                raise TrainingError(f"{name} must be an int >= {lo}{' or None' if optional else ''}, got {v!r}")

        number("epochs", 0.0, lo_open=True)
        number("lr", 0.0, lo_open=True)
        if self.decoder_lr is not None:
            number("decoder_lr", 0.0, lo_open=True)
        number("warmup_ratio", 0.0, 1.0, hi_open=True)
        number("weight_decay", 0.0)
        number("max_grad_norm", 0.0)
        number("mask_loss_weight", 0.0)
        number("val_fraction", 0.0, 1.0, hi_open=True)
        for name in ("batch_size", "grad_accum", "log_every"):
            integer(name, 1)
        for name in ("eval_every", "save_every", "seed", "num_workers", "keep_checkpoints"):
            integer(name, 0)
        integer("max_steps", 1, optional=True)
        if self.mixed_precision not in MIXED_PRECISION:
            raise TrainingError(f"mixed_precision must be one of {MIXED_PRECISION}, got {self.mixed_precision!r}")
        for name in ("full", "pack", "progress"):
            if not isinstance(getattr(self, name), bool):
                raise TrainingError(f"{name} must be a bool, got {getattr(self, name)!r}")


@dataclass
class TrainSummary:
    steps: int
    epochs: float
    train_loss_first: float | None
    train_loss_last: float | None
    val_loss_first: float | None  # before the first step (the untrained model) when the run started fresh
    val_loss_last: float | None
    seconds: float
    final_dir: str
    resumed_from: int | None
    num_processes: int = 1
