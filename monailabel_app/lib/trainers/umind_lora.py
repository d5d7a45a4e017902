"""`umind_lora`: fine-tune the served adapter on the datastore's final labels; promote it only if not worse.

One run (in MONAI Label's train subprocess):
1. export the final labels to a manifest and split off held-out images (dataset.py);
2. build segment + detect conversations with the project's conversation builder;
3. score the served version on the held-out labels;
4. fine-tune a copy of the served version with the project's trainer and score it the same way;
5. save it as the next numbered version and promote it when its Dice >= served Dice - promote_tolerance.

Every run is recorded (metrics of both, promoted or not, or the error of a failed run) in the version
store; a failure leaves the served version untouched. A request with {"rollback": N} serves version N
instead of training.
"""

from __future__ import annotations

import dataclasses
import logging
import time
import traceback

from monailabel.interfaces.datastore import Datastore
from monailabel.interfaces.tasks.train import TrainTask

from umind_core.data.conversations import attach_conversations

from ..conf import TrainParams, parse_train_params
from ..model_holder import load_model
from ..runtime import Runtime
from .dataset import export_datastore
from .evaluate import evaluate_segmentation

__all__ = ["UMindLoRATrain", "promotes"]

logger = logging.getLogger(__name__)

TRAIN_TASKS = ("segment", "detect")


def promotes(new: dict, current: dict, tolerance: float) -> bool:
    """The new version may serve when its held-out Dice is at least the current one's minus `tolerance`."""
    if new.get("dice") is None:
        return False
    if current.get("dice") is None:
        return True
    return float(new["dice"]) >= float(current["dice"]) - float(tolerance)


def trainer_config(params: TrainParams, output_dir, full: bool):
    """The project trainer's config for one run: our own held-out split replaces the trainer's."""
    from umind_core.training.trainer import TrainConfig

    return TrainConfig(output_dir=str(output_dir), epochs=float(params.epochs), batch_size=params.batch_size,
                       lr=params.lr, warmup_ratio=params.warmup_ratio, val_fraction=0.0, seed=params.seed,
                       max_steps=params.max_steps or None, full=full, progress=False, keep_checkpoints=1)


class UMindLoRATrain(TrainTask):
    def __init__(self, runtime: Runtime):
        super().__init__("UMind: LoRA fine-tuning on the final labels, promoted only if not worse on held-out "
                         "labels")
        self.runtime = runtime

    def config(self):
        p = self.runtime.conf.train
        return {"epochs": p.epochs, "max_steps": p.max_steps, "lr": p.lr, "batch_size": p.batch_size,
                "val_fraction": p.val_fraction, "promote_tolerance": p.promote_tolerance, "rollback": ""}

    def stats(self):
        return self.runtime.versions.summary()

    def __call__(self, request, datastore: Datastore):
        versions = self.runtime.versions
        rollback = request.get("rollback")
        if rollback not in (None, ""):
            try:
                target = int(rollback)
            except (TypeError, ValueError):
                raise ValueError(f"rollback must be a version number, got {rollback!r}") from None
            out = versions.rollback(target)
            logger.info(f"umind: rolled back to version {target}")
            return out
        current = versions.current()
        version = versions.next_version()
        vdir = versions.version_dir(version)
        vdir.mkdir(parents=True, exist_ok=True)
        run = {"version": version, "base_version": current, "started": time.strftime("%Y-%m-%d %H:%M:%S")}
        t0 = time.perf_counter()
        try:
            params = parse_train_params(request, base=self.runtime.conf.train)
            run["params"] = dataclasses.asdict(params)
            data = export_datastore(datastore, vdir / "data", self.runtime.conf.labels, params.val_fraction,
                                    params.min_val, params.seed)
            run.update(train_images=data.train_ids, val_images=data.val_ids, skipped=data.skipped,
                       n_train_records=data.n_train_records, n_val_records=data.n_val_records)
            manifest = attach_conversations(data.train_manifest, vdir / "data" / "train.jsonl", seed=params.seed,
                                            tasks=TRAIN_TASKS, refusal_rate=params.refusal_rate)
            spec = self.runtime.spec(current)
            served = load_model(spec)
            run["metrics_current"] = evaluate_segmentation(served, data.val_manifest, self.runtime.conf.max_new_tokens)
            del served
            model = load_model(spec, trainable=True)
            run["train_summary"] = self._train(model, manifest, params, vdir)
            model.eval()
            model.requires_grad_(False)
            run["metrics_new"] = evaluate_segmentation(model, data.val_manifest, self.runtime.conf.max_new_tokens)
            model.save_pretrained(vdir / "model")
            promote = promotes(run["metrics_new"], run["metrics_current"], params.promote_tolerance)
            run["status"] = "promoted" if promote else "rejected"
            run["seconds"] = round(time.perf_counter() - t0, 2)
            if not promote:
                run["reason"] = (f"held-out dice {run['metrics_new'].get('dice')} < served "
                                 f"{run['metrics_current'].get('dice')} - tolerance {params.promote_tolerance}")
            out = versions.record_run(run, promote=promote)
            logger.info(f"umind: version {version} {run['status']}: new {run['metrics_new']} "
                        f"current {run['metrics_current']}")
            return out
        except Exception as exc:
            run.update(status="failed", error=f"{type(exc).__name__}: {exc}",
                       traceback=traceback.format_exc(limit=8), seconds=round(time.perf_counter() - t0, 2))
            versions.record_run(run, promote=False)
            logger.error(f"umind: training run {version} failed: {exc}")
            raise

    @staticmethod
    def _train(model, manifest, params: TrainParams, vdir) -> dict:
        """Fine-tune `model` in place; a model without LoRA (the small demo configs) trains all its weights."""
        from umind_core.training.trainer import train

        full = model.config.lora is None
        summary = train(model, manifest, trainer_config(params, vdir / "trainer", full), tasks=TRAIN_TASKS)
        return dict(dataclasses.asdict(summary), full=full)
