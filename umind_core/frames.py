"""Frame specs: which frames of a cine clip or volume a request runs on, for the CLI and the server alike.

One grammar, one type, one meaning of "current", so `umind infer --frames` and the server's `frames` param
answer the same spec the same way:

* ``all`` (the default), ``current``, ``A`` (one frame), ``A-B`` or ``A:B`` (inclusive), ``A-`` (to the last
  frame); frames count from 0, case and spaces do not matter. JSON requests may also give an integer or a
  list of integers.
* ``current`` is the frame the viewer shows: the index the client sends (the server's `slice` param, which
  the Slicer module always sends) or, when none is sent, the frame Slicer opens the input on: the middle
  slice of a volume, the first frame of a cine clip (and the one frame of a 2D image).
* A range that runs past the last frame is clipped or refused as the caller says (`past_end`): a batch applies
  one spec to inputs of different lengths, so the CLI clips; a server request is about one image, so it
  refuses. A start past the last frame is an error either way.

`current_frame` is the one owner of "current" in the CLI and the server (`FrameSpec.select` here, the app's
`lib/params.visual_prompt` for an interactive request). The Slicer module cannot import this package (it is not
installed inside Slicer): its one copy is `UMindLib.requests.current_frame`, which `tests/test_one_owner.py`
holds to this one, and it sends only "current" or "all" as the frame spec.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["FrameSpecError", "FrameSpec", "parse_frames", "current_frame"]

_SPEC_RE = re.compile(r"(\d+)(?:\s*([-:])\s*(\d+)?)?")
_FORMS = "'all', 'current', 'A-B', 'A-' or a frame number"


class FrameSpecError(ValueError):
    """A frame spec that does not parse, or that does not fit the input it is applied to."""


def current_frame(kind: str, n_frames: int, current: int | None = None) -> int:
    """The frame the viewer shows: ``current`` when the client sent one, else the one Slicer opens on."""
    if current is not None:
        return current
    return n_frames // 2 if kind == "volume" else 0


@dataclass(frozen=True)
class FrameSpec:
    """A parsed frame spec: kind "all", "current", "range" (start, stop; stop None = to the end) or "list"."""

    kind: str = "all"
    start: int = 0
    stop: int | None = None
    indices: tuple[int, ...] = ()
    option: str = "frames"  # how the caller names the spec in messages ("--frames" on the command line)

    def select(self, geometry, name: str = "", current: int | None = None, past_end: str = "clip") -> list[int]:
        """The frame indices of one input (``geometry``: an `imageio.Geometry`), in order.

        ``name`` starts error messages (the CLI's input name); ``current`` is the client's current frame;
        ``past_end`` is "clip" or "refuse" for a range that ends past the last frame.
        """
        n = geometry.n_frames
        where = f"{name}: " if name else ""
        if self.kind == "all":
            return list(range(n))
        if self.kind == "current":
            return [self._check(current_frame(geometry.kind, n, current), n, where, "the current frame")]
        if self.kind == "list":
            return [self._check(i, n, where, "frame") for i in self.indices]
        if self.start >= n:
            raise FrameSpecError(f"{where}{self.option} {self} starts past the last frame: frame {self.start} is "
                                 f"out of range (the input has {n} frames)")
        if self.stop is not None and self.stop >= n and past_end != "clip":
            raise FrameSpecError(f"{where}{self.option} {self} ends past the last frame: frame {self.stop} is "
                                 f"out of range (the input has {n} frames)")
        stop = n - 1 if self.stop is None else min(self.stop, n - 1)
        return list(range(self.start, stop + 1))

    def _check(self, i: int, n: int, where: str, what: str) -> int:
        if not 0 <= i < n:
            raise FrameSpecError(f"{where}{self.option}: {what} {i} is out of range (the input has {n} frames)")
        return i

    def __str__(self) -> str:
        if self.kind == "list":
            return ",".join(str(i) for i in self.indices)
        if self.kind != "range":
            return self.kind
        if self.stop is None:
            return f"{self.start}-"
        return f"{self.start}-{self.stop}" if self.stop != self.start else str(self.start)


def parse_frames(value: object, option: str = "frames") -> FrameSpec:
    """A frame spec from a string, an integer or a list of integers; None is "all".

    ``option`` is how the caller names the spec in messages ("--frames" on the command line, "frames" for a
    server param).
    """
    if value is None:
        return FrameSpec(option=option)
    if isinstance(value, bool):
        raise FrameSpecError(f"{option} must be {_FORMS}, got {value!r}")
    if isinstance(value, int):
        if value < 0:
            raise FrameSpecError(f"{option}: frame {value} is negative; frames count from 0")
        return FrameSpec(kind="range", start=value, stop=value, option=option)
    if isinstance(value, list):
        if not value or not all(isinstance(i, int) and not isinstance(i, bool) for i in value):
            raise FrameSpecError(f"{option} as a list must hold frame numbers, got {value!r}")
        if min(value) < 0:
            raise FrameSpecError(f"{option}: frame {min(value)} is negative; frames count from 0")
        return FrameSpec(kind="list", indices=tuple(sorted(set(value))), option=option)
    if not isinstance(value, str):
        raise FrameSpecError(f"{option} must be {_FORMS}, got {type(value).__name__}")
    text = value.strip().lower()
    if text in ("all", "current"):
        return FrameSpec(kind=text, option=option)
    m = _SPEC_RE.fullmatch(text)
    if not m:
        raise FrameSpecError(f"{option} {value!r} is not {_FORMS}")
    start = int(m.group(1))
    stop = start if m.group(2) is None else (int(m.group(3)) if m.group(3) is not None else None)
    if stop is not None and stop < start:
        raise FrameSpecError(f"{option} {value!r}: the range ends ({stop}) before it starts ({start})")
    return FrameSpec(kind="range", start=start, stop=stop, option=option)
