"""Load (or build) a model and run one teacher-forced segmentation forward on a synthetic image."""

from __future__ import annotations

import argparse
import json
import sys
import time

NAME = "smoke"
HELP = "load a model and run one forward pass on a synthetic image"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", help="a UMind folder or a Qwen3-VL base folder (default: a fresh tiny model)")
    parser.add_argument("--size", default="tiny", choices=["tiny", "small"], help="size of the fresh model")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument("--seed", type=int, default=0)


def run(args: argparse.Namespace) -> int:
    import numpy as np
    import torch

    from ..modeling.tiny import build_model
    from ..modeling.umind import UMindVL

    t0 = time.perf_counter()
    if args.model:
        model = UMindVL.from_pretrained(args.model, device=args.device, dtype=args.dtype)
    else:
        print("umind: no --model given; using a freshly built tiny model (random weights, output meaningless)",
              file=sys.stderr)
        model = build_model(args.size)
    load_s = time.perf_counter() - t0
    from ..data.synthetic import generate

    sample = generate(seed=args.seed, site="breast", size=256)
    image = np.repeat(sample.image[..., None], 3, axis=2)
    lesions = [o for o in sample.objects if o.mask is not None]
    prompt = ("<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>Segment the breast lesion.<|im_end|>\n"
              "<|im_start|>assistant\n")
    answer = "".join("<|object_ref_start|>lesion<|object_ref_end|>" + "<|seg_mask|>" * model.num_mask_tokens
                     for _ in lesions) + "<|im_end|>"
    enc = model.processor(images=[image], text=[prompt + answer], return_tensors="pt").to(model.device)
    targets = [torch.from_numpy(np.stack([o.mask for o in lesions]).astype("float32"))] if lesions else None
    t1 = time.perf_counter()
    with torch.no_grad():
        out = model(**enc, labels=enc["input_ids"], mask_targets=targets)
    report = {
        "parameters": model.parameter_counts(),
        "tokens": int(enc["input_ids"].shape[1]),
        "image_grid_thw": enc["image_grid_thw"].tolist(),
        "lm_loss": round(float(out.lm_loss), 4),
        "mask_loss": None if out.mask_loss is None else round(float(out.mask_loss), 4),
        "mask_logits": [list(m.shape) for m in out.mask_logits],
        "load_s": round(load_s, 3),
        "forward_s": round(time.perf_counter() - t1, 3),
    }
    print(json.dumps(report, indent=2))
    return 0
