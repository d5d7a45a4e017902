"""A study is one self-contained file: the checks every reader runs before a decoder opens it.

NRRD can name its data elsewhere (`data file: /etc/shadow`, `data file: LIST`, a detached `.nhdr`), and so can a
NIfTI pair (`ni1` magic: the voxels are in a `.img` beside the header); ITK follows those names. With `encoding:
ascii` and a `byte skip`, a decoder's error text quoted an outside file token by token, and with `encoding: raw`
the outside bytes became the study's pixels. So, at the one place a study is opened (`read_study`,
`read_header`, `read_label_map`; the server's doors all call those):

* the bytes must be the format the name says (`sniff_format` agrees with `detect_format`), so a MetaImage or
  Analyze header cannot pose as a `.nrrd` or `.nii`;
* a NRRD header may not name a data file and a `.nhdr` (a detached header) is refused; a NIfTI must be a single
  file (`n+1` / `n+2` magic); a MetaImage (`.mha`, `.mhd`) must be a text header whose `ElementDataFile` is
  `LOCAL` (its data follows the header in the same file): a file name, a `LIST` or a numbered pattern is refused
  as NRRD's `data file` is, and so is a header that does not end in `ElementDataFile` within `MHA_HEADER_MAX`;
* SimpleITK is told which ImageIO to use (`sitk_reader`), so it never picks another one by probing;
* no decoder's text is passed on: `decoder_failure` words a refusal from the exception's type alone.
"""

from __future__ import annotations

import gzip
import os
from pathlib import Path

from .errors import ImageReadError
from .formats import detect_format, sniff_format

__all__ = ["checked_format", "sitk_reader", "decoder_failure", "NRRD_HEADER_MAX", "MHA_HEADER_MAX"]

#: the longest NRRD header read while looking for its end (real headers are a few hundred bytes)
NRRD_HEADER_MAX = 65_536
#: NRRD fields that point at data outside the file (the spec spells it "data file"; ITK also takes "datafile")
_NRRD_ELSEWHERE = {"datafile", "data file"}
_NIFTI_SINGLE = (b"n+1\x00", b"n+2\x00")
_SITK_IO = {"nrrd": "NrrdImageIO", "nifti": "NiftiImageIO", "metaimage": "MetaImageIO"}
#: the longest MetaImage header read while looking for its ElementDataFile line (real headers are a few hundred bytes)
MHA_HEADER_MAX = 65_536
#: what sniff_format answers for each format detect_format names
_CONTENT_OF = {"png": ("png",), "jpeg": ("jpeg",), "dicom": ("dicom",), "nifti": ("nifti", "nifti-gz"),
               "nrrd": ("nrrd",)}


def checked_format(path: str | os.PathLike) -> str:
    """The format `path` is read as, once it is known to be one self-contained file of that format;
    ImageReadError naming the file and the reason otherwise."""
    p = Path(path)
    fmt = detect_format(p)
    if fmt in ("nrrd", "nifti"):  # PNG, JPEG and DICOM carry their pixels themselves; Pillow/pydicom sniff
        content = sniff_format(p)
        if content not in _CONTENT_OF[fmt]:
            raise ImageReadError(f"{p}: the file is named {fmt} but its content is "
                                 f"{content or 'no supported format'}")
    if fmt == "nrrd":
        _check_nrrd(p)
    elif fmt == "nifti":
        _check_nifti(p)
    elif fmt == "metaimage":
        _check_metaimage(p)
    return fmt


def _check_metaimage(p: Path) -> None:
    """A MetaImage is ``Key = Value`` text lines ending with ``ElementDataFile``; only LOCAL (data after the header,
    in this file) is read. ITK would follow any other value: a path, ``LIST`` and the files after it, or a
    ``name%03d.raw 1 9 1`` pattern."""
    content = sniff_format(p)
    if content is not None:
        raise ImageReadError(f"{p}: the file is named metaimage but its content is {content}")
    with open(p, "rb") as fh:
        head = fh.read(MHA_HEADER_MAX + 1)
    for raw in head.split(b"\n")[:-1]:
        key, sep, value = raw.rstrip(b"\r").partition(b"=")
        if not sep:
            if raw.strip():
                raise ImageReadError(f"{p}: not a MetaImage header (a line that is not 'Key = Value')")
            continue
        if key.strip().lower() == b"elementdatafile":
            if value.strip().upper() != b"LOCAL":
                raise ImageReadError(f"{p}: the MetaImage header names a separate data file (ElementDataFile is not "
                                     "LOCAL); only self-contained .mha/.mhd files (data after the header) are read")
            return
    raise ImageReadError(f"{p}: MetaImage header has no ElementDataFile line within {MHA_HEADER_MAX:,} bytes")


def _check_nrrd(p: Path) -> None:
    if p.name.lower().endswith(".nhdr"):
        raise ImageReadError(f"{p}: a detached NRRD header (.nhdr) names its data in another file; only "
                             "self-contained .nrrd files are read")
    with open(p, "rb") as fh:
        head = fh.read(NRRD_HEADER_MAX + 1)
    end = _nrrd_header_end(head)
    if end < 0:
        raise ImageReadError(f"{p}: NRRD header has no end within {NRRD_HEADER_MAX:,} bytes (or no data follows it)")
    for raw in head[:end].split(b"\n")[1:]:
        line = raw.rstrip(b"\r")
        if line.startswith(b"#") or b":" not in line:
            continue
        key = line.split(b":", 1)[0].strip().lower().decode("latin-1")
        if key in _NRRD_ELSEWHERE or key.replace(" ", "") in _NRRD_ELSEWHERE:
            raise ImageReadError(f"{p}: the NRRD header names a separate data file; only self-contained NRRD "
                                 "files (data after the header) are read")


def _nrrd_header_end(head: bytes) -> int:
    """Offset of the blank line that ends a NRRD header (LF or CRLF), or -1."""
    ends = [i for i in (head.find(b"\n\n"), head.find(b"\r\n\r\n")) if i >= 0]
    return min(ends) if ends else -1


def _check_nifti(p: Path) -> None:
    if p.name.lower().endswith(".gz"):
        try:
            with gzip.open(p, "rb") as gz:
                head = gz.read(348)
        except (OSError, EOFError):
            raise ImageReadError(f"{p}: not a readable gzip file") from None
    else:
        with open(p, "rb") as fh:
            head = fh.read(348)
    if head[344:348] not in _NIFTI_SINGLE:
        raise ImageReadError(f"{p}: a NIfTI header whose voxels are in a separate file (.hdr/.img pair); only "
                             "single-file .nii / .nii.gz are read")


def sitk_reader(path: str | os.PathLike, fmt: str):
    """A SimpleITK ImageFileReader on `path` pinned to the ImageIO of `fmt` (it does not probe for another)."""
    import SimpleITK as sitk

    reader = sitk.ImageFileReader()
    reader.SetFileName(str(path))
    if fmt in _SITK_IO:
        reader.SetImageIO(_SITK_IO[fmt])
    return reader


def decoder_failure(path: str | os.PathLike, fmt: str, exc: BaseException, what: str = "data") -> ImageReadError:
    """The refusal for a decoder's exception. Its text is not passed on: decoders quote the bytes they read (an
    outside file's, once), and ITK's messages carry build paths; the type is enough to tell errors apart."""
    return ImageReadError(f"{path}: cannot read {fmt} {what} ({type(exc).__name__}; the file is corrupt, "
                          "truncated or of an unsupported kind)")
