"""Conversations + images -> tensors that `UMindVL.forward(**batch)` takes for one teacher-forced step.

The prompt is tokenised exactly as the Predictor tokenises it (the image prefix by the processor, the user
turn by the tokenizer), and the answer on its own, the way the model produces it token by token after that
prompt; so the labels cover the answer and its `<|im_end|>` and nothing else, without guessing a boundary
inside one tokenisation. Mask targets are the referenced object masks at the size of the image the vision
encoder saw, which is the size the mask decoder predicts at.

`ManifestDataset(pack=True)` gives one sample per image with all its conversations as branches on one shared
image prefix (`modeling.packing`): the same losses as one sample per conversation, with the vision encoder and
the image tokens computed once per image instead of once per question.

A record of several views (an examination) is encoded the same way with every view in its prefix
(`encode_exam_turns`, which encodes a record of one view exactly as `encode_turns` its image):
pixel values of all views concatenated, one `image_grid_thw` row per view in placeholder order (Qwen3-VL's own
multi-image input), and `mask_views` saying which view each mask target belongs to, so that the mask decoder
reads that view's image tokens. Packing works unchanged: the turns share the whole examination prefix.
"""

from __future__ import annotations

import copy
import functools
import numbers
import os
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch

from ..data.manifest import Conversation, read_manifest
from ..answers.grounding import SEG_MASK
from ..modeling.packing import PAD_SEGMENT
from ..prompts import ASSISTANT_END, TASKS, exam_prefix, turn_suffix
from .augment import augment_record, draw, one_plane, tone

__all__ = ["IGNORE_INDEX", "CollateError", "EncodedSample", "encode_sample", "encode_turns", "encode_exam_turns",
           "collate", "ManifestDataset", "to_rgb_uint8"]

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
    pixel_values: torch.Tensor  # (patches, D): every image's patches, in placeholder order
    image_grid_thw: torch.Tensor  # (images, 3) long: one row per image (one for a single-image sample)
    mask_targets: torch.Tensor | None  # (T, h, w) float {0, 1}, or None without mask supervision
    segment_ids: torch.Tensor | None = None  # (L,) long: 0 on the image prefix, k on the k-th turn
    mask_views: torch.Tensor | None = None  # (T,) long: the image of the sample each target belongs to (exams)


def to_uint8(image: np.ndarray) -> np.ndarray:
    """H x W or H x W x {1,3,4} (uint8, or uint16 scaled down) -> the same planes as uint8, alpha dropped: a grey
    scan stays one plane, so augmentation need not make it RGB only to take one plane back (`augment.one_plane`)."""
    arr = np.asarray(image)
    if arr.dtype == np.uint16:
        arr = (arr >> 8).astype(np.uint8)
    if arr.dtype != np.uint8:
        raise CollateError(f"image must be uint8 (or uint16), got dtype {arr.dtype}")
    if arr.ndim == 3 and arr.shape[2] == 4:
        arr = arr[..., :3]
    if not (arr.ndim == 2 or (arr.ndim == 3 and arr.shape[2] in (1, 3))) or min(arr.shape[:2]) < 1:
        raise CollateError(f"image must be H x W (grey) or H x W x 3 (RGB), got shape {np.asarray(image).shape}")
    return arr


def to_rgb_uint8(image: np.ndarray) -> np.ndarray:
    """H x W or H x W x {1,3,4} (uint8, or uint16 scaled down) -> H x W x 3 uint8."""
    arr = to_uint8(image)
    if arr.ndim == 2:
        arr = arr[..., None]
    if arr.shape[2] == 1:
        arr = np.repeat(arr, 3, axis=2)
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


def _encode_turn(tokenizer, conversation: Conversation, seg_id: int | None, image_id: int | None,
                 num_mask_tokens: int) -> tuple[list[int], list[int], list[int]]:
    """(prompt ids, answer ids, referenced objects) of one turn, the prompt being what follows the image prefix."""
    user, answer = _turns(conversation)
    prompt_ids = tokenizer(turn_suffix(user), add_special_tokens=False)["input_ids"]
    answer_ids = tokenizer(answer + ASSISTANT_END, add_special_tokens=False)["input_ids"]
    if image_id is not None and image_id in answer_ids:
        raise CollateError(f"conversation ({conversation.task}): the answer tokenises to image placeholders")
    if seg_id is None and SEG_MASK in answer:
        raise CollateError(f"the tokenizer has no {SEG_MASK} token; use the processor of a UMindVL model "
                           "(it installs the grounding tokens)")
    groups = _mask_groups(list(answer_ids), seg_id, num_mask_tokens, conversation.task)
    objects = list(conversation.mask_objects)
    if groups != len(objects):
        raise CollateError(f"conversation ({conversation.task}): the answer has {groups} mask groups but "
                           f"mask_objects names {len(objects)} objects {objects}")
    return list(prompt_ids), list(answer_ids), objects


