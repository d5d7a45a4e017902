"""Photometric ultrasound augmentation applied to a rendered image, for training demo model 3.

Why: a model trained on one generator keys on its texture, and the held-out `scanner_b` look (and another
simulator's images) showed that `varied` scanners alone do not teach it to look past texture. These transforms
act on the finished image, not on the generator's physics, so they are a different family from the scanner the
benchmarks hold out: the set and the ranges follow the published ultrasound augmentations of usaugment (Tupper &
Gagne: depth attenuation, Gaussian shadow, haze, speckle reduction) plus the usual gamma, contrast and noise, and
were fixed before any look at `scanner_b` scores. Only pixels change (masks, boxes, lines stay exact); pixels
outside the scan stay black. A sample's draws come from its own seed, so a dataset is reproducible.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np

#: (low, high) of every draw, fixed in advance (see the module docstring)
RANGES: dict[str, tuple[float, float]] = {
    "gamma": (0.6, 1.6),            # intensity curve i -> i**gamma on [0, 1]
    "contrast": (0.7, 1.3),         # factor around the scan's mean
    "brightness": (-0.1, 0.1),      # added, in [0, 1] units
    "attenuation": (0.0, 2.0),      # usaugment DepthAttenuation rate: x exp(-rate * depth)
    "shadow_strength": (0.3, 0.8),  # usaugment GaussianShadow: darkening at the blob's centre
    "haze_strength": (0.05, 0.25),  # usaugment HazeArtifact: a bright blurred band at one depth
    "blur_sigma": (0.3, 1.5),       # usaugment SpeckleReduction stand-in: Gaussian, per axis
    "noise_sd": (0.0, 0.06),        # additive Gaussian noise, in [0, 1] units
}

TRANSFORMS = ("gamma", "contrast", "attenuation", "shadow", "haze", "blur", "noise")


def _depth(scan: np.ndarray) -> np.ndarray:
    """0 at the first scanned row of each column, 1 at the deepest scanned row of the image."""
    rows = np.arange(scan.shape[0], dtype=np.float32)[:, None]
    top = np.where(scan.any(axis=0), scan.argmax(axis=0), 0).astype(np.float32)[None, :]
    bottom = float(np.nonzero(scan.any(axis=1))[0].max()) if scan.any() else float(scan.shape[0] - 1)
    return np.clip((rows - top) / max(bottom - top.min(), 1.0), 0.0, 1.0)


def augment_image(image: np.ndarray, scan: np.ndarray, rng: np.random.Generator, p: float = 0.4) -> np.ndarray:
    """Each transform of TRANSFORMS applied with probability ``p``, in that order; uint8 in, uint8 out."""
    from scipy.ndimage import gaussian_filter

    def draw(name: str) -> float:
        lo, hi = RANGES[name]
        return float(rng.uniform(lo, hi))

    img = image.astype(np.float32) / 255.0
    scan = scan.astype(bool)
    h, w = img.shape[:2]
    on = {name: rng.random() < p for name in TRANSFORMS}
    if on["gamma"]:
        img = img ** float(np.exp(rng.uniform(*np.log(RANGES["gamma"]))))
    if on["contrast"]:
        mean = float(img[scan].mean()) if scan.any() else float(img.mean())
        img = (img - mean) * draw("contrast") + mean + draw("brightness")
    if on["attenuation"]:
        img = img * np.exp(-draw("attenuation") * _depth(scan))
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    if on["shadow"]:
        cy, cx = rng.uniform(0.2, 0.9) * h, rng.uniform(0.1, 0.9) * w
        sy, sx = rng.uniform(0.1, 0.4) * h, rng.uniform(0.03, 0.12) * w
        blob = np.exp(-0.5 * (((yy - cy) / sy) ** 2 + ((xx - cx) / sx) ** 2))
        img = img * (1.0 - draw("shadow_strength") * blob)
    if on["haze"]:
        d = _depth(scan)
        band = np.exp(-0.5 * ((d - rng.uniform(0.1, 0.6)) / rng.uniform(0.03, 0.1)) ** 2)
        img = img + draw("haze_strength") * band * gaussian_filter(rng.random((h, w)).astype(np.float32), 3.0)
    if on["blur"]:
        img = gaussian_filter(img, sigma=(draw("blur_sigma"), draw("blur_sigma")))
    if on["noise"]:
        img = img + rng.normal(0.0, draw("noise_sd"), size=img.shape).astype(np.float32)
    out = np.clip(np.rint(img * 255.0), 0, 255).astype(np.uint8)
    return np.where(scan, out, 0).astype(np.uint8)


def photometric_hook(p: float = 0.4) -> Callable:
    """A `generate_many(augment=...)` hook: each sample augmented from its own seed (stream 7)."""
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"augmentation probability must be in [0, 1], got {p!r}")

    def apply(sample):
        rng = np.random.default_rng([int(sample.seed), 7])
        return dataclasses.replace(sample, image=augment_image(sample.image, sample.scan_mask, rng, p))
    return apply
