"""One training run as an object: resume, step, evaluate, checkpoint, summary.

`trainer.train` builds the pieces (model, data, optimizer, schedule, accelerator) and hands them to a
`TrainRun`; the run owns the state they share (the step, what was evaluated and saved last, the loss window),
so every rule of the loop sits in one small method: resuming at the position inside the epoch, gradient
accumulation, logging, evaluation and checkpoint cadence, the final save. Only the main process writes files.
"""

from __future__ import annotations

import contextlib
import json
import logging
import shutil
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from ..atomic import replace_dir, write_text
from .checkpoints import (STATE_FILE, TRAINABLE_FILE, latest_checkpoint, load_trainable, prune_checkpoints,
                          quiet_saving, same_base, save_trainable)
from .config import TrainConfig, TrainingError, TrainSummary
from .metrics_log import MetricsLog, fmt

__all__ = ["TrainRun", "RunParts", "evaluate_loss"]

logger = logging.getLogger("umind_core.training.trainer")  # the name servers filter progress lines by
#: without a bar (a server's train job) a progress line comes every `log_every` steps and also whenever this many
#: seconds passed since the last one: with the 4B model on a CPU, 10 steps take minutes, and a job that says
#: nothing for minutes looks hung
PROGRESS_EVERY_S = 30.0


@dataclass
class RunParts:
    """What `trainer.train` builds for a run (already passed through `accelerator.prepare`)."""

    accelerator: object
    model: torch.nn.Module
    names: list[str]  # trainable parameter names, sorted
    frozen: dict  # fingerprint of the frozen weights (checkpoints refuse another base)
    optimizer: object
    scheduler: object
    train_loader: object
    sampler: object  # the epoch shuffle, re-seeded per epoch
    val_loader: object | None  # None when nothing is held out
    steps_per_epoch: int
    total: int


