"""The browser viewer's build: pinned, reproducible, built once and reused (scripts/web.sh)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # builds the browser viewer with npm

ROOT = Path(__file__).resolve().parents[1]
WEB = ROOT / "web"


def _path_without_node(tmp_path: Path) -> Path:
    """A PATH folder with the shell tools scripts/web.sh uses and neither node nor npm."""
    bare = tmp_path / "bin"
    bare.mkdir()
    for tool in ("bash", "dirname", "cat", "sha256sum", "cut", "find", "sort", "xargs", "mkdir", "rm", "cp", "mv",
                 "date", "awk", "flock", "ls", "tail", "grep", "mktemp", "ln"):
        if shutil.which(tool):
            (bare / tool).symlink_to(shutil.which(tool))
    return bare


def test_every_npm_package_is_pinned_exactly_and_locked():
    pkg = json.loads((WEB / "package.json").read_text())
    lock = json.loads((WEB / "package-lock.json").read_text())
    assert lock["lockfileVersion"] == 3
    for deps in (pkg["dependencies"], pkg["devDependencies"]):
        for name, version in deps.items():
            assert re.fullmatch(r"\d+\.\d+\.\d+", version), f"{name} {version}: pin an exact version"
            assert lock["packages"][f"node_modules/{name}"]["version"] == version, name
    # every package is a registry tarball checked by its hash (no git, file or link dependencies)
    packages = {k: v for k, v in lock["packages"].items() if k}
    assert packages and all(v.get("integrity", "").startswith("sha512-") for v in packages.values())
    assert not [k for k, v in packages.items() if v.get("link") or not v.get("resolved", "https://registry.npmjs.org/").startswith(
        "https://registry.npmjs.org/")]


def test_a_second_build_reuses_the_first_without_node_or_npm(tmp_path):
    """After one build, scripts/web.sh copies the cached build: it succeeds on a PATH with no node and no npm. Built
    into a folder of its own (UMIND_WEB_OUT), so that the viewer other tests serve from web/dist never goes away."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        pytest.skip("viewer not built: scripts/web.sh needs node and npm (apt-get install nodejs npm)")
    out = tmp_path / "dist"
    env = {**os.environ, "UMIND_WEB_CACHE": str(tmp_path / "cache"), "UMIND_WEB_OUT": str(out)}
    first = subprocess.run(["bash", str(ROOT / "scripts" / "web.sh")], env=env, capture_output=True, text=True,
                           timeout=900)
    assert first.returncode == 0, first.stderr[-2000:]
    info = json.loads((out / "build-info.json").read_text())
    (out / "index.html").unlink()  # the second call must put the build back
    bare = _path_without_node(tmp_path)
    again = subprocess.run([str(bare / "bash"), str(ROOT / "scripts" / "web.sh")],
                           env={**env, "PATH": str(bare)}, capture_output=True, text=True, timeout=60)
    assert again.returncode == 0, again.stderr[-2000:]
    assert json.loads((out / "build-info.json").read_text()) == info
    assert (out / "index.html").is_file() and (out / "assets" / "app.js").is_file()


def test_without_node_a_missing_build_is_one_line_naming_what_to_install(tmp_path):
    bare = _path_without_node(tmp_path)
    out = subprocess.run([str(bare / "bash"), str(ROOT / "scripts" / "web.sh")],
                         env={**os.environ, "PATH": str(bare), "UMIND_WEB_CACHE": str(tmp_path / "empty")},
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 3
    assert out.stderr.strip().splitlines() == ["umind: the viewer needs node and npm to build "
                                               "(apt-get install nodejs npm)"]
