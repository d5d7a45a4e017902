"""Ultrasound image I/O: files in, RGB frames with geometry out; label maps and markups back.

The model only ever sees H x W x 3 uint8 RGB frames, but everything it says must be written back
in the geometry of the file it came from (Slicer overlays label maps by physical position, not by
pixel index). So every reader returns a `Geometry` next to the frames, and every writer takes one.

Conventions (the single place where they are decided):

* Pixel coordinates ``(x, y)`` are continuous ITK index coordinates of a frame: x along columns,
  y along rows, integer values at pixel centres.
* Physical coordinates are LPS millimetres, as ITK (and therefore SimpleITK and Slicer files) use.
  ``p = origin + direction @ (spacing * (i, j, k))`` with ``(i, j, k)`` the ITK index (x, y, z).
* Cine clips and volumes are 3D images; numpy arrays are ``(z, y, x)`` = ``N x H x W``.
  A volume read with ``axis=a`` is sliced along numpy axis ``a``: axis 0 gives (y, x) frames,
  axis 1 gives (z, x) frames, axis 2 gives (z, y) frames; label maps passed to
  `write_label_map` are in that same frame-stack order and are transposed back.
* Cine vs volume for 3D NIfTI/NRRD (a 3D array cannot say which it is, so the rule is explicit):
  a 4D NIfTI with a single z slice (x, y, 1, t) is cine; a NRRD whose third axis has kind
  ``time`` is cine; a NIfTI whose ``intent_name`` or ``descrip`` contains the word "cine" is cine;
  every other 3D array is a volume. 4D data with more than one z slice and more than one time
  point has no frame layout we can honour and is rejected.
* Intensity: 8-bit PNG/JPEG and 8-bit DICOM keep their values (they are display-ready);
  everything else (16-bit PNG, 16-bit DICOM, any NIfTI/NRRD) is min-max windowed to uint8 over
  the whole study, never per frame, so that frames stay comparable. Non-finite values are
  replaced by the finite minimum; a constant image is valid and becomes all zeros.
* DICOM files without a suffix are accepted when they carry the ``DICM`` preamble marker,
  because clinics often export them that way.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np
from PIL import Image, ImageDraw

from ..atomic import atomic_path, write_text

__all__ = [
    "ImageReadError",
    "ImageWriteError",
    "MarkupsError",
    "Frame",
    "Geometry",
    "Study",
    "SUPPORTED_SUFFIXES",
    "MARKUPS_SCHEMA",
    "read_study",
    "read_image",
    "frame_spacing",
    "write_label_map",
    "read_label_map",
    "write_image",
    "label_map_suffix",
    "write_markups_json",
    "read_markups_json",
    "parse_markups",
    "pixel_to_physical",
    "physical_to_pixel",
    "frame_axes_lps",
    "write_overlay_png",
    "ras_to_lps",
]

SUPPORTED_SUFFIXES: tuple[str, ...] = (
    ".png", ".jpg", ".jpeg", ".dcm", ".dicom", ".nii", ".nii.gz", ".nrrd", ".nhdr",
)
LABEL_MAP_SUFFIXES: tuple[str, ...] = (".png", ".nii", ".nii.gz", ".nrrd")
MARKUPS_SCHEMA = (
    "https://raw.githubusercontent.com/slicer/slicer/main/Modules/Loadable/Markups/"
    "Resources/Schema/markups-schema-v1.0.3.json#"
)

MIN_SIDE = 8
MAX_SIDE = 16384
MAX_PIXELS = 100_000_000
_DICOM_UNIT_MM = {3: 10.0}  # PhysicalUnits code 3 = cm; other codes (dB, s, Hz...) are not lengths
_FORMAT_BY_SUFFIX = {
    ".png": "png", ".jpg": "jpeg", ".jpeg": "jpeg", ".dcm": "dicom", ".dicom": "dicom",
    ".nii": "nifti", ".nii.gz": "nifti", ".nrrd": "nrrd", ".nhdr": "nrrd",
}


class ImageReadError(ValueError):
    """An input image cannot be turned into frames; the message names the file and why."""


class ImageWriteError(ValueError):
    """Output data does not fit the geometry or format it should be written in."""


class MarkupsError(ValueError):
    """A markups description or a .mrk.json file is malformed."""


@dataclass
class Frame:
    """One 2D image as the model sees it, plus what is needed to measure on it."""

    pixels: np.ndarray
    spacing: tuple[float, float] | None
    index: int
    source: str
    scan_mask: np.ndarray | None = None

    @property
    def size(self) -> tuple[int, int]:
        """(W, H), the order grounding coordinates are normalised by."""
        return int(self.pixels.shape[1]), int(self.pixels.shape[0])


@dataclass
class Geometry:
    """Where the input's pixels lie in space, so outputs can be written back in place.

    ``spacing_known`` is False for files that carry no physical calibration (PNG, JPEG, DICOM
    without spacing): the geometry still works (spacing 1, i.e. pixel units) but nobody should
    report those numbers as millimetres.
    """

    kind: str
    shape: tuple[int, ...]
    spacing: tuple[float, ...]
    origin: tuple[float, ...]
    direction: tuple[float, ...]
    axis: int = 0
    format: str = "png"
    spacing_known: bool = True

    @property
    def ndim(self) -> int:
        return 2 if self.kind == "2d" else 3

    @property
    def n_frames(self) -> int:
        return 1 if self.kind == "2d" else int(self.shape[self.axis])

    @property
    def frame_shape(self) -> tuple[int, int]:
        """(H, W) of each frame."""
        if self.kind == "2d":
            return int(self.shape[0]), int(self.shape[1])
        rest = [int(s) for i, s in enumerate(self.shape[:3]) if i != self.axis]
        return rest[0], rest[1]

    def to_dict(self) -> dict:
        return {
            "kind": self.kind, "shape": list(self.shape), "spacing": list(self.spacing),
            "origin": list(self.origin), "direction": list(self.direction), "axis": self.axis,
            "format": self.format, "spacing_known": self.spacing_known,
        }

    @classmethod
    def from_dict(cls, d: dict) -> "Geometry":
        return cls(
            kind=d["kind"], shape=tuple(int(v) for v in d["shape"]),
            spacing=tuple(float(v) for v in d["spacing"]),
            origin=tuple(float(v) for v in d["origin"]),
            direction=tuple(float(v) for v in d["direction"]), axis=int(d.get("axis", 0)),
            format=d.get("format", "png"), spacing_known=bool(d.get("spacing_known", True)),
        )


@dataclass
class Study:
    """All frames read from one file, with the file's geometry and format-specific metadata."""

    path: str
    frames: list[Frame]
    geometry: Geometry
    meta: dict = field(default_factory=dict)
    #: where ITK-based viewers (3D Slicer's loadVolume) place the file, when that differs from `geometry`
    viewer: Geometry | None = None

    @property
    def viewer_geometry(self) -> Geometry:
        """The geometry files for a viewer (label maps, markups) are written in, so they overlay the image
        where Slicer shows it. It differs from `geometry` only for DICOM: ITK's GDCM reader ignores the
        ultrasound regions' calibration (measured: a US image with only region spacing loads at 1 mm per
        pixel in slicer-core and SimpleITK alike), while `geometry` keeps it for measurements in mm."""
        return self.viewer or self.geometry


