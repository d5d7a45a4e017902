"""UMindVL on the tiny Qwen3-VL: losses, what trains and what stays frozen, and that it learns."""

from __future__ import annotations

import pytest
import torch

from conftest import CHAT, make_image, mask_sample
from umind_core.answers import grounding


def test_grounding_tokens_reuse_existing_ids_and_add_the_rest(tiny_model_factory):
    model = tiny_model_factory()
    ids = model.token_ids
    assert set(ids) == set(grounding.GROUNDING_TOKENS)
    vocab_before = model.config.added_token_ids
    # the tiny tokenizer, like Qwen's, already has the box and object-ref tokens
    for tok in (grounding.BOX_START, grounding.BOX_END, grounding.REF_START, grounding.REF_END):
        assert ids[tok] not in vocab_before
    added = {grounding.POINT_START, grounding.POINT_END, grounding.LINE_START, grounding.LINE_END, grounding.SEG_MASK}
    assert sorted(ids[t] for t in added) == sorted(vocab_before)
    # each token encodes to exactly its id, and the embeddings cover every id
    for tok, i in ids.items():
        assert model.tokenizer(tok, add_special_tokens=False)["input_ids"] == [i]
    assert model.qwen.get_input_embeddings().weight.shape[0] >= len(model.tokenizer)


def test_digits_are_single_tokens(tiny_model_factory):
    tok = tiny_model_factory().tokenizer
    pieces = tok.convert_ids_to_tokens(tok("(1024,987)", add_special_tokens=False)["input_ids"])
    assert pieces == ["(", "1", "0", "2", "4", ",", "9", "8", "7", ")"]


def test_forward_with_masks_returns_both_losses(tiny_model_factory):
    model = tiny_model_factory()
    enc, labels, targets = mask_sample(model, targets=2)
    out = model(**enc, labels=labels, mask_targets=targets)
    assert out.lm_loss is not None and out.mask_loss is not None
    assert torch.isfinite(out.loss) and out.loss.item() > 0
    torch.testing.assert_close(out.loss, out.lm_loss + out.mask_loss)
    assert [tuple(m.shape) for m in out.mask_logits] == [(2, 256, 256)]
    assert out.logits.shape[:2] == enc["input_ids"].shape


def test_gradients_reach_lora_decoder_and_new_rows_but_not_frozen_base(tiny_model_factory):
    model = tiny_model_factory()
    model.train()
    enc, labels, targets = mask_sample(model)
    model(**enc, labels=labels, mask_targets=targets).loss.backward()
    groups = {"lora": [], "decoder": [], "tokens": [], "frozen": []}
    for name, p in model.named_parameters():
        if "lora_" in name:
            groups["lora"].append((name, p))
        elif name.startswith("mask_decoder."):
            groups["decoder"].append((name, p))
        elif "trainable_tokens_delta" in name:
            groups["tokens"].append((name, p))
        else:
            groups["frozen"].append((name, p))
    assert all(groups.values()), {k: len(v) for k, v in groups.items()}
    # LoRA B starts at zero, so A gets no gradient on step one; B must
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for n, p in groups["lora"] if "lora_B" in n)
    assert any("language_model" in n for n, _ in groups["lora"]) and any("visual.merger" in n for n, _ in groups["lora"])
    for name, p in groups["decoder"]:
        assert p.grad is not None and p.grad.abs().sum() > 0, name
    (name, delta), = groups["tokens"]
    assert delta.grad is not None
    # only the rows of tokens that occur in the answer get a gradient; seg_mask and the object ref do
    seg_row = model.config.added_token_ids.index(model.seg_mask_id)
    assert delta.grad[seg_row].abs().sum() > 0
    for name, p in groups["frozen"]:
        assert not p.requires_grad and p.grad is None, name


def test_thirty_steps_halve_both_losses(tiny_model_factory):
    torch.manual_seed(0)
    model = tiny_model_factory()
    model.train()
    enc, labels, targets = mask_sample(model)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=5e-3)
    first = None
    for _ in range(30):
        out = model(**enc, labels=labels, mask_targets=targets)
        if first is None:
            first = (out.lm_loss.item(), out.mask_loss.item())
        opt.zero_grad()
        out.loss.backward()
        opt.step()
    with torch.no_grad():
        last = model(**enc, labels=labels, mask_targets=targets)
    assert last.lm_loss.item() < first[0] / 2, (first, last.lm_loss.item())
    assert last.mask_loss.item() < first[1] / 2, (first, last.mask_loss.item())


