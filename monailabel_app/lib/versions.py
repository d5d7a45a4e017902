"""Numbered adapter versions in the workdir, the pointer to the served one, and the run history.

Layout::

    workdir/versions.json          {"current": N, "runs": [...]}  (written atomically)
    workdir/versions/0003/model/   UMindVL.save_pretrained folder of version 3
    workdir/versions/0003/run.json that run's record (also in versions.json)

Version 0 is the configured model itself (conf `model`, or the demo model) and has no folder. Train runs
happen in a subprocess and are never concurrent (MONAI Label's train executor has one worker), so only
that subprocess writes versions.json; the serving process only reads it, keyed by mtime, which is how
it picks up a promoted version on its next request without a restart.
"""

from __future__ import annotations

import json
import os
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

__all__ = ["VersionStore", "VersionError"]

_STATE = "versions.json"


class VersionError(ValueError):
    """A version that does not exist, or a corrupt versions.json; the message names it."""


@dataclass
class _Cache:
    key: tuple = ()
    state: dict | None = None


class VersionStore:
    def __init__(self, workdir: Path):
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._cache = _Cache()
        self._lock = threading.Lock()

    @property
    def state_path(self) -> Path:
        return self.workdir / _STATE

    def version_dir(self, version: int) -> Path:
        return self.workdir / "versions" / f"{int(version):04d}"

    def model_dir(self, version: int) -> Path | None:
        """The folder to load for `version`; None for version 0 (the configured model)."""
        return None if version == 0 else self.version_dir(version) / "model"

    # ------------------------------------------------------------------ reading
    def state(self) -> dict:
        """The current state; re-read only when the file changed (cheap enough to call per request)."""
        with self._lock:
            try:
                st = self.state_path.stat()
                key = (st.st_ino, st.st_mtime_ns, st.st_size)  # os.replace gives a new inode per write
            except FileNotFoundError:
                return {"current": 0, "runs": []}
            if key != self._cache.key or self._cache.state is None:
                try:
                    state = json.loads(self.state_path.read_text(encoding="utf-8"))
                except (OSError, ValueError) as exc:
                    raise VersionError(f"{self.state_path}: cannot read the version state: {exc}") from exc
                if not isinstance(state, dict) or not isinstance(state.get("current"), int):
                    raise VersionError(f"{self.state_path}: has no integer 'current' version")
                state.setdefault("runs", [])
                self._cache = _Cache(key, state)
            return json.loads(json.dumps(self._cache.state))

    def current(self) -> int:
        return int(self.state()["current"])

    def available(self) -> list[int]:
        """Versions that can be served: 0 plus every run whose model folder exists."""
        out = [0]
        for run in self.state()["runs"]:
            v = run.get("version")
            if isinstance(v, int) and v > 0 and (self.version_dir(v) / "model").is_dir():
                out.append(v)
        return sorted(set(out))

    def metrics(self, version: int) -> dict | None:
        for run in self.state()["runs"]:
            if run.get("version") == version:
                return run.get("metrics_new")
        return None

    def summary(self) -> dict:
        """What /info and the train stats show."""
        state = self.state()
        current = int(state["current"])
        return {
            "current_version": current,
            "current_metrics": self.metrics(current) if current else state.get("base_metrics"),
            "available_versions": self.available(),
            "runs": state["runs"],
            "last_error": next((r.get("error") for r in reversed(state["runs"]) if r.get("status") == "failed"),
                               None),
        }

    # ------------------------------------------------------------------ writing (train subprocess only)
    def next_version(self) -> int:
        runs = self.state()["runs"]
        used = [r.get("version", 0) for r in runs if isinstance(r.get("version"), int)]
        existing = [int(p.name) for p in (self.workdir / "versions").glob("[0-9][0-9][0-9][0-9]") if p.is_dir()]
        return max(used + existing + [0]) + 1

    def record_run(self, run: dict, promote: bool) -> dict:
        """Append a run (its dict must hold 'version') and move the pointer to it when `promote`."""
        state = self.state()
        run = dict(run, recorded=time.strftime("%Y-%m-%d %H:%M:%S"))
        state["runs"].append(run)
        if promote:
            state["current"] = int(run["version"])
        if run.get("version"):
            vdir = self.version_dir(run["version"])
            vdir.mkdir(parents=True, exist_ok=True)
            _atomic_json(vdir / "run.json", run)
        self._write(state)
        return run

    def set_base_metrics(self, metrics: dict) -> None:
        state = self.state()
        state["base_metrics"] = metrics
        self._write(state)

    def rollback(self, version: int) -> dict:
        """Serve `version` from now on (any available one, 0 included)."""
        if isinstance(version, bool) or not isinstance(version, int):
            raise VersionError(f"rollback version must be an integer, got {version!r}")
        available = self.available()
        if version not in available:
            raise VersionError(f"version {version} does not exist; available: {available}")
        state = self.state()
        previous = int(state["current"])
        state["current"] = version
        state["runs"].append({"version": None, "status": "rollback", "from": previous, "to": version,
                              "recorded": time.strftime("%Y-%m-%d %H:%M:%S")})
        self._write(state)
        return {"rolled_back_from": previous, "current_version": version}

    def _write(self, state: dict) -> None:
        _atomic_json(self.state_path, state)
        with self._lock:
            self._cache = _Cache()


def _atomic_json(path: Path, obj: dict) -> None:
    tmp = path.parent / f".tmp-{uuid.uuid4().hex[:8]}-{path.name}"
    tmp.write_text(json.dumps(obj, indent=2, default=str), encoding="utf-8")
    os.replace(tmp, path)
