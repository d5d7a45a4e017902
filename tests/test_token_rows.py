"""The adapter's grounding-token rows merged once per change (umind_core/modeling/speedups/token_rows.py): the same logits
as peft's per-forward merge, no vocabulary-sized copy per forward at inference, and the rows still learn."""

from __future__ import annotations

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from umind_core.modeling.speedups.token_rows import embedding_weight, keep_merged_token_rows


class _VocabCopies(TorchDispatchMode):
    """Counts the ops that write a tensor of the vocabulary matrix's size (index_copy of the merge)."""

    def __init__(self, rows: int):
        super().__init__()
        self.rows, self.count = rows, 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func in (torch.ops.aten.index_copy.default, torch.ops.aten.copy_.default) and \
                isinstance(out, torch.Tensor) and out.dim() == 2 and out.shape[0] == self.rows:
            self.count += 1
        return out


def _lora_model(tiny_model_factory):
    from umind_core.modeling.config import LoraSettings

    model = tiny_model_factory(lora=LoraSettings())
    with torch.no_grad():  # rows unlike the base's, so a merge that is skipped or stale shows in the logits
        for p in model.qwen.parameters():
            if p.requires_grad and p.dim() == 2 and p.shape[0] == len(model.config.added_token_ids):
                p.add_(torch.randn_like(p))
    return model


def _logits(model, ids):
    return model.qwen(input_ids=ids).logits


def test_inference_reuses_the_merge_and_answers_as_peft(tiny_model_factory):
    model = _lora_model(tiny_model_factory)
    rows = embedding_weight(model.qwen).shape[0]
    ids = torch.tensor([[1, 2, *model.config.added_token_ids[:2], 3]])
    with torch.no_grad():
        first = _logits(model, ids)
        spy = _VocabCopies(rows)
        with spy:
            again = _logits(model, ids)
            _ = model.device, model.dtype
    assert spy.count == 0  # nothing copied the vocabulary matrix the second time
    assert torch.equal(first, again)
    # peft's own path (the wrapper's original merge) gives the same logits, bit for bit
    for module in model.qwen.modules():
        if hasattr(module, "_umind_merged_weights"):
            module.get_merged_weights = module._umind_merged_weights
    with torch.no_grad():
        assert torch.equal(_logits(model, ids), first)


def test_a_changed_row_is_seen_and_training_still_reaches_the_rows(tiny_model_factory):
    model = _lora_model(tiny_model_factory)
    ids = torch.tensor([[1, *model.config.added_token_ids[:3], 2]])
    with torch.no_grad():
        before = _logits(model, ids)
    deltas = [p for n, p in model.qwen.named_parameters() if "trainable_tokens_delta" in n]
    assert deltas and all(d.requires_grad for d in deltas)
    loss = _logits(model, ids).float().pow(2).mean()  # with gradients: peft's path, so the rows get a gradient
    loss.backward()
    assert any(d.grad is not None and d.grad.abs().sum() > 0 for d in deltas)
    with torch.no_grad():
        for d in deltas:
            d.add_(1.0)  # an optimizer step, in place: the kept merge is stale and must be rebuilt
        after = _logits(model, ids)
    assert not torch.allclose(before, after)


def test_idempotent_and_a_model_without_token_rows_is_left_alone(tiny_model_factory):
    from umind_core.modeling.config import LoraSettings

    model = tiny_model_factory(lora=LoraSettings())
    assert keep_merged_token_rows(model.qwen) == 0  # done once when the adapter was attached
    plain = tiny_model_factory(lora=None)
    assert keep_merged_token_rows(plain.qwen) == 0
    assert embedding_weight(plain.qwen) is plain.qwen.get_input_embeddings().weight
