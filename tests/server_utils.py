"""Start and stop a real `monailabel start_server` for tests (and the server benchmark).

The `monailabel` command is a bash script that runs `python` from PATH, so the venv's bin goes first on
PATH; the server runs in its own process group so that stopping it also ends its train/scoring
subprocesses.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
APP_DIR = REPO / "monailabel_app"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


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
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
                self.proc.wait(timeout=15)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                try:
                    os.killpg(self.proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                self.proc.wait(timeout=15)


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
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}:\n{server.log_tail()}")
        try:
            server.get_json("/info/", timeout=5)
            return server
        except urllib.error.HTTPError as exc:
            if exc.code == 401:  # auth is on: the server is up and wants a token
                return server
            time.sleep(0.5)
        except (urllib.error.URLError, ConnectionError, OSError, ValueError):
            time.sleep(0.5)
    server.stop()
    raise RuntimeError(f"server did not answer /info within {timeout:.0f} s:\n{server.log_tail()}")
