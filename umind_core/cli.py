"""The `umind` command. Each subcommand is a thin shell over the library; errors end as one readable line.

Expected failures (bad input, a missing model folder) are ValueError or OSError subclasses raised with a message
that names the problem; they exit with status 2 and no traceback. Anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import argparse
import json
import sys
import time


def _cmd_smoke(args: argparse.Namespace) -> int:
    """Load (or build) a model and run one teacher-forced segmentation step on a synthetic image."""
    import numpy as np
    import torch

    from .modeling.tiny import build_model
    from .modeling.umind import UMindVL

    t0 = time.perf_counter()
    if args.model:
        model = UMindVL.from_pretrained(args.model, device=args.device, dtype=args.dtype)
    else:
        print("umind: no --model given; using a freshly built tiny model (random weights, output meaningless)",
              file=sys.stderr)
        model = build_model(args.size)
    load_s = time.perf_counter() - t0
    from .data.synthetic import generate

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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="umind", description="UMind ultrasound vision-language model tools")
    sub = parser.add_subparsers(dest="command", required=True)
    smoke = sub.add_parser("smoke", help="load a model and run one forward pass on a synthetic image")
    smoke.add_argument("--model", help="a UMind folder or a Qwen3-VL base folder (default: a fresh tiny model)")
    smoke.add_argument("--size", default="tiny", choices=["tiny", "small"], help="size of the fresh model")
    smoke.add_argument("--device", default="cpu")
    smoke.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    smoke.add_argument("--seed", type=int, default=0)
    smoke.set_defaults(func=_cmd_smoke)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except (ValueError, OSError) as exc:
        print(f"umind {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"umind {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
