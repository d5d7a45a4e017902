"""No cross-origin requests unless the operator lists origins (conf key `cors_origins`).

With `MONAI_LABEL_CORS_ORIGINS` empty, MONAI Label 0.8.5 allows every origin with credentials, so any web
page open in a browser on the annotator's machine could drive the server. Setting that variable is no way
out in 0.8.5: `start_server` crashes on it (it JSON-dumps pydantic URL objects), and the URLs it would hold
end in '/', which no browser Origin does. So the app re-initialises the CORS middleware itself with exactly
the conf's `cors_origins` (none by default). Same-origin use (the OHIF viewer the server itself serves,
Slicer, scripts) needs no CORS at all.
"""

from __future__ import annotations

import logging

__all__ = ["restrict_cors"]

logger = logging.getLogger(__name__)


def restrict_cors(app, origins: tuple[str, ...] = ()) -> bool:
    """True when the middleware was found and now allows exactly `origins` (none by default)."""
    from starlette.middleware.cors import CORSMiddleware

    node = getattr(app, "middleware_stack", None)
    while node is not None and not isinstance(node, CORSMiddleware):
        node = getattr(node, "app", None)
    if node is None:
        logger.warning("umind: CORS middleware not found; cannot restrict cross-origin requests")
        return False
    node.__init__(node.app, allow_origins=list(origins), allow_methods=("*",), allow_headers=("*",),
                  allow_credentials=bool(origins))
    logger.info(f"umind: CORS allows {', '.join(origins) if origins else 'no cross-origin requests'} "
                "(conf cors_origins)")
    return True
