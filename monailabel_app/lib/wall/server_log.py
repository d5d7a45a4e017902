"""This server's own log, in its workdir, and `/logs` serving only that, scrubbed of server paths.

MONAI Label 0.8.5 logs to `<app dir>/logs/app.log` and `/logs` serves that file: every server started from
the same checkout writes there, so one server's `/logs` showed another's requests, ids and paths. Here the
server also logs to `<workdir>/logs/server.log` (rotated), `/logs/` reads the tail of that file as plain text
(the stock HTML view pulls scripts from public CDNs) with server paths replaced by placeholders
(`edge.scrub`), and `/logs/gpu` answers 404 with a message where there is no `nvidia-smi` instead of a bare
500. Both routes keep MONAI Label's admin-only role check.

Records are written through `EscapingFormatter`: MONAI Label's stock endpoints log a request (its id, its
params) before any check of the app's runs, so an id with a newline wrote a forged record into what `/logs`
serves, and ESC sequences reached a reader's terminal raw. Every control and format character of a message is
written as an escape (`\\n`, `\\x1b`, `\\u202e`), and a traceback's lines are indented under their record, so
no line a client influenced can start a record of its own. `/logs` replaces every absolute path on this machine
(the checkout, Python's install, the studies) with a placeholder (`scrub_paths`).
"""

from __future__ import annotations

import logging
import logging.handlers
import os
import re
import unicodedata
from collections import deque
from pathlib import Path

from fastapi import HTTPException
from fastapi.responses import Response

from .edge import scrub
from .routes import replace_route, same_signature

__all__ = ["install_server_log", "LOG_NAME", "MAX_LINES", "EscapingFormatter", "escape_log_text", "scrub_paths"]

LOG_NAME = "server.log"
MAX_LINES = 10_000
_FORMAT = "[%(asctime)s] [%(process)s] [%(threadName)s] [%(levelname)s] (%(name)s:%(lineno)d) - %(message)s"
_state: dict[str, Path] = {}
_NOT_PLAIN = re.compile(r"[^\x20-\x7e]")
_UNSAFE = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs", "Co", "Cn"})


def _escaped(match: re.Match) -> str:
    ch = match.group(0)
    if ch != "\t" and unicodedata.category(ch) in _UNSAFE:
        code = ord(ch)
        return {"\n": "\\n", "\r": "\\r"}.get(ch, f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")
    return ch


def escape_log_text(text: str) -> str:
    """`text` with every control and format character written as an escape."""
    return _NOT_PLAIN.sub(_escaped, text)


class EscapingFormatter(logging.Formatter):
    """The record's message on one line, escaped; its traceback (if any) escaped line by line and indented."""

    def format(self, record: logging.LogRecord) -> str:
        safe = logging.makeLogRecord(record.__dict__)
        safe.msg, safe.args = escape_log_text(record.getMessage()), None
        safe.exc_info, safe.exc_text, safe.stack_info = None, None, None
        head = super().format(safe)
        extra = []
        if record.exc_info:
            extra.append(self.formatException(record.exc_info))
        elif record.exc_text:
            extra.append(record.exc_text)
        if record.stack_info:
            extra.append(self.formatStack(record.stack_info))
        lines = [f"    | {escape_log_text(line)}" for block in extra for line in block.splitlines()]
        return "\n".join([head, *lines])


def scrub_paths(text: str) -> str:
    """`text` with the known server folders named (`edge.scrub`) and every other absolute path that starts with a
    top-level folder of this machine replaced by `<path>`."""
    text = scrub(text)
    roots = _state.get("top") or _top_level()
    return roots.sub("<path>", text) if roots is not None else text


def _top_level():
    try:
        names = sorted((n for n in os.listdir("/") if n), key=len, reverse=True)
    except OSError:
        return None
    pattern = re.compile(r"(?<![\w.<>/-])/(?:" + "|".join(re.escape(n) for n in names) + r")(?:/[^\s'\",:;()\[\]]*)?"
                         r"(?=[\s'\",:;()\[\]]|$)")
    _state["top"] = pattern  # type: ignore[assignment]
    return pattern


def _handler(path: Path) -> logging.Handler:
    handler = logging.handlers.RotatingFileHandler(path, maxBytes=10 * 1024 * 1024, backupCount=3,
                                                   encoding="utf-8")
    handler.setFormatter(EscapingFormatter(_FORMAT))
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
    return Response(content=scrub_paths("".join(tail)), media_type="text/plain")


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
