"""HTTP client for the UMind MONAI Label server, on the standard library only.

Slicer's Python has no `requests` and Python 3.13 has no `cgi` (the stock MONAI Label client
needs both), so requests are built with `urllib` and replies are parsed by `replies` (on the
`email` package). Every failure becomes one `UMindServerError` whose message can be shown to
the user as is: the server's own words for 4xx, a plain sentence for a dead server or timeout.

With MONAI Label's auth on (`MONAI_LABEL_AUTH_ENABLE`), every endpoint wants a bearer token: `login`
gets one from the server's /auth/token (which asks the realm, e.g. Keycloak, with the user's name and
password), as the stock MONAILabel extension does, and every later request sends it.
"""

from __future__ import annotations

import json
import socket
import urllib.error
import urllib.parse
import urllib.request
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from .contract import TRAINER
from .replies import ParsedReply, filename_from_disposition, parse_reply

__all__ = ["UMindClient", "UMindServerError", "MultipartFile", "encode_multipart"]

DEFAULT_TIMEOUT_S = 60.0


class UMindServerError(Exception):
    """A request failed. ``status`` is the HTTP status (None when no answer came);
    ``message`` is what to show the user, verbatim from the server where it sent one."""

    def __init__(self, message: str, status: int | None = None, url: str = "") -> None:
        super().__init__(message if status is None else f"HTTP {status}: {message}")
        self.message = message
        self.status = status
        self.url = url


@dataclass
class MultipartFile:
    """One file part of a multipart/form-data upload."""

    filename: str
    data: bytes
    content_type: str = "application/octet-stream"


def encode_multipart(fields: Mapping[str, str | MultipartFile]) -> tuple[bytes, str]:
    """Fields -> (body, content-type header) for multipart/form-data (RFC 7578)."""
    boundary = "umind-" + uuid.uuid4().hex
    out = bytearray()
    for name, value in fields.items():
        out += f"--{boundary}\r\n".encode()
        if isinstance(value, MultipartFile):
            fname = value.filename.replace('"', "_")
            out += (f'Content-Disposition: form-data; name="{name}"; filename="{fname}"\r\n'
                    f"Content-Type: {value.content_type}\r\n\r\n").encode()
            out += value.data
        else:
            out += f'Content-Disposition: form-data; name="{name}"\r\n\r\n'.encode()
            out += str(value).encode("utf-8")
        out += b"\r\n"
    out += f"--{boundary}--\r\n".encode()
    return bytes(out), f"multipart/form-data; boundary={boundary}"


@dataclass
class _Response:
    status: int
    headers: dict[str, str]
    body: bytes = field(repr=False)

    def json(self, url: str) -> Any:
        try:
            return json.loads(self.body.decode("utf-8") or "null")
        except (UnicodeDecodeError, ValueError) as exc:
            raise UMindServerError(f"the server's reply is not JSON: {exc}", self.status,
                                   url) from exc


