"""MONAI Label's auth with the UMind app, end to end: a local test issuer, RS256 tokens, role checks.

The server runs with `MONAI_LABEL_AUTH_ENABLE=true` against `auth_issuer.Issuer` (a stand-in for a Keycloak
realm). The UMind Slicer module's client (`UMindLib.UMindClient`) logs in through the server's /auth/token
as the stock MONAILabel extension does and sends the bearer token; the roles decide what it may do:
an annotator infers and saves labels, a plain user only infers, only an admin trains and rolls back.
Tokens are checked as Keycloak's adapters check them (item 6): a token signed with the realm's key but
issued by another realm URL, or to another client of the realm, or with malformed role claims, is a 401 with
a message naming the problem (never a 500), including on admin endpoints.
The same server checks that a configured CORS origin (conf cors_origins) is honoured and no other.
"""

from __future__ import annotations

import io
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import requests
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "slicer_module" / "UMind"))

import jwt  # noqa: E402
from auth_issuer import ADMIN, ANNOTATOR, CLIENT_ID, DROP, OTHER_CLIENT, USER, Issuer, new_key  # noqa: E402
from server_utils import start_server  # noqa: E402
from UMindLib.client import MultipartFile, UMindClient, UMindServerError  # noqa: E402

pytestmark = [pytest.mark.server, pytest.mark.slow]

VIEWER = "http://viewer.example:3000"  # the one origin this server's CORS allows
ALL_ROLES = [ADMIN, ANNOTATOR, USER]


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
    srv.studies = studies
    yield srv
    srv.stop()


def client_as(server, user: str, password: str) -> UMindClient:
    c = UMindClient(server.url, timeout=120)
    assert c.login_if_required(lambda: (user, password)) is True
    assert c.token and c.token.count(".") == 2
    return c


def bearer(token: str) -> dict:
    return {"Authorization": f"Bearer {token}"}


def refused(resp, token: str, *words: str) -> str:
    """Assert `resp` is the 401 of a refused token whose detail names `words` and does not echo the token."""
    assert resp.status_code == 401, resp.text
    assert resp.headers.get("www-authenticate", "").startswith("Bearer"), resp.headers
    detail = resp.json()["detail"]
    assert isinstance(detail, str) and all(w in detail for w in words), detail
    assert all(part not in detail for part in token.split(".")) and "/tmp" not in detail, detail
    return detail


def label_file() -> MultipartFile:
    arr = np.zeros((64, 64), np.uint8)
    arr[10:30, 10:30] = 1
    return MultipartFile("label.png", _png(arr), "image/png")


def test_without_a_valid_token_every_endpoint_answers_401(server, issuer):
    assert requests.get(f"{server.url}/auth/", timeout=30).json()["enabled"] is True
    assert requests.get(f"{server.url}/info/", timeout=30).status_code == 401
    assert requests.post(f"{server.url}/infer/umind_segment?image=img0", timeout=30).status_code == 401
    forged = issuer.token("mallory", ALL_ROLES, key=new_key())  # signed by another key
    expired = issuer.token("alice", [ANNOTATOR, USER], ttl=-60)
    for token, word in ((forged, "signature"), (expired, "expired"), ("not-a-jwt", "well-formed")):
        resp = requests.get(f"{server.url}/datastore/", headers=bearer(token), timeout=30)
        refused(resp, token, word)


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


def test_a_token_from_another_realm_or_for_another_client_is_refused_even_on_admin_endpoints(server, issuer):
    """Same signing key, admin roles: only the issuer or the client is wrong, so only those checks can refuse."""
    foreign = f"http://127.0.0.1:1/realms/{issuer.realm}"
    cases = [  # (claims, words the detail names)
        ({"iss": foreign}, ["iss"]),
        ({"iss": issuer.realm_uri + "-evil"}, ["iss"]),
        ({"iss": DROP}, ["iss"]),
        ({"client_id": OTHER_CLIENT}, ["another client"]),  # azp other-app, aud account
        ({"client_id": OTHER_CLIENT, "aud": [OTHER_CLIENT, "account"]}, ["another client"]),
        ({"azp": DROP, "aud": DROP}, ["another client"]),
        ({"typ": "ID"}, ["typ"]),  # an ID token of this very client is not an access token
        ({"typ": "Refresh"}, ["typ"]),
    ]
    for claims, words in cases:
        token = issuer.token("root", ALL_ROLES, **claims)
        for resp in (requests.get(f"{server.url}/datastore/", headers=bearer(token), timeout=30),
                     requests.post(f"{server.url}/train/umind_lora", json={"rollback": 0}, headers=bearer(token),
                                   timeout=30)):
            detail = refused(resp, token, *words)
            assert issuer.realm_uri not in detail, detail


