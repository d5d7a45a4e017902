"""What every task of one app shares: the parsed conf, the version store and the way to the served model."""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass

from .conf import AppConfig
from .model_holder import MODEL_THREAD, ModelSpec, holder
from umind_core.versions import VersionStore

__all__ = ["Runtime", "PREDICT_LOCK"]

#: (Predictor, its BatchScheduler) of the served model; replaced, not accumulated, when another model is served
_SCHEDULER: list[tuple[object, object]] = []

#: held while a request fetches (and maybe loads) the served Predictor, and by callers that drive it directly
#: (scoring, uncertainty). /infer runs in the thread pool (lib/offloop.py) and hands its jobs to the
#: Predictor's BatchScheduler after releasing this lock, so concurrent requests share batches; the Predictor
#: serialises its own use (its per-image state is never touched by two threads at once).
PREDICT_LOCK = threading.Lock()
#: the folder of the workdir where inductor keeps its on-disk caches (step graphs, autotuning results), so that a
#: restarted server builds its decode steps faster (umind_core.inference.step_builder.use_compile_cache)
COMPILE_CACHE_DIR = "compile_cache"
logger = logging.getLogger(__name__)
#: versions this process failed to load (version -> error) and what it serves in their place; per process,
#: like the model holder, so a broken version is tried once, not on every request
_BROKEN: dict[int, str] = {}
_FALLBACK: dict[int, int] = {}


@dataclass
class Runtime:
    conf: AppConfig
    versions: VersionStore

    @classmethod
    def create(cls, conf: AppConfig) -> "Runtime":
        return cls(conf, VersionStore(conf.workdir))

    def served_version(self) -> int:
        """The promoted (or rolled-back-to) version; read per request so promotions apply without a restart."""
        return self.versions.current()

    def spec(self, version: int | None = None) -> ModelSpec:
        v = self.served_version() if version is None else int(version)
        vdir = self.versions.model_dir(v)
        return ModelSpec(self.conf.model, v, None if vdir is None else str(vdir), self.conf.device,
                         self.conf.dtype, self.conf.max_new_tokens, self.conf.decode,
                         compile_cache=str(self.conf.workdir / COMPILE_CACHE_DIR))

    def predictor(self):
        """(Predictor, version) of the served version, loaded lazily once per process.

        A promoted version that cannot be loaded (a corrupt or deleted folder, a base that moved) does not
        take the server down: the last promoted version before it that loads is served instead, and
        `warnings()` says so in /info until someone rolls back or a new version is promoted."""
        spec = self.spec()
        if spec.version not in _BROKEN:
            try:
                return holder.predictor(spec), spec.version
            except Exception as exc:
                if spec.version == 0:
                    raise
                _BROKEN[spec.version] = f"{type(exc).__name__}: {exc}"
                logger.warning(f"umind: version {spec.version} cannot be loaded: {exc}")
        return self._fallback(spec.version)

    def scheduler(self):
        """(BatchScheduler, version) for the served Predictor: the way /infer requests reach the model."""
        from umind_core.inference.scheduler import BatchScheduler

        predictor, version = self.predictor()
        if not _SCHEDULER or _SCHEDULER[0][0] is not predictor:
            _SCHEDULER[:] = [(predictor, BatchScheduler(predictor, window_ms=self.conf.batch_window_ms,
                                                          regroup_ms=self.conf.batch_regroup_ms,
                                                          executor=MODEL_THREAD))]
        return _SCHEDULER[0][1], version

    def batching(self) -> dict | None:
        """The served scheduler's batch statistics for /info, or None before the first inference."""
        return _SCHEDULER[0][1].stats() if _SCHEDULER else None

    def _fallback(self, broken: int):
        promoted = sorted({r["version"] for r in self.versions.state()["runs"]
                           if r.get("status") == "promoted" and isinstance(r.get("version"), int)
                           and 0 < r["version"] < broken and r["version"] not in _BROKEN}, reverse=True)
        for v in promoted + [0]:
            try:
                predictor = holder.predictor(self.spec(v))
            except Exception as exc:
                if v == 0:
                    raise
                _BROKEN[v] = f"{type(exc).__name__}: {exc}"
                continue
            _FALLBACK[broken] = v
            return predictor, v
        raise RuntimeError("no version can be loaded")  # unreachable: version 0 either loads or raised

    def warnings(self) -> list[str]:
        """What /info must tell about the served model (a version that could not be loaded)."""
        current = self.served_version()
        if current not in _BROKEN:
            return []
        return [f"version {current} cannot be loaded ({_BROKEN[current]}); serving version "
                f"{_FALLBACK.get(current, '?')} instead: roll back or retrain"]
