"""The synthetic lesion image and the teacher-forced sample that model tests and `benchmarks/bench_model.py` use.

Dark rectangles on bright speckle: the masks are visible in the image, as in ultrasound, so a model that learns
them learns to look. tests/conftest.py re-exports these names for the tests (`from conftest import make_image`).
"""

from __future__ import annotations

import numpy as np
import torch

__all__ = ["CHAT", "lesion_boxes", "make_image", "mask_sample"]

CHAT = "<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>{prompt}<|im_end|>\n<|im_start|>assistant\n"


def lesion_boxes(height: int, width: int, targets: int) -> list[tuple[int, int, int, int]]:
    """(y0, y1, x0, x1) of `targets` dark lesions, spread over the image."""
    boxes = []
    for i in range(targets):
        y0, x0 = height // 8 + i * height // 3, width // 6 + i * width // 3
        boxes.append((y0, y0 + height // 3, x0, x0 + width // 3))
    return boxes


def make_image(seed: int = 0, height: int = 256, width: int = 256, targets: int = 1) -> np.ndarray:
    """Bright speckle with dark rectangular lesions: the masks are visible in the image, as in ultrasound."""
    rng = np.random.default_rng(seed)
    img = (80 + rng.random((height, width)) * 175).astype(np.uint8)
    for y0, y1, x0, x1 in lesion_boxes(height, width, targets):
        img[y0:y1, x0:x1] = (rng.random((y1 - y0, x1 - x0)) * 40).astype(np.uint8)
    return np.repeat(img[..., None], 3, axis=2)


def mask_sample(model, seed: int = 0, height: int = 256, width: int = 256, targets: int = 1):
    """A teacher-forced batch of one image: prompt, an answer with `targets` masks, and the mask targets."""
    img = make_image(seed, height, width, targets)
    prompt = CHAT.format(prompt="Segment every lesion.")
    answer = "".join(
        f"<|object_ref_start|>lesion {i}<|object_ref_end|>" + "<|seg_mask|>" * model.num_mask_tokens
        for i in range(targets)
    ) + "<|im_end|>"
    enc = model.processor(images=[img], text=[prompt + answer], return_tensors="pt")
    prompt_len = len(model.processor(images=[img], text=[prompt], return_tensors="pt")["input_ids"][0])
    labels = enc["input_ids"].clone()
    labels[:, :prompt_len] = -100
    tgt = torch.zeros(targets, height, width)
    for i, (y0, y1, x0, x1) in enumerate(lesion_boxes(height, width, targets)):
        tgt[i, y0:y1, x0:x1] = 1
    return dict(enc), labels, [tgt]
