"""Bounded work per request: caps on clicks, prompt targets, frames and pixels, checked before any allocation.

One small request could stall the server: 2,000 clicks took 24 s (and blocked every other request),
10,000 tried to allocate 49.7 GB. The counts are checked on the raw request (lengths of lists, no parsing
of their items) and the image size on its header (`umind_core.imageio.read_header`: PIL, pydicom without
pixels, SimpleITK image information), all before the image is decoded or the model runs. A request over a
cap is a 400 that names the conf key, so an operator knows what to raise. The caps and their defaults are
conf keys (lib/conf.py AppConfig: max_clicks, max_targets, max_frames, max_pixels); `caps` below is that
AppConfig.
"""

from __future__ import annotations

import math

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
    """(shape, bytes a decoded pixel takes with all its channels) from the header alone, read the way the reader
    will read the file (`umind_core.imageio.read_header`, the one owner): compressed data (gzip NIfTI, PNG, JPEG)
    is not inflated, so a decompression bomb costs nothing here. ImageReadError (a 400) for a header no reader
    understands."""
    from umind_core.imageio import read_header

    shape, per_pixel, _ = read_header(path)
    return shape, per_pixel


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

