"""Label-map files in memory: decode what the server sends, encode what we submit.

Reading and writing go through SimpleITK, which Slicer ships (``import SimpleITK``): NRRD,
NIfTI-1 and PNG are ITK's own readers and writers, not decoders of ours. ITK reads files, not
bytes, so each call goes through a private temporary folder that is removed afterwards. What is
left here is what ITK does not decide for us: the format is sniffed from the content (servers name
temp files freely), the result must be an integer label map, and errors name the file.

Two things ITK does differently from a plain decoder, and how they are handled:
* ITK's NIfTI reader (niftilib) turns NaN voxels into 0; a NaN in a float NIfTI label map is
  looked for in the raw voxels first, so such a file is refused as before instead of becoming
  background.
* ITK expands a palette PNG to RGB and cannot read grey+alpha PNGs: a coloured palette is refused
  as "channels differ" (a grey palette reads as its grey values), grey+alpha with a clear message.

Arrays are in numpy C order (k, j, i): axis 0 is the frame / slice, axis 1 rows, axis 2 columns,
which is the order of ``vtk_to_numpy(...).reshape(dims[::-1])`` for a volume node.
"""

from __future__ import annotations

import gzip
import os
import re
import struct
import tempfile
import zlib
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from .geometry import as_matrix, ras_to_lps

__all__ = ["LabelFileError", "LabelArray", "decode_label_file", "encode_nrrd", "encode_png", "sniff_label_format",
           "encode_image_nrrd"]


class LabelFileError(ValueError):
    """The label-map bytes cannot be decoded or encoded; the message names the file."""


@dataclass
class LabelArray:
    """A decoded label map: integer voxels in (k, j, i) order, plus the file's own geometry
    for 3D NRRD/NIfTI files (informational: results are placed on the input volume)."""

    array: np.ndarray
    fmt: str
    ijk_to_lps: np.ndarray | None = None


_SUFFIX = {"nrrd": ".nrrd", "nifti": ".nii", "png": ".png"}
_NIFTI_FLOATS = {16: "f4", 64: "f8"}
_PNG_GREY_ALPHA = 4


def _sitk() -> Any:
    try:
        import SimpleITK
    except ImportError as exc:  # Slicer ships it; a plain Python may not have it
        raise LabelFileError("reading and writing label files needs SimpleITK "
                             "(shipped with Slicer; pip install SimpleITK)") from exc
    return SimpleITK


def _through_file(suffix: str, write: Callable[[str], None], read: Callable[[str], Any],
                  name: str) -> Any:
    """write(path) then read(path) in a private temporary folder; an ITK error becomes a
    LabelFileError with ITK's informative last line, naming ``name`` instead of the temp path."""
    with tempfile.TemporaryDirectory(prefix="umind-label-") as folder:
        path = os.path.join(folder, "label" + suffix)
        try:
            write(path)
            return read(path)
        except RuntimeError as exc:
            lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
            last = re.sub(r"^(sitk::ERROR:|\[nrrd\]|ITK ERROR: \w+\(0x[0-9a-fA-F]+\):)\s*", "",
                          lines[-1] if lines else type(exc).__name__)
            raise LabelFileError(f"{name}: SimpleITK cannot handle this {suffix} file: "
                                 f"{last.replace(path, name)}") from exc


def sniff_label_format(raw: bytes) -> str | None:
    """"nrrd", "png" or "nifti" (NIfTI-1) from a label file's first bytes (already gunzipped), else None: the copy,
    for Slicer's Python, of `umind_core.imageio.sniff_format`'s rule for these three (tests/test_one_owner.py)."""
    if raw[:7] == b"NRRD000":
        return "nrrd"
    if raw[:8] == b"\x89PNG\r\n\x1a\n":
        return "png"
    if len(raw) >= 348 and raw[344:348] in (b"n+1\x00", b"ni1\x00"):
        return "nifti"
    return None


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
    fmt = sniff_label_format(raw)
    if fmt == "nrrd":
        _refuse_detached_nrrd(raw, filename)
    elif fmt == "png":
        if len(raw) > 25 and raw[12:16] == b"IHDR" and raw[25] == _PNG_GREY_ALPHA:
            raise LabelFileError(f"{filename}: grey+alpha PNG is not supported for label maps "
                                 f"(save it as greyscale)")
    elif fmt == "nifti":
        _refuse_nifti_nan(raw, filename)
    else:
        raise LabelFileError(f"{filename}: not a NRRD, NIfTI-1 or PNG label map")
    out = _read_with_sitk(raw, fmt, filename)
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


