"""The report's learning-rate schedule: linear warm-up to the peak, then a cosine decay to zero.

Kept as a pure function of the step so that a resumed run computes exactly the rate the uninterrupted run
would have used, and so the curve can be tested without building an optimizer.
"""

from __future__ import annotations

import math

import torch

__all__ = ["warmup_steps_for", "lr_factor", "cosine_with_warmup"]


def warmup_steps_for(total_steps: int, warmup_ratio: float) -> int:
    """Warm-up length in optimizer steps: a fraction of the run, at least one step when the ratio is positive."""
    if total_steps < 1:
        raise ValueError(f"total_steps must be at least 1, got {total_steps}")
    if not 0.0 <= warmup_ratio < 1.0:
        raise ValueError(f"warmup_ratio must be in [0, 1), got {warmup_ratio}")
    if warmup_ratio == 0.0:
        return 0
    return max(1, math.ceil(total_steps * warmup_ratio))


def lr_factor(step: int, total_steps: int, warmup_steps: int) -> float:
    """Multiplier of the peak rate for the step that follows `step` completed steps.

    Warm-up rises as (step + 1) / (warmup + 1), so the first step already learns (a factor of 0 would waste
    it) and the peak is reached exactly when warm-up ends; the cosine then reaches 0 at `total_steps`.
    """
    if step < warmup_steps:
        return (step + 1) / (warmup_steps + 1)
    span = max(1, total_steps - warmup_steps)
    progress = min(1.0, (step - warmup_steps) / span)
    return 0.5 * (1.0 + math.cos(math.pi * progress))


def cosine_with_warmup(optimizer: torch.optim.Optimizer, total_steps: int,
                       warmup_ratio: float) -> torch.optim.lr_scheduler.LambdaLR:
    """A LambdaLR over `lr_factor`; stepped once per optimizer step.

    The lambda is a plain closure on purpose: LambdaLR checkpoints the state of callable objects, which would
    bring back an old run's length on resume; a closure keeps the length of the run being resumed.
    """
    warmup = warmup_steps_for(total_steps, warmup_ratio)
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: lr_factor(step, total_steps, warmup))
