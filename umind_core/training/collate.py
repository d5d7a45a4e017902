"""Conversations + images -> tensors that `UMindVL.forward(**batch)` takes for one teacher-forced step.

The prompt is tokenised by the processor exactly as the Predictor tokenises it (`prompts.chat_prompt`), and
the answer on its own, the way the model produces it token by token after that prompt; so the labels cover
the answer and its `<|im_end|>` and nothing else, without guessing a boundary inside one tokenisation.
Mask targets are the referenced object masks at the size of the image the vision encoder saw, which is the
size the mask decoder predicts at.
"""

from __future__ import annotations

import functools
import numbers
import os
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch

from ..data.manifest import Conversation, read_manifest
from ..grounding import SEG_MASK
from ..prompts import ASSISTANT_END, TASKS, chat_prompt

__all__ = ["IGNORE_INDEX", "CollateError", "EncodedSample", "encode_sample", "collate", "ManifestDataset",
           "to_rgb_uint8"]

IGNORE_INDEX = -100
_IMAGE_PAD = "<|image_pad|>"


class CollateError(ValueError):
    """A sample that cannot be encoded or batched; the message names the input and the problem."""


@dataclass
class EncodedSample:
    input_ids: torch.Tensor  # (L,) long
    attention_mask: torch.Tensor  # (L,) long
    mm_token_type_ids: torch.Tensor  # (L,) long, 1 on image placeholders
    labels: torch.Tensor  # (L,) long, IGNORE_INDEX outside the answer
    pixel_values: torch.Tensor  # (patches, D)
    image_grid_thw: torch.Tensor  # (1, 3) long
    mask_targets: torch.Tensor | None  # (T, h, w) float {0, 1}, or None without mask supervision


def to_rgb_uint8(image: np.ndarray) -> np.ndarray:
    """H x W or H x W x {1,3,4} (uint8, or uint16 scaled down) -> H x W x 3 uint8."""
    arr = np.asarray(image)
    if arr.dtype == np.uint16:
        arr = (arr >> 8).astype(np.uint8)
    if arr.dtype != np.uint8:
        raise CollateError(f"image must be uint8 (or uint16), got dtype {arr.dtype}")
    if arr.ndim == 2:
        arr = np.repeat(arr[..., None], 3, axis=2)
    elif arr.ndim == 3 and arr.shape[2] == 1:
        arr = np.repeat(arr, 3, axis=2)
    elif arr.ndim == 3 and arr.shape[2] == 4:
        arr = arr[..., :3]
    if arr.ndim != 3 or arr.shape[2] != 3 or min(arr.shape[:2]) < 1:
        raise CollateError(f"image must be H x W (grey) or H x W x 3 (RGB), got shape {np.asarray(image).shape}")
    return np.ascontiguousarray(arr)


def _turns(conversation: Conversation) -> tuple[str, str]:
    if not isinstance(conversation, Conversation):
        raise CollateError(f"conversation must be a Conversation, got {type(conversation).__name__}")
    roles = [m.get("role") for m in conversation.messages]
    if roles != ["user", "assistant"]:
        raise CollateError(
            f"conversation ({conversation.task}) must be one user turn then one assistant turn, got roles {roles}"
        )
    user, answer = (m.get("content") for m in conversation.messages)
    for role, content in (("user", user), ("assistant", answer)):
        if not isinstance(content, str) or not content.strip():
            raise CollateError(f"conversation ({conversation.task}): the {role} content must be a non-empty str")
    if ASSISTANT_END in answer or _IMAGE_PAD in answer:
        raise CollateError(f"conversation ({conversation.task}): the answer must not contain chat or image tokens")
    return user, answer


def _token_id(tokenizer, token: str) -> int | None:
    tid = tokenizer.convert_tokens_to_ids(token)
    if tid is None or tid == getattr(tokenizer, "unk_token_id", None):
        return None
    return int(tid)


def _mask_groups(answer_ids: list[int], seg_id: int | None, n: int, task: str) -> int:
    """Number of complete mask groups in the answer; a run that is not a multiple of n is an error."""
    if seg_id is None:
        return 0
    groups, run = 0, 0
    for tid in answer_ids + [-1]:
        if tid == seg_id:
            run += 1
            continue
        if run % n:
            raise CollateError(
                f"conversation ({task}): a run of {run} {SEG_MASK} tokens; each mask takes num_mask_tokens={n}"
            )
        groups += run // n
        run = 0
    return groups


def _mask_targets(masks: Sequence[np.ndarray | None], objects: Sequence[int], image_hw: tuple[int, int],
                  out_hw: tuple[int, int], task: str) -> torch.Tensor:
    picked = []
    for k in objects:
        if not 0 <= k < len(masks):
            raise CollateError(f"conversation ({task}): mask_objects refers to object {k}, "
                               f"but only {len(masks)} object masks were given")
        m = masks[k]
        if m is None:
            raise CollateError(f"conversation ({task}): object {k} is referenced by a mask but has no mask")
        m = np.asarray(m)
        if m.shape != image_hw:
            raise CollateError(f"conversation ({task}): mask of object {k} is {m.shape}, the image is {image_hw}")
        picked.append(torch.from_numpy(m != 0).to(torch.float32))
    stack = torch.stack(picked)[None]
    # nearest-exact samples pixel centres, so a mask stays aligned with the resized image
    return torch.nn.functional.interpolate(stack, size=out_hw, mode="nearest-exact")[0]


