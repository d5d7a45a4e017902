"""Coordinate conversions between Slicer's RAS world, a volume's voxel indices and LPS files.

Kept free of VTK so that the arithmetic is testable without a scene: callers hand in 4x4
matrices (numpy arrays, nested lists, or anything with ``GetElement`` such as vtkMatrix4x4).

Conventions (the same as the server's ``umind_core.imageio``): a frame pixel (x, y) is the voxel
index (i, j) = (x, y) of that frame, pixel centres at integers, x along columns, y along rows;
frame k of a multi-frame volume is the voxel index k. Slicer keeps RAS in memory, files keep LPS.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

__all__ = [
    "GeometryError", "as_matrix", "ijk_to_ras_matrix", "ras_to_ijk", "ijk_to_ras",
    "ijk_index", "lps_to_ras", "ras_to_lps", "voxel_spacing", "box_ras_to_ijk_extent",
    "OUTLINE_POINTS", "ellipse_outline",
]

#: points of an ellipse's closed curve (the server's `umind_core.answers.landmarks.OUTLINE_POINTS`)
OUTLINE_POINTS = 64


class GeometryError(ValueError):
    """A matrix, point or extent cannot be used; the message names which and why."""


def as_matrix(m: Any, what: str = "matrix") -> np.ndarray:
    """Any 4x4 (numpy, lists, vtkMatrix4x4) -> float64 numpy array."""
    if hasattr(m, "GetElement"):
        return np.array([[m.GetElement(r, c) for c in range(4)] for r in range(4)], float)
    a = np.asarray(m, dtype=np.float64)
    if a.shape != (4, 4):
        raise GeometryError(f"{what} must be 4x4, got shape {a.shape}")
    if not np.all(np.isfinite(a)):
        raise GeometryError(f"{what} has non-finite entries")
    return a


def ijk_to_ras_matrix(origin: Sequence[float], spacing: Sequence[float],
                      directions: Sequence[Sequence[float]] | None = None) -> np.ndarray:
    """IJK->RAS from origin (RAS), spacing and a 3x3 direction matrix whose COLUMNS are the
    i, j, k axes in RAS (Slicer's IJKToRASDirections layout)."""
    d = np.eye(3) if directions is None else np.asarray(directions, dtype=np.float64)
    s = np.asarray(spacing, dtype=np.float64)
    if d.shape != (3, 3) or s.shape != (3,) or len(origin) != 3:
        raise GeometryError(f"ijk_to_ras_matrix needs origin[3], spacing[3], directions[3x3]; "
                            f"got {len(origin)}, {s.shape}, {d.shape}")
    if np.any(s <= 0):
        raise GeometryError(f"spacing must be positive, got {list(s)}")
    m = np.eye(4)
    m[:3, :3] = d * s[None, :]
    m[:3, 3] = np.asarray(origin, dtype=np.float64)
    return m


def _apply(m: np.ndarray, p: Sequence[float], what: str) -> np.ndarray:
    v = np.asarray(p, dtype=np.float64).reshape(-1)
    if v.shape != (3,) or not np.all(np.isfinite(v)):
        raise GeometryError(f"{what} must be 3 finite numbers, got {list(p)!r}")
    return (m @ np.append(v, 1.0))[:3]


def ras_to_ijk(ras_to_ijk_matrix: Any, ras: Sequence[float]) -> np.ndarray:
    """RAS point -> continuous voxel index (i, j, k)."""
    return _apply(as_matrix(ras_to_ijk_matrix, "RAS->IJK matrix"), ras, "RAS point")


def ijk_to_ras(ijk_to_ras_matrix_: Any, ijk: Sequence[float]) -> np.ndarray:
    """Continuous voxel index -> RAS point."""
    return _apply(as_matrix(ijk_to_ras_matrix_, "IJK->RAS matrix"), ijk, "IJK index")


def ijk_index(ijk: Sequence[float], dims: Sequence[int] | None = None,
              what: str = "point") -> list[int]:
    """Round a continuous index to the voxel that contains it; outside ``dims`` is an error,
    because a click beside the image is a user mistake the server would silently clip."""
    idx = [int(np.floor(float(c) + 0.5)) for c in ijk]
    if dims is not None:
        for axis, (c, n) in enumerate(zip(idx, dims)):
            if not 0 <= c < int(n):
                raise GeometryError(f"{what} at voxel {idx} lies outside the image "
                                    f"(axis {'ijk'[axis]} has 0..{int(n) - 1})")
    return idx


def voxel_spacing(ijk_to_ras_matrix_: Any) -> np.ndarray:
    """Length in mm of one voxel step along i, j, k."""
    m = as_matrix(ijk_to_ras_matrix_, "IJK->RAS matrix")
    return np.linalg.norm(m[:3, :3], axis=0)


def ras_to_lps(p: Sequence[float]) -> list[float]:
    """RAS <-> LPS: negate the first two axes (the flip is its own inverse)."""
    if len(p) != 3:
        raise GeometryError(f"a position needs 3 numbers, got {list(p)!r}")
    return [-float(p[0]), -float(p[1]), float(p[2])]


lps_to_ras = ras_to_lps


def box_ras_to_ijk_extent(ras_to_ijk_matrix: Any, corners_ras: Sequence[Sequence[float]],
                          dims: Sequence[int]) -> list[int]:
    """Corners of a box in RAS -> MONAI Label's ROI [i0, i1, j0, j1, k0, k1] (inclusive voxel
    indices), clipped to the image; a box wholly outside the image is an error."""
    m = as_matrix(ras_to_ijk_matrix, "RAS->IJK matrix")
    pts = np.array([_apply(m, c, "ROI corner") for c in corners_ras])
    lo_c, hi_c = pts.min(axis=0), pts.max(axis=0)
    out: list[int] = []
    for axis in range(3):
        n = int(dims[axis])
        # voxels whose centres lie inside; a box thinner than a voxel keeps the nearest one
        lo, hi = int(np.ceil(lo_c[axis] - 1e-6)), int(np.floor(hi_c[axis] + 1e-6))
        if lo > hi:
            lo = hi = int(np.floor((lo_c[axis] + hi_c[axis]) / 2 + 0.5))
        a, b = max(lo, 0), min(hi, n - 1)
        if a > b:
            raise GeometryError(f"ROI spans voxels {lo}..{hi} on axis "
                                f"{'ijk'[axis]}, outside the image 0..{n - 1}")
        out += [a, b]
    return out


def ellipse_outline(axes: Sequence[float], n: int = OUTLINE_POINTS) -> list[tuple[float, float]]:
    """``n`` pixel points (x, y) along the ellipse whose long and short axes are the 8 numbers ``axes`` (a result's
    ``ellipse``, two lines in pixels), from the long axis's second end at equal steps of its parameter.

    A tested copy of the server's `umind_core.answers.landmarks.ellipse_outline` (umind_core is not installed inside Slicer),
    so that a head circumference's closed curve goes through the points of the server's markups file. The affine image
    of a circle in pixels is the ellipse in mm on non-square pixels too."""
    if len(axes) != 8:
        raise GeometryError(f"an ellipse is two axis lines (8 numbers), got {len(axes)}")
    if n < 3:
        raise GeometryError(f"a closed curve needs at least 3 points, got {n}")
    long_axis, short_axis = np.asarray(axes[:4], np.float64), np.asarray(axes[4:], np.float64)
    centre = (long_axis[:2] + long_axis[2:]) / 2
    u, v = (long_axis[2:] - long_axis[:2]) / 2, (short_axis[2:] - short_axis[:2]) / 2
    t = 2 * np.pi * np.arange(n) / n
    pts = centre + np.cos(t)[:, None] * u + np.sin(t)[:, None] * v
    return [(float(x), float(y)) for x, y in pts]
