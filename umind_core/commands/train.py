"""Fine-tune a UMind model on a manifest: LoRA by default, every weight with --full (a model trained from scratch).

The manifest is checked first (`umind check`, umind_core/data/check.py): bad records are listed and skipped, empty
masks become negatives and named label maps are split; with --strict any problem stops the run (exit 1). Records of
a test split (``split: test``, HC18's ``test_set``; `data.split.is_test_split`) are then left out with one line
saying how many: an import's manifest.jsonl holds every split, and a test case must never be trained on. A UMind
folder without an adapter (a fully trained model such as the demo) gets a fresh LoRA adapter, as the server's
retraining does; --full trains every weight instead.

Checkpoints are written atomically and a killed run resumes from the newest complete one in --out. Runs unchanged
under `accelerate launch` on several processes or GPUs. One flag per TrainConfig field (its defaults).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from dataclasses import asdict
from pathlib import Path

from ..training.config import MIXED_PRECISION, TrainConfig, TrainingError, setting_type

__all__ = ["NAME", "HELP", "add_arguments", "run", "add_train_arguments", "run_train"]

NAME = "train"
HELP = "fine-tune a model on a manifest (LoRA, or --full)"


def add_arguments(parser) -> None:
    add_train_arguments(parser)


def run(args) -> int:
    return run_train(args)


#: TrainConfig fields with a flag of their own below (--out, --full, --no-pack, --no-progress, --mixed-precision
#: with "auto"); every other field gets the generic flag, so a new setting is a new flag without an edit here
_OWN_FLAGS = ("output_dir", "full", "pack", "progress", "mixed_precision")
_CLI_FIELDS = tuple(f.name for f in dataclasses.fields(TrainConfig) if f.name not in _OWN_FLAGS)


def add_train_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags of `umind train`: one per TrainConfig field (defaults from TrainConfig), plus model and data."""
    defaults = {f.name: f.default for f in dataclasses.fields(TrainConfig)}
    parser.add_argument("--manifest", required=True,
                        help="training manifest (JSONL); without conversations they are built first")
    parser.add_argument("--out", required=True, help="output folder (resumes when it holds checkpoints)")
    parser.add_argument("--model", help="a UMind folder or a Qwen3-VL base folder (default: a fresh model)")
    parser.add_argument("--size", default="small", choices=["tiny", "small"], help="size of a fresh model")
    parser.add_argument("--image-size", type=int, default=None,
                        help="input resolution of a fresh model (default: the size's own, 512 for small)")
    parser.add_argument("--max-image-size", type=int, default=None,
                        help="with --model: images larger than the model's input keep up to about N x N pixels "
                        "(smaller ones keep the model's own size); saved with the trained model")
    parser.add_argument("--min-image-size", type=int, default=None,
                        help="with --model: images smaller than N x N pixels are read enlarged to about that "
                        "(at most the largest size; applied after --max-image-size); saved with the trained model")
    parser.add_argument("--full", action="store_true", help="train all weights (no LoRA): for random-init models")
    parser.add_argument("--strict", action="store_true",
                        help="stop (exit 1) when the manifest check finds any problem, instead of skipping the "
                             "bad records")
    parser.add_argument("--no-pack", action="store_true",
                        help="one sample per conversation instead of all of an image's conversations on one "
                             "shared image prefix (same losses; 2.45x slower on the small config at 256 px, "
                             "benchmarks/bench_packing.py)")
    parser.add_argument("--tasks", help="comma-separated tasks to train on (default: all)")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"],
                        help="dtype to load --model in")
    parser.add_argument("--mixed-precision", default="auto", choices=["auto", *MIXED_PRECISION],
                        help="auto: bf16 (or fp16) on a GPU, no on the CPU")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    for name in _CLI_FIELDS:  # type and default from the field; TrainConfig checks the value when the run starts
        default = defaults[name]
        parser.add_argument(f"--{name.replace('_', '-')}", type=setting_type(TrainConfig, name)[0],
                            default=default, help=f"default: {default}")


def _resolve_mixed_precision(value: str) -> str:
    if value != "auto":
        return value
    import torch

    if torch.cuda.is_available():
        return "bf16" if torch.cuda.is_bf16_supported() else "fp16"
    return "no"


