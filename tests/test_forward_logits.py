"""UMindVL.forward(logits=...): the LM head only where the caller reads it (the prefix and the prompt feed skip the
vocabulary-sized product for positions nobody reads)."""

from __future__ import annotations

import pytest
import torch


def test_last_is_the_last_row_of_all_and_none_skips_the_head(tiny_model_factory):
    model = tiny_model_factory()
    model.eval()
    ids = torch.tensor([[5, 6, 7, 8, 9]])
    calls = []
    handle = model.qwen.lm_head.register_forward_hook(lambda m, i, o: calls.append(tuple(i[0].shape)))
    with torch.no_grad():
        full = model(input_ids=ids, decode_masks=False)
        last = model(input_ids=ids, decode_masks=False, logits="last")
        none = model(input_ids=ids, decode_masks=False, logits="none")
    handle.remove()
    assert full.logits.shape[1] == 5 and last.logits.shape[1] == 1 and none.logits is None
    torch.testing.assert_close(last.logits[:, 0], full.logits[:, -1])
    assert torch.equal(none.hidden_states, full.hidden_states)
    assert [c[1] for c in calls] == [5, 1]  # the head ran on 5 positions, then on 1, then not at all


def test_bad_logits_requests_are_refused(tiny_model_factory):
    model = tiny_model_factory()
    ids = torch.tensor([[5, 6, 7]])
    with pytest.raises(ValueError, match="logits must be 'all', 'last' or 'none'"):
        model(input_ids=ids, logits="first")
    with pytest.raises(ValueError, match="a loss needs every position's logits"):
        model(input_ids=ids, labels=ids, logits="last")
