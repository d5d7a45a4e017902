"""A datastore index that holds a value over the stored-value caps is repaired at start, not left to stop the server.

Before the caps of `wall.json_limits`, a label info nested 250 deep was accepted and written into
`datastore_v2.json`; at the next start MONAI Label's loader (pydantic, whose JSON parser stops at 200 levels)
refused the file, and the server came up with an empty index or not at all. `repair_index` runs before the
datastore loads its index: every image or label info over the caps is replaced by what the datastore itself
writes (`ts`, `name`) plus `umind_info_removed` saying why, the entry is named in the log, and the repaired index
is written atomically with the old one kept beside it (`.bak-<time>`). An index that does not parse at all
is moved aside the same way, so the folder listing rebuilds the index (images and label files are kept).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import sys
import time
from typing import Any, Iterator

from umind_core import atomic

from .wall.json_limits import stored_problem

__all__ = ["repair_index"]

logger = logging.getLogger(__name__)

#: Python's json recurses once per level; a value stored before the caps was under 1,000 deep (a request's parse
#: stopped there), and a much higher limit could overflow the C stack
_PARSE_RECURSION = 4_000


def _infos(index: dict) -> Iterator[tuple[str, dict]]:
    """(which entry, its data model dict) for every image and label in a parsed index."""
    for image_id, obj in (index.get("objects") or {}).items():
        if not isinstance(obj, dict):
            continue
        if isinstance(obj.get("image"), dict):
            yield f"image {image_id!r}", obj["image"]
        for tag, label in (obj.get("labels") or {}).items():
            if isinstance(label, dict):
                yield f"label {tag!r} of image {image_id!r}", label


def _parse(text: str) -> Any:
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(max(old, _PARSE_RECURSION))
    try:
        return json.loads(text)
    finally:
        sys.setrecursionlimit(old)


def _keep_aside(path: str) -> str:
    aside = f"{path}.bak-{int(time.time())}"
    shutil.copyfile(path, aside)
    return aside


def repair_index(path: str) -> list[str]:
    """Repair the index file at `path` in place (see the module docstring); the entries changed, as phrases."""
    if not os.path.isfile(path):
        return []
    with open(path, encoding="utf-8", errors="replace") as fh:
        text = fh.read()
    try:
        index = _parse(text)
    except (ValueError, RecursionError, MemoryError) as exc:
        aside = _keep_aside(path)
        os.unlink(path)
        logger.error(f"umind: the datastore index could not be read ({type(exc).__name__}); it was moved to "
                     f"{os.path.basename(aside)} and is rebuilt from the files in the studies folder (their info "
                     "is lost; the images and labels are kept)")
        return ["the whole index"]
    fixed = []
    for what, model in _infos(index if isinstance(index, dict) else {}):
        problem = stored_problem(model.get("info"))
        if problem is None:
            continue
        info = model.get("info") if isinstance(model.get("info"), dict) else {}
        model["info"] = {k: info[k] for k in ("ts", "name") if k in info and not isinstance(info[k], (dict, list))}
        model["info"]["umind_info_removed"] = f"the stored info {problem}"
        fixed.append(what)
    if fixed:
        aside = _keep_aside(path)
        atomic.write_text(path, json.dumps(index, indent=2, default=str))
        for what in fixed:
            logger.error(f"umind: the datastore index held an info over the caps for {what}; it was removed "
                         f"(the old index is kept as {os.path.basename(aside)})")
    return fixed
