"""Examinations on the training path: several views in one sample, masks decoded against the view they belong to.

Each test builds a two-view examination by hand (two different images, a mask in one of them) and runs the tiny
model; the checks would fail if the mask decoder read the other view's image tokens.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from umind_core.answers import grounding
from umind_core.data.manifest import Conversation
from umind_core.training import IGNORE_INDEX, CollateError, collate, encode_turns
from umind_core.training.collate import encode_exam_turns

from conftest import make_image

SIZE = 128


@pytest.fixture(scope="module")
def model():
    from umind_core.modeling.tiny import build_model

    torch.manual_seed(0)
    return build_model("tiny")


def _views():
    """Two views of one size with different content, and one mask per view (the dark lesion of each)."""
    a, b = make_image(1, SIZE, SIZE, targets=1), make_image(2, SIZE, SIZE, targets=2)
    ma = np.zeros((SIZE, SIZE), bool)
    ma[16:60, 20:64] = True
    mb = np.zeros((SIZE, SIZE), bool)
    mb[60:110, 50:100] = True
    return [a, b], [[ma], [mb]]


def _segment(views: list[int], model) -> Conversation:
    answer = " ".join(f"{grounding.format_view(v + 1)} {grounding.format_mask('lesion', model.num_mask_tokens)}"
                      for v in views)
    return Conversation("segment", [{"role": "user", "content": "Segment the lesion in every view."},
                                    {"role": "assistant", "content": answer}], [0] * len(views), list(views))


def _report() -> Conversation:
    return Conversation("report", [{"role": "user", "content": "Write a structured report for this examination."},
                                   {"role": "assistant", "content": "Site: breast. Size: 12.0 x 9.0 x 7.0 mm."}])


def _batch(model, conversations):
    images, masks = _views()
    sample = encode_exam_turns(model.processor, images, conversations, masks, model.num_mask_tokens)
    return sample, collate([sample], pad_id=int(model.tokenizer.pad_token_id or 0))


def test_exam_sample_has_every_view_in_placeholder_order(model):
    sample, batch = _batch(model, [_segment([1], model)])
    assert sample.image_grid_thw.shape == (2, 3)
    patches = int(sample.image_grid_thw.prod(dim=1).sum())
    assert sample.pixel_values.shape[0] == patches  # both views' patches, concatenated
    spans = model.image_spans(batch["input_ids"], batch["image_grid_thw"])[0]
    assert len(spans) == 2 and spans[0][1] <= spans[1][0]
    # the prefix labels each image with its view marker, and the labels cover only the answer
    text = model.tokenizer.decode(sample.input_ids[: spans[1][0]])
    assert "View 1:" in text and "View 2:" in text
    answer = model.tokenizer.decode(sample.labels[sample.labels != IGNORE_INDEX])
    assert answer.startswith("View 2:")
    assert sample.mask_views.tolist() == [1] and batch["mask_views"][0].tolist() == [1]
    assert sample.mask_targets.shape[0] == 1


def test_mask_target_in_view_2_decodes_against_view_2(model):
    """The mask loss reaches view 2's image tokens and not view 1's: it decoded against view 2's features."""
    _, batch = _batch(model, [_segment([1], model)])
    model.train()
    out = model(**batch)
    assert torch.isfinite(out.loss) and out.mask_loss is not None
    hidden = out.hidden_states
    grads = torch.autograd.grad(out.mask_loss, hidden, retain_graph=True)[0][0]
    (s1, e1, _, _), (s2, e2, _, _) = model.image_spans(batch["input_ids"], batch["image_grid_thw"])[0]
    assert float(grads[s2:e2].abs().sum()) > 0
    assert float(grads[s1:e1].abs().sum()) == 0.0  # a decoder reading view 1 would put gradient here
    model.zero_grad()
    out.loss.backward()
    grad = [p.grad for p in model.mask_decoder.parameters() if p.grad is not None]
    assert grad and all(torch.isfinite(g).all() for g in grad)


def test_mask_target_in_view_1_is_not_read_from_the_last_image(model):
    """Without mask_views the decoder would read the last image before the mask (view 2): wrong for view 1."""
    _, batch = _batch(model, [_segment([0], model)])
    seen = []
    original = model.mask_decoder.decode_image

    def spy(queries, image_states, size):
        seen.append(image_states)
        return original(queries, image_states, size)

    model.mask_decoder.decode_image = spy
    try:
        with torch.no_grad():
            out = model(**batch)
    finally:
        del model.mask_decoder.decode_image
    (s1, e1, gh, gw), _ = model.image_spans(batch["input_ids"], batch["image_grid_thw"])[0]
    assert len(seen) == 1
    assert torch.equal(seen[0], out.hidden_states[0, s1:e1].reshape(gh, gw, -1))


