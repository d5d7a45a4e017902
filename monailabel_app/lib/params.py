"""Request parameters -> the Predictor's arguments.

MONAI Label merges the client's params JSON into the request dict, so every value here may be anything
JSON can hold; each parser names the parameter and the value it rejects (`BadRequest`, answered 400).

Coordinates from the stock Slicer extension are IJK voxel indices of the image as Slicer loaded it (ITK
index order: i along columns, j along rows, k across frames for a 2D+t or 3D image). `ijk_to_frame` turns
them into (frame index, x, y) of the frames `umind_core.imageio.read_study` makes, for any slicing axis.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from umind_core.frames import current_frame
from umind_core.imageio import Geometry, frame_itk_axes, frame_normal_axis
from umind_core.inference.predictor import PredictorError, checked_readout
from umind_core.prompts import MAX_PROMPT_CHARS, PromptError, VisualPrompt

from umind_core.booleans import as_bool
from .wall.errors import BadRequest

__all__ = ["with_defaults", "parse_prompt", "parse_targets", "parse_bool", "parse_readout", "current_slice",
           "ijk_to_frame", "visual_prompt"]

def with_defaults(config: dict, request: dict) -> dict:
    """Task config defaults (a list offers choices: its first item is the default) overridden by the request."""
    out = {k: (v[0] if isinstance(v, list) and v else v) for k, v in config.items()}
    out.update({k: v for k, v in request.items() if v is not None})
    return out


def parse_bool(name: str, value: object) -> bool:
    """A request flag; an empty form field is false."""
    out = as_bool(value, empty=False)
    if out is None:
        raise BadRequest(f"{name} must be true or false, got {value!r}")
    return out


def parse_readout(value: object) -> str | None:
    """Where a request's boxes and lesion calipers come from (`predictor.READOUTS`: read off the model's mask, the
    default, or the coordinates it writes); None (absent or an empty form field): the server's Predictor's own."""
    if value is None or value == "":
        return None
    try:
        return checked_readout(value)
    except PredictorError as exc:
        raise BadRequest(str(exc)) from None


def current_slice(opts: dict) -> int | None:
    """The frame the client shows (`slice`, sent by the Slicer module), or None when it sent none or not a frame
    number; whether it lies in the image is the frame spec's to check (`frames.FrameSpec.select`)."""
    value = opts.get("slice")
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def parse_prompt(name: str, value: object, required: bool = False) -> str | None:
    if value is None or (isinstance(value, str) and not value.strip()):
        if required:
            raise BadRequest(f"{name} is required and must be a non-empty string")
        return None
    if not isinstance(value, str):
        raise BadRequest(f"{name} must be a string, got {type(value).__name__}")
    if len(value) > MAX_PROMPT_CHARS:
        raise BadRequest(f"{name} is too long: {len(value)} characters (at most {MAX_PROMPT_CHARS})")
    bad = next((c for c in value if (ord(c) < 32 and c not in "\n\t") or ord(c) == 127), None)
    if bad is not None:  # NUL and friends would reach the prompt and come back in label_names
        raise BadRequest(f"{name} contains the control character U+{ord(bad):04X}")
    return value.strip()


def parse_targets(name: str, value: object, limit: int = 32) -> list[str | None]:
    """'lesion, thyroid nodule' or ["lesion", "cyst"] -> one target per label; nothing -> [None] (default).

    `limit` is the conf cap max_targets, checked on the raw items before any of them is parsed."""
    if isinstance(value, list):
        items = value
    elif value is None or isinstance(value, str):
        text = parse_prompt(name, value)
        items = [] if text is None else re.split(r"[;,\n]", text)
    else:
        raise BadRequest(f"{name} must be a string or a list of strings, got {type(value).__name__}")
    if sum(1 for item in items if not (isinstance(item, str) and not item.strip())) > limit:
        raise BadRequest(f"{name} names more targets than the cap max_targets = {limit}")
    out = []
    for item in items:
        t = parse_prompt(name, item)
        if t and t not in out:
            out.append(t)
    return out or [None]


