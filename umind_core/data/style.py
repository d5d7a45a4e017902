"""An image of a known look redrawn in the look of another image: structure kept, texture and grey levels taken.

Why: the annotation loop learns a new scanner from a few labels, but it also holds every image of that scanner the
studies folder has, unlabeled. A rehearsal image (exact truth for every task) redrawn in the look of one of them
teaches the model the new scanner's speckle and grey curve with labels nobody drew, while its structures, and so
its masks, boxes, landmarks and calipers, stay where they were.

How: Fourier domain adaptation (Yang and Soatto, "FDA: Fourier Domain Adaptation for Semantic Segmentation", CVPR
2020): the amplitude spectrum of the source's centred low-frequency square of side `beta` x the image is replaced by
the target's, the source's phase is kept (phase holds where edges are; amplitude holds speckle grain, streaks and
shading), then the grey levels inside the scan are matched to the target's histogram. Outside the scan both
images are filled with their scan's mean first, so that the sector's edge does not dominate either spectrum, and
the result is black there again.
"""

from __future__ import annotations

import numpy as np

__all__ = ["scan_region", "restyle"]


def scan_region(image: np.ndarray) -> np.ndarray:
    """Where the probe saw, for an image without a stored scan mask: non-black pixels, closed and with holes
    filled (a dark cyst or speckle zero inside the sector is still inside it)."""
    from scipy.ndimage import binary_closing, binary_fill_holes

    return binary_fill_holes(binary_closing(image > 0, iterations=2))


def _match_histogram(values: np.ndarray, reference: np.ndarray) -> np.ndarray:
    """`values` mapped rank for rank onto the quantiles of `reference`."""
    ranks = np.argsort(np.argsort(values, kind="stable"), kind="stable") / max(len(values) - 1, 1)
    return np.interp(ranks, np.linspace(0.0, 1.0, len(reference)), np.sort(reference))


def _swap_amplitude(source: np.ndarray, target: np.ndarray, beta: float) -> np.ndarray:
    fs = np.fft.fftshift(np.fft.fft2(source))
    ft = np.fft.fftshift(np.fft.fft2(target))
    amplitude, phase = np.abs(fs), np.angle(fs)
    h, w = source.shape
    half = int(np.floor(min(h, w) * beta / 2))
    cy, cx = h // 2, w // 2
    box = (slice(max(cy - half, 0), cy + half + 1), slice(max(cx - half, 0), cx + half + 1))
    amplitude[box] = np.abs(ft)[box]
    return np.real(np.fft.ifft2(np.fft.ifftshift(amplitude * np.exp(1j * phase))))


def restyle(image: np.ndarray, scan: np.ndarray, target: np.ndarray, target_scan: np.ndarray,
            beta: float) -> np.ndarray:
    """`image` (uint8 grey, `scan` where the probe saw) in the look of `target`; uint8, black outside `scan`.

    `beta` in [0, 1]: the share of the spectrum whose amplitude is taken (0: grey levels only, 1: every
    frequency). A target of another size is resized to the image's first.
    """
    if image.ndim != 2 or target.ndim != 2:
        raise ValueError("restyle takes grey images (2-D arrays)")
    if not 0.0 <= beta <= 1.0:
        raise ValueError(f"beta must be in [0, 1], got {beta!r}")
    scan, target_scan = scan.astype(bool), target_scan.astype(bool)
    if not scan.any() or not target_scan.any():
        return image.copy()
    if target.shape != image.shape:
        from PIL import Image

        size = (image.shape[1], image.shape[0])
        target = np.asarray(Image.fromarray(target).resize(size, Image.BILINEAR))
        target_scan = np.asarray(Image.fromarray(target_scan.astype(np.uint8) * 255).resize(size, Image.NEAREST)) > 0
        if not target_scan.any():
            return image.copy()
    x = image.astype(np.float64)
    t = target.astype(np.float64)
    if beta > 0:
        x = _swap_amplitude(np.where(scan, x, x[scan].mean()), np.where(target_scan, t, t[target_scan].mean()), beta)
    out = np.zeros_like(x)
    out[scan] = _match_histogram(x[scan], t[target_scan])
    return np.where(scan, np.clip(np.rint(out), 0, 255), 0).astype(np.uint8)
