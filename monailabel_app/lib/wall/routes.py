"""Swap one of MONAI Label's routes for a wrapper with the same path, parameters and auth dependency.

Some stock endpoints cannot be fixed by wrapping a module-level helper because the route calls its own
body (POST /infer/{model} runs inference on the event loop; POST /auth/token lets the identity provider's
401 escape as a 500). `replace_route` finds the route (also inside routers that newer FastAPI includes
lazily), builds the same route class around `make(endpoint)` and tells FastAPI its routes changed.
`same_signature` gives a wrapper the original's signature, so FastAPI parses the request (and runs the
RBAC dependency) exactly as before.
"""

from __future__ import annotations

import inspect
import logging

__all__ = ["replace_route", "same_signature"]

logger = logging.getLogger(__name__)


def _find(router, suffix: str, method: str):
    from fastapi.routing import APIRoute

    for i, route in enumerate(router.routes):
        if isinstance(route, APIRoute) and route.path.endswith(suffix) and method in route.methods:
            return router, i, route
        inner = getattr(route, "original_router", None)  # newer FastAPI includes routers lazily
        if inner is not None:
            found = _find(inner, suffix, method)
            if found:
                return found
    return None


def same_signature(wrapper, original):
    wrapper.__signature__ = inspect.signature(original)
    wrapper.__doc__ = original.__doc__
    wrapper._umind_route = True
    return wrapper


def replace_route(app, suffix: str, method: str, make) -> bool:
    """Replace the route whose path ends with `suffix` (idempotent); False when there is none."""
    found = _find(app.router, suffix, method)
    if found is None:
        logger.warning(f"umind: route {method} ...{suffix} not found; left as it is")
        return False
    router, i, route = found
    if getattr(route.endpoint, "_umind_route", False):
        return True
    router.routes[i] = type(route)(route.path, make(route.endpoint), methods=[method], name=route.name,
                                   summary=route.summary, tags=route.tags, responses=route.responses,
                                   response_model=route.response_model)
    getattr(router, "_mark_routes_changed", lambda: None)()  # FastAPI caches the effective routes per version
    return True