def test_keycloak_shaped_tokens_for_this_client_are_accepted(server, issuer):
    c = client_as(server, "alice", "alice-pw")  # the realm's own token, through /auth/token
    claims = jwt.decode(c.token, options={"verify_signature": False})
    assert (claims["iss"], claims["azp"], claims["aud"], claims["typ"]) == (issuer.realm_uri, CLIENT_ID, "account",
                                                                              "Bearer")
    variants = [
        {},
        {"client_id": OTHER_CLIENT, "aud": ["account", CLIENT_ID]},  # asked by another client, for this one
        {"azp": DROP, "aud": CLIENT_ID},
        {"iss": issuer.realm_uri + "/"},  # trailing slash: the same realm
        {"typ": DROP},
    ]
    for claims in [None, *variants]:
        token = c.token if claims is None else issuer.token("root", ALL_ROLES, **claims)
        resp = requests.get(f"{server.url}/auth/token/valid", headers=bearer(token), timeout=30)
        assert resp.status_code == 200, (claims, resp.text)
        assert resp.json()["username"] in ("alice", "root") and USER in resp.json()["roles"], resp.json()
    resp = requests.get(f"{server.url}/datastore/", headers=bearer(issuer.token("viewer", [USER], **variants[1])),
                        timeout=30)
    assert resp.status_code == 200, resp.text


def test_malformed_claims_are_401_naming_the_claim_not_500(server, issuer):
    cases = [  # (roles, claims, words the detail names); before: null realm_access or string roles gave a 500
        (ALL_ROLES, {"realm_access": None}, ["realm_access"]),
        (ALL_ROLES, {"realm_access": DROP}, ["realm_access"]),
        (ALL_ROLES, {"realm_access": ["monailabel-admin"]}, ["realm_access"]),
        (ADMIN, {}, ["realm_access#roles", "list of strings"]),  # roles: "monailabel-admin"
        ([ADMIN, 5], {}, ["realm_access#roles"]),
        (None, {}, ["realm_access#roles"]),
        (ALL_ROLES, {"preferred_username": None}, ["preferred_username"]),
        (ALL_ROLES, {"preferred_username": {"name": "root"}}, ["preferred_username"]),
        (ALL_ROLES, {"email": ["root@example.org"]}, ["email"]),
        (ALL_ROLES, {"aud": 5}, ["aud"]),
        (ALL_ROLES, {"azp": [CLIENT_ID]}, ["azp"]),
        (ALL_ROLES, {"typ": 1}, ["typ"]),
        # PyJWT checks exp only when present and reads a numeric string through int(): neither may pass
        (ALL_ROLES, {"exp": DROP}, ["expiry"]),
        (ALL_ROLES, {"exp": str(int(time.time()) + 300)}, ["exp"]),
        (ALL_ROLES, {"exp": True}, ["exp"]),
    ]
    for roles, claims, words in cases:
        token = issuer.token("root", roles, **claims)
        refused(requests.get(f"{server.url}/info/", headers=bearer(token), timeout=30), token, *words)
        refused(requests.post(f"{server.url}/train/umind_lora", json={"rollback": 0}, headers=bearer(token),
                              timeout=30), token, *words)