class TrainRun:
    def __init__(self, config: TrainConfig, parts: RunParts, t_start: float | None = None):
        self.config, self.p = config, parts
        self.out = Path(config.output_dir)
        self.main = parts.accelerator.is_main_process
        self.unwrapped = parts.accelerator.unwrap_model(parts.model)
        self.step, self.resumed_from = 0, None
        self.evaluated_at = self.saved_at = None  # the same on every process: decisions depend on the step only
        self.t_start = time.perf_counter() if t_start is None else t_start
        self.log: MetricsLog | None = None
        self.fit_from = (self.t_start, 0)  # (time, step) where this process began stepping: the rate's origin
        self.line_at = self.t_start  # when the last progress line was written
        # loss, lm loss, micro-batches, mask loss, micro-batches with a mask loss
        self.window = torch.zeros(5, dtype=torch.float64, device=parts.accelerator.device)

    # ----------------------------------------------------------------------------------------- resume
    def resume(self) -> None:
        """Continue from the newest complete checkpoint in the output folder, or seed a fresh run."""
        ckpt = latest_checkpoint(self.out)
        if ckpt is None:
            from accelerate.utils import set_seed

            set_seed(self.config.seed)
        else:
            state = json.loads((ckpt / STATE_FILE).read_text())
            if state.get("trainable") != self.p.names:
                raise TrainingError(f"checkpoint {ckpt} was written for other trainable parameters than this "
                                    f"model's ({len(state.get('trainable', []))} vs {len(self.p.names)}); use "
                                    "another output_dir")
            if not same_base(state.get("frozen", {}), self.p.frozen):
                raise TrainingError(f"checkpoint {ckpt} was trained on another base model (its frozen weights "
                                    "differ from this model's); resume with the same model, or use another "
                                    "output_dir")
            load_trainable(self.unwrapped, self.p.names, ckpt / TRAINABLE_FILE)
            self.p.accelerator.load_state(str(ckpt / "state"))
            self.step = self.resumed_from = self.saved_at = int(state["step"])
            if state.get("steps_per_epoch") != self.p.steps_per_epoch:
                logger.warning("resuming %s with %s steps per epoch (the checkpoint had %s): the data or the "
                               "number of processes changed, so the epoch position is approximate", ckpt,
                               self.p.steps_per_epoch, state.get("steps_per_epoch"))
            logger.info("resuming from %s (step %d of %d)", ckpt, self.step, self.p.total)
        self.log = MetricsLog(self.out, self.p.steps_per_epoch, self.main, self.resumed_from)

    # ------------------------------------------------------------------------------- evaluate, save
    def evaluate(self, at: int) -> None:
        if self.p.val_loader is None:
            return
        self.evaluated_at = at
        result = evaluate_loss(self.unwrapped, self.p.val_loader)
        self.log.record(at, {"val_loss": result["loss"]}, {f"val/{k}": v for k, v in result.items()})

    def checkpoint(self, at: int) -> None:
        acc = self.p.accelerator
        self.saved_at = at
        ckpts = self.out / "checkpoints"
        tmp, final = ckpts / f".step-{at}.tmp", ckpts / f"step-{at}"
        if self.main:
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir(parents=True)
        acc.wait_for_everyone()
        acc.save_state(str(tmp / "state"))
        acc.wait_for_everyone()
        if self.main:
            save_trainable(self.unwrapped, self.p.names, tmp / TRAINABLE_FILE)
            with quiet_saving():
                self.unwrapped.save_pretrained(tmp / "model")
            state = {"step": at, "epoch": at / self.p.steps_per_epoch, "steps_per_epoch": self.p.steps_per_epoch,
                     "total_steps": self.p.total, "num_processes": acc.num_processes, "trainable": self.p.names,
                     "frozen": self.p.frozen, "config": asdict(self.config)}
            write_text(tmp / STATE_FILE, json.dumps(state, indent=1) + "\n")
            replace_dir(tmp, final)
            prune_checkpoints(self.out, self.config.keep_checkpoints)
        acc.wait_for_everyone()

    # ----------------------------------------------------------------------------------------- steps
    def fit(self) -> TrainSummary:
        """Run to the last step (from wherever `resume` left it) and return the summary."""
        from tqdm.auto import tqdm

        if self.step == 0:
            self.evaluate(0)
        self.fit_from = (time.perf_counter(), self.step)
        self.line_at = self.fit_from[0]
        self.bar = tqdm(total=self.p.total, initial=self.step, disable=not (self.config.progress and self.main),
                        desc="train", unit="step", dynamic_ncols=True)
        epoch = self.step // self.p.steps_per_epoch
        while self.step < self.p.total:
            self._epoch(epoch)
            epoch += 1
        self.bar.close()
        if self.evaluated_at != self.step:
            self.evaluate(self.step)
        if self.saved_at != self.step:
            self.checkpoint(self.step)
        return self._finish()

    def _epoch(self, epoch: int) -> None:
        """One pass over the data, skipping what a resumed run already did in this epoch."""
        acc, ga = self.p.accelerator, self.config.grad_accum
        skip = (self.step - epoch * self.p.steps_per_epoch) * ga
        loader = acc.skip_first_batches(self.p.train_loader, skip) if skip else self.p.train_loader
        # accelerate's loaders re-set the sampler's epoch from their own iteration count on every pass (a
        # fresh skipping loader would count from 0), so the epoch is set on the loader and on the sampler
        loader.set_epoch(epoch)
        self.p.sampler.set_epoch(epoch)
        n_batches = len(self.p.train_loader)
        micro = skip
        for batch in loader:
            group_start = (micro // ga) * ga
            group_size = min(ga, n_batches - group_start)
            boundary = micro + 1 == group_start + group_size
            self._forward_backward(batch, group_size, sync=boundary)
            micro += 1
            if boundary:
                self._optimizer_step()
                if self.step >= self.p.total:
                    break

    def _forward_backward(self, batch, group_size: int, sync: bool) -> None:
        acc = self.p.accelerator
        with contextlib.nullcontext() if sync else acc.no_sync(self.p.model):
            output = self.p.model(**batch)
            acc.backward(output.loss / group_size)
        self.window[0] += output.loss.detach().double() / group_size
        self.window[1] += output.lm_loss.detach().double() / group_size if output.lm_loss is not None else 0.0
        self.window[2] += 1.0 / group_size
        if output.mask_loss is not None:
            self.window[3] += output.mask_loss.detach().double()
            self.window[4] += 1

    def _optimizer_step(self) -> None:
        acc, config, opt = self.p.accelerator, self.config, self.p.optimizer
        if config.max_grad_norm > 0:
            acc.clip_grad_norm_(self.p.model.parameters(), config.max_grad_norm)
        lr = opt.param_groups[0]["lr"]
        opt.step()
        if not acc.optimizer_step_was_skipped:  # fp16 overflow: the schedule waits for a real step
            self.p.scheduler.step()
        opt.zero_grad(set_to_none=True)
        self.step += 1
        self.bar.update(1)
        step, epoch_end = self.step, self.step % self.p.steps_per_epoch == 0
        if step == 1 or step % config.log_every == 0 or step == self.p.total:
            self._log_window(lr)
        elif self._line_due():  # a line only, from this process's window: no collective, no metrics row
            sums = self.window.tolist()
            self._progress_line(sums[0] / sums[2] if sums[2] else None, lr)
        if (config.eval_every and step % config.eval_every == 0) or (not config.eval_every and epoch_end):
            self.evaluate(step)
        if (config.save_every and step % config.save_every == 0) or (not config.save_every and epoch_end):
            self.checkpoint(step)

    def _log_window(self, lr: float) -> None:
        sums = self.p.accelerator.reduce(self.window.clone(), reduction="sum").tolist()
        loss = sums[0] / sums[2] if sums[2] else None
        values = {"lr": lr, "loss": loss, "lm_loss": sums[1] / sums[2] if sums[2] else None,
                  "mask_loss": sums[3] / sums[4] if sums[4] else None}
        self.log.record(self.step, values, {f"train/{k}": v for k, v in values.items()})
        if loss is not None:
            self.bar.set_postfix(loss=f"{loss:.4f}", lr=f"{lr:.2e}")
        self._progress_line(loss, lr)
        self.window.zero_()

    def _line_due(self) -> bool:
        return self.main and not self.config.progress and time.perf_counter() - self.line_at >= PROGRESS_EVERY_S

    def _progress_line(self, loss: float | None, lr: float) -> None:
        """Without a bar (a server's train job), progress as a log line: step, loss, lr, elapsed and an estimate
        of the time left from this process's step rate (the Slicer panel reads "step N/TOTAL")."""
        if not self.main or self.config.progress:
            return
        now = time.perf_counter()
        t0, step0 = self.fit_from
        rate = (self.step - step0) / (now - t0) if now > t0 else 0.0
        eta = _duration((self.p.total - self.step) / rate) if rate > 0 else "?"
        logger.info("umind train: step %d/%d loss %s lr %.2e elapsed %s eta %s", self.step, self.p.total,
                    fmt(loss), lr, _duration(now - self.t_start), eta)
        self.line_at = now

    # --------------------------------------------------------------------------------------- summary
    def _finish(self) -> TrainSummary:
        """Save the final model and the summary; every process returns the main process's summary."""
        acc = self.p.accelerator
        model = acc.unwrap_model(self.p.model, keep_fp32_wrapper=False)
        final_dir = self.out / "final"
        summary = None
        if self.main:
            with quiet_saving():
                model.save_pretrained(final_dir)
            losses, vals = self.log.column("loss"), self.log.column("val_loss")
            summary = TrainSummary(
                steps=self.step, epochs=self.step / self.p.steps_per_epoch,
                train_loss_first=losses[0] if losses else None, train_loss_last=losses[-1] if losses else None,
                val_loss_first=vals[0] if vals else None, val_loss_last=vals[-1] if vals else None,
                seconds=time.perf_counter() - self.t_start, final_dir=str(final_dir),
                resumed_from=self.resumed_from, num_processes=acc.num_processes)
            self.log.close()
            write_text(self.out / "summary.json", json.dumps(asdict(summary), indent=2) + "\n")
        acc.wait_for_everyone()
        if summary is None:  # other processes read what the main process wrote, so every caller gets one answer
            summary = TrainSummary(**json.loads((self.out / "summary.json").read_text()))
        return summary


def _duration(seconds: float) -> str:
    """12s, 3m05s, 2h01m: short enough for a status line."""
    s = int(round(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


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
