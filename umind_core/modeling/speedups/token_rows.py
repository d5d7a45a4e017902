"""The new token rows of an adapter written into the embedding once per weight change, not once per forward.

Why: peft's TrainableTokensLayer (the grounding tokens' rows on the embedding and on the tied LM head) builds its
merged weight with `index_copy` at every forward, a full copy of the vocabulary matrix. On Qwen3-VL-4B that matrix is
151,936 x 2,560 bf16 (778 MB): a decoded token paid four such copies (embedding and LM head), 0.7 of its 1.1 s on
this project's CPU, more than the layers' own products (benchmarks/results/qwen4b_cpu.json, a profile of the eager
decode). The merged weight only changes when the base weight or the token rows do, so where no gradient can reach
the rows it is kept and reused until either changes (their tensors' in-place version counters, which an optimizer
step bumps); where one can (training) peft's own path runs, so the rows still learn. The kept weight is the same
tensor peft would have built, so answers are bit for bit the same; it costs one copy of the matrix, shared by the
tied embedding and LM head.
"""

from __future__ import annotations

import types

import torch
from torch import nn

__all__ = ["embedding_weight", "keep_merged_token_rows"]

#: the attribute of a base weight that holds (key, merged weight): on the weight itself, so the tied embedding and LM
#: head share it and it goes when the weight goes
_KEPT = "_umind_merged_token_rows"


def embedding_weight(qwen: nn.Module) -> torch.Tensor:
    """The input embedding's own weight (for its device and dtype): peft's wrapper answers `.weight` with a merged
    copy of the whole matrix, built anew whenever the rows can learn."""
    emb = qwen.get_input_embeddings()
    adapter = emb._modules.get("token_adapter") if hasattr(emb, "_modules") else None
    return (adapter.base_layer if adapter is not None else emb).weight


def _kept_merged_weights(self, active_adapters) -> torch.Tensor:
    deltas = [self.trainable_tokens_delta[name] for name in active_adapters]
    if torch.is_grad_enabled() and any(d.requires_grad for d in deltas):
        return self._umind_merged_weights(active_adapters)  # training: the rows learn through peft's own path
    base = self.base_layer.weight
    key = (id(base), base._version, tuple(active_adapters),
           tuple(tuple(self.token_indices[n]) for n in active_adapters),
           tuple((id(d), d._version, d.dtype, d.device) for d in deltas))
    kept = getattr(base, _KEPT, None)
    # one made under inference_mode may not be saved by autograd: a forward with gradients builds a plain one
    stale = kept is None or kept[0] != key or (torch.is_grad_enabled() and kept[1].is_inference())
    if stale:
        kept = (key, self._umind_merged_weights(active_adapters))
        setattr(base, _KEPT, kept)
    return kept[1]


def keep_merged_token_rows(model: nn.Module) -> int:
    """Make every TrainableTokensLayer of `model` reuse its merged weight while it is unchanged (see the module
    docstring); idempotent. Returns how many layers it changed."""
    try:
        from peft.tuners.trainable_tokens.layer import TrainableTokensLayer
    except ImportError:  # a peft without trainable tokens: nothing to keep
        return 0
    changed = 0
    for module in model.modules():
        if isinstance(module, TrainableTokensLayer) and not hasattr(module, "_umind_merged_weights"):
            module._umind_merged_weights = module.get_merged_weights
            module.get_merged_weights = types.MethodType(_kept_merged_weights, module)
            changed += 1
    return changed
