"""Readers: PNG/JPEG (Pillow), DICOM (pydicom, GDCM geometry through SimpleITK), NIfTI/NRRD (SimpleITK; a
float NIfTI's NaN values through nibabel, see `_nifti_nan_back`) -> RGB frames + `Geometry`. The conventions they follow are in the package docstring (`umind_core.imageio`)."""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np
from PIL import Image

from .errors import ImageReadError
from .dicom_bounds import check_frames, read_dicom
from .formats import SUPPORTED_SUFFIXES
from .opening import checked_format, decoder_failure, sitk_reader
from .geometry import Frame, Geometry, Study, frame_spacing, stack_from_volume, usable_spacing

__all__ = ["SUPPORTED_SUFFIXES", "MIN_SIDE", "MAX_SIDE", "MAX_PIXELS", "read_study", "read_image"]


MIN_SIDE = 8
MAX_SIDE = 16384
MAX_PIXELS = 100_000_000
_DICOM_UNIT_MM = {3: 10.0}  # PhysicalUnits code 3 = cm; other codes (dB, s, Hz...) are not lengths


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
    fmt = checked_format(p)
    readers = {"png": _read_pil, "jpeg": _read_pil, "dicom": _read_dicom,
               "nifti": _read_sitk, "nrrd": _read_sitk, "metaimage": _read_sitk}
    try:
        stack, geometry, spacing2d, scan_mask, meta = readers[fmt](p, fmt, axis)
    except ImageReadError:
        raise
    except MemoryError:
        raise ImageReadError(f"{name}: not enough memory to read it") from None
    except Exception as exc:  # decoders raise anything from OSError to RuntimeError; their text is not passed on
        raise decoder_failure(name, fmt, exc) from None
    _check_frame_size(name, geometry)
    indices = _select(name, frames, geometry.n_frames)
    if scan_mask is not None:
        scan_mask.setflags(write=False)
    if not geometry.spacing_known or not usable_spacing(spacing2d):
        spacing2d = None  # pixels, said so (Geometry's own rule has already marked it unknown)
    out = [Frame(pixels=np.ascontiguousarray(stack[i]), spacing=spacing2d, index=i,
                 source=name, scan_mask=scan_mask) for i in indices]
    meta.setdefault("n_frames", geometry.n_frames)
    viewer = _dicom_viewer_geometry(p, geometry) if fmt == "dicom" else None
    return Study(path=name, frames=out, geometry=geometry, meta=meta, viewer=viewer)


def read_image(path: str | os.PathLike) -> Frame:
    """The first (or only) frame of a file."""
    return read_study(path, frames=[0]).frames[0]


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


def window_uint8(arr: np.ndarray, name: str) -> np.ndarray:
    """Min-max to uint8 over the whole array, rounded (its maximum is 255); NaN/inf -> finite min; constant ->
    zeros. The one rule for a non-uint8 image: files as they are read, arrays handed to the Predictor."""
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
    try:
        opened = Image.open(p)
    except Image.DecompressionBombError as exc:  # Pillow's own words: the header's pixel count, no file content
        raise ImageReadError(f"{name}: image too large ({exc})") from None
    with opened as im:
        _check_size(name, im.size)
        im.load()
        mode = im.mode
        meta: dict[str, Any] = {"mode": mode, "format": im.format}
        if mode in ("I;16", "I;16B", "I;16L", "I;16N", "I", "F"):
            arr = window_uint8(np.asarray(im), name)
        elif mode in ("L", "1", "LA", "La"):
            arr = np.asarray(im.convert("L"))
        else:  # RGB, RGBA (alpha dropped), P/PA (palette applied), CMYK, YCbCr, ...
            arr = np.asarray(im.convert("RGB"))
    stack = _to_rgb(arr[None])
    geometry = _plain_2d(arr.shape[:2], fmt, None)
    return stack, geometry, None, None, meta


# DICOM -------------------------------------------------------------------------------------


