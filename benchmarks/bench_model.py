"""Time one training step (forward + backward) of the small UMindVL config on this machine.

Prints medians over repeated steps, for the LoRA mode (what adapts a base) and the full mode (what trains the
demo model from scratch), with the parameter counts that go with them.
"""

from __future__ import annotations

import statistics
import time

import torch

from umind_core.modeling.config import LoraSettings
from umind_core.modeling.tiny import build_model
from umind_core.testing.samples import mask_sample


def time_steps(model, repeats: int = 5) -> tuple[float, float]:
    model.train()
    enc, labels, targets = mask_sample(model)
    fwd, both = [], []
    for i in range(repeats + 1):
        t0 = time.perf_counter()
        out = model(**enc, labels=labels, mask_targets=targets)
        t1 = time.perf_counter()
        out.loss.backward()
        t2 = time.perf_counter()
        model.zero_grad(set_to_none=True)
        if i:  # the first step warms up allocators and kernels
            fwd.append(t1 - t0)
            both.append(t2 - t0)
    return statistics.median(fwd), statistics.median(both)


def main() -> None:
    torch.set_num_threads(max(1, torch.get_num_threads()))
    seq = None
    for name, lora in (("small/lora", LoraSettings()), ("small/full", None)):
        model = build_model("small", lora=lora)
        enc, _, _ = mask_sample(model)
        seq = enc["input_ids"].shape[1]
        fwd, both = time_steps(model)
        counts = model.parameter_counts()
        print(f"{name}: total {counts['total']:,} params, trainable {counts['trainable']:,}; "
              f"forward {fwd * 1e3:.1f} ms, forward+backward {both * 1e3:.1f} ms "
              f"(one 256x256 image, {seq} tokens, one mask; {torch.get_num_threads()} threads)")


if __name__ == "__main__":
    main()
