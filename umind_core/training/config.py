"""Training settings and the summary of a run: plain dataclasses the trainer, the CLI and the app all build.

`TrainConfig` is the one owner of the training settings: each field is a setting's name, type, default and
range (`setting`), and `check_settings` is the one validator of them. The CLI makes one flag per field
(umind_core/commands/train.py); the app's retraining recipe is TrainConfig with a declared table of changes
(monailabel_app/lib/conf.py `SERVER_RECIPE`), and its conf keys and train requests are read with `read_setting`
and checked by the same validator, so a range is stated once and every door refuses a bad value alike, naming it.
The app's own loop settings (held-out split, gate, rehearsal) are declared with `setting` too, and checked here.
"""

from __future__ import annotations

import functools
import math
import numbers
import os
import typing
from dataclasses import dataclass, field, fields

__all__ = ["TrainingError", "TrainConfig", "TrainSummary", "METRIC_COLUMNS", "MIXED_PRECISION", "setting",
           "check_settings", "check_setting", "read_setting", "setting_type"]

METRIC_COLUMNS = ("step", "epoch", "lr", "loss", "lm_loss", "mask_loss", "val_loss")
MIXED_PRECISION = ("no", "bf16", "fp16")
_RULE = "umind_setting"  # the metadata key `setting` writes and the validator reads
_TRUE, _FALSE = ("true", "yes", "on", "1"), ("false", "no", "off", "0")


class TrainingError(ValueError):
    """Bad training input (settings, model, data, output folder); the message names the input and the problem."""


def setting(default, lo: float | None = None, hi: float | None = None, *, lo_open: bool = False,
            hi_open: bool = False, choices: tuple[str, ...] | None = None):
    """A settings field: its default and the values `check_settings` allows ([lo, hi]; open ends as asked;
    `choices` for a string). The field's annotation is its type (int, float, bool, str; `| None` = optional)."""
    return field(default=default, metadata={_RULE: (lo, hi, lo_open, hi_open, choices)})


@functools.lru_cache(maxsize=None)
def setting_type(cls: type, name: str) -> tuple[type, bool]:
    """(type, optional) of the setting `name` of the dataclass `cls`, from its annotation."""
    hint = typing.get_type_hints(cls)[name]
    args = typing.get_args(hint)
    if type(None) in args:
        return next(a for a in args if a is not type(None)), True
    return hint, False


@functools.lru_cache(maxsize=None)
def _rule(cls: type, name: str) -> tuple:
    for f in fields(cls):
        if f.name == name and _RULE in f.metadata:
            return f.metadata[_RULE]
    raise TrainingError(f"{name} is not a setting of {cls.__name__}")


def _in_range(shown: str, value, rule: tuple, optional: bool, integer: bool) -> None:
    lo, hi, lo_open, hi_open, _choices = rule
    low = lo is not None and (value <= lo if lo_open else value < lo)
    high = hi is not None and (value >= hi if hi_open else value > hi)
    if not (low or high):
        return
    if integer and hi is None:
        raise TrainingError(f"{shown} must be an int >= {lo}{' or None' if optional else ''}, got {value!r}")
    lo_b, hi_b = "(" if lo_open else "[", ")" if hi_open else "]"
    lo_s, hi_s = -math.inf if lo is None else lo, math.inf if hi is None else hi
    raise TrainingError(f"{shown} must be in {lo_b}{lo_s}, {hi_s}{hi_b}, got {value!r}")


def check_setting(cls: type, name: str, value, shown: str | None = None):
    """`value` as the setting `name` of `cls` holds it (an int of a float setting becomes a float), or a
    TrainingError naming `shown` (default: `name`, the name the caller's user knows it by)."""
    shown = shown or name
    kind, optional = setting_type(cls, name)
    rule = _rule(cls, name)
    if value is None and optional:
        return None
    if kind is bool:
        if not isinstance(value, bool):
            raise TrainingError(f"{shown} must be a bool, got {value!r}")
        return value
    if kind is str:
        if rule[4] is not None and value not in rule[4]:
            raise TrainingError(f"{shown} must be one of {rule[4]}, got {value!r}")
        if not isinstance(value, str):
            raise TrainingError(f"{shown} must be a string, got {value!r}")
        return value
    if kind is int:
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            lo = rule[0]
            bound = f" >= {lo}" if lo is not None and rule[1] is None else ""
            raise TrainingError(f"{shown} must be an int{bound}{' or None' if optional else ''}, got {value!r}")
        _in_range(shown, value, rule, optional, integer=True)
        return int(value)
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TrainingError(f"{shown} must be a number, got {value!r}")
    if not math.isfinite(float(value)):
        raise TrainingError(f"{shown} must be finite, got {value!r}")
    _in_range(shown, value, rule, optional, integer=False)
    return float(value)