def _check_mask_tokens(num_mask_tokens) -> int:
    if isinstance(num_mask_tokens, bool) or not isinstance(num_mask_tokens, numbers.Integral) or num_mask_tokens < 1:
        raise CollateError(f"num_mask_tokens must be a positive int, got {num_mask_tokens!r}")
    return int(num_mask_tokens)


def encode_turns(processor, image: np.ndarray, conversations: Sequence[Conversation],
                 masks: Sequence[np.ndarray | None] = (), num_mask_tokens: int = 16) -> EncodedSample:
    """Several conversations about one image -> one packed EncodedSample (see `modeling.packing`).

    The image prefix is tokenised by the processor exactly as the Predictor's `set_image` does and each turn
    as the Predictor's prompt (`prompts.turn_suffix`) plus the answer, so the labels cover each answer and its
    `<|im_end|>` and nothing else, without guessing a boundary inside one tokenisation. Branch k of the
    sample carries segment id k; mask targets follow the order of the mask groups in the sequence.
    """
    return encode_exam_turns(processor, [image], conversations, [masks], num_mask_tokens)


def encode_exam_turns(processor, images: Sequence[np.ndarray], conversations: Sequence[Conversation],
                      masks: Sequence[Sequence[np.ndarray | None]] = (), num_mask_tokens: int = 16) -> EncodedSample:
    """Conversations about one record's views -> one EncodedSample with every view in its prefix.

    `images` are the views in order (`prompts.exam_prefix` labels them View 1..n; one view is a single image,
    unlabelled, and needs no ``mask_views``), `masks[v]` the object masks of view v; a conversation's mask group i
    is object ``mask_objects[i]`` of view ``mask_views[i]``. Every target must come out at one size (views of one
    size, as the generator writes them): the model stacks a sample's targets into one tensor.
    """
    n = _check_mask_tokens(num_mask_tokens)
    conversations, images = list(conversations), [to_rgb_uint8(im) for im in images]
    if not conversations:
        raise CollateError("encoding needs at least one conversation")
    if not images:
        raise CollateError("encoding needs at least one image")
    return _encode(images, exam_prefix(len(images)), conversations, list(masks), n, processor,
                   views=len(images) > 1)


def _encode(images: list[np.ndarray], prefix_text: str, conversations: list[Conversation], masks: list,
            n: int, processor, views: bool) -> EncodedSample:
    """The shared body: the prefix (text with one placeholder per image) through the processor, then the turns."""
    tokenizer = processor.tokenizer
    image_id = _token_id(tokenizer, _IMAGE_PAD)
    seg_id = _token_id(tokenizer, SEG_MASK)
    enc = processor(images=images, text=[prefix_text], return_tensors="pt")
    prefix_ids = enc["input_ids"][0].long()
    if "mm_token_type_ids" in enc:
        mm_prefix = enc["mm_token_type_ids"][0].long()
    else:
        mm_prefix = (prefix_ids == image_id).long()
    ids, labels, segments, objects = [prefix_ids], [torch.full_like(prefix_ids, IGNORE_INDEX)], [
        torch.zeros_like(prefix_ids)], []
    for k, conversation in enumerate(conversations, start=1):
        prompt_ids, answer_ids, turn_objects = _encode_turn(tokenizer, conversation, seg_id, image_id, n)
        turn = torch.tensor(prompt_ids + answer_ids, dtype=torch.long)
        ids.append(turn)
        labels.append(torch.cat([torch.full((len(prompt_ids),), IGNORE_INDEX, dtype=torch.long),
                                 torch.tensor(answer_ids, dtype=torch.long)]))
        segments.append(torch.full_like(turn, k))
        objects += [(conversation.task, view, obj) for view, obj in _turn_views(conversation, turn_objects,
                                                                                 len(images), views)]
    grid = enc["image_grid_thw"]
    input_ids = torch.cat(ids)
    targets = _targets(processor, images, masks, grid, objects) if objects else None
    return EncodedSample(
        input_ids=input_ids,
        attention_mask=torch.ones_like(input_ids),
        mm_token_type_ids=torch.cat([mm_prefix, torch.zeros(len(input_ids) - len(prefix_ids), dtype=torch.long)]),
        labels=torch.cat(labels),
        pixel_values=enc["pixel_values"],
        image_grid_thw=grid.long(),
        mask_targets=targets,
        segment_ids=torch.cat(segments),
        mask_views=torch.tensor([v for _, v, _ in objects], dtype=torch.long) if views and objects else None,
    )


