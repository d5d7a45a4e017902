"""The module's copy of the server's label-painting rule, for the label map a submission sends.

The owner is ``umind_core/painter.py`` (`LabelPainter`), which the server's label maps are painted with; it cannot
be imported inside Slicer. The rule: a name keeps one value (1, 2, ... in the order names first appear), where
masks overlap the smaller mask keeps its pixels (at equal size the later one: a nodule stays visible inside its
gland), and the map is uint8 while its values fit and uint16 from the first value past 255. So a segment submitted
back has the value the server gave its name. tests/test_one_owner.py holds this copy to the owner on a table of
cases.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

__all__ = ["LabelPainter"]


class LabelPainter:
    """One label map of ``shape`` (numpy order) painted mask by mask; ``values`` = {name: value}."""

    def __init__(self, shape: Sequence[int]):
        self.shape = tuple(int(s) for s in shape)
        self.values: dict[str, int] = {}
        self.array: np.ndarray | None = None
        self._areas: dict = {}  # index -> value -> the largest mask area painted with it there

    def value(self, name: str) -> int:
        """The value of ``name``: the one it was given, or the next one when it first appears."""
        return self.values.setdefault(name, len(self.values) + 1)

    def paint(self, name: str, mask: np.ndarray, index: int | tuple = ()) -> int:
        """Paint ``mask`` (bool, or nonzero = inside) with the value of ``name`` at ``index`` (() = the whole map)."""
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
        if smaller:
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