def read_setting(cls: type, name: str, value, shown: str | None = None):
    """A setting sent as text (a conf value) or JSON (a request) -> `check_setting`'s value.

    Text is read as the field's type ("4" -> 4, "3e-4" -> 0.0003, "true" -> True); an optional setting is
    unset (None) by "none" or 0, which is how conf keys have always said "no cap" (max_steps 0: epochs only).
    """
    shown = shown or name
    kind, optional = setting_type(cls, name)
    if isinstance(value, str):
        text = value.strip()
        if optional and text.lower() in ("", "none"):
            return None
        try:
            if kind is int:
                value = int(text)
            elif kind is float:
                value = float(text)
            elif kind is bool:
                value = True if text.lower() in _TRUE else False if text.lower() in _FALSE else value
            else:
                value = text
        except ValueError:
            raise TrainingError(f"{shown} must be {'an integer' if kind is int else 'a number'}, "
                                f"got {value!r}") from None
    if optional and not isinstance(value, bool) and isinstance(value, numbers.Number) and value == 0:
        return None
    if kind is int and isinstance(value, float):  # JSON 2.0 for a count is refused, not truncated
        raise TrainingError(f"{shown} must be an integer, got {value!r}")
    return check_setting(cls, name, value, shown)


def check_settings(obj) -> None:
    """Check every `setting` field of the dataclass `obj` (frozen ones too) and store the values as held."""
    for f in fields(obj):
        if _RULE in f.metadata:
            object.__setattr__(obj, f.name, check_setting(type(obj), f.name, getattr(obj, f.name)))


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

    augment is the fraction of training images shown zoomed, shifted and toned each time they are read
    (`training.augment`; validation never is): 0 trains on the images as stored.

    mask_loss_weight is owned here, not by the model: it is a choice of one training run (a CLI flag, the
    server's recipe), like the learning rate. The model config's field of the same name is only where the
    forward pass reads it; `trainer.train` writes this value there at the start of every run (and logs when it
    replaces a different one), so the value a saved model carries records its last run and is never read as
    the next run's default.
    """

    output_dir: str
    epochs: float = setting(5.0, 0.0, lo_open=True)
    batch_size: int = setting(1, 1)
    grad_accum: int = setting(1, 1)
    lr: float = setting(1e-4, 0.0, lo_open=True)
    decoder_lr: float | None = setting(None, 0.0, lo_open=True)
    warmup_ratio: float = setting(0.05, 0.0, 1.0, hi_open=True)
    weight_decay: float = setting(0.0, 0.0)
    max_grad_norm: float = setting(1.0, 0.0)
    mask_loss_weight: float = setting(1.0, 0.0)
    augment: float = setting(0.0, 0.0, 1.0)
    val_fraction: float = setting(0.1, 0.0, 1.0, hi_open=True)
    eval_every: int = setting(0, 0)
    save_every: int = setting(0, 0)
    seed: int = setting(0, 0)
    mixed_precision: str = setting("no", choices=MIXED_PRECISION)
    num_workers: int = setting(0, 0)
    max_steps: int | None = setting(None, 1)
    full: bool = setting(False)
    pack: bool = setting(True)
    log_every: int = setting(10, 1)
    progress: bool = setting(True)
    keep_checkpoints: int = setting(3, 0)

    def __post_init__(self) -> None:
        if not isinstance(self.output_dir, (str, os.PathLike)) or not str(self.output_dir):
            raise TrainingError(f"output_dir must be a non-empty path, got {self.output_dir!r}")
        self.output_dir = str(self.output_dir)
        check_settings(self)


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
