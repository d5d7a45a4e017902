"""MONAI Label's token check made to work and made strict: RS256 pinned, tokens checked as Keycloak's adapters
check them, every refusal a 401 with a message, an unreachable realm a 503 instead of a bare 500.

MONAI Label 0.8.5 calls `jwt.decode(token, key, options=...)` without `algorithms`, which PyJWT 2 refuses
for every token ("It is required that you pass in a value for the algorithms argument"), so with
`MONAI_LABEL_AUTH_ENABLE=true` no request could ever authenticate. The auth module's `jwt` is replaced by a
view of PyJWT whose `decode` accepts only RS256 (what a Keycloak realm key signs; it also shuts out
'none' and HS256-with-the-public-key tokens).

The stock check stops at the signature, but every client of a Keycloak realm shares the realm's signing key,
so a signature only says "some client of some realm with this key": a token another application of the
realm obtained (or one from another realm sharing the key) would pass. So `decode` also checks what
Keycloak's own adapters check: `iss` is the configured realm (`MONAI_LABEL_AUTH_REALM_URI`, trailing slashes
aside), the token was issued to (`azp`) or for (`aud`, a string or a list) this server's client
(`MONAI_LABEL_AUTH_CLIENT_ID`), `typ`, when present, is "Bearer" (not an ID or refresh token; compared
without case, as Keycloak's TokenVerifier does), and the claims the stock code reads have the types it
assumes: the roles path (`MONAI_LABEL_AUTH_TOKEN_ROLES`, `realm_access#roles`) must lead through objects to
a list of strings, the user name must be a string (a null `realm_access` or a string `roles` used to crash
the stock code into a bare 500).

`from_token` is wrapped so that every refused token answers 401 with a JSON `detail` naming the problem
(never the token, never a server path) and `WWW-Authenticate: Bearer error="invalid_token"`, and a realm
that cannot be reached answers 503. `jwt` and `from_token` are module attributes the stock code looks up per
request (`get_current_user`, which RBAC and /auth/token/valid depend on, calls `from_token`).
"""

from __future__ import annotations

import functools
import logging

from fastapi import HTTPException

__all__ = ["install_auth_fixes", "ALGORITHMS", "check_claims", "ClaimError"]

try:
    from jwt import InvalidTokenError
except ImportError:  # no PyJWT: install_auth_fixes does nothing
    InvalidTokenError = ValueError  # type: ignore[misc,assignment]

logger = logging.getLogger(__name__)

ALGORITHMS = ["RS256"]


class ClaimError(InvalidTokenError):
    """A verified token whose claims are not for this server; the message is fit for the client."""


def _norm(uri) -> str:
    return uri.rstrip("/") if isinstance(uri, str) else ""


def _check_issuer_and_client(claims: dict, realm_uri: str, client_id: str) -> None:
    iss = claims.get("iss")
    if not isinstance(iss, str) or not iss:
        raise ClaimError("the token names no issuer (iss)")
    if _norm(iss) != _norm(realm_uri):
        raise ClaimError("the token was not issued by this server's auth realm (iss)")
    typ = claims.get("typ")
    if typ is not None and (not isinstance(typ, str) or typ.lower() != "bearer"):
        raise ClaimError("the token is not an access token (typ is not Bearer)")
    azp, aud = claims.get("azp"), claims.get("aud")
    if azp is not None and not isinstance(azp, str):
        raise ClaimError("the token's authorized party (azp) is not a string")
    if isinstance(aud, str):
        aud = [aud]
    elif aud is None:
        aud = []
    elif not isinstance(aud, list) or not all(isinstance(a, str) for a in aud):
        raise ClaimError("the token's audience (aud) is not a string or a list of strings")
    if azp != client_id and client_id not in aud:
        raise ClaimError("the token was issued to another client (neither azp nor aud is this server's client)")


