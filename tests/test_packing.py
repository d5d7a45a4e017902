"""Shared-prefix packing: the attention mask and the positions that make packed turns independent."""

from __future__ import annotations

import pytest
import torch

from umind_core.modeling.packing import packed_attention_mask, packed_position_ids


def test_attention_is_causal_within_a_branch_and_sees_the_prefix_only():
    seg = torch.tensor([[0, 0, 1, 1, 2, 2, 2, -1]])
    m = packed_attention_mask(seg)[0, 0]
    assert m.shape == (8, 8) and m.dtype == torch.bool
    assert m[3].tolist() == [True, True, True, True, False, False, False, False]
    assert m[4].tolist() == [True, True, False, False, True, False, False, False]  # not branch 1
    assert m[6].tolist() == [True, True, False, False, True, True, True, False]
    assert m[1].tolist() == [True, True, False, False, False, False, False, False]  # the prefix sees no branch
    assert m[7].tolist() == [False] * 7 + [True]  # padding: itself only, never an empty row
    assert not m[:7, 7].any()


def test_branches_restart_where_the_first_one_starts():
    seg = torch.tensor([[0, 0, 0, 1, 1, 2, 2, 2, -1, -1]])
    pos = torch.arange(10).view(1, 1, -1).expand(3, 1, -1).clone()
    pos[1:, 0, 1] = 7  # an image token has its own row/column positions: the prefix is left alone
    out = packed_position_ids(pos, seg)
    assert out[0, 0].tolist() == [0, 1, 2, 3, 4, 3, 4, 5, 8, 9]
    assert out[1, 0, 1] == 7 and torch.equal(out[:, :, 5:8], pos[:, :, 3:6])


def test_bad_segments_are_refused():
    with pytest.raises(ValueError, match="not contiguous"):
        packed_position_ids(torch.zeros(3, 1, 5, dtype=torch.long), torch.tensor([[0, 1, 2, 1, 2]]))
    with pytest.raises(ValueError, match="do not fit"):
        packed_position_ids(torch.zeros(3, 1, 4, dtype=torch.long), torch.tensor([[0, 1, 1]]))
    with pytest.raises(ValueError, match="batch, length"):
        packed_attention_mask(torch.tensor([0, 1]))
