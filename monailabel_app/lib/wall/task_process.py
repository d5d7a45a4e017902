"""Train, scoring and batch-infer subprocesses started without any client input in their environment or argv.

MONAI Label 0.8.5's `_task_func` (utils/async_tasks/utils.py) built the subprocess from the request: a
`bundle_path` that exists went onto PYTHONPATH (code execution from an uploaded file), `gpus` became
CUDA_VISIBLE_DEVICES, and the request went on the command line as JSON ("argument list too long" for a large
one, after which the task stayed SUBMITTED and every later label answered "deferred"). This replacement:

- starts the subprocess with the server's own environment (plus the stock train settings) and a fixed
  command; the request reaches it through a private file in the workdir that the child reads and deletes;
- marks the task ERROR with a one-line reason when the process cannot start or fails, so the retrain
  trigger goes on;
- keeps in the task's `details` (what `/train/` and `/scoring/` show) log lines only, scrubbed of server
  paths, never traceback frames; a failure's reason is its last exception line, also scrubbed;
- starts each child in its own process group (session), and `install_shutdown` makes SIGTERM, SIGINT and SIGHUP
  to the server end those groups before the server itself goes: before, a stopped server left its training
  running as an orphan that kept writing into the workdir (and, in its own group, a child no longer gets the
  terminal's Ctrl-C, so the server must pass it on).

The stock module looks `_task_func` up at call time, so replacing the attribute is enough. The child runs
MONAI Label's own runner (`monailabel.interfaces.utils.app.run_main`) with the request read from the file.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import deque
from datetime import datetime
from pathlib import Path

from .edge import scrub

__all__ = ["install_task_process", "install_shutdown", "run_task", "stop_task", "stop_all_tasks", "NEVER_FORWARDED",
           "CHILD_CODE"]

logger = logging.getLogger(__name__)

#: request keys the stock runner would turn into environment; never passed on, whatever their value
NEVER_FORWARDED = ("bundle_path", "gpus")
#: the child: read the request file, delete it, run MONAI Label's runner on it (argv holds only the method
#: and the file's path, both chosen by the server)
CHILD_CODE = ("import os, sys\n"
              "method, path = sys.argv[1], sys.argv[2]\n"
              "with open(path) as fh: text = fh.read()\n"
              "os.unlink(path)\n"
              "sys.argv = [sys.argv[0], '-m', method, '-r', text]\n"
              "from monailabel.interfaces.utils.app import run_main\n"
              "run_main()\n")
_EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Exit)\b:?\s*(.*)$")
_TRACEBACK_LINE = re.compile(r"^(Traceback \(most recent call last\)|\s+File \"|\s{2,}\S|\s+\^+\s*$)")
_state: dict[str, Path] = {}
#: held while a task is started and registered, and while a stop looks for what to stop
_START_LOCK = threading.Lock()


def _environment(method: str) -> dict[str, str]:
    env = dict(os.environ)
    if method == "train":  # the stock runner's train settings
        env["MONAI_LABEL_DATASTORE_AUTO_RELOAD"] = "false"
        env["MASTER_ADDR"] = "127.0.0.1"
        env["MASTER_PORT"] = str(random.randint(1234, 1334))
    return env


def _request_file(request: dict) -> Path:
    """A new private file (0600) holding the request. Written and closed before the child starts, so no
    temp-then-rename is needed, and not fsynced: it lives only until the child reads it, and every moment
    here is one in which a stop request finds no process to stop."""
    folder = _state["workdir"] / "tasks"
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    path = folder / f"{uuid.uuid4().hex}.json"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(json.dumps(request, separators=(",", ":"), default=str))
    return path


def _shown_line(line: str) -> str | None:
    """A line of the child's output as a client may see it: None for traceback frames."""
    if _TRACEBACK_LINE.match(line):
        return None
    return scrub(line)


def _failure(lines: list[str], returncode: int | None) -> str:
    """One line saying why the child failed: its last exception line (scrubbed), else its exit code."""
    for line in reversed(lines):
        match = _EXCEPTION_LINE.match(line.strip())
        if match:
            return scrub(line.strip())[:500]
    return f"the task process exited with code {returncode}"


def _finish(task: dict, status: str, error: str | None, callback) -> None:
    task["end_ts"] = datetime.today().strftime("%Y-%m-%d %H:%M:%S")
    if task.get("status") in ("SUBMITTED", "RUNNING"):
        task["status"] = status
    if error:
        task["error"] = error
        task.setdefault("details", deque(maxlen=20)).append(f"ERROR: {error}")
    if callback:
        callback(task)


def _follow(process, task: dict) -> list[str]:
    """Stream the child's output into the server log and the task's details; the raw tail for `_failure`."""
    plogger = logging.getLogger(f"task_{task.get('method', 'task')}")
    tail: deque[str] = deque(maxlen=50)
    for raw in iter(process.stdout.readline, ""):
        line = raw.rstrip()
        if not line:
            continue
        plogger.info(line)
        tail.append(line)
        shown = _shown_line(line)
        if shown is not None:
            task["details"].append(shown)
    process.wait()
    process.stdout.close()
    return list(tail)


def _start(task: dict, method: str, callback):
    """(process, request file), or (None, None) after marking the task ERROR with the reason it cannot start."""
    request = {k: v for k, v in task["request"].items() if k not in NEVER_FORWARDED}
    task["request"] = request
    task["method"] = method
    task["details"] = deque(maxlen=20)
    path = None
    try:
        path = _request_file(request)
        process = subprocess.Popen([sys.executable, "-c", CHILD_CODE, method, str(path)], stdin=subprocess.DEVNULL,
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                   env=_environment(method), start_new_session=True)
    except Exception as exc:  # no process: the task fails now, with its reason, instead of staying SUBMITTED
        logger.error(f"umind: cannot start the {method} task: {exc}")
        if path is not None:
            path.unlink(missing_ok=True)
        _finish(task, "ERROR", scrub(f"the {method} task could not start: {type(exc).__name__}: {exc}"), callback)
        return None, None
    return process, path


