"""Where an uploaded image's data ends, so that nothing can ride along after it.

A PNG or JPEG decodes whatever follows its end marker (IEND, EOI): a ZIP appended to a valid PNG passed the
upload check, was stored byte for byte, and Python imported a package from it once the file's path reached a
subprocess's PYTHONPATH (task_process closes that door; this is the second lock). `trailing_bytes` walks the
format's own structure: PNG chunks to IEND, JPEG segments and entropy-coded data to EOI; a DICOM file may end
with its data set (data set trailing padding allowed), and a ZIP directory found at its end is refused as well.
NIfTI and NRRD headers state their data size: an uncompressed file must end where that data does, a gzip one
where its gzip stream does (what follows a stream is counted while it is inflated, never past the declared
size), and a ZIP directory at the end of any of them is refused (ITK read a `.nii` or `.nrrd` with a ZIP
appended without a word, and it was stored).
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
    from umind_core.imageio.dicom_bounds import read_dicom

    if _zip_directory_at_end(data):
        first = data.find(b"PK\x03\x04")
        return len(data) - first if first >= 0 else 1
    ds = read_dicom(path)  # a deflated data set inflates only up to what its header declares (a bomb: refused)
    late = [tag for tag in ds.keys() if tag > 0x7FE00010 and tag != 0xFFFCFFFC]  # after the pixel data
    return 1 if late else 0


def _gzip_trailing(data, expected: int | None) -> int:
    """Bytes after the gzip stream that starts `data` (its output counted, never kept, and never past `expected`)."""
    import zlib

    z = zlib.decompressobj(wbits=31)
    out, pos, step = 0, 0, 1 << 16
    while not z.eof and pos < len(data):
        chunk = z.unconsumed_tail or data[pos:pos + step]
        if not z.unconsumed_tail:
            pos += len(chunk)
        out += len(z.decompress(chunk, step))
        if expected is not None and out > expected:
            return 0  # more data than declared: the reader refuses that itself
    return len(z.unused_data) + max(0, len(data) - pos) if z.eof else 0


def _nifti_size(head: bytes) -> int | None:
    """vox_offset + voxel bytes from a NIfTI-1 header, or None."""
    try:
        if head[344:348] != b"n+1\x00":
            return None
        endian = "<" if struct.unpack("<i", head[:4])[0] == 348 else ">"
        dims = struct.unpack(endian + "8h", head[40:56])
        bitpix = struct.unpack(endian + "h", head[72:74])[0]
        vox = int(struct.unpack(endian + "f", head[108:112])[0])
        n = 1
        for d in dims[1:1 + max(0, min(7, dims[0]))]:
            n *= max(1, d)
        return vox + n * bitpix // 8
    except (struct.error, ValueError, OverflowError):
        return None


def _nrrd_trailing(data) -> int:
    """Bytes after a raw NRRD's data (0 for other encodings, which their readers bound)."""
    head = bytes(data[:65_536])
    end = head.find(b"\n\n")
    if end < 0:
        return 0
    fields = dict(line.split(b":", 1) for line in head[:end].split(b"\n")[1:] if b":" in line and
                  not line.startswith(b"#"))
    fields = {k.strip().lower(): v.strip() for k, v in fields.items()}
    if fields.get(b"encoding", b"").lower() != b"raw" or b"byte skip" in fields or b"line skip" in fields:
        return 0
    sizes = [int(v) for v in fields.get(b"sizes", b"").split() if v.isdigit()]
    per = {b"uchar": 1, b"unsigned char": 1, b"uint8": 1, b"signed char": 1, b"int8": 1, b"short": 2,
           b"unsigned short": 2, b"uint16": 2, b"int16": 2, b"ushort": 2, b"int": 4, b"uint": 4, b"int32": 4,
           b"uint32": 4, b"unsigned int": 4, b"float": 4, b"double": 8, b"int64": 8, b"uint64": 8}
    size = per.get(fields.get(b"type", b"").lower())
    if not sizes or size is None:
        return 0
    n = size
    for d in sizes:
        n *= d
    return max(0, len(data) - (end + 2) - n)


def trailing_bytes(path: str | os.PathLike, fmt: str) -> int:
    """How many bytes follow the end of the image in `path` (0 when none); `fmt` as uploads.sniff_format names it."""
    if fmt not in ("png", "jpeg", "dicom", "nifti", "nifti-gz", "nrrd"):
        return 0
    with open(path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as data:  # not read into memory
        if fmt == "png":
            return len(data) - _png_end(data)
        if fmt == "jpeg":
            return len(data) - _jpeg_end(data)
        if fmt in ("nifti", "nifti-gz", "nrrd") and _zip_directory_at_end(data):
            first = data.find(b"PK\x03\x04")
            return len(data) - first if first >= 0 else 1
        if fmt == "nifti":
            expected = _nifti_size(bytes(data[:352]))
            return max(0, len(data) - expected) if expected is not None else 0
        if fmt == "nifti-gz":
            import gzip

            with gzip.open(path, "rb") as gz:
                expected = _nifti_size(gz.read(352))
            return _gzip_trailing(data, expected)
        if fmt == "nrrd":
            return _nrrd_trailing(data)
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
