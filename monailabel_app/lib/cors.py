"""No cross-origin requests unless the operator lists origins.

With `MONAI_LABEL_CORS_ORIGINS` empty, MONAI Label 0.8.5 allows every origin with credentials, so any web
page open in a browser on the annotator's machine could drive the server. When the setting is empty, the
app re-initialises the CORS middleware with no allowed origin; same-origin use (the OHIF viewer the server
itself serves, Slicer, scripts) needs no CORS at all. A non-empty setting is left exactly as configured.
"""

from __future__ import annotations

import logging

__all__ = ["restrict_cors"]

logger = logging.getLogger(__name__)


def restrict_cors(app, configured_origins) -> bool:
    """True when the middleware was found and (if nothing is configured) closed to other origins."""
    from starlette.middleware.cors import CORSMiddleware

    node = getattr(app, "middleware_stack", None)
    while node is not None and not isinstance(node, CORSMiddleware):
        node = getattr(node, "app", None)
    if node is None:
        logger.warning("umind: CORS middleware not found; cannot restrict cross-origin requests")
        return False
    if configured_origins:
        return True
    node.__init__(node.app, allow_origins=(), allow_methods=("*",), allow_headers=("*",), allow_credentials=False)
    logger.info("umind: CORS allows no cross-origin requests (set MONAI_LABEL_CORS_ORIGINS to allow some)")
    return True