def run_task(task: dict, method: str, callback=None) -> None:
    """The stock `_task_func` without client input in env or argv (see the module docstring)."""
    from monailabel.utils.async_tasks import utils as stock

    with _START_LOCK:  # a stop sees the task either not started (then it never starts) or registered
        if task.get("status") == "STOPPED":  # stopped while it waited in the queue: never started
            return
        process, path = _start(task, method, callback)
        if process is None:
            return
        stock.background_processes.setdefault(method, {})[task["id"]] = process
        task["status"] = "RUNNING"
    try:
        lines = _follow(process, task)
    finally:
        stock.background_processes.get(method, {}).pop(task["id"], None)
        path.unlink(missing_ok=True)  # the child deletes it; a child that died first does not
    logger.info(f"umind: {method} task exited with code {process.returncode}")
    failed = process.returncode != 0
    _finish(task, "ERROR" if failed else "DONE", _failure(lines, process.returncode) if failed else None, callback)


def stop_task(method: str):
    """The stock stop, which kills a running process, plus a task still waiting to start: it is marked STOPPED
    and `run_task` then never starts it (the stock stop answered null and the task started anyway)."""
    from monailabel.utils.async_tasks import utils as stock

    with _START_LOCK:  # never between run_task's last look at the status and its process being registered
        stopped = _STOCK_STOP(method) if _STOCK_STOP else None
        if stopped is not None:
            return stopped
        waiting = [t for t in stock.background_tasks.get(method) or [] if t.get("status") == "SUBMITTED"]
        if not waiting:
            return None
        task = waiting[0]
        task["status"] = "STOPPED"
        task["end_ts"] = datetime.today().strftime("%Y-%m-%d %H:%M:%S")
        return task


_STOCK_STOP = None


def install_task_process(workdir: str | os.PathLike) -> None:
    """Replace MONAI Label's subprocess starter and stop (idempotent); request files go to `<workdir>/tasks`."""
    global _STOCK_STOP
    try:
        from monailabel.utils.async_tasks import task as stock_task
        from monailabel.utils.async_tasks import utils as stock
    except ImportError:
        return
    _state["workdir"] = Path(workdir)
    stock._task_func = run_task
    if _STOCK_STOP is None:
        _STOCK_STOP = stock.stop_background_task
    stock.stop_background_task = stock_task.stop_background_task = stop_task


# ---------------------------------------------------------------------------------------------------- shutdown
#: signals after which the server stops: its task process groups go first (uvicorn handles SIGINT and SIGTERM;
#: SIGHUP, a closed terminal, would otherwise end the server alone)
SHUTDOWN_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
#: how long a task's group gets to end on SIGTERM before SIGKILL
TERM_GRACE_S = 3.0
_shutdown_hooks: list = []


def stop_all_tasks(grace: float = TERM_GRACE_S) -> list[int]:
    """SIGTERM every task process group this server started, SIGKILL the groups still there after `grace`
    seconds; wait for (reap) each leader, so its pid is gone when this returns. The pids of the leaders."""
    from monailabel.utils.async_tasks import utils as stock

    processes = [p for group in list(stock.background_processes.values()) for p in list(group.values())]
    for process in processes:
        _signal_group(process.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    for process in processes:
        try:
            process.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
    for process in processes:  # members of a group may outlive its leader: the group goes whatever the leader did
        _signal_group(process.pid, signal.SIGKILL)
        try:
            process.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            logger.error(f"umind: task process {process.pid} did not end after SIGKILL")
    if processes:
        logger.info(f"umind: stopped task process(es) {[p.pid for p in processes]} with the server")
    return [p.pid for p in processes]


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _shutdown(why: str) -> None:
    """Stop the task processes, then run the hooks (recording a killed training run); never raises."""
    try:
        pids = stop_all_tasks()
    except Exception:
        logger.exception("umind: stopping the task processes failed")
        pids = []
    for hook in list(_shutdown_hooks):
        try:
            hook(why, pids)
        except Exception:
            logger.exception("umind: a shutdown hook failed")


def _chain(previous, signum: int, frame) -> None:
    """Hand the signal on to whoever handled it before (uvicorn's graceful exit), or to the default action."""
    if callable(previous):
        previous(signum, frame)
    elif previous == signal.SIG_DFL:
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)


def install_shutdown(hook=None) -> bool:
    """On SHUTDOWN_SIGNALS (and at a normal exit) stop the task process groups, run `hook(why, pids)`, then let the
    signal do what it did before. Installed on the main thread (signals are delivered there), after uvicorn has
    set its handlers, which are chained; idempotent. False where it cannot be installed (not the main thread)."""
    if hook is not None and hook not in _shutdown_hooks:
        _shutdown_hooks.append(hook)
    if threading.current_thread() is not threading.main_thread():
        logger.warning("umind: not on the main thread: task processes are not stopped with the server")
        return False
    for sig in SHUTDOWN_SIGNALS:
        previous = signal.getsignal(sig)
        if getattr(previous, "_umind_shutdown", False):
            continue

        def handler(signum, frame, previous=previous):
            _shutdown(f"the server stopped on {signal.Signals(signum).name}")
            _chain(previous, signum, frame)

        handler._umind_shutdown = True  # type: ignore[attr-defined]
        signal.signal(sig, handler)
    if not getattr(install_shutdown, "_atexit", False):
        atexit.register(_shutdown, "the server exited")
        install_shutdown._atexit = True  # type: ignore[attr-defined]
    return True
