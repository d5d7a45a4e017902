"""The vision tower's patch embedding read as one matrix product.

Qwen3-VL embeds each patch (3 channels x 2 frames x 16 x 16 pixels, flattened by the processor) with a Conv3d
whose kernel equals its stride and its whole input: the arithmetic of a linear layer on the flattened patch. On
these CPUs oneDNN's conv3d took 15.6 ms for 2048 patches (8 images of 256 px) where the same product as a matrix
multiply took 4.4 ms (2.45 against 0.52 ms for one image): a quarter of the vision tower's time for a batch.

Only the module's forward changes, and only in eval mode: its Conv3d and weight stay where transformers put
them (saving, loading and LoRA see the stock module) and the weight is read at every call. Training keeps the
conv: the product differs from it by about 1e-6, and over a training run that was enough to change what the
test suite's tiny trained model answers, so training runs (the demo model's, the loop's recorded figures) stay
reproducible as they were; the time that matters here is the serving time.
"""

from __future__ import annotations

import types

import torch
from torch import nn

__all__ = ["patch_embed_as_matmul"]


def _forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
    if self.training:  # training keeps transformers' arithmetic
        return type(self).forward(self, hidden_states)
    weight = self.proj.weight
    flat = hidden_states.reshape(-1, weight[0].numel()).to(dtype=weight.dtype)
    bias = self.proj.bias
    if bias is None:
        return flat @ weight.reshape(weight.shape[0], -1).t()
    return torch.addmm(bias, flat, weight.reshape(weight.shape[0], -1).t())


def patch_embed_as_matmul(qwen: nn.Module) -> bool:
    """Give the model's patch embedding the matrix-product forward; False (nothing changed) when the model has no
    patch embedding of that shape (kernel == stride, no padding, no groups)."""
    visual = getattr(getattr(qwen, "model", None), "visual", None)
    embed = getattr(visual, "patch_embed", None)
    conv = getattr(embed, "proj", None)
    if not isinstance(conv, nn.Conv3d):
        return False
    if (tuple(conv.kernel_size) != tuple(conv.stride) or any(conv.padding) or conv.groups != 1
            or any(d != 1 for d in conv.dilation)):
        return False
    embed.forward = types.MethodType(_forward, embed)
    return True
