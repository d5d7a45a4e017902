"""One input of `umind infer`, read and checked, and how it ended: what the image and the examination paths share.

`infer` (one file per input) and `_infer_exam` (one examination per input) both read an input with the same
--axis rule, refuse a constant image, skip an output folder that holds this request's finished results and report
each input as an `Outcome`. Those pieces live here, below both, so that the examination path does not import the
command that calls it (an import cycle before).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

__all__ = ["InferError", "Outcome", "already_done"]


class InferError(ValueError):
    """A bad request (task, prompt, visual prompt, frames) or an input that cannot be processed."""


@dataclass
class Outcome:
    """How one input ended: done, skipped (already done) or failed, with the reason."""

    index: int
    input: str
    name: str | None
    status: str
    frames: int = 0
    message: str = ""


def _message(exc: BaseException, name: str) -> str:
    """The reason without a leading repetition of the input's name (readers already start with it)."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    for prefix in (f"{name}: ", f"{name} "):
        if text.startswith(prefix):
            return text[len(prefix):]
    return text


def _read(path: Path, axis: int | None):
    """Read an input; --axis applies to volumes only, so a mixed batch of PNGs and volumes works.

    The reader rejects an axis for a 2D image or a cine clip, and the kind is known only once the file is read,
    so a refusal is retried without the axis and accepted only if the file then turns out not to be a volume.
    """
    from ..imageio import ImageReadError, read_study

    try:
        return read_study(path, axis=axis)
    except ImageReadError as first:
        if axis in (None, 0):
            raise
        try:
            study = read_study(path)
        except ImageReadError:
            raise first from None
        if study.geometry.kind == "volume":
            raise first from None
        return study


def _check_content(study, name: str) -> None:
    import numpy as np

    lo = min(int(np.min(f.pixels)) for f in study.frames)
    hi = max(int(np.max(f.pixels)) for f in study.frames)
    if lo == hi:
        raise InferError(f"{name}: image is constant (every pixel is {lo}); there is nothing to analyse")


def already_done(ctx, out_dir: Path, wanted: dict) -> bool:
    """Whether `out_dir` holds this request's finished results (skip it); another request's is an error."""
    from .. import batch

    if ctx.overwrite:
        return False
    done = batch.existing_request(out_dir)
    if done is not None and done != wanted:
        raise InferError(f"{out_dir} holds results of another request (task {done.get('task')!r}, prompt "
                         f"{done.get('prompt')!r}); pass --overwrite or another --out")
    return done is not None
