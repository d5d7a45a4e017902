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

__all__ = ["check_request_counts", "check_image_size", "check_frame_count", "image_header_shape", "image_header",
           "check_image_budget", "BYTES_PER_PIXEL_BUDGET"]

#: the decode budget per allowed pixel: a float32 grey value. max_pixels x this is the most one decoded study
#: may take (uint8 RGB fits; a float64 volume of the same pixel count does not)
BYTES_PER_PIXEL_BUDGET = 4


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
    return image_header(path)[0]


def image_header(path: str) -> tuple[tuple[int, ...], int]:
    """(shape, bytes a decoded pixel takes with all its channels) from the header alone: compressed data
    (gzip NIfTI, PNG, JPEG) is not inflated, so a decompression bomb costs nothing here."""
    from umind_core.imageio import ImageReadError, _detect_format  # the reader's own format rule

    fmt = _detect_format(Path(path))
    try:
        return _header(path, fmt)
    except Exception as exc:  # a header no reader understands: the same 400 the full read would give
        raise ImageReadError(f"{path}: cannot read {fmt} data (header: {type(exc).__name__})") from None


_PIL_BYTES = {"1": 1, "L": 1, "P": 1, "LA": 2, "RGB": 3, "YCbCr": 3, "LAB": 3, "HSV": 3, "RGBA": 4, "CMYK": 4,
              "I": 4, "F": 4, "I;16": 2, "I;16B": 2, "I;16L": 2}


def _header(path: str, fmt: str) -> tuple[tuple[int, ...], int]:
    if fmt in ("png", "jpeg"):
        from PIL import Image

        with Image.open(path) as im:
            return (im.height, im.width), _PIL_BYTES.get(im.mode, 4)
    if fmt == "dicom":
        import pydicom

        ds = pydicom.dcmread(path, stop_before_pixels=True)
        per = max(1, int(getattr(ds, "BitsAllocated", 8) or 8) // 8) * int(getattr(ds, "SamplesPerPixel", 1) or 1)
        return (int(getattr(ds, "NumberOfFrames", 1) or 1), int(ds.Rows), int(ds.Columns)), per
    import SimpleITK as sitk

    reader = sitk.ImageFileReader()
    reader.SetFileName(path)
    reader.ReadImageInformation()
    per = sitk.Image([1] * reader.GetDimension(), reader.GetPixelID(), 1).GetSizeOfPixelComponent()  # 1 voxel
    return tuple(int(s) for s in reversed(reader.GetSize())), per * int(reader.GetNumberOfComponents())


def check_image_size(shape: tuple[int, ...], caps) -> None:
    """The whole study is decoded, so all its pixels count against max_pixels."""
    pixels = math.prod(shape)
    if pixels > caps.max_pixels:
        raise BadRequest(f"the image has {pixels:,} pixels ({' x '.join(map(str, shape))}), over the cap "
                         f"max_pixels = {caps.max_pixels:,}")


def check_image_budget(path: str, caps) -> tuple[int, ...]:
    """One rule at every door (upload, infer, scoring): the pixel cap and the decode budget, from the header."""
    shape, per_pixel = image_header(path)
    check_image_size(shape, caps)
    pixels = math.prod(shape)
    budget = caps.max_pixels * BYTES_PER_PIXEL_BUDGET
    if pixels * per_pixel > budget:
        raise BadRequest(f"the image would decode to {pixels * per_pixel / 1e6:,.0f} MB ({per_pixel} bytes a pixel), "
                         f"over the budget of {budget / 1e6:,.0f} MB (max_pixels x {BYTES_PER_PIXEL_BUDGET} bytes)")
    return shape


def check_frame_count(n: int, caps) -> None:
    if n > caps.max_frames:
        raise BadRequest(f"the request selects {n} frames, over the cap max_frames = {caps.max_frames} "
                         "(choose fewer with 'frames')")