def encode_sample(processor, image: np.ndarray, conversation: Conversation,
                  masks: Sequence[np.ndarray | None] = (), num_mask_tokens: int = 16) -> EncodedSample:
    """One conversation on one image -> an EncodedSample (prompt masked out of the labels)."""
    if isinstance(num_mask_tokens, bool) or not isinstance(num_mask_tokens, numbers.Integral) or num_mask_tokens < 1:
        raise CollateError(f"num_mask_tokens must be a positive int, got {num_mask_tokens!r}")
    image = to_rgb_uint8(image)
    user, answer = _turns(conversation)
    tokenizer = processor.tokenizer
    enc = processor(images=[image], text=[chat_prompt(user, 1)], return_tensors="pt")
    prompt_ids = enc["input_ids"][0]
    answer_ids = tokenizer(answer + ASSISTANT_END, add_special_tokens=False)["input_ids"]
    image_id = _token_id(tokenizer, _IMAGE_PAD)
    if image_id is not None and image_id in answer_ids:
        raise CollateError(f"conversation ({conversation.task}): the answer tokenises to image placeholders")
    seg_id = _token_id(tokenizer, SEG_MASK)
    if seg_id is None and SEG_MASK in answer:
        raise CollateError(f"the tokenizer has no {SEG_MASK} token; use the processor of a UMindVL model "
                           "(it installs the grounding tokens)")
    groups = _mask_groups(list(answer_ids), seg_id, int(num_mask_tokens), conversation.task)
    objects = list(conversation.mask_objects)
    if groups != len(objects):
        raise CollateError(f"conversation ({conversation.task}): the answer has {groups} mask groups but "
                           f"mask_objects names {len(objects)} objects {objects}")
    grid = enc["image_grid_thw"]
    targets = None
    if objects:
        patch = int(getattr(processor.image_processor, "patch_size", 16))
        out_hw = (int(grid[0, 1]) * patch, int(grid[0, 2]) * patch)
        targets = _mask_targets(masks, objects, image.shape[:2], out_hw, conversation.task)
    answer_t = torch.tensor(answer_ids, dtype=torch.long)
    input_ids = torch.cat([prompt_ids.long(), answer_t])
    if "mm_token_type_ids" in enc:
        mm_prompt = enc["mm_token_type_ids"][0].long()
    else:
        mm_prompt = (prompt_ids == image_id).long()
    return EncodedSample(
        input_ids=input_ids,
        attention_mask=torch.ones_like(input_ids),
        mm_token_type_ids=torch.cat([mm_prompt, torch.zeros_like(answer_t)]),
        labels=torch.cat([torch.full_like(prompt_ids.long(), IGNORE_INDEX), answer_t]),
        pixel_values=enc["pixel_values"],
        image_grid_thw=grid.long(),
        mask_targets=targets,
    )


def collate(samples: Sequence[EncodedSample], pad_id: int) -> dict:
    """Right-padded batch for `UMindVL.forward(**batch)`: pad tokens get attention 0 and label IGNORE_INDEX."""
    samples = list(samples)
    if not samples:
        raise CollateError("collate needs at least one sample")
    if isinstance(pad_id, bool) or not isinstance(pad_id, numbers.Integral) or pad_id < 0:
        raise CollateError(f"pad_id must be a non-negative int, got {pad_id!r}")
    for i, s in enumerate(samples):
        if not isinstance(s, EncodedSample):
            raise CollateError(f"samples[{i}] must be an EncodedSample, got {type(s).__name__}")
    length = max(len(s.input_ids) for s in samples)

    def pad(field: str, value: int) -> torch.Tensor:
        out = torch.full((len(samples), length), value, dtype=torch.long)
        for b, s in enumerate(samples):
            t = getattr(s, field)
            out[b, : len(t)] = t
        return out

    return {
        "input_ids": pad("input_ids", int(pad_id)),
        "attention_mask": pad("attention_mask", 0),
        "mm_token_type_ids": pad("mm_token_type_ids", 0),
        "labels": pad("labels", IGNORE_INDEX),
        "pixel_values": torch.cat([s.pixel_values for s in samples]),
        "image_grid_thw": torch.cat([s.image_grid_thw for s in samples]),
        "mask_targets": [s.mask_targets for s in samples],
    }


class ManifestDataset(torch.utils.data.Dataset):
    """One item per (record, conversation) of a manifest, encoded on access (images are read lazily)."""

    def __init__(self, manifest_path: str | os.PathLike, processor, num_mask_tokens: int = 16,
                 tasks: Sequence[str] | None = None):
        if tasks is not None:
            tasks = (tasks,) if isinstance(tasks, str) else tuple(tasks)
            bad = [t for t in tasks if t not in TASKS]
            if bad:
                raise CollateError(f"tasks {bad!r} are not known; valid tasks: {', '.join(TASKS)}")
        self.manifest_path = manifest_path
        self.processor = processor
        self.num_mask_tokens = int(num_mask_tokens)
        self.records = read_manifest(manifest_path)
        self.items = [(r, c) for r, rec in enumerate(self.records) for c, conv in enumerate(rec.conversations)
                      if tasks is None or conv.task in tasks]
        if not self.items:
            raise CollateError(
                f"{manifest_path}: no conversations{'' if tasks is None else f' for tasks {list(tasks)}'}; "
                "fill them with umind_core.data.conversations.attach_conversations"
            )

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int) -> EncodedSample:
        r, c = self.items[index]
        rec = self.records[r]
        conv = rec.conversations[c]
        masks = rec.load_masks() if conv.mask_objects else []
        try:
            return encode_sample(self.processor, rec.load_image(), conv, masks, self.num_mask_tokens)
        except CollateError as exc:
            raise CollateError(f"record {rec.id!r}, conversation {c}: {exc}") from None

    @property
    def collate_fn(self):
        """`collate` with this processor's pad id, for a DataLoader."""
        pad_id = self.processor.tokenizer.pad_token_id
        if pad_id is None:
            pad_id = self.processor.tokenizer.eos_token_id
        return functools.partial(collate, pad_id=int(pad_id))
