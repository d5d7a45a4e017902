"""A lesion's two calipers read off its mask: the rule the synthetic truth and the Predictor's measurements share.

Why one owner: the generator draws each lesion's calipers from its mask (BI-RADS / TI-RADS size: the longest
diameter, then the longest chord perpendicular to it), and the Predictor measures a lesion the same way from the
mask the model segments, which on 200 held-out images of each look cut the error of the line the model draws token
by token by a quarter to a third (benchmarks/results/NOTES.md, the mask readout). Both must apply the same
definition, or a measurement would be judged against a different line than the one it drew.
"""

from __future__ import annotations

import numpy as np

from ..masks import blobs

__all__ = ["AXES", "caliper_target", "lesion_axes", "main_component", "mask_axes"]

Line = tuple[float, float, float, float]

#: a caliper's name ends with its axis ("breast lesion long axis"): index into `lesion_axes`' pair
AXES: dict[str, int] = {"long axis": 0, "short axis": 1}


def caliper_target(name: str | None) -> tuple[str, str] | None:
    """(the lesion's label, its axis: a key of AXES) of a caliper name such as "thyroid nodule short axis"; None for
    any other measurement (a kidney length, a BPD), whose line is not a lesion's diameter."""
    words = (name or "").strip()
    for axis in AXES:
        if words.lower().endswith(" " + axis):
            label = words[: -len(axis) - 1].strip()
            return (label, axis) if label else None
    return None


def main_component(mask: np.ndarray) -> np.ndarray:
    """The largest 8-connected piece of a mask (`masks.blobs`): a caliper spans one lesion, never the gap between
    two blobs."""
    pieces = blobs(mask)
    return max(pieces, key=lambda p: int(p.sum())) if len(pieces) > 1 else np.asarray(mask, bool)


def lesion_axes(mask: np.ndarray) -> tuple[Line, Line]:
    """(long axis, short axis) of a non-empty mask in pixel centres, each line's left endpoint first.

    The long axis joins the two rim pixels farthest apart; the short axis is the longest chord across it, between
    two mask pixels on one line perpendicular to the long axis. ValueError for an empty mask."""
    ys, xs = np.nonzero(mask)
    if not len(xs):
        raise ValueError("an empty mask has no calipers")
    pts = np.stack([xs, ys], 1).astype(np.float64)
    m = np.pad(np.asarray(mask, bool), 1)  # a mask on the image's border has its rim there too
    edge = m & ~(np.roll(m, 1, 0) & np.roll(m, -1, 0) & np.roll(m, 1, 1) & np.roll(m, -1, 1))
    ey, ex = np.nonzero(edge[1:-1, 1:-1])
    rim = _extreme(np.stack([ex, ey], 1).astype(np.float64))
    d2 = ((rim[:, None, :] - rim[None, :, :]) ** 2).sum(-1)
    i, j = np.unravel_index(int(np.argmax(d2)), d2.shape)
    a, b = rim[i], rim[j]
    u = (b - a) / max(float(np.hypot(*(b - a))), 1e-9)
    v = np.array([-u[1], u[0]])
    along, across = np.rint((pts - a) @ u).astype(int), (pts - a) @ v
    # per step t along the long axis, the first pixel (in scan order) farthest to either side of it: sorted by
    # (t, across, order) the first of each t is the least across, by (t, -across, order) the greatest
    order = np.arange(len(pts))
    lowest, highest = np.lexsort((order, across, along)), np.lexsort((order, -across, along))
    _, starts = np.unique(along[lowest], return_index=True)
    lo, hi = lowest[starts], highest[starts]
    k = int(np.argmax(across[hi] - across[lo]))  # the widest chord; the first such t on a tie
    return _ordered(a, b), _ordered(pts[lo[k]], pts[hi[k]])


def mask_axes(mask: np.ndarray) -> tuple[Line, Line]:
    """(long axis, short axis) of a drawn mask's main piece (`main_component`); ValueError for an empty mask."""
    return lesion_axes(main_component(np.asarray(mask, bool)))


def _extreme(rim: np.ndarray) -> np.ndarray:
    """The rim points that are corners of its convex hull, in rim order: the two points farthest apart are always
    corners, so the pairwise search needs only these (a whole-frame mask has thousands of rim pixels: their
    distance matrix alone would take hundreds of MB). Keeping rim order picks the same pair as the full search."""
    if len(rim) < 4:
        return rim
    from scipy.spatial import ConvexHull, QhullError

    try:
        return rim[np.sort(ConvexHull(rim).vertices)]
    except QhullError:  # all on one line: no hull to take corners of
        return rim


def _ordered(p: np.ndarray, q: np.ndarray) -> Line:
    p, q = (p, q) if (p[0], p[1]) <= (q[0], q[1]) else (q, p)
    return float(p[0]), float(p[1]), float(q[0]), float(q[1])