def _turn_views(conversation: Conversation, objects: list[int], n_images: int, views: bool) -> list[tuple[int, int]]:
    """(view, object) of each mask group of one turn: view 0 for a single image, ``mask_views`` for an exam."""
    if not views:
        if conversation.mask_views:
            raise CollateError(f"conversation ({conversation.task}): mask_views on a single-image sample")
        return conversation.mask_pairs
    if len(conversation.mask_views) != len(objects):
        raise CollateError(f"conversation ({conversation.task}): {len(objects)} mask objects but "
                           f"{len(conversation.mask_views)} mask_views; an examination names the view of each")
    bad = [v for v in conversation.mask_views if v >= n_images]
    if bad:
        raise CollateError(f"conversation ({conversation.task}): mask_views {bad} but the sample has "
                           f"{n_images} images")
    return conversation.mask_pairs


def _targets(processor, images: list[np.ndarray], masks: list, grid: torch.Tensor,
             objects: list[tuple[str, int, int]]) -> torch.Tensor:
    """Each (task, view, object) mask at the size the vision encoder saw its view, stacked in answer order."""
    patch = int(getattr(processor.image_processor, "patch_size", 16))
    picked = []
    for task, view, obj in objects:
        if view >= len(masks):
            raise CollateError(f"conversation ({task}): a mask of view {view + 1}, but masks were given for "
                               f"{len(masks)} view(s)")
        out_hw = (int(grid[view, 1]) * patch, int(grid[view, 2]) * patch)
        picked.append(_mask_targets(masks[view], [obj], images[view].shape[:2], out_hw, task))
    shapes = sorted({tuple(t.shape[-2:]) for t in picked})
    if len(shapes) > 1:
        raise CollateError(f"mask targets of one sample come out at different sizes {shapes}: the views of an "
                           "examination with mask targets must have one size")
    return torch.cat(picked)


def encode_sample(processor, image: np.ndarray, conversation: Conversation,
                  masks: Sequence[np.ndarray | None] = (), num_mask_tokens: int = 16) -> EncodedSample:
    """One conversation on one image -> an EncodedSample (prompt masked out of the labels)."""
    return encode_turns(processor, image, [conversation], masks, num_mask_tokens)


def collate(samples: Sequence[EncodedSample], pad_id: int) -> dict:
    """Right-padded batch for `UMindVL.forward(**batch)`: pad tokens get attention 0 and label IGNORE_INDEX.

    `segment_ids` is added only when a sample packs several turns; with one turn per sample plain causal
    attention is the same thing.
    """
    samples = list(samples)
    if not samples:
        raise CollateError("collate needs at least one sample")
    if isinstance(pad_id, bool) or not isinstance(pad_id, numbers.Integral) or pad_id < 0:
        raise CollateError(f"pad_id must be a non-negative int, got {pad_id!r}")
    for i, s in enumerate(samples):
        if not isinstance(s, EncodedSample):
            raise CollateError(f"samples[{i}] must be an EncodedSample, got {type(s).__name__}")
    length = max(len(s.input_ids) for s in samples)

    def pad(values: Sequence[torch.Tensor], value: int) -> torch.Tensor:
        out = torch.full((len(samples), length), value, dtype=torch.long)
        for b, t in enumerate(values):
            out[b, : len(t)] = t
        return out

    batch = {
        "input_ids": pad([s.input_ids for s in samples], int(pad_id)),
        "attention_mask": pad([s.attention_mask for s in samples], 0),
        "mm_token_type_ids": pad([s.mm_token_type_ids for s in samples], 0),
        "labels": pad([s.labels for s in samples], IGNORE_INDEX),
        "pixel_values": torch.cat([s.pixel_values for s in samples]),
        "image_grid_thw": torch.cat([s.image_grid_thw for s in samples]),
        "mask_targets": [s.mask_targets for s in samples],
    }
    if any(s.mask_views is not None for s in samples):  # only batches with an examination carry the key
        batch["mask_views"] = [s.mask_views for s in samples]
    segments = [s.segment_ids if s.segment_ids is not None else torch.zeros_like(s.input_ids) for s in samples]
    if any(int(seg.max()) > 1 for seg in segments):
        batch["segment_ids"] = pad(segments, PAD_SEGMENT)
    return batch