# --------------------------------------------------------------------------------------------
# reading


def read_study(path: str | os.PathLike, axis: int | None = None,
               frames: Iterable[int] | None = None) -> Study:
    """Read any supported file into RGB frames plus geometry.

    ``axis`` picks the slicing axis of a volume (numpy z, y, x order; default 0); it must be
    None or 0 for 2D images and cine clips. ``frames`` selects frame indices (None = all);
    intensity windowing always uses the whole study so a subset looks like the full read.
    """
    p = Path(path)
    name = str(p)
    if axis is not None and axis not in (0, 1, 2):
        raise ImageReadError(f"{name}: axis must be 0, 1 or 2, got {axis!r}")
    if not p.exists():
        raise ImageReadError(f"{name}: file does not exist")
    if p.is_dir():
        raise ImageReadError(f"{name}: is a directory, not an image file")
    if p.stat().st_size == 0:
        raise ImageReadError(f"{name}: file is empty")
    fmt = _detect_format(p)
    readers = {"png": _read_pil, "jpeg": _read_pil, "dicom": _read_dicom,
               "nifti": _read_sitk, "nrrd": _read_sitk}
    try:
        stack, geometry, spacing2d, scan_mask, meta = readers[fmt](p, fmt, axis)
    except ImageReadError:
        raise
    except MemoryError as exc:
        raise ImageReadError(f"{name}: not enough memory to read ({exc})") from exc
    except Exception as exc:  # decoders raise anything from OSError to RuntimeError
        raise ImageReadError(f"{name}: cannot read {fmt} data: {exc}") from exc
    _check_frame_size(name, geometry)
    indices = _select(name, frames, geometry.n_frames)
    if scan_mask is not None:
        scan_mask.setflags(write=False)
    out = [Frame(pixels=np.ascontiguousarray(stack[i]), spacing=spacing2d, index=i,
                 source=name, scan_mask=scan_mask) for i in indices]
    meta.setdefault("n_frames", geometry.n_frames)
    viewer = _dicom_viewer_geometry(p, geometry) if fmt == "dicom" else None
    return Study(path=name, frames=out, geometry=geometry, meta=meta, viewer=viewer)


def read_image(path: str | os.PathLike) -> Frame:
    """The first (or only) frame of a file."""
    return read_study(path, frames=[0]).frames[0]


def frame_spacing(geometry: Geometry) -> tuple[float, float]:
    """In-plane (column, row) spacing of the frames made from ``geometry``."""
    s = geometry.spacing
    if geometry.kind == "2d":
        return float(s[0]), float(s[1])
    col, row = frame_itk_axes(geometry.axis)
    return float(s[col]), float(s[row])


def _detect_format(p: Path) -> str:
    low = p.name.lower()
    for suffix in sorted(_FORMAT_BY_SUFFIX, key=len, reverse=True):
        if low.endswith(suffix):
            return _FORMAT_BY_SUFFIX[suffix]
    if "." not in low or p.suffix == "":
        with open(p, "rb") as fh:
            head = fh.read(132)
        if len(head) == 132 and head[128:132] == b"DICM":
            return "dicom"
    raise ImageReadError(
        f"{p}: unsupported file type {p.suffix or '(no suffix)'!r}; supported: "
        f"{', '.join(SUPPORTED_SUFFIXES)} or DICOM with a DICM preamble"
    )


def _select(name: str, frames: Iterable[int] | None, n: int) -> list[int]:
    if frames is None:
        return list(range(n))
    out = []
    for f in frames:
        if isinstance(f, (bool, np.bool_)) or not isinstance(f, (int, np.integer)):
            raise ImageReadError(f"{name}: frame index {f!r} is not an integer")
        if not 0 <= int(f) < n:
            raise ImageReadError(f"{name}: frame index {int(f)} out of range (file has {n})")
        out.append(int(f))
    return out


def _check_size(name: str, dims: Sequence[int], frames: int = 1) -> None:
    """Reject huge images before their pixels are decoded (``frames`` is a count, not a side)."""
    dims = [int(d) for d in dims]
    if any(d > MAX_SIDE for d in dims):
        raise ImageReadError(f"{name}: image too large ({' x '.join(map(str, dims))}; "
                             f"at most {MAX_SIDE} px a side)")
    total = math.prod(dims) * int(frames)
    if total > MAX_PIXELS:
        raise ImageReadError(f"{name}: image too large ({total} pixels; at most {MAX_PIXELS})")


def _check_frame_size(name: str, geometry: Geometry) -> None:
    h, w = geometry.frame_shape
    if h < MIN_SIDE or w < MIN_SIDE:
        raise ImageReadError(f"{name}: image too small ({w} x {h} px frames; "
                             f"at least {MIN_SIDE} px a side)")


def _window(arr: np.ndarray, name: str) -> np.ndarray:
    """Min-max to uint8 over the whole array; NaN/inf -> finite min; constant -> zeros."""
    a = np.asarray(arr, dtype=np.float32 if arr.dtype.itemsize <= 2 else np.float64)
    finite = np.isfinite(a)
    if not finite.any():
        raise ImageReadError(f"{name}: image has no finite values (all NaN)")
    lo = float(a[finite].min())
    hi = float(a[finite].max())
    if not finite.all():
        a = np.where(finite, a, lo)
    if hi <= lo:
        return np.zeros(a.shape, dtype=np.uint8)
    return np.clip((a - lo) * (255.0 / (hi - lo)) + 0.5, 0, 255).astype(np.uint8)


