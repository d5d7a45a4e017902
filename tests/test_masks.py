"""The one owner of a mask's box (umind_core.masks) and of an object's box as training and scoring read it."""

from __future__ import annotations

import numpy as np
import pytest

from umind_core.data.manifest import ManifestObject, object_box
from umind_core.masks import mask_box


def test_a_mask_box_is_inclusive_and_an_empty_mask_has_none():
    mask = np.zeros((10, 12), dtype=bool)
    mask[2:5, 3:9] = True
    mask[7, 1] = True
    assert mask_box(mask) == (1, 2, 8, 7)
    with pytest.raises(ValueError, match="empty mask"):
        mask_box(np.zeros((4, 4), dtype=bool))


def test_an_object_box_is_the_drawn_box_else_the_mask_s_else_none():
    mask = np.zeros((6, 6), dtype=np.uint8)
    mask[1:3, 2:5] = 1
    assert object_box(ManifestObject(label="x", box=[0, 1, 2, 3]), mask) == (0.0, 1.0, 2.0, 3.0)
    assert object_box(ManifestObject(label="x"), mask) == (2.0, 1.0, 4.0, 2.0)
    assert object_box(ManifestObject(label="x"), np.zeros((6, 6), dtype=np.uint8)) is None
    assert object_box(ManifestObject(label="x"), None) is None


def test_a_drawn_mask_drops_its_specks_and_keeps_a_second_lesion_half_the_size():
    from umind_core.masks import drawn_objects

    big, half, speck = (np.zeros((40, 60), bool) for _ in range(3))
    big[5:15, 5:25] = True  # 200 px
    half[25:35, 30:40] = True  # 100 px: half the largest, another lesion
    speck[30:33, 50:53] = True  # 9 px: a fragment
    mask = big | half | speck
    assert [m.sum() for m in drawn_objects(mask, "thyroid nodule")] == [200, 100]
    (organ,) = drawn_objects(mask, "kidney")  # an organ is one object of its kept pieces
    assert np.array_equal(organ, big | half)
    assert drawn_objects(np.zeros((4, 4), bool), "cyst") == []