class UMindClient:
    """One server. Methods map 1:1 onto MONAI Label 0.8.5 endpoints used by the module."""

    def __init__(self, server_url: str, timeout: float = DEFAULT_TIMEOUT_S) -> None:
        url = (server_url or "").strip()
        if "://" not in url:
            url = "http://" + url
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError(f"server URL {server_url!r} is not an http(s) address")
        if timeout <= 0:
            raise ValueError(f"timeout must be positive, got {timeout}")
        self.server_url = url.rstrip("/")
        self.timeout = float(timeout)
        self.token: str | None = None

    # auth --------------------------------------------------------------------------------

    def auth_enabled(self) -> bool:
        """GET /auth/: does the server check tokens? (The route is absent when auth is off.)"""
        url = self._url("/auth/")
        try:
            d = self._send("GET", url).json(url)
        except UMindServerError as exc:
            if exc.status == 404:
                return False
            raise
        return bool(d.get("enabled")) if isinstance(d, dict) else False

    def login(self, username: str, password: str) -> str:
        """POST /auth/token with the user's name and password; keeps and returns the access token."""
        if not username:
            raise ValueError("login needs a user name")
        body = urllib.parse.urlencode({"username": username, "password": password,
                                       "grant_type": "password"}).encode("utf-8")
        url = self._url("/auth/token")
        d = self._send("POST", url, body, "application/x-www-form-urlencoded").json(url)
        token = d.get("access_token") if isinstance(d, dict) else None
        if not token:
            raise UMindServerError("the server answered the login without an access token", None, url)
        self.token = str(token)
        return self.token

    def login_if_required(self, credentials: Callable[[], tuple[str, str] | None]) -> bool:
        """Log in when the server has auth on; `credentials()` asks the user (None = cancelled).
        Returns True when a token is now held."""
        if not self.auth_enabled():
            return False
        given = credentials()
        if not given:
            raise UMindServerError("the server requires a login; no credentials were given", 401,
                                   self.server_url)
        self.login(*given)
        return True

    # endpoints ---------------------------------------------------------------------------

    def info(self) -> dict:
        """GET /info/: models, trainers, strategies and the UMind adapter version."""
        return self._json("GET", "/info/")

    def infer(self, model: str, image_id: str, params: Mapping[str, Any] | None = None,
              image_file: MultipartFile | None = None, output: str = "all",
              timeout: float | None = None) -> ParsedReply:
        """POST /infer/{model}: params as a JSON form field, optionally the image itself."""
        if output not in ("all", "json", "image"):
            raise ValueError(f"output must be all, json or image, got {output!r}")
        if not model:
            raise ValueError("infer needs a model name")
        fields: dict[str, str | MultipartFile] = {"params": json.dumps(dict(params or {}))}
        if image_file is not None:
            fields["file"] = image_file
        body, ctype = encode_multipart(fields)
        path = f"/infer/{urllib.parse.quote(model)}"
        url = self._url(path, {"image": image_id or "", "output": output})
        resp = self._send("POST", url, body, ctype, timeout)
        try:
            return parse_reply(resp.body, resp.headers.get("content-type", ""),
                               resp.headers.get("content-disposition", ""))
        except ValueError as exc:
            raise UMindServerError(f"cannot read the server's reply: {exc}", resp.status,
                                   url) from exc

    def upload_image(self, image_file: MultipartFile, image_id: str = "",
                     params: Mapping[str, Any] | None = None) -> str:
        """PUT /datastore/image: add an image to the datastore; returns its id."""
        body, ctype = encode_multipart({"params": json.dumps(dict(params or {})),
                                        "file": image_file})
        url = self._url("/datastore/image", {"image": image_id} if image_id else None)
        d = self._send("PUT", url, body, ctype).json(url)
        return str(d.get("image", image_id)) if isinstance(d, dict) else image_id

    def save_label(self, image_id: str, label_file: MultipartFile,
                   label_info: Mapping[str, Any] | None = None, tag: str = "final") -> dict:
        """PUT /datastore/label: the corrected label map plus its info (names, answer,
        markups). The reply may carry what ``on_save_label`` added (e.g. a train trigger)."""
        if not image_id:
            raise ValueError("save_label needs the image id the label belongs to")
        body, ctype = encode_multipart({"params": json.dumps(dict(label_info or {})),
                                        "label": label_file})
        url = self._url("/datastore/label", {"image": image_id, "tag": tag})
        d = self._send("PUT", url, body, ctype).json(url)
        return d if isinstance(d, dict) else {"reply": d}

    def next_sample(self, strategy: str, params: Mapping[str, Any] | None = None) -> dict:
        """POST /activelearning/{strategy} (0.8.5 takes POST with JSON params) -> {"id", ...}."""
        d = self._json("POST", f"/activelearning/{urllib.parse.quote(strategy)}",
                       body=dict(params or {}))
        if not isinstance(d, dict) or not d.get("id"):
            raise UMindServerError(f"strategy {strategy!r} returned no sample (all images "
                                   "may be labelled)", None, self.server_url)
        return d

    def download_image(self, image_id: str) -> tuple[bytes, str]:
        """GET /datastore/image?image=ID -> (bytes, file name from the reply or the id)."""
        url = self._url("/datastore/image", {"image": image_id})
        resp = self._send("GET", url)
        return resp.body, filename_from_disposition(
            resp.headers.get("content-disposition", "")) or image_id

    def train_start(self, model: str = TRAINER,
                    params: Mapping[str, Any] | None = None) -> dict:
        """POST /train/{model}: queue a LoRA fine-tuning run."""
        d = self._json("POST", f"/train/{urllib.parse.quote(model)}", body=dict(params or {}))
        return d if isinstance(d, dict) else {"reply": d}

    def train_stop(self) -> dict:
        """DELETE /train/: stop the running train job."""
        d = self._json("DELETE", "/train/")
        return d if isinstance(d, dict) else {"reply": d}

    def train_status(self, check_if_running: bool = False) -> dict | bool:
        """GET /train/: the last train job's status dict; with ``check_if_running`` a bool.
        "No train task yet" (404) is an answer, not an error: it returns {} / False."""
        url = self._url("/train/", {"check_if_running": "true"} if check_if_running else None)
        try:
            d = self._send("GET", url).json(url)
        except UMindServerError as exc:
            if exc.status == 404:
                return False if check_if_running else {}
            raise
        if check_if_running:
            return bool(d) if not isinstance(d, dict) else d.get("status") == "RUNNING"
        return d if isinstance(d, dict) else {"reply": d}

    # plumbing ----------------------------------------------------------------------------

    def _url(self, path: str, query: Mapping[str, str] | None = None) -> str:
        url = self.server_url + path
        if query:
            url += "?" + urllib.parse.urlencode(query)
        return url

    def _json(self, method: str, path: str, body: Any = None) -> Any:
        url = self._url(path)
        data = None if body is None else json.dumps(body).encode("utf-8")
        return self._send(method, url, data, "application/json" if data else None).json(url)

    def _send(self, method: str, url: str, data: bytes | None = None,
              content_type: str | None = None, timeout: float | None = None) -> _Response:
        req = urllib.request.Request(url, data=data, method=method)
        req.add_header("Accept", "application/json, multipart/form-data, */*")
        if self.token:
            req.add_header("Authorization", f"Bearer {self.token}")
        if content_type:
            req.add_header("Content-Type", content_type)
        limit = self.timeout if timeout is None else float(timeout)
        try:
            with urllib.request.urlopen(req, timeout=limit) as r:
                return _Response(r.status, {k.lower(): v for k, v in r.headers.items()}, r.read())
        except urllib.error.HTTPError as exc:
            body = exc.read() if exc.fp is not None else b""
            raise UMindServerError(_error_message(body, exc.reason), exc.code, url) from None
        except (socket.timeout, TimeoutError) as exc:
            raise UMindServerError(f"{self.server_url} did not answer within {limit:g} s",
                                   None, url) from exc
        except urllib.error.URLError as exc:
            if isinstance(exc.reason, (socket.timeout, TimeoutError)):
                raise UMindServerError(f"{self.server_url} did not answer within {limit:g} s",
                                       None, url) from exc
            raise UMindServerError(f"cannot reach the server at {self.server_url}: "
                                   f"{exc.reason}", None, url) from exc
        except (ConnectionError, OSError) as exc:
            raise UMindServerError(f"connection to {self.server_url} failed: {exc}",
                                   None, url) from exc


def _error_message(body: bytes, reason: Any) -> str:
    """FastAPI's {"detail": "..."} (or a validation list) -> its text, unaltered."""
    text = body.decode("utf-8", errors="replace").strip()
    try:
        d = json.loads(text)
    except ValueError:
        return text or str(reason)
    if isinstance(d, dict) and "detail" in d:
        detail = d["detail"]
        if isinstance(detail, str):
            return detail
        if isinstance(detail, list):
            return "; ".join(str(x.get("msg", x)) if isinstance(x, dict) else str(x)
                             for x in detail)
        return json.dumps(detail)
    return text or str(reason)
