"""Decode speed of the shipped demo model: transformers' eager forward vs the fast path, one run.

Measured, in this one process and interleaved round by round so that a machine shared with other work slows every
side alike:
(a) one decode step (a single token fed on the cached image + prompt) per mode: ms/step and tokens/s;
(b) whole answers: decode tokens/s of `predict` per mode (generated tokens / decode time);
(c) a cold prompt (set_image + predict) against a second prompt on the cached image, per mode, at the demo model's
    own input size (256 px: the processor's minimum, an 8x8 merged grid).
Every figure is a median over rounds; the ratios are what to read. Each mode's round starts with one untimed pass
of (a): the modes hold their own copies of the language model's weights (13.4 MB each for the demo model: the
model's, the fast modes' fused and transposed ones, the tuned graph's packed ones), more together than the 32 MB
L3 here, and a server runs one mode, so a mode is timed with its own weights warm, not just after another mode
evicted them. Wall time and process CPU time are both given:
on a loaded machine the CPU-time ratios are the steadier ones.

    nice -n 19 .venv/bin/python benchmarks/bench_decode.py [--rounds 7] [--steps 40] [--out results.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from umind_core import demo
from umind_core.data import synthetic
from umind_core.inference.predictor import Predictor

MODES = ("eager", "static", "compiled", "tuned")


def timed(fn) -> tuple[float, float]:
    """(wall seconds, process CPU seconds) of one call."""
    w0, c0 = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - w0, time.process_time() - c0


def step_runner(pred: Predictor, steps: int):
    """`steps` single-token forwards after a short prompt on the cached image, then back to the image prefix."""
    state = pred._state
    tok = pred.model.tokenizer("Describe the lesion.", add_special_tokens=False)["input_ids"]
    ids = torch.tensor([tok])
    one = torch.tensor([[tok[-1]]])

    def run():
        start = state.prefix_len
        pred._engine.forward(state, ids, start)
        for i in range(steps):
            pred._engine.forward(state, one, start + len(tok) + i)
        state.cache.crop(-(state.cache.get_seq_length() - state.prefix_len))

    return run


def median(rows: list[float]) -> float:
    return statistics.median(rows)


def measure(preds: dict[str, Predictor], image, task: str, prompt: str | None, rounds: int, steps: int) -> dict:
    steps_wall = {m: [] for m in preds}
    steps_cpu = {m: [] for m in preds}
    tok_s = {m: [] for m in preds}
    cold = {m: [] for m in preds}
    cached = {m: [] for m in preds}
    runners = {m: step_runner(p, steps) for m, p in preds.items()}
    for _ in range(rounds):
        for mode, pred in preds.items():
            runners[mode]()  # untimed: brings this mode's weights back into the caches the other modes used
            wall, cpu = timed(runners[mode])
            steps_wall[mode].append(wall / (steps + 1))
            steps_cpu[mode].append(cpu / (steps + 1))
            answers = []
            set_s, _ = timed(lambda: pred.set_image(image))  # noqa: B023 - called at once
            first_s, _ = timed(lambda: answers.append(pred.predict(task, prompt)))  # noqa: B023
            second_s, _ = timed(lambda: answers.append(pred.predict(task, prompt)))  # noqa: B023
            cold[mode].append(set_s + first_s)
            cached[mode].append(second_s)
            tok_s[mode].append(pred.last_stats["generated_tokens"] / max(answers[-1].timings["decode_s"], 1e-9))
    return {m: {"step_ms": 1e3 * median(steps_wall[m]), "step_cpu_ms": 1e3 * median(steps_cpu[m]),
                "answer_decode_tok_s": median(tok_s[m]), "cold_ms": 1e3 * median(cold[m]),
                "cached_ms": 1e3 * median(cached[m])} for m in preds}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--steps", type=int, default=40, help="single-token steps per round in (a)")
    parser.add_argument("--task", default="detect")
    parser.add_argument("--prompt", default="lesion")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: leave torch's default)")
    parser.add_argument("--out", help="write the figures as JSON here")
    parser.add_argument("--model", default=None, help="UMind folder (default: the bundled demo model)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    model = demo.load_model(args.model)
    image = synthetic.generate(3, site="breast", size=256).image
    preds = {m: Predictor(model, decode=m, readout="tokens") for m in MODES}  # the decoder's own answers
    t0 = time.perf_counter()
    for pred in preds.values():  # warm-up: the compiled mode builds its step graph here
        pred.set_image(image)
        pred.predict(args.task, args.prompt)
    warm_s = time.perf_counter() - t0
    compile_error = preds["compiled"]._engine.fast.compile_error
    texts = {m: p.predict(args.task, args.prompt).text for m, p in preds.items()}
    figures = measure(preds, image, args.task, args.prompt, args.rounds, args.steps)
    eager = figures["eager"]
    print(f"demo model, 256 px, task {args.task!r} ({preds['eager'].last_stats['generated_tokens']} tokens), "
          f"torch threads {torch.get_num_threads()}, {args.rounds} rounds, warm-up incl. compile {warm_s:.1f} s"
          + (f", compile FAILED: {compile_error}" if compile_error else ""))
    print("same answer in every mode:", len(set(texts.values())) == 1)
    print(f"{'mode':9} {'ms/step':>8} {'tok/s':>7} {'x eager':>8} {'cpu x':>6} {'answer tok/s':>13} "
          f"{'cold ms':>8} {'cached ms':>9} {'cold/cached':>11}")
    for mode, f in figures.items():
        print(f"{mode:9} {f['step_ms']:8.2f} {1e3 / f['step_ms']:7.0f} {eager['step_ms'] / f['step_ms']:8.2f} "
              f"{eager['step_cpu_ms'] / f['step_cpu_ms']:6.2f} {f['answer_decode_tok_s']:13.0f} "
              f"{f['cold_ms']:8.0f} {f['cached_ms']:9.0f} {f['cold_ms'] / f['cached_ms']:11.2f}")
    if args.out:
        with open(args.out, "w") as fh:
            json.dump({"figures": figures, "threads": torch.get_num_threads(), "rounds": args.rounds,
                       "task": args.task, "compile_error": compile_error, "same_answer": len(set(texts.values())) == 1},
                      fh, indent=2)


if __name__ == "__main__":
    main()