def test_label_writes_from_any_endpoint_need_the_annotator_and_replacing_needs_the_admin(server, issuer):
    """save_label through /infer writes a label: the user role gets 403 (the README's roles); replacing an image
    (which deletes its labels) is the admin's."""
    user = issuer.token("viewer", [USER])
    resp = requests.post(f"{server.url}/infer/umind_segment?image=img0", headers=bearer(user),
                         data={"params": '{"save_label": true, "label_tag": "byuser"}'}, timeout=120)
    assert resp.status_code == 403 and "annotator" in resp.json()["detail"], resp.text
    assert not (server.studies / "labels" / "byuser").exists()
    annotator = issuer.token("alice", [ANNOTATOR, USER])
    resp = requests.put(f"{server.url}/datastore/image?image=img1", headers=bearer(annotator),
                        files={"file": ("x.png", _png(np.full((64, 64), 9, np.uint8)))},
                        data={"params": '{"replace": true}'}, timeout=60)
    assert resp.status_code == 403 and "admin" in resp.json()["detail"], resp.text


def test_the_browser_viewer_asks_for_a_login_refuses_a_bad_password_and_works_with_a_good_one(server, tmp_path):
    """The page loads without a token (it holds no data) and shows the login form; a wrong password is a message
    in the panel and stores no token; the annotator's password opens the studies, every call with the bearer; a
    plain user's Submit label is refused with the server's 403 in the panel."""
    from system_packages import missing_line

    if missing_line(("chromium",)) or not (Path(__file__).resolve().parents[1] / "web/dist/index.html").is_file():
        pytest.skip(missing_line(("chromium",)) or "viewer not built: scripts/web.sh needs node and npm")
    from viewer_page import ViewerPage

    page = ViewerPage.start(server.url, tmp_path / "profile", tmp_path)
    try:
        page.open("", wait_study=False)
        page.b.wait_for("!document.getElementById('umind-login').hidden", 60, "the login form")

        def log_in(user: str, password: str) -> None:
            page.b.js(f"document.getElementById('umind-user').value = '{user}';"
                      f"document.getElementById('umind-password').value = '{password}';"
                      "document.getElementById('umind-login-button').click()")

        log_in("alice", "wrong")
        page.b.wait_for("document.getElementById('umind-message').textContent", 60, "the refusal")
        assert page.message() == "wrong user name or password"
        assert page.b.js("sessionStorage.getItem('umind.token')") is None
        assert page.b.js("document.getElementById('umind-work').hidden") is True
        log_in("alice", "alice-pw")
        page.b.wait_for("window.umind.ui.study && window.umind.ui.study.id === 'img0'", 60, "the first study")
        calls = [r for r in page.b.requests.values() if "/datastore/" in r["url"]]
        assert calls and all(r["status"] == 200 for r in calls)
        page.b.js("sessionStorage.clear()")
        page.open("", wait_study=False)
        page.b.wait_for("!document.getElementById('umind-login').hidden", 60, "the login form again")
        log_in("viewer", "viewer-pw")
        page.b.wait_for("window.umind.ui.study && window.umind.ui.study.id === 'img0'", 60, "the first study")
        page.b.js("window.umind.view.setFrameMask(0, new Uint8Array(64 * 64).fill(1))")
        page.key("s")
        page.wait_done()
        assert page.message().startswith("403")
    finally:
        page.close()


def test_token_checks_are_pinned_to_rs256_whatever_the_caller_asks():
    """MONAI Label calls `jwt.decode` with its own algorithm list; the wrapper replaces it, so a token signed with a
    shared secret (HS256, the algorithm-confusion attack's shape) is refused even where a caller would allow it."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "monailabel_app"))
    from lib.wall.auth import _PinnedJWT

    pinned = _PinnedJWT(jwt)
    forged = jwt.encode({"sub": "x"}, "a shared secret of thirty-two bytes", algorithm="HS256")
    assert jwt.decode(forged, "a shared secret of thirty-two bytes", algorithms=["HS256"])["sub"] == "x"
    for asked in (["HS256"], ["RS256", "HS256"], None):
        with pytest.raises(jwt.InvalidAlgorithmError):
            pinned.decode(forged, "a shared secret of thirty-two bytes", algorithms=asked)
