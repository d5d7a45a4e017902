"""The PACS client's calls counted against a stand-in PACS, without Orthanc: each call is made once.

dicomweb_client retries a failed call 5 times with waits of 2-16 s, so a PACS that did not answer held one
infer request for 101 s (lib/pacs.py `make_client`). What keeps a request from hanging is that every call
fails after its own timeout and is not retried; that is counted here (requests the stand-in received), not
timed. The end-to-end 504 with a real, stopped Orthanc is in test_pacs.py.
"""

from __future__ import annotations

import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "monailabel_app"))

from lib.wall.errors import UpstreamError, UpstreamTimeout  # noqa: E402
from lib.pacs import make_client, pacs_call  # noqa: E402


class _StandIn(ThreadingHTTPServer):
    """A PACS that counts the requests it gets and either never answers (`silent`) or answers 503."""

    daemon_threads = True

    def __init__(self, silent: bool):
        self.silent, self.requests, self.release = silent, 0, threading.Event()
        super().__init__(("127.0.0.1", 0), _Handler)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/dicom-web"


class _Handler(BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 - http.server's name
        self.server.requests += 1
        if self.server.silent:
            self.server.release.wait(30)  # hold the request unanswered until the test is done
            return
        self.send_error(503)

    def log_message(self, *args):
        pass


@pytest.fixture
def stand_in(request):
    server = _StandIn(silent=request.param)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.release.set()
    server.shutdown()
    server.server_close()


@pytest.fixture
def short_read_timeout(monkeypatch):
    from monailabel.config import settings

    monkeypatch.setattr(settings, "MONAI_LABEL_DICOMWEB_PROXY_TIMEOUT", 1.0)


def _search(url: str, uid: str):
    client = make_client(url)
    return pacs_call(f"series {uid!r}", lambda: client.search_for_series(search_filters={"SeriesInstanceUID": uid}))


@pytest.mark.parametrize("stand_in", [True], indirect=True)
def test_a_pacs_that_does_not_answer_gets_one_request_and_a_timeout(stand_in, short_read_timeout):
    with pytest.raises(UpstreamTimeout, match=r"series '1\.2\.3': the PACS did not answer within 1 s"):
        _search(stand_in.url, "1.2.3")
    assert stand_in.requests == 1  # retried, it would be 5


@pytest.mark.parametrize("stand_in", [False], indirect=True)
def test_a_busy_pacs_gets_one_request_and_a_502(stand_in):
    with pytest.raises(UpstreamError, match=r"series '1\.2\.3': the PACS answered HTTP 503"):
        _search(stand_in.url, "1.2.3")
    assert stand_in.requests == 1  # dicomweb_client retries a 503 itself unless told not to
