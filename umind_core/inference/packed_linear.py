"""Projections through weights that oneDNN packed once, for the lean decode path on the CPU.

Why: `F.linear` hands MKL an unpacked matrix, and MKL's product for a few rows repacks it at every call. On this
project's 2-core machine (a microbenchmark, 3-5 runs of each size on a noisy VM), the 17 products of one
demo-model step took 1.2-2.6 ms for 8 rows, 1.2-2.4 for 4 and 0.67-1.5 for 1; with each weight packed by oneDNN
once, 0.65-0.79, 0.48-0.53 and 0.47-0.56 ms, and 17-18 ms against 21-24 for a 496-row prompt. A profile of a
batch of 8 mixed requests had spent 46% of its time in those products. In the Predictor, packing switched on and
off in one process for 20 alternating rounds, a batch of 8 mixed jobs took 462 against 498 ms (medians); lone
requests took the same.

Second reason: a row's result does not depend on the other rows. With the weight packed for 64 rows, row 0 of
a product came out bit for bit the same alone and among 2-496 rows (packed for 1 row, it did not), so a request
decodes the same arithmetic in a batch as alone.

Only float32 on the CPU, where oneDNN is built in, and only up to `MAX_PACKED_BYTES` of weights: a packed
weight is a second copy, which a small model pays gladly and a 4B model in float32 (16 GB) cannot.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

__all__ = ["MAX_PACKED_BYTES", "PackedWeight", "linear", "unpackable_reason"]

PACK_ROWS = 64  # the row count oneDNN packs for (packed for 1, a row's result changed with the rows beside it)
MAX_PACKED_BYTES = 1 << 30


class PackedWeight:
    """An (out, in) projection weight packed for oneDNN; `weight` stays the plain tensor it was packed from."""

    __slots__ = ("weight", "packed")

    def __init__(self, weight: torch.Tensor):
        self.weight = weight
        self.packed = torch.ops.mkldnn._reorder_linear_weight(weight.contiguous(), PACK_ROWS)

    def __call__(self, x: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        return torch.ops.mkldnn._linear_pointwise(x.contiguous(), self.packed, bias, "none", [], "")


def linear(x: torch.Tensor, weight: torch.Tensor | PackedWeight, bias: torch.Tensor | None = None) -> torch.Tensor:
    """x @ weight.T + bias, through the packed weight when it is one."""
    if isinstance(weight, PackedWeight):
        return weight(x, bias)
    return F.linear(x, weight, bias)


def unpackable_reason(weights: list[torch.Tensor]) -> str | None:
    """Why these weights are not packed (None: they are): device, dtype, size, or a oneDNN build without it."""
    if not weights:
        return "no weights"
    if any(w.device.type != "cpu" for w in weights):
        return "not on the CPU"
    if any(w.dtype != torch.float32 for w in weights):
        return "not float32"
    if sum(w.numel() * w.element_size() for w in weights) > MAX_PACKED_BYTES:
        return f"over {MAX_PACKED_BYTES >> 20} MiB of weights (a packed copy would double them)"
    if not torch.backends.mkldnn.is_available():
        return "this torch has no oneDNN"
    try:
        probe = PackedWeight(weights[0][:8].contiguous())
        probe(torch.zeros(1, weights[0].shape[1], dtype=weights[0].dtype), None)
    except (RuntimeError, NotImplementedError) as exc:
        return f"oneDNN refused a probe ({type(exc).__name__})"
    return None
