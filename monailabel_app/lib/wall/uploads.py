"""Uploads are checked at the door: an image must decode, a label must fit its image, both by content.

MONAI Label stores whatever arrives under the extension of the client's file name, so random bytes, a
`.py` file or a 10x10 label for a 256x256 image were stored and counted for retraining, and failed only in
the training run an hour later. Here the format is sniffed from the bytes (`umind_core.imageio.sniff_format`,
re-exported here; the stored extension follows the content, never the name), images are decoded with the same
reader inference uses, and labels are read with `imageio.read_label_map`, the reader beside the label-map
writer that training's export also uses, so what passes the door is what training can read.
Every refusal is an `UploadError` (400) whose message names the id, not the temp file.
"""

from __future__ import annotations

import os
import shutil
import tempfile

import numpy as np

from umind_core.imageio import sniff_format

from .errors import BadRequest
from .image_end import trailing_problem

__all__ = ["UploadError", "sniff_format", "check_image_upload", "check_label_upload", "IMAGE_FORMATS",
           "LABEL_FORMATS", "scratch_dir"]

#: format -> the extension the datastore stores it under
IMAGE_FORMATS = {"png": ".png", "jpeg": ".jpg", "dicom": ".dcm", "nifti": ".nii", "nifti-gz": ".nii.gz",
                 "nrrd": ".nrrd"}
LABEL_FORMATS = {"png": ".png", "nifti": ".nii", "nifti-gz": ".nii.gz", "nrrd": ".nrrd"}
_LABEL_MAX = 65535


class UploadError(BadRequest):
    """An uploaded image or label that cannot be used; answered 400."""


def _renamed(path: str | os.PathLike, suffix: str, tmp_dir: str) -> str:
    """A copy of `path` under `suffix` (the readers pick their decoder by suffix)."""
    out = os.path.join(tmp_dir, "upload" + suffix)
    shutil.copyfile(path, out)
    return out


def _first_line(exc: BaseException, hide: dict[str, str]) -> str:
    """The exception's first line with server paths replaced by what the client knows them as."""
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    for path, shown in hide.items():
        text = text.replace(path, shown)
    return text


def _within_budget(copy: str, caps, what: str) -> None:
    """The pixel cap and decode budget from the header (lib/wall/caps.py), before anything is decoded."""
    if caps is None:
        return
    from .caps import check_image_budget

    try:
        check_image_budget(copy, caps)
    except Exception as exc:  # over a cap, or a header no reader understands
        raise UploadError(f"{what}: {_first_line(exc, {copy: 'the upload'})}") from None


def check_image_upload(path: str | os.PathLike, image_id: str, tmp_dir: str, caps=None) -> str:
    """The checked upload as a file under its content's extension (in `tmp_dir`); UploadError if it does not
    decode, is over the caps of `caps` (the app's AppConfig; checked from the header first) or carries bytes
    after the end of its image."""
    from umind_core.imageio import read_study

    fmt = sniff_format(path) if os.path.getsize(path) else None
    if fmt is None:
        raise UploadError(f"image {image_id!r}: the upload is not a PNG, JPEG, DICOM, NIfTI or NRRD image "
                          "(checked by content, not by file name)")
    copy = _renamed(path, IMAGE_FORMATS[fmt], tmp_dir)
    _within_budget(copy, caps, f"image {image_id!r}")
    trailing = trailing_problem(copy, fmt)
    if trailing:
        raise UploadError(f"image {image_id!r}: {trailing}")
    try:
        read_study(copy)
    except Exception as exc:  # any decoder failure is the upload's fault
        why = _first_line(exc, {copy: "the upload"})
        raise UploadError(f"image {image_id!r}: the {fmt} upload does not decode: {why}") from None
    return copy


def _integer_pixels(path: str, fmt: str) -> None:
    """Refuse label files whose pixel type is not integral (a float map whose values are all integers passes)."""
    if fmt == "png":
        from PIL import Image

        with Image.open(path) as im:
            if im.mode not in ("1", "L", "P", "I", "I;16", "I;16B", "I;16L"):
                raise UploadError(f"a PNG label map must be single-channel integers, got mode {im.mode}")
        return
    import SimpleITK as sitk

    from umind_core.imageio import sitk_reader

    reader = sitk_reader(path, fmt)  # pinned to the format's ImageIO, as every study read is (imageio.opening)
    reader.ReadImageInformation()
    if reader.GetNumberOfComponents() != 1:
        raise UploadError(f"a label map must have one component per voxel, got {reader.GetNumberOfComponents()}")
    if "float" in sitk.GetPixelIDValueAsString(reader.GetPixelIDValue()).lower():
        arr = sitk.GetArrayFromImage(reader.Execute())  # a copy: a view would outlive its image
        if not np.all(np.isfinite(arr)) or not np.all(arr == np.round(arr)):
            raise UploadError("label values must be integers (the upload holds fractional values)")


def check_label_upload(path: str | os.PathLike, image_path: str, image_id: str, tmp_dir: str, caps=None) -> str:
    """The checked label under its content's extension; UploadError unless it is an integer map fitting the image
    (and within the caps of `caps`, checked from the header before decoding)."""
    from umind_core.imageio import read_label_map, read_study

    fmt = sniff_format(path) if os.path.getsize(path) else None
    if fmt is None and _is_markups_json(path):
        raise UploadError(f"label for {image_id!r}: the upload is Slicer markups JSON (the MONAILabel extension "
                          "sends its ROIs as the label while a detection model is selected), not a label map; "
                          "select umind_segment before Submit Label, or save boxes with the UMind module")
    if fmt not in LABEL_FORMATS:
        raise UploadError(f"label for {image_id!r}: the upload is not a label map (PNG, NIfTI or NRRD, checked "
                          f"by content){'' if fmt is None else f'; got {fmt}'}")
    copy = _renamed(path, LABEL_FORMATS[fmt], tmp_dir)
    _within_budget(copy, caps, f"label for {image_id!r}")
    try:
        _integer_pixels(copy, fmt)
        study = read_study(image_path)
        stack = read_label_map(copy, study.geometry)
    except UploadError as exc:
        raise UploadError(f"label for {image_id!r}: {exc}") from None
    except Exception as exc:
        raise UploadError(f"label for {image_id!r} does not fit the image: "
                          f"{_first_line(exc, {copy: 'the upload', image_path: repr(image_id)})}") from None
    lo, hi = (int(stack.min()), int(stack.max())) if stack.size else (0, 0)
    if lo < 0 or hi > _LABEL_MAX:
        raise UploadError(f"label for {image_id!r}: values must lie in 0..{_LABEL_MAX}, got {lo}..{hi}")
    return copy


def _is_markups_json(path: str | os.PathLike) -> bool:
    """A small JSON document with a "markups" key (what Slicer's markups storage writes)."""
    import json

    if os.path.getsize(path) > 10_000_000:
        return False
    try:
        with open(path, "rb") as fh:
            doc = json.loads(fh.read())
    except (ValueError, OSError):
        return False
    return isinstance(doc, dict) and "markups" in doc


def scratch_dir() -> str:
    """A private temp folder for one upload check (the caller removes it)."""
    return tempfile.mkdtemp(prefix="umind-upload-")

