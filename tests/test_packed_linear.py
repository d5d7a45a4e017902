"""Projections through oneDNN-packed weights (umind_core/inference/packed_linear.py): the same products as
F.linear, a row's result independent of the rows beside it, and plain weights wherever packing is not wanted."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from umind_core.inference import fast_decode, packed_linear
from umind_core.inference.packed_linear import PackedWeight, linear, unpackable_reason


def _weight_and_bias(out_features=1536, in_features=256):
    gen = torch.Generator().manual_seed(0)
    return (torch.randn(out_features, in_features, generator=gen) * 0.05,
            torch.randn(out_features, generator=gen) * 0.1)


@pytest.fixture
def packable():
    weight, bias = _weight_and_bias()
    reason = unpackable_reason([weight])
    if reason is not None:
        pytest.skip(f"oneDNN packing unavailable here ({reason}); a CPU build of torch with oneDNN runs this")
    return weight, bias


@pytest.mark.parametrize("rows", [1, 3, 8, 64, 496])
def test_packed_product_equals_f_linear_and_a_row_ignores_its_neighbours(packable, rows):
    weight, bias = packable
    packed = PackedWeight(weight)
    x = torch.randn(rows, 1, weight.shape[1], generator=torch.Generator().manual_seed(rows))
    for b in (None, bias):
        got, ref = linear(x, packed, b), F.linear(x, weight, b)
        assert got.shape == ref.shape
        torch.testing.assert_close(got, ref, atol=1e-5, rtol=1e-5)
        # the property a batch relies on: row 0 alone is bit for bit row 0 among the others
        assert torch.equal(linear(x[:1], packed, b)[0], got[0])


def test_weights_that_should_not_be_packed_stay_plain(monkeypatch):
    weight, bias = _weight_and_bias(64, 32)
    assert unpackable_reason([weight.bfloat16()]) == "not float32"
    assert unpackable_reason([]) == "no weights"
    monkeypatch.setattr(packed_linear, "MAX_PACKED_BYTES", weight.numel() * 4 - 1)
    assert "MiB of weights" in unpackable_reason([weight])
    x = torch.randn(3, 32)
    assert torch.equal(linear(x, weight, bias), F.linear(x, weight, bias))


def test_lean_path_packs_its_projections_and_the_step_graph_keeps_plain_ones(trained_tiny, monkeypatch):
    weights = fast_decode.DecodeWeights(trained_tiny)
    layer = weights.layers[0]
    assert all(isinstance(t, torch.Tensor) for t in (weights.lm_head, layer.wqkv, layer.wo, layer.wgu, layer.wdown))
    if weights.unpacked_reason is not None:
        pytest.skip(f"oneDNN packing unavailable here ({weights.unpacked_reason})")
    eager = weights.eager
    assert all(isinstance(t, PackedWeight) for t in (eager.lm_head, eager.layers[0].wqkv, eager.layers[-1].wdown))
    assert eager.layers[0].wqkv.weight is layer.wqkv and eager.layers[0].qk_norm is layer.qk_norm
    assert eager.eager is eager and eager.unpacked_reason is None
    monkeypatch.setattr(packed_linear, "MAX_PACKED_BYTES", 0)
    plain = fast_decode.DecodeWeights(trained_tiny)
    assert plain.eager is plain and "MiB of weights" in plain.unpacked_reason
