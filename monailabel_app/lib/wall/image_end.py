"""Where an uploaded image's data ends, so that nothing can ride along after it.

A PNG or JPEG decodes whatever follows its end marker (IEND, EOI): a ZIP appended to a valid PNG passed the
upload check, was stored byte for byte, and Python imported a package from it once the file's path reached a
subprocess's PYTHONPATH (task_process closes that door; this is the second lock). `trailing_bytes` walks the
format's own structure: PNG chunks to IEND, JPEG segments and entropy-coded data to EOI; a DICOM file may end
with its data set (data set trailing padding allowed), and a ZIP directory found at its end is refused as well.
NIfTI and NRRD headers state their data size, which their readers check.
"""

from __future__ import annotations

import mmap
import os
import struct

__all__ = ["trailing_bytes", "trailing_problem"]

_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
#: JPEG markers without a length field
_JPEG_STANDALONE = {0x01, *range(0xD0, 0xD8)}


def _png_end(data: bytes) -> int:
    pos = len(_PNG_SIGNATURE)
    while pos + 8 <= len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        pos += 12 + length
        if kind == b"IEND":
            return pos
    return len(data)  # no IEND: the decoder refuses a truncated file itself


def _jpeg_scan_end(data: bytes, pos: int) -> int:
    """The offset of the marker that ends the entropy-coded data starting at `pos`."""
    while True:
        pos = data.find(b"\xff", pos)
        if pos < 0 or pos + 1 >= len(data):
            return len(data)
        nxt = data[pos + 1]
        if nxt == 0x00 or 0xD0 <= nxt <= 0xD7 or nxt == 0xFF:  # stuffed byte, restart marker, fill byte
            pos += 1 if nxt == 0xFF else 2
            continue
        return pos


def _jpeg_end(data: bytes) -> int:
    pos = 2  # after SOI
    while pos + 4 <= len(data):
        if data[pos] != 0xFF:
            return len(data)  # not a marker where one must be: the decoder judges the file
        marker = data[pos + 1]
        if marker == 0xFF:
            pos += 1
            continue
        if marker == 0xD9:  # EOI
            return pos + 2
        if marker in _JPEG_STANDALONE:
            pos += 2
            continue
        (length,) = struct.unpack(">H", data[pos + 2:pos + 4])
        pos += 2 + length
        if marker == 0xDA:  # start of scan: entropy-coded data up to the next marker
            pos = _jpeg_scan_end(data, pos)
    return len(data)


def _zip_directory_at_end(data: bytes) -> bool:
    """True when the file ends with a consistent ZIP end-of-central-directory record (what zipimport reads)."""
    tail_start = max(0, len(data) - 65_557)
    at = data.rfind(b"PK\x05\x06", tail_start)
    if at < 0 or at + 22 > len(data):
        return False
    size, offset = struct.unpack("<II", data[at + 12:at + 20])
    start = at - size
    return 0 <= start < at and data[start:start + 4] == b"PK\x01\x02" and offset <= start


def _dicom_trailing(path: str, data: bytes) -> int:
    import pydicom

    if _zip_directory_at_end(data):
        first = data.find(b"PK\x03\x04")
        return len(data) - first if first >= 0 else 1
    ds = pydicom.dcmread(path, defer_size=1024)
    late = [tag for tag in ds.keys() if tag > 0x7FE00010 and tag != 0xFFFCFFFC]  # after the pixel data
    return 1 if late else 0


def trailing_bytes(path: str | os.PathLike, fmt: str) -> int:
    """How many bytes follow the end of the image in `path` (0 when none); `fmt` as uploads.sniff_format names it."""
    if fmt not in ("png", "jpeg", "dicom"):
        return 0
    with open(path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as data:  # not read into memory
        if fmt == "png":
            return len(data) - _png_end(data)
        if fmt == "jpeg":
            return len(data) - _jpeg_end(data)
        try:
            return _dicom_trailing(str(path), data)
        except Exception:  # a data set pydicom cannot walk: the full decode answers with its own message
            return 0


def trailing_problem(path: str | os.PathLike, fmt: str | None) -> str | None:
    """Why an uploaded image is refused for what follows its end (one sentence), or None when nothing does: the
    one rule the datastore's upload door and /infer's upload share."""
    extra = trailing_bytes(path, fmt) if fmt else 0
    if not extra:
        return None
    return (f"the {fmt} upload carries {extra:,} bytes after the end of its image; such files are refused (they "
            "can smuggle other content)")