def _to_rgb(stack: np.ndarray) -> np.ndarray:
    """N x H x W (grey) or N x H x W x C -> N x H x W x 3 uint8."""
    if stack.ndim == 3:
        return np.repeat(stack[..., None], 3, axis=-1)
    if stack.shape[-1] == 1:
        return np.repeat(stack, 3, axis=-1)
    return np.ascontiguousarray(stack[..., :3])


def _identity(n: int) -> tuple[float, ...]:
    return tuple(float(v) for v in np.eye(n).ravel())


def _plain_2d(shape: tuple[int, int], fmt: str, spacing: tuple[float, float] | None) -> Geometry:
    return Geometry(kind="2d", shape=shape, spacing=spacing or (1.0, 1.0), origin=(0.0, 0.0),
                    direction=_identity(2), axis=0, format=fmt,
                    spacing_known=spacing is not None)


# PNG / JPEG --------------------------------------------------------------------------------


def _read_pil(p: Path, fmt: str, axis: int | None):
    name = str(p)
    if axis not in (None, 0):
        raise ImageReadError(f"{name}: axis={axis} given for a 2D image")
    with Image.open(p) as im:
        _check_size(name, im.size)
        im.load()
        mode = im.mode
        meta: dict[str, Any] = {"mode": mode, "format": im.format}
        if mode in ("I;16", "I;16B", "I;16L", "I;16N", "I", "F"):
            arr = _window(np.asarray(im), name)
        elif mode in ("L", "1", "LA", "La"):
            arr = np.asarray(im.convert("L"))
        else:  # RGB, RGBA (alpha dropped), P/PA (palette applied), CMYK, YCbCr, ...
            arr = np.asarray(im.convert("RGB"))
    stack = _to_rgb(arr[None])
    geometry = _plain_2d(arr.shape[:2], fmt, None)
    return stack, geometry, None, None, meta


# DICOM -------------------------------------------------------------------------------------


def _read_dicom(p: Path, fmt: str, axis: int | None):
    import pydicom
    from pydicom.pixel_data_handlers.util import (
        apply_color_lut, apply_modality_lut, convert_color_space,
    )

    name = str(p)
    if axis not in (None, 0):
        raise ImageReadError(f"{name}: axis={axis} given for a DICOM image (frames are time)")
    try:
        ds = pydicom.dcmread(str(p))
    except Exception as exc:
        raise ImageReadError(f"{name}: not a readable DICOM file: {exc}") from exc
    if "PixelData" not in ds:
        raise ImageReadError(f"{name}: DICOM file has no PixelData")
    rows, cols = int(ds.get("Rows", 0) or 0), int(ds.get("Columns", 0) or 0)
    n = int(ds.get("NumberOfFrames", 1) or 1)
    _check_size(name, (cols, rows), frames=n)
    if min(rows, cols) < MIN_SIDE:
        raise ImageReadError(f"{name}: image too small ({cols} x {rows} px; "
                             f"at least {MIN_SIDE} px a side)")
    pi = str(ds.get("PhotometricInterpretation", "MONOCHROME2")).upper()
    spp = int(ds.get("SamplesPerPixel", 1) or 1)
    try:
        arr = ds.pixel_array
    except Exception as exc:
        raise ImageReadError(f"{name}: cannot decode DICOM pixel data "
                             f"({ds.file_meta.get('TransferSyntaxUID', '?')}): {exc}") from exc
    colour = spp > 1
    if (n == 1 and arr.ndim == (3 if colour else 2)):
        arr = arr[None]
    if arr.ndim != (4 if colour else 3) or arr.shape[1:3] != (rows, cols):
        raise ImageReadError(f"{name}: DICOM pixel array shape {arr.shape} does not match "
                             f"{n} frame(s) of {rows} x {cols}")

    if pi in ("MONOCHROME1", "MONOCHROME2"):
        rescaled = "RescaleSlope" in ds or "RescaleIntercept" in ds
        grey = apply_modality_lut(arr, ds) if rescaled else arr
        grey = grey if grey.dtype == np.uint8 else _window(grey, name)
        if pi == "MONOCHROME1":
            grey = 255 - grey
        stack = _to_rgb(grey)
    elif pi == "PALETTE COLOR":
        rgb = apply_color_lut(arr, ds)
        if rgb.dtype != np.uint8:
            rgb = (rgb.astype(np.float64) / 257.0 + 0.5).astype(np.uint8) if rgb.max() > 255 \
                else rgb.astype(np.uint8)
        stack = _to_rgb(rgb)
    elif pi in ("YBR_FULL", "YBR_FULL_422"):
        # pydicom 2.x returns YBR for both (it upsamples 422 and asks Pillow not to convert)
        ybr = arr if arr.dtype == np.uint8 else _window(arr, name)
        stack = _to_rgb(convert_color_space(ybr, "YBR_FULL", "RGB"))
    elif pi in ("RGB", "YBR_RCT", "YBR_ICT"):
        # JPEG 2000 decoders hand back RGB for the reversible/irreversible colour transforms
        stack = _to_rgb(arr if arr.dtype == np.uint8 else _window(arr, name))
    else:
        raise ImageReadError(f"{name}: unsupported PhotometricInterpretation {pi!r}")

    spacing, spacing_source, regions = _dicom_spacing(ds)
    scan_mask = _dicom_scan_mask(regions, rows, cols)
    frame_time = ds.get("FrameTime", None)
    meta: dict[str, Any] = {
        "PhotometricInterpretation": pi,
        "TransferSyntaxUID": str(ds.file_meta.get("TransferSyntaxUID", "")),
        "SOPClassUID": str(ds.get("SOPClassUID", "")),
        "Modality": str(ds.get("Modality", "")),
        "Manufacturer": str(ds.get("Manufacturer", "")),
        "NumberOfFrames": n,
        "FrameTime": float(frame_time) if frame_time not in (None, "") else None,
        "spacing_source": spacing_source,
        "regions": regions,
    }
    if n == 1:
        geometry = _plain_2d((rows, cols), "dicom", spacing)
    else:
        sx, sy = spacing or (1.0, 1.0)
        geometry = Geometry(kind="cine", shape=(n, rows, cols), spacing=(sx, sy, 1.0),
                            origin=(0.0, 0.0, 0.0), direction=_identity(3), axis=0,
                            format="dicom", spacing_known=spacing is not None)
    return stack, geometry, spacing, scan_mask, meta


