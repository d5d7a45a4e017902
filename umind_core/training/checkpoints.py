"""Checkpoints of a training run: only the trainable tensors by name, built in a hidden folder and renamed into
place when complete, so a kill at any moment leaves either the previous checkpoint or the new one.

    checkpoints/step-N/   state/ (accelerate: optimizer, scheduler, RNG), trainable.safetensors,
                          model/ (a UMind folder), trainer_state.json (written last)
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
from pathlib import Path

import torch

from ..atomic import remove_dir
from .config import TrainingError

__all__ = ["STATE_FILE", "TRAINABLE_FILE", "latest_checkpoint", "clean_partial", "prune_checkpoints",
           "save_trainable", "load_trainable", "frozen_fingerprint", "same_base", "quiet_saving"]

STEP_DIR = re.compile(r"^step-(\d+)$")
STATE_FILE = "trainer_state.json"
TRAINABLE_FILE = "trainable.safetensors"


def latest_checkpoint(output_dir: str | os.PathLike) -> Path | None:
    """The complete checkpoint with the highest step (trainer_state.json is written last), or None."""
    folder = Path(output_dir) / "checkpoints"
    best = None
    if folder.is_dir():
        for entry in folder.iterdir():
            m = STEP_DIR.match(entry.name)
            if m and (entry / STATE_FILE).is_file() and (best is None or int(m.group(1)) > best[0]):
                best = (int(m.group(1)), entry)
    return None if best is None else best[1]


def clean_partial(output_dir: Path) -> None:
    """Remove what a killed run leaves behind: unfinished checkpoints and temporary files of atomic writes."""
    ckpts = output_dir / "checkpoints"
    if ckpts.is_dir():
        for entry in ckpts.iterdir():
            if entry.name.startswith(".step-"):
                shutil.rmtree(entry, ignore_errors=True)
    if output_dir.is_dir():
        for entry in output_dir.iterdir():
            name = entry.name
            if name.startswith((".final.tmp-", ".final.old-")) and entry.is_dir():
                shutil.rmtree(entry, ignore_errors=True)
            elif name.startswith(".tmp-") and entry.is_file():  # umind_core.atomic's temporary files
                entry.unlink(missing_ok=True)


def prune_checkpoints(output_dir: Path, keep: int) -> None:
    if keep <= 0:
        return
    ckpts = output_dir / "checkpoints"
    steps = sorted((int(m.group(1)), e) for e in ckpts.iterdir() if (m := STEP_DIR.match(e.name)))
    for _step, entry in steps[:-keep]:
        remove_dir(entry, f".{entry.name}.old")  # renamed first: a half-deleted folder never looks complete


def save_trainable(model, names: list[str], path: Path) -> None:
    from safetensors.torch import save_file

    params = dict(model.named_parameters())
    save_file({n: params[n].detach().cpu().contiguous() for n in names}, str(path), metadata={"format": "pt"})


def load_trainable(model, names: list[str], path: Path) -> None:
    from safetensors.torch import load_file

    state = load_file(str(path))
    missing, unexpected = sorted(set(names) - set(state)), sorted(set(state) - set(names))
    if missing or unexpected:
        raise TrainingError(f"checkpoint {path.parent} does not match this model: missing {missing[:5]}, "
                            f"unexpected {unexpected[:5]}")
    params = dict(model.named_parameters())
    with torch.no_grad():
        for n in names:
            if params[n].shape != state[n].shape:
                raise TrainingError(f"checkpoint {path.parent}: {n} has shape {tuple(state[n].shape)}, "
                                    f"the model has {tuple(params[n].shape)}")
            params[n].copy_(state[n])


def frozen_fingerprint(model) -> dict[str, list[float]]:
    """(sum, sum of |w|) of every frozen tensor: a checkpoint holds only trainable tensors, so resuming on
    another base (another --model or seed) would silently train a different network; this catches it."""
    out = {}
    with torch.no_grad():
        for name, p in model.named_parameters():
            if not p.requires_grad:
                out[name] = [float(p.sum(dtype=torch.float64)), float(p.abs().sum(dtype=torch.float64))]
    return out


def same_base(saved: dict, current: dict) -> bool:
    if saved.keys() != current.keys():
        return False
    return all(abs(saved[n][0] - current[n][0]) <= 1e-5 * max(saved[n][1], current[n][1]) + 1e-6
               and abs(saved[n][1] - current[n][1]) <= 1e-5 * saved[n][1] + 1e-6 for n in saved)


@contextlib.contextmanager
def quiet_saving():
    """transformers draws a progress bar for every shard it writes; under the trainer's own bar that is noise."""
    from transformers.utils import logging as hf_logging

    was_enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_enabled:
            hf_logging.enable_progress_bar()
