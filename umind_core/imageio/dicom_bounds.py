"""DICOM read with every decompression bounded by what the header declares, checked while it inflates.

pydicom inflates a Deflated Explicit VR Little Endian data set whole inside `dcmread`, before anything can look
at Rows and Columns: 1 MB of deflate became +2.0 GB of memory in 36 s, at the upload's header check and again at
every later read. And a JPEG frame may be far larger than the Rows x Columns its data set declares (a 9000 x
9000 frame in a 64 x 64 file cost +0.93 GB before the decoder's output was found not to fit). So:

* a deflated data set is inflated here in chunks: first at most `HEADER_INFLATE_MAX` bytes, enough to reach the
  pixel data and read the header; then, if the declared pixels are within the caller's cap, the rest, refused
  as soon as it passes the header's declared pixel bytes;
* every compressed frame's own header (JPEG SOF, JPEG-LS SOF55, JPEG 2000 SIZ) must state the data set's Rows
  and Columns before any frame is decoded (`check_frames`).

`read_dicom` is the one way the package opens a DICOM file; `read_header` and `read_study` both use it.
"""

from __future__ import annotations

import io
import math
import os
import struct
import zlib

from .errors import ImageReadError

__all__ = ["read_dicom", "check_frames", "HEADER_INFLATE_MAX", "DEFLATED"]

DEFLATED = "1.2.840.10008.1.2.1.99"
#: the most a deflated data set may inflate to before its pixel data starts (its header; real ones are a few KB)
HEADER_INFLATE_MAX = 4 * 1024 * 1024
#: room after the declared pixel bytes: the pixel data element's own header, padding, a few late elements
_SLACK = 64 * 1024
_CHUNK = 64 * 1024
_JPEG_SOF = {0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF, 0xF7}
_JPEG_STANDALONE = {0x01, *range(0xD0, 0xD9)}


def read_dicom(path: str | os.PathLike, *, header_only: bool = False, max_pixels: int | None = None):
    """The data set of `path` (without its pixel data when `header_only`); a deflated one inflated only within
    the pixel bytes its header declares, and not at all when it declares more than `max_pixels` pixels.
    pydicom's own errors propagate (the caller words them)."""
    import pydicom
    from pydicom.filereader import _read_file_meta_info, read_preamble

    with open(path, "rb") as fh:
        preamble = read_preamble(fh, False)
        meta = _read_file_meta_info(fh)
        if str(meta.get("TransferSyntaxUID", "")) != DEFLATED:
            fh.seek(0)
            return pydicom.dcmread(fh, stop_before_pixels=header_only)
        inflater = _Inflater(fh, str(path))
        head = inflater.read_to(HEADER_INFLATE_MAX)
        header, offset, at_pixels = _header(head)
        if not at_pixels and not inflater.done:
            raise ImageReadError(f"{path}: the deflated data set's header is over {HEADER_INFLATE_MAX:,} bytes; "
                                 "refused")
        if header_only or not at_pixels:
            return _file_dataset(path, header, preamble, meta)
        pixels, per_pixel = _declared(header)
        if max_pixels is not None and pixels > max_pixels:
            raise ImageReadError(f"{path}: image too large ({pixels:,} pixels declared; at most {max_pixels:,})")
        limit = offset + pixels * per_pixel + _SLACK
        data = inflater.read_to(limit, whole=True)
    return _file_dataset(path, _parse(data, stop_at_pixels=False), preamble, meta)


class _Inflater:
    """Raw deflate from an open file, handed out up to a limit; with `whole`, a longer stream is refused."""

    def __init__(self, fh, name: str):
        self.fh, self.name = fh, name
        self.z = zlib.decompressobj(-zlib.MAX_WBITS)
        self.out = bytearray()

    @property
    def done(self) -> bool:
        return self.z.eof or (not self.z.unconsumed_tail and not self._more())

    def _more(self) -> bool:
        pos = self.fh.tell()
        more = bool(self.fh.read(1))
        self.fh.seek(pos)
        return more

    def read_to(self, limit: int, whole: bool = False) -> bytes:
        """Inflate until more than `limit` bytes are out or the stream ends (never more than limit + 1)."""
        while len(self.out) <= limit and not self.z.eof:
            tail = self.z.unconsumed_tail or self.fh.read(_CHUNK)
            if not tail:
                break
            self.out += self.z.decompress(tail, limit + 1 - len(self.out))
        if whole and (len(self.out) > limit or not self.done):
            raise ImageReadError(f"{self.name}: the deflated data set inflates past the size its header declares "
                                 f"({limit:,} bytes); refused")
        return bytes(self.out[:limit + 1])


