"""Which format a file is, by its name or by its bytes: the one public rule for both, before any pixel is decoded.

Two questions with two answers, both asked at the server's doors:

* `detect_format(path)`: the format the readers will decode the file as. They pick their decoder by the file's
  name (a suffix-less file is DICOM when it has the DICM preamble), so this is the rule `read_study` follows.
* `sniff_format(path)`: the format the bytes are, whatever the name says. An upload is stored under the
  extension of its content, never of the client's file name, so the datastore's door asks this one.

What a file's header says (`read_header`) is `headers`, above `opening`'s checks, which build on these two.

The server used to import the reader's private format rule and sniff content with a copy of its own; both now
come from here.
"""

from __future__ import annotations

import gzip
import os
from pathlib import Path

from .errors import ImageReadError

__all__ = ["SUPPORTED_SUFFIXES", "CONTENT_FORMATS", "detect_format", "sniff_format"]

SUPPORTED_SUFFIXES: tuple[str, ...] = (
    ".png", ".jpg", ".jpeg", ".dcm", ".dicom", ".nii", ".nii.gz", ".nrrd", ".mha", ".mhd",
)
# .nhdr (a detached NRRD header) is named here only so that its refusal (`opening`) can say what it is; a MetaImage
# (.mha, or .mhd: nnU-Net and CAMUS use them) is read only with its data in the same file (ElementDataFile = LOCAL)
_FORMAT_BY_SUFFIX = {
    ".png": "png", ".jpg": "jpeg", ".jpeg": "jpeg", ".dcm": "dicom", ".dicom": "dicom",
    ".nii": "nifti", ".nii.gz": "nifti", ".nrrd": "nrrd", ".nhdr": "nrrd", ".mha": "metaimage", ".mhd": "metaimage",
}
#: what `sniff_format` may answer (a gzip NIfTI is told apart from a plain one: it is stored as .nii.gz)
CONTENT_FORMATS: tuple[str, ...] = ("png", "jpeg", "dicom", "nifti", "nifti-gz", "nrrd")
_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _dicom_preamble(head: bytes) -> bool:
    """The DICM marker after the 128-byte preamble of a DICOM part-10 file."""
    return len(head) >= 132 and head[128:132] == b"DICM"


def detect_format(path: str | os.PathLike) -> str:
    """'png', 'jpeg', 'dicom', 'nifti', 'nrrd' or 'metaimage' as the readers will decode the file: by its name; a
    file without
    a suffix is DICOM when it carries the DICM preamble (clinics export them so). ImageReadError otherwise."""
    p = Path(path)
    low = p.name.lower()
    for suffix in sorted(_FORMAT_BY_SUFFIX, key=len, reverse=True):
        if low.endswith(suffix):
            return _FORMAT_BY_SUFFIX[suffix]
    if "." not in low or p.suffix == "":
        with open(p, "rb") as fh:
            head = fh.read(132)
        if _dicom_preamble(head):
            return "dicom"
    raise ImageReadError(
        f"{p}: unsupported file type {p.suffix or '(no suffix)'!r}; supported: "
        f"{', '.join(SUPPORTED_SUFFIXES)} or DICOM with a DICM preamble"
    )


def _nifti_header(head: bytes) -> bool:
    return len(head) >= 348 and head[344:348] in (b"n+1\x00", b"ni1\x00", b"n+2\x00")


def sniff_format(path: str | os.PathLike) -> str | None:
    """One of `CONTENT_FORMATS` from the file's first bytes, whatever its name; None if none fits."""
    with open(path, "rb") as fh:
        head = fh.read(540)
    if head.startswith(_PNG_SIGNATURE):
        return "png"
    if head.startswith(b"\xff\xd8\xff"):
        return "jpeg"
    if _dicom_preamble(head):
        return "dicom"
    if head.startswith(b"NRRD000"):
        return "nrrd"
    if _nifti_header(head):
        return "nifti"
    if head.startswith(b"\x1f\x8b"):
        try:
            with gzip.open(path, "rb") as gz:
                inner = gz.read(540)
        except (OSError, EOFError):
            return None
        return "nifti-gz" if _nifti_header(inner) else None
    return None
