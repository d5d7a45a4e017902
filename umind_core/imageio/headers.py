"""What a file's header says before any pixel is decoded: `read_header(path)` -> (shape, bytes a pixel takes, format).

The header is read the way the reader will read the file (`opening.checked_format`: the same refusals of files that
name other files), and compressed data (gzip NIfTI, PNG, JPEG, a deflated DICOM data set past its header) is not
inflated, so a decompression bomb costs nothing here. The server's caps check every image against their pixel and
decode budget with it before anything is decoded. It sits above `opening`, whose checks build on `formats`; kept
apart from `formats` so that the format rules need not import the checks that use them (an import cycle before).
"""

from __future__ import annotations

import os

from .errors import ImageReadError
from .opening import checked_format, sitk_reader

__all__ = ["read_header"]

#: bytes a decoded pixel of a Pillow mode takes, all channels (modes not listed count as 4)
_PIL_BYTES = {"1": 1, "L": 1, "P": 1, "LA": 2, "RGB": 3, "YCbCr": 3, "LAB": 3, "HSV": 3, "RGBA": 4, "CMYK": 4,
              "I": 4, "F": 4, "I;16": 2, "I;16B": 2, "I;16L": 2}


def read_header(path: str | os.PathLike) -> tuple[tuple[int, ...], int, str]:
    """(shape in numpy order with colour channels left out, bytes a decoded pixel takes with all its channels,
    format) from the header alone, read as `detect_format` says the reader will. A file of no supported format,
    or a header its reader does not understand, is the ImageReadError the full read would raise."""
    fmt = checked_format(path)
    try:
        shape, per_pixel = _header(str(path), fmt)
    except ImageReadError:
        raise
    except Exception as exc:  # a header no reader understands: the same refusal the full read would give
        raise ImageReadError(f"{path}: cannot read {fmt} data (header: {type(exc).__name__})") from None
    return shape, per_pixel, fmt


def _header(path: str, fmt: str) -> tuple[tuple[int, ...], int]:
    if fmt in ("png", "jpeg"):
        from PIL import Image

        with Image.open(path) as im:
            return (im.height, im.width), _PIL_BYTES.get(im.mode, 4)
    if fmt == "dicom":
        from .dicom_bounds import read_dicom

        ds = read_dicom(path, header_only=True)  # a deflated data set: only its header is inflated
        per = max(1, int(getattr(ds, "BitsAllocated", 8) or 8) // 8) * int(getattr(ds, "SamplesPerPixel", 1) or 1)
        return (int(getattr(ds, "NumberOfFrames", 1) or 1), int(ds.Rows), int(ds.Columns)), per
    import SimpleITK as sitk

    reader = sitk_reader(path, fmt)
    reader.ReadImageInformation()
    per = sitk.Image([1] * reader.GetDimension(), reader.GetPixelID(), 1).GetSizeOfPixelComponent()  # 1 voxel
    return tuple(int(s) for s in reversed(reader.GetSize())), per * int(reader.GetNumberOfComponents())
