"""Step graphs built off the request path, for decode="auto", and where inductor keeps its caches.

Why: a tuned single-token step (fast_decode: frozen weights, autotuned products) takes some 10-40 s to build per
(batch bucket, cache capacity) on 2 cores, and building it on the model thread made the first request of every
batch size wait that long. Here the model thread never builds. A step whose graph is not ready runs the eager lean
step (what decode="static" runs, the same answers), and the graph's key goes to ONE background thread, which
builds graphs one at a time and installs each under a lock; the steps of that key after it replay the graph.

- The builder never touches the live cache (the model thread is writing it): it builds on zero-filled tensors
  with the live call's shapes, strides, dtypes and devices (`TensorSpec`), so that the guards of the built graph
  pass on the live tensors and the model thread never recompiles.
- A build that fails logs one warning and leaves that key on the eager step; no request ever sees the failure.
- A weight change (`invalidate`, from FastDecoder.refresh) bumps a generation: queued builds of the old weights
  are dropped, and one already running is discarded when it ends instead of being installed.
- The builder thread runs at a lower scheduling priority (Linux nice is per thread; the compiler processes and
  OpenMP workers it starts inherit it), so that on a busy machine requests keep the cores. It still shares the
  GIL with the model thread while dynamo traces: eager steps run slower while a graph builds.
- A process may say when builds must wait (`hold_builds_while`): the server holds them while a retraining runs in
  its subprocess. Nice alone did not keep the cores for it: with the builder autotuning beside it, a retrain's
  scoring of 153 images took 378 s against 32 s alone (2 cores; two busy OpenMP teams stall each other whatever
  their priorities). A build under way finishes; the next starts when the hold is lifted.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

__all__ = ["COMPILE_CACHE_ENV", "BackgroundBuilder", "TensorSpec", "default_compile_cache", "use_compile_cache",
           "stop_all_builders", "hold_builds_while"]

logger = logging.getLogger(__name__)

COMPILE_CACHE_ENV = "TORCHINDUCTOR_CACHE_DIR"  # inductor's on-disk caches (FX graphs, autotuning, C++/Triton code)
BUILDER_NICE = 10  # how much lower the builder thread's priority is than the process's
BUILDER_THREAD = "umind-step-builder"
BUILD_QUIET_S = 0.05  # a build starts once the model thread has been idle this long (_wait_for_quiet) ...
BUILD_QUIET_MAX_S = 2.0  # ... or after waiting this long for it
HOLD_POLL_S = 1.0  # how often a held builder asks again whether it may build

#: this process's "builds must wait now" (`hold_builds_while`); None: never held
_HOLD: Callable[[], bool] | None = None


def hold_builds_while(predicate: Callable[[], bool] | None) -> None:
    """Every builder of this process waits before its next build while `predicate()` is true (None: no hold).
    A predicate that raises counts as false: a broken check must not stop the graphs for good."""
    global _HOLD
    _HOLD = predicate


def _held() -> bool:
    hold = _HOLD
    if hold is None:
        return False
    try:
        return bool(hold())
    except Exception:  # noqa: BLE001 - see hold_builds_while
        return False


def default_compile_cache() -> Path:
    """Where `umind infer` keeps inductor's caches: the user's cache folder ($XDG_CACHE_HOME or ~/.cache)/umind."""
    base = os.environ.get("XDG_CACHE_HOME", "").strip()
    return (Path(base) if base else Path.home() / ".cache") / "umind" / "compile"


def use_compile_cache(folder: str | os.PathLike | None) -> str | None:
    """Point inductor's on-disk caches at `folder`, unless the user's environment names another folder; returns
    the folder in force (None when neither).

    Why: a restarted process that finds the FX graphs, the autotuning results and the compiled kernels of the last
    one builds its step graphs faster; inductor's default folder is under /tmp, which a reboot empties. Set before
    the first compile: inductor reads the variable whenever it needs the folder. A value other than torch's default
    is the user's (or a launcher's) and is left alone; torch's default is not a choice: importing torch._dynamo
    (transformers does) writes it into the environment itself.
    """
    current = os.environ.get(COMPILE_CACHE_ENV, "").strip()
    if current and os.path.abspath(current) != _torch_default_cache():
        return current
    if folder is None:
        return current or None
    path = Path(folder).expanduser().resolve()
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:  # a read-only home: inductor's default folder still works
        logger.warning("umind: cannot create the compile cache %s (%s); inductor keeps its default", path, exc)
        return current or None
    os.environ[COMPILE_CACHE_ENV] = str(path)
    return str(path)


def _torch_default_cache() -> str | None:
    try:
        from torch._inductor.runtime.cache_dir_utils import default_cache_dir
    except ImportError:
        return None
    return os.path.abspath(default_cache_dir())


@dataclass(frozen=True)
class TensorSpec:
    """What a compiled graph's guards check of a tensor argument: shape, strides, dtype and device."""

    shape: tuple[int, ...]
    stride: tuple[int, ...]
    dtype: torch.dtype
    device: torch.device

    @classmethod
    def of(cls, value):
        """The spec of a tensor, or of each tensor of a list/tuple (the step's per-layer caches)."""
        if isinstance(value, (list, tuple)):
            return type(value)(cls.of(v) for v in value)
        return cls(tuple(value.shape), tuple(value.stride()), value.dtype, value.device)

    @staticmethod
    def zeros(spec):
        """Zero-filled tensors laid out as `spec` (a TensorSpec or a list/tuple of them)."""
        if isinstance(spec, (list, tuple)):
            return type(spec)(TensorSpec.zeros(s) for s in spec)
        return torch.empty_strided(spec.shape, spec.stride, dtype=spec.dtype, device=spec.device).zero_()


