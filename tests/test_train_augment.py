"""Training-time augmentation moves the image, its masks and the coordinates in its words together."""

import numpy as np
import pytest

from umind_core.data.manifest import Conversation
from umind_core.answers.grounding import grid_pairs, map_grid_pairs
from umind_core.training.augment import Augmentation, augment_record, draw, tone


def _scan(h=120, w=160, box=(40, 30, 100, 80)):
    """A grey image with one bright rectangle, its mask and conversations that point at it."""
    image = np.full((h, w), 40, np.uint8)
    x1, y1, x2, y2 = box
    image[y1:y2, x1:x2] = 200
    mask = np.zeros((h, w), np.uint8)
    mask[y1:y2, x1:x2] = 1
    g = lambda v, n: round(v / n * 1000)  # noqa: E731
    gb = (g(x1, w), g(y1, h), g(x2, w), g(y2, h))
    convs = [
        Conversation("detect", [{"role": "user", "content": "Find the cyst. (5,5) is not a coordinate."},
                                {"role": "assistant", "content": f"<|object_ref_start|>cyst<|object_ref_end|>"
                                 f"<|box_start|>({gb[0]},{gb[1]}),({gb[2]},{gb[3]})<|box_end|>"}]),
        Conversation("measure", [{"role": "user", "content": "Measure the cyst."},
                                 {"role": "assistant", "content": f"<|line_start|>({gb[0]},{gb[1]}),"
                                  f"({gb[2]},{gb[3]})<|line_end|> Length: 6.0 mm."}]),
    ]
    return image, [mask], convs


def test_map_grid_pairs_moves_only_coordinates_inside_grounding_spans():
    text = "Point (5,5) here <|point_start|>(100,200)<|point_end|> and <|box_start|>(1,2),(3,4)<|box_end|> 6.0 mm"
    out = map_grid_pairs(text, lambda x, y: (x * 2, y + 0.5))
    assert out == "Point (5,5) here <|point_start|>(200,201)<|point_end|> and <|box_start|>(2,3),(6,5)<|box_end|> 6.0 mm"
    assert grid_pairs(out) == [(200, 201), (2, 3), (6, 5)]
    assert map_grid_pairs("<|point_start|>(900,10)<|point_end|>", lambda x, y: (x * 2, y - 50)) \
        == "<|point_start|>(1000,0)<|point_end|>"


@pytest.mark.parametrize("aug", [Augmentation(0.75, 20.0, 10.0), Augmentation(1.3, -30.0, -20.0)])
def test_zoom_and_shift_keep_image_mask_and_words_aligned(aug):
    image, masks, convs = _scan()
    out, (mask,), (det, meas) = augment_record(image, masks, convs, aug)
    bright = out > 120
    assert (bright & (mask > 0)).sum() / (bright | (mask > 0)).sum() > 0.95  # the mask is where the object went
    rows, cols = np.nonzero(mask)
    h, w = mask.shape
    (bx1, by1), (bx2, by2) = grid_pairs(det.messages[1]["content"])
    # the box in the words is the mask's box, within a grid unit plus the pixel the warp may round
    assert abs(bx1 - cols.min() / w * 1000) <= 1000 / w + 1 and abs(bx2 - (cols.max() + 1) / w * 1000) <= 1000 / w + 1
    assert abs(by1 - rows.min() / h * 1000) <= 1000 / h + 1 and abs(by2 - (rows.max() + 1) / h * 1000) <= 1000 / h + 1
    assert grid_pairs(meas.messages[1]["content"]) == [(bx1, by1), (bx2, by2)]  # the caliper moved the same way
    assert meas.messages[1]["content"].endswith("Length: 6.0 mm.")  # a physical length is not a coordinate
    assert det.messages[0]["content"] == convs[0].messages[0]["content"]
    expected_area = (60 * aug.scale) * (50 * aug.scale)
    assert abs(mask.sum() - expected_area) / expected_area < 0.08


