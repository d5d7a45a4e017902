"""The UMind trainer: LoRA (or, for the small random-init models, all weights) on a manifest's conversations.

One loop serves a laptop, a GPU and `accelerate launch` on several processes: `accelerate.Accelerator` wraps
the model for DDP and shards the training batches; the rest (schedule, accumulation, checkpoints, logs) is
written here so that every rule is visible in one place. Only the main process writes files.

A run lives in one output folder and can be killed at any moment: checkpoints are built in a hidden folder
and renamed into place when complete, and a new call with the same folder resumes from the newest complete
one (optimizer, schedule, RNG and the position inside the epoch), so the rest of the run is the run that
would have happened without the kill.

    <output_dir>/checkpoints/step-N/   state/ (accelerate: optimizer, scheduler, RNG), trainable.safetensors,
                                       model/ (a UMind folder), trainer_state.json (written last)
    <output_dir>/final/                the trained UMind folder
    <output_dir>/metrics.csv, tensorboard/, curves.png, summary.json
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import dataclasses
import hashlib
import io
import json
import logging
import math
import numbers
import os
import re
import shutil
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Sequence

import torch

from ..atomic import atomic_path, replace_dir, write_text
from .schedule import cosine_with_warmup

__all__ = ["TrainConfig", "TrainSummary", "TrainingError", "train", "evaluate_loss", "split_records",
           "add_train_arguments", "run_train", "latest_checkpoint", "METRIC_COLUMNS"]

logger = logging.getLogger(__name__)

METRIC_COLUMNS = ("step", "epoch", "lr", "loss", "lm_loss", "mask_loss", "val_loss")
MIXED_PRECISION = ("no", "bf16", "fp16")
_STEP_DIR = re.compile(r"^step-(\d+)$")
_STATE_FILE = "trainer_state.json"
_TRAINABLE_FILE = "trainable.safetensors"


class TrainingError(ValueError):
    """Bad training input (settings, model, data, output folder); the message names the input and the problem."""


@dataclass
class TrainConfig:
    """Training settings; the defaults are the report's (AdamW, cosine, 5% warm-up, peak lr 1e-4, 5 epochs).

    eval_every / save_every count optimizer steps; 0 means once per epoch. max_steps, when set, is the length
    of the run (the data repeats as needed) and `epochs` is ignored. keep_checkpoints bounds the disk a long run
    takes (0 keeps all). pack puts all conversations of an image into one sample on a shared image prefix
    (`modeling.packing`): the same losses for a fraction of the work; batch_size then counts images.
    decoder_lr, when set, is the mask decoder's own peak rate (same schedule): the decoder is small, trained
    from its own loss only, and can move faster than the LoRA adapter without touching the text skills.
    progress draws a tqdm bar; without it (a server's train job) every logged step is an INFO line
    "umind train: step N/TOTAL ...", which the job's status shows and the Slicer panel turns into progress.
    """

    output_dir: str
    epochs: float = 5
    batch_size: int = 1
    grad_accum: int = 1
    lr: float = 1e-4
    decoder_lr: float | None = None
    warmup_ratio: float = 0.05
    weight_decay: float = 0.0
    max_grad_norm: float = 1.0
    mask_loss_weight: float = 1.0
    val_fraction: float = 0.1
    eval_every: int = 0
    save_every: int = 0
    seed: int = 0
    mixed_precision: str = "no"
    num_workers: int = 0
    max_steps: int | None = None
    full: bool = False
    pack: bool = True
    log_every: int = 10
    progress: bool = True
    keep_checkpoints: int = 3

    def __post_init__(self) -> None:
        if not isinstance(self.output_dir, (str, os.PathLike)) or not str(self.output_dir):
            raise TrainingError(f"output_dir must be a non-empty path, got {self.output_dir!r}")
        self.output_dir = str(self.output_dir)

        def number(name: str, lo: float, hi: float = math.inf, lo_open: bool = False, hi_open: bool = False):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, numbers.Real) or not math.isfinite(float(v)):
                raise TrainingError(f"{name} must be a finite number, got {v!r}")
            if (v <= lo if lo_open else v < lo) or (v >= hi if hi_open else v > hi):
                lo_b, hi_b = "(" if lo_open else "[", ")" if hi_open else "]"
                raise TrainingError(f"{name} must be in {lo_b}{lo}, {hi}{hi_b}, got {v!r}")

        def integer(name: str, lo: int, optional: bool = False):
            v = getattr(self, name)
            if optional and v is None:
                return
            if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < lo:
                raise TrainingError(f"{name} must be an int >= {lo}{' or None' if optional else ''}, got {v!r}")

        number("epochs", 0.0, lo_open=True)
        number("lr", 0.0, lo_open=True)
        if self.decoder_lr is not None:
            number("decoder_lr", 0.0, lo_open=True)
        number("warmup_ratio", 0.0, 1.0, hi_open=True)
        number("weight_decay", 0.0)
        number("max_grad_norm", 0.0)
        number("mask_loss_weight", 0.0)
        number("val_fraction", 0.0, 1.0, hi_open=True)
        for name in ("batch_size", "grad_accum", "log_every"):
            integer(name, 1)
        for name in ("eval_every", "save_every", "seed", "num_workers", "keep_checkpoints"):
            integer(name, 0)
        integer("max_steps", 1, optional=True)
        if self.mixed_precision not in MIXED_PRECISION:
            raise TrainingError(f"mixed_precision must be one of {MIXED_PRECISION}, got {self.mixed_precision!r}")
        for name in ("full", "pack", "progress"):
            if not isinstance(getattr(self, name), bool):
                raise TrainingError(f"{name} must be a bool, got {getattr(self, name)!r}")


@dataclass
class TrainSummary:
    steps: int
    epochs: float
    train_loss_first: float | None
    train_loss_last: float | None
    val_loss_first: float | None  # before the first step (the untrained model) when the run started fresh
    val_loss_last: float | None
    seconds: float
    final_dir: str
    resumed_from: int | None
    num_processes: int = 1


# ---------------------------------------------------------------------------------------------- data split

def _unit_hash(record_id: str) -> float:
    digest = hashlib.sha256(f"umind-split:{record_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2.0 ** 64


def split_records(ids: Sequence[str], val_fraction: float) -> tuple[list[str], list[str]]:
    """(train ids, validation ids) from a hash of each id alone.

    A record keeps its side when others are added or removed, so a growing datastore never moves a training
    image into validation. With a positive fraction and at least two records, the record with the smallest
    hash validates even when no hash falls under the fraction, so a small dataset still gets a validation loss.
    """
    ids = list(ids)
    if len(set(ids)) != len(ids):
        raise TrainingError("record ids must be unique to split them")
    if not 0.0 <= val_fraction < 1.0:
        raise TrainingError(f"val_fraction must be in [0, 1), got {val_fraction!r}")
    hashes = {i: _unit_hash(i) for i in ids}
    val = {i for i in ids if hashes[i] < val_fraction}
    if val_fraction > 0 and not val and len(ids) >= 2:
        val = {min(ids, key=hashes.__getitem__)}
    return [i for i in ids if i not in val], [i for i in ids if i in val]


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


# ---------------------------------------------------------------------------------------------- evaluation

def _to_device(obj, device: torch.device):
    if isinstance(obj, torch.Tensor):
        return obj.to(device)
    if isinstance(obj, dict):
        return {k: _to_device(v, device) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_to_device(v, device) for v in obj)
    return obj


def evaluate_loss(model, dataloader) -> dict:
    """Mean loss, lm_loss and mask_loss over a loader, without gradients, each batch weighted by its samples.

    mask_loss averages over the batches that have mask targets. Under torch.distributed every process passes
    its own shard and gets the mean over all shards, so each process must call this at the same point.
    Values are None when nothing contributed.
    """
    module = model.module if hasattr(model, "module") else model
    device = module.device
    was_training = module.training
    module.eval()
    sums = torch.zeros(5, dtype=torch.float64, device=device)  # loss, lm, samples, mask, samples with masks
    try:
        with torch.no_grad():
            for batch in dataloader:
                out = model(**_to_device(batch, device))
                if out.loss is None:
                    raise TrainingError("evaluate_loss needs batches with labels (the model returned no loss)")
                n = float(batch["input_ids"].shape[0])
                sums[0] += out.loss.double() * n
                sums[1] += (out.lm_loss if out.lm_loss is not None else out.loss.new_zeros(())).double() * n
                sums[2] += n
                if out.mask_loss is not None:
                    sums[3] += out.mask_loss.double() * n
                    sums[4] += n
    finally:
        module.train(was_training)
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.all_reduce(sums)
    loss, lm, n, mask, n_mask = sums.tolist()
    return {"loss": loss / n if n else None, "lm_loss": lm / n if n else None,
            "mask_loss": mask / n_mask if n_mask else None}


# ---------------------------------------------------------------------------------------------- model

def _load_model(model_or_path, full: bool):
    from ..modeling.umind import UMindVL

    if isinstance(model_or_path, UMindVL):
        return model_or_path
    if isinstance(model_or_path, (str, os.PathLike)):
        return UMindVL.from_pretrained(model_or_path, trainable=True, lora=None if full else _default_lora())
    raise TrainingError(f"model_or_path must be a UMindVL or a model folder, got {type(model_or_path).__name__}")


def _default_lora():
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


def _frozen_fingerprint(model) -> dict[str, list[float]]:
    """(sum, sum of |w|) of every frozen tensor: a checkpoint holds only trainable tensors, so resuming on
    another base (another --model or seed) would silently train a different network; this catches it."""
    out = {}
    with torch.no_grad():
        for name, p in model.named_parameters():
            if not p.requires_grad:
                out[name] = [float(p.sum(dtype=torch.float64)), float(p.abs().sum(dtype=torch.float64))]
    return out


def _same_base(saved: dict, current: dict) -> bool:
    if saved.keys() != current.keys():
        return False
    return all(abs(saved[n][0] - current[n][0]) <= 1e-5 * max(saved[n][1], current[n][1]) + 1e-6
               and abs(saved[n][1] - current[n][1]) <= 1e-5 * saved[n][1] + 1e-6 for n in saved)


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


# ---------------------------------------------------------------------------------------------- checkpoints

def latest_checkpoint(output_dir: str | os.PathLike) -> Path | None:
    """The complete checkpoint with the highest step (trainer_state.json is written last), or None."""
    folder = Path(output_dir) / "checkpoints"
    best = None
    if folder.is_dir():
        for entry in folder.iterdir():
            m = _STEP_DIR.match(entry.name)
            if m and (entry / _STATE_FILE).is_file() and (best is None or int(m.group(1)) > best[0]):
                best = (int(m.group(1)), entry)
    return None if best is None else best[1]


def _clean_partial(output_dir: Path) -> None:
    """Remove what a killed run leaves behind: unfinished checkpoints and temporary files of atomic writes."""
    ckpts = output_dir / "checkpoints"
    if ckpts.is_dir():
        for entry in ckpts.iterdir():
            if entry.name.startswith(".step-"):
                shutil.rmtree(entry, ignore_errors=True)
    if output_dir.is_dir():
        for entry in output_dir.iterdir():
            name = entry.name
            if name.startswith((".final.tmp-", ".final.old-")) and entry.is_dir():
                shutil.rmtree(entry, ignore_errors=True)
            elif name.startswith(".tmp-") and entry.is_file():  # umind_core.atomic's temporary files
                entry.unlink(missing_ok=True)


def _prune_checkpoints(output_dir: Path, keep: int) -> None:
    if keep <= 0:
        return
    ckpts = output_dir / "checkpoints"
    steps = sorted((int(m.group(1)), e) for e in ckpts.iterdir() if (m := _STEP_DIR.match(e.name)))
    for _step, entry in steps[:-keep]:
        doomed = entry.with_name(f".{entry.name}.old")  # renamed first: a half-deleted folder never looks complete
        os.replace(entry, doomed)
        shutil.rmtree(doomed, ignore_errors=True)


def _save_trainable(model, names: list[str], path: Path) -> None:
    from safetensors.torch import save_file

    params = dict(model.named_parameters())
    save_file({n: params[n].detach().cpu().contiguous() for n in names}, str(path), metadata={"format": "pt"})


def _load_trainable(model, names: list[str], path: Path) -> None:
    from safetensors.torch import load_file

    state = load_file(str(path))
    missing, unexpected = sorted(set(names) - set(state)), sorted(set(state) - set(names))
    if missing or unexpected:
        raise TrainingError(f"checkpoint {path.parent} does not match this model: missing {missing[:5]}, "
                            f"unexpected {unexpected[:5]}")
    params = dict(model.named_parameters())
    with torch.no_grad():
        for n in names:
            if params[n].shape != state[n].shape:
                raise TrainingError(f"checkpoint {path.parent}: {n} has shape {tuple(state[n].shape)}, "
                                    f"the model has {tuple(params[n].shape)}")
            params[n].copy_(state[n])


# ---------------------------------------------------------------------------------------------- logs

@contextlib.contextmanager
def _quiet_saving():
    """transformers draws a progress bar for every shard it writes; under the trainer's own bar that is noise."""
    from transformers.utils import logging as hf_logging

    was_enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_enabled:
            hf_logging.enable_progress_bar()


def _fmt(v) -> str:
    return "" if v is None else (f"{v:.6g}" if isinstance(v, float) else str(v))


def _read_rows(path: Path, upto: int) -> dict[int, dict]:
    rows: dict[int, dict] = {}
    if not path.is_file():
        return rows
    with path.open(newline="") as fh:
        for raw in csv.DictReader(fh):
            try:
                step = int(raw["step"])
            except (KeyError, TypeError, ValueError):
                continue
            if step > upto:
                continue
            row = {"step": step}
            for col in METRIC_COLUMNS[1:]:
                val = raw.get(col)
                row[col] = float(val) if val not in (None, "") else None
            rows[step] = row
    return rows


def _write_rows(path: Path, rows: dict[int, dict]) -> None:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(METRIC_COLUMNS)
    for step in sorted(rows):
        writer.writerow([_fmt(rows[step].get(c)) for c in METRIC_COLUMNS])
    write_text(path, buf.getvalue())


def _plot_curves(path: Path, rows: dict[int, dict]) -> None:
    import matplotlib

    matplotlib.use("Agg", force=True)
    from matplotlib.figure import Figure

    fig = Figure(figsize=(9, 6), dpi=100)
    ax_loss, ax_lr = fig.add_subplot(2, 1, 1), fig.add_subplot(2, 1, 2)
    styles = {"loss": "-", "lm_loss": "--", "mask_loss": ":", "val_loss": "-o"}
    for col, style in styles.items():
        pts = [(s, r[col]) for s, r in sorted(rows.items()) if r.get(col) is not None]
        if pts:
            ax_loss.plot(*zip(*pts), style, label=col, markersize=3)
    ax_loss.set_ylabel("loss")
    ax_loss.legend(loc="upper right")
    ax_loss.grid(alpha=0.3)
    pts = [(s, r["lr"]) for s, r in sorted(rows.items()) if r.get("lr") is not None]
    if pts:
        ax_lr.plot(*zip(*pts), "-")
    ax_lr.set_xlabel("optimizer step")
    ax_lr.set_ylabel("learning rate")
    ax_lr.grid(alpha=0.3)
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(str(tmp), format="png")


# ---------------------------------------------------------------------------------------------- the loop

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


def train(model_or_path, manifest: str | os.PathLike, config: TrainConfig,
          tasks: Sequence[str] | None = None) -> TrainSummary:
    """Train on the manifest's conversations, resuming from the newest complete checkpoint in output_dir."""
    from .collate import ManifestDataset

    t_start = time.perf_counter()
    if not isinstance(config, TrainConfig):
        raise TrainingError(f"config must be a TrainConfig, got {type(config).__name__}")
    manifest = Path(manifest)
    if not manifest.is_file():
        raise TrainingError(f"manifest {manifest} does not exist")
    out = Path(config.output_dir)
    accelerator = _accelerator(config)
    main = accelerator.is_main_process
    if main:
        out.mkdir(parents=True, exist_ok=True)
        _clean_partial(out)
    accelerator.wait_for_everyone()

    model = _load_model(model_or_path, config.full)
    names = _set_trainable(model, config.full)
    frozen = _frozen_fingerprint(model)
    model.config.mask_loss_weight = float(config.mask_loss_weight)
    model.train()

    dataset = ManifestDataset(manifest, model.processor, num_mask_tokens=model.num_mask_tokens, tasks=tasks,
                              pack=config.pack)
    train_ids, val_ids = split_records([r.id for r in dataset.records], config.val_fraction)
    train_items = _item_indices(dataset, set(train_ids))
    val_items = _item_indices(dataset, set(val_ids))
    if not train_items:
        raise TrainingError(f"{manifest}: no training conversations left after holding out {len(val_ids)} "
                            f"records for validation (val_fraction={config.val_fraction})")
    sampler = _EpochShuffle(len(train_items), config.seed)
    # own generators: creating a loader iterator must not draw from the global RNG that dropout uses,
    # or a resumed run would see other dropout masks than the uninterrupted one
    train_loader = torch.utils.data.DataLoader(
        torch.utils.data.Subset(dataset, train_items), batch_size=config.batch_size, sampler=sampler,
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
    unwrapped = accelerator.unwrap_model(model)

    step, resumed_from = 0, None
    evaluated_at = saved_at = None  # the same on every process: decisions depend on the step only
    ckpt = latest_checkpoint(out)
    if ckpt is not None:
        state = json.loads((ckpt / _STATE_FILE).read_text())
        if state.get("trainable") != names:
            raise TrainingError(f"checkpoint {ckpt} was written for other trainable parameters than this model's "
                                f"({len(state.get('trainable', []))} vs {len(names)}); use another output_dir")
        if not _same_base(state.get("frozen", {}), frozen):
            raise TrainingError(f"checkpoint {ckpt} was trained on another base model (its frozen weights differ "
                                "from this model's); resume with the same model, or use another output_dir")
        _load_trainable(unwrapped, names, ckpt / _TRAINABLE_FILE)
        accelerator.load_state(str(ckpt / "state"))
        step = resumed_from = saved_at = int(state["step"])
        if state.get("steps_per_epoch") != steps_per_epoch:
            logger.warning("resuming %s with %s steps per epoch (the checkpoint had %s): the data or the number "
                           "of processes changed, so the epoch position is approximate", ckpt, steps_per_epoch,
                           state.get("steps_per_epoch"))
        logger.info("resuming from %s (step %d of %d)", ckpt, step, total)
    else:
        from accelerate.utils import set_seed

        set_seed(config.seed)

    rows = _read_rows(out / "metrics.csv", upto=step) if (main and resumed_from is not None) else {}
    writer = None
    if main:
        from torch.utils.tensorboard import SummaryWriter

        if resumed_from is None:  # events of a run killed before its first checkpoint would mix with this one
            shutil.rmtree(out / "tensorboard", ignore_errors=True)

        writer = SummaryWriter(log_dir=str(out / "tensorboard"),
                               purge_step=None if resumed_from is None else resumed_from + 1)

    def record(at: int, values: dict, tags: dict) -> None:
        """One metrics.csv row (merged with what step `at` already has) and the TensorBoard scalars."""
        if not main:
            return
        row = rows.setdefault(at, {"step": at, "epoch": at / steps_per_epoch})
        row.update({k: v for k, v in values.items() if v is not None})
        for tag, v in tags.items():
            if v is not None:
                writer.add_scalar(tag, v, at)
        _write_rows(out / "metrics.csv", rows)

    def run_eval(at: int) -> None:
        nonlocal evaluated_at
        if not val_items:
            return
        evaluated_at = at
        result = evaluate_loss(unwrapped, val_loader)
        record(at, {"val_loss": result["loss"]}, {f"val/{k}": v for k, v in result.items()})

    def save_checkpoint(at: int) -> None:
        nonlocal saved_at
        saved_at = at
        ckpts = out / "checkpoints"
        tmp, final = ckpts / f".step-{at}.tmp", ckpts / f"step-{at}"
        if main:
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir(parents=True)
        accelerator.wait_for_everyone()
        accelerator.save_state(str(tmp / "state"))
        accelerator.wait_for_everyone()
        if main:
            _save_trainable(unwrapped, names, tmp / _TRAINABLE_FILE)
            with _quiet_saving():
                unwrapped.save_pretrained(tmp / "model")
            state = {"step": at, "epoch": at / steps_per_epoch, "steps_per_epoch": steps_per_epoch,
                     "total_steps": total, "num_processes": world, "trainable": names, "frozen": frozen,
                     "config": asdict(config)}
            write_text(tmp / _STATE_FILE, json.dumps(state, indent=1) + "\n")
            replace_dir(tmp, final)
            _prune_checkpoints(out, config.keep_checkpoints)
        accelerator.wait_for_everyone()

    if step == 0:
        run_eval(0)

    from tqdm.auto import tqdm

    bar = tqdm(total=total, initial=step, disable=not (config.progress and main), desc="train", unit="step",
               dynamic_ncols=True)
    window = torch.zeros(5, dtype=torch.float64, device=accelerator.device)  # loss, lm, micro, mask, mask n
    n_batches = len(train_loader)
    ga = config.grad_accum
    epoch = step // steps_per_epoch
    while step < total:
        skip = (step - epoch * steps_per_epoch) * ga
        loader = accelerator.skip_first_batches(train_loader, skip) if skip else train_loader
        # accelerate's loaders re-set the sampler's epoch from their own iteration count on every pass (a
        # fresh skipping loader would count from 0), so the epoch is set on the loader and on the sampler
        loader.set_epoch(epoch)
        sampler.set_epoch(epoch)
        micro = skip
        for batch in loader:
            group_start = (micro // ga) * ga
            group_size = min(ga, n_batches - group_start)
            boundary = micro + 1 == group_start + group_size
            with contextlib.nullcontext() if boundary else accelerator.no_sync(model):
                output = model(**batch)
                accelerator.backward(output.loss / group_size)
            window[0] += output.loss.detach().double() / group_size
            window[1] += output.lm_loss.detach().double() / group_size if output.lm_loss is not None else 0.0
            window[2] += 1.0 / group_size
            if output.mask_loss is not None:
                window[3] += output.mask_loss.detach().double()
                window[4] += 1
            micro += 1
            if not boundary:
                continue
            if config.max_grad_norm > 0:
                accelerator.clip_grad_norm_(model.parameters(), config.max_grad_norm)
            lr = optimizer.param_groups[0]["lr"]
            optimizer.step()
            if not accelerator.optimizer_step_was_skipped:  # fp16 overflow: the schedule waits for a real step
                scheduler.step()
            optimizer.zero_grad(set_to_none=True)
            step += 1
            bar.update(1)
            epoch_end = step % steps_per_epoch == 0
            if step == 1 or step % config.log_every == 0 or step == total:
                sums = accelerator.reduce(window.clone(), reduction="sum").tolist()
                loss = sums[0] / sums[2] if sums[2] else None
                values = {"lr": lr, "loss": loss, "lm_loss": sums[1] / sums[2] if sums[2] else None,
                          "mask_loss": sums[3] / sums[4] if sums[4] else None}
                record(step, values, {f"train/{k}": v for k, v in values.items()})
                if loss is not None:
                    bar.set_postfix(loss=f"{loss:.4f}", lr=f"{lr:.2e}")
                if main and not config.progress:  # no bar (a server's train job): progress as log lines
                    logger.info("umind train: step %d/%d loss %s lr %.2e", step, total, _fmt(loss), lr)
                window.zero_()
            if (config.eval_every and step % config.eval_every == 0) or (not config.eval_every and epoch_end):
                run_eval(step)
            if (config.save_every and step % config.save_every == 0) or (not config.save_every and epoch_end):
                save_checkpoint(step)
            if step >= total:
                break
        epoch += 1
    bar.close()

    if evaluated_at != step:
        run_eval(step)
    if saved_at != step:
        save_checkpoint(step)

    model = accelerator.unwrap_model(model, keep_fp32_wrapper=False)
    final_dir = out / "final"
    summary = None
    if main:
        with _quiet_saving():
            model.save_pretrained(final_dir)
        losses = [rows[s]["loss"] for s in sorted(rows) if rows[s].get("loss") is not None]
        vals = [rows[s]["val_loss"] for s in sorted(rows) if rows[s].get("val_loss") is not None]
        summary = TrainSummary(
            steps=step, epochs=step / steps_per_epoch,
            train_loss_first=losses[0] if losses else None, train_loss_last=losses[-1] if losses else None,
            val_loss_first=vals[0] if vals else None, val_loss_last=vals[-1] if vals else None,
            seconds=time.perf_counter() - t_start, final_dir=str(final_dir), resumed_from=resumed_from,
            num_processes=world)
        _plot_curves(out / "curves.png", rows)
        writer.flush()
        writer.close()
        write_text(out / "summary.json", json.dumps(asdict(summary), indent=2) + "\n")
    accelerator.wait_for_everyone()
    if summary is None:  # other processes read what the main process wrote, so every caller gets one answer
        data = json.loads((out / "summary.json").read_text())
        summary = TrainSummary(**data)
    return summary


# ---------------------------------------------------------------------------------------------- CLI

_CLI_FIELDS = ("epochs", "batch_size", "grad_accum", "lr", "decoder_lr", "warmup_ratio", "weight_decay", "max_grad_norm",
               "mask_loss_weight", "val_fraction", "eval_every", "save_every", "seed", "num_workers",
               "max_steps", "log_every", "keep_checkpoints")


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
    parser.add_argument("--full", action="store_true", help="train all weights (no LoRA): for random-init models")
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
    types = {"max_steps": int, "epochs": float, "decoder_lr": float}
    for name in _CLI_FIELDS:
        default = defaults[name]
        kind = types.get(name, type(default))
        parser.add_argument(f"--{name.replace('_', '-')}", type=kind, default=default,
                            help=f"default: {default}")


def _resolve_mixed_precision(value: str) -> str:
    if value != "auto":
        return value
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


def run_train(args: argparse.Namespace) -> int:
    """`umind train`: build or load the model, train, print the summary as JSON."""
    tasks = [t.strip() for t in args.tasks.split(",") if t.strip()] if getattr(args, "tasks", None) else None
    config = TrainConfig(output_dir=args.out, full=bool(args.full), pack=not args.no_pack,
                         progress=not args.no_progress,
                         mixed_precision=_resolve_mixed_precision(args.mixed_precision),
                         **{name: getattr(args, name) for name in _CLI_FIELDS})
    manifest = Path(args.manifest)
    if not manifest.is_file():
        raise TrainingError(f"manifest {manifest} does not exist")
    Path(config.output_dir).mkdir(parents=True, exist_ok=True)
    manifest = _manifest_with_conversations(manifest, Path(config.output_dir), config.seed, tasks)
    if args.model:
        from ..modeling.umind import UMindVL

        model = UMindVL.from_pretrained(args.model, dtype=args.dtype, trainable=True,
                                        lora=None if args.full else _default_lora())
    else:
        from ..modeling.tiny import build_model

        model = build_model(args.size, seed=config.seed, lora=None if args.full else _default_lora(),
                            image_size=args.image_size)
    summary = train(model, manifest, config, tasks=tasks)
    from accelerate.state import PartialState

    if PartialState().is_main_process:
        print(json.dumps(asdict(summary), indent=2))
    return 0
