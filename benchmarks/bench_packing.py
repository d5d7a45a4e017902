"""Training throughput with and without shared-prefix packing, measured in one run on this machine.

The small config at 256 px (the demo model's setting) trains full optimizer steps on the same synthetic images
(written to a temporary folder) both ways: one sample per conversation (batch of 8 conversations) and one
sample per image with all its conversations packed on one image prefix (batch of 4 images). Prints
conversations per second for each and their ratio. Data loading is included, as in `umind train`.

    .venv/bin/python benchmarks/bench_packing.py [--steps 6] [--image-size 256]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import torch

from umind_core.data.conversations import attach_conversations
from umind_core.data.manifest import write_synthetic_dataset
from umind_core.modeling.tiny import build_model
from umind_core.training import ManifestDataset


def conversations_per_second(manifest: Path, image_size: int, pack: bool, batch_size: int, steps: int) -> float:
    torch.manual_seed(0)
    model = build_model("small", lora=None, image_size=image_size)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    dataset = ManifestDataset(manifest, model.processor, model.num_mask_tokens, pack=pack)
    loader = torch.utils.data.DataLoader(dataset, batch_size=batch_size, shuffle=True, collate_fn=dataset.collate_fn,
                                         generator=torch.Generator().manual_seed(0))
    batches = iter(loader)
    conversations, seconds = 0, 0.0
    for i in range(steps + 1):
        t0 = time.perf_counter()
        batch = next(batches)
        model(**batch).loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if i:  # the first step warms up allocators and kernels
            seconds += time.perf_counter() - t0
            seg = batch.get("segment_ids")
            conversations += int(seg.max(dim=1).values.clamp(min=1).sum()) if seg is not None else len(
                batch["input_ids"])
    return conversations / seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=6, help="timed optimizer steps per mode")
    parser.add_argument("--image-size", type=int, default=256)
    parser.add_argument("--out", default=None, help="also write the figures to this JSON file")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        raw = write_synthetic_dataset(Path(tmp) / "data", 64, seed0=0, size=256, progress=False)
        manifest = attach_conversations(raw, raw, refusal_rate=0.5)
        unpacked = conversations_per_second(manifest, args.image_size, False, 8, args.steps)
        packed = conversations_per_second(manifest, args.image_size, True, 4, args.steps)
    print(f"small config, {args.image_size} px, {torch.get_num_threads()} threads, {args.steps} steps each: "
          f"one conversation per sample {unpacked:.1f} conversations/s, packed per image {packed:.1f} "
          f"conversations/s = {packed / unpacked:.2f}x")
    if args.out:
        from umind_core.atomic import write_text

        write_text(args.out, json.dumps({"config": "small", "image_size": args.image_size, "steps": args.steps,
                                         "threads": torch.get_num_threads(),
                                         "conversations_per_s": {"unpacked": round(unpacked, 2),
                                                                 "packed": round(packed, 2)},
                                         "ratio": round(packed / unpacked, 2)}, indent=2) + "\n")


if __name__ == "__main__":
    main()
