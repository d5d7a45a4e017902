"""The browser client at /viewer/: the built files of `web/` (scripts/web.sh), served as static files.

The files carry no data, so they are public (the page must load to show its login form); every call the page
makes goes through the same RBAC as any other client. Same origin as the API, so CORS stays closed. A strict
Content-Security-Policy keeps the page to its own scripts and server: no inline script, no other origin to
send a study to, no framing by another site; `wasm-unsafe-eval` lets the DICOM codecs (WebAssembly) compile.
"""

from __future__ import annotations

import logging
import mimetypes
import os
from pathlib import Path

from fastapi.responses import JSONResponse, RedirectResponse
from fastapi.staticfiles import StaticFiles

__all__ = ["CSP", "viewer_dir", "install_viewer"]

logger = logging.getLogger(__name__)

CSP = ("default-src 'self'; script-src 'self' 'wasm-unsafe-eval'; worker-src 'self' blob:; connect-src 'self'; "
       "img-src 'self' data: blob:; style-src 'self' 'unsafe-inline'; object-src 'none'; base-uri 'none'; "
       "frame-ancestors 'none'; form-action 'self'")
_HEADERS = {"Content-Security-Policy": CSP, "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer",
            "X-Frame-Options": "DENY"}
NOT_BUILT = "the browser viewer is not built: run scripts/web.sh (it needs node and npm)"


def viewer_dir() -> Path:
    """`$UMIND_VIEWER_DIR`, else the checkout's `web/dist` (where scripts/web.sh puts the build)."""
    env = os.environ.get("UMIND_VIEWER_DIR")
    return Path(env) if env else Path(__file__).resolve().parents[2] / "web" / "dist"


class _Static(StaticFiles):
    """Static files with the viewer's security headers; the page itself is never cached (a new build shows)."""

    async def get_response(self, path, scope):
        response = await super().get_response(path, scope)
        response.headers.update(_HEADERS)
        if response.media_type == "text/html":
            response.headers["Cache-Control"] = "no-cache"
        return response


class _Viewer:
    """The /viewer mount: the build's files once `dist/index.html` exists (a build made while the server runs shows
    without a restart), a 404 naming the command that builds it until then."""

    def __init__(self, dist: Path):
        self.dist = dist
        self.static: _Static | None = None

    async def __call__(self, scope, receive, send):
        if self.static is None:
            if not (self.dist / "index.html").is_file():
                await JSONResponse({"detail": NOT_BUILT}, status_code=404)(scope, receive, send)
                return
            self.static = _Static(directory=str(self.dist), html=True)
        await self.static(scope, receive, send)


def install_viewer(app, dist: Path | None = None) -> None:
    """Mount /viewer (idempotent)."""
    if any(getattr(r, "path", None) == "/viewer" for r in app.router.routes):
        return
    dist = dist or viewer_dir()
    mimetypes.add_type("application/wasm", ".wasm")
    mimetypes.add_type("text/javascript", ".js")
    if not (dist / "index.html").is_file():
        logger.warning(f"umind: {NOT_BUILT}")

    @app.get("/viewer", include_in_schema=False)
    def _viewer_root():
        return RedirectResponse("/viewer/")

    app.mount("/viewer", _Viewer(dist), name="umind-viewer")
    getattr(app.router, "_mark_routes_changed", lambda: None)()  # FastAPI caches the effective routes
