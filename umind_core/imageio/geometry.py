"""Geometry: where a study's pixels lie in space (LPS mm), and the frame <-> volume axis order.

`Frame`, `Geometry` and `Study` are what every reader returns and every writer takes. The axis rules
(which ITK axes a frame's columns and rows run along, which one is normal to the frames, how a volume is
sliced into a frame stack and back) are decided here, once, for the readers, the writers and the server.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Sequence

import numpy as np

__all__ = ["Frame", "Geometry", "Study", "Length", "line_length", "frame_spacing", "frame_itk_axes",
           "frame_normal_axis", "stack_from_volume", "pixel_to_physical", "physical_to_pixel", "frame_axes_lps",
           "ras_to_lps", "with_frame_spacing"]

#: where a study's calibrated spacing came from (`Study.spacing_source`)
HEADER, ULTRASOUND_REGIONS = "header", "ultrasound_regions"


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

    def __post_init__(self):
        """A spacing that is not a usable length (0, negative, NaN, inf, 1e308) is unknown, whatever the file said:
        lengths are then in pixels and say so, and no NaN or inf reaches a reply (they gave 500s)."""
        if not usable_spacing(self.spacing):
            self.spacing = tuple(float(v) if usable_spacing((v,)) else 1.0 for v in self.spacing)
            self.spacing_known = False

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

    @property
    def spacing_source(self) -> str | None:
        """Where the calibrated spacing came from: "ultrasound_regions" (a DICOM's SequenceOfUltrasoundRegions,
        which ITK and Slicer do not read), "header" (PixelSpacing, a NIfTI/NRRD header), or None (no calibration:
        lengths are in pixels)."""
        if not self.geometry.spacing_known:
            return None
        return ULTRASOUND_REGIONS if self.meta.get("spacing_source") == "SequenceOfUltrasoundRegions" else HEADER

    @property
    def calibration_hidden(self) -> bool:
        """True when the calibrated in-plane spacing is not what a viewer reading the file finds (ITK ignores
        ultrasound regions): such a file opened in Slicer measures in its own units, not in ours."""
        if not self.geometry.spacing_known:
            return False
        return not _same_spacing(frame_spacing(self.viewer_geometry), frame_spacing(self.geometry))

    def output_geometry(self, calibrate: bool = True) -> Geometry:
        """The geometry files for a viewer (label maps, markups) are written in.

        Where the viewer places the image (`viewer_geometry`), with the calibrated in-plane spacing when
        ``calibrate`` and the study is calibrated: then a line's length from the file's coordinates is the length
        the results state. When the calibration is hidden from the viewer, whoever writes in this geometry must
        also give the viewer the image in it (`umind infer` writes the image as NRRD beside its outputs; the UMind
        Slicer module sets its volume's spacing from the reply's `geometry`). ``calibrate=False`` is for a client
        that loads the file itself and cannot be told a spacing (the stock MONAILabel extension): its files lie
        where it shows the image, and lengths in them are in its units."""
        viewer = self.viewer_geometry
        if not self.geometry.spacing_known or (not calibrate and self.calibration_hidden):
            return viewer
        return with_frame_spacing(viewer, frame_spacing(self.geometry))


#: the largest pixel spacing taken as a calibration, in mm (ultrasound's are 0.03-1 mm; a metre a pixel is no scan)
MAX_SPACING_MM = 1000.0


def usable_spacing(values: Sequence[float] | None) -> bool:
    """True when every value is a finite length in (0, MAX_SPACING_MM] mm: the one rule for "spacing is known"."""
    if values is None:
        return False
    try:
        return all(math.isfinite(float(v)) and 0.0 < float(v) <= MAX_SPACING_MM for v in values)
    except (TypeError, ValueError):
        return False


def frame_spacing(geometry: Geometry) -> tuple[float, float]:
    """In-plane (column, row) spacing of the frames made from ``geometry``."""
    s = geometry.spacing
    if geometry.kind == "2d":
        return float(s[0]), float(s[1])
    col, row = frame_itk_axes(geometry.axis)
    return float(s[col]), float(s[row])


def with_frame_spacing(geometry: Geometry, spacing: Sequence[float]) -> Geometry:
    """``geometry`` with the in-plane (column, row) spacing of its frames replaced, marked calibrated (unchanged
    when `spacing` is not usable)."""
    if not usable_spacing(spacing):
        return geometry
    full = list(geometry.spacing)
    if geometry.kind == "2d":
        full[0], full[1] = float(spacing[0]), float(spacing[1])
    else:
        col, row = frame_itk_axes(geometry.axis)
        full[col], full[row] = float(spacing[0]), float(spacing[1])
    return replace(geometry, spacing=tuple(full), spacing_known=True)


def _same_spacing(a: Sequence[float], b: Sequence[float]) -> bool:
    return all(math.isclose(float(x), float(y), rel_tol=1e-6, abs_tol=1e-9) for x, y in zip(a, b))


@dataclass(frozen=True)
class Length:
    """A length UMind reports, with its unit: "mm" on a calibrated image, "px" on one without spacing."""

    value: float
    unit: str

    @property
    def mm(self) -> float | None:
        return self.value if self.unit == "mm" else None

    def __str__(self) -> str:
        """How answers state it: to 0.01, so the text agrees with results.json and markups to 0.01 mm."""
        return f"{self.value:.2f} {self.unit}"


def line_length(line: Sequence[float], spacing: Sequence[float] | None) -> Length:
    """THE length of a drawn line: every length UMind reports (answer text, results.json, markups, server
    replies) comes from here, so that no two places can disagree.

    ``line`` is (x1, y1, x2, y2) in frame pixels; ``spacing`` the frame's calibrated (column, row) spacing in mm,
    as `frame_spacing` and `Frame.spacing` give it, or None for an image without calibration. x runs along
    columns and takes the column spacing, y along rows and takes the row spacing (they differ on non-square
    pixels). Without spacing the length is in pixels and says so: a pixel count is never reported as mm.
    """
    x1, y1, x2, y2 = (float(v) for v in line)
    if spacing is None or not usable_spacing(spacing):
        return Length(math.hypot(x2 - x1, y2 - y1), "px")
    col, row = float(spacing[0]), float(spacing[1])
    return Length(math.hypot((x2 - x1) * col, (y2 - y1) * row), "mm")


def frame_itk_axes(axis: int) -> tuple[int, int]:
    """ITK axes (0=x, 1=y, 2=z) that a frame's columns and rows run along."""
    return {0: (0, 1), 1: (0, 2), 2: (1, 2)}[axis]


def frame_normal_axis(axis: int) -> int:
    """The ITK axis normal to the frames of a volume sliced along numpy ``axis``: the one frame indices count."""
    col, row = frame_itk_axes(axis)
    return 3 - col - row


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


def _itk_index(geometry: Geometry, frame_index: float, x: float, y: float) -> np.ndarray:
    col, row = frame_itk_axes(geometry.axis)
    idx = np.zeros(3)
    idx[col], idx[row] = x, y
    idx[frame_normal_axis(geometry.axis)] = frame_index
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
    f = float(ijk[frame_normal_axis(geometry.axis)]) if frame_index is None else float(frame_index)
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
        ex, ey = d[:, col].copy(), d[:, row].copy()
        through = float(spacing[frame_normal_axis(geometry.axis)])
    ex /= np.linalg.norm(ex)
    ey /= np.linalg.norm(ey)
    ez = np.cross(ex, ey)
    ez /= np.linalg.norm(ez)
    return ex, ey, ez, through


def ras_to_lps(p: Sequence[float]) -> list[float]:
    """RAS <-> LPS (the same flip both ways)."""
    return [-float(p[0]), -float(p[1]), float(p[2])]
