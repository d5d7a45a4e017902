"""Run a model over a U2-Bench release with the evaluation kit's prompts; write the kit's result layout
(<task_type>/<dataset>/<model>/*_combined_results.jsonl), scores.json (per dataset, per task, U2-Score) and report.md.

DATA holds <task_type>/<dataset>.tsv (cla, seg, measurement, report; the kit's dataset ids) or tsv_paths.json
mapping {task_type: {dataset: tsv}}; each TSV in the kit's format (img_data base64 or img_path, and the columns its
prompts and scorers read).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

NAME = "u2bench"
HELP = "run and score a model on a U2-Bench release (the evaluation kit's prompts, layout and U2-Score)"


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {value}")
    return value


def _names(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("data", help="the U2-Bench release folder")
    parser.add_argument("--model", help="a UMind folder (default: the bundled demo model)")
    parser.add_argument("--out", required=True, help="output folder: the kit's layout, scores.json, report.md")
    parser.add_argument("--model-name", help="the model folder name in the layout (default: --model's folder name)")
    parser.add_argument("--task-types", type=_names, help="comma-separated subset of cla,seg,measurement,report")
    parser.add_argument("--datasets", type=_names, help="comma-separated dataset ids (e.g. 21,04,39)")
    parser.add_argument("--limit", type=_count, help="only the first N rows of each dataset")
    parser.add_argument("--batch-size", type=_count, default=8, help="rows per forward")
    parser.add_argument("--max-new-tokens", type=_count, default=256)
    parser.add_argument("--no-grounded", action="store_true",
                        help="seg: do not ask for a box when the answer names no location")
    parser.add_argument("--score-only", action="store_true",
                        help="score the results already in --out for --model-name (any model's kit output)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])


def _default_name(path: str | None) -> str:
    from .. import demo

    from ..model_identity import model_name

    if path:  # a folder name in the kit's layout: "thyroid-final", never just "final"
        return model_name(Path(path).resolve()).replace("/", "-")
    return "UMind-demo" if demo.has_demo_model() else "untrained-tiny"


def run(args: argparse.Namespace) -> int:
    from .. import demo
    from ..evaluation.u2bench_runner import headline, run_u2bench, write_scores

    if args.score_only and not args.model_name:
        raise ValueError("--score-only needs --model-name (the model folder of the results to score)")

    def load():
        return demo.load_model(args.model, device=args.device, dtype=args.dtype)

    name = args.model_name or _default_name(args.model)
    scores = run_u2bench(None if args.score_only else load, args.data, args.out, model_name=name,
                         task_types=args.task_types, datasets=args.datasets, limit=args.limit,
                         batch_size=args.batch_size, max_new_tokens=args.max_new_tokens,
                         grounded=not args.no_grounded)
    paths = write_scores(args.out, scores)
    tasks = " ".join(f"{t}={v:.3f}" for t, v in scores["task_scores"].items() if t in scores["tasks_present"])
    print(f"umind u2bench: {scores['model']}: {scores['rows']} rows in {scores['seconds']:.1f} s; "
          f"{headline(scores)} (task scores {tasks or 'none'})")
    print(f"umind u2bench: wrote {paths['scores']} and {paths['report']}", file=sys.stderr)
    return 0
