"""Start and stop a real `monailabel start_server` for tests and benchmarks.

The `monailabel` command is a bash script that runs `python` from PATH, so the venv's bin goes first on
PATH; the server runs in its own process group so that stopping it also ends its train/scoring
subprocesses. The app is passed by its folder (`APP_DIR`, beside this package in a checkout and in an install
alike), never imported here.
"""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]  # the checkout (or site-packages): umind_core/testing/server.py
APP_DIR = REPO / "monailabel_app"


def same_reply(a, b, tol: float = 1e-5) -> bool:
    """Two replies' JSON equal but for timings and latencies, floats within `tol`: a batch may sum in another
    order than a lone request, so a confidence can move in the last digits (rounding both to a few digits is
    not the same test: a value on a rounding edge lands on either side)."""
    if isinstance(a, dict) and isinstance(b, dict):
        keys = {k for k in (*a, *b) if k not in ("timings", "latencies")}
        return all(k in a and k in b and same_reply(a[k], b[k], tol) for k in keys)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same_reply(x, y, tol) for x, y in zip(a, b))
    if isinstance(a, float) or isinstance(b, float):
        return isinstance(a, (int, float)) and isinstance(b, (int, float)) and abs(a - b) <= tol
    return a == b


_PORT_FLOOR = 10000  # below this lie well-known services' ports
_PORT_BLOCK = 2000  # ports handed to one pytest-xdist worker
_next_port: list[int] = []  # this process's next candidate, chosen at random on the first call


def _ephemeral_floor() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port() -> int:
    """A loopback port that no other test worker is handed, free when asked.

    A port the kernel picks (bind to 0) is free only until someone else gets the same one: two xdist workers
    did, and a slow-starting server's probe was answered by the other worker's server. So each worker takes
    ports from its own block below the kernel's ephemeral range (which the kernel never hands out, and which
    Orthanc's and accelerate's picks never reach), walking forward so a port just released by a stopping
    server is not reused at once. Where that range starts too low for a block, the kernel picks."""
    floor = _ephemeral_floor()
    blocks = (floor - _PORT_FLOOR) // _PORT_BLOCK
    if blocks < 1:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return int(s.getsockname()[1])
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    index = int(worker[2:]) if worker[2:].isdigit() else 0
    start = _PORT_FLOOR + (index % blocks) * _PORT_BLOCK
    if not _next_port:
        _next_port.append(random.randrange(_PORT_BLOCK))
    for _ in range(_PORT_BLOCK):
        port = start + _next_port[0] % _PORT_BLOCK
        _next_port[0] += 1
        if _bindable(port):
            return port
    raise RuntimeError(f"no free loopback port in {start}-{start + _PORT_BLOCK - 1}")


@dataclass
class Server:
    url: str
    proc: subprocess.Popen
    log: Path

    def log_tail(self, n: int = 60) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return "(no log)"

    def get_json(self, path: str, timeout: float = 60):
        with urllib.request.urlopen(self.url + path, timeout=timeout) as r:
            return json.loads(r.read())

    def wait_train(self, timeout: float = 600.0, poll: float = 1.0) -> dict:
        """The train job's final status (DONE or ERROR); `timeout` guards against a hang, it is not a goal.

        Waits one `poll` before the first look so that a job just submitted is the one reported."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            time.sleep(poll)
            try:
                status = self.get_json("/train/", timeout=30)
            except (urllib.error.URLError, ConnectionError, OSError, ValueError):
                continue
            if isinstance(status, dict) and status.get("status") in ("DONE", "ERROR"):
                return status
        raise AssertionError(f"training did not finish in {timeout:.0f} s:\n{self.log_tail()}")

    def stop(self) -> None:
        stop_process_group(self.proc, 15)


def stop_process_group(proc: subprocess.Popen, timeout: float) -> None:
    """SIGTERM to a process group started with start_new_session, SIGKILL if it has not ended within `timeout`
    (the server, Orthanc and Chromium all start helpers of their own that must go with them)."""
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=timeout)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(timeout=timeout)


def wait_until_up(proc: subprocess.Popen, probe, timeout: float, interval: float, name: str, what: str, stop,
                  log_tail) -> None:
    """Poll `probe()` (True once the process answers) until it does; RuntimeError with the log's tail when the
    process (`name`) exits first, or, after `stop()`, when `what` has not answered within `timeout`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{name} exited with {proc.returncode}:\n{log_tail()}")
        if probe():
            return
        time.sleep(interval)
    stop()
    raise RuntimeError(f"{what} did not answer within {timeout:.0f} s:\n{log_tail()}")


def start_server(studies: Path, conf: dict[str, str], log: Path, env: dict | None = None,
                 timeout: float = 120.0, studies_arg: str | None = None) -> Server:
    """Run the app on a free loopback port and wait until /info answers (or raise with the log's tail).

    `studies` is the server's working folder and, unless `studies_arg` gives another (a PACS's DICOMweb URL),
    its studies folder."""
    port = free_port()
    bin_dir = str(Path(sys.executable).parent)
    full_env = {**os.environ, "PATH": f"{bin_dir}:" + os.environ.get("PATH", ""),
                "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", **(env or {})}
    cmd = [str(Path(bin_dir) / "monailabel"), "start_server", "--app", str(APP_DIR),
           "--studies", studies_arg or str(studies), "--host", "127.0.0.1", "--port", str(port)]
    for k, v in conf.items():
        cmd += ["--conf", k, str(v)]
    fh = open(log, "w")
    proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, env=full_env, start_new_session=True,
                            cwd=str(studies))
    server = Server(f"http://127.0.0.1:{port}", proc, log)

    def answers() -> bool:
        try:
            server.get_json("/info/", timeout=5)
            return True
        except urllib.error.HTTPError as exc:
            return exc.code == 401  # auth is on: the server is up and wants a token
        except (urllib.error.URLError, ConnectionError, OSError, ValueError):
            return False

    wait_until_up(proc, answers, timeout, 0.5, "server", "server /info", server.stop, server.log_tail)
    return server
