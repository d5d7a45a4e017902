"""`umind_uncertainty` scoring and the strategy that serves the most uncertain unlabeled image first.

Score of one image = mean of (1 - mean probability of the tokens the model chose) and (mean binary entropy
of its mask pixels, 0..1), from one segment prompt on the image's middle frame: both are 0 for a model that
is sure and grow as it hesitates. Scores are kept per image with the model version that produced them, so
a later scoring run only scores new images or images scored by an older version.

Scoring runs in MONAI Label's scoring subprocess, the strategy in the server: the scores travel through
workdir/uncertainty.json (also copied into the datastore's image info for people to see), since the
server's in-memory datastore only catches up with the subprocess's writes when its file watcher fires.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
import uuid
from pathlib import Path

from monailabel.interfaces.datastore import Datastore
from monailabel.interfaces.tasks.scoring import ScoringMethod
from monailabel.interfaces.tasks.strategy import Strategy

from umind_core.imageio import ImageReadError, read_study
from umind_core.results import Result

from ..runtime import Runtime

__all__ = ["UMindUncertainty", "MostUncertain", "UncertaintyStore", "uncertainty_score", "SCORE_KEY"]

logger = logging.getLogger(__name__)
SCORE_KEY = "umind_uncertainty"


def uncertainty_score(result: Result) -> float:
    """0 (sure) .. 1 (unsure) from the Result's confidence signals; an empty answer counts as fully unsure."""
    conf = result.confidence or {}
    parts = []
    if "token_prob_mean" in conf:
        parts.append(1.0 - float(conf["token_prob_mean"]))
    if "mask_entropy" in conf:
        parts.append(float(conf["mask_entropy"]))
    return float(sum(parts) / len(parts)) if parts else 1.0


class UncertaintyStore:
    """image id -> {"score", "version", "ts"} in one JSON file, written atomically."""

    def __init__(self, workdir: Path):
        self.path = Path(workdir) / "uncertainty.json"
        self._lock = threading.Lock()

    def load(self) -> dict[str, dict]:
        with self._lock:
            try:
                data = json.loads(self.path.read_text(encoding="utf-8"))
            except FileNotFoundError:
                return {}
            except ValueError:
                logger.warning(f"{self.path}: unreadable, scores start again")
                return {}
            return data if isinstance(data, dict) else {}

    def save(self, scores: dict[str, dict]) -> None:
        with self._lock:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.parent / f".tmp-{uuid.uuid4().hex[:8]}-{self.path.name}"
            tmp.write_text(json.dumps(scores, indent=2), encoding="utf-8")
            os.replace(tmp, self.path)


class UMindUncertainty(ScoringMethod):
    def __init__(self, runtime: Runtime):
        super().__init__("UMind uncertainty: token probabilities of the answer and entropy of the masks")
        self.runtime = runtime
        self.store = UncertaintyStore(runtime.conf.workdir)

    def __call__(self, request, datastore: Datastore):
        predictor, version = self.runtime.predictor()
        target = request.get("prompt") or self.runtime.conf.labels[0]
        force = bool(request.get("force", False))
        scores = self.store.load()
        scored, skipped, failed = [], 0, {}
        for image_id in datastore.get_unlabeled_images():
            old = scores.get(image_id)
            if old and old.get("version") == version and not force:
                skipped += 1
                continue
            try:
                study = read_study(datastore.get_image_uri(image_id))
            except ImageReadError as exc:
                failed[image_id] = str(exc)
                continue
            frame = study.frames[len(study.frames) // 2]
            result = predictor.predict_batch([frame], "segment", target)[0]
            entry = {"score": uncertainty_score(result), "version": version, "ts": int(time.time()),
                     "confidence": result.confidence}
            scores[image_id] = entry
            scored.append(image_id)
            try:
                datastore.update_image_info(image_id, {SCORE_KEY: entry["score"]})
            except Exception as exc:  # the datastore copy is informative only
                logger.warning(f"could not store the score of {image_id} in the datastore: {exc}")
        self.store.save(scores)
        return {"method": SCORE_KEY, "version": version, "scored": len(scored), "skipped": skipped,
                "failed": failed}


class MostUncertain(Strategy):
    """Serve the unlabeled image with the highest umind_uncertainty; unscored images come after scored ones."""

    def __init__(self, runtime: Runtime):
        super().__init__("UMind: the most uncertain unlabeled image first (run the umind_uncertainty scoring)")
        self.store = UncertaintyStore(runtime.conf.workdir)

    def __call__(self, request, datastore: Datastore):
        images = datastore.get_unlabeled_images()
        if not images:
            return None
        scores = self.store.load()
        ranked = sorted(images, key=lambda i: (i in scores, scores.get(i, {}).get("score", -1.0), i), reverse=True)
        best = ranked[0]
        return {"id": best, SCORE_KEY: scores.get(best, {}).get("score")}
