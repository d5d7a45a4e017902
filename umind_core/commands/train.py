"""Fine-tune a UMind model on a manifest: LoRA by default, every weight with --full (a model trained from scratch).

Checkpoints are written atomically and a killed run resumes from the newest complete one in --out. Runs unchanged
under `accelerate launch` on several processes or GPUs.
"""

from __future__ import annotations

NAME = "train"
HELP = "fine-tune a model on a manifest (LoRA, or --full)"


def add_arguments(parser) -> None:
    from ..training.trainer import add_train_arguments

    add_train_arguments(parser)


def run(args) -> int:
    from ..training.trainer import run_train

    return run_train(args)
