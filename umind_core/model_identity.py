"""What a model folder is called where people must tell two apart (/info, logs): the folder it came from and its
version, never just ``final``.

Every training run saves its model as ``RUN/final`` (training/run.py), so the folder's own name says nothing: two
served models both answered "final" on /info. The name is the run's folder plus the generic name
(``thyroid/final``); the version is the config's own ``version`` string where one was written, else when the
folder was saved and how many steps made it (``RUN/summary.json``), which changes with every retraining of the same
run folder. Only names, never full paths: a client learns which model, not where the server keeps it.
"""

from __future__ import annotations

import json
import re
from datetime import datetime, timezone
from pathlib import Path

__all__ = ["model_name", "model_version", "is_generic_name"]

#: folder names a trainer gives every run's output, so they name no model on their own
_GENERIC = re.compile(r"^(final|best|last|latest|model|output|out|export|(checkpoint|step|epoch)[-_]?\d*)$",
                      re.IGNORECASE)


def is_generic_name(name: str) -> bool:
    return bool(_GENERIC.match(name))


def model_name(path: str | Path | None, default: str = "demo") -> str:
    """``runs/thyroid/final`` -> "thyroid/final"; a named folder (``umind-thyroid-v2``) keeps its own name."""
    if not path:
        return default
    p = Path(path)
    if is_generic_name(p.name) and p.parent.name:
        return f"{p.parent.name}/{p.name}"
    return p.name


def _read_json(path: Path) -> dict:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}


def model_version(path: str | Path | None) -> str | None:
    """The config's ``version`` (a string someone wrote), else "saved <UTC time>[, N steps]" of umind_config.json and
    the run's summary.json; None for a folder without a UMind config (a plain Qwen3-VL base)."""
    if not path:
        return None
    p = Path(path)
    config = p / "umind_config.json"
    stated = _read_json(config).get("version")
    if isinstance(stated, (str, int)) and not isinstance(stated, bool) and str(stated).strip():
        return str(stated).strip()
    try:
        saved = datetime.fromtimestamp(config.stat().st_mtime, tz=timezone.utc).strftime("%Y-%m-%dT%H:%MZ")
    except OSError:
        return None
    steps = _read_json(p.parent / "summary.json").get("steps") if is_generic_name(p.name) else None
    return f"saved {saved}" + (f", {steps} steps" if isinstance(steps, int) and not isinstance(steps, bool) else "")
