"""Numbered adapter versions in the workdir, the pointer to the served one, and the run history.

Layout::

    workdir/versions.json          {"current": N, "runs": [...]}  (written atomically)
    workdir/versions/0003/model/   UMindVL.save_pretrained folder of version 3
    workdir/versions/0003/run.json that run's record (also in versions.json)

Version 0 is the configured model itself (conf `model`, or the demo model) and has no folder. Train runs
happen in a subprocess and are never concurrent (MONAI Label's train executor has one worker), so only
that subprocess writes versions.json; the serving process only reads it, keyed by mtime, which is how
it picks up a promoted version on its next request without a restart.

Faults: a run is recorded as "running" (with its pid) before it does anything, so a run killed mid-way
shows in /info as killed instead of vanishing; its work happens in a hidden staging folder renamed to
versions/NNNN only when complete; a corrupt versions.json is rebuilt from the version folders' run.json
records (with a warning) instead of failing every request.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from umind_core.atomic import new_temp_dir, replace_dir, write_text

__all__ = ["VersionStore", "VersionError"]

_STATE = "versions.json"
_COMPLETED = ("promoted", "rejected")
logger = logging.getLogger(__name__)


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
                    if not isinstance(state, dict) or not isinstance(state.get("current"), int) \
                            or not isinstance(state.get("runs", []), list):
                        raise ValueError("it has no integer 'current' version and list of runs")
                except (OSError, ValueError) as exc:
                    state = self._rebuild(f"{_STATE} was unreadable ({exc})")
                    key = ()
                state.setdefault("runs", [])
                self._cache = _Cache(key, state)
            return json.loads(json.dumps(self._cache.state))

    def _rebuild(self, why: str) -> dict:
        """The state from the version folders' run.json records: what survives a corrupt versions.json.

        The served version becomes the newest promoted run whose model folder exists (rollbacks are not
        in run.json, so a rollback is lost: the warning says so)."""
        runs = []
        for run_file in sorted((self.workdir / "versions").glob("[0-9][0-9][0-9][0-9]/run.json")):
            try:
                run = json.loads(run_file.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue
            if isinstance(run, dict) and isinstance(run.get("version"), int):
                runs.append(run)
        current = next((r["version"] for r in reversed(runs) if r.get("status") == "promoted"
                        and (self.version_dir(r["version"]) / "model").is_dir()), 0)
        warning = (f"{why}: rebuilt from {len(runs)} run record(s); serving version {current} "
                   "(a rollback made before is not remembered)")
        logger.warning(f"umind: {warning}")
        state = {"current": current, "runs": runs, "warnings": [warning]}
        try:
            write_text(self.state_path, json.dumps(state, indent=2, default=str))
        except OSError as exc:
            logger.warning(f"umind: could not write the rebuilt {_STATE}: {exc}")
        return state

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
                return run.get("scores_new") or run.get("metrics_new")
        return None

    def runs(self) -> list[dict]:
        """The run history, with a "running" run whose process is gone shown as killed."""
        out = []
        for run in self.state()["runs"]:
            if run.get("status") == "running" and not _alive(run.get("pid")):
                run = dict(run, status="killed",
                           error=f"the training process (pid {run.get('pid')}) ended without finishing: "
                                 "killed or crashed; its labels count for the next run")
            out.append(run)
        return out

    def labels_consumed(self) -> int:
        """How many labeled images the last completed run (promoted or rejected) trained and scored on.

        The retrain trigger counts new labels from here, so the labels of a failed or killed run count
        again for the next one."""
        done = [r for r in self.state()["runs"] if r.get("status") in _COMPLETED]
        return int(done[-1].get("labels_seen", 0)) if done else 0

    def summary(self) -> dict:
        """What /info and the train stats show."""
        state = self.state()
        current = int(state["current"])
        runs = self.runs()
        return {
            "current_version": current,
            "current_metrics": self.metrics(current) if current else state.get("base_metrics"),
            "available_versions": self.available(),
            "runs": runs,
            "last_error": next((r.get("error") for r in reversed(runs) if r.get("status") in ("failed", "killed")),
                               None),
            "warnings": list(state.get("warnings", [])),
        }

    # ------------------------------------------------------------------ writing (train subprocess only)
    def next_version(self) -> int:
        runs = self.state()["runs"]
        used = [r.get("version", 0) for r in runs if isinstance(r.get("version"), int)]
        existing = [int(p.name) for p in (self.workdir / "versions").glob("[0-9][0-9][0-9][0-9]") if p.is_dir()]
        return max(used + existing + [0]) + 1

    def staging_dir(self, version: int) -> Path:
        """A fresh hidden folder for a run's work, renamed to the version's folder by `commit_version`.

        Staging folders left by killed runs are removed first (runs are never concurrent)."""
        root = self.workdir / "versions"
        for old in root.glob(".*.tmp-*"):
            shutil.rmtree(old, ignore_errors=True)
        return new_temp_dir(self.version_dir(version))

    def commit_version(self, staging: Path, version: int, run: dict) -> None:
        """Write run.json into the finished staging folder and rename it to versions/NNNN in one step."""
        _atomic_json(Path(staging) / "run.json", run)
        replace_dir(staging, self.version_dir(version))

    def start_run(self, run: dict) -> None:
        """Record a run as running before it does anything, so a kill leaves a trace."""
        state = self.state()
        state["runs"].append(dict(run, status="running", pid=os.getpid()))
        self._write(state)

    def record_run(self, run: dict, promote: bool) -> dict:
        """Record a finished run (its dict must hold 'version'), replacing its "running" entry, and move the
        pointer to it when `promote`. A run whose folder exists also gets its run.json updated."""
        state = self.state()
        run = dict(run, recorded=time.strftime("%Y-%m-%d %H:%M:%S"))
        state["runs"] = [r for r in state["runs"]
                         if not (r.get("status") == "running" and r.get("version") == run.get("version"))]
        state["runs"].append(run)
        if promote:
            state["current"] = int(run["version"])
        if run.get("version") and self.version_dir(run["version"]).is_dir():
            _atomic_json(self.version_dir(run["version"]) / "run.json", run)
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
    write_text(path, json.dumps(obj, indent=2, default=str))


def _alive(pid) -> bool:
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
