"""MONAI Label's token check made to work: RS256 pinned, an unreachable realm a 503 instead of a bare 500.

MONAI Label 0.8.5 calls `jwt.decode(token, key, options=...)` without `algorithms`, which PyJWT 2 refuses
for every token ("It is required that you pass in a value for the algorithms argument"), so with
`MONAI_LABEL_AUTH_ENABLE=true` no request could ever authenticate. The auth module's `jwt` is replaced by a
view of PyJWT whose `decode` accepts only RS256 (what a Keycloak realm key signs; it also shuts out
'none' and HS256-with-the-public-key tokens). `from_token` is wrapped so that a realm that cannot be
reached answers 503 with a message. Both are module attributes the stock code looks up per request.
"""

from __future__ import annotations

import functools
import logging

from fastapi import HTTPException

__all__ = ["install_auth_fixes", "ALGORITHMS"]

logger = logging.getLogger(__name__)

ALGORITHMS = ["RS256"]


class _PinnedJWT:
    """PyJWT with `decode` pinned to ALGORITHMS; everything else is PyJWT's own."""

    def __init__(self, jwt_module):
        self._jwt = jwt_module

    def __getattr__(self, name):
        return getattr(self._jwt, name)

    def decode(self, token, key=None, *args, **kwargs):
        kwargs["algorithms"] = ALGORITHMS
        return self._jwt.decode(token, key, *args, **kwargs)


def _wrap_from_token(original):
    @functools.wraps(original)
    def from_token(token):
        import requests

        try:
            return original(token)
        except requests.RequestException as exc:
            logger.error(f"umind: cannot fetch the realm's public key: {exc}")
            raise HTTPException(503, "the identity provider (auth realm) cannot be reached; try again later") \
                from None

    from_token._umind_auth = True  # type: ignore[attr-defined]
    return from_token


def install_auth_fixes() -> None:
    try:
        import jwt
        from monailabel.endpoints.user import auth
    except ImportError:
        return
    if not isinstance(auth.jwt, _PinnedJWT):
        auth.jwt = _PinnedJWT(jwt)
    if not getattr(auth.from_token, "_umind_auth", False):
        auth.from_token = _wrap_from_token(auth.from_token)
