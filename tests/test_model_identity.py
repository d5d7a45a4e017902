"""A served model is named by the folder it came from and its version, never just `final`; a relative
`--conf model` path resolves against the working directory or fails with one line, not a traceback; each server
logs under its own workdir; an unreachable realm is one status."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from umind_core.model_identity import model_name, model_version

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "monailabel_app"))
from lib.conf import ConfError, check_command_line, parse_conf  # noqa: E402


def _run_folder(root: Path, run: str, steps: int | None = 40, config: dict | None = None) -> Path:
    final = root / "runs" / run / "final"
    final.mkdir(parents=True)
    (final / "umind_config.json").write_text(json.dumps(config or {"format_version": 1}))
    if steps is not None:
        (final.parent / "summary.json").write_text(json.dumps({"steps": steps}))
    return final


def test_two_runs_are_told_apart_by_name_and_version(tmp_path):
    a, b = _run_folder(tmp_path, "thyroid"), _run_folder(tmp_path, "kidney", steps=None)
    assert model_name(a) == "thyroid/final" and model_name(b) == "kidney/final"
    assert model_name(tmp_path / "umind-thyroid-v2") == "umind-thyroid-v2"  # a named folder keeps its name
    assert model_name(tmp_path / "runs" / "x" / "checkpoint-200") == "x/checkpoint-200"
    assert model_name(None) == "demo"
    os.utime(a / "umind_config.json", (1_800_000_000, 1_800_000_000))
    assert model_version(a) == "saved 2027-01-15T08:00Z, 40 steps"
    assert model_version(b).startswith("saved ") and "steps" not in model_version(b)
    c = _run_folder(tmp_path, "liver", config={"version": "liver-2026.12"})
    assert model_version(c) == "liver-2026.12"  # the config's own version string wins
    assert model_version(tmp_path / "qwen-base") is None  # no UMind config: no version to state


def test_info_names_the_model_by_its_run_folder():
    """/info's model comes from model_identity, not Path(model).name (which answered "final" for every run)."""
    text = (ROOT / "monailabel_app" / "main.py").read_text()
    assert '"model": model_name(self.umind_conf.model)' in text and "Path(self.umind_conf.model).name" not in text
    assert '"model_version": model_version(self.umind_conf.model)' in text


def test_relative_conf_model_resolves_against_the_working_directory(tmp_path, monkeypatch):
    final = _run_folder(tmp_path, "thyroid")
    monkeypatch.chdir(tmp_path)
    conf = parse_conf({"model": "runs/thyroid/final"}, str(tmp_path / "studies"))
    assert conf.model == str(final.resolve())
    with pytest.raises(ConfError, match=r"'runs/nope/final' \(from .*\) is not a directory"):
        parse_conf({"model": "runs/nope/final"}, str(tmp_path / "studies"))


@pytest.mark.slow
def test_a_bad_conf_model_is_one_line_and_exit_2(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "monailabel_app.lib.log_config", str(tmp_path / "studies"), "--port", "8000",
           "--conf", "model", "runs/nope/final", "--conf", "decode", "tuned"]
    proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip().splitlines() == [
        f"umind: --conf: model must be a UMind or Qwen3-VL folder, 'runs/nope/final' (from {tmp_path}) is not a "
        "directory"]
    _run_folder(tmp_path, "thyroid")
    assert check_command_line(["--conf", "model", str(tmp_path / "runs/thyroid/final")], str(tmp_path / "s")) is None


def test_serve_sh_makes_a_relative_model_absolute_where_it_was_typed(tmp_path):
    env = {**os.environ, "UMIND_DRY_RUN": "1"}
    proc = subprocess.run([str(ROOT / "scripts" / "serve.sh"), "--conf", "model", "runs/thyroid/final",
                           "--conf", "workdir", "/abs/work", "--conf", "decode", "tuned"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert f"--conf model {tmp_path}/runs/thyroid/final --conf workdir /abs/work --conf decode tuned" in proc.stdout
    serve = (ROOT / "scripts" / "serve.sh").read_text()
    assert serve.index("python -m monailabel_app.lib.log_config") < serve.index("exec monailabel start_server")


@pytest.mark.slow
def test_each_server_logs_under_its_own_workdir(tmp_path):
    """Two servers from one checkout: each gets a logging config whose file handlers write its own workdir, none
    the checkout's monailabel_app/logs/app.log."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    paths = []
    for name in ("a", "b"):
        cmd = [sys.executable, "-m", "monailabel_app.lib.log_config", str(tmp_path / f"studies_{name}"),
               "--conf", "workdir", str(tmp_path / f"work_{name}")]
        proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        paths.append(Path(proc.stdout.strip()))
    assert paths == [tmp_path / "work_a/logs/logging.json", tmp_path / "work_b/logs/logging.json"]
    for path, name in zip(paths, ("a", "b")):
        handlers = json.loads(path.read_text())["handlers"]
        files = {h["filename"] for h in handlers.values() if "filename" in h}
        assert files == {str(tmp_path / f"work_{name}/logs/monailabel.log")}
    serve = (ROOT / "scripts" / "serve.sh").read_text()
    assert 'ARGS+=(--log_config "$LOG_CONFIG")' in serve


def test_an_unreachable_realm_is_503_on_login_as_with_a_token():
    import asyncio

    import requests
    from fastapi import HTTPException
    from lib.wall.login import _login_like

    def failing(exc):
        async def original(**kwargs):
            raise exc
        return original

    with pytest.raises(HTTPException) as down:
        asyncio.run(_login_like(failing(requests.ConnectionError("no route")))())
    assert down.value.status_code == 503 and "cannot be reached" in down.value.detail
    bad = requests.HTTPError(response=type("R", (), {"status_code": 500})())
    with pytest.raises(HTTPException) as wrong:
        asyncio.run(_login_like(failing(bad))())
    assert wrong.value.status_code == 502  # the realm answered, with an error of its own
    auth = (ROOT / "monailabel_app" / "lib" / "wall" / "auth.py").read_text()
    assert 'HTTPException(503, "the identity provider (auth realm) cannot be reached' in auth