class ManifestDataset(torch.utils.data.Dataset):
    """Items encoded on access (images are read lazily): one per (record, conversation), or with `pack=True`
    one per record holding all its conversations as turns on one image prefix. An examination's items hold
    all its views (`encode_exam_turns`), packed or not.

    `items[i]` is (record index, tuple of conversation indices). `augmented(p)` is the same data with a fraction
    p of the single-image items zoomed, shifted and toned (`training.augment`): for training, never validation.
    """

    def __init__(self, manifest_path: str | os.PathLike, processor, num_mask_tokens: int = 16,
                 tasks: Sequence[str] | None = None, pack: bool = False):
        self.augment, self.seed, self._draws = 0.0, 0, {}
        if tasks is not None:
            tasks = (tasks,) if isinstance(tasks, str) else tuple(tasks)
            bad = [t for t in tasks if t not in TASKS]
            if bad:
                raise CollateError(f"tasks {bad!r} are not known; valid tasks: {', '.join(TASKS)}")
        self.manifest_path = manifest_path
        self.processor = processor
        self.num_mask_tokens = int(num_mask_tokens)
        self.pack = bool(pack)
        self.records = read_manifest(manifest_path)
        self.items: list[tuple[int, tuple[int, ...]]] = []
        for r, rec in enumerate(self.records):
            chosen = tuple(c for c, conv in enumerate(rec.conversations) if tasks is None or conv.task in tasks)
            if self.pack and chosen:
                self.items.append((r, chosen))
            elif not self.pack:
                self.items += [(r, (c,)) for c in chosen]
        if not self.items:
            raise CollateError(
                f"{manifest_path}: no conversations{'' if tasks is None else f' for tasks {list(tasks)}'}; "
                "fill them with umind_core.data.conversations.attach_conversations"
            )

    def __len__(self) -> int:
        return len(self.items)

    def augmented(self, fraction: float, seed: int = 0) -> "ManifestDataset":
        """A view of the same records whose items are augmented with probability `fraction`; each item's n-th
        read draws from (seed, item, n), so a run is repeatable and every epoch sees other views."""
        view = copy.copy(self)
        view.augment, view.seed, view._draws = float(fraction), int(seed), {}
        return view

    def _augment(self, index: int, image: np.ndarray, masks: list, conversations: list):
        n = self._draws.get(index, 0)
        self._draws[index] = n + 1
        rng = np.random.default_rng([self.seed, index, n])
        if rng.random() >= self.augment:
            return image, masks, conversations
        image, masks, conversations = augment_record(one_plane(to_uint8(image)), masks, conversations,
                                                     draw(rng, np.shape(image)[:2], masks, conversations))
        return tone(image, rng), masks, conversations

    def __getitem__(self, index: int) -> EncodedSample:
        r, chosen = self.items[index]
        rec = self.records[r]
        conversations = [rec.conversations[c] for c in chosen]
        images = rec.load_images()
        masks = rec.load_view_masks() if any(conv.mask_objects for conv in conversations) else [[]] * len(images)
        try:
            if self.augment > 0 and len(images) == 1:  # a warp moves one image's answers; a view's are not apart
                images[0], masks[0], conversations = self._augment(index, images[0], masks[0], conversations)
            return encode_exam_turns(self.processor, images, conversations, masks, self.num_mask_tokens)
        except CollateError as exc:
            which = f"conversation {chosen[0]}" if len(chosen) == 1 else f"conversations {list(chosen)}"
            raise CollateError(f"record {rec.id!r}, {which}: {exc}") from None

    @property
    def collate_fn(self):
        """`collate` with this processor's pad id, for a DataLoader."""
        pad_id = self.processor.tokenizer.pad_token_id
        if pad_id is None:
            pad_id = self.processor.tokenizer.eos_token_id
        return functools.partial(collate, pad_id=int(pad_id))