def test_batch_of_images_of_different_sizes(tiny_model_factory):
    model = tiny_model_factory()
    mask = "<|object_ref_start|>lesion<|object_ref_end|>" + "<|seg_mask|>" * 16
    texts = [CHAT.format(prompt="a") + mask, CHAT.format(prompt="segment two") + mask + mask]
    images = [make_image(0, 256, 256), make_image(1, 180, 360)]
    enc = model.processor(images=images, text=texts, return_tensors="pt", padding=True)
    spans = model.image_spans(enc["input_ids"], enc["image_grid_thw"])
    grids = enc["image_grid_thw"].tolist()
    assert [(s[0][2], s[0][3]) for s in spans] == [(g[1] // 2, g[2] // 2) for g in grids]
    assert grids[0] != grids[1]
    with torch.no_grad():
        out = model(**enc)
    sizes = [(g[1] * 16, g[2] * 16) for g in grids]
    assert [tuple(m.shape) for m in out.mask_logits] == [(1, *sizes[0]), (2, *sizes[1])]
    # padding must not change a sample's masks: sample 0 alone gives the same logits
    alone = model.processor(images=images[:1], text=texts[:1], return_tensors="pt")
    with torch.no_grad():
        single = model(**alone)
    torch.testing.assert_close(single.mask_logits[0], out.mask_logits[0], rtol=1e-4, atol=1e-4)


def test_incomplete_mask_group_and_target_count_mismatch_are_named(tiny_model_factory):
    model = tiny_model_factory()
    img = make_image()
    enc = model.processor(images=[img], text=[CHAT.format(prompt="x") + "<|seg_mask|>" * 7], return_tensors="pt")
    with pytest.raises(ValueError, match="run of 7"):
        model(**enc)
    enc, labels, targets = mask_sample(model, targets=1)
    with pytest.raises(ValueError, match="1 mask groups but 2 mask targets"):
        model(**enc, labels=labels, mask_targets=[torch.zeros(2, 256, 256)])


def test_full_training_mode_trains_every_weight(tiny_model_factory):
    model = tiny_model_factory(lora=None)
    assert model.peft_model is None
    counts = model.parameter_counts()
    assert counts["trainable"] == counts["total"] and counts["lora"] == 0


def _distinct_numel(params) -> int:
    seen = {id(p): p.numel() for p in params}
    return sum(seen.values())


def test_parameter_counts_match_an_independent_count(tiny_model_factory):
    """Each part counted a second way: LoRA by hand from the config (r x (in + out) for every adapted linear
    layer), the base from the same model built without LoRA, the decoder from its own modules."""
    model = tiny_model_factory()
    tc, vc = model.qwen.config.text_config, model.qwen.config.vision_config
    D, r = tc.hidden_size, model.config.lora.r
    q, kv, ff = tc.num_attention_heads * tc.head_dim, tc.num_key_value_heads * tc.head_dim, tc.intermediate_size
    per_layer = (D + q) + 2 * (D + kv) + (q + D) + 2 * (D + ff) + (ff + D)  # q, k, v, o, gate, up, down
    merged = vc.hidden_size * vc.spatial_merge_size ** 2  # the vision merger: merged -> merged -> out_hidden
    lora = r * (tc.num_hidden_layers * per_layer + (merged + merged) + (merged + vc.out_hidden_size))
    tokens = len(model.config.added_token_ids) * D  # one trainable embedding row per added token
    base = _distinct_numel(tiny_model_factory(lora=None).qwen.parameters())
    kinds = [type(m).__name__ for m in model.mask_decoder.modules() if len(list(m.parameters(recurse=False)))]
    assert sorted(kinds) == ["LayerNorm", "Linear", "Linear", "Linear"]  # three linear layers and one LayerNorm
    decoder = _distinct_numel(model.mask_decoder.parameters())
    assert model.parameter_counts() == {
        "total": base + decoder + lora + tokens, "trainable": decoder + lora + tokens, "decoder": decoder,
        "lora": lora, "trainable_tokens": tokens, "base": base}


def test_patch_embedding_as_matmul_equals_the_stock_conv3d_and_reads_its_live_weight(tiny_model_factory):
    """At inference the vision patch embedding runs as one matrix product (modeling/speedups/patch_embed.py): the same
    numbers as transformers' Conv3d on the processor's flattened patches, from the conv's own weight at call
    time; a module it does not fit is left alone."""
    from umind_core.modeling.speedups.patch_embed import patch_embed_as_matmul

    model = tiny_model_factory().eval()
    embed = model.qwen.model.visual.patch_embed
    assert "forward" in vars(embed) and not embed.training  # UMindVL installed it; eval mode takes it
    conv = embed.proj
    patches = torch.randn(37, conv.weight[0].numel())
    with torch.no_grad():
        stock = conv(patches.view(-1, *conv.weight.shape[1:])).view(37, -1)
        torch.testing.assert_close(embed(patches), stock, rtol=1e-5, atol=1e-5)
        conv.weight.mul_(2.0)
        try:
            torch.testing.assert_close(embed(patches), conv(patches.view(-1, *conv.weight.shape[1:])).view(37, -1),
                                       rtol=1e-5, atol=1e-5)
        finally:
            conv.weight.div_(2.0)
    padded = torch.nn.Module()
    padded.proj = torch.nn.Conv3d(3, 4, (2, 4, 4), stride=(2, 4, 4), padding=1)
    holder = type("Q", (), {})()
    holder.model = type("M", (), {})()
    holder.model.visual = type("V", (), {})()
    holder.model.visual.patch_embed = padded
    assert patch_embed_as_matmul(holder) is False and "forward" not in vars(padded)
