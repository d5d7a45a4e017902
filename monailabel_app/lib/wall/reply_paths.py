"""No server path in a reply: the stock endpoints that put the studies folder's absolute paths into JSON.

MONAI Label 0.8.5 adds `path` (the file's real path on the server) to `GET /datastore/image/info` and to the
active-learning reply, and `GET /datastore/?output=train` lists image and label files by absolute path. A
client needs ids, never the server's folders (they map its disk for anyone who may ask). The stock endpoint
helpers are module attributes looked up per request, so wrapping them here is enough; the datastore itself
keeps full paths for training.
"""

from __future__ import annotations

import functools
import os

__all__ = ["install_reply_paths", "without_paths"]


def without_paths(info):
    """A copy of an info dict without its `path` key (anything else is returned unchanged)."""
    if isinstance(info, dict) and "path" in info:
        return {k: v for k, v in info.items() if k != "path"}
    return info


def _relative_datalist(items):
    """output=train: each image and label by file name, as the datastore stores it."""
    return [{k: os.path.basename(v) if k in ("image", "label") and isinstance(v, str) else v for k, v in d.items()}
            for d in items]


def _wrap(module, name: str, fix) -> None:
    original = getattr(module, name)
    if getattr(original, "_umind_paths", False):
        return

    @functools.wraps(original)
    def wrapper(*args, **kwargs):
        return fix(original(*args, **kwargs), *args, **kwargs)

    for flag in ("_umind_edge", "_umind_guarded"):  # keep the other wrappers' idempotence marks visible
        if getattr(original, flag, False):
            setattr(wrapper, flag, True)
    wrapper._umind_paths = True  # type: ignore[attr-defined]
    setattr(module, name, wrapper)


def install_reply_paths() -> None:
    try:
        from monailabel.endpoints import activelearning, datastore
    except ImportError:
        return
    _wrap(datastore, "get_image_info", lambda out, *a, **k: without_paths(out))
    _wrap(activelearning, "sample", lambda out, *a, **k: without_paths(out))

    def listing(out, *args, **kwargs):
        output = kwargs.get("output", args[0] if args else None)
        return _relative_datalist(out) if str(getattr(output, "value", output)) == "train" else out

    _wrap(datastore, "datastore", listing)
