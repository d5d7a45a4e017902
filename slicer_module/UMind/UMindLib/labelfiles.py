"""Label-map files in memory: decode what the server sends, encode what we submit.

Slicer's Python has numpy and VTK but neither pynrrd nor nibabel, and the server's files must be
read without touching the disk or the Slicer application. So NRRD and NIfTI-1 are parsed here
with the standard library and numpy, and so is PNG.

Arrays are in numpy C order (k, j, i): axis 0 is the frame / slice, axis 1 rows, axis 2 columns,
which is the order of ``vtk_to_numpy(...).reshape(dims[::-1])`` for a volume node.
"""

from __future__ import annotations

import gzip
import struct
import zlib
from dataclasses import dataclass

import numpy as np

from .geometry import as_matrix, ras_to_lps

__all__ = ["LabelFileError", "LabelArray", "decode_label_file", "encode_nrrd", "encode_png",
           "encode_image_nrrd"]


class LabelFileError(ValueError):
    """The label-map bytes cannot be decoded or encoded; the message names the file."""


@dataclass
class LabelArray:
    """A decoded label map: integer voxels in (k, j, i) order, plus the file's own geometry
    when the format has one (informational: results are placed on the input volume)."""

    array: np.ndarray
    fmt: str
    ijk_to_lps: np.ndarray | None = None


_NRRD_TYPES = {
    "uchar": "u1", "unsigned char": "u1", "uint8": "u1", "uint8_t": "u1",
    "signed char": "i1", "int8": "i1", "int8_t": "i1", "char": "i1",
    "short": "i2", "int16": "i2", "int16_t": "i2", "signed short": "i2", "short int": "i2",
    "ushort": "u2", "unsigned short": "u2", "uint16": "u2", "uint16_t": "u2",
    "int": "i4", "int32": "i4", "int32_t": "i4", "signed int": "i4",
    "uint": "u4", "unsigned int": "u4", "uint32": "u4", "uint32_t": "u4",
    "float": "f4", "double": "f8",
}
_NIFTI_TYPES = {2: "u1", 4: "i2", 8: "i4", 16: "f4", 64: "f8", 256: "i1", 512: "u2", 768: "u4"}


def decode_label_file(data: bytes, filename: str = "label") -> LabelArray:
    """Bytes of a .nrrd, .nii, .nii.gz or .png label map -> `LabelArray` (3D, k first).

    The format is sniffed from the content, not the name, because servers name temp files
    freely. Non-integer voxels are rounded (some writers store labels as float)."""
    if not data:
        raise LabelFileError(f"{filename}: empty label file")
    raw = data
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError, zlib.error) as exc:
            raise LabelFileError(f"{filename}: corrupt gzip stream: {exc}") from exc
    if raw[:4] == b"NRRD":
        out = _decode_nrrd(raw, filename)
    elif raw[:8] == b"\x89PNG\r\n\x1a\n":
        out = _decode_png(raw, filename)
    elif len(raw) >= 348 and raw[344:347] in (b"n+1", b"ni1"):
        out = _decode_nifti(raw, filename)
    else:
        raise LabelFileError(f"{filename}: not a NRRD, NIfTI-1 or PNG label map")
    a = out.array
    if a.dtype.kind == "f":
        if not np.all(np.isfinite(a)):
            raise LabelFileError(f"{filename}: label map holds NaN or infinite values")
        a = np.rint(a)
    if a.size and (a.min() < 0 or a.max() > 65535):
        raise LabelFileError(f"{filename}: label values must lie in 0..65535, "
                             f"got {a.min()}..{a.max()}")
    out.array = a.astype(np.uint8 if not a.size or a.max() <= 255 else np.uint16)
    return out


