"""An organ's landmarks and its length read off its mask: the kidney's poles and length, the fetal head's BPD.

Why one owner: the generator draws these organs as ellipses and places the landmarks at the ends of one of their
axes (the kidney's poles at the ends of its long axis, the fetal head's BPD across its short axis, outer to outer), and
the Predictor reads them off the mask the model segments through the ellipse of the same second moments (`ellipse_axes`:
the way head circumference is measured on an ellipse fitted to the skull). On the generator's own masks the fit finds
its points to 0.2 px; the farthest-apart rim pixels that size a lesion (`calipers.lesion_axes`) missed a fetal head's
BPD endpoints by up to 10 px, because the long axis of a near-round outline is ill-defined. On 200 held-out images per
look, points read off demo model 3's masks this way missed by 1.1% and 2.2% of the image width where the points it
writes as digits missed by 4.5% and 4.9% (benchmarks/results/NOTES.md). The names below are the ones the generator
writes, so a point read off a mask is scored against the landmark of the same name.

Head circumference (HC) is the perimeter of the same ellipse (Ramanujan's approximation, `ramanujan_perimeter`) and
OFD its long axis, as sonographers and the HC18 challenge measure them on an ellipse fitted to the skull: on the 704
HC18 training images the filled annotation's moment ellipse agrees with the sonographer's HC to about 1 mm. Their mm
come from the lengths' one owner (`imageio.line_length`), so a perimeter is in mm exactly where a line would be and in
pixels, said so, without a calibrated spacing. A viewer shows the same ellipse as a closed curve through
`OUTLINE_POINTS` points of it (`ellipse_outline`), whose stated length is that perimeter.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from .calipers import AXES, main_component

__all__ = ["MEASURES", "ORGANS", "OUTLINE_POINTS", "PERIMETER", "RECORD_MEASUREMENTS", "OrganAxis",
           "ellipse_axes", "ellipse_outline", "ellipse_perimeter", "landmark_target", "line_target",
           "mask_perimeter", "measure_target", "organ_landmarks", "ramanujan_perimeter"]

Point = tuple[float, float]
Line = tuple[float, float, float, float]


@dataclass(frozen=True)
class OrganAxis:
    """The axis of an organ's outline its two landmarks end and its length measures."""

    label: str                 # the organ as the model names it
    axis: str                  # a key of `calipers.AXES`
    points: tuple[str, str]    # the two landmarks' names, in `order`
    order: int                 # 0: leftmost first (x), 1: nearest the probe first (y)
    line: str                  # the measurement the axis is

    def __post_init__(self) -> None:
        if self.axis not in AXES or self.order not in (0, 1):
            raise ValueError(f"{self.label}: axis must be one of {tuple(AXES)} and order 0 or 1")


#: longitudinal kidney: cranial pole on the image's left; transthalamic head: BPD outer to outer, near side first
ORGANS: dict[str, OrganAxis] = {o.label: o for o in (
    OrganAxis("kidney", "long axis", ("upper pole", "lower pole"), 0, "kidney length"),
    OrganAxis("fetal head", "short axis", ("BPD near", "BPD far"), 1, "BPD"),
)}


#: what a perimeter measurement reads off its organ's ellipse (beside the axes of `calipers.AXES`)
PERIMETER = "perimeter"
#: every measurement read off an organ's mask (lower case) -> (the organ's label, an axis of `calipers.AXES` or
#: PERIMETER): each organ's own line (kidney length, BPD), the fetal head's OFD (its long axis) and HC
MEASURES: dict[str, tuple[str, str]] = {
    **{o.line.lower(): (o.label, o.axis) for o in ORGANS.values()},
    "ofd": ("fetal head", "long axis"), "occipitofrontal diameter": ("fetal head", "long axis"),
    "hc": ("fetal head", PERIMETER), "head circumference": ("fetal head", PERIMETER),
}
#: a record's stored measurement (`annotations.measurements` key, mm) -> the measurement that reads it off a mask:
#: what the evaluation asks for where a record holds the number but no line to compare with
RECORD_MEASUREMENTS: dict[str, str] = {"HC mm": "head circumference"}


def _organ(label: str | None) -> OrganAxis | None:
    return ORGANS.get((label or "").strip().lower())


def ellipse_axes(mask: np.ndarray, spacing: Sequence[float] | None = None) -> tuple[Line, Line]:
    """(long axis, short axis) of the ellipse with the second moments of a drawn mask's main piece
    (`calipers.main_component`), each line through its centre with its left endpoint first, in pixels. A filled
    ellipse of semi-axes a >= b has variances a^2/4 and b^2/4 along its axes, so the fit recovers it exactly.

    With a (column, row) `spacing` the moments are taken in mm, so that on non-square pixels the lines are the axes
    of the ellipse in the body (perpendicular there), not of its image in pixels. ValueError for an empty mask."""
    ys, xs = np.nonzero(main_component(np.asarray(mask, bool)))
    if not len(xs):
        raise ValueError("an empty mask has no axes")
    scale = np.ones(2) if spacing is None else np.asarray([float(spacing[0]), float(spacing[1])])
    pts = np.stack([xs, ys], 1).astype(np.float64) * scale
    centre = pts.mean(0)
    variances, directions = np.linalg.eigh(np.cov(pts.T, bias=True))  # ascending: short axis first
    lines = []
    for k in (1, 0):
        half = 2.0 * math.sqrt(max(float(variances[k]), 0.0)) * directions[:, k]
        p, q = (centre - half) / scale, (centre + half) / scale
        p, q = (p, q) if (p[0], p[1]) <= (q[0], q[1]) else (q, p)
        lines.append((float(p[0]), float(p[1]), float(q[0]), float(q[1])))
    return lines[0], lines[1]


