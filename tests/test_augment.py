"""Photometric augmentation (umind_core/data/augment.py): pixels change, annotations and the scan outside do not."""

from __future__ import annotations

import numpy as np
import pytest

from umind_core.cli import main
from umind_core.data.augment import TRANSFORMS, augment_image, photometric_hook
from umind_core.data.manifest import read_manifest
from umind_core.data.synthetic import generate


@pytest.fixture(scope="module")
def sample():
    return generate(11, site="breast", size=96, appearance="varied")


def test_probability_zero_is_the_identity(sample):
    out = augment_image(sample.image, sample.scan_mask, np.random.default_rng(0), p=0.0)
    assert np.array_equal(out, sample.image)


def test_every_transform_changes_pixels_inside_the_scan_only(sample):
    out = augment_image(sample.image, sample.scan_mask, np.random.default_rng(0), p=1.0)
    assert out.dtype == np.uint8 and out.shape == sample.image.shape
    inside = sample.scan_mask.astype(bool)
    assert np.abs(out[inside].astype(int) - sample.image[inside].astype(int)).mean() > 2.0
    assert not out[~inside].any(), "pixels outside the scan must stay black"


def test_hook_is_reproducible_from_the_seed_and_keeps_annotations(sample):
    hook = photometric_hook(0.5)
    a, b = hook(sample), hook(sample)
    assert np.array_equal(a.image, b.image)
    assert a.objects is sample.objects and a.spacing == sample.spacing and a.report == sample.report
    other = hook(generate(12, site="breast", size=96, appearance="varied"))
    assert not np.array_equal(other.image, a.image)


@pytest.mark.parametrize("p", [-0.1, 1.5])
def test_probability_outside_zero_one_is_refused(p):
    with pytest.raises(ValueError, match="probability"):
        photometric_hook(p)


def test_transform_names_are_the_documented_set():
    assert TRANSFORMS == ("gamma", "contrast", "attenuation", "shadow", "haze", "blur", "noise")


def test_synth_augment_changes_images_not_masks(tmp_path, capsys):
    plain, aug = tmp_path / "plain", tmp_path / "aug"
    common = ["-n", "3", "--seed0", "5", "--size", "64", "--no-conversations"]
    assert main(["synth", "--out", str(plain), *common]) == 0
    assert main(["synth", "--out", str(aug), *common, "--augment", "1"]) == 0
    for p, a in zip(read_manifest(plain / "manifest.jsonl"), read_manifest(aug / "manifest.jsonl")):
        assert p.annotations == a.annotations
        assert not np.array_equal(p.load_image(), a.load_image())
        for obj in p.annotations.objects:
            assert (plain / obj.mask).read_bytes() == (aug / obj.mask).read_bytes()


def test_synth_augment_outside_zero_one_is_one_line_and_status_2(tmp_path, capsys):
    with pytest.raises(SystemExit) as stop:
        main(["synth", "--out", str(tmp_path / "ds"), "-n", "2", "--augment", "2"])
    assert stop.value.code == 2
    assert "--augment" in capsys.readouterr().err.strip().splitlines()[-1]
