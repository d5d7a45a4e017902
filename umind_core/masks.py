"""Rules about binary masks that the generator, the importers, training and scoring all apply.

One owner each: before this module the box of a mask was computed by five copies of the same two lines (the
generator, two importers, the conversation builder, the evaluation runner).
"""

from __future__ import annotations

import numpy as np

__all__ = ["mask_box"]


def mask_box(mask: np.ndarray) -> tuple[int, int, int, int]:
    """Inclusive pixel box (x1, y1, x2, y2) of a non-empty 2D mask; ValueError for an empty one (it has no box)."""
    rows, cols = np.flatnonzero(mask.any(axis=1)), np.flatnonzero(mask.any(axis=0))
    if not len(rows):
        raise ValueError("an empty mask has no box")
    return int(cols[0]), int(rows[0]), int(cols[-1]), int(rows[-1])