def _check_user_claims(claims: dict, settings) -> None:
    username = claims.get(settings.MONAI_LABEL_AUTH_TOKEN_USERNAME)
    if not isinstance(username, str) or not username:
        raise ClaimError(f"the token's user name claim ({settings.MONAI_LABEL_AUTH_TOKEN_USERNAME}) "
                         "is missing or not a string")
    for key in (settings.MONAI_LABEL_AUTH_TOKEN_EMAIL, settings.MONAI_LABEL_AUTH_TOKEN_NAME):
        if claims.get(key) is not None and not isinstance(claims.get(key), str):
            raise ClaimError(f"the token's claim {key} is not a string")
    path = settings.MONAI_LABEL_AUTH_TOKEN_ROLES.split("#")
    node = claims
    for i, key in enumerate(path[:-1]):
        node = node.get(key)
        if not isinstance(node, dict):
            where = "#".join(path[:i + 1])
            raise ClaimError(f"the token's roles claim {where} is missing or not an object")
    roles = node.get(path[-1])
    if not isinstance(roles, list) or not all(isinstance(r, str) for r in roles):
        raise ClaimError(f"the token's roles claim {'#'.join(path)} is missing or not a list of strings")


def _check_times(claims: dict) -> None:
    """Keycloak's adapters require `exp`; PyJWT checks it only when present and takes a numeric string through
    int(), so a token without `exp` (or with "9999999999") never expired. `exp` must be a JSON number; `nbf` and
    `iat`, when present, too (PyJWT has checked their values against the clock already)."""
    import math

    def number(value) -> bool:
        return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)

    if "exp" not in claims:
        raise ClaimError("the token has no expiry (exp); tokens without one are refused")
    for key in ("exp", "nbf", "iat"):
        if key in claims and not number(claims[key]):
            raise ClaimError(f"the token's {key} is not a number of seconds")


def check_claims(claims, settings=None) -> None:
    """Raise ClaimError (an InvalidTokenError) unless the verified `claims` are for this server."""
    if settings is None:
        from monailabel.config import settings
    if not isinstance(claims, dict):
        raise ClaimError("the token's payload is not a JSON object")
    _check_times(claims)
    _check_issuer_and_client(claims, settings.MONAI_LABEL_AUTH_REALM_URI, settings.MONAI_LABEL_AUTH_CLIENT_ID)
    _check_user_claims(claims, settings)


class _PinnedJWT:
    """PyJWT with `decode` pinned to ALGORITHMS and followed by `check_claims`; everything else is PyJWT's."""

    def __init__(self, jwt_module):
        self._jwt = jwt_module

    def __getattr__(self, name):
        return getattr(self._jwt, name)

    def decode(self, token, key=None, *args, **kwargs):
        kwargs["algorithms"] = ALGORITHMS
        claims = self._jwt.decode(token, key, *args, **kwargs)
        check_claims(claims)
        return claims


def _message(exc) -> str:
    """A client-fit message for a refused token: names the problem, never echoes the token."""
    import jwt

    if isinstance(exc, ClaimError):
        return str(exc)
    for cls, text in ((jwt.ExpiredSignatureError, "the token has expired; log in again"),
                      (jwt.InvalidSignatureError, "the token's signature does not verify with the auth realm's key"),
                      (jwt.InvalidAlgorithmError, "the token is not signed with RS256"),
                      (jwt.ImmatureSignatureError, "the token is not valid yet (nbf/iat in the future)"),
                      (jwt.DecodeError, "the token is not a well-formed JWT")):
        if isinstance(exc, cls):
            return text
    return "the token is not valid"


def _unauthorized(message: str) -> HTTPException:
    return HTTPException(401, message, headers={"WWW-Authenticate": 'Bearer error="invalid_token"'})


def _wrap_from_token(original):
    @functools.wraps(original)
    def from_token(token):
        import requests
        from pydantic import ValidationError

        try:
            return original(token)
        except requests.RequestException as exc:
            logger.error(f"umind: cannot fetch the realm's public key: {exc}")
            raise HTTPException(503, "the identity provider (auth realm) cannot be reached; try again later") \
                from None
        except InvalidTokenError as exc:
            logger.warning(f"umind: token refused: {_message(exc)} ({type(exc).__name__})")
            raise _unauthorized(_message(exc)) from None
        except ValidationError:  # a claim type check_claims did not foresee: still the token's fault
            logger.warning("umind: token refused: its claims do not make a user")
            raise _unauthorized("the token's claims do not make a valid user") from None

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
