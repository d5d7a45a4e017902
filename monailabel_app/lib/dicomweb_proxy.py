"""OHIF's DICOMweb proxy (`/proxy/dicom/{qido,wado,stow}/...`) kept inside the server's wall.

MONAI Label 0.8.5's proxy joins the client's path onto the PACS URL as given. Starlette decodes `%2F` and `%2E`
before the route sees the path, and requests then resolves the dot segments, so `/proxy/dicom/qido/..%2F..%2F
tools/execute-script` reaches the PACS's whole REST API (on Orthanc: any study's deletion, or a Lua script) with
the server's credentials. It also forwards every request header, drops the query string (a QIDO search
returns everything), has no timeout (a PACS that does not answer hangs the request) and, with a studies folder
instead of a PACS, sends requests to a "URL" made from a local path.

Here the proxy answers only when the studies are a PACS, only GET (reading; UMind writes nothing to the PACS),
only DICOMweb resource paths (`studies/...`, `series...`, `instances...`: segments of letters, digits, dots
that are not `.`/`..`, `-` and `_`), forwards the query string and the Accept header, and has a connect and a
read timeout (MONAI Label's `MONAI_LABEL_DICOMWEB_PROXY_TIMEOUT`, 30 s): bad paths are a 400, a PACS that is
down or slow a 502/504, each naming the path.
"""

from __future__ import annotations

import logging
import re

from fastapi import HTTPException
from fastapi.responses import Response
from starlette.concurrency import run_in_threadpool

from .wall.routes import replace_route, same_signature

__all__ = ["install_dicomweb_proxy", "check_dicomweb_path"]

logger = logging.getLogger(__name__)

_SEGMENT = re.compile(r"[A-Za-z0-9_\-][A-Za-z0-9_.\-]*")
_ROOTS = ("studies", "series", "instances")
_OPS = ("qido", "wado", "stow", "")


def check_dicomweb_path(path: str) -> str:
    """`path` when it is a DICOMweb resource path, else HTTPException 400 quoting it."""
    parts = path.split("/") if path else []
    if not parts or parts[0] not in _ROOTS or len(path) > 1000 or \
            any(not _SEGMENT.fullmatch(p) or p in (".", "..") for p in parts):
        shown = path if len(path) <= 120 else path[:117] + "..."
        raise HTTPException(400, f"DICOMweb proxy: {shown!r} is not a DICOMweb resource path (studies/..., "
                                 "series..., instances...; no dot segments, separators or escapes)")
    return path


def _prefix(op: str, path: str) -> str:
    from monailabel.config import settings

    if op == "qido" and path.endswith("metadata"):  # as the stock proxy: some OHIF versions ask QIDO for it
        op = "wado"
    return {"wado": settings.MONAI_LABEL_WADO_PREFIX, "qido": settings.MONAI_LABEL_QIDO_PREFIX,
            "stow": settings.MONAI_LABEL_STOW_PREFIX}.get(op, "") or ""


def _endpoint(pacs_url: str | None, op: str, session_factory):
    async def proxy(request, path: str, user=None):
        import requests

        if pacs_url is None:
            raise HTTPException(404, "DICOMweb proxy: this server reads a studies folder, not a PACS")
        if request.method != "GET":
            raise HTTPException(405, "DICOMweb proxy: read-only (GET); UMind writes nothing to the PACS")
        check_dicomweb_path(path)
        prefix = _prefix(op, path)
        url = f"{pacs_url}/{prefix + '/' if prefix else ''}{path}"
        headers = {k: v for k, v in request.headers.items() if k.lower() == "accept"}
        try:
            resp = await run_in_threadpool(session_factory().get, url, params=list(request.query_params.multi_items()),
                                           headers=headers)
        except requests.Timeout:
            raise HTTPException(504, f"DICOMweb proxy: the PACS did not answer in time for {path!r}") from None
        except requests.ConnectionError:
            raise HTTPException(502, f"DICOMweb proxy: the PACS cannot be reached for {path!r}") from None
        keep = {k: v for k, v in resp.headers.items() if k.lower() in ("content-type", "content-location")}
        return Response(content=resp.content, status_code=resp.status_code, headers=keep)

    return proxy


def install_dicomweb_proxy(app, pacs_url: str | None) -> None:
    """Swap the stock proxy routes (GET and POST of each) for the guarded one; same paths and auth dependency."""
    from .pacs import pacs_session

    for op in _OPS:
        suffix = f"/dicom/{op + '/' if op else ''}{{path:path}}"
        for method in ("GET", "POST"):
            replace_route(app, suffix, method,
                          lambda original, op=op: same_signature(_endpoint(pacs_url, op, pacs_session), original))
