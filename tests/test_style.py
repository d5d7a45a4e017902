"""Restyling (umind_core/data/style.py): structure from the source, grey levels and texture from the target."""

from __future__ import annotations

import numpy as np
import pytest

from umind_core.data.style import restyle, scan_region
from umind_core.data.synthetic import generate


@pytest.fixture(scope="module")
def pair():
    return generate(21, site="breast", size=128), generate(22, site="breast", size=128, appearance="scanner_b")


def _corr(a, b, where):
    return float(np.corrcoef(a[where].astype(float), b[where].astype(float))[0, 1])


def test_grey_levels_come_from_the_target_and_order_from_the_source(pair):
    src, tgt = pair
    out = restyle(src.image, src.scan_mask, tgt.image, tgt.scan_mask, beta=0.0)
    inside = src.scan_mask.astype(bool)
    quantiles = np.linspace(0.05, 0.95, 10)
    target_q = np.quantile(tgt.image[tgt.scan_mask.astype(bool)], quantiles)
    assert np.abs(np.quantile(out[inside], quantiles) - target_q).max() <= 2.0
    assert _corr(out, src.image, inside) > 0.95  # rank for rank: a monotone map of the source
    assert not out[~inside].any()


@pytest.mark.parametrize("beta", [0.3, 1.0])
def test_spectrum_swap_keeps_the_structures_where_they_were(pair, beta):
    from scipy.ndimage import gaussian_filter

    src, tgt = pair
    out = restyle(src.image, src.scan_mask, tgt.image, tgt.scan_mask, beta=beta)
    inside = src.scan_mask.astype(bool)
    assert out.dtype == np.uint8 and out.shape == src.image.shape and not out[~inside].any()
    # the lesion stays where the truth puts it: smoothed, the restyled image follows the source's layout more
    # than another image of the target's look does
    smooth = [gaussian_filter(x.astype(float), 4) for x in (src.image, out, tgt.image)]
    assert _corr(smooth[1], smooth[0], inside) > 0.5
    assert _corr(smooth[1], smooth[0], inside) > _corr(smooth[1], smooth[2], inside & tgt.scan_mask.astype(bool))
    assert np.abs(out.astype(int) - src.image.astype(int))[inside].mean() > 5  # and the pixels did change


def test_a_target_of_another_size_and_an_image_without_a_scan_mask():
    src = generate(23, site="kidney", size=96)
    tgt = generate(24, site="kidney", size=160, appearance="scanner_b")
    out = restyle(src.image, scan_region(src.image), tgt.image, scan_region(tgt.image), beta=0.3)
    assert out.shape == src.image.shape
    assert (scan_region(src.image) == src.scan_mask.astype(bool)).mean() > 0.98


def test_bad_arguments_name_the_problem():
    img = np.zeros((8, 8), np.uint8)
    with pytest.raises(ValueError, match="beta"):
        restyle(img, img > 0, img, img > 0, beta=1.5)
    with pytest.raises(ValueError, match="grey"):
        restyle(np.zeros((8, 8, 3), np.uint8), img > 0, img, img > 0, beta=0.1)
    assert np.array_equal(restyle(img, img > 0, img + 1, img + 1 > 0, beta=0.1), img)  # an empty scan: unchanged