def _decode_nrrd(raw: bytes, name: str) -> LabelArray:
    head, sep, body = raw.partition(b"\n\n")
    if not sep:
        head, sep, body = raw.partition(b"\r\n\r\n")
    if not sep:
        raise LabelFileError(f"{name}: NRRD header has no end (blank line)")
    fields: dict[str, str] = {}
    for line in head.decode("latin-1").splitlines()[1:]:
        if not line or line.startswith("#") or ":=" in line:
            continue
        key, _, value = line.partition(":")
        fields[key.strip().lower()] = value.strip()
    if "data file" in fields or "datafile" in fields:
        raise LabelFileError(f"{name}: detached NRRD data files are not supported")
    try:
        dtype = np.dtype(_NRRD_TYPES[fields["type"].lower()])
        sizes = [int(s) for s in fields["sizes"].split()]
    except KeyError as exc:
        raise LabelFileError(f"{name}: NRRD header lacks or has an unknown {exc}") from exc
    if fields.get("endian", "little").lower() == "big":
        dtype = dtype.newbyteorder(">")
    else:
        dtype = dtype.newbyteorder("<")
    enc = fields.get("encoding", "raw").lower()
    if enc in ("gzip", "gz"):
        try:
            body = gzip.decompress(body)
        except (OSError, EOFError, zlib.error) as exc:
            raise LabelFileError(f"{name}: corrupt gzip data in NRRD: {exc}") from exc
    elif enc != "raw":
        raise LabelFileError(f"{name}: NRRD encoding {enc!r} is not supported (raw, gzip)")
    n = int(np.prod(sizes))
    if len(body) < n * dtype.itemsize:
        raise LabelFileError(f"{name}: NRRD data holds {len(body)} bytes, sizes {sizes} "
                             f"need {n * dtype.itemsize}")
    arr = np.frombuffer(body[len(body) - n * dtype.itemsize:], dtype=dtype)
    arr = arr.reshape(sizes[::-1]).astype(dtype.newbyteorder("="))
    ijk = None
    if "space directions" in fields and "space origin" in fields and len(sizes) == 3:
        try:
            dirs = [_vec(t) for t in fields["space directions"].split(") (")]
            ijk = np.eye(4)
            ijk[:3, :3] = np.array(dirs).T
            ijk[:3, 3] = _vec(fields["space origin"])
            if "right" in fields.get("space", "left-posterior-superior").split("-")[0]:
                ijk[:2] *= -1
        except ValueError:
            ijk = None
    return LabelArray(_as3d(arr, name), "nrrd", ijk)


def _vec(text: str) -> list[float]:
    v = [float(x) for x in text.strip().strip("()").split(",")]
    if len(v) != 3:
        raise ValueError(text)
    return v


def _decode_nifti(raw: bytes, name: str) -> LabelArray:
    endian = "<" if struct.unpack("<i", raw[:4])[0] == 348 else ">"
    if struct.unpack(endian + "i", raw[:4])[0] != 348:
        raise LabelFileError(f"{name}: NIfTI header size is not 348")
    dim = struct.unpack(endian + "8h", raw[40:56])
    datatype = struct.unpack(endian + "h", raw[70:72])[0]
    vox_offset = int(struct.unpack(endian + "f", raw[108:112])[0])
    slope, inter = struct.unpack(endian + "2f", raw[112:120])
    ndim = dim[0]
    if not 1 <= ndim <= 7:
        raise LabelFileError(f"{name}: NIfTI dim[0]={ndim} is invalid")
    shape = [int(d) for d in dim[1:ndim + 1]]
    while len(shape) > 3 and shape[-1] == 1:
        shape.pop()
    if len(shape) > 3:
        raise LabelFileError(f"{name}: NIfTI label map has {len(shape)} dimensions {shape}")
    if datatype not in _NIFTI_TYPES:
        raise LabelFileError(f"{name}: NIfTI datatype {datatype} is not supported")
    dtype = np.dtype(_NIFTI_TYPES[datatype]).newbyteorder(endian)
    n = int(np.prod(shape))
    end = vox_offset + n * dtype.itemsize
    if len(raw) < end:
        raise LabelFileError(f"{name}: NIfTI data is truncated ({len(raw)} of {end} bytes)")
    arr = np.frombuffer(raw[vox_offset:end], dtype=dtype).reshape(shape[::-1])
    arr = arr.astype(dtype.newbyteorder("="))
    if slope not in (0.0, 1.0) or inter != 0.0:
        arr = arr * (slope or 1.0) + inter
    return LabelArray(_as3d(arr, name), "nifti")


