"""The project's synthetic ultrasound written as the DICOM US series a PACS holds, for the PACS and OHIF tests.

Each series is one instance, as ultrasound machines send them: a single frame whose spacing is only in the
US regions (cm, as vendors write it; no PixelSpacing), a multi-frame cine clip, a YBR_FULL_422 colour frame and
a palette-colour frame; plus what a PACS also holds and UMind must refuse: a CT series and a US instance without
pixel data. Pixels come from `umind_core.data.synthetic.generate`, so the lesion mask of each frame is known.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from fixtures_imaging import US_IMAGE_STORAGE, US_MULTIFRAME_STORAGE, _dataset, _set_pixels, region, ybr422_bytes

SEED = 1_000_001
SIZE = 256
CINE_FRAMES = 3
CT_IMAGE_STORAGE = "1.2.840.10008.5.1.4.1.1.2"


@dataclass
class PacsStudy:
    name: str                 # SeriesDescription, how the tests find the series in the PACS
    path: Path
    frames: int
    spacing_mm: tuple[float, float] | None  # (column, row) spacing the file declares
    lesion: np.ndarray | None  # boolean mask of the first frame's lesion
    series_uid: str = ""
    study_uid: str = ""


def _sample(k: int = 0):
    from umind_core.data.synthetic import generate

    return generate(seed=SEED + k, site="breast", size=SIZE)


def _regions(spacing_mm: float):
    from pydicom.sequence import Sequence

    cm = spacing_mm / 10.0
    return Sequence([region(0, 0, SIZE - 1, SIZE - 1, cm, cm)])


def _finish(ds, path: Path, name: str, spacing_mm: float | None) -> str:
    ds.SeriesDescription = name
    ds.StudyDescription = f"UMind synthetic {name}"
    ds.PatientName = f"Synthetic^{name.replace(' ', '')}"
    ds.PatientID = f"umind-{name.replace(' ', '-')}"
    if spacing_mm is not None:
        ds.SequenceOfUltrasoundRegions = _regions(spacing_mm)
    ds.save_as(str(path), write_like_original=False)
    return str(ds.SeriesInstanceUID)


def tinted_lut() -> np.ndarray:
    """256 x 3 uint16 palette of a warm grey tint, the kind of colour map scanners store B-mode with (a test of
    decoding odd palettes is in test_imageio; here the image must still look like ultrasound to the model)."""
    i = np.arange(256, dtype=np.float64)
    return np.stack([i, i * 0.92, i * 0.8], -1).round().astype(np.uint16) * 257


def write_pacs_studies(folder: Path) -> dict[str, PacsStudy]:
    """Write every series into `folder`; returns them by name (the series UID filled in)."""
    folder.mkdir(parents=True, exist_ok=True)
    s0 = _sample()
    mm = float(s0.spacing[0])
    lesion = s0.objects[0].mask.astype(bool)
    out: dict[str, PacsStudy] = {}

    def add(name, ds, frames, spacing, mask):
        path = folder / f"{name.replace(' ', '_')}.dcm"
        uid = _finish(ds, path, name, spacing)
        out[name] = PacsStudy(name, path, frames, None if spacing is None else (spacing, spacing), mask, uid,
                              str(ds.StudyInstanceUID))

    ds = _dataset(folder / "x", US_IMAGE_STORAGE)
    _set_pixels(ds, s0.image, "MONOCHROME2")
    add("single frame", ds, 1, mm, lesion)

    clip = np.stack([s0.image] + [_sample(k).image for k in range(1, CINE_FRAMES)])
    ds = _dataset(folder / "x", US_MULTIFRAME_STORAGE)
    _set_pixels(ds, clip, "MONOCHROME2", frames=CINE_FRAMES)
    add("cine", ds, CINE_FRAMES, mm, lesion)

    rgb = np.repeat(s0.image[..., None], 3, axis=-1)
    ds = _dataset(folder / "x", US_IMAGE_STORAGE)
    _set_pixels(ds, rgb, "YBR_FULL_422")
    ds.PixelData = ybr422_bytes(rgb)
    add("ybr colour", ds, 1, mm, lesion)

    ds = _dataset(folder / "x", US_IMAGE_STORAGE)
    _set_pixels(ds, s0.image, "PALETTE COLOR")
    lut = tinted_lut()
    for c, key in enumerate(("Red", "Green", "Blue")):
        setattr(ds, f"{key}PaletteColorLookupTableDescriptor", [256, 0, 16])
        setattr(ds, f"{key}PaletteColorLookupTableData", lut[:, c].astype("<u2").tobytes())
    add("palette colour", ds, 1, mm, lesion)
    return out


def write_refused_series(folder: Path) -> dict[str, str]:
    """A CT series and a US instance without pixel data; returns their series UIDs by name."""
    folder.mkdir(parents=True, exist_ok=True)
    ct = _dataset(folder / "x", CT_IMAGE_STORAGE)
    ct.Modality = "CT"
    _set_pixels(ct, _sample().image, "MONOCHROME2")
    empty = _dataset(folder / "x", US_IMAGE_STORAGE)
    empty.Rows, empty.Columns = SIZE, SIZE
    return {"ct": _finish(ct, folder / "ct.dcm", "ct", None),
            "no pixels": _finish(empty, folder / "no_pixels.dcm", "no pixels", None)}
