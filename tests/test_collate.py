"""Encoding conversations into teacher-forced tensors, batching them, and running them through UMindVL."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from umind_core.answers import grounding
from umind_core.data.conversations import attach_conversations
from umind_core.data.manifest import Conversation, read_manifest, write_synthetic_dataset
from umind_core.prompts import ASSISTANT_END, chat_prompt
from umind_core.training import (
    IGNORE_INDEX,
    CollateError,
    EncodedSample,
    ManifestDataset,
    collate,
    encode_sample,
    encode_turns,
    to_rgb_uint8,
)


@pytest.fixture(scope="module")
def model():
    from umind_core.modeling.tiny import build_model

    return build_model("tiny")


@pytest.fixture(scope="module")
def manifest(tmp_path_factory):
    raw = write_synthetic_dataset(tmp_path_factory.mktemp("syn"), n=8, size=128, progress=False)
    return attach_conversations(raw, raw.parent / "train.jsonl", seed=0)


@pytest.fixture(scope="module")
def records(manifest):
    return read_manifest(manifest)


def _first(records, task, with_masks=None):
    for rec in records:
        for c in rec.conversations:
            if c.task == task and (with_masks is None or bool(c.mask_objects) == with_masks):
                return rec, c
    raise LookupError(task)


def _thyroid_two_masks(records):
    """A conversation with two mask groups: segment both objects of a thyroid record (nodule, lobe)."""
    rec = next(r for r in records if r.site == "thyroid" and len(r.annotations.objects) == 2)
    labels = [o.label for o in rec.annotations.objects]
    answer = " ".join(grounding.format_mask(lb) for lb in labels)
    conv = Conversation("segment", [{"role": "user", "content": "Segment the thyroid and its nodule."},
                                    {"role": "assistant", "content": answer}], [0, 1])
    return rec, conv


def _encode(model, rec, conv, image=None, masks=None):
    image = to_rgb_uint8(rec.load_image()) if image is None else image
    masks = rec.load_masks() if masks is None else masks
    return encode_sample(model.processor, image, conv, masks, model.num_mask_tokens)


def test_labels_cover_exactly_the_answer_and_its_end_token(model, records):
    tok = model.tokenizer
    for task in ("segment", "detect", "measure", "diagnose", "report", "ask"):
        rec, conv = _first(records, task)
        s = _encode(model, rec, conv)
        answer = conv.messages[1]["content"] + ASSISTANT_END
        labelled = (s.labels != IGNORE_INDEX).nonzero().flatten()
        n = len(labelled)
        assert labelled.tolist() == list(range(len(s.input_ids) - n, len(s.input_ids)))  # one suffix
        assert torch.equal(s.labels[-n:], s.input_ids[-n:])
        assert tok.decode(s.labels[-n:]) == answer
        # the prompt part is what the processor makes of chat_prompt, which is what the Predictor sends
        enc = model.processor(images=[to_rgb_uint8(rec.load_image())],
                              text=[chat_prompt(conv.messages[0]["content"])], return_tensors="pt")
        assert torch.equal(s.input_ids[:-n], enc["input_ids"][0])
        assert s.input_ids.dtype == s.labels.dtype == torch.long
        assert s.attention_mask.tolist() == [1] * len(s.input_ids)
        t, h, w = s.image_grid_thw[0].tolist()
        assert s.mm_token_type_ids.sum().item() == (s.input_ids == model.image_token_id).sum().item() == t * h * w // 4
        assert s.pixel_values.shape[0] == t * h * w
        assert (s.mask_targets is None) == (not conv.mask_objects)


def test_mask_targets_are_the_referenced_masks_at_the_processed_size(model, records):
    rec, conv = _thyroid_two_masks(records)
    s = _encode(model, rec, conv)
    _, gh, gw = s.image_grid_thw[0].tolist()
    assert s.mask_targets.shape == (2, gh * 16, gw * 16) and s.mask_targets.dtype == torch.float32
    assert set(s.mask_targets.unique().tolist()) <= {0.0, 1.0}
    masks = rec.load_masks()
    for k in range(2):
        assert abs(s.mask_targets[k].mean().item() - masks[k].mean()) < 0.01
    # order follows mask_objects
    swapped = Conversation(conv.task, conv.messages, [1, 0])
    s2 = _encode(model, rec, swapped)
    assert torch.equal(s2.mask_targets, s.mask_targets.flip(0))


def test_batch_of_different_sizes_pads_right_and_trains(model, records):
    rec_a, conv_a = _thyroid_two_masks(records)
    rec_b, conv_b = _first(records, "segment", with_masks=True)
    rec_c, conv_c = _first(records, "diagnose")
    img_b = to_rgb_uint8(rec_b.load_image())[:, :96]
    masks_b = [m[:, :96] for m in rec_b.load_masks()]
    samples = [_encode(model, rec_a, conv_a), _encode(model, rec_b, conv_b, img_b, masks_b),
               _encode(model, rec_c, conv_c)]
    assert samples[0].image_grid_thw.tolist() != samples[1].image_grid_thw.tolist()
    pad = model.tokenizer.pad_token_id
    batch = collate(samples, pad)
    lengths = [len(s.input_ids) for s in samples]
    assert len(set(lengths)) > 1 and batch["input_ids"].shape == (3, max(lengths))
    for b, (s, n) in enumerate(zip(samples, lengths)):
        assert torch.equal(batch["input_ids"][b, :n], s.input_ids)
        assert (batch["input_ids"][b, n:] == pad).all()
        assert batch["attention_mask"][b, :n].all() and not batch["attention_mask"][b, n:].any()
        assert (batch["labels"][b, n:] == IGNORE_INDEX).all() and torch.equal(batch["labels"][b, :n], s.labels)
        assert not batch["mm_token_type_ids"][b, n:].any()
    assert batch["pixel_values"].shape[0] == sum(s.pixel_values.shape[0] for s in samples)
    assert batch["image_grid_thw"].shape == (3, 3)
    assert [None if t is None else t.shape[0] for t in batch["mask_targets"]] == [2, 1, None]

    out = model(**batch)
    assert torch.isfinite(out.lm_loss) and out.lm_loss.item() > 0
    assert torch.isfinite(out.mask_loss) and out.mask_loss.item() > 0
    assert [tuple(m.shape) for m in out.mask_logits[:2]] == [tuple(t.shape) for t in batch["mask_targets"][:2]]
    out.loss.backward()
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in model.mask_decoder.parameters())


def test_dataset_yields_every_conversation_and_batches(model, manifest, records):
    ds = ManifestDataset(manifest, model.processor, model.num_mask_tokens)
    assert len(ds) == sum(len(r.conversations) for r in records)
    seg = ManifestDataset(manifest, model.processor, model.num_mask_tokens, tasks=["segment"])
    assert 0 < len(seg) < len(ds)
    item = seg[0]
    assert isinstance(item, EncodedSample) and item.mask_targets is not None
    loader = torch.utils.data.DataLoader(seg, batch_size=2, collate_fn=seg.collate_fn)
    batch = next(iter(loader))
    assert batch["input_ids"].shape[0] == 2 and len(batch["mask_targets"]) == 2
    with pytest.raises(CollateError, match="no conversations; fill them with"):
        ManifestDataset(manifest.parent / "manifest.jsonl", model.processor)
    only_detect = attach_conversations(manifest.parent / "manifest.jsonl", manifest.parent / "d.jsonl",
                                       tasks=["detect"])
    with pytest.raises(CollateError, match=r"no conversations for tasks \['report'\]"):
        ManifestDataset(only_detect, model.processor, tasks=["report"])
    with pytest.raises(CollateError, match="not known"):
        ManifestDataset(manifest, model.processor, tasks=["classify"])


def _conv(answer, mask_objects=(), roles=("user", "assistant")):
    contents = ["Segment the lesion.", answer]
    return Conversation("segment", [{"role": r, "content": c} for r, c in zip(roles, contents)], list(mask_objects))


@pytest.mark.parametrize("make, words", [
    (lambda: _conv(grounding.format_mask("a")), "1 mask groups but mask_objects names 0"),
    (lambda: _conv("Benign.", [0]), "0 mask groups but mask_objects names 1"),
    (lambda: _conv(grounding.format_mask("a"), [3]), "refers to object 3"),
    (lambda: _conv(grounding.format_mask("a", n_tokens=5), [0]), "run of 5"),
    (lambda: _conv("x", roles=("assistant", "user")), "one user turn then one assistant turn"),
    (lambda: _conv("x" + ASSISTANT_END), "must not contain chat or image tokens"),
    (lambda: _conv("   "), "assistant content must be a non-empty str"),
])
def test_encode_errors(model, make, words):
    img = np.zeros((64, 64, 3), np.uint8)
    with pytest.raises(CollateError, match=words):
        encode_sample(model.processor, img, make(), [np.ones((64, 64), bool)], model.num_mask_tokens)


def test_mask_problems_are_named(model):
    img = np.zeros((64, 64, 3), np.uint8)
    conv = _conv(grounding.format_mask("a"), [0])
    with pytest.raises(CollateError, match=r"mask of object 0 is \(32, 64\), the image is \(64, 64\)"):
        encode_sample(model.processor, img, conv, [np.ones((32, 64), bool)])
    with pytest.raises(CollateError, match="object 0 is referenced by a mask but has no mask"):
        encode_sample(model.processor, img, conv, [None])


def test_image_conversion_and_collate_errors():
    grey = np.arange(12, dtype=np.uint8).reshape(3, 4)
    rgb = to_rgb_uint8(grey)
    assert rgb.shape == (3, 4, 3) and (rgb[..., 2] == grey).all()
    assert to_rgb_uint8(np.full((2, 2), 65535, np.uint16)).max() == 255
    with pytest.raises(CollateError, match="dtype float32"):
        to_rgb_uint8(np.zeros((4, 4), np.float32))
    with pytest.raises(CollateError, match="shape"):
        to_rgb_uint8(np.zeros((4, 4, 2), np.uint8))
    with pytest.raises(CollateError, match="at least one sample"):
        collate([], 0)
    with pytest.raises(CollateError, match="pad_id"):
        collate([object()], -1)
    with pytest.raises(CollateError, match=r"samples\[0\] must be an EncodedSample"):
        collate([object()], 0)


# ------------------------------------------------------------------------------------------ packing

def test_packed_turns_compute_what_separate_samples_compute(model, records):
    """All conversations of an image on one shared prefix: each turn's logits and masks as if it were alone."""
    rec = next(r for r in records if r.site == "thyroid")
    img, masks = to_rgb_uint8(rec.load_image()), rec.load_masks()
    convs = rec.conversations
    assert len(convs) >= 5 and any(c.mask_objects for c in convs)
    packed = encode_turns(model.processor, img, convs, masks, model.num_mask_tokens)
    singles = [encode_sample(model.processor, img, c, masks, model.num_mask_tokens) for c in convs]
    pad = model.tokenizer.pad_token_id
    prefix = int((packed.segment_ids == 0).sum())
    assert len(packed.input_ids) == prefix + sum(len(s.input_ids) - prefix for s in singles)
    assert torch.equal(torch.cat([s.labels[prefix:] for s in singles]), packed.labels[prefix:])
    model.eval()
    with torch.no_grad():
        batch = collate([packed], pad)
        assert batch["segment_ids"].shape == batch["input_ids"].shape
        out_p = model(**batch)
        out_s = model(**collate(singles, pad))
    for k, s in enumerate(singles, start=1):
        where = torch.nonzero(packed.segment_ids == k).flatten()
        n = len(where)
        assert torch.allclose(out_p.logits[0, where], out_s.logits[k - 1, len(s.input_ids) - n:len(s.input_ids)],
                              atol=1e-5)
    separate = torch.cat([m for m in out_s.mask_logits if m.numel()])  # logits of order 1; float32 noise ~1e-4
    assert out_p.mask_logits[0].shape == separate.shape and torch.allclose(out_p.mask_logits[0], separate, atol=1e-3)
    assert torch.equal(packed.mask_targets, torch.cat([s.mask_targets for s in singles if s.mask_targets is not None]))


