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
shows in /info as killed instead of vanishing (and `settle_killed` writes that into versions.json when the server
stops or starts); its work happens in a hidden staging folder renamed to versions/NNNN only when complete; a
corrupt versions.json is rebuilt from the version folders' run.json records (with a warning) instead of failing
every request.

Rollback refuses what it cannot do (`check_rollback`): a version that does not exist is an error naming the
available ones, and a version the gate rejected is served only with an explicit force, which /info then shows
(`current_forced`) until a run is promoted. A version refers to its base through base_ref.py, so `model_dir`
finds the base after the checkout moved.
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

from .atomic import new_temp_dir, replace_dir, write_text

from .base_ref import REF_FILE, BaseRefError, HashCache, read_ref, relink, weights_signature, write_ref
from .booleans import as_bool

__all__ = ["PROGRESS_FILE", "VersionError", "VersionStore", "check_rollback"]

_STATE = "versions.json"
#: the running train's last progress line ({"version", "line", "at"}), written by the train subprocess
PROGRESS_FILE = "progress.json"
_COMPLETED = ("promoted", "rejected")
logger = logging.getLogger(__name__)


class VersionError(ValueError):
    """A version that does not exist, or a corrupt versions.json; the message names it."""


def check_rollback(versions: "VersionStore", rollback, force=None) -> int | None:
    """The version a request's {"rollback": N, "force": F} asks for, or None when it asks for no rollback.

    Raises VersionError (a ValueError) when the rollback cannot or may not happen: N is not a version number or
    does not exist (the message lists those that do), or the gate rejected N and `force` is not true. The request
    check calls it so that such a request is a 400 when it arrives, not a 200 whose task fails later under
    /train/; the train task and `umind versions --rollback` call it again through `VersionStore.rollback`."""
    if rollback is None or rollback == "":
        return None
    text = str(rollback).strip()
    if isinstance(rollback, bool) or not text.lstrip("-").isdigit():
        raise VersionError(f"rollback must be a version number, got {rollback!r}")
    forced = as_bool(force, empty=False) if force is not None else False
    if forced is None:
        raise VersionError(f"force must be true or false, got {force!r}")
    version = int(text)
    available = versions.available()
    rejected = [v for v in available if (versions.run_of(v) or {}).get("status") == "rejected"]
    if version not in available:
        shown = ", ".join(f"{v} (rejected)" if v in rejected else str(v) for v in available)
        raise VersionError(f"version {version} does not exist; available versions: {shown}")
    if version in rejected and not forced:
        reason = (versions.run_of(version) or {}).get("reason") or "no reason recorded"
        raise VersionError(f"version {version} was rejected by the gate ({reason}); to serve it anyway, roll back "
                           'with "force": true')
    return version


@dataclass
class _Cache:
    key: tuple = ()
    state: dict | None = None