def _read_dicom(p: Path, fmt: str, axis: int | None):
    name = str(p)
    if axis not in (None, 0):
        raise ImageReadError(f"{name}: axis={axis} given for a DICOM image (frames are time)")
    try:
        ds = read_dicom(p, max_pixels=MAX_PIXELS)
    except ImageReadError:
        raise
    except Exception as exc:
        raise ImageReadError(f"{name}: not a readable DICOM file ({type(exc).__name__})") from None
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
    check_frames(ds, name)
    try:
        arr = ds.pixel_array
    except Exception as exc:
        raise ImageReadError(f"{name}: cannot decode DICOM pixel data ({ds.file_meta.get('TransferSyntaxUID', '?')}; "
                             f"{type(exc).__name__}: truncated, corrupt or an unsupported compression)") from None
    colour = spp > 1
    if (n == 1 and arr.ndim == (3 if colour else 2)):
        arr = arr[None]
    if arr.ndim != (4 if colour else 3) or arr.shape[1:3] != (rows, cols):
        raise ImageReadError(f"{name}: DICOM pixel array shape {arr.shape} does not match "
                             f"{n} frame(s) of {rows} x {cols}")

    stack = _dicom_rgb(arr, ds, pi, name)

    spacing, spacing_source, regions = _dicom_spacing(ds)
    scan_mask = _dicom_scan_mask(regions, rows, cols)
    frame_time = ds.get("FrameTime", None)
    meta: dict[str, Any] = {
        "PhotometricInterpretation": pi,
        "TransferSyntaxUID": str(ds.file_meta.get("TransferSyntaxUID", "")),
        "SOPClassUID": str(ds.get("SOPClassUID", "")),
        "Modality": str(ds.get("Modality", "")),
        "Manufacturer": str(ds.get("Manufacturer", "")),
        "BodyPartExamined": str(ds.get("BodyPartExamined", "")),  # an examination's views show one site
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


def _dicom_rgb(arr: np.ndarray, ds, pi: str, name: str) -> np.ndarray:
    """The decoded frames as uint8 RGB by their PhotometricInterpretation: the modality LUT and windowing for grey
    (MONOCHROME1 inverted), the palette, YBR converted; anything else refused by name."""
    from pydicom.pixel_data_handlers.util import (
        apply_color_lut, apply_modality_lut, convert_color_space,
    )

    if pi in ("MONOCHROME1", "MONOCHROME2"):
        rescaled = "RescaleSlope" in ds or "RescaleIntercept" in ds
        grey = apply_modality_lut(arr, ds) if rescaled else arr
        grey = grey if grey.dtype == np.uint8 else window_uint8(grey, name)
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
        ybr = arr if arr.dtype == np.uint8 else window_uint8(arr, name)
        stack = _to_rgb(convert_color_space(ybr, "YBR_FULL", "RGB"))
    elif pi in ("RGB", "YBR_RCT", "YBR_ICT"):
        # JPEG 2000 decoders hand back RGB for the reversible/irreversible colour transforms
        stack = _to_rgb(arr if arr.dtype == np.uint8 else window_uint8(arr, name))
    else:
        raise ImageReadError(f"{name}: unsupported PhotometricInterpretation {pi!r}")
    return stack


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
            "delta_x": _finite(g("PhysicalDeltaX", 0.0)), "delta_y": _finite(g("PhysicalDeltaY", 0.0)),
        })
    return out


def _finite(value) -> float | None:
    """A region's delta as a float, None when it is not a finite number (NaN, inf: they reach replies as meta)."""
    try:
        out = float(value)
    except (TypeError, ValueError):
        return None
    return out if math.isfinite(out) else None


def _dicom_spacing(ds) -> tuple[tuple[float, float] | None, str | None, list[dict]]:
    """PixelSpacing (row, col!) wins; else the first calibrated US region, 2D tissue first."""
    regions = _dicom_regions(ds)
    ps = ds.get("PixelSpacing", None)
    if ps is not None and len(ps) == 2 and usable_spacing(ps):
        return (float(ps[1]), float(ps[0])), "PixelSpacing", regions
    calibrated = [r for r in regions
                  if r["units_x"] in _DICOM_UNIT_MM and r["units_y"] in _DICOM_UNIT_MM
                  and r["delta_x"] is not None and r["delta_y"] is not None
                  and usable_spacing((abs(r["delta_x"]) * _DICOM_UNIT_MM[r["units_x"]],
                                      abs(r["delta_y"]) * _DICOM_UNIT_MM[r["units_y"]]))]
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
    reader = sitk_reader(p, fmt)
    try:
        reader.ReadImageInformation()
    except RuntimeError as exc:
        raise decoder_failure(name, fmt, exc, "header") from None
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
        raise decoder_failure(name, fmt, exc, "pixel data") from None

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
    elif fmt == "nifti":
        arr = _nifti_nan_back(p, arr)
    spacing = tuple(float(v) for v in spacing)
    origin = tuple(float(v) for v in origin)
    direction = tuple(float(v) for v in direction)
    meta = {"sitk": md, "components": ncomp, "pixel_type": str(arr.dtype)}

    if kind == "2d":
        if axis not in (None, 0):
            raise ImageReadError(f"{name}: axis={axis} given for a 2D image")
        stack = _to_rgb(window_uint8(arr, name)[None])
        geometry = Geometry(kind="2d", shape=tuple(arr.shape[:2]), spacing=spacing,
                            origin=origin, direction=direction, axis=0, format=fmt)
        return stack, geometry, (spacing[0], spacing[1]), None, meta
    if kind == "cine" and axis not in (None, 0):
        raise ImageReadError(f"{name}: axis={axis} given for a cine clip (frames are time)")
    ax = 0 if axis is None else int(axis)
    geometry = Geometry(kind=kind, shape=tuple(arr.shape[:3]), spacing=spacing, origin=origin,
                        direction=direction, axis=ax, format=fmt)
    _check_frame_size(name, geometry)
    vol = window_uint8(arr, name)
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
            raise ImageReadError(f"{p}: truncated or corrupt gzip data ({type(exc).__name__})") from None
    else:
        got = p.stat().st_size
    if got < expected:
        raise ImageReadError(f"{p}: truncated NIfTI: {got} of {expected} bytes present")


def _nifti_nan_back(p: Path, arr: np.ndarray) -> np.ndarray:
    """``arr`` (read by ITK) with the NIfTI's stored NaN/inf back in place, read by nibabel.

    ITK's NIfTI reader (niftilib) turns NaN voxels into 0: an all-NaN volume would read as a blank image
    instead of being refused, and NaN voxels would window as 0 instead of the finite minimum (the rule in the
    package docstring). nibabel reads the values as stored; only float data can hold them."""
    import nibabel as nib

    img = nib.load(str(p))
    if img.get_data_dtype().kind != "f":
        return arr
    bad = ~np.isfinite(np.asanyarray(img.dataobj))  # (x, y, z[, t]): the transpose of ITK's array order
    if not bad.any() or bad.size != arr.size:
        return arr
    out = np.array(arr, dtype=arr.dtype if arr.dtype.kind == "f" else np.float32)
    out[bad.T.reshape(out.shape)] = np.nan
    return out
