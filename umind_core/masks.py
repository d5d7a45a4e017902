"""Rules about binary masks that the generator, the importers, training and scoring all apply.

One owner each: before this module the box of a mask was computed by five copies of the same two lines (the
generator, two importers, the conversation builder, the evaluation runner). How many objects one label's mask
is (`mask_pieces`) is decided here for the importers, which count a dataset's objects, and for the Predictor,
which boxes the objects of the masks the model draws: the same lesion must be one finding in both. A label map
becomes objects by one rule (`split_label_map`) for the importers and for the manifest check that splits a label
map it finds (`data.check`), which sits below the importers and so cannot import from them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

__all__ = ["blobs", "drawn_objects", "is_lesion_kind", "mask_box", "mask_pieces", "split_label_map"]

_LESION_RE = re.compile(r"\b(?:lesion|nodule|mass|cyst|tumou?r)(?:e?s)?\b", re.IGNORECASE)


def mask_box(mask: np.ndarray) -> tuple[int, int, int, int]:
    """Inclusive pixel box (x1, y1, x2, y2) of a non-empty 2D mask; ValueError for an empty one (it has no box)."""
    rows, cols = np.flatnonzero(mask.any(axis=1)), np.flatnonzero(mask.any(axis=0))
    if not len(rows):
        raise ValueError("an empty mask has no box")
    return int(cols[0]), int(rows[0]), int(cols[-1]), int(rows[-1])


def is_lesion_kind(name: str) -> bool:
    """The one rule for when blobs of one label are several objects: lesion kinds (lesion, nodule, mass, cyst,
    tumour) are counted one by one (two nodules are two findings); an organ in two pieces is still one organ."""
    return bool(_LESION_RE.search(str(name).replace("_", " ")))  # "thyroid_nodule" is a nodule too


def mask_pieces(mask: np.ndarray, name: str) -> list[np.ndarray]:
    """The objects one label's mask makes: none when empty (a negative), one per 8-connected blob for a lesion
    kind, else the whole mask."""
    mask = np.asarray(mask, dtype=bool)
    if not mask.any():
        return []
    return blobs(mask) if is_lesion_kind(name) else [mask]


def split_label_map(label_map: np.ndarray, names: Mapping[Any, str], log=None,
                    ignore: Iterable[int] = ()) -> list[tuple[str, np.ndarray]]:
    """A multi-class label map -> (label, mask) per object, label values in ascending order.

    `names` maps a value (or a tuple of values: an nnU-Net region) to its label; value 0 is background. Values
    present but unnamed are dropped and counted in the log, because guessing a name would teach a wrong word;
    `ignore` values (nnU-Net's "not annotated") are dropped silently. `log` is anything with `drop(reason)` (an
    importer's `ImportLog`); the manifest check splits without one.
    """
    label_map = np.asarray(label_map)
    present = {int(v) for v in np.unique(label_map) if v != 0}
    out: list[tuple[str, np.ndarray]] = []
    named: set[int] = {int(v) for v in ignore}
    for key in sorted(names, key=lambda k: min(k) if isinstance(k, tuple) else k):
        values = tuple(int(v) for v in (key if isinstance(key, tuple) else (key,)))
        named.update(values)
        for piece in mask_pieces(np.isin(label_map, values), names[key]):
            out.append((names[key], piece))
    if log is not None:
        for v in sorted(present - named):
            log.drop(f"label value {v} has no name")
    return out


def blobs(mask: np.ndarray) -> list[np.ndarray]:
    """The 8-connected pieces of a mask, in scan order of their first pixel."""
    from scipy import ndimage

    comps, n = ndimage.label(np.asarray(mask, bool), structure=np.ones((3, 3), dtype=bool))
    return [comps == k for k in range(1, n + 1)]


#: a piece of a drawn mask smaller than this share of its largest piece is a stray fragment, not another object
#: (a second lesion half the size of the first still counts)
LEAST_SHARE = 0.5


def drawn_objects(mask: np.ndarray, name: str) -> list[np.ndarray]:
    """The objects of a mask the model drew for `name`: `mask_pieces`' rule after its stray fragments are dropped
    (pieces under LEAST_SHARE of the largest). Why the drop: a truth mask has no fragments, a drawn one has specks
    at the edge of a low-contrast lesion, and each speck would be a false finding, or would stretch an organ's
    box. On 200 tuning images of each look (seeds 5,000,000+ default, 5,500,000+ `scanner_b`; every label one
    object there) detection F1 with every piece kept was 0.895 and 0.783, a quarter 0.951 and 0.820, a half 0.955
    and 0.827, the largest piece alone 0.963 and 0.839 (benchmarks/results/readout_from_masks.json): the largest
    alone fits images of one lesion; a half still counts a real second one."""
    pieces = blobs(mask)
    if not pieces:
        return []
    sizes = [int(p.sum()) for p in pieces]
    kept = [p for p, n in zip(pieces, sizes) if n >= LEAST_SHARE * max(sizes)]
    return kept if is_lesion_kind(name) else [np.logical_or.reduce(kept)]
