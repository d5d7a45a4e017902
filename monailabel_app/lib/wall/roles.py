"""Which role an action needs beyond the one its route checks: one rule for the app's own role checks.

The stock routes check one role each (RBAC in monailabel/endpoints), but some requests do more than their
route's role allows: `POST /infer/{model}` needs only `monailabel-user`, yet `save_label` in its params
writes a label (annotator work), and `PUT /datastore/image` with `replace` removes an image and its labels
(admin work). The route bodies call `require_role` for those; with auth off every caller holds every role,
as in MONAI Label itself.
"""

from __future__ import annotations

from fastapi import HTTPException

__all__ = ["require_role", "ANNOTATOR", "ADMIN"]


def _settings():
    from monailabel.config import settings

    return settings


ANNOTATOR = "annotator"
ADMIN = "admin"


def require_role(user, role: str, action: str) -> None:
    """403 naming the role unless `user` holds it ('annotator' or 'admin', as MONAI Label's settings name them)."""
    settings = _settings()
    if not settings.MONAI_LABEL_AUTH_ENABLE:
        return
    name = {ANNOTATOR: settings.MONAI_LABEL_AUTH_ROLE_ANNOTATOR, ADMIN: settings.MONAI_LABEL_AUTH_ROLE_ADMIN}[role]
    roles = getattr(user, "roles", None) or []
    if name not in roles and settings.MONAI_LABEL_AUTH_ROLE_ADMIN not in roles:
        raise HTTPException(403, f"role {name!r} is required to {action}")
