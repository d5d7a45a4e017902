"""The full Qwen3-VL-4B shape on this CPU: does it load, answer and train one LoRA step within 24 GiB?

As shipped (bf16), in float32, or with bf16 weights and float32 arithmetic (`--dtype bf16-weights`).

    python scripts/make_qwen_layout.py /tmp/qwen3-vl-4b-random --variant 4b     # about 8.9 GB, 3-4 minutes
    python benchmarks/bench_qwen4b_cpu.py /tmp/qwen3-vl-4b-random --out benchmarks/results/qwen4b_cpu.json

Measured, in this order, in one process: the machine's read bandwidth and bf16 matrix throughput
(machine_limits.py); the base-folder checks; loading (time, peak RSS); one grounded answer with a mask through the
Predictor on one frame (image prefill, the prompt forward, per-token decode time, the 16-token mask chunk, the mask
decoder) with a scripted answer (benchmarks/qwen_timing.py: the weights are random), and its decode and prefill as
ratios of their floors on this machine (`limits`: weight bytes / read bandwidth, arithmetic / bf16 throughput); one
LoRA training step on one image (time, peak RSS); saving the adapter version (time, size; the base folder is
referred to by path). Every figure is written to --out as it is measured, so a run stopped early keeps what it
reached. Not in CI: it takes many minutes and about 10 GB of memory.
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import sys
import time
from pathlib import Path

import torch

# a sibling module: benchmarks/ is sys.path[0] when this script runs; umind_core is the installed package
from machine_limits import measure as measure_machine
from qwen_timing import PeakRSS, answer_script, install_script_head, lora_step, speckle_frame, step_times

from umind_core.atomic import write_text

GiB = 2**30


class Record:
    """The figures so far, rewritten to disk after each one."""

    def __init__(self, path: Path | None, **meta):
        self.path, self.data = path, {**meta, "steps": {}}

    def add(self, step: str, **figures) -> None:
        clean = {k: (round(v, 3) if isinstance(v, float) else v) for k, v in figures.items()}
        self.data["steps"][step] = clean
        print(f"{step}: {clean}", flush=True)
        if self.path is not None:
            write_text(self.path, json.dumps(self.data, indent=2) + "\n")


def _answer(record: Record, model, frame, max_new: int) -> None:
    from umind_core.inference.predictor import Predictor

    head = install_script_head(model)
    script = answer_script(model.tokenizer, label="lesion", box=None)
    # eager: the scripted answer is applied at the LM head, which the fast decode path folds into its own weights
    predictor = Predictor(model, max_new_tokens=max_new, decode="eager")
    with PeakRSS() as rss:
        t0 = time.perf_counter()
        predictor.set_image(frame)
        prefill_s = time.perf_counter() - t0
        head.arm(script)
        t1 = time.perf_counter()
        result = predictor.predict("segment", "lesion")
        total_s = time.perf_counter() - t1
        steps = step_times(head, t1, model.seg_mask_id)
        head.disarm()
    masks = [o.mask for o in result.objects if o.mask is not None]
    stats = dict(predictor.last_stats)
    # the first prefill pays one-time costs (allocator, kernel selection); a server's later images do not
    t0 = time.perf_counter()
    predictor.set_image(speckle_frame(frame.shape[0], seed=1))
    prefill_warm_s = time.perf_counter() - t0
    record.add("grounded_answer", prefill_s=prefill_s, prefill_warm_s=prefill_warm_s,
               prefix_tokens=stats["prefix_tokens"], prompt_tokens=stats["prompt_tokens"], answer_s=total_s,
               generated_tokens=stats["generated_tokens"], mask_decoder_s=result.timings["mask_s"],
               masks=len(masks), mask_shape=list(masks[0].shape) if masks else None, text=result.text[:120],
               peak_rss_gib=rss.peak / GiB, **steps)
    if not masks:
        raise SystemExit(f"bench: the answer came back without a mask: {result.text!r}")
    head.script = []
    model.qwen.lm_head = head.head  # training runs on the plain head


def weight_groups(model) -> dict:
    """Parameters and bytes of the vision tower, the token embedding, the LM head and the rest of the language
    model (its layers and norms), each counted once however modules share them (tied embeddings, peft wrappers)."""
    groups = {k: {"params": 0, "bytes": 0} for k in ("vision", "embedding", "lm_head", "layers")}
    seen: set[int] = set()
    for name, p in model.named_parameters(remove_duplicate=False):
        if id(p) in seen or name.startswith("mask_decoder."):
            continue
        seen.add(id(p))
        key = ("vision" if ".visual." in name else "embedding" if "embed_tokens" in name
               else "lm_head" if "lm_head" in name else "layers")
        groups[key]["params"] += p.numel()
        groups[key]["bytes"] += p.numel() * p.element_size()
    return groups


def limits(record: Record, machine: dict, groups: dict, answer: dict, size: int, patch: int = 16) -> None:
    """The answer's times against this machine's floors: a decoded token reads the layers and the LM head once
    (tied to the embedding: read once); a prefill does 2 operations (a multiply-add) per weight per token in the
    layers, and in the vision tower per patch (16-pixel patches of the frame), and reads those weights once."""
    read_bytes = groups["layers"]["bytes"] + (groups["lm_head"]["bytes"] or groups["embedding"]["bytes"])
    decode_floor = read_bytes / (machine["read_gbps"] * 1e9)
    patches = (size // patch) ** 2
    flops = 2 * groups["layers"]["params"] * answer["prefix_tokens"] + 2 * groups["vision"]["params"] * patches
    # a prefill of a few dozen tokens also reads every weight once: its floor is the larger of the two
    prefill_floor = max(flops / (machine["bf16_gflops"] * 1e9),
                        (groups["layers"]["bytes"] + groups["vision"]["bytes"]) / (machine["read_gbps"] * 1e9))
    record.add("limits", decode_bytes=read_bytes, decode_floor_s=decode_floor,
               per_token_over_floor=answer["per_token_s"] / decode_floor if answer.get("per_token_s") else None,
               prefill_gflop=flops / 1e9, prefill_floor_s=prefill_floor,
               prefill_over_floor=answer["prefill_s"] / prefill_floor,
               prefill_warm_over_floor=answer["prefill_warm_s"] / prefill_floor)


def _train_and_save(record: Record, model, frame, save_dir: Path) -> None:
    with PeakRSS() as rss:
        step = lora_step(model, frame)
    record.add("lora_step", peak_rss_gib=rss.peak / GiB, **step)
    if step["changed_tensors"] == 0:
        raise SystemExit("bench: the LoRA step changed no trainable tensor")
    shutil.rmtree(save_dir, ignore_errors=True)
    t0 = time.perf_counter()
    model.save_pretrained(save_dir)
    files = [p for p in save_dir.rglob("*") if p.is_file()]
    config = json.loads((save_dir / "umind_config.json").read_text())
    record.add("save_version", save_s=time.perf_counter() - t0, bytes=sum(p.stat().st_size for p in files),
               files=len(files), base_model=config["base_model"],
               copies_base=any(p.name.startswith("model-") for p in files))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder", type=Path, help="a 4B layout folder from scripts/make_qwen_layout.py")
    parser.add_argument("--size", type=int, default=256, help="frame side in pixels (256: 64 image tokens)")
    parser.add_argument("--out", type=Path, help="JSON with every figure, rewritten after each step")
    parser.add_argument("--save-dir", type=Path, default=Path("/tmp/umind-4b-version"))
    parser.add_argument("--dtype", choices=("bfloat16", "float32", "bf16-weights"), default="bfloat16",
                        help="bf16-weights: weights stored bf16, arithmetic float32 (umind_core.modeling.speedups.upcast), "
                             "for CPUs without bf16 instructions (AVX2 only), where bf16 matmuls are emulated and a "
                             "LoRA step did not finish in 25 minutes; float32 needs ~17 GiB for weights alone")
    args = parser.parse_args(argv)
    from umind_core.modeling.base_folder import check_base_folder
    from umind_core.modeling.umind import UMindVL

    record = Record(args.out, folder=str(args.folder), dtype=args.dtype, device="cpu",
                    threads=torch.get_num_threads(), frame=[args.size, args.size])
    machine = measure_machine()
    record.add("machine", **machine)
    t0 = time.perf_counter()
    check_base_folder(args.folder)
    record.add("check_folder", seconds=time.perf_counter() - t0)
    with PeakRSS() as rss:
        t0 = time.perf_counter()
        model = UMindVL.from_pretrained(args.folder, dtype="bfloat16" if args.dtype == "bf16-weights" else args.dtype,
                                        trainable=True)
        if args.dtype == "bf16-weights":
            from umind_core.modeling.speedups.upcast import compute_in_float32

            compute_in_float32(model)
        load_s = time.perf_counter() - t0
    counts = model.parameter_counts()
    record.add("load", seconds=load_s, peak_rss_gib=rss.peak / GiB, parameters=counts["total"],
               trainable=counts["trainable"])
    model.eval()
    frame = speckle_frame(args.size)
    _answer(record, model, frame, max_new=64)
    limits(record, machine, weight_groups(model), record.data["steps"]["grounded_answer"], args.size)
    _train_and_save(record, model, frame, args.save_dir)
    record.add("process", max_rss_gib=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / GiB)
    return 0


if __name__ == "__main__":
    sys.exit(main())