@dataclass
class _Job:
    key: tuple
    generation: int
    weights: object  # the weight snapshot the graph is built from (fast_decode.DecodeWeights)
    specs: tuple  # TensorSpec of each step argument
    threads: int  # torch.get_num_threads() of the model thread, which dynamo's global-state guard checks


class BackgroundBuilder:
    """One background thread that builds the step graphs of queued keys, one at a time, into `graphs`.

    `build(weights, example_args, key)` returns the built step (its first call made, which is when torch.compile
    builds);
    `alive()` says whether the decoder that owns this builder still exists (a builder left behind by a swapped
    model stops after the build under way, so that the model's memory is not held for its queue).
    """

    def __init__(self, build: Callable, owner: object, what: str = "tuned"):
        self._build = build
        self._owner = weakref.ref(owner)
        self.what = what  # "tuned" or "compiled": how /info names a built step
        self.graphs: dict[tuple, Callable] = {}  # read by the model thread without the lock (one dict lookup)
        self._lock = threading.Condition()
        self._queue: OrderedDict[tuple, _Job] = OrderedDict()
        self._building: _Job | None = None
        self._failed: dict[tuple, str] = {}
        self._generation = 0
        self._thread: threading.Thread | None = None
        _BUILDERS.add(self)

    def stop(self, timeout: float | None = None) -> bool:
        """Drop the queue and wait for a build under way to finish (True), or `timeout` seconds (False)."""
        with self._lock:
            self._queue.clear()
            self._lock.notify_all()
        return self.wait(timeout)

    def request(self, key: tuple, weights, args: tuple) -> None:
        """Queue a build of `key` from `weights`, for arguments laid out as `args` (the model thread's live call,
        of which only the layout is kept); nothing when it is built, queued, being built or has failed."""
        with self._lock:
            if key in self.graphs or key in self._failed or key in self._queue or self._is_building(key):
                return
            self._queue[key] = _Job(key, self._generation, weights, TensorSpec.of(tuple(args)),
                                    torch.get_num_threads())
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=BUILDER_THREAD, daemon=True)
                self._thread.start()

    def fail(self, key: tuple, error: str) -> None:
        """Take a built graph that failed when the model thread ran it out of service (that key decodes eagerly)."""
        with self._lock:
            self.graphs.pop(key, None)
            self._failed[key] = error

    def invalidate(self) -> None:
        """The weights changed: forget every graph, failure and queued build; one under way is discarded."""
        with self._lock:
            self._generation += 1
            self.graphs.clear()
            self._failed.clear()
            self._queue.clear()
            self._lock.notify_all()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until nothing is queued or being built (True), or `timeout` seconds pass (False)."""
        with self._lock:
            return self._lock.wait_for(lambda: self._thread is None, timeout)

    def count(self) -> int:
        """Keys built, being built, queued or failed: what `states` lists, without building its strings (the model
        thread asks at every step whose graph is not built)."""
        with self._lock:
            keys = self.graphs.keys() | self._queue.keys() | self._failed.keys()
            if self._building is not None and self._building.generation == self._generation:
                keys |= {self._building.key}
            return len(keys)

    def states(self) -> dict[tuple, str]:
        """Each key's state for /info: built ("tuned"/"compiled"), "building", queued, or "failed: <error>"."""
        verb = "tuning" if self.what == "tuned" else "compiling"
        with self._lock:
            out = {key: f"eager ({verb} queued)" for key in self._queue}
            if self._building is not None and self._building.generation == self._generation:
                out[self._building.key] = "building"
            out.update({key: f"failed: {error}" for key, error in self._failed.items()})
            out.update({key: self.what for key in self.graphs})
            return out

    def _is_building(self, key: tuple) -> bool:
        job = self._building
        return job is not None and job.key == key and job.generation == self._generation

    def _run(self) -> None:
        _lower_priority()
        while True:
            self._wait_while_held()
            self._wait_for_quiet()
            with self._lock:
                if not self._queue or self._owner() is None:
                    self._queue.clear()
                    self._building, self._thread = None, None
                    self._lock.notify_all()
                    return
                _, job = self._queue.popitem(last=False)
                self._building = job
            fn, error = self._build_one(job)
            with self._lock:
                self._building = None
                current = job.generation == self._generation
                if current and error is None:
                    self.graphs[job.key] = fn
                elif current:
                    self._failed[job.key] = error
                self._lock.notify_all()
            if current and error is not None:
                logger.warning("umind: building the decode step %s failed; that shape decodes eagerly (%s)",
                               _shape(job.key), error)
            elif not current:
                logger.info("umind: decode step %s dropped: the weights changed while it was built", _shape(job.key))

    def _wait_while_held(self) -> None:
        """Wait while the process holds builds (`hold_builds_while`), unless the queue is dropped meanwhile (a stop,
        new weights) or the decoder is gone, which the loop then sees."""
        while _held():
            with self._lock:
                if not self._queue or self._owner() is None:
                    return
                self._lock.wait(HOLD_POLL_S)

    def _wait_for_quiet(self) -> None:
        """Wait until the owner's model thread has been idle BUILD_QUIET_S (its `idle_seconds()`), at most
        BUILD_QUIET_MAX_S: dynamo traces a graph under the interpreter lock, so a build that starts while a request
        is being answered slows that request down. The first request after a start queues its builds mid-answer:
        measured on the demo model, it took 90 and 126 ms with the builds starting at once against 84-96 ms for
        the static decode (one process each). A server that is never idle still gets its graphs."""
        deadline = time.monotonic() + BUILD_QUIET_MAX_S
        while time.monotonic() < deadline:
            owner = self._owner()
            if owner is None or getattr(owner, "idle_seconds", lambda: BUILD_QUIET_S)() >= BUILD_QUIET_S:
                return
            del owner  # do not keep the decoder alive while waiting
            time.sleep(BUILD_QUIET_S / 2)

    def _build_one(self, job: _Job) -> tuple[Callable | None, str | None]:
        """(the built step, None) or (None, the error's first line)."""
        t0 = time.perf_counter()
        logger.info("umind: building the decode step %s in the background (%s)", _shape(job.key), self.what)
        try:
            if torch.get_num_threads() != job.threads:
                torch.set_num_threads(job.threads)
            with torch.no_grad():  # as the model thread runs it: grad mode is part of the graph's guards
                fn = self._build(job.weights, TensorSpec.zeros(job.specs), job.key)
        except Exception as exc:  # noqa: BLE001 - any failure leaves this key on the eager step
            return None, one_line(exc)
        logger.info("umind: decode step %s %s in %.1f s (in the background)", _shape(job.key), self.what,
                    time.perf_counter() - t0)
        return fn, None