def _decode_png(raw: bytes, name: str) -> LabelArray:
    """Greyscale / palette / RGB(A) PNG, 8 or 16 bit, not interlaced. Decoded here rather than
    by VTK because VTK's PNG reader flips rows differently for files and memory buffers."""
    pos, chunks, idat = 8, {}, bytearray()
    while pos + 8 <= len(raw):
        length, kind = struct.unpack(">I4s", raw[pos:pos + 8])
        payload = raw[pos + 8:pos + 8 + length]
        if len(payload) != length:
            raise LabelFileError(f"{name}: truncated PNG chunk {kind!r}")
        if kind == b"IDAT":
            idat += payload
        else:
            chunks.setdefault(kind, payload)
        pos += 12 + length
        if kind == b"IEND":
            break
    if b"IHDR" not in chunks:
        raise LabelFileError(f"{name}: PNG has no IHDR chunk")
    w, h, depth, ctype, _, _, interlace = struct.unpack(">IIBBBBB", chunks[b"IHDR"])
    channels = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}.get(ctype)
    if channels is None or depth not in (8, 16) or interlace:
        raise LabelFileError(f"{name}: PNG colour type {ctype}, depth {depth}, interlace "
                             f"{interlace} is not supported for label maps")
    bpp = channels * depth // 8
    try:
        data = zlib.decompress(bytes(idat))
    except zlib.error as exc:
        raise LabelFileError(f"{name}: corrupt PNG data: {exc}") from exc
    stride = w * bpp
    if len(data) < h * (stride + 1):
        raise LabelFileError(f"{name}: PNG data is truncated")
    rows = np.frombuffer(data[:h * (stride + 1)], np.uint8).reshape(h, stride + 1)
    out = np.zeros((h, stride), np.uint8)
    prev = np.zeros(stride, np.uint8)
    for r in range(h):
        f, line = rows[r, 0], rows[r, 1:]
        if f == 0:
            cur = line.copy()
        elif f == 1:
            cur = (np.cumsum(line.reshape(w, bpp).astype(np.int64), axis=0) % 256
                   ).astype(np.uint8).ravel()
        elif f == 2:
            cur = line + prev
        elif f in (3, 4):
            cur = _unfilter_slow(int(f), line, prev, bpp)
        else:
            raise LabelFileError(f"{name}: PNG row {r} has unknown filter {f}")
        out[r] = cur
        prev = cur
    px = out.view(">u2").astype(np.uint16) if depth == 16 else out
    px = px.reshape(h, w, channels)
    if ctype in (2, 6) and not (np.array_equal(px[..., 0], px[..., 1])
                                and np.array_equal(px[..., 0], px[..., 2])):
        raise LabelFileError(f"{name}: colour PNG is not a label map (channels differ)")
    return LabelArray(px[None, :, :, 0].copy(), "png")


def _unfilter_slow(f: int, line: np.ndarray, prev: np.ndarray, bpp: int) -> np.ndarray:
    cur = bytearray(len(line))
    up = prev.tolist()
    src = line.tolist()
    for x in range(len(src)):
        a = cur[x - bpp] if x >= bpp else 0
        b = up[x]
        if f == 3:
            cur[x] = (src[x] + ((a + b) >> 1)) & 0xFF
        else:
            c = up[x - bpp] if x >= bpp else 0
            p = a + b - c
            pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
            pred = a if pa <= pb and pa <= pc else (b if pb <= pc else c)
            cur[x] = (src[x] + pred) & 0xFF
    return np.frombuffer(bytes(cur), np.uint8)


def _as3d(arr: np.ndarray, name: str) -> np.ndarray:
    if arr.ndim == 2:
        return arr[None]
    if arr.ndim == 3:
        return arr
    if arr.ndim == 1:
        return arr[None, None]
    raise LabelFileError(f"{name}: label map has {arr.ndim} dimensions {arr.shape}")