def test_both_views_in_one_answer_and_packed_turns(model):
    """Two mask groups pointing into views 1 and 2, packed with a report turn on the shared exam prefix."""
    sample, batch = _batch(model, [_segment([0, 1], model), _report()])
    assert sample.mask_views.tolist() == [0, 1]
    assert "segment_ids" in batch  # packed: two branches on one prefix
    out = model(**batch)
    assert torch.isfinite(out.loss) and out.mask_logits[0].shape == sample.mask_targets.shape
    out.loss.backward()


def test_exam_conversation_without_mask_views_is_refused(model):
    images, masks = _views()
    conv = _segment([1], model)
    conv.mask_views = []
    with pytest.raises(CollateError, match="mask_views"):
        encode_exam_turns(model.processor, images, [conv], masks, model.num_mask_tokens)


def test_single_image_batches_carry_no_mask_views(model):
    image = make_image(1, SIZE, SIZE)
    mask = np.zeros((SIZE, SIZE), bool)
    mask[10:40, 10:40] = True
    conv = Conversation("segment", [{"role": "user", "content": "Segment the lesion."},
                                    {"role": "assistant", "content": grounding.format_mask("lesion")}], [0])
    sample = encode_turns(model.processor, image, [conv], [mask], model.num_mask_tokens)
    batch = collate([sample], pad_id=0)
    assert sample.mask_views is None and "mask_views" not in batch
    assert sample.image_grid_thw.shape == (1, 3)


@pytest.mark.slow
def test_generated_exam_manifest_trains_packed_and_unpacked(model, tmp_path):
    """`umind synth --exams` output through ManifestDataset: one packed item per examination, every view in it."""
    from umind_core.data.conversations import attach_conversations
    from umind_core.data.exams import write_exam_dataset
    from umind_core.data.manifest import read_manifest
    from umind_core.training import ManifestDataset

    raw = write_exam_dataset(tmp_path, 2, seed0=0, sites=["thyroid", "breast"], size=64)
    manifest = attach_conversations(raw, tmp_path / "train.jsonl", tasks=["segment", "report"])
    exams = read_manifest(manifest)
    packed = ManifestDataset(manifest, model.processor, model.num_mask_tokens, pack=True)
    assert len(packed) == 2
    sample = packed[0]
    assert sample.image_grid_thw.shape[0] == len(exams[0].views) == 3
    assert sample.mask_views is not None and set(sample.mask_views.tolist()) == {0, 1, 2}
    batch = packed.collate_fn([sample])
    out = model(**batch)
    assert torch.isfinite(out.loss) and out.mask_loss is not None
    out.loss.backward()
    unpacked = ManifestDataset(manifest, model.processor, model.num_mask_tokens, tasks=["segment"])
    assert len(unpacked) == sum(1 for e in exams for c in e.conversations if c.task == "segment")
    assert unpacked[0].image_grid_thw.shape[0] == 3


def test_a_record_of_one_view_trains_exactly_as_the_flat_image(model, tmp_path):
    """One record type: the same image written flat and as an ``images`` line of one view is one training
    sample, token for token and pixel for pixel (no view marker, no mask_views), so folding the layouts changed
    nothing a model learns from a single image."""
    import json

    from umind_core.cli import main
    from umind_core.data.conversations import attach_conversations
    from umind_core.training import ManifestDataset

    assert main(["synth", "--out", str(tmp_path), "-n", "2", "--size", "64", "--seed0", "5"]) == 0
    flat = attach_conversations(tmp_path / "manifest.jsonl", tmp_path / "flat.jsonl", tasks=["segment", "detect"])
    nested_lines = []
    for line in flat.read_text().splitlines():
        obj = json.loads(line)
        view = {k: obj.pop(k) for k in ("image", "frame", "spacing", "scan_mask") if k in obj}
        ann = obj.pop("annotations")
        view["annotations"] = {"objects": ann.pop("objects")}
        for conv in obj["conversations"]:
            conv["mask_views"] = [0] * len(conv.get("mask_objects", []))
        nested_lines.append(json.dumps({**obj, "images": [view], "annotations": ann}))
    nested = tmp_path / "nested.jsonl"
    nested.write_text("\n".join(nested_lines) + "\n")
    a = ManifestDataset(flat, model.processor, model.num_mask_tokens, pack=True)
    b = ManifestDataset(nested, model.processor, model.num_mask_tokens, pack=True)
    assert len(a) == len(b) == 2
    for i in range(2):
        x, y = a[i], b[i]
        assert y.mask_views is None and x.mask_views is None
        for name in ("input_ids", "labels", "segment_ids", "pixel_values", "image_grid_thw", "mask_targets"):
            assert torch.equal(getattr(x, name), getattr(y, name)), name