def _parse(data: bytes, stop_at_pixels: bool):
    from pydicom.filereader import read_dataset

    stop = (lambda tag, vr, length: tag >= 0x7FE00010) if stop_at_pixels else None
    return read_dataset(io.BytesIO(data), False, True, stop_when=stop)


def _header(head: bytes):
    """(the data set before the pixel data, the offset where the pixel data element starts, whether it was
    reached) from the first inflated bytes."""
    from pydicom.filereader import read_dataset

    fp = io.BytesIO(head)
    ds = read_dataset(fp, False, True, stop_when=lambda tag, vr, length: tag >= 0x7FE00010)
    offset = fp.tell()
    return ds, offset, offset < len(head)


def _declared(ds) -> tuple[int, int]:
    """(pixels of all frames, bytes a stored pixel takes with all its samples) as the header declares them."""
    rows, cols = int(ds.get("Rows", 0) or 0), int(ds.get("Columns", 0) or 0)
    frames = int(ds.get("NumberOfFrames", 1) or 1)
    spp = int(ds.get("SamplesPerPixel", 1) or 1)
    bits = int(ds.get("BitsAllocated", 8) or 8)
    return math.prod((rows, cols, max(frames, 1))), max(spp, 1) * max(1, math.ceil(bits / 8))


def _file_dataset(path, ds, preamble, meta):
    from pydicom.dataset import FileDataset

    return FileDataset(str(path), ds, preamble=preamble, file_meta=meta, is_implicit_VR=False,
                       is_little_endian=True)


# compressed frames --------------------------------------------------------------------------


def check_frames(ds, name: str) -> None:
    """Every encapsulated frame's own header states the data set's Rows x Columns, before any is decoded."""
    ts = ds.file_meta.get("TransferSyntaxUID", None)
    if ts is None or not getattr(ts, "is_encapsulated", False) or "PixelData" not in ds:
        return
    from pydicom.encaps import generate_pixel_data_frame

    rows, cols = int(ds.Rows), int(ds.Columns)
    n = int(ds.get("NumberOfFrames", 1) or 1)
    try:
        for i, frame in enumerate(generate_pixel_data_frame(ds.PixelData, n)):
            size = codestream_size(frame[:65_536])
            if size is None:
                if str(ts).startswith("1.2.840.10008.1.2.5"):  # RLE: decoded into Rows x Columns, no header
                    continue
                raise ImageReadError(f"{name}: frame {i} is not a JPEG or JPEG 2000 code stream its transfer "
                                     "syntax names")
            if size != (cols, rows):
                raise ImageReadError(f"{name}: frame {i} is {size[0]} x {size[1]} px but the data set declares "
                                     f"{cols} x {rows}; refused before decoding")
    except ImageReadError:
        raise
    except Exception as exc:
        raise ImageReadError(f"{name}: the encapsulated pixel data cannot be split into frames "
                             f"({type(exc).__name__})") from None


def codestream_size(data: bytes) -> tuple[int, int] | None:
    """(width, height) from a JPEG / JPEG-LS SOF or a JPEG 2000 SIZ marker segment, or None if neither."""
    if data[:2] == b"\xff\xd8":
        return _jpeg_size(data)
    at = data.find(b"\xff\x4f\xff\x51")  # SOC then SIZ (a raw code stream, or inside a JP2 box)
    if at < 0 or at + 4 + 2 + 2 + 16 > len(data):
        return None
    xsiz, ysiz, xo, yo = struct.unpack(">IIII", data[at + 8:at + 24])
    return xsiz - xo, ysiz - yo


def _jpeg_size(data: bytes) -> tuple[int, int] | None:
    pos = 2
    while pos + 4 <= len(data):
        if data[pos] != 0xFF:
            return None
        marker = data[pos + 1]
        if marker == 0xFF:
            pos += 1
            continue
        if marker in _JPEG_STANDALONE:
            pos += 2
            continue
        if marker in _JPEG_SOF:
            if pos + 9 > len(data):
                return None
            height, width = struct.unpack(">HH", data[pos + 5:pos + 9])
            return width, height
        if marker == 0xDA:
            return None
        (length,) = struct.unpack(">H", data[pos + 2:pos + 4])
        pos += 2 + length
    return None
