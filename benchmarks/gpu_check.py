"""One prepared check for a machine with a CUDA device: the real-shape path, each time next to the H200's limit.

    python scripts/make_qwen_layout.py /tmp/qwen3-vl-4b --variant 4b
    python benchmarks/gpu_check.py /tmp/qwen3-vl-4b                     # cuda, bf16, 512x512, 16 frames

Steps, all on the Predictor's real path with a scripted answer (benchmarks/qwen_timing.py): vision + image
prefill of one frame; a grounded answer (labelled box of ~30 tokens, then one mask: 16 <|seg_mask|> in one
forward, then the mask decoder); a second prompt on the cached image; 16 frames batched; one LoRA step.

Limits (H200, the target GPU): prefill ~11 ms for the 4B on one 512x512 frame; a decode step reads every weight once,
so its floor is weight bytes / 4.8 TB/s (~1.8 ms for 8.9 GB). A ratio is measured / limit. On a CPU, or with the
small variant (`tests/test_qwen_layout.py` runs it so it keeps working), ratios are printed but mean nothing.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

# a sibling module: benchmarks/ is sys.path[0] when this script runs; umind_core is the installed package
from qwen_timing import answer_script, install_script_head, lora_step, step_times, speckle_frame

H200_PREFILL_S = 0.011  # 4B, one 512x512 frame, the H200's limit
H200_BANDWIDTH = 4.8e12  # bytes/s of HBM3e


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def _row(rows: list, name: str, seconds: float | None, limit: float | None) -> None:
    ratio = seconds / limit if seconds is not None and limit else None
    rows.append({"step": name, "ms": None if seconds is None else round(seconds * 1e3, 2),
                 "limit_ms": None if limit is None else round(limit * 1e3, 2),
                 "ratio": None if ratio is None else round(ratio, 2)})


def _answer(predictor, head, script, task, prompt, seg_id, device) -> tuple[dict, object]:
    head.arm(script)
    _sync(device)
    t0 = time.perf_counter()
    result = predictor.predict(task, prompt)
    _sync(device)
    total = time.perf_counter() - t0
    steps = step_times(head, t0, seg_id)
    head.disarm()
    return {"total_s": total, **steps}, result


def run(args) -> list[dict]:
    from umind_core.modeling.umind import UMindVL
    from umind_core.inference.predictor import Predictor

    device = torch.device(args.device)
    t0 = time.perf_counter()
    model = UMindVL.from_pretrained(args.model, device=args.device, dtype=args.dtype, trainable=not args.skip_train)
    model.eval()  # inference first; lora_step switches to training mode
    load_s = time.perf_counter() - t0
    weight_bytes = sum(p.numel() * p.element_size() for p in model.qwen.parameters())
    token_limit = weight_bytes / H200_BANDWIDTH
    head = install_script_head(model)
    seg_id = model.seg_mask_id
    script = answer_script(model.tokenizer, box=None if args.answer == "ref" else (120, 340, 260, 480))
    # eager: the scripted answer is applied at the LM head, which the fast decode path folds into its own
    # weights (inference/fast_decode.py); these times are transformers' forward
    # readout "tokens": the scripted answer (a box and a mask) comes back as scripted, not turned into boxes
    predictor = Predictor(model, max_new_tokens=len(script) + model.num_mask_tokens + 4, batch_size=args.frames,
                          decode="eager", readout="tokens")
    frame = speckle_frame(args.size)
    rows: list[dict] = []
    _row(rows, "load (from disk)", load_s, None)

    if device.type == "cuda":  # warm-up (kernels, allocator)
        predictor.set_image(frame)
        _answer(predictor, head, script, "detect", "thyroid nodule", seg_id, device)
    _sync(device)
    t1 = time.perf_counter()
    predictor.set_image(frame)
    _sync(device)
    prefill_s = time.perf_counter() - t1
    _row(rows, f"vision + prefill, {args.size}x{args.size}", prefill_s, H200_PREFILL_S)

    first, result = _answer(predictor, head, script, "detect", "thyroid nodule", seg_id, device)
    n_text = sum(1 for t in script if t != seg_id) - 1
    _row(rows, "prompt forward (cached image)", first["prompt_s"], token_limit)
    _row(rows, f"decode, per token (median of {n_text})", first["per_token_s"], token_limit)
    _row(rows, "mask chunk: 16 <|seg_mask|> in one forward", first["mask_chunk_s"], token_limit)
    _row(rows, "mask decoder", result.timings.get("mask_s"), None)
    answer_limit = (first["decode_steps"] + 1) * token_limit
    _row(rows, f"grounded answer with mask ({len(script) - 1 + model.num_mask_tokens} tokens)",
         first["total_s"], answer_limit)
    _row(rows, "  ... plus prefill (a new image)", first["total_s"] + prefill_s, answer_limit + H200_PREFILL_S)
    second, _ = _answer(predictor, head, script, "segment", "thyroid nodule", seg_id, device)
    _row(rows, "second prompt, cached image", second["total_s"], answer_limit)

    frames = [speckle_frame(args.size, seed=i) for i in range(args.frames)]
    head.arm(script)
    _sync(device)
    t2 = time.perf_counter()
    batch = predictor.predict_batch(frames, "segment", "thyroid nodule")
    _sync(device)
    batch_s = time.perf_counter() - t2
    head.disarm()
    _row(rows, f"{args.frames} frames batched (prefill + answer)", batch_s,
         args.frames * H200_PREFILL_S + answer_limit)

    if not args.skip_train:
        head.disarm()
        step = lora_step(model, frame)
        _row(rows, f"one LoRA step ({step['tokens']} tokens, fwd+bwd+AdamW)", step["step_s"], 3 * H200_PREFILL_S)
        if step["changed_tensors"] == 0:
            raise SystemExit("gpu_check: the LoRA step changed no trainable tensor")
    masks = [o.mask is not None for r in [result, *batch] for o in r.objects]
    if not masks or not all(masks):
        raise SystemExit(f"gpu_check: an answer came back without its mask: {result.text!r}")
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", help="a Qwen3-VL folder (scripts/make_qwen_layout.py) or a UMind folder")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--size", type=int, default=512, help="frame side in pixels")
    parser.add_argument("--frames", type=int, default=16, help="frames in the batched step")
    parser.add_argument("--answer", choices=("box", "ref"), default="box",
                        help="box: a labelled box (~30 tokens) then a mask; ref: only the label then a mask")
    parser.add_argument("--skip-train", action="store_true")
    parser.add_argument("--json", type=Path, help="also write the table here")
    args = parser.parse_args(argv)
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("gpu_check: no CUDA device here; pass --device cpu to run it anyway", file=sys.stderr)
        return 2
    rows = run(args)
    name = torch.cuda.get_device_name() if args.device.startswith("cuda") else "cpu"
    print(f"gpu_check on {name}, {args.dtype}, model {args.model}")
    print(f"{'step':58s} {'ms':>10s} {'limit ms':>10s} {'ratio':>7s}")
    for r in rows:
        fmt = lambda v, spec: format(v, spec) if v is not None else "-"  # noqa: E731
        print(f"{r['step']:58s} {fmt(r['ms'], '10.2f')} {fmt(r['limit_ms'], '10.2f')} {fmt(r['ratio'], '7.2f')}")
    if args.json:
        from umind_core.atomic import write_text

        write_text(args.json, json.dumps({"device": name, "dtype": args.dtype, "rows": rows}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