def _dicom_regions(ds) -> list[dict]:
    out = []
    for item in ds.get("SequenceOfUltrasoundRegions", []) or []:
        def g(key, default=None):
            v = item.get(key, default)
            return default if v is None or v == "" else v
        out.append({
            "spatial_format": int(g("RegionSpatialFormat", 0)),
            "data_type": int(g("RegionDataType", 0)),
            "x0": int(g("RegionLocationMinX0", 0)), "y0": int(g("RegionLocationMinY0", 0)),
            "x1": int(g("RegionLocationMaxX1", 0)), "y1": int(g("RegionLocationMaxY1", 0)),
            "units_x": int(g("PhysicalUnitsXDirection", 0)),
            "units_y": int(g("PhysicalUnitsYDirection", 0)),
            "delta_x": float(g("PhysicalDeltaX", 0.0)), "delta_y": float(g("PhysicalDeltaY", 0.0)),
        })
    return out


def _dicom_spacing(ds) -> tuple[tuple[float, float] | None, str | None, list[dict]]:
    """PixelSpacing (row, col!) wins; else the first calibrated US region, 2D tissue first."""
    regions = _dicom_regions(ds)
    ps = ds.get("PixelSpacing", None)
    if ps is not None and len(ps) == 2 and float(ps[0]) > 0 and float(ps[1]) > 0:
        return (float(ps[1]), float(ps[0])), "PixelSpacing", regions
    calibrated = [r for r in regions
                  if r["units_x"] in _DICOM_UNIT_MM and r["units_y"] in _DICOM_UNIT_MM
                  and r["delta_x"] != 0 and r["delta_y"] != 0]
    calibrated.sort(key=lambda r: r["spatial_format"] != 1)
    if calibrated:
        r = calibrated[0]
        r["used_for_spacing"] = True
        return ((abs(r["delta_x"]) * _DICOM_UNIT_MM[r["units_x"]],
                 abs(r["delta_y"]) * _DICOM_UNIT_MM[r["units_y"]]),
                "SequenceOfUltrasoundRegions", regions)
    return None, None, regions


def _dicom_scan_mask(regions: list[dict], rows: int, cols: int) -> np.ndarray | None:
    """Union of the 2D tissue regions (inclusive bounds); the spacing region if none is 2D."""
    chosen = [r for r in regions if r["spatial_format"] == 1] or \
        [r for r in regions if r.get("used_for_spacing")]
    if not chosen:
        return None
    mask = np.zeros((rows, cols), dtype=bool)
    for r in chosen:
        x0, x1 = sorted((r["x0"], r["x1"]))
        y0, y1 = sorted((r["y0"], r["y1"]))
        mask[max(y0, 0):min(y1 + 1, rows), max(x0, 0):min(x1 + 1, cols)] = True
    return mask if mask.any() else None


def _dicom_viewer_geometry(p: Path, geometry: Geometry) -> Geometry:
    """The DICOM file's geometry as ITK (GDCM) reads its header, as Slicer's loadVolume places it.

    Read with SimpleITK, which shares ITK's GDCM reader with Slicer, so no rule of GDCM's (PixelSpacing,
    ImagePositionPatient, ImageOrientationPatient; regions ignored) is re-implemented here. If ITK cannot
    read the header, the fallback is ITK's default for a file without geometry: 1 mm, origin 0, identity."""
    import SimpleITK as sitk

    n = geometry.ndim
    try:
        reader = sitk.ImageFileReader()
        reader.SetFileName(str(p))
        reader.SetImageIO("GDCMImageIO")
        reader.ReadImageInformation()
        spacing, origin = reader.GetSpacing(), reader.GetOrigin()
        d = np.asarray(reader.GetDirection(), dtype=np.float64).reshape(len(spacing), len(spacing))
    except RuntimeError:
        spacing, origin, d = (1.0,) * 3, (0.0,) * 3, np.eye(3)
    return Geometry(kind=geometry.kind, shape=geometry.shape, spacing=tuple(float(v) for v in spacing[:n]),
                    origin=tuple(float(v) for v in origin[:n]),
                    direction=tuple(float(v) for v in d[:n, :n].ravel()), axis=geometry.axis,
                    format="dicom", spacing_known=False)


# NIfTI / NRRD ------------------------------------------------------------------------------


def _read_sitk(p: Path, fmt: str, axis: int | None):
    import SimpleITK as sitk

    name = str(p)
    reader = sitk.ImageFileReader()
    reader.SetFileName(name)
    try:
        reader.ReadImageInformation()
    except RuntimeError as exc:
        raise ImageReadError(f"{name}: not a readable {fmt} file: {_first_line(exc)}") from exc
    size = tuple(int(s) for s in reader.GetSize())
    _check_size(name, size)
    ncomp = int(reader.GetNumberOfComponents())
    keys = set(reader.GetMetaDataKeys())
    md = {k: reader.GetMetaData(k) for k in keys if not k.startswith(("qto_", "qfac"))}
    if ncomp not in (1, 3, 4):
        raise ImageReadError(f"{name}: {ncomp} components per pixel; only grey, RGB and RGBA")
    kind = _sitk_kind(name, fmt, size, md)
    if fmt == "nifti":
        _check_nifti_complete(p, md)
    try:
        img = reader.Execute()
    except RuntimeError as exc:
        raise ImageReadError(f"{name}: cannot read pixel data (truncated or corrupt?): "
                             f"{_first_line(exc)}") from exc

    if kind == "cine4d":  # (x, y, 1, t) -> 3D (x, y, t), z direction kept as the frame normal
        arr = sitk.GetArrayFromImage(img)[:, 0]
        sp, org, d4 = img.GetSpacing(), img.GetOrigin(), np.array(img.GetDirection()).reshape(4, 4)
        spacing = (sp[0], sp[1], sp[3])
        origin = tuple(org[:3])
        direction = tuple(d4[:3, :3].ravel())
        kind = "cine"
    else:
        arr = sitk.GetArrayFromImage(img)
        spacing, origin, direction = img.GetSpacing(), img.GetOrigin(), img.GetDirection()
    if ncomp > 1:
        arr = arr[..., :3]
    spacing = tuple(float(v) for v in spacing)
    origin = tuple(float(v) for v in origin)
    direction = tuple(float(v) for v in direction)
    meta = {"sitk": md, "components": ncomp, "pixel_type": str(arr.dtype)}

    if kind == "2d":
        if axis not in (None, 0):
            raise ImageReadError(f"{name}: axis={axis} given for a 2D image")
        stack = _to_rgb(_window(arr, name)[None])
        geometry = Geometry(kind="2d", shape=tuple(arr.shape[:2]), spacing=spacing,
                            origin=origin, direction=direction, axis=0, format=fmt)
        return stack, geometry, (spacing[0], spacing[1]), None, meta
    if kind == "cine" and axis not in (None, 0):
        raise ImageReadError(f"{name}: axis={axis} given for a cine clip (frames are time)")
    ax = 0 if axis is None else int(axis)
    geometry = Geometry(kind=kind, shape=tuple(arr.shape[:3]), spacing=spacing, origin=origin,
                        direction=direction, axis=ax, format=fmt)
    _check_frame_size(name, geometry)
    vol = _window(arr, name)
    stack = _to_rgb(stack_from_volume(vol, ax))
    return stack, geometry, frame_spacing(geometry), None, meta