class VersionStore:
    def __init__(self, workdir: Path, search_paths: list[Path] | None = None):
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._cache = _Cache()
        self._lock = threading.Lock()
        #: where a version's base is looked for when it is not where it was saved (main.py: conf model, demo model)
        self.search_paths: list[Path] = list(search_paths) if search_paths is not None else _default_search()
        self.hashes = HashCache(self.workdir / "base_hashes.json")
        self._linked: dict[int, tuple] = {}  # version -> (config stat, base folder, its weights signature)
        self._unlinkable: dict[int, str] = {}  # version -> why its base was not found (warned once)

    @property
    def state_path(self) -> Path:
        return self.workdir / _STATE

    def version_dir(self, version: int) -> Path:
        return self.workdir / "versions" / f"{int(version):04d}"

    def model_dir(self, version: int) -> Path | None:
        """The folder to load for `version`; None for version 0 (the configured model).

        Its config is first pointed at its base wherever that now is (base_ref.py); called per request, so a
        version whose base was found before costs a few stat calls. A base found nowhere leaves the folder as it
        is: loading it then fails, and the runtime serves the last good version with a warning."""
        if version == 0:
            return None
        folder = self.version_dir(version) / "model"
        try:
            self.link_base(version)
        except (OSError, ValueError) as exc:
            if self._unlinkable.get(version) != str(exc):
                self._unlinkable[version] = str(exc)
                logger.warning(f"umind: version {version}: {exc}")
        return folder

    def link_base(self, version: int) -> Path | None:
        """The base folder of `version` after pointing its config there (None: no reference, read as saved).
        Raises BaseRefError when the base is nowhere in the search path."""
        folder = self.version_dir(version) / "model"
        config = folder / "umind_config.json"
        key = _stat_key(config)
        known = self._linked.get(version)
        if known and known[0] == key and known[2] == _signature_or_none(known[1]):
            return known[1]
        base = relink(folder, self.workdir, self.search_paths, self.hashes)
        if base is not None:
            self._linked[version] = (_stat_key(config), base, _signature_or_none(base))
            self._unlinkable.pop(version, None)
        return base

    def base_status(self, version: int) -> str:
        """One line on where `version`'s base is (for `umind versions`)."""
        if version == 0:
            return "the configured model"
        try:
            base = self.link_base(version)
        except BaseRefError as exc:
            return f"MISSING: {exc}"
        except (OSError, ValueError) as exc:
            return f"unreadable: {exc}"
        if base is None:
            try:
                saved = json.loads((self.version_dir(version) / "model" / "umind_config.json").read_text())
                return f"{saved.get('base_model')} (absolute path, saved before base references)"
            except (OSError, ValueError) as exc:
                return f"unreadable: {exc}"
        return f"{base} (weights verified)"

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

    def run_of(self, version: int) -> dict | None:
        """The last run record that made `version` (None for version 0 or an unknown one)."""
        return next((r for r in reversed(self.state()["runs"]) if r.get("version") == version), None)

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

    def training(self) -> bool:
        """Whether a training run is in progress now (recorded as running, its process alive)."""
        return bool(_running(self.runs()))

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
        warnings = list(state.get("warnings", []))
        forced = bool(state.get("current_forced"))
        if forced:
            warnings.append(f"serving version {current}, which the gate rejected: a forced rollback")
        return {
            "current_version": current,
            "current_forced": forced,
            "current_metrics": self.metrics(current) if current else state.get("base_metrics"),
            "available_versions": self.available(),
            "runs": runs,
            "last_error": next((r.get("error") for r in reversed(runs) if r.get("status") in ("failed", "killed")),
                               None),
            # why the newest finished run's version is served or not, and by which gate rule (the runs hold all)
            "last_decision": next(({"version": r.get("version"), "status": r.get("status"), "reason": r.get("reason"),
                                    "rule": r.get("gate_rule")}
                                   for r in reversed(runs) if r.get("status") in ("promoted", "rejected")), None),
            "train_progress": self.progress(runs),
            "warnings": warnings,
        }

    def progress(self, runs: list[dict] | None = None) -> dict | None:
        """The running train's last progress line ({"version", "line", "at"}), None when no run is running."""
        running = _running(self.runs() if runs is None else runs)
        if not running:
            return None
        try:
            data = json.loads((self.workdir / PROGRESS_FILE).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {"version": running[-1], "line": None, "at": None}
        if not isinstance(data, dict) or data.get("version") != running[-1]:
            return {"version": running[-1], "line": None, "at": None}
        return data

    def set_progress(self, version: int, line: str) -> None:
        """Record the running train's last progress line (train subprocess only; /info reads it)."""
        _atomic_json(self.workdir / PROGRESS_FILE,
                     {"version": version, "line": line, "at": time.strftime("%Y-%m-%d %H:%M:%S")})

    def settle_killed(self, why: str) -> list[dict]:
        """Write every "running" run whose process is gone into versions.json as killed (with `why`): called when the
        server stops its task processes and when it starts, so the record says killed instead of guessing from a pid
        (which a later process may reuse). The runs it settled."""
        state = self.state()
        settled = []
        for run in state["runs"]:
            if run.get("status") == "running" and not _alive(run.get("pid")):
                run.update(status="killed", error=f"killed: {why} (training process {run.get('pid')}); its labels "
                                                  "count for the next run", recorded=time.strftime("%Y-%m-%d %H:%M:%S"))
                settled.append(run)
        if settled:
            self._write(state)
        return settled

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
            state.pop("current_forced", None)
        if run.get("version") and self.version_dir(run["version"]).is_dir():
            _atomic_json(self.version_dir(run["version"]) / "run.json", run)
        self._write(state)
        return run

    def set_base_metrics(self, metrics: dict) -> None:
        state = self.state()
        state["base_metrics"] = metrics
        self._write(state)

    def rollback(self, version: int, force: bool = False) -> dict:
        """Serve `version` from now on (any available one, 0 included; a rejected one only with `force`)."""
        if isinstance(version, bool) or not isinstance(version, int):
            raise VersionError(f"rollback version must be an integer, got {version!r}")
        check_rollback(self, version, force)
        forced = (self.run_of(version) or {}).get("status") == "rejected"
        state = self.state()
        previous = int(state["current"])
        state["current"] = version
        if forced:
            state["current_forced"] = True
        else:
            state.pop("current_forced", None)
        state["runs"].append({"version": None, "status": "rollback", "from": previous, "to": version,
                              "forced": forced, "recorded": time.strftime("%Y-%m-%d %H:%M:%S")})
        self._write(state)
        return {"rolled_back_from": previous, "current_version": version, "forced": forced}

    def export(self, version: int, dest: Path) -> Path:
        """Copy `version` into `dest` as one self-contained folder: adapter, decoder, processor, config (pointing at
        the base where it is now) and base_ref.json (the base's weight hash; written here for a version saved before
        references existed), plus the run record. The base's weights are referred to, not copied."""
        if version == 0:
            raise VersionError("version 0 is the configured model itself (conf model or the demo model), not a "
                               "version folder: use that folder")
        check_rollback(self, version, force=True)  # exists (the message lists those that do)
        dest = Path(dest).expanduser()
        if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
            raise FileExistsError(f"{dest} exists and is not an empty folder; choose a new one")
        self.link_base(version)  # BaseRefError when the base is nowhere: the export would not load
        tmp = new_temp_dir(dest)
        try:
            shutil.copytree(self.version_dir(version) / "model", tmp, dirs_exist_ok=True)
            run = self.version_dir(version) / "run.json"
            if run.is_file():
                shutil.copy2(run, tmp / "run.json")
            ref = read_ref(tmp) or write_ref(tmp, self.workdir, self.hashes)
            if ref is not None:  # a path relative to this workdir means nothing beside the export
                _atomic_json(tmp / REF_FILE, dict(ref, relative_to_workdir=None, exported_version=version))
            replace_dir(tmp, dest)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return dest

    def _write(self, state: dict) -> None:
        _atomic_json(self.state_path, state)
        with self._lock:
            self._cache = _Cache()


def _atomic_json(path: Path, obj: dict) -> None:
    write_text(path, json.dumps(obj, indent=2, default=str))


def _default_search() -> list[Path]:
    from umind_core.demo import DEMO_MODEL_DIR

    return [DEMO_MODEL_DIR]


def _stat_key(path: Path) -> tuple | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return (st.st_ino, st.st_mtime_ns, st.st_size)


def _signature_or_none(folder: Path) -> tuple | None:
    try:
        return weights_signature(folder)
    except OSError:
        return None


def _running(runs: list[dict]) -> list:
    """The versions of the runs in progress (`runs()` has settled the dead ones as killed)."""
    return [r.get("version") for r in runs if r.get("status") == "running"]


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
