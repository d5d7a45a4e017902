"""What every task of one app shares: the parsed conf, the version store and the way to the served model."""

from __future__ import annotations

import threading
from dataclasses import dataclass

from .conf import AppConfig
from .model_holder import ModelSpec, holder
from .versions import VersionStore

__all__ = ["Runtime", "PREDICT_LOCK"]

#: held while a request uses the shared Predictor: /infer runs in the thread pool (lib/offloop.py), and a
#: Predictor keeps per-image state (set_image), so two requests must not interleave on it
PREDICT_LOCK = threading.Lock()


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
                         self.conf.dtype, self.conf.max_new_tokens)

    def predictor(self):
        """(Predictor, version) of the served version, loaded lazily once per process."""
        spec = self.spec()
        return holder.predictor(spec), spec.version
