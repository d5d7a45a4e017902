"""Where a cold segment's image encode goes, and whether compiling the vision tower buys it back.

A segment on a new image is the image encode (the processor, the vision tower, the language model over the
image prefix) plus the prompt, the short answer and the mask. The decode modes only change the latter; this
measures the encode's parts on the bundled demo model at 256 px, then the vision tower eager against
`torch.compile` (inductor, default) and against inductor with frozen, prepacked weights and autotuned products
(`max-autotune-no-cudagraphs`), alternating in one run, medians of `--reps` calls each, with the largest difference
of their outputs from eager.

    .venv/bin/python benchmarks/bench_encode_compile.py [--reps 30] [--out benchmarks/results/encode_compile.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch


def _ms(fn, reps: int) -> float:
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return 1000 * statistics.median(times)


def main(argv=None) -> int:
    from umind_core import demo, prompts
    from umind_core.data.synthetic import generate
    from umind_core.inference.decode_batch import _to_device
    from umind_core.inference.predictor import Predictor, _as_frame

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "encode_compile.json")
    args = ap.parse_args(argv)
    model = demo.load_model(None)
    model.eval()
    frame = _as_frame(generate(seed=1_000_200, site="breast", size=256).image)
    engine = Predictor(model, decode="static")._engine
    enc = _to_device(model.processor(images=[frame.pixels], text=[prompts.IMAGE_PREFIX], return_tensors="pt"),
                     model.device, model.dtype)
    pos, _ = model.rope_index(enc["input_ids"], enc["mm_token_type_ids"], enc["image_grid_thw"])
    vision = model.qwen.model.visual
    pixels, grid = enc["pixel_values"], enc["image_grid_thw"]

    def prefix():
        with torch.no_grad():
            model(input_ids=enc["input_ids"], pixel_values=pixels, image_grid_thw=grid,
                  mm_token_type_ids=enc["mm_token_type_ids"], position_ids=pos, use_cache=True, decode_masks=False,
                  logits="none")

    def run(fn):
        with torch.no_grad():
            return fn(pixels, grid_thw=grid)

    for _ in range(5):
        engine.encode([frame])
    parts = {"encode_ms": _ms(lambda: engine.encode([frame]), args.reps),
             "processor_ms": _ms(lambda: model.processor(images=[frame.pixels], text=[prompts.IMAGE_PREFIX],
                                                         return_tensors="pt"), args.reps),
             "model_forward_ms": _ms(prefix, args.reps),
             "vision_tower_ms": _ms(lambda: run(vision), args.reps)}
    ref = run(vision)
    variants = {"eager": vision}
    build_s = {}
    t0 = time.perf_counter()
    variants["compiled"] = torch.compile(vision, dynamic=False)
    run(variants["compiled"])
    build_s["compiled"] = time.perf_counter() - t0
    import torch._inductor.config as inductor_config

    inductor_config.freezing = True
    t0 = time.perf_counter()
    variants["frozen_autotuned"] = torch.compile(vision, dynamic=False, mode="max-autotune-no-cudagraphs")
    run(variants["frozen_autotuned"])
    build_s["frozen_autotuned"] = time.perf_counter() - t0
    diffs = {name: float(max((run(fn).pooler_output - ref.pooler_output).abs().max(),
                             *((a - b).abs().max() for a, b in zip(run(fn).deepstack_features,
                                                                   ref.deepstack_features))))
             for name, fn in variants.items()}
    rounds: dict[str, list[float]] = {name: [] for name in variants}
    for i in range(4):  # alternate, so drift of the machine lands on every variant
        for name in (list(variants) if i % 2 else list(variants)[::-1]):
            rounds[name].append(_ms(lambda fn=variants[name]: run(fn), args.reps))
    vision_ms = {name: statistics.median(v) for name, v in rounds.items()}
    out = {"parts_ms": parts, "vision_tower_ms": vision_ms, "vision_tower_rounds_ms": rounds, "build_s": build_s,
           "max_abs_diff_from_eager": diffs,
           "eager_over": {name: vision_ms["eager"] / v for name, v in vision_ms.items() if name != "eager"},
           "torch": torch.__version__, "threads": torch.get_num_threads()}
    args.out.write_text(json.dumps(out, indent=2))
    print(json.dumps({k: out[k] for k in ("parts_ms", "vision_tower_ms", "eager_over", "build_s")}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
