"""This server's own log, in its workdir, and `/logs` serving only that, scrubbed of server paths.

MONAI Label 0.8.5 logs to `<app dir>/logs/app.log` and `/logs` serves that file: every server started from
the same checkout writes there, so one server's `/logs` showed another's requests, ids and paths. Here the
server also logs to `<workdir>/logs/server.log` (rotated), `/logs/` reads the tail of that file as plain text
(the stock HTML view pulls scripts from public CDNs) with server paths replaced by placeholders
(`edge.scrub`), and `/logs/gpu` answers 404 with a message where there is no `nvidia-smi` instead of a bare
500. Both routes keep MONAI Label's admin-only role check.
"""

from __future__ import annotations

import logging
import logging.handlers
from collections import deque
from pathlib import Path

from fastapi import HTTPException
from fastapi.responses import Response

from .edge import scrub
from .routes import replace_route, same_signature

__all__ = ["install_server_log", "LOG_NAME", "MAX_LINES"]

LOG_NAME = "server.log"
MAX_LINES = 10_000
_FORMAT = "[%(asctime)s] [%(process)s] [%(threadName)s] [%(levelname)s] (%(name)s:%(lineno)d) - %(message)s"
_state: dict[str, Path] = {}


def _handler(path: Path) -> logging.Handler:
    handler = logging.handlers.RotatingFileHandler(path, maxBytes=10 * 1024 * 1024, backupCount=3,
                                                   encoding="utf-8")
    handler.setFormatter(logging.Formatter(_FORMAT))
    handler.setLevel(logging.INFO)
    handler._umind_server_log = True  # type: ignore[attr-defined]
    return handler


def get_logs(_stock_path, lines, html, text, refresh):
    """The stock helper's signature; the path it is given (the shared app.log) is ignored."""
    path = _state.get("path")
    if path is None or not path.is_file():
        raise HTTPException(404, "this server has not written a log yet")
    count = MAX_LINES if not lines or lines <= 0 else min(int(lines), MAX_LINES)
    with open(path, encoding="utf-8", errors="replace") as fh:
        tail = deque(fh, count)
    return Response(content=scrub("".join(tail)), media_type="text/plain")


def _gpu_route(original):
    async def gpu_info(**kwargs):
        try:
            return await original(**kwargs)
        except OSError:
            raise HTTPException(404, "GPU information is not available: this server has no nvidia-smi") from None

    return same_signature(gpu_info, original)


def install_server_log(workdir, app) -> Path:
    """Log to <workdir>/logs/server.log and serve only that at /logs (idempotent)."""
    folder = Path(workdir) / "logs"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / LOG_NAME
    root = logging.getLogger()
    if not any(getattr(h, "_umind_server_log", False) for h in root.handlers):
        root.addHandler(_handler(path))
    _state["path"] = path
    try:
        from monailabel.endpoints import logs as logs_module
    except ImportError:
        return path
    logs_module.get_logs = get_logs
    if app is not None:
        replace_route(app, "/logs/gpu", "GET", _gpu_route)
    return path
