"""POST /auth/token answers a failed login with 401, 503 or 502, not MONAI Label's bare 500.

The stock endpoint forwards the user's name and password to the realm's token endpoint and calls
`raise_for_status()`, so a wrong password (the realm's 401) left the server as "Internal Server Error".
The replacement route keeps the stock behaviour for a good login and translates the realm's answers: a refused
login is 401; a realm that cannot be reached is 503, the status a request with a token gets when the realm's key
cannot be fetched (wall/auth.py), so a client sees one status for one fault; a realm that answers with another
error is 502 (the realm answered, wrongly).
"""

from __future__ import annotations

from fastapi import HTTPException

from .routes import replace_route, same_signature

__all__ = ["install_login_route"]


def _login_like(original):
    async def access_token(**kwargs):
        import requests

        try:
            return await original(**kwargs)
        except requests.HTTPError as exc:
            status = exc.response.status_code if exc.response is not None else None
            if status in (400, 401, 403):
                raise HTTPException(401, "login failed: wrong user name or password",
                                    headers={"WWW-Authenticate": "Bearer"}) from None
            raise HTTPException(502, f"login failed: the identity provider answered {status}") from None
        except requests.RequestException as exc:
            raise HTTPException(503, f"login failed: the identity provider (auth realm) cannot be reached "
                                     f"({type(exc).__name__}); try again later") from None

    return same_signature(access_token, original)


def install_login_route(app) -> bool:
    return replace_route(app, "/auth/token", "POST", _login_like)