def ramanujan_perimeter(a: float, b: float) -> float:
    """Ramanujan's approximation of the perimeter of an ellipse of semi-axes a and b (as HC is computed from a
    fitted ellipse): within 0.001% of the exact perimeter for any head's shape (b/a above 0.5)."""
    return math.pi * (3 * (a + b) - math.sqrt((3 * a + b) * (a + 3 * b)))


def ellipse_perimeter(axes: Sequence[float], spacing: Sequence[float] | None):
    """The perimeter (`imageio.Length`) of the ellipse whose long and short axes are the 8 numbers `axes` (two lines
    in pixels, as `ellipse_axes` gives them): Ramanujan's from the semi-axes measured by `imageio.line_length`, so in
    mm with a calibrated spacing and in pixels, said so, without one."""
    from ..imageio import Length, line_length

    if len(axes) != 8:
        raise ValueError(f"an ellipse is two axis lines (8 numbers), got {len(axes)}")
    long_axis, short_axis = line_length(axes[:4], spacing), line_length(axes[4:], spacing)
    return Length(ramanujan_perimeter(long_axis.value / 2, short_axis.value / 2), long_axis.unit)


def mask_perimeter(mask: np.ndarray, spacing: Sequence[float] | None):
    """The perimeter (`imageio.Length`) of the ellipse with a drawn mask's second moments: a head circumference read
    off a mask, as the HC18 importer checks its annotations and the benchmarks read masks. ValueError for an empty
    mask."""
    return ellipse_perimeter(sum(ellipse_axes(mask, spacing), ()), spacing)


#: points of an ellipse's closed-curve markup: its polygon's perimeter is within 0.05% of the ellipse's, and Slicer's
#: spline through them within 0.001% (measured with slicer-core on a 40 x 30 mm ellipse)
OUTLINE_POINTS = 64


def ellipse_outline(axes: Sequence[float], n: int = OUTLINE_POINTS) -> list[Point]:
    """``n`` points (x, y) in pixels along the ellipse whose long and short axes are the 8 numbers `axes` (as
    `ellipse_axes` gives them), at equal steps of its parameter from the long axis's second end, so that point 0 and
    point n/2 end the long axis and n/4, 3n/4 the short one.

    Why the parametric form in pixels: centre + cos t * half the long axis + sin t * half the short axis is an affine
    image of a circle, so on non-square pixels too the points lie on the ellipse in the body (mm), whose axes the
    lines are; the closed-curve markup of a head circumference goes through them. ValueError for a bad count."""
    if len(axes) != 8:
        raise ValueError(f"an ellipse is two axis lines (8 numbers), got {len(axes)}")
    if n < 3:
        raise ValueError(f"a closed curve needs at least 3 points, got {n}")
    long_axis, short_axis = np.asarray(axes[:4], np.float64), np.asarray(axes[4:], np.float64)
    centre = (long_axis[:2] + long_axis[2:]) / 2
    u, v = (long_axis[2:] - long_axis[:2]) / 2, (short_axis[2:] - short_axis[:2]) / 2
    t = 2 * np.pi * np.arange(n) / n
    pts = centre + np.cos(t)[:, None] * u + np.sin(t)[:, None] * v
    return [(float(x), float(y)) for x, y in pts]


def organ_landmarks(label: str, mask: np.ndarray) -> list[tuple[str, Point]]:
    """(name, (x, y)) of the organ's two landmarks on a drawn mask (`ellipse_axes`); ValueError for an organ the
    table does not hold or an empty mask."""
    organ = _organ(label)
    if organ is None:
        raise ValueError(f"no landmark rule for {label!r}; rules exist for {', '.join(ORGANS)}")
    line = ellipse_axes(mask)[AXES[organ.axis]]
    ends = sorted(((line[0], line[1]), (line[2], line[3])), key=lambda p: (p[organ.order], p[1 - organ.order]))
    return list(zip(organ.points, ends))


def measure_target(name: str | None) -> tuple[str, str] | None:
    """(the organ's label, what to read off its ellipse: a key of AXES or PERIMETER) of a measurement `MEASURES`
    names ("kidney length", "BPD", "OFD", "head circumference"); None for any other name."""
    return MEASURES.get((name or "").strip().lower())


def line_target(name: str | None) -> tuple[str, str] | None:
    """(the organ's label, its axis: a key of AXES) of an organ measurement that is a line ("kidney length", "BPD",
    "OFD"); None for any other name, a perimeter's included."""
    target = measure_target(name)
    return target if target is not None and target[1] in AXES else None


def landmark_target(label: str | None) -> str | None:
    """The organ's label when its landmarks can be read off its mask, else None."""
    organ = _organ(label)
    return None if organ is None else organ.label
