"""One model per process, loaded on first use and shared by every task.

MONAI Label builds the app again in each train, scoring and batch-infer subprocess, so loading at app
construction would load the model in processes that never use it. The holder is a module-level singleton
keyed by (model path, version): a request that finds a newer promoted version swaps the model once; all
others reuse it. The lock makes concurrent first requests load once, and requests never see a half-swapped
model.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from pathlib import Path

from umind_core.inference.scheduler import MODEL_THREAD_PREFIX, model_thread

__all__ = ["MODEL_THREAD", "ModelSpec", "ModelHolder", "holder"]

logger = logging.getLogger(__name__)

#: The one thread that loads the served model and runs its batches (the infer scheduler hands them here). torch's
#: OpenMP runtime makes every other thread that runs parallel work slower: measured, the server kept 1.1 of 2
#: cores busy answering on its scheduler thread after loading on a request thread (umind_core.inference.scheduler, README
#: "Many annotators").
MODEL_THREAD = model_thread()


@dataclass(frozen=True)
class ModelSpec:
    """What to load: the configured model (None = demo model) and, for versions > 0, the version folder."""

    model: str | None
    version: int
    version_dir: str | None
    device: str = "cpu"
    dtype: str = "float32"
    max_new_tokens: int = 256
    decode: str = ""  # "" = UMIND_DECODE, else "auto" (fast_decode.serving_mode)
    #: where inductor keeps its on-disk caches (the server: <workdir>/compile_cache), so that a restarted server
    #: rebuilds its step graphs faster; not part of `key` (it changes no answer)
    compile_cache: str | None = None

    @property
    def key(self) -> tuple:
        return (self.model, self.version, self.version_dir, self.device, self.dtype, self.max_new_tokens,
                self.decode)


class ModelHolder:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._key: tuple | None = None
        self._predictor = None
        self.loads = 0  # how many times a model was loaded in this process (tests and /info read it)

    def predictor(self, spec: ModelSpec):
        """The Predictor for `spec`, loading (or swapping to) it if needed."""
        with self._lock:
            if self._key != spec.key or self._predictor is None:
                self._predictor = None  # free the old model before loading the new one
                self._predictor = _on_model_thread(_load, spec)
                self._key = spec.key
                self.loads += 1
            return self._predictor

    def loaded_key(self) -> tuple | None:
        with self._lock:
            return self._key

    def decode_status(self) -> dict | None:
        """The loaded Predictor's decode status for /info (Predictor.decode_status), or None when no model is
        loaded: /info never loads one. Read without the lock, so that /info does not wait for a load."""
        predictor = self._predictor
        return None if predictor is None else predictor.decode_status()

    def clear(self) -> None:
        with self._lock:
            self._key, self._predictor = None, None


def load_model(spec: ModelSpec, trainable: bool = False):
    """The UMindVL of `spec` (the version folder when there is one, else the configured/demo model)."""
    from umind_core import demo
    from umind_core.modeling.umind import UMindVL

    if spec.version_dir:
        if not Path(spec.version_dir).is_dir():
            raise FileNotFoundError(f"model version {spec.version} is missing: {spec.version_dir} does not exist")
        return UMindVL.from_pretrained(spec.version_dir, device=spec.device, dtype=spec.dtype, trainable=trainable)
    return demo.load_model(spec.model, device=spec.device, dtype=spec.dtype, trainable=trainable,
                           warn=logger.warning)


def _on_model_thread(fn, *args):
    """fn(*args) run on MODEL_THREAD (directly when already there, so that it cannot wait on itself)."""
    if threading.current_thread().name.startswith(MODEL_THREAD_PREFIX):
        return fn(*args)
    return MODEL_THREAD.submit(fn, *args).result()


def _load(spec: ModelSpec):
    from umind_core.inference.fast_decode import serving_mode
    from umind_core.inference.predictor import Predictor

    logger.info(f"umind: loading model {spec.model or 'demo'} version {spec.version} on {spec.device}")
    return Predictor(load_model(spec), max_new_tokens=spec.max_new_tokens, decode=serving_mode(spec.decode or None),
                     compile_cache=spec.compile_cache)


holder = ModelHolder()
