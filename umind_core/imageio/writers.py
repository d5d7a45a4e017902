"""Writers: label maps and images in the input's geometry, and `read_label_map`, the writer's reverse, beside it
so that the two agree on axis order. Every file goes through `umind_core.atomic`."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

import numpy as np
from PIL import Image

from ..atomic import atomic_path
from .errors import ImageReadError, ImageWriteError
from .geometry import Geometry, _volume_from_stack, stack_from_volume

__all__ = ["LABEL_MAP_SUFFIXES", "label_map_suffix", "write_label_map", "write_image", "read_label_map"]

LABEL_MAP_SUFFIXES: tuple[str, ...] = (".png", ".nii", ".nii.gz", ".nrrd")


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
    """Write uint8 pixels (H x W, or N x H x W frames; grey, or RGB with a last axis of 3) as NRRD or NIfTI in
    ``geometry``.

    For images that must carry their spacing into a viewer (the sample studies: a 2D NRRD loads in Slicer
    as one slice with its spacing, where same-size PNGs in one folder load as one stacked volume; a DICOM
    whose spacing is only in its ultrasound regions, which Slicer would load at 1 mm per pixel)."""
    path = Path(path)
    suffix = _suffix_of(path, (".nrrd", ".nii", ".nii.gz"))
    if suffix is None:
        raise ImageWriteError(f"{path}: images are written as .nrrd, .nii or .nii.gz")
    arr = np.asarray(pixels)
    if arr.dtype != np.uint8:
        raise ImageWriteError(f"{path}: images are written as uint8 grey or RGB, got dtype {arr.dtype}")
    if geometry.kind == "2d" and arr.ndim == 4 and arr.shape[0] == 1:
        arr = arr[0]
    if arr.ndim == geometry.ndim + 1 and arr.shape[-1] == 3:  # RGB: the check is on one channel's shape
        _fit_geometry(path, arr[..., 0], geometry)
        return _write_sitk(arr, geometry, path, suffix, vector=True)
    return _write_sitk(_fit_geometry(path, arr, geometry), geometry, path, suffix)


def read_label_map(path: str | os.PathLike, geometry: Geometry) -> np.ndarray:
    """A label file (PNG/JPEG, NIfTI, NRRD) as an N x H x W int64 stack in ``geometry``'s frame order.

    The reverse of `write_label_map`, beside it so that the two agree on axis order: a volume sliced along
    another axis is read back through the same transpose. Used where labels come in (datastore uploads,
    training export); a map of another shape than the image's frames is an ImageReadError naming both.
    """
    from .opening import checked_format, sitk_reader

    path = Path(path)
    h, w = geometry.frame_shape
    fmt = checked_format(path)
    if fmt in ("png", "jpeg"):
        with Image.open(path) as im:
            stack = np.asarray(im.convert("L") if im.mode not in ("L", "I", "I;16") else im)[None]
    elif fmt == "dicom":
        raise ImageReadError(f"{path}: a label map is PNG, NIfTI or NRRD, not DICOM")
    else:
        import SimpleITK as sitk

        arr = sitk.GetArrayFromImage(sitk_reader(path, fmt).Execute())
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


def _write_sitk(arr: np.ndarray, geometry: Geometry, path: Path, suffix: str, vector: bool = False) -> Path:
    """A frame stack (or 2D array; ``vector``: with a last axis of components) as NRRD/NIfTI with the geometry's
    spacing, origin and direction."""
    import SimpleITK as sitk

    vol = arr if geometry.kind == "2d" else _volume_from_stack(arr, geometry.axis)
    img = sitk.GetImageFromArray(np.ascontiguousarray(vol), isVector=vector)
    n = geometry.ndim
    img.SetSpacing(tuple(float(v) for v in geometry.spacing[:n]))
    img.SetOrigin(tuple(float(v) for v in geometry.origin[:n]))
    img.SetDirection(tuple(float(v) for v in geometry.direction[:n * n]))
    with atomic_path(path, suffix) as tmp:
        sitk.WriteImage(img, str(tmp), True)
    return path