def encode_nrrd(labels: np.ndarray, ijk_to_ras: object | None = None) -> bytes:
    """(k, j, i) integer labels -> gzip NRRD bytes in LPS space, the volume's own geometry."""
    a = np.asarray(labels)
    if a.ndim == 2:
        a = a[None]
    if a.ndim != 3 or a.dtype.kind not in "ub" or (a.size and a.max() > 65535):
        raise LabelFileError(f"labels must be a 3D array of values 0..65535, got shape "
                             f"{a.shape} dtype {a.dtype}")
    a = a.astype(np.uint8 if not a.size or a.max() <= 255 else np.uint16)
    return encode_image_nrrd(a, ijk_to_ras)


_NRRD_NAMES = {"u1": "uint8", "i1": "int8", "u2": "uint16", "i2": "int16", "u4": "uint32",
               "i4": "int32", "f4": "float", "f8": "double"}


def encode_image_nrrd(image: np.ndarray, ijk_to_ras: object | None = None) -> bytes:
    """(k, j, i) or (k, j, i, c) voxels (any common numeric type; c = colour components, e.g.
    RGB ultrasound) -> gzip NRRD bytes in LPS space. Used to upload the image itself."""
    a = np.asarray(image)
    if a.dtype == bool:
        a = a.astype(np.uint8)
    if a.dtype.kind == "i" and a.dtype.itemsize == 8:
        a = a.astype(np.int32)
    if a.dtype.kind == "u" and a.dtype.itemsize == 8:
        a = a.astype(np.uint32)
    key = a.dtype.kind + str(a.dtype.itemsize)
    if a.ndim not in (3, 4) or key not in _NRRD_NAMES:
        raise LabelFileError(f"image must be (k, j, i[, c]) numbers, got shape {a.shape} "
                             f"dtype {a.dtype}")
    a = np.ascontiguousarray(a)
    m = np.eye(4) if ijk_to_ras is None else as_matrix(ijk_to_ras, "IJK->RAS matrix")
    cols = [ras_to_lps(m[:3, c]) for c in range(3)]
    origin = ras_to_lps(m[:3, 3])

    def vec(v: list[float]) -> str:
        return "(" + ",".join(repr(float(x)) for x in v) + ")"

    vector = a.ndim == 4
    sizes = [a.shape[2], a.shape[1], a.shape[0]]
    header = "\n".join([
        "NRRD0004", "# written by UMindLib", f"type: {_NRRD_NAMES[key]}",
        f"dimension: {4 if vector else 3}", "space: left-posterior-superior",
        "sizes: " + " ".join(str(s) for s in ([a.shape[3]] if vector else []) + sizes),
        "space directions: " + ("none " if vector else "") + " ".join(vec(c) for c in cols),
        "kinds: " + ("vector " if vector else "") + "domain domain domain",
        "endian: little", "encoding: gzip", f"space origin: {vec(origin)}",
    ]) + "\n\n"
    return header.encode("ascii") + gzip.compress(a.astype(a.dtype.newbyteorder("<")).tobytes(),
                                                  compresslevel=6)


def encode_png(labels: np.ndarray) -> bytes:
    """H x W (or 1 x H x W) labels 0..255 -> 8-bit greyscale PNG bytes (the server's 2D form)."""
    a = np.asarray(labels)
    if a.ndim == 3 and a.shape[0] == 1:
        a = a[0]
    if a.ndim != 2 or a.dtype.kind not in "ub" or (a.size and a.max() > 255):
        raise LabelFileError(f"PNG labels must be H x W with values 0..255, got shape "
                             f"{a.shape} dtype {a.dtype}")
    a = np.ascontiguousarray(a.astype(np.uint8))
    h, w = a.shape

    def chunk(kind: bytes, payload: bytes) -> bytes:
        return (struct.pack(">I", len(payload)) + kind + payload
                + struct.pack(">I", zlib.crc32(kind + payload) & 0xFFFFFFFF))

    rows = b"".join(b"\x00" + a[r].tobytes() for r in range(h))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 0, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(rows, 6)) + chunk(b"IEND", b""))
