"""Evaluate a model on a held-out manifest: the report's metrics, report.md, metrics.json and overlays."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

NAME = "eval"
HELP = ("score a model on a manifest (mIoU, detection F1, keypoint/measurement error, diagnosis, refusal; "
        "examinations: diagnosis and report, exam reading vs single best view)")


def _count(text: str, minimum: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if value < minimum:
        raise argparse.ArgumentTypeError(f"expected an integer >= {minimum}, got {value}")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", help="a UMind folder (default: the bundled demo model)")
    parser.add_argument("--manifest", required=True, help="held-out manifest.jsonl")
    parser.add_argument("--out", required=True, help="output folder for report.md, metrics.json, overlays/")
    parser.add_argument("--tasks", default=None,
                        help="comma-separated subset of segment,detect,keypoints,measure,diagnose,refusal and, "
                             "for examinations only, report (default: all)")
    parser.add_argument("--limit", type=lambda t: _count(t, 1), default=None, help="only the first N records")
    parser.add_argument("--batch-size", type=lambda t: _count(t, 1), default=8, help="images per forward")
    parser.add_argument("--overlays", type=lambda t: _count(t, 0), default=4,
                        help="best and worst K overlays per spatial task (0: none)")
    parser.add_argument("--max-new-tokens", type=lambda t: _count(t, 1), default=256)
    parser.add_argument("--benchmark", default="auto", choices=["auto", "none", "ultrabench"],
                        help="also report a source benchmark's own metrics (auto: from the records' import marks)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument("--readout", default="mask", choices=["mask", "tokens"],
                        help="boxes and lesion calipers read off the mask the model segments for the target (mask, "
                             "the default) or the coordinates it writes (tokens)")


def _model_name(path: str | None) -> str:
    from .. import demo

    from ..model_identity import model_name

    if path:
        return model_name(Path(path).resolve())  # "thyroid/final", never just "final"
    return "UMind demo" if demo.has_demo_model() else "untrained tiny"


def _add_benchmark(paths: dict, bench: dict) -> None:
    """Put the benchmark's metrics into metrics.json (key `benchmark`) and a section at the end of report.md,
    metrics.json first so that report.md, written last, still means the output is complete."""
    import json

    from ..atomic import write_text
    from ..evaluation.benchmarks import render_benchmark
    from ..evaluation.report import to_jsonable

    payload = json.loads(paths["metrics"].read_text(encoding="utf-8"))
    payload["benchmark"] = to_jsonable(bench)
    write_text(paths["metrics"], json.dumps(payload, indent=2, ensure_ascii=False, allow_nan=False) + "\n")
    text = paths["report"].read_text(encoding="utf-8")
    write_text(paths["report"], text.rstrip("\n") + "\n\n" + render_benchmark(bench))


def run(args: argparse.Namespace) -> int:
    from .. import demo
    from ..evaluation.benchmarks import benchmark_metrics
    from ..evaluation.runner import evaluate, write_eval

    manifest = Path(args.manifest)
    if not manifest.is_file():
        raise FileNotFoundError(f"--manifest {manifest} does not exist or is not a file")
    if args.benchmark not in ("auto", "none"):  # before the model loads: a wrong manifest costs nothing
        from ..data.manifest import read_manifest
        from ..evaluation.benchmarks import require_benchmark

        require_benchmark(read_manifest(manifest), args.benchmark, manifest)
    t0 = time.perf_counter()
    model = demo.load_model(args.model, device=args.device, dtype=args.dtype)
    name = _model_name(args.model)
    report = evaluate(model, manifest, tasks=args.tasks, limit=args.limit, batch_size=args.batch_size,
                      progress=True, max_new_tokens=args.max_new_tokens, model_name=name,
                      readout=args.readout)
    paths = write_eval(report, args.out, overlays=args.overlays)
    bench = benchmark_metrics(report.samples, args.benchmark)
    if bench is not None:
        _add_benchmark(paths, bench)
    summary = report.metrics["summary"]
    shown = " ".join(f"{k}={v:.4g}" for k, v in summary.items() if v is not None)
    print(f"umind eval: {name}: {len(report.samples)} samples in {time.perf_counter() - t0:.1f} s; {shown}")
    print(f"umind eval: wrote {paths['report']} and {paths['metrics']}", file=sys.stderr)
    return 0