def _sitk_kind(name: str, fmt: str, size: tuple[int, ...], md: dict) -> str:
    dim = len(size)
    if dim == 2:
        return "2d"
    if dim == 4 and size[2] == 1 and size[3] > 1:
        return "cine4d"
    if dim == 4 and size[3] == 1:
        raise ImageReadError(f"{name}: 4D image with a single time point; save it as 3D")
    if dim >= 4:
        raise ImageReadError(f"{name}: {dim}D image {size} has an unknown frame layout "
                             "(only 2D, 3D and x-y-1-t are supported)")
    if fmt == "nrrd" and md.get("NRRD_kinds[2]", "").strip().lower() == "time":
        return "cine"
    if fmt == "nifti":
        words = (md.get("intent_name", "") + " " + md.get("descrip", "")).lower()
        if "cine" in words.replace("_", " ").replace("-", " ").split():
            return "cine"
    return "volume"


def _check_nifti_complete(p: Path, md: dict) -> None:
    """ITK zero-fills a truncated NIfTI without a word; count the bytes ourselves."""
    try:
        ndim = int(md["dim[0]"])
        n = math.prod(int(md[f"dim[{i}]"]) for i in range(1, ndim + 1))
        expected = int(float(md.get("vox_offset", "352"))) + n * int(md["bitpix"]) // 8
    except (KeyError, ValueError):
        return
    if p.name.lower().endswith(".gz"):
        import gzip
        import zlib

        got = 0
        try:
            with gzip.open(p, "rb") as fh:
                while chunk := fh.read(1 << 20):
                    got += len(chunk)
                    if got >= expected:
                        break
        except (EOFError, OSError, zlib.error) as exc:
            raise ImageReadError(f"{p}: truncated or corrupt gzip data ({exc})") from exc
    else:
        got = p.stat().st_size
    if got < expected:
        raise ImageReadError(f"{p}: truncated NIfTI: {got} of {expected} bytes present")


def _first_line(exc: Exception) -> str:
    """The informative part of an ITK exception (its last line, without build paths)."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    lines = [ln for ln in lines if not ln.startswith("Exception thrown in SimpleITK")]
    last = lines[-1] if lines else type(exc).__name__
    return last.replace("[nrrd] ", "")[:300]


def stack_from_volume(vol: np.ndarray, axis: int) -> np.ndarray:
    """(z, y, x[, c]) -> frame stack N x H x W[, c] for the slicing axis."""
    if axis == 0:
        return vol
    order = (1, 0, 2) if axis == 1 else (2, 0, 1)
    return vol.transpose(order + tuple(range(3, vol.ndim)))


def _volume_from_stack(stack: np.ndarray, axis: int) -> np.ndarray:
    if axis == 0:
        return stack
    return stack.transpose((1, 0, 2) if axis == 1 else (1, 2, 0))


def frame_itk_axes(axis: int) -> tuple[int, int]:
    """ITK axes (0=x, 1=y, 2=z) that a frame's columns and rows run along."""
    return {0: (0, 1), 1: (0, 2), 2: (1, 2)}[axis]


# --------------------------------------------------------------------------------------------
# geometry


def _itk_index(geometry: Geometry, frame_index: float, x: float, y: float) -> np.ndarray:
    col, row = frame_itk_axes(geometry.axis)
    idx = np.zeros(3)
    idx[col], idx[row] = x, y
    idx[({0, 1, 2} - {col, row}).pop()] = frame_index
    return idx


def _matrices(geometry: Geometry) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    n = geometry.ndim
    d = np.asarray(geometry.direction, dtype=np.float64)
    if d.size != n * n or len(geometry.spacing) < n or len(geometry.origin) < n:
        raise ValueError(f"geometry of kind {geometry.kind!r} needs {n}-D spacing/origin and "
                         f"a {n}x{n} direction, got {geometry.spacing}, {geometry.origin}, "
                         f"{geometry.direction}")
    return (np.asarray(geometry.spacing[:n], dtype=np.float64),
            np.asarray(geometry.origin[:n], dtype=np.float64), d.reshape(n, n))


def pixel_to_physical(geometry: Geometry, frame_index: int | float | None, x: float,
                      y: float) -> tuple[float, float, float]:
    """Frame pixel (x, y) on frame ``frame_index`` -> LPS mm (2D images: z = 0)."""
    spacing, origin, d = _matrices(geometry)
    if geometry.kind == "2d":
        p = origin + d @ (spacing * np.array([x, y], dtype=np.float64))
        return float(p[0]), float(p[1]), 0.0
    if frame_index is None:
        raise ValueError(f"pixel_to_physical needs a frame index for a {geometry.kind} geometry")
    p = origin + d @ (spacing * _itk_index(geometry, float(frame_index), x, y))
    return float(p[0]), float(p[1]), float(p[2])


