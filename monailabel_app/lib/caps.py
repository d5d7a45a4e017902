"""Bounded work per request: caps on clicks, prompt targets, frames and pixels, checked before any allocation.

One small request could stall the server: 2,000 clicks took 24 s (and blocked every other request),
10,000 tried to allocate 49.7 GB. The counts are checked on the raw request (lengths of lists, no parsing
of their items) and the image size on its header (PIL, pydicom without pixels, SimpleITK image
information), all before the image is decoded or the model runs. A request over a cap is a 400 that names
the conf key, so an operator knows what to raise. The caps and their defaults are conf keys (lib/conf.py
AppConfig: max_clicks, max_targets, max_frames, max_pixels); `caps` below is that AppConfig.
"""

from __future__ import annotations

import math
from pathlib import Path

from .errors import BadRequest

__all__ = ["check_request_counts", "check_image_size", "check_frame_count", "image_header_shape"]


def _count(value: object) -> int:
    return len(value) if isinstance(value, (list, tuple)) else 0


def check_request_counts(opts: dict, caps) -> None:
    """Clicks (foreground + background) against max_clicks, a `frames` list against max_frames (targets:
    params.parse_targets with max_targets)."""
    clicks = _count(opts.get("foreground")) + _count(opts.get("background"))
    if clicks > caps.max_clicks:
        raise BadRequest(f"{clicks} clicks exceed the cap max_clicks = {caps.max_clicks}")
    check_frame_count(_count(opts.get("frames")), caps)


def image_header_shape(path: str) -> tuple[int, ...]:
    """The image's array shape (numpy order, colour channels left out) from its header, without decoding pixels."""
    from umind_core.imageio import ImageReadError, _detect_format  # the reader's own format rule

    fmt = _detect_format(Path(path))
    try:
        return _header_shape(path, fmt)
    except Exception as exc:  # a header no reader understands: the same 400 the full read would give
        raise ImageReadError(f"{path}: cannot read {fmt} data (header: {type(exc).__name__})") from None


def _header_shape(path: str, fmt: str) -> tuple[int, ...]:
    if fmt in ("png", "jpeg"):
        from PIL import Image

        with Image.open(path) as im:
            return (im.height, im.width)
    if fmt == "dicom":
        import pydicom

        ds = pydicom.dcmread(path, stop_before_pixels=True)
        return (int(getattr(ds, "NumberOfFrames", 1) or 1), int(ds.Rows), int(ds.Columns))
    import SimpleITK as sitk

    reader = sitk.ImageFileReader()
    reader.SetFileName(path)
    reader.ReadImageInformation()
    return tuple(int(s) for s in reversed(reader.GetSize()))


def check_image_size(shape: tuple[int, ...], caps) -> None:
    """The whole study is decoded, so all its pixels count against max_pixels."""
    pixels = math.prod(shape)
    if pixels > caps.max_pixels:
        raise BadRequest(f"the image has {pixels:,} pixels ({' x '.join(map(str, shape))}), over the cap "
                         f"max_pixels = {caps.max_pixels:,}")


def check_frame_count(n: int, caps) -> None:
    if n > caps.max_frames:
        raise BadRequest(f"the request selects {n} frames, over the cap max_frames = {caps.max_frames} "
                         "(choose fewer with 'frames')")

