"""Quick-look overlays: a frame with masks blended in colour and boxes, points and lines drawn on top."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

import numpy as np
from PIL import Image, ImageDraw

from ..atomic import atomic_path
from .errors import ImageWriteError
from .geometry import Frame

__all__ = ["write_overlay_png"]


_PALETTE = [(255, 64, 64), (64, 200, 255), (255, 210, 0), (80, 255, 120), (255, 64, 255),
            (255, 140, 0), (150, 110, 255), (0, 255, 220)]


def write_overlay_png(frame: Frame, masks: list[np.ndarray], path: str | os.PathLike,
                      boxes: Sequence[Sequence[float]] = (),
                      points: Sequence[Sequence[float]] = (),
                      lines: Sequence[Sequence[float]] = ()) -> Path:
    """A quick-look PNG: masks blended in colour, boxes, points and lines drawn on top."""
    path = Path(path)
    base = np.asarray(frame.pixels, dtype=np.float32).copy()
    h, w = base.shape[:2]
    for i, m in enumerate(masks):
        m = np.asarray(m, dtype=bool)
        if m.shape != (h, w):
            raise ImageWriteError(f"{path}: mask {i} has shape {m.shape}, frame is {(h, w)}")
        base[m] = 0.55 * base[m] + 0.45 * np.array(_PALETTE[i % len(_PALETTE)], np.float32)
    im = Image.fromarray(np.clip(base + 0.5, 0, 255).astype(np.uint8), mode="RGB")
    draw = ImageDraw.Draw(im)
    for i, b in enumerate(boxes):
        x1, y1, x2, y2 = (float(v) for v in b)
        draw.rectangle([min(x1, x2), min(y1, y2), max(x1, x2), max(y1, y2)],
                       outline=_PALETTE[i % len(_PALETTE)], width=2)
    for i, ln in enumerate(lines):
        x1, y1, x2, y2 = (float(v) for v in ln)
        draw.line([x1, y1, x2, y2], fill=_PALETTE[(i + 2) % len(_PALETTE)], width=2)
    for i, pt in enumerate(points):
        x, y = float(pt[0]), float(pt[1])
        r = max(2.0, min(h, w) / 80)
        draw.ellipse([x - r, y - r, x + r, y + r], fill=_PALETTE[(i + 3) % len(_PALETTE)])
    with atomic_path(path, ".png") as tmp:
        im.save(tmp, format="PNG")
    return path
