"""The UMind trainer: LoRA (or, for the small random-init models, all weights) on a manifest's conversations.

One loop serves a laptop, a GPU and `accelerate launch` on several processes: `accelerate.Accelerator` wraps
the model for DDP and shards the training batches; the rest is ours, one job per module: settings
(`config.py`), checkpoints (`checkpoints.py`), metrics (`metrics_log.py`), the loop itself (`run.py`: resume,
step, evaluate, checkpoint, summary). This module builds a run's pieces (model, split, loaders, optimizer,
schedule) and hands them over. Only the main process writes files.

A run lives in one output folder and can be killed at any moment: checkpoints are built in a hidden folder
and renamed into place when complete, and a new call with the same folder resumes from the newest complete
one (optimizer, schedule, RNG and the position inside the epoch), so the rest of the run is the run that
would have happened without the kill.

    <output_dir>/checkpoints/step-N/   see checkpoints.py
    <output_dir>/final/                the trained UMind folder
    <output_dir>/metrics.csv, tensorboard/, curves.png, summary.json
"""

from __future__ import annotations

import logging
import math
import os
import time
from pathlib import Path
from typing import Sequence

import torch

from ..data.split import group_split, hash_split, record_groups
from .checkpoints import clean_partial, frozen_fingerprint, latest_checkpoint
from .config import METRIC_COLUMNS, MIXED_PRECISION, TrainConfig, TrainingError, TrainSummary
from .run import RunParts, TrainRun, evaluate_loss
from .schedule import cosine_with_warmup

__all__ = ["TrainConfig", "TrainSummary", "TrainingError", "train", "evaluate_loss", "split_records",
           "latest_checkpoint", "default_lora", "METRIC_COLUMNS", "MIXED_PRECISION"]

logger = logging.getLogger(__name__)


# ---------------------------------------------------------------------------------------------- data split

def split_records(ids: Sequence[str], val_fraction: float,
                  groups: Sequence[str | None] | None = None) -> tuple[list[str], list[str]]:
    """(train ids, validation ids) by `data.split.hash_split`; with a positive fraction and at least two
    records one record validates even when no hash falls under the fraction. With `groups` (a record's group or
    None, `data.split.record_groups`) whole groups go to one side (`data.split.group_split`: an HC18 subject's
    images are never on both); records without a group split as they would without the argument."""
    try:
        if groups is not None and any(groups):
            return group_split(ids, groups, val_fraction, min_val=1 if val_fraction > 0 else 0)
        return hash_split(ids, val_fraction, min_val=1 if val_fraction > 0 else 0)
    except ValueError as exc:
        raise TrainingError(str(exc)) from None


class _EpochShuffle(torch.utils.data.Sampler):
    """A permutation that depends only on (seed, epoch): a resumed run replays the same order and skips ahead."""

    def __init__(self, n: int, seed: int):
        self.n, self.seed, self.epoch = n, seed, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self):
        gen = torch.Generator().manual_seed(self.seed * 1_000_003 + self.epoch)
        return iter(torch.randperm(self.n, generator=gen).tolist())

    def __len__(self) -> int:
        return self.n


def _item_indices(dataset, keep_ids: set[str]) -> list[int]:
    return [k for k, (r, _c) in enumerate(dataset.items) if dataset.records[r].id in keep_ids]


# ---------------------------------------------------------------------------------------------- model

def _load_model(model_or_path, full: bool):
    from ..modeling.umind import UMindVL

    if isinstance(model_or_path, UMindVL):
        return model_or_path
    if isinstance(model_or_path, (str, os.PathLike)):
        return UMindVL.from_pretrained(model_or_path, trainable=True, lora=None if full else default_lora())
    raise TrainingError(f"model_or_path must be a UMindVL or a model folder, got {type(model_or_path).__name__}")


def default_lora():
    from ..modeling.config import LoraSettings

    return LoraSettings()


def _set_trainable(model, full: bool) -> list[str]:
    """Mark what trains (the design's rule) and return those parameter names, sorted.

    LoRA mode: the adapter matrices, the new token rows and the mask decoder; full mode: everything. The names
    are sorted so the optimizer's parameter order (and with it the checkpointed optimizer state) depends on
    names only, not on how the model was built or loaded.
    """
    has_lora = model.config.lora is not None
    if full and has_lora:
        raise TrainingError("full=True trains every weight, but this model carries a LoRA adapter; "
                            "build or load it without LoRA (lora=None) for full training")
    if not full and not has_lora:
        raise TrainingError("this model has no LoRA adapter (a fully trained model); pass full=True (--full) "
                            "to train all its weights")
    for name, p in model.named_parameters():
        p.requires_grad_(full or "lora_" in name or "trainable_tokens_" in name
                         or name.startswith("mask_decoder."))
    names = sorted(n for n, p in model.named_parameters() if p.requires_grad)
    if not names:
        raise TrainingError("the model has no trainable parameters")
    return names


def _optimizer(model, names: list[str], config: TrainConfig) -> torch.optim.Optimizer:
    """AdamW with no decay on biases/norms; the mask decoder at `decoder_lr` when set. The first group is
    always a non-decoder group when there is one, so the logged rate is the adapter's."""
    params = dict(model.named_parameters())
    groups = []
    for decoder, lr in ((False, config.lr), (True, config.decoder_lr or config.lr)):
        own = [n for n in names if n.startswith("mask_decoder.") == decoder]
        groups += [{"params": [params[n] for n in own if params[n].ndim >= 2], "weight_decay": config.weight_decay,
                    "lr": lr},
                   {"params": [params[n] for n in own if params[n].ndim < 2], "weight_decay": 0.0, "lr": lr}]
    return torch.optim.AdamW([g for g in groups if g["params"]], lr=config.lr)


