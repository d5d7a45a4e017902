"""bf16 weights, float32 arithmetic: the 4B model on a CPU without bf16 instructions.

On AVX2-only CPUs PyTorch emulates bf16 matrix products: on 2 cores the 4B model's 69-token image prefill took
227 s and one LoRA step did not finish in 25 minutes (benchmarks/results/qwen4b_cpu.json). Float32 weights make
the arithmetic fast but need 16.7 GiB for weights alone, and the answer step passed 23 GiB of the machine's 24
(qwen4b_cpu_fp32.json). So the weights stay bf16 in memory and each layer computes in float32:

- a frozen bf16 linear layer casts its weight to float32 for the product and keeps only the bf16 weight for the
  backward pass (`_Float32Linear`), so at most one layer's float32 copy is alive at a time; plain autograd would
  save every layer's float32 copy for the backward pass, the 16.7 GiB again;
- embeddings, convolutions and layer norms return float32, so every activation is float32 from the first layer on;
- trainable tensors (LoRA, the mask decoder, new token rows) become float32: an optimizer step on bf16 weights
  rounds small updates away.

`compute_in_float32(model)` changes modules in place and returns how many it changed; it is how a caller opts in
(`bench_qwen4b_cpu.py --dtype bf16-weights`), and it changes nothing for a float32 model.
"""

from __future__ import annotations

import types

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["compute_in_float32"]

_F32 = torch.float32


class _Float32Linear(torch.autograd.Function):
    """x @ W.T + b in float32 for a frozen low-precision W, saving W as stored (not its float32 copy)."""

    @staticmethod
    def forward(ctx, x, weight, bias):
        ctx.save_for_backward(weight)
        return F.linear(x, weight.to(_F32), None if bias is None else bias.to(_F32))

    @staticmethod
    def backward(ctx, grad):
        (weight,) = ctx.saved_tensors
        return (grad @ weight.to(_F32) if ctx.needs_input_grad[0] else None), None, None


def _linear_forward(self, x):
    x = x.to(_F32)
    trainable = self.weight.requires_grad or (self.bias is not None and self.bias.requires_grad)
    if self.weight.dtype == _F32 or trainable:  # _Float32Linear returns no weight or bias gradient
        return F.linear(x, self.weight.to(_F32), None if self.bias is None else self.bias.to(_F32))
    return _Float32Linear.apply(x, self.weight, self.bias)


def _embedding_forward(self, ids):
    return self._umind_plain_forward(ids).to(_F32)


def _conv_forward(self, x):
    bias = None if self.bias is None else self.bias.to(_F32)
    return self._conv_forward(x.to(_F32), self.weight.to(_F32), bias)


def _layer_norm_forward(self, x):
    weight = None if self.weight is None else self.weight.to(_F32)
    bias = None if self.bias is None else self.bias.to(_F32)
    return F.layer_norm(x.to(_F32), self.normalized_shape, weight, bias, self.eps)


def _trainable_tokens_forward(self, x, *args, **kwargs):
    """peft's TrainableTokensLayer (new token rows on the embedding and the tied LM head) multiplies its merged
    weight directly, in the weight's dtype; here the product is float32 (the merged weight is one layer's copy)."""
    if self.disable_adapters or not self.active_adapters or self.merged:
        return self._umind_plain_forward(x, *args, **kwargs)
    weight = self.get_merged_weights(self.active_adapters)
    if isinstance(self.base_layer, nn.Embedding):
        return F.embedding(x, weight, padding_idx=self.base_layer.padding_idx).to(_F32)
    return F.linear(x.to(_F32), weight.to(_F32))


def _patches() -> tuple:
    from peft.tuners.trainable_tokens.layer import TrainableTokensLayer

    return _PATCHES + ((TrainableTokensLayer, _trainable_tokens_forward),)


_PATCHES = ((nn.Linear, _linear_forward), (nn.Embedding, _embedding_forward),
            (nn.Conv1d, _conv_forward), (nn.Conv2d, _conv_forward), (nn.Conv3d, _conv_forward),
            (nn.LayerNorm, _layer_norm_forward))


def compute_in_float32(model: nn.Module) -> int:
    """Make every linear, embedding, convolution and layer norm of `model` compute in float32, and every
    trainable tensor float32; frozen weights keep their dtype. Returns the number of modules changed."""
    for p in model.parameters():
        if p.requires_grad and p.dtype != _F32:
            p.data = p.data.to(_F32)
    changed, patches = 0, _patches()
    for module in model.modules():
        for kind, forward in patches:
            if type(module) is kind and not hasattr(module, "_umind_plain_forward"):
                module._umind_plain_forward = module.forward
                module.forward = types.MethodType(forward, module)
                changed += 1
                break
    return changed
