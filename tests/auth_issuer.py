"""A local stand-in for a Keycloak realm, for testing MONAI Label's auth end to end without a network.

MONAI Label (`MONAI_LABEL_AUTH_ENABLE=true`) fetches the realm's `public_key` from
`MONAI_LABEL_AUTH_REALM_URI`, the token endpoint from `{realm}/.well-known/openid-configuration`, and checks
RS256 tokens whose `realm_access.roles` hold monailabel-* roles. This issuer serves exactly that, with a
fresh RSA key per instance and a fixed user table (role sets as a Keycloak realm would give them through
composite roles), and can also sign tokens directly (expired ones, or ones for roles no user has).

Tokens carry what a Keycloak access token carries: `iss` (the realm URL this issuer serves), `azp` (the client
that asked: the token endpoint's `client_id`, one of CLIENTS), `aud` ("account") and `typ` ("Bearer").
`Issuer.token(..., **claims)` overrides any claim, or drops it with DROP, to make the tokens a realm shared
with other applications (or a hostile one) could produce: a foreign `iss`, another client's `azp`/`aud`,
`realm_access=None`, `roles` given as a string.
"""

from __future__ import annotations

import base64
import json
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

ADMIN, REVIEWER, ANNOTATOR, USER = ("monailabel-admin", "monailabel-reviewer", "monailabel-annotator",
                                    "monailabel-user")
#: user -> (password, realm roles)
USERS = {
    "alice": ("alice-pw", [ANNOTATOR, USER]),  # annotator: infer, save labels
    "root": ("root-pw", [ADMIN, REVIEWER, ANNOTATOR, USER]),  # admin: also train, roll back, delete
    "viewer": ("viewer-pw", [USER]),
}
CLIENT_ID = "monailabel-app"  # MONAI Label's default MONAI_LABEL_AUTH_CLIENT_ID
OTHER_CLIENT = "other-app"  # another application of the same realm (same signing key)
CLIENTS = (CLIENT_ID, OTHER_CLIENT)
DROP = object()  # a claim value that removes the claim from a token


def new_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


class Issuer:
    def __init__(self, realm: str = "umind"):
        self.key = new_key()
        self.realm = realm
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def realm_uri(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/realms/{self.realm}"

    def public_key_b64(self) -> str:
        der = self.key.public_key().public_bytes(serialization.Encoding.DER,
                                                 serialization.PublicFormat.SubjectPublicKeyInfo)
        return base64.b64encode(der).decode()

    def token(self, username: str, roles, ttl: float = 300.0, key=None, client_id: str = CLIENT_ID,
              **claims) -> str:
        """An access token as this realm would issue it to `client_id`; `claims` override (DROP removes)."""
        now = int(time.time())
        body = {"iss": self.realm_uri, "azp": client_id, "aud": "account", "typ": "Bearer", "sub": username,
                "preferred_username": username, "email": f"{username}@example.org", "name": username,
                "iat": now, "exp": now + int(ttl), "realm_access": {"roles": roles}}
        body.update(claims)
        body = {k: v for k, v in body.items() if v is not DROP}
        return jwt.encode(body, key or self.key, algorithm="RS256")

    def start(self) -> "Issuer":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def _handler(self):
        issuer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def _json(self, status: int, body: dict) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                base = f"/realms/{issuer.realm}"
                if self.path == base:
                    return self._json(200, {"realm": issuer.realm, "public_key": issuer.public_key_b64()})
                if self.path == base + "/.well-known/openid-configuration":
                    return self._json(200, {"issuer": issuer.realm_uri, "token_endpoint":
                                            issuer.realm_uri + "/protocol/openid-connect/token"})
                return self._json(404, {"error": "not found"})

            def do_POST(self):
                if self.path != f"/realms/{issuer.realm}/protocol/openid-connect/token":
                    return self._json(404, {"error": "not found"})
                length = int(self.headers.get("Content-Length", 0))
                form = dict(urllib.parse.parse_qsl(self.rfile.read(length).decode()))
                user = USERS.get(form.get("username", ""))
                if form.get("client_id") not in CLIENTS:
                    return self._json(401, {"error": "invalid_client"})
                if form.get("grant_type") != "password" or user is None or user[0] != form.get("password"):
                    return self._json(401, {"error": "invalid_grant"})
                token = issuer.token(form["username"], user[1], client_id=form["client_id"])
                return self._json(200, {"access_token": token,
                                        "token_type": "Bearer", "expires_in": 300})

        return Handler
