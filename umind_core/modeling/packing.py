"""Shared-prefix packing: several question/answer turns about one image in one sequence, each seeing only the image.

An image costs far more tokens than a question and its answer (64 to 256 image tokens against 20 to 60), and every
record of the training data holds eight or so conversations about one image. Run as separate samples, each one
pays for the vision encoder and the image prefix again. Packed, the prefix is computed once and every turn
("branch") attends to the prefix and to itself, never to another branch, and its positions restart where the
prefix ends. That is exactly what the Predictor does at serving time (image prefix cached once, each prompt fed
on it and cropped away afterwards), so a packed step computes the same losses as the separate samples, for
a fraction of the work.

Sequences are described by `segment_ids` (B, L): 0 for the shared prefix, k >= 1 for branch k (branches follow
the prefix, contiguous and in increasing order), -1 for padding.
"""

from __future__ import annotations

import torch

__all__ = ["PAD_SEGMENT", "packed_attention_mask", "packed_position_ids"]

PAD_SEGMENT = -1


def packed_attention_mask(segment_ids: torch.Tensor) -> torch.Tensor:
    """(B, 1, L, L) boolean mask, True where a query may attend to a key: causal, prefix or same branch.

    A padding position attends to itself alone: a query row with nothing to attend to turns into NaN in
    scaled-dot-product attention, and NaN would reach the loss through the backward pass even though nobody
    reads those positions.
    """
    if segment_ids.ndim != 2:
        raise ValueError(f"segment_ids must be (batch, length), got shape {tuple(segment_ids.shape)}")
    length = segment_ids.shape[1]
    query = segment_ids[:, :, None]
    key = segment_ids[:, None, :]
    causal = torch.ones(length, length, dtype=torch.bool, device=segment_ids.device).tril()
    allowed = causal & (query != PAD_SEGMENT) & (key != PAD_SEGMENT) & ((key == 0) | (key == query))
    eye = torch.eye(length, dtype=torch.bool, device=segment_ids.device)
    allowed |= eye & (query == PAD_SEGMENT)
    return allowed[:, None]


def packed_position_ids(position_ids: torch.Tensor, segment_ids: torch.Tensor) -> torch.Tensor:
    """M-RoPE positions (3, B, L) of the sequence read as one text, moved so that every branch starts where the
    first one does (right after the prefix), as if it were the only question asked about the image."""
    if position_ids.ndim != 3 or position_ids.shape[1:] != segment_ids.shape:
        raise ValueError(f"position_ids {tuple(position_ids.shape)} do not fit segment_ids "
                         f"{tuple(segment_ids.shape)}")
    shift = torch.zeros_like(segment_ids)
    for b, row in enumerate(segment_ids):
        branches = torch.nonzero(row > 0).flatten()
        if branches.numel() == 0:
            continue
        first = int(branches[0])
        for k in torch.unique(row[branches]).tolist():
            where = torch.nonzero(row == k).flatten()
            start = int(where[0])
            if int(where[-1]) - start + 1 != where.numel():
                raise ValueError(f"sample {b}: branch {k} is not contiguous")
            shift[b, where] = start - first
    return position_ids - shift[None].to(position_ids.dtype)
