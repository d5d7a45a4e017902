"""At the request edge: stock MONAI Label endpoints answer 4xx JSON naming the problem, never a bare 500.

MONAI Label 0.8.5 installs no exception handlers, and its endpoint functions `json.loads` form fields and
call the datastore without catching anything, so a malformed `info`, an unknown id or a refused name came
back as "Internal Server Error". Its `async def` routes look the helper functions (`add_image`,
`save_label`, `run_inference`, ...) up by module attribute at call time, so wrapping those attributes
is enough to translate every exception on the way out (`http_error`). The same place refuses the stock
features UMind does not serve (model-file upload, whole-slide inference; sessions are off in main.py)
with a message instead of a 500.

Server paths never leave in a message: `scrub` replaces the studies folder, the workdir and the temp
folder with placeholders.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import re
import tempfile

from fastapi import HTTPException

from .errors import guard_params_json, to_http

__all__ = ["install_edge", "http_error", "scrub", "set_roots"]

logger = logging.getLogger(__name__)

#: module -> functions whose exceptions become 4xx JSON
_WRAPPED = {
    "monailabel.endpoints.datastore": ("datastore", "add_image", "remove_image", "save_label", "remove_label",
                                       "download_image", "download_label", "get_image_info", "update_image_info",
                                       "get_label_info", "update_label_info", "download_dataset"),
    "monailabel.endpoints.infer": ("run_inference",),
    "monailabel.endpoints.activelearning": ("sample",),
}
_roots: dict[str, str] = {}


def set_roots(studies: str | None, workdir: str | None) -> None:
    """The server folders `scrub` hides (longest first, so a workdir inside the studies is named as such)."""
    pairs = {str(workdir): "<workdir>", str(studies): "<studies>", tempfile.gettempdir(): "<tmp>"}
    for path, shown in list(pairs.items()):
        if path and path != "None":
            pairs[os.path.realpath(path)] = shown
    _roots.clear()
    _roots.update({k: v for k, v in sorted(pairs.items(), key=lambda kv: -len(kv[0])) if k and k != "None"})


def scrub(text: str) -> str:
    for path, shown in _roots.items():  # whole path components only: /tmp must not eat /tmpabc
        text = re.sub(re.escape(path) + r"(?![\w.-])", lambda _m, s=shown: s, text)
    return text


def http_error(exc: BaseException, where: str) -> HTTPException:
    """The HTTPException a failed endpoint answers with (message scrubbed of server paths)."""
    from monailabel.interfaces.exception import ImageNotFoundException, LabelNotFoundException, MONAILabelException

    if isinstance(exc, HTTPException):
        out = exc
    elif isinstance(exc, json.JSONDecodeError):
        out = HTTPException(400, f"{where}: a form field is not valid JSON ({exc})")
    elif isinstance(exc, (ImageNotFoundException, LabelNotFoundException)):
        out = HTTPException(404, f"{where}: {exc}")
    elif isinstance(exc, MONAILabelException):
        out = HTTPException(400, f"{where}: {getattr(exc, 'msg', exc)}")
    else:
        out = to_http(exc, where)
    if isinstance(out.detail, str):
        out.detail = scrub(out.detail)
    return out


def _wrap(module, name: str) -> None:
    original = getattr(module, name, None)
    if original is None or getattr(original, "_umind_edge", False):
        return
    where = name.replace("_", " ")

    @functools.wraps(original)
    def wrapper(*args, **kwargs):
        try:
            return original(*args, **kwargs)
        except Exception as exc:  # every failure leaves as a JSON message
            raise http_error(exc, where) from exc

    wrapper._umind_edge = True  # type: ignore[attr-defined]
    setattr(module, name, wrapper)


def _refuse(module, name: str, status: int, message: str) -> None:
    def refused(*args, **kwargs):
        raise HTTPException(status, message)

    refused._umind_edge = True  # type: ignore[attr-defined]
    setattr(module, name, refused)


def install_edge() -> None:
    """Wrap the stock endpoint helpers (idempotent; a no-op where the server is not imported)."""
    import importlib

    guard_params_json()
    for mod_name, names in _WRAPPED.items():
        try:
            module = importlib.import_module(mod_name)
        except ImportError:
            continue
        for name in names:
            _wrap(module, name)
    try:
        from monailabel.endpoints import model, wsi_infer
    except ImportError:
        return
    msg = ("uploading or deleting model files is not supported by UMind: models are versioned by training "
           "(POST /train/umind_lora, rollback with {\"rollback\": N})")
    _refuse(model, "update_model", 405, msg)
    _refuse(model, "delete_model", 405, msg)
    # whole-slide inference would take any server path or upload as `image`; UMind has no WSI task
    _refuse(wsi_infer, "run_wsi_inference", 404, "UMind serves no whole-slide (WSI) inference; use /infer/{task}")
