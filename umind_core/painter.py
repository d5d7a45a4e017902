"""Masks -> one label map, by one rule: the painter every label map of UMind is made with.

The rule: a name keeps one value (1, 2, ... in the order names first appear), a later mask paints over an earlier
one where they overlap, and the map is uint8 while its values fit and uint16 from the first value past 255.
`Result.label_map` (one frame), `outputs.label_stack` (every frame of an input, the files the CLI and the server
write) and the benchmark's annotator paint with `LabelPainter`, so a label value means the same name in the
model's answer, the files Slicer loads and the corrections that come back. They used to paint each on their own,
and a fix to one (uint16 past 255 labels) reached only that one.

The Slicer module cannot import umind_core inside Slicer; its copy (``UMindLib/labelfiles.paint_label_map``,
which paints the user's segments for submission) is held to this rule on a table of cases by
tests/test_one_owner.py.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["LabelPainter"]


class LabelPainter:
    """One label map of ``shape`` painted mask by mask; nothing is allocated until the first mask (or `labels`).

    ``values`` maps each name to its value, in order of first appearance; ``array`` is None until then.
    """

    def __init__(self, shape: Sequence[int]):
        self.shape = tuple(int(s) for s in shape)
        self.values: dict[str, int] = {}
        self.array: np.ndarray | None = None

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
        labels[index][mask if mask.dtype == bool else mask != 0] = value
        return value

    def labels(self) -> np.ndarray:
        """The map as painted so far: zeros (uint8) before the first mask."""
        if self.array is None:
            self.array = np.zeros(self.shape, dtype=np.uint8)
        return self.array