#: every builder of this process, so that a command can stop them before the interpreter exits
_BUILDERS: "weakref.WeakSet[BackgroundBuilder]" = weakref.WeakSet()


def stop_all_builders(timeout: float = 120.0) -> bool:
    """Stop every builder of this process: queues dropped, a build under way finished. A daemon thread still inside
    torch.compile when Python exits is killed mid-C++ and the process aborts ("terminate called without an active
    exception", exit 134) after its work succeeded; a command calls this before it returns. False when a build was
    still running after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    return all(b.stop(max(0.0, deadline - time.monotonic())) for b in list(_BUILDERS))


def _shape(key: tuple) -> str:
    """A step key (rows, capacity, dtype, device[, tokens, part]) as a log line names it."""
    tokens = f", {key[4]} tokens" if len(key) > 4 else ""
    part = f" ({key[5]})" if len(key) > 5 else ""
    return f"for batch {key[0]}, cache {key[1]}{tokens}{part}"


def one_line(exc: BaseException) -> str:
    """`Type: first line of the message`: what a log line or /info says of a failed build."""
    text = str(exc)
    return f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}"


def _lower_priority() -> None:
    """Lower this thread's scheduling priority by BUILDER_NICE (Linux: per thread); best effort elsewhere."""
    try:
        tid = threading.get_native_id()
        os.setpriority(os.PRIO_PROCESS, tid, min(19, os.getpriority(os.PRIO_PROCESS, tid) + BUILDER_NICE))
    except (AttributeError, OSError):
        pass