def physical_to_pixel(geometry: Geometry, frame_index: int | None,
                      p_lps: Sequence[float]) -> tuple[float, float, float]:
    """LPS mm -> (x, y, frame). With a frame index the point is projected onto that frame;
    without one the frame coordinate is computed (continuous) from the point."""
    spacing, origin, d = _matrices(geometry)
    p = np.asarray(p_lps, dtype=np.float64)
    if geometry.kind == "2d":
        ij = np.linalg.solve(d, p[:2] - origin) / spacing
        return float(ij[0]), float(ij[1]), float(frame_index or 0)
    ijk = np.linalg.solve(d, p[:3] - origin) / spacing
    col, row = frame_itk_axes(geometry.axis)
    normal = ({0, 1, 2} - {col, row}).pop()
    f = float(ijk[normal]) if frame_index is None else float(frame_index)
    return float(ijk[col]), float(ijk[row]), f


def frame_axes_lps(geometry: Geometry) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """Unit LPS vectors of a frame's x (columns), y (rows) and normal, and the spacing along
    the normal (1.0 for 2D). Used to place oriented boxes (ROIs) in space."""
    spacing, _, d = _matrices(geometry)
    if geometry.kind == "2d":
        ex = np.array([d[0, 0], d[1, 0], 0.0])
        ey = np.array([d[0, 1], d[1, 1], 0.0])
        through = 1.0
    else:
        col, row = frame_itk_axes(geometry.axis)
        normal = ({0, 1, 2} - {col, row}).pop()
        ex, ey = d[:, col].copy(), d[:, row].copy()
        through = float(spacing[normal])
    ex /= np.linalg.norm(ex)
    ey /= np.linalg.norm(ey)
    ez = np.cross(ex, ey)
    ez /= np.linalg.norm(ez)
    return ex, ey, ez, through


# --------------------------------------------------------------------------------------------
# writing


def _suffix_of(path: Path, allowed: Sequence[str]) -> str | None:
    low = path.name.lower()
    for s in sorted(allowed, key=len, reverse=True):
        if low.endswith(s):
            return s
    return None


def label_map_suffix(geometry: Geometry, requested: str | None = None) -> str:
    """The file type a label map for an input of ``geometry`` is written as (the CLI and the server alike).

    ``requested`` (a client's ``result_extension``, e.g. the stock MONAILabel Slicer extension's ".nrrd") wins
    when it can hold the geometry; otherwise the input's family: PNG for PNG/JPEG, NIfTI for NIfTI and NRRD
    for NRRD and DICOM. A PNG keeps no spacing or origin, so only a PNG/JPEG input (which has none) gets one.
    """
    if requested is not None:
        req = str(requested).strip().lower()
        req = req if req.startswith(".") else "." + req
        if req in LABEL_MAP_SUFFIXES and (req != ".png" or geometry.kind == "2d"):
            return req
    if geometry.format in ("png", "jpeg") and geometry.kind == "2d":
        return ".png"
    return ".nii.gz" if geometry.format == "nifti" else ".nrrd"


def write_label_map(labels: np.ndarray, geometry: Geometry, path: str | os.PathLike) -> Path:
    """Write integer labels in the input's geometry (.png for 2D; .nii/.nii.gz/.nrrd always).

    ``labels`` is H x W for 2D (1 x H x W accepted) and N x H x W in frame-stack order for cine
    and volumes; it is transposed back to the volume's own axis order before writing.
    """
    path = Path(path)
    suffix = _suffix_of(path, LABEL_MAP_SUFFIXES)
    if suffix is None:
        raise ImageWriteError(f"{path}: label maps are written as "
                              f"{', '.join(LABEL_MAP_SUFFIXES)}")
    arr = np.asarray(labels)
    if arr.dtype == bool:
        arr = arr.astype(np.uint8)
    if not np.issubdtype(arr.dtype, np.integer):
        raise ImageWriteError(f"{path}: labels must be integers, got dtype {arr.dtype}")
    lo, hi = (int(arr.min()), int(arr.max())) if arr.size else (0, 0)
    if lo < 0 or hi > 65535:
        raise ImageWriteError(f"{path}: label values must lie in 0..65535, got {lo}..{hi}")
    arr = _fit_geometry(path, arr.astype(np.uint8 if hi <= 255 else np.uint16), geometry)
    if suffix == ".png":
        if geometry.kind != "2d":
            raise ImageWriteError(f"{path}: PNG holds only 2D label maps; use .nrrd or "
                                  f".nii.gz for {geometry.kind}")
        if arr.dtype != np.uint8:
            raise ImageWriteError(f"{path}: PNG label maps hold values up to 255, got {hi}")
        with atomic_path(path, suffix) as tmp:
            Image.fromarray(arr, mode="L").save(tmp, format="PNG")
        return path
    return _write_sitk(arr, geometry, path, suffix)


def write_image(pixels: np.ndarray, geometry: Geometry, path: str | os.PathLike) -> Path:
    """Write grey uint8 pixels (H x W, or N x H x W frames) as NRRD or NIfTI in ``geometry``.

    For images that must carry their spacing into a viewer (the sample studies: a 2D NRRD loads in Slicer
    as one slice with its spacing, where same-size PNGs in one folder load as one stacked volume)."""
    path = Path(path)
    suffix = _suffix_of(path, (".nrrd", ".nii", ".nii.gz"))
    if suffix is None:
        raise ImageWriteError(f"{path}: images are written as .nrrd, .nii or .nii.gz")
    arr = np.asarray(pixels)
    if arr.dtype != np.uint8:
        raise ImageWriteError(f"{path}: images are written as uint8 grey, got dtype {arr.dtype}")
    return _write_sitk(_fit_geometry(path, arr, geometry), geometry, path, suffix)


def read_label_map(path: str | os.PathLike, geometry: Geometry) -> np.ndarray:
    """A label file (PNG/JPEG, NIfTI, NRRD) as an N x H x W int64 stack in ``geometry``'s frame order.

    The reverse of `write_label_map`, beside it so that the two agree on axis order: a volume sliced along
    another axis is read back through the same transpose. Used where labels come in (datastore uploads,
    training export); a map of another shape than the image's frames is an ImageReadError naming both.
    """
    path = Path(path)
    h, w = geometry.frame_shape
    if path.name.lower().endswith((".png", ".jpg", ".jpeg")):
        with Image.open(path) as im:
            stack = np.asarray(im.convert("L") if im.mode not in ("L", "I", "I;16") else im)[None]
    else:
        import SimpleITK as sitk

        arr = sitk.GetArrayFromImage(sitk.ReadImage(str(path)))
        stack = arr if arr.ndim == 3 else arr[None]
        if geometry.kind != "2d" and geometry.axis != 0:
            stack = stack_from_volume(arr, geometry.axis)
    if stack.shape[1:] != (h, w) or stack.shape[0] != geometry.n_frames:
        raise ImageReadError(f"{path}: label of shape {tuple(stack.shape)} does not match the image "
                             f"({geometry.n_frames} frames of {h}x{w})")
    return np.asarray(stack).astype(np.int64)


