"""MONAI Label's auth with the UMind app, end to end: a local test issuer, RS256 tokens, role checks (issue 13).

The server runs with `MONAI_LABEL_AUTH_ENABLE=true` against `auth_issuer.Issuer` (a stand-in for a Keycloak
realm). The UMind Slicer module's client (`UMindLib.UMindClient`) logs in through the server's /auth/token
as the stock MONAILabel extension does and sends the bearer token; the roles decide what it may do:
an annotator infers and saves labels, a plain user only infers, only an admin trains and rolls back.
The same server checks that a configured CORS origin (conf cors_origins) is honoured and no other.
"""

from __future__ import annotations

import io
import sys
from pathlib import Path

import numpy as np
import pytest
import requests
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "slicer_module" / "UMind"))

from auth_issuer import ADMIN, ANNOTATOR, USER, Issuer, new_key  # noqa: E402
from server_utils import start_server  # noqa: E402
from UMindLib.client import MultipartFile, UMindClient, UMindServerError  # noqa: E402

pytestmark = [pytest.mark.server, pytest.mark.slow]

VIEWER = "http://viewer.example:3000"  # the one origin this server's CORS allows


def _png(arr: np.ndarray) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, format="PNG")
    return buf.getvalue()


@pytest.fixture(scope="module")
def issuer():
    iss = Issuer().start()
    yield iss
    iss.stop()


@pytest.fixture(scope="module")
def server(tmp_path_factory, issuer):
    from umind_core.modeling.tiny import build_model

    root = tmp_path_factory.mktemp("auth")
    studies, model_dir = root / "studies", root / "model"
    studies.mkdir()
    for i in range(2):
        arr = (np.random.default_rng(i).random((64, 64)) * 255).astype(np.uint8)
        (studies / f"img{i}.png").write_bytes(_png(arr))
    build_model("tiny", lora=None).save_pretrained(model_dir)
    env = {"MONAI_LABEL_AUTH_ENABLE": "true", "MONAI_LABEL_AUTH_REALM_URI": issuer.realm_uri,
           "MONAI_LABEL_AUTO_UPDATE_SCORING": "false"}
    srv = start_server(studies, {"model": str(model_dir), "max_new_tokens": "4", "retrain_every": "0",
                                 "cors_origins": VIEWER},
                       root / "server.log", env=env)
    yield srv
    srv.stop()


def client_as(server, user: str, password: str) -> UMindClient:
    c = UMindClient(server.url, timeout=120)
    assert c.login_if_required(lambda: (user, password)) is True
    assert c.token and c.token.count(".") == 2
    return c


def label_file() -> MultipartFile:
    arr = np.zeros((64, 64), np.uint8)
    arr[10:30, 10:30] = 1
    return MultipartFile("label.png", _png(arr), "image/png")


def test_without_a_valid_token_every_endpoint_answers_401(server, issuer):
    assert requests.get(f"{server.url}/auth/", timeout=30).json()["enabled"] is True
    assert requests.get(f"{server.url}/info/", timeout=30).status_code == 401
    assert requests.post(f"{server.url}/infer/umind_segment?image=img0", timeout=30).status_code == 401
    forged = issuer.token("mallory", [ADMIN, ANNOTATOR, USER], key=new_key())  # signed by another key
    expired = issuer.token("alice", [ANNOTATOR, USER], ttl=-60)
    for token in (forged, expired, "not-a-jwt"):
        resp = requests.get(f"{server.url}/datastore/", headers={"Authorization": f"Bearer {token}"}, timeout=30)
        assert resp.status_code == 401, (token[:20], resp.text)


def test_wrong_password_is_refused(server):
    c = UMindClient(server.url, timeout=60)
    with pytest.raises(UMindServerError) as err:
        c.login("alice", "wrong")
    assert err.value.status == 401 and "user name or password" in err.value.message
    assert c.token is None


def test_annotator_infers_and_saves_labels_but_cannot_train_or_roll_back(server):
    c = client_as(server, "alice", "alice-pw")
    assert "umind_segment" in c.info()["models"]
    reply = c.infer("umind_segment", "img0", {"prompt": "lesion"})
    assert reply.params["label_names"] == {"lesion": 1}
    saved = c.save_label("img0", label_file())
    assert saved["label"] == "img0"
    for params in ({}, {"rollback": 0}):
        with pytest.raises(UMindServerError) as err:
            c.train_start("umind_lora", params)
        assert err.value.status == 403 and "monailabel-admin" in err.value.message
    resp = requests.delete(f"{server.url}/datastore/image?id=img1",
                           headers={"Authorization": f"Bearer {c.token}"}, timeout=30)
    assert resp.status_code == 403


def test_plain_user_infers_but_cannot_save_labels(server):
    c = client_as(server, "viewer", "viewer-pw")
    assert c.infer("umind_detect", "img1", {"prompt": "lesion"}, output="json").params is not None
    with pytest.raises(UMindServerError) as err:
        c.save_label("img1", label_file())
    assert err.value.status == 403 and "monailabel-annotator" in err.value.message


def test_admin_can_roll_back(server):
    c = client_as(server, "root", "root-pw")
    res = c.train_start("umind_lora", {"rollback": 0})
    assert res.get("status") in ("SUBMITTED", "RUNNING", "QUEUED", "DONE") or "id" in res, res


def test_cors_allows_exactly_the_configured_origin(server):
    def preflight(origin):
        return requests.options(f"{server.url}/infer/umind_segment", timeout=30, headers={
            "Origin": origin, "Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "authorization"})

    ok, evil = preflight(VIEWER), preflight("http://evil.example")
    assert ok.status_code == 200 and ok.headers["access-control-allow-origin"] == VIEWER
    assert evil.status_code == 400 and "access-control-allow-origin" not in evil.headers