def ijk_to_frame(geometry: Geometry, ijk: Sequence[float]) -> tuple[int, float, float]:
    """IJK voxel index -> (frame index, x, y) of the frames read from that image."""
    if geometry.kind == "2d":
        return 0, float(ijk[0]), float(ijk[1])
    col, row = frame_itk_axes(geometry.axis)
    return int(round(float(ijk[frame_normal_axis(geometry.axis)]))), float(ijk[col]), float(ijk[row])


def _point(name: str, value: object) -> list[float]:
    if (not isinstance(value, (list, tuple)) or len(value) not in (2, 3)
            or not all(isinstance(c, (int, float)) and not isinstance(c, bool) for c in value)):
        raise BadRequest(f"{name}: each click must be [i, j] or [i, j, k] numbers, got {value!r}")
    return [float(c) for c in value] + ([0.0] if len(value) == 2 else [])


def _clicks(name: str, value: object) -> list[list[float]]:
    if value is None or value == []:
        return []
    if not isinstance(value, list):
        raise BadRequest(f"{name} must be a list of [i, j, k] clicks, got {type(value).__name__}")
    return [_point(name, v) for v in value]


def visual_prompt(request: dict, geometry: Geometry) -> tuple[int, VisualPrompt]:
    """`foreground`/`background` clicks, `roi` [i0,i1,j0,j1,k0,k1] and `slice` -> (frame, its visual prompt).

    Here only the request's IJK form is read and the frame decided (`umind_core.frames.current_frame`, with the
    frame the prompts lie on as the client's when it sent no `slice`); the box and clicks in that frame's pixels
    are judged by `umind_core.prompts.VisualPrompt`, as the CLI's and the Predictor's are."""
    fg = _clicks("foreground", request.get("foreground"))
    bg = _clicks("background", request.get("background"))
    frames: set[int] = set()
    points, labels = [], []
    for clicks, label in ((fg, 1), (bg, 0)):
        for p in clicks:
            f, x, y = ijk_to_frame(geometry, p)
            frames.add(f)
            points.append((x, y))
            labels.append(label)
    box = None
    roi = request.get("roi")
    if roi not in (None, []):
        if (not isinstance(roi, list) or len(roi) not in (4, 6)
                or not all(isinstance(c, (int, float)) and not isinstance(c, bool) for c in roi)):
            raise BadRequest(f"roi must be [i0, i1, j0, j1, k0, k1] (or 4 numbers for 2D), got {roi!r}")
        r = [float(c) for c in roi] + ([0.0, 0.0] if len(roi) == 4 else [])
        lo = ijk_to_frame(geometry, [r[0], r[2], r[4]])
        hi = ijk_to_frame(geometry, [r[1], r[3], r[5]])
        box = (min(lo[1], hi[1]), min(lo[2], hi[2]), max(lo[1], hi[1]), max(lo[2], hi[2]))
        if not points:  # an ROI without clicks: its middle frame
            frames.add((lo[0] + hi[0]) // 2)
    slice_ = request.get("slice")
    if slice_ is not None and (isinstance(slice_, bool) or not isinstance(slice_, int)):
        raise BadRequest(f"slice must be a frame index (integer), got {slice_!r}")
    if slice_ is None and len(frames) > 1:
        raise BadRequest(f"clicks lie on different frames {sorted(frames)}; an interactive request works on one "
                         "frame (give 'slice' to choose it)")
    # the client's frame is its slice, else the one its clicks or ROI lie on; without either, the frame the
    # current-frame rule's default names (umind_core.frames, the one owner)
    frame = current_frame(geometry.kind, geometry.n_frames, slice_ if slice_ is not None else
                          (frames.pop() if frames else None))
    if not 0 <= frame < geometry.n_frames:
        raise BadRequest(f"the clicks or slice point at frame {frame}, the image has {geometry.n_frames}")
    try:
        return frame, VisualPrompt.of(box, points or None, labels or None, names=("roi", "clicks", "click labels"))
    except PromptError as exc:
        raise BadRequest(str(exc)) from None