def _refuse_detached_nrrd(raw: bytes, name: str) -> None:
    """A detached header names another file to read (any path): never follow it."""
    head = raw.split(b"\n\n", 1)[0].split(b"\r\n\r\n", 1)[0]
    keys = {line.partition(b":")[0].strip().lower() for line in head.splitlines()}
    if keys & {b"data file", b"datafile"}:
        raise LabelFileError(f"{name}: detached NRRD data files are not supported")


def _refuse_nifti_nan(raw: bytes, name: str) -> None:
    """NaN in a float NIfTI: ITK would read it as 0, so look at the stored voxels first."""
    endian = "<" if struct.unpack("<i", raw[:4])[0] == 348 else ">"
    datatype = struct.unpack(endian + "h", raw[70:72])[0]
    if datatype not in _NIFTI_FLOATS:
        return
    offset = int(struct.unpack(endian + "f", raw[108:112])[0])
    dtype = np.dtype(_NIFTI_FLOATS[datatype]).newbyteorder(endian)
    body = raw[offset:]
    voxels = np.frombuffer(body[:len(body) - len(body) % dtype.itemsize], dtype=dtype)
    if not np.all(np.isfinite(voxels)):
        raise LabelFileError(f"{name}: label map holds NaN or infinite values")


def _read_with_sitk(raw: bytes, fmt: str, name: str) -> LabelArray:
    sitk = _sitk()

    def write(path: str) -> None:
        with open(path, "wb") as f:
            f.write(raw)

    img = _through_file(_SUFFIX[fmt], write, sitk.ReadImage, name)
    arr = sitk.GetArrayFromImage(img)
    channels = img.GetNumberOfComponentsPerPixel()
    if channels > 1:  # PNG: RGB(A) or an expanded palette; grey only if the colours agree
        if channels >= 3 and not (np.array_equal(arr[..., 0], arr[..., 1])
                                  and np.array_equal(arr[..., 0], arr[..., 2])):
            raise LabelFileError(f"{name}: colour PNG is not a label map (channels differ)")
        arr = arr[..., 0]
    ijk = None
    if fmt != "png" and img.GetDimension() == 3:
        ijk = np.eye(4)
        ijk[:3, :3] = np.array(img.GetDirection()).reshape(3, 3) * np.array(img.GetSpacing())
        ijk[:3, 3] = img.GetOrigin()
    return LabelArray(_as3d(np.ascontiguousarray(arr), name), fmt, ijk)


def _as3d(arr: np.ndarray, name: str) -> np.ndarray:
    if arr.ndim == 2:
        return arr[None]
    if arr.ndim == 3:
        return arr
    if arr.ndim == 1:
        return arr[None, None]
    raise LabelFileError(f"{name}: label map has {arr.ndim} dimensions {arr.shape}")


def _write_with_sitk(img: Any, suffix: str, compress: bool) -> bytes:
    sitk = _sitk()

    def read(path: str) -> bytes:
        with open(path, "rb") as f:
            return f.read()

    return _through_file(suffix, lambda path: sitk.WriteImage(img, path, compress), read,
                         "encoded labels")


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


_NRRD_KINDS = ("u1", "i1", "u2", "i2", "u4", "i4", "f4", "f8")


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
    if a.ndim not in (3, 4) or key not in _NRRD_KINDS:
        raise LabelFileError(f"image must be (k, j, i[, c]) numbers, got shape {a.shape} "
                             f"dtype {a.dtype}")
    m = np.eye(4) if ijk_to_ras is None else as_matrix(ijk_to_ras, "IJK->RAS matrix")
    cols = np.array([ras_to_lps(m[:3, c]) for c in range(3)]).T  # columns: i, j, k in LPS
    spacing = np.linalg.norm(cols, axis=0)
    if not np.all(spacing > 0):
        raise LabelFileError(f"IJK->RAS matrix has a zero-length axis: spacing {list(spacing)}")
    img = _sitk().GetImageFromArray(np.ascontiguousarray(a), isVector=a.ndim == 4)
    img.SetSpacing([float(s) for s in spacing])
    img.SetDirection([float(x) for x in (cols / spacing).ravel()])
    img.SetOrigin(ras_to_lps(m[:3, 3]))
    return _write_with_sitk(img, ".nrrd", True)


def encode_png(labels: np.ndarray) -> bytes:
    """H x W (or 1 x H x W) labels 0..255 -> 8-bit greyscale PNG bytes (the server's 2D form)."""
    a = np.asarray(labels)
    if a.ndim == 3 and a.shape[0] == 1:
        a = a[0]
    if a.ndim != 2 or a.dtype.kind not in "ub" or (a.size and a.max() > 255):
        raise LabelFileError(f"PNG labels must be H x W with values 0..255, got shape "
                             f"{a.shape} dtype {a.dtype}")
    img = _sitk().GetImageFromArray(np.ascontiguousarray(a.astype(np.uint8)))
    return _write_with_sitk(img, ".png", False)