def _fit_geometry(path: Path, arr: np.ndarray, geometry: Geometry) -> np.ndarray:
    """``arr`` as the geometry's frame stack (a 2D image may come as 1 x H x W), or ImageWriteError."""
    if geometry.kind == "2d":
        if arr.ndim == 3 and arr.shape[0] == 1:
            arr = arr[0]
        expected = tuple(geometry.shape[:2])
    else:
        expected = (geometry.n_frames,) + geometry.frame_shape
    if tuple(arr.shape) != expected:
        raise ImageWriteError(f"{path}: labels of shape {arr.shape} do not match the "
                              f"{geometry.kind} geometry (expected {expected})")
    return arr


def _write_sitk(arr: np.ndarray, geometry: Geometry, path: Path, suffix: str) -> Path:
    """A frame stack (or 2D array) as NRRD/NIfTI with the geometry's spacing, origin and direction."""
    import SimpleITK as sitk

    vol = arr if geometry.kind == "2d" else _volume_from_stack(arr, geometry.axis)
    img = sitk.GetImageFromArray(np.ascontiguousarray(vol))
    n = geometry.ndim
    img.SetSpacing(tuple(float(v) for v in geometry.spacing[:n]))
    img.SetOrigin(tuple(float(v) for v in geometry.origin[:n]))
    img.SetDirection(tuple(float(v) for v in geometry.direction[:n * n]))
    with atomic_path(path, suffix) as tmp:
        sitk.WriteImage(img, str(tmp), True)
    return path


def ras_to_lps(p: Sequence[float]) -> list[float]:
    """RAS <-> LPS (the same flip both ways)."""
    return [-float(p[0]), -float(p[1]), float(p[2])]


def _vec3(v: Any, what: str) -> list[float]:
    try:
        out = [float(c) for c in v]
    except (TypeError, ValueError) as exc:
        raise MarkupsError(f"{what}: expected 3 numbers, got {v!r}") from exc
    if len(out) != 3 or not all(math.isfinite(c) for c in out):
        raise MarkupsError(f"{what}: expected 3 finite numbers, got {v!r}")
    return out


def _control_point(i: int, label: str, pos: list[float]) -> dict:
    return {"id": str(i + 1), "label": label, "description": "", "associatedNodeID": "",
            "position": pos, "orientation": [-1.0, -0.0, -0.0, -0.0, -1.0, -0.0, 0.0, 0.0, 1.0],
            "selected": True, "locked": False, "visibility": True, "positionStatus": "defined"}


def _markup_to_slicer(m: dict, k: int) -> dict:
    if not isinstance(m, dict):
        raise MarkupsError(f"markup #{k}: expected a dict, got {type(m).__name__}")
    mtype = m.get("type")
    if mtype not in ("Fiducial", "Line", "ROI"):
        raise MarkupsError(f"markup #{k}: type must be Fiducial, Line or ROI, got {mtype!r}")
    name = str(m.get("name") or mtype)
    system = str(m.get("coordinate_system") or ("RAS" if "points_ras" in m else "LPS")).upper()
    if system not in ("LPS", "RAS"):
        raise MarkupsError(f"markup {name!r}: coordinate_system must be LPS or RAS")
    conv = ras_to_lps if system == "RAS" else (lambda v: [float(c) for c in v])
    raw = m.get("points_ras" if system == "RAS" else "points_lps", m.get("points", []))
    points = [conv(_vec3(v, f"markup {name!r} point {i}")) for i, v in enumerate(raw or [])]
    labels = list(m.get("point_labels") or [])
    prefix = {"Fiducial": "F", "Line": "L", "ROI": "R"}[mtype]
    out: dict[str, Any] = {
        "type": mtype, "name": name, "coordinateSystem": "LPS", "coordinateUnits": "mm",
        "locked": False, "fixedNumberOfControlPoints": mtype != "Fiducial",
        "labelFormat": "%N-%d",
    }
    measurements: list[dict] = []
    if mtype == "Fiducial":
        if not points:
            raise MarkupsError(f"markup {name!r}: a Fiducial needs at least one point")
    elif mtype == "Line":
        if len(points) != 2:
            raise MarkupsError(f"markup {name!r}: a Line needs exactly 2 points, got "
                               f"{len(points)}")
        length = float(np.linalg.norm(np.subtract(points[1], points[0])))
        measurements.append({"name": "length", "enabled": True, "value": length,
                             "units": "mm", "printFormat": "%-#4.4g%s"})
    else:
        center_raw = m.get(f"center_{system.lower()}", m.get("center"))
        if center_raw is None or m.get("size") is None:
            raise MarkupsError(f"markup {name!r}: an ROI needs 'center' and 'size'")
        center = conv(_vec3(center_raw, f"markup {name!r} center"))
        size = _vec3(m["size"], f"markup {name!r} size")
        if any(s < 0 for s in size):
            raise MarkupsError(f"markup {name!r}: ROI size must not be negative, got {size}")
        orient = np.asarray(m.get("orientation", np.eye(3).ravel()), dtype=np.float64)
        if orient.size != 9:
            raise MarkupsError(f"markup {name!r}: orientation must be 9 numbers (row-major)")
        orient = orient.reshape(3, 3)
        if system == "RAS":
            orient = np.diag([-1.0, -1.0, 1.0]) @ orient
        out.update({"roiType": "Box", "center": center,
                    "orientation": [float(v) for v in orient.ravel()], "size": size,
                    "insideOut": False})
        points = [center]
    out["lastUsedControlPointNumber"] = len(points)
    out["controlPoints"] = [
        _control_point(i, str(labels[i]) if i < len(labels) else f"{prefix}-{i + 1}", pos)
        for i, pos in enumerate(points)]
    out["measurements"] = measurements
    if m.get("description"):
        out["description"] = str(m["description"])
    if m.get("color") is not None:
        color = [float(c) for c in m["color"]]
        out["display"] = {"color": color, "selectedColor": color}
    return out


