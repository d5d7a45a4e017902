"""Bad requests answer 4xx with a JSON message naming the problem, not MONAI Label's bare 500.

MONAI Label 0.8.5 installs no exception handlers: anything a task raises, and the `json.loads(params)` its
infer and save-label endpoints run before any app code, becomes "Internal Server Error". Tasks therefore
raise fastapi's HTTPException themselves (`to_http`), and `guard_params_json` wraps the endpoint
functions that parse `params` (or `info`) so that malformed JSON is a 400. The endpoint modules look those functions up
by name at call time, so wrapping the module attribute is enough; the wrapper is idempotent.
"""

from __future__ import annotations

import functools
import json
import logging

from fastapi import HTTPException

__all__ = ["BadRequest", "NotFound", "Conflict", "InsufficientStorage", "UpstreamError", "UpstreamTimeout", "to_http",
           "check_params_json", "guard_params_json"]

logger = logging.getLogger(__name__)


class BadRequest(ValueError):
    """A request parameter that cannot be used; answered with HTTP 400."""

    status_code = 400


class NotFound(BadRequest):
    """A request names something (task, version, image) that does not exist; answered with HTTP 404."""

    status_code = 404


class Conflict(BadRequest):
    """A request would overwrite something that exists (an image id already stored) without saying so: HTTP 409."""

    status_code = 409


class InsufficientStorage(BadRequest):
    """The server's disk is full (ENOSPC, EDQUOT) and a write was not made; what was stored is unchanged: HTTP 507.
    A BadRequest subclass only so that `to_http` answers it with its message and status, not a bare 500."""

    status_code = 507


class UpstreamError(BadRequest):
    """A server UMind depends on (the PACS behind `--studies http://...`) failed or cannot be reached: HTTP 502.
    A BadRequest subclass only so that `to_http` answers it with its message and status, not a bare 500."""

    status_code = 502


class UpstreamTimeout(UpstreamError):
    """That server did not answer in time: HTTP 504 (every call to it has a timeout, so no request hangs)."""

    status_code = 504


def _client_errors() -> tuple[type[BaseException], ...]:
    from umind_core.frames import FrameSpecError
    from umind_core.imageio import ImageReadError
    from umind_core.inference.predictor import PredictorError
    from umind_core.prompts import PromptError

    from ..conf import ConfError
    from umind_core.versions import VersionError

    return (BadRequest, FrameSpecError, ImageReadError, PredictorError, PromptError, ConfError, VersionError)


def to_http(exc: BaseException, what: str) -> HTTPException:
    """The HTTPException for `exc` raised while doing `what`: 4xx for the caller's mistakes, 500 otherwise."""
    if isinstance(exc, HTTPException):
        return exc
    if isinstance(exc, _client_errors()):
        status = getattr(exc, "status_code", 400)
        return HTTPException(status_code=status, detail=f"{what}: {exc}")
    if isinstance(exc, RecursionError):  # a value nested too deep for Python's json, wherever it was parsed
        return HTTPException(status_code=400, detail=f"{what}: a JSON value in the request is nested too deep")
    logger.exception(f"{what} failed")
    return HTTPException(status_code=500, detail=f"{what} failed: {type(exc).__name__}")


def check_params_json(params: object, where: str, field: str = "params", stored: bool = False) -> None:
    """Raise HTTP 400 unless the form field `params` (or `field`) is empty or a JSON object, nested no deeper than
    `json_limits` allows (and, when the server keeps it, `stored`, within the stored-value caps)."""
    from .json_limits import check_stored, parse_request_json

    if params is None or params == "":
        return
    if not isinstance(params, str):
        return
    try:
        value = parse_request_json(params, field)
        if stored:
            check_stored(value, field)
    except BadRequest as exc:
        raise HTTPException(status_code=400, detail=f"{where}: {exc}") from None
    if not isinstance(value, dict):
        raise HTTPException(status_code=400,
                            detail=f"{where}: {field} must be a JSON object, got {type(value).__name__}")


def _guard(module, name: str, where: str, field: str = "params", stored: bool = False) -> None:
    original = getattr(module, name)
    if getattr(original, "_umind_guarded", False):
        return

    @functools.wraps(original)
    def wrapper(*args, **kwargs):
        pos = _field_position(original, field)
        params = kwargs.get(field, args[pos] if len(args) > pos else None)
        check_params_json(params, where, field, stored)
        return original(*args, **kwargs)

    wrapper._umind_guarded = True  # type: ignore[attr-defined]
    setattr(module, name, wrapper)


@functools.lru_cache(maxsize=None)
def _field_position(func, field: str) -> int:
    import inspect

    return list(inspect.signature(func).parameters).index(field)


def guard_params_json() -> None:
    """Make malformed `params`/`info` JSON a 400 on /infer/{model} and the datastore's upload and info endpoints."""
    try:
        from monailabel.endpoints import datastore, infer
    except ImportError:  # an app built without the server (tests, scripts)
        return
    _guard(infer, "run_inference", "infer")
    _guard(datastore, "save_label", "save label", stored=True)
    _guard(datastore, "add_image", "upload image", stored=True)
    _guard(datastore, "update_image_info", "update image info", "info", stored=True)
    _guard(datastore, "update_label_info", "update label info", "info", stored=True)
