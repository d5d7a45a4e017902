"""Masks -> one label map, and a label map -> masks, by one rule: the painter every label map of UMind is made with.

The rule: a name keeps one value (1, 2, ... in the order names first appear); where masks overlap, the smaller
mask keeps its pixels (at equal size the later one); the map is uint8 while its values fit and uint16 from the
first value past 255. `Result.label_map` (one frame), `outputs.label_stack` (every frame of an input, the files
the CLI and the server write) and the benchmark's annotator paint with `LabelPainter`, so a label value means the
same name in the model's answer, the files Slicer loads and the corrections that come back. They used to paint
each on their own, and a fix to one (uint16 past 255 labels) reached only that one.

Why the smaller mask wins: an organ's mask holds its lesions (the thyroid gland includes its nodule, as the
generator and every training manifest draw it), and one value per pixel cannot hold both. With "later paints
over", a gland answered after its nodule erased the nodule from the label map a user sees, and the annotation
loop's corrections taught no thyroid nodule at all (every thyroid label of the loop benchmark). The smaller
structure on top keeps both visible; `unpainted` gives the organ its covered pixels back when a label map
becomes training masks again.

The Slicer module cannot import umind_core inside Slicer; its copy (``UMindLib/painter.py``, which paints the
user's segments for submission) is held to this rule on a table of cases by tests/test_one_owner.py.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["LabelPainter", "unpainted"]


class LabelPainter:
    """One label map of ``shape`` painted mask by mask; nothing is allocated until the first mask (or `labels`).

    ``values`` maps each name to its value, in order of first appearance; ``array`` is None until then.
    """

    def __init__(self, shape: Sequence[int]):
        self.shape = tuple(int(s) for s in shape)
        self.values: dict[str, int] = {}
        self.array: np.ndarray | None = None
        #: index of the map (a frame, or ()) -> value -> the largest mask area painted with it there
        self._areas: dict[object, dict[int, int]] = {}

    def value(self, name: str) -> int:
        """The value of ``name``: the one it was given, or the next one when it first appears."""
        return self.values.setdefault(name, len(self.values) + 1)

    def paint(self, name: str, mask: np.ndarray, index: int | tuple = ()) -> int:
        """Paint ``mask`` (bool, or nonzero = inside) with the value of ``name`` at ``index`` of the map (a frame of
        a stack; () = the whole map); the value it was painted with."""
        value = self.value(name)
        labels = self.labels()
        if value > 255 and labels.dtype == np.uint8:
            self.array = labels = labels.astype(np.uint16)
        mask = np.asarray(mask)
        inside = mask if mask.dtype == bool else mask != 0
        area = int(inside.sum())
        target = labels[index]
        areas = self._areas.setdefault(index, {})
        smaller = [other for other, other_area in areas.items() if other != value and other_area < area]
        if smaller:  # smaller structures already painted keep their pixels
            now = target[inside]
            target[inside] = np.where(np.isin(now, smaller), now, value)
        else:
            target[inside] = value
        areas[value] = max(areas.get(value, 0), area)
        return value

    def labels(self) -> np.ndarray:
        """The map as painted so far: zeros (uint8) before the first mask."""
        if self.array is None:
            self.array = np.zeros(self.shape, dtype=np.uint8)
        return self.array


def unpainted(labels: np.ndarray, value: int) -> np.ndarray:
    """The mask of `value` in a 2-D label map, with the pixels a smaller structure inside it was painted over.

    The painter's rule run backwards: a hole of the mask that other labels cover completely is a structure lying
    inside this one (a nodule in its gland), so it belongs to this mask too; a hole with any background in it (a
    ring drawn around something) stays a hole."""
    from scipy import ndimage

    mask = labels == value
    holes = ndimage.binary_fill_holes(mask) & ~mask
    if not holes.any():
        return mask
    parts, n = ndimage.label(holes)
    covered = labels != 0
    for k in range(1, n + 1):
        part = parts == k
        if covered[part].all():
            mask |= part
    return mask