def _manifest_with_conversations(manifest: Path, out: Path, seed: int, tasks) -> Path:
    from ..data.manifest import read_manifest

    if any(rec.conversations for rec in read_manifest(manifest)):
        return manifest
    from ..data.conversations import attach_conversations

    target = out / "train_manifest.jsonl"
    print(f"umind train: {manifest} has no conversations; writing them to {target}", file=sys.stderr)
    return Path(attach_conversations(manifest, target, seed=seed, tasks=tasks))


def _checked_manifest(manifest: Path, out: Path, strict: bool) -> Path | None:
    """Check the manifest as `umind check` does and print what it found (on stderr: stdout is the summary).

    Returns the manifest to train on (bad records left out, empty masks dropped, label maps split), or None when
    --strict met a problem. Under `accelerate launch` only the first process prints; every process writes the
    same checked manifest, atomically.
    """
    from ..data.check import check_manifest, leave_out_test_split, report_lines, training_manifest

    result = check_manifest(manifest)
    main = int(os.environ.get("RANK", "0")) == 0
    if main:
        for line in report_lines(result, manifest):
            print(f"umind train: {line}", file=sys.stderr)
    if strict and result.errors:
        print(f"umind train: --strict: {len(result.errors)} problems in {manifest}; nothing trained",
              file=sys.stderr)
        return None
    left = leave_out_test_split(result)
    n_test = sum(left.values())
    if n_test and main:
        splits = ", ".join(f"{n} of split {name!r}" for name, n in left.items())
        print(f"umind train: left out {n_test} test record(s) of {manifest} ({splits}): a test case is never "
              "trained on (an import's DIR/train.jsonl holds the training split alone)", file=sys.stderr)
    if not result.kept:
        why = f" ({n_test} of them are test cases)" if n_test else ""
        raise TrainingError(f"no record of {manifest} is left to train on after the check{why}")
    return training_manifest(result, out)


def _model(args: argparse.Namespace, config: TrainConfig):
    """The model to train. A UMind folder without an adapter gets a fresh one unless --full, as the server's
    train task does (`model.attach_lora()`): retraining a handful of images then changes the adapter, the new
    token rows and the decoder instead of every weight."""
    from ..training.trainer import default_lora

    lora = None if args.full else default_lora()
    if not args.model:
        from ..modeling.tiny import build_model

        return build_model(args.size, seed=config.seed, lora=lora, image_size=args.image_size)
    from ..modeling.umind import UMindVL

    model = UMindVL.from_pretrained(args.model, dtype=args.dtype, trainable=True, lora=lora)
    if args.max_image_size is not None:
        from ..modeling.tiny import set_max_image_size

        set_max_image_size(model.processor, args.max_image_size)
    if args.min_image_size is not None:
        from ..modeling.tiny import set_min_image_size

        set_min_image_size(model.processor, args.min_image_size)
    if lora is not None and model.config.lora is None:
        print(f"umind train: {args.model} has no LoRA adapter; attaching a fresh one (--full trains every "
              "weight instead)", file=sys.stderr)
        model.attach_lora(lora)
    return model


def run_train(args: argparse.Namespace) -> int:
    """`umind train`: check the manifest, build or load the model, train, print the summary as JSON."""
    from ..training.trainer import train

    tasks = [t.strip() for t in args.tasks.split(",") if t.strip()] if getattr(args, "tasks", None) else None
    config = TrainConfig(output_dir=args.out, full=bool(args.full), pack=not args.no_pack,
                         progress=not args.no_progress,
                         mixed_precision=_resolve_mixed_precision(args.mixed_precision),
                         **{name: getattr(args, name) for name in _CLI_FIELDS})
    for flag, size in (("--max-image-size", args.max_image_size), ("--min-image-size", args.min_image_size)):
        if size is None:  # refused before the manifest's check, not after it
            continue
        from ..modeling.tiny import check_image_size

        if not args.model:
            raise TrainingError(f"{flag} continues a model (--model); a fresh one takes --image-size")
        check_image_size(size)
    manifest = Path(args.manifest)
    if not manifest.is_file():
        raise TrainingError(f"manifest {manifest} does not exist")
    Path(config.output_dir).mkdir(parents=True, exist_ok=True)
    manifest = _checked_manifest(manifest, Path(config.output_dir), bool(getattr(args, "strict", False)))
    if manifest is None:
        return 1
    manifest = _manifest_with_conversations(manifest, Path(config.output_dir), config.seed, tasks)
    summary = train(_model(args, config), manifest, config, tasks=tasks)
    from accelerate.state import PartialState

    if PartialState().is_main_process:
        print(json.dumps(asdict(summary), indent=2))
    return 0