def _accelerator(config: TrainConfig):
    from accelerate import Accelerator, DistributedDataParallelKwargs

    if config.mixed_precision == "fp16" and not torch.cuda.is_available():
        raise TrainingError("mixed_precision='fp16' needs a CUDA GPU; use 'no' (or 'bf16') on the CPU")
    kwargs = dict(mixed_precision=config.mixed_precision,
                  # samples without masks leave the decoder without gradients: DDP must not wait for them
                  kwargs_handlers=[DistributedDataParallelKwargs(find_unused_parameters=True)])
    try:
        return Accelerator(**kwargs)
    except ValueError as exc:
        # a second run in one plain process with another precision: accelerate keeps a process-wide state
        if "already been initialized" not in str(exc) or int(os.environ.get("WORLD_SIZE", "1")) > 1:
            raise
        from accelerate.state import AcceleratorState, GradientState

        AcceleratorState._reset_state()
        GradientState._reset_state()
        return Accelerator(**kwargs)


# ---------------------------------------------------------------------------------------------- the run

def train(model_or_path, manifest: str | os.PathLike, config: TrainConfig,
          tasks: Sequence[str] | None = None) -> TrainSummary:
    """Train on the manifest's conversations, resuming from the newest complete checkpoint in output_dir."""
    t_start = time.perf_counter()
    if not isinstance(config, TrainConfig):
        raise TrainingError(f"config must be a TrainConfig, got {type(config).__name__}")
    manifest = Path(manifest)
    if not manifest.is_file():
        raise TrainingError(f"manifest {manifest} does not exist")
    out = Path(config.output_dir)
    accelerator = _accelerator(config)
    if accelerator.is_main_process:
        out.mkdir(parents=True, exist_ok=True)
        clean_partial(out)
    accelerator.wait_for_everyone()

    model = _load_model(model_or_path, config.full)
    names = _set_trainable(model, config.full)
    frozen = frozen_fingerprint(model)
    _apply_mask_loss_weight(model, config)
    model.train()
    run = TrainRun(config, _parts(accelerator, model, names, frozen, manifest, config, tasks), t_start)
    run.resume()
    return run.fit()


def _apply_mask_loss_weight(model, config: TrainConfig) -> None:
    """The run's mask loss weight into the model config, where the forward pass reads it.

    TrainConfig owns the weight (its docstring says why); the model's stored value is the last run's record.
    A different stored value is replaced, and said so, rather than silently."""
    stored = getattr(model.config, "mask_loss_weight", None)
    if stored is not None and float(stored) != float(config.mask_loss_weight):
        logger.info("mask_loss_weight %s of this run replaces the model's stored %s (the last run's)",
                    config.mask_loss_weight, stored)
    model.config.mask_loss_weight = float(config.mask_loss_weight)


def _parts(accelerator, model, names: list[str], frozen: dict, manifest: Path, config: TrainConfig,
           tasks) -> RunParts:
    """The data (split by id hash, whole groups where records name one), loaders, optimizer and schedule of a run, prepared by accelerate."""
    from .collate import ManifestDataset

    dataset = ManifestDataset(manifest, model.processor, num_mask_tokens=model.num_mask_tokens, tasks=tasks,
                              pack=config.pack)
    train_ids, val_ids = split_records([r.id for r in dataset.records], config.val_fraction,
                                       record_groups(dataset.records))
    train_items = _item_indices(dataset, set(train_ids))
    val_items = _item_indices(dataset, set(val_ids))
    if not train_items:
        raise TrainingError(f"{manifest}: no training conversations left after holding out {len(val_ids)} "
                            f"records for validation (val_fraction={config.val_fraction})")
    sampler = _EpochShuffle(len(train_items), config.seed)
    # own generators: creating a loader iterator must not draw from the global RNG that dropout uses,
    # or a resumed run would see other dropout masks than the uninterrupted one
    train_loader = torch.utils.data.DataLoader(
        torch.utils.data.Subset(dataset.augmented(config.augment, config.seed) if config.augment else dataset,
                                train_items), batch_size=config.batch_size, sampler=sampler,
        collate_fn=dataset.collate_fn, num_workers=config.num_workers,
        generator=torch.Generator().manual_seed(config.seed))
    rank, world = accelerator.process_index, accelerator.num_processes
    val_loader = torch.utils.data.DataLoader(
        torch.utils.data.Subset(dataset, val_items[rank::world]), batch_size=config.batch_size, shuffle=False,
        collate_fn=dataset.collate_fn, num_workers=config.num_workers,
        generator=torch.Generator().manual_seed(config.seed))

    optimizer = _optimizer(model, names, config)
    model, optimizer, train_loader = accelerator.prepare(model, optimizer, train_loader)
    steps_per_epoch = math.ceil(len(train_loader) / config.grad_accum)
    total = config.max_steps or max(1, math.ceil(config.epochs * steps_per_epoch))
    scheduler = cosine_with_warmup(optimizer.optimizer, total, config.warmup_ratio)
    accelerator.register_for_checkpointing(scheduler)
    # accelerate would save and load the whole network (the frozen 4B base too); the trainable tensors are
    # saved by name instead, which also keeps checkpoints independent of the number of processes
    accelerator.register_save_state_pre_hook(lambda models, weights, _dir: weights.clear())
    accelerator.register_load_state_pre_hook(lambda models, _dir: models.clear())
    return RunParts(accelerator=accelerator, model=model, names=names, frozen=frozen, optimizer=optimizer,
                    scheduler=scheduler, train_loader=train_loader, sampler=sampler,
                    val_loader=val_loader if val_items else None, steps_per_epoch=steps_per_epoch, total=total)