def test_one_turn_batches_carry_no_segments_and_padding_never_leaks(model, records):
    rec = records[0]
    img, masks = to_rgb_uint8(rec.load_image()), rec.load_masks()
    single = encode_sample(model.processor, img, rec.conversations[0], masks, model.num_mask_tokens)
    packed = encode_turns(model.processor, img, rec.conversations[:3], masks, model.num_mask_tokens)
    pad = model.tokenizer.pad_token_id
    assert "segment_ids" not in collate([single], pad)
    batch = collate([single, packed], pad)  # the single sample is padded
    seg, n = batch["segment_ids"], len(single.input_ids)
    assert (seg[0, n:] == -1).all() and torch.equal(seg[0, :n], single.segment_ids)
    assert set(single.segment_ids.tolist()) == {0, 1}
    model.train()
    out = model(**batch)
    out.loss.backward()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    assert grads and all(torch.isfinite(g).all() for g in grads)
    model.zero_grad(set_to_none=True)
    model.eval()


def test_packed_dataset_has_one_item_per_record(model, manifest):
    per_turn = ManifestDataset(manifest, model.processor, model.num_mask_tokens)
    packed = ManifestDataset(manifest, model.processor, model.num_mask_tokens, pack=True)
    assert len(packed) == len(packed.records) < len(per_turn)
    assert sum(len(c) for _, c in packed.items) == len(per_turn)
    sample = packed[0]
    assert int(sample.segment_ids.max()) == len(packed.items[0][1])
    only = ManifestDataset(manifest, model.processor, model.num_mask_tokens, tasks=["diagnose"], pack=True)
    assert all(len(c) == 1 for _, c in only.items)
    with pytest.raises(CollateError, match="at least one conversation"):
        encode_turns(model.processor, to_rgb_uint8(packed.records[0].load_image()), [])


def test_to_uint8_keeps_the_planes_and_to_rgb_uint8_repeats_a_grey_one():
    """Augmentation reads a grey scan through `to_uint8` (one plane, no RGB copy); the encoder's RGB is the same
    pixels repeated, uint16 scaled down and alpha dropped on both paths."""
    from umind_core.training.collate import to_rgb_uint8, to_uint8

    grey = np.arange(35, dtype=np.uint16).reshape(5, 7) * 1000
    assert to_uint8(grey).shape == (5, 7) and np.array_equal(to_uint8(grey), (grey >> 8).astype(np.uint8))
    assert np.array_equal(to_rgb_uint8(grey), np.repeat(to_uint8(grey)[..., None], 3, axis=2))
    rgba = np.random.default_rng(0).integers(0, 255, (4, 4, 4)).astype(np.uint8)
    assert np.array_equal(to_uint8(rgba), rgba[..., :3]) and np.array_equal(to_rgb_uint8(rgba), rgba[..., :3])
    with pytest.raises(CollateError, match="H x W"):
        to_uint8(np.zeros((4, 4, 2), np.uint8))
