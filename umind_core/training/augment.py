"""Training-time augmentation: the same scan seen at another zoom, place and brightness.

Why: a model trained on a few hundred real scans learns them (HC18 head circumference 1.9 mm off on its own
training images, 6.9 mm on held-out subjects), and its worst held-out cases are heads smaller or larger in the
frame than most training ones (zoomed and transvaginal views). A random zoom and shift of each image, with its
masks and every coordinate in its conversations moved the same way, shows each scan at many scales; the
photometric transforms the synthetic data already use (`data.augment`, their one owner) stand in for another
machine's settings.

The geometry never cuts an object: a zoom-in is only drawn where every mask and every coordinate of the record's
conversations stays inside the frame (else the image keeps its geometry), so a box, a landmark or a caliper in
the words still says where the thing is. A length in mm is physical and stays as written. Examinations are not
augmented (their views are left as they are).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
from scipy import ndimage

from ..answers.grounding import GRID, grid_pairs, map_grid_pairs
from ..data.manifest import Conversation
from ..masks import mask_box

__all__ = ["Augmentation", "PHOTOMETRIC", "ZOOM", "augment_record", "draw", "one_plane", "tone"]

#: zoom factors drawn log-uniformly (1/ZOOM .. ZOOM): HC18 heads span about 3x in size across its views
ZOOM = 1.4
#: probability of each photometric transform of `data.augment` (the synthetic data's own rate)
PHOTOMETRIC = 0.4


@dataclass(frozen=True)
class Augmentation:
    """x' = scale * x + shift_x (pixels, edges of the frame at 0 and the width), the same for y."""
    scale: float = 1.0
    shift_x: float = 0.0
    shift_y: float = 0.0


def _extent(masks: Sequence[np.ndarray | None], conversations: Sequence[Conversation], w: int, h: int):
    """(x1, y1, x2, y2) in pixel edges around every mask and every grid coordinate of the conversations, or None
    when the record points at nothing."""
    xs, ys = [], []
    for m in masks:
        if m is not None and np.any(m):
            x1, y1, x2, y2 = mask_box(m)
            xs += [x1, x2 + 1]
            ys += [y1, y2 + 1]
    for conv in conversations:
        for msg in conv.messages:
            for gx, gy in grid_pairs(msg["content"]) if isinstance(msg.get("content"), str) else ():
                xs.append(gx / GRID * w)
                ys.append(gy / GRID * h)
    return (min(xs), min(ys), max(xs), max(ys)) if xs else None


def _shift(rng: np.random.Generator, scale: float, size: int, lo_obj: float, hi_obj: float) -> float | None:
    """A shift along one axis that keeps the frame filled (zoom-in) or the whole image in it (zoom-out), and
    every object inside; None when no shift does."""
    lo, hi = sorted((0.0, size - scale * size))
    lo, hi = max(lo, -scale * lo_obj), min(hi, size - scale * hi_obj)
    return None if lo > hi else float(rng.uniform(lo, hi))


def draw(rng: np.random.Generator, shape: tuple[int, int], masks: Sequence[np.ndarray | None] = (),
         conversations: Sequence[Conversation] = ()) -> Augmentation:
    """A random augmentation of an image of `shape` (rows, columns) that keeps every object in the frame."""
    h, w = shape
    scale = float(math.exp(rng.uniform(-math.log(ZOOM), math.log(ZOOM))))
    box = _extent(masks, conversations, w, h) or (0.0, 0.0, float(w), float(h))
    sx, sy = _shift(rng, scale, w, box[0], box[2]), _shift(rng, scale, h, box[1], box[3])
    if sx is None or sy is None:
        return Augmentation()
    return Augmentation(scale, sx, sy)


def _warp(array: np.ndarray, aug: Augmentation, order: int) -> np.ndarray:
    """`array` (H x W or H x W x C) moved by `aug`'s zoom and shift; pixel centres map through the edge
    convention, outside the source is 0."""
    inv = 1.0 / aug.scale
    offset = [(0.5 - aug.shift_y) * inv - 0.5, (0.5 - aug.shift_x) * inv - 0.5]
    if array.ndim == 2:
        return ndimage.affine_transform(array, [inv, inv], offset=offset, order=order, cval=0, mode="constant")
    return np.stack([_warp(array[..., c], aug, order) for c in range(array.shape[2])], axis=2)


def one_plane(image: np.ndarray) -> np.ndarray:
    """A grey scan as one H x W plane (from an image whose channels are all equal, H x W x 1 included); a colour image
    as it is. Why: a grey scan read as RGB would be warped and toned three times over, channel by channel, for the same
    result; the encoder makes the plane RGB again (`collate.to_rgb_uint8`). The one rule for what counts as grey here
    (`tone` asks it too)."""
    image = np.asarray(image)
    if image.ndim == 3 and all(np.array_equal(image[..., 0], image[..., c]) for c in range(1, image.shape[2])):
        return image[..., 0]
    return image


def tone(image: np.ndarray, rng: np.random.Generator, p: float = PHOTOMETRIC) -> np.ndarray:
    """`data.augment.augment_image` on a grey scan (`one_plane`: equal channels count as grey, and come back with as
    many channels; a colour one, Doppler, is returned as it is): the scan is every non-black pixel with its holes
    filled, so padding and the black around a sector stay black."""
    from ..data.augment import augment_image

    image = np.asarray(image)
    plane = one_plane(image)
    if plane.ndim == 3:
        return image
    toned = augment_image(plane, ndimage.binary_fill_holes(plane > 0), rng, p)
    return toned if image.ndim == 2 else np.repeat(toned[..., None], image.shape[2], axis=2)


def augment_record(image: np.ndarray, masks: Sequence[np.ndarray | None], conversations: Sequence[Conversation],
                   aug: Augmentation) -> tuple[np.ndarray, list, list[Conversation]]:
    """(image, masks, conversations) as `aug` shows them: image and masks warped, every grid pair in every
    message moved by the same map. `image` is uint8 (H x W or H x W x C)."""
    image = np.asarray(image)
    if image.dtype != np.uint8:
        raise ValueError(f"augmentation takes uint8 images, got {image.dtype}")
    h, w = image.shape[:2]
    if aug != Augmentation():
        image = _warp(image, aug, order=1)
        masks = [None if m is None else _warp(np.asarray(m) != 0, aug, order=0).astype(np.uint8) for m in masks]

        def move(gx: int, gy: int) -> tuple[float, float]:
            return aug.scale * gx + aug.shift_x / w * GRID, aug.scale * gy + aug.shift_y / h * GRID

        conversations = [replace(c, messages=[{**m, "content": map_grid_pairs(m["content"], move)}
                                              if isinstance(m.get("content"), str) else m for m in c.messages])
                         for c in conversations]
    return image, list(masks), list(conversations)
