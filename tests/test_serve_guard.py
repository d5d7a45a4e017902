"""scripts/serve.sh refuses a non-loopback bind without auth: checked before anything is set up."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

SERVE = Path(__file__).resolve().parents[1] / "scripts" / "serve.sh"


def run_serve(args: list[str], tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    full = {k: v for k, v in os.environ.items() if not k.startswith(("MONAI_LABEL_AUTH", "UMIND_ALLOW"))}
    full.update({"UMIND_STUDIES": str(tmp_path), "UMIND_VENV": str(tmp_path / "no-venv"), **env})
    return subprocess.run(["bash", str(SERVE), *args], env=full, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("args", [["--host", "0.0.0.0"], ["--host=192.168.1.5"], ["--conf", "x", "1", "--host", "::"]])
def test_non_loopback_bind_without_auth_is_refused(tmp_path, args):
    res = run_serve(args, tmp_path)
    assert res.returncode == 2, res.stderr
    assert "refusing to bind" in res.stderr and "MONAI_LABEL_AUTH_ENABLE" in res.stderr
    assert not (tmp_path / "no-venv").exists()  # refused before the environment is touched


def test_auth_off_spelled_false_is_still_refused(tmp_path):
    res = run_serve(["--host", "0.0.0.0"], tmp_path, MONAI_LABEL_AUTH_ENABLE="False")
    assert res.returncode == 2 and "refusing to bind" in res.stderr
