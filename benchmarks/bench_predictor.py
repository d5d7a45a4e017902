"""Predictor speed on the small config, every figure measured in this one run.

(a) the 16 mask tokens decoded one by one vs appended in one forward on the KV cache;
(b) a second prompt on a cached image vs a cold prompt (set_image + predict): time and tokens processed;
(c) frames per second for a 64-frame clip, batched vs one frame at a time;
(d) peak resident memory of the process.

The weights are untrained, so answers are noise; the work per call is what is measured, and both sides of every
comparison do the same work (same prompt, same number of generated tokens).

`python benchmarks/bench_predictor.py --out benchmarks/results/predictor.json` also writes every figure printed.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import time

import numpy as np
import torch

from umind_core.atomic import write_text
from umind_core.inference.predictor import Predictor
from umind_core.modeling.tiny import build_model


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def median_time(fn, repeats: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def frame(seed: int, size: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    img = (rng.random((size, size)) * 255).astype(np.uint8)
    return np.repeat(img[..., None], 3, axis=2)


def bench_mask_tokens(pred: Predictor, repeats: int) -> tuple[float, float]:
    model = pred.model
    state = pred._state
    suffix = model.tokenizer("Segment the lesion.<|im_end|>\n<|im_start|>assistant\n", add_special_tokens=False)
    pred._engine.forward(state, torch.tensor([suffix["input_ids"]]), state.prefix_len)
    start = state.prefix_len + len(suffix["input_ids"])
    n, seg = model.num_mask_tokens, model.seg_mask_id

    def rollback():
        extra = state.cache.get_seq_length() - start
        if extra > 0:
            state.cache.crop(-extra)

    def one_forward():
        pred._engine.forward(state, torch.full((1, n), seg), start)
        rollback()

    def one_by_one():
        for i in range(n):
            pred._engine.forward(state, torch.full((1, 1), seg), start + i)
        rollback()

    t_one = median_time(one_forward, repeats)
    t_seq = median_time(one_by_one, repeats)
    state.cache.crop(-(state.cache.get_seq_length() - state.prefix_len))
    return t_seq, t_one


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--size", type=int, default=512, help="frame side in pixels")
    parser.add_argument("--frames", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=16)
    # 8 decode steps is the length of a trained model's segment answer: ref start, label (2-3 tokens), ref end,
    # one mask group (one forward), end of turn. Longer answers shift time from the prompt to decoding.
    parser.add_argument("--new-tokens", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--out", default=None, help="also write the figures to this JSON file")
    args = parser.parse_args()

    model = build_model("small")
    model.eval().requires_grad_(False)
    print(f"small config: {model.parameter_counts()['total']:,} parameters, {torch.get_num_threads()} threads, "
          f"{args.size}x{args.size} frames")
    pred = Predictor(model, max_new_tokens=args.new_tokens)
    pred.set_image(frame(0, args.size))

    t_seq, t_one = bench_mask_tokens(pred, args.repeats)
    print(f"(a) 16 mask tokens: one by one {t_seq * 1e3:.1f} ms, one forward {t_one * 1e3:.1f} ms, "
          f"ratio {t_seq / t_one:.1f}x")

    img = frame(1, args.size)

    def cold():
        pred.set_image(img)
        pred.predict("segment", "lesion")

    def warm():
        pred.predict("segment", "lesion")

    t_cold = median_time(cold, args.repeats)
    cold_tokens = pred.last_stats["prefix_tokens"] + pred.last_stats["processed_tokens"]
    t_warm = median_time(warm, args.repeats)
    warm_tokens = pred.last_stats["processed_tokens"]
    print(f"(b) prompt on cached image {t_warm * 1e3:.1f} ms vs cold {t_cold * 1e3:.1f} ms, ratio "
          f"{t_cold / t_warm:.1f}x; tokens processed {warm_tokens} vs {cold_tokens} "
          f"({100 * warm_tokens / cold_tokens:.0f}%)")

    clip = [frame(10 + i, args.size) for i in range(args.frames)]
    # a clip "detect"ed with the boxes as written: the figure is batched decoding, comparable across versions
    single = Predictor(model, max_new_tokens=args.new_tokens, batch_size=1, readout="tokens")
    batched = Predictor(model, max_new_tokens=args.new_tokens, batch_size=args.batch_size, readout="tokens")
    single.predict_batch(clip[:2], "detect", "lesion")  # warm-up
    t0 = time.perf_counter()
    single.predict_batch(clip, "detect", "lesion")
    t_single = time.perf_counter() - t0
    t0 = time.perf_counter()
    batched.predict_batch(clip, "detect", "lesion")
    t_batched = time.perf_counter() - t0
    print(f"(c) {args.frames}-frame clip: one at a time {args.frames / t_single:.1f} frames/s, batched "
          f"(batch {args.batch_size}) {args.frames / t_batched:.1f} frames/s, ratio {t_single / t_batched:.2f}x")
    print(f"(d) peak resident memory {peak_rss_mb():.0f} MB")
    if args.out:
        figures = {"config": "small", "size": args.size, "threads": torch.get_num_threads(),
                   "new_tokens": args.new_tokens, "repeats": args.repeats,
                   "mask_tokens_ms": {"one_by_one": round(t_seq * 1e3, 2), "one_forward": round(t_one * 1e3, 2),
                                      "ratio": round(t_seq / t_one, 2)},
                   "cached_prompt_ms": {"cold": round(t_cold * 1e3, 2), "warm": round(t_warm * 1e3, 2),
                                        "ratio": round(t_cold / t_warm, 2), "tokens_warm": warm_tokens,
                                        "tokens_cold": cold_tokens},
                   "clip": {"frames": args.frames, "batch_size": args.batch_size,
                            "frames_per_s_single": round(args.frames / t_single, 2),
                            "frames_per_s_batched": round(args.frames / t_batched, 2),
                            "ratio": round(t_single / t_batched, 2)},
                   "peak_rss_mb": round(peak_rss_mb())}
        write_text(args.out, json.dumps(figures, indent=2) + "\n")


if __name__ == "__main__":
    main()
