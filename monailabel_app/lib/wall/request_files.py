"""Nothing of a request stays on disk: its temp files live in its own folder, removed on every path; bodies are capped.

MONAI Label 0.8.5 copies every upload (`PUT /datastore/image`, `PUT /datastore/label`, `POST /infer/{model}`)
to `tempfile.NamedTemporaryFile(suffix=<client's file extensions>).name` and removes it in a background task
that runs only after a successful response: every refused upload left its whole body in the temp dir (300 MB
a request), and `GET /datastore/dataset` left a zip of the whole dataset there on every call.

- `request_scratch()` gives a request a private folder; while it is active, the stock endpoint modules'
  `tempfile.NamedTemporaryFile` (replaced by `_ScopedTempfile`) creates files there, with a suffix cut to
  what a file extension can be. The folder is removed when the request ends, however it ends.
- `dataset_archive_response` builds the dataset zip in such a folder and removes it after the reply is sent.
- `BodyCap` (ASGI) refuses a request body over the cap (conf `max_upload_mb`) with 413: from Content-Length
  before reading, and while it streams when the length is absent or wrong.
"""

from __future__ import annotations

import contextlib
import contextvars
import errno
import json
import logging
import re
import shutil
import tempfile
from pathlib import Path

__all__ = ["request_scratch", "current_scratch", "install_scoped_tempfile", "dataset_archive_response",
           "BodyCap", "install_body_cap"]

logger = logging.getLogger(__name__)

_SCRATCH: contextvars.ContextVar[str | None] = contextvars.ContextVar("umind_request_scratch", default=None)
_SUFFIX = re.compile(r"^(\.[A-Za-z0-9]{1,10}){1,3}$")
#: the stock modules whose `tempfile` is scoped to the request
_MODULES = ("monailabel.endpoints.datastore", "monailabel.endpoints.infer", "monailabel.datastore.local")


def current_scratch() -> Path | None:
    """The active request's folder (None outside `request_scratch`)."""
    value = _SCRATCH.get()
    return Path(value) if value else None


@contextlib.contextmanager
def request_scratch(keep: bool = False):
    """A private folder for this request's temp files, removed on exit unless `keep` (the caller removes it)."""
    folder = tempfile.mkdtemp(prefix="umind-request-")
    token = _SCRATCH.set(folder)
    ok = False
    try:
        yield Path(folder)
        ok = True
    finally:
        _SCRATCH.reset(token)
        if not (keep and ok):
            shutil.rmtree(folder, ignore_errors=True)


class _ScopedTempfile:
    """The `tempfile` module as the stock endpoints see it: named temp files go into the request's folder."""

    def __getattr__(self, name):
        return getattr(tempfile, name)

    @staticmethod
    def NamedTemporaryFile(*args, suffix=None, dir=None, **kwargs):  # noqa: N802 (the stdlib's name)
        if suffix is not None and not _SUFFIX.match(str(suffix)):
            suffix = ""  # a client's file name decides nothing here: content is sniffed (lib/wall/uploads.py)
        return tempfile.NamedTemporaryFile(*args, suffix=suffix, dir=dir or _SCRATCH.get(), **kwargs)


def install_scoped_tempfile() -> None:
    import importlib

    for name in _MODULES:
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        if not isinstance(getattr(module, "tempfile", None), _ScopedTempfile):
            module.tempfile = _ScopedTempfile()


def dataset_archive_response(datastore, limit_cases):
    """GET /datastore/dataset: the zip built in a request folder that is removed once the reply is sent."""
    from fastapi import HTTPException
    from fastapi.responses import FileResponse
    from starlette.background import BackgroundTask

    from .errors import InsufficientStorage

    if not datastore.datalist():
        raise HTTPException(404, "download dataset: no image has a final label yet; nothing to export")
    with request_scratch(keep=True) as folder:
        try:
            path = datastore.get_dataset_archive(limit_cases)
        except BaseException as exc:  # nothing of a failed export stays
            shutil.rmtree(folder, ignore_errors=True)
            if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
                raise InsufficientStorage("download dataset: the server's disk is full; the archive cannot be "
                                          "built") from None
            raise
    return FileResponse(path, media_type="application/zip", filename="dataset.zip",
                        background=BackgroundTask(shutil.rmtree, folder, ignore_errors=True))


class BodyCap:
    """ASGI middleware: 413 for a body over `limit` bytes (POST, PUT, PATCH), read no further than the cap."""

    def __init__(self, app, limit: int):
        self.app, self.limit = app, int(limit)

    async def _refuse(self, send, size: str) -> None:
        body = json.dumps({"detail": f"the request body is {size}, over the server's cap of "
                                     f"{self.limit // (1024 * 1024):,} MiB (conf max_upload_mb)"}).encode()
        await send({"type": "http.response.start", "status": 413,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                                (b"connection", b"close")]})
        await send({"type": "http.response.body", "body": body})

    async def __call__(self, scope, receive, send):
        if scope.get("type") != "http" or scope.get("method") not in ("POST", "PUT", "PATCH"):
            return await self.app(scope, receive, send)
        length = dict(scope.get("headers") or []).get(b"content-length")
        if length is not None and (not length.strip().isdigit() or int(length) > self.limit):
            return await self._refuse(send, f"{int(length):,} bytes" if length.strip().isdigit() else "of no size")
        state = {"seen": 0, "over": False, "started": False}

        async def capped_receive():
            if state["over"]:
                return {"type": "http.disconnect"}
            message = await receive()
            if message.get("type") == "http.request":
                state["seen"] += len(message.get("body", b""))
                if state["seen"] > self.limit:
                    state["over"] = True
                    return {"type": "http.disconnect"}
            return message

        async def guarded_send(message):
            if state["over"] and not state["started"]:
                return  # the app's answer to a cut-off body is replaced by the 413 below
            if message.get("type") == "http.response.start":
                state["started"] = True
            await send(message)

        try:
            await self.app(scope, capped_receive, guarded_send)
        except Exception:
            if not state["over"]:
                raise
        if state["over"] and not state["started"]:
            await self._refuse(send, f"more than {self.limit:,} bytes")


def install_body_cap(app, limit_bytes: int) -> bool:
    """Put BodyCap outside the running app's middleware stack (idempotent)."""
    stack = getattr(app, "middleware_stack", None)
    if stack is None:
        stack = app.middleware_stack = app.build_middleware_stack()
    if isinstance(stack, BodyCap):
        stack.limit = int(limit_bytes)
        return True
    app.middleware_stack = BodyCap(stack, limit_bytes)
    return True


def install_dataset_export() -> None:
    """GET /datastore/dataset through `dataset_archive_response` (idempotent)."""
    try:
        from monailabel.endpoints import datastore as datastore_module
        from monailabel.interfaces.utils.app import app_instance
    except ImportError:
        return
    if getattr(datastore_module.download_dataset, "_umind_export", False):
        return
    from .edge import http_error

    def download_dataset(limit_cases=None):
        try:
            return dataset_archive_response(app_instance().datastore(), limit_cases)
        except Exception as exc:
            raise http_error(exc, "download dataset") from exc

    download_dataset._umind_edge = download_dataset._umind_export = True  # type: ignore[attr-defined]
    datastore_module.download_dataset = download_dataset