def test_tone_is_the_synthetic_datas_photometry_and_keeps_black_padding_and_colour():
    image, _, _ = _scan()
    image[:, :20] = 0  # padding left by a zoom-out
    rgb = np.repeat(image[..., None], 3, axis=2)
    out = tone(rgb, np.random.default_rng(1), p=1.0)
    assert out.shape == rgb.shape and np.array_equal(out[..., 0], out[..., 2])
    assert not out[:, :20].any() and np.abs(out[:, 20:].astype(int) - rgb[:, 20:]).mean() > 2
    doppler = rgb.copy()
    doppler[60, 60] = (255, 0, 0)
    assert np.array_equal(tone(doppler, np.random.default_rng(1), p=1.0), doppler)
    assert np.array_equal(augment_record(image, [], [], Augmentation())[0], image)  # no zoom, no change


def test_drawn_augmentations_never_cut_an_object():
    # an object near the right edge: a zoom-in must keep it whole or not zoom in at all
    image, masks, convs = _scan(box=(100, 20, 158, 110))
    rng = np.random.default_rng(0)
    zoomed_in = zoomed_out = 0
    for _ in range(200):
        aug = draw(rng, image.shape, masks, convs)
        out, (mask,), outs = augment_record(image, masks, convs, aug)
        assert mask.sum() >= (58 * aug.scale - 1.5) * (90 * aug.scale - 1.5)  # whole, up to a pixel a side
        for c in outs:
            for x, y in grid_pairs(c.messages[1]["content"]):
                assert 0 <= x <= 1000 and 0 <= y <= 1000
        zoomed_in += aug.scale > 1.05
        zoomed_out += aug.scale < 0.95
    assert zoomed_in > 10 and zoomed_out > 50  # both directions are drawn where they fit


def test_an_augmented_dataset_is_a_view_and_its_draws_repeat(tmp_path):
    from umind_core.training.collate import ManifestDataset

    ds = ManifestDataset.__new__(ManifestDataset)
    ds.augment, ds.seed, ds._draws = 0.0, 0, {}
    view = ds.augmented(1.0, seed=3)
    assert ds.augment == 0.0 and view.augment == 1.0 and view._draws is not ds._draws
    image, masks, convs = _scan()
    first = view._augment(7, image, masks, convs)
    second = view._augment(7, image, masks, convs)
    again = ds.augmented(1.0, seed=3)._augment(7, image, masks, convs)
    assert np.array_equal(first[0], again[0])  # the n-th read of an item is the same in every run
    assert not np.array_equal(first[0], second[0])  # and the next read is another view
    assert ds.augmented(0.0)._augment(7, image, masks, convs)[0] is image  # a fraction of 0 leaves it alone


def test_a_grey_scan_is_warped_and_toned_once_with_the_three_channel_result():
    from umind_core.training.augment import one_plane
    from umind_core.training.collate import to_rgb_uint8

    image, masks, convs = _scan()
    rgb = np.repeat(image[..., None], 3, axis=2)
    assert one_plane(rgb).shape == image.shape and one_plane(image[..., None]).shape == image.shape
    doppler = rgb.copy()
    doppler[60, 60] = (255, 0, 0)
    assert one_plane(doppler) is doppler or np.array_equal(one_plane(doppler), doppler)
    aug = draw(np.random.default_rng(5), image.shape, masks, convs)
    assert aug != Augmentation()
    three, m3, c3 = augment_record(rgb, masks, convs, aug)
    one, m1, c1 = augment_record(one_plane(rgb), masks, convs, aug)
    three, one = tone(three, np.random.default_rng(9), p=1.0), tone(one, np.random.default_rng(9), p=1.0)
    assert one.ndim == 2 and np.array_equal(to_rgb_uint8(one), three)  # same pixels, a third of the work
    assert all(np.array_equal(a, b) for a, b in zip(m1, m3)) and c1 == c3