def write_markups_json(markups: list[dict], path: str | os.PathLike, empty_name: str = "no results") -> Path:
    """Write Slicer markups (.mrk.json, LPS); see `_markup_to_slicer` for the dict keys:
    type, name, points_lps | points_ras (or coordinate_system + points), ROI center/size and
    optional orientation (row-major, columns = box axes), point_labels, description, color.

    Nothing to write becomes one point list without points named ``empty_name``: Slicer cannot load a
    file whose markups list is empty (measured with slicer-core: "Failed to get markup 0"), and a client
    that loads the reply (the stock MONAILabel extension) would report "nothing found" as a failure."""
    path = Path(path)
    items = [_markup_to_slicer(m, k) for k, m in enumerate(markups)] or [_empty_point_list(empty_name)]
    doc = {"@schema": MARKUPS_SCHEMA, "markups": items}
    return write_text(path, json.dumps(doc, indent=2))


def _empty_point_list(name: str) -> dict:
    return {"type": "Fiducial", "name": str(name), "coordinateSystem": "LPS", "coordinateUnits": "mm",
            "locked": False, "fixedNumberOfControlPoints": False, "labelFormat": "%N-%d",
            "lastUsedControlPointNumber": 0, "controlPoints": [], "measurements": []}


def read_markups_json(path: str | os.PathLike) -> list[dict]:
    """Read a Slicer .mrk.json (LPS or RAS) into dicts with both points_lps and points_ras."""
    path = Path(path)
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise MarkupsError(f"{path}: cannot read markups JSON: {exc}") from exc
    return parse_markups(doc, str(path))


def parse_markups(doc: Any, path: str = "markups") -> list[dict]:
    """A Slicer .mrk.json document (already parsed) -> the dicts `read_markups_json` returns;
    `path` names the source in error messages."""
    if not isinstance(doc, dict) or not isinstance(doc.get("markups"), list):
        raise MarkupsError(f"{path}: no 'markups' list; not a Slicer markups file")
    out = []
    for k, m in enumerate(doc["markups"]):
        if not isinstance(m, dict):
            raise MarkupsError(f"{path}: markup #{k} is a {type(m).__name__}, not a markup object")
        system = str(m.get("coordinateSystem", "LPS")).upper()
        if system not in ("LPS", "RAS"):
            raise MarkupsError(f"{path}: markup #{k} has coordinateSystem {system!r}")
        to_lps = ras_to_lps if system == "RAS" else (lambda v: [float(c) for c in v])
        try:
            cps = [cp for cp in m.get("controlPoints", [])
                   if cp.get("positionStatus", "defined") == "defined"]
            lps = [to_lps(_vec3(cp["position"], f"{path}: markup #{k}")) for cp in cps]
        except (KeyError, TypeError) as exc:
            raise MarkupsError(f"{path}: markup #{k} has a control point without position") \
                from exc
        item: dict[str, Any] = {
            "type": m.get("type"), "name": m.get("name", ""),
            "points_lps": lps, "points_ras": [ras_to_lps(p) for p in lps],
            "point_labels": [cp.get("label", "") for cp in cps],
        }
        if m.get("description"):
            item["description"] = m["description"]
        if item["type"] == "Line" and len(lps) == 2:
            length = next((float(ms["value"]) for ms in m.get("measurements", [])
                           if ms.get("name") == "length" and "value" in ms), None)
            item["length_mm"] = length if length is not None else \
                float(np.linalg.norm(np.subtract(lps[1], lps[0])))
        if item["type"] == "ROI" and "center" in m:
            c = to_lps(_vec3(m["center"], f"{path}: markup #{k} center"))
            try:
                orient = np.asarray(m.get("orientation", np.eye(3).ravel()), dtype=np.float64).reshape(3, 3)
            except (TypeError, ValueError) as exc:
                raise MarkupsError(f"{path}: markup #{k} orientation is not 9 numbers") from exc
            if system == "RAS":
                orient = np.diag([-1.0, -1.0, 1.0]) @ orient
            item.update({"center_lps": c, "center_ras": ras_to_lps(c),
                         "size": _vec3(m.get("size", [0, 0, 0]), f"{path}: markup #{k} size"),
                         "orientation_lps": [float(v) for v in orient.ravel()]})
        out.append(item)
    return out


_PALETTE = [(255, 64, 64), (64, 200, 255), (255, 210, 0), (80, 255, 120), (255, 64, 255),
            (255, 140, 0), (150, 110, 255), (0, 255, 220)]


def write_overlay_png(frame: Frame, masks: list[np.ndarray], path: str | os.PathLike,
                      boxes: Sequence[Sequence[float]] = (),
                      points: Sequence[Sequence[float]] = (),
                      lines: Sequence[Sequence[float]] = ()) -> Path:
    """A quick-look PNG: masks blended in colour, boxes, points and lines drawn on top."""
    path = Path(path)
    base = np.asarray(frame.pixels, dtype=np.float32).copy()
    h, w = base.shape[:2]
    for i, m in enumerate(masks):
        m = np.asarray(m, dtype=bool)
        if m.shape != (h, w):
            raise ImageWriteError(f"{path}: mask {i} has shape {m.shape}, frame is {(h, w)}")
        base[m] = 0.55 * base[m] + 0.45 * np.array(_PALETTE[i % len(_PALETTE)], np.float32)
    im = Image.fromarray(np.clip(base + 0.5, 0, 255).astype(np.uint8), mode="RGB")
    draw = ImageDraw.Draw(im)
    for i, b in enumerate(boxes):
        x1, y1, x2, y2 = (float(v) for v in b)
        draw.rectangle([min(x1, x2), min(y1, y2), max(x1, x2), max(y1, y2)],
                       outline=_PALETTE[i % len(_PALETTE)], width=2)
    for i, ln in enumerate(lines):
        x1, y1, x2, y2 = (float(v) for v in ln)
        draw.line([x1, y1, x2, y2], fill=_PALETTE[(i + 2) % len(_PALETTE)], width=2)
    for i, pt in enumerate(points):
        x, y = float(pt[0]), float(pt[1])
        r = max(2.0, min(h, w) / 80)
        draw.ellipse([x - r, y - r, x + r, y + r], fill=_PALETTE[(i + 3) % len(_PALETTE)])
    with atomic_path(path, ".png") as tmp:
        im.save(tmp, format="PNG")
    return path
