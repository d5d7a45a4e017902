"""One real UMind MONAI Label server per test process, for Slicer-side tests that must see its true replies.

Hand-typed replies drift from what the app sends (a label save answering "train": "queued" when the app answers
"retrain" and "labels_since_last_run"; the interpretation task typed "others" when it is "classification").
Tests that need server replies talk to this server instead, directly or through a recording proxy that also
lets them inspect the exact bytes of each request and reply. It serves the shipped demo model (loaded on the
first inference), two synthetic PNG studies, and never starts training on its own (K = 100 labels).
"""

from __future__ import annotations

import atexit
import tempfile
import threading
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import numpy as np

from server_utils import Server, start_server

STUDY_IDS = ("img0", "img1")
_SHARED: dict[str, Server] = {}
_LOCK = threading.Lock()


def _study_png(seed: int) -> np.ndarray:
    from umind_core.data.synthetic import generate

    return generate(seed=seed, site="breast", size=256).image


def shared_server() -> Server:
    """The process's server, started on first use and stopped at exit; `.studies` is its studies folder."""
    with _LOCK:
        if "server" not in _SHARED:
            from PIL import Image

            root = Path(tempfile.mkdtemp(prefix="umind_real_server_"))
            studies = root / "studies"
            studies.mkdir()
            for k, image_id in enumerate(STUDY_IDS):
                Image.fromarray(_study_png(1_000_001 + k)).save(studies / f"{image_id}.png")
            conf = {"workdir": str(root / "work"), "retrain_every": "100", "max_new_tokens": "64",
                    "max_steps": "1"}
            srv = start_server(studies, conf, root / "server.log",
                               env={"MONAI_LABEL_AUTO_UPDATE_SCORING": "false"}, timeout=300)
            srv.studies = studies
            atexit.register(srv.stop)
            _SHARED["server"] = srv
        return _SHARED["server"]


@dataclass
class Exchange:
    """One request as the proxy received it and the upstream reply it passed back, byte for byte."""
    method: str
    path: str
    query: dict
    headers: dict
    body: bytes
    status: int = 0
    content_type: str = ""
    reply: bytes = b""
    disposition: str = ""


@dataclass
class Proxy:
    """Forwards every request to `upstream`; `routes` may override one (method, path) with a local handler
    (for failures a healthy server never produces, such as a reply that never comes)."""
    upstream: str
    exchanges: list[Exchange] = field(default_factory=list)
    routes: dict = field(default_factory=dict)
    url: str = ""

    def last(self, method: str, path: str) -> Exchange:
        return [e for e in self.exchanges if e.method == method and e.path == path][-1]


def _forward(proxy: Proxy, ex: Exchange, raw_path: str) -> tuple[int, str, bytes]:
    headers = {k: v for k, v in ex.headers.items() if k.lower() in ("content-type", "authorization")}
    req = urllib.request.Request(proxy.upstream + raw_path, data=ex.body if ex.body else None,
                                 method=ex.method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=600) as r:
            ex.disposition = r.headers.get("Content-Disposition", "")
            return r.status, r.headers.get("Content-Type", ""), r.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers.get("Content-Type", ""), exc.read()


def _handler(proxy: Proxy):
    class H(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def _do(self):
            url = urlsplit(self.path)
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            ex = Exchange(self.command, url.path, {k: v[0] for k, v in parse_qs(url.query).items()},
                          dict(self.headers), body)
            proxy.exchanges.append(ex)
            local = proxy.routes.get((self.command, url.path))
            ex.status, ex.content_type, ex.reply = local(ex) if local else _forward(proxy, ex, self.path)
            self.send_response(ex.status)
            self.send_header("Content-Type", ex.content_type)
            if ex.disposition:
                self.send_header("Content-Disposition", ex.disposition)
            self.send_header("Content-Length", str(len(ex.reply)))
            self.end_headers()
            try:
                self.wfile.write(ex.reply)
            except (BrokenPipeError, ConnectionResetError):  # the client gave up (a timeout test)
                pass

        do_GET = do_POST = do_PUT = do_DELETE = _do
    return H


def start_proxy(upstream: str) -> tuple[Proxy, ThreadingHTTPServer]:
    proxy = Proxy(upstream)
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(proxy))
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    proxy.url = f"http://127.0.0.1:{httpd.server_address[1]}"
    return proxy, httpd
