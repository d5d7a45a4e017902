"""The Dynamic Conv Mask Decoder: exactly the report's learnable parts, and a true pair of dynamic deconvolutions."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from umind_core.modeling.mask_decoder import DynamicConvMaskDecoder


def reference_decode(dec: DynamicConvMaskDecoder, queries, features, size):
    """The same computation with torch's conv_transpose2d, one target at a time (the slow, obvious way)."""
    n, c, k = dec.num_queries, dec.channels, dec.kernel_size
    h0 = dec.proj_img(features).permute(2, 0, 1)[None]  # 1, C, H, W
    outs = []
    for q in queries:
        w1 = dec.proj_ker1(q).view(n, c, k, k).permute(1, 0, 2, 3)  # in=C, out=N
        h1 = F.conv_transpose2d(h0, w1, stride=k)
        h1 = F.layer_norm(h1.permute(0, 2, 3, 1), (n,), dec.norm.weight, dec.norm.bias, dec.norm.eps).permute(0, 3, 1, 2)
        w2 = dec.proj_ker2(q).view(n, 1, k, k)  # in=N, out=1
        h2 = F.conv_transpose2d(h1, w2, stride=k)
        outs.append(F.interpolate(h2, size=size, mode="bilinear", align_corners=False)[0, 0])
    return torch.stack(outs)


def test_learnable_parts_are_three_linears_and_one_layernorm():
    dec = DynamicConvMaskDecoder(hidden_size=64, num_queries=16, channels=128)
    learnable = [m for m in dec.modules() if any(p.requires_grad for p in m.parameters(recurse=False))]
    kinds = sorted(type(m).__name__ for m in learnable)
    assert kinds == ["LayerNorm", "Linear", "Linear", "Linear"]
    assert sum(isinstance(m, nn.Linear) for m in dec.modules()) == 3
    assert sum(isinstance(m, nn.LayerNorm) for m in dec.modules()) == 1
    own = sum(p.numel() for m in learnable for p in m.parameters(recurse=False))
    assert own == sum(p.numel() for p in dec.parameters())
    # Proj_img D->C, Proj_ker1 D->C*2*2, LayerNorm over N, Proj_ker2 D->2*2
    assert dec.proj_img.out_features == 128
    assert dec.proj_ker1.out_features == 128 * 4
    assert dec.proj_ker2.out_features == 4
    assert dec.norm.normalized_shape == (16,)


def test_matches_dynamic_transposed_convolutions():
    torch.manual_seed(0)
    dec = DynamicConvMaskDecoder(hidden_size=32, num_queries=16, channels=8)
    queries = torch.randn(3, 16, 32)
    features = torch.randn(5, 7, 32)
    got = dec.decode_image(queries, features, (37, 51))
    want = reference_decode(dec, queries, features, (37, 51))
    assert got.shape == (3, 37, 51)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_several_images_of_different_sizes_and_target_counts():
    torch.manual_seed(1)
    dec = DynamicConvMaskDecoder(hidden_size=32, num_queries=16, channels=8)
    qs = [torch.randn(2, 16, 32), torch.randn(0, 16, 32), torch.randn(1, 16, 32)]
    fs = [torch.randn(4, 4, 32), torch.randn(3, 5, 32), torch.randn(6, 2, 32)]
    sizes = [(64, 64), (48, 80), (96, 32)]
    outs = dec(qs, fs, sizes)
    assert [tuple(o.shape) for o in outs] == [(2, 64, 64), (0, 48, 80), (1, 96, 32)]
    # each image's targets depend on that image only
    torch.testing.assert_close(outs[2], dec.decode_image(qs[2], fs[2], sizes[2]))
    # the 2x2 grid growth before interpolation: H0 4x4 -> H2 16x16, so a 16x16 request is not interpolated away
    raw = dec.decode_image(qs[0], fs[0], (16, 16))
    assert raw.shape == (2, 16, 16) and dec.upsample_factor == 4


def test_gradients_reach_all_four_parts():
    dec = DynamicConvMaskDecoder(hidden_size=16, num_queries=16, channels=4)
    out = dec.decode_image(torch.randn(2, 16, 16), torch.randn(3, 3, 16), (12, 12))
    out.sum().backward()
    for name, p in dec.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name


@pytest.mark.parametrize(
    "queries,features,size,message",
    [
        (torch.randn(2, 8, 16), torch.randn(3, 3, 16), (8, 8), "mask queries must have shape"),
        (torch.randn(2, 16, 16), torch.randn(9, 16), (8, 8), "image features must have shape"),
        (torch.randn(2, 16, 16), torch.randn(3, 3, 16), (0, 8), "output size must be positive"),
    ],
)
def test_bad_shapes_name_the_problem(queries, features, size, message):
    dec = DynamicConvMaskDecoder(hidden_size=16, num_queries=16, channels=4)
    with pytest.raises(ValueError, match=message):
        dec.decode_image(queries, features, size)


def test_mismatched_batch_lists_are_rejected():
    dec = DynamicConvMaskDecoder(hidden_size=16)
    with pytest.raises(ValueError, match="one entry per image"):
        dec([torch.randn(1, 16, 16)], [], [(4, 4)])
