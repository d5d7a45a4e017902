"""The browser viewer at /viewer/ against a real server with the demo model, in headless Chromium.

Each test does what an annotator does (open, type, press keys, drag the brush) and checks what the screen shows
or what the server stored: the overlay equals the reply's mask, a brush stroke changes the saved label, a
submitted label counts towards `retrain_every`, Next sample opens the study the strategy picked, a clip's frame N
is answered on frame N, bad input shows a message. Screenshots of each state go to runs/test-output/viewer/.
Skipped with one line where Chromium is not installed or the viewer cannot be built (node and npm).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest
import requests

from system_packages import missing_line

ROOT = Path(__file__).resolve().parents[1]
OUT = Path(os.environ.get("UMIND_TEST_OUTPUT", ROOT / "runs" / "test-output")) / "viewer"

if missing_line(("chromium",)):
    pytest.skip(missing_line(("chromium",)), allow_module_level=True)

pytestmark = [pytest.mark.server, pytest.mark.slow]


def _built() -> bool:
    if not (ROOT / "web" / "dist" / "index.html").is_file():
        subprocess.run(["bash", str(ROOT / "scripts" / "web.sh")], capture_output=True, timeout=600)
    return (ROOT / "web" / "dist" / "index.html").is_file()


if not _built():
    pytest.skip("viewer not built: scripts/web.sh needs node and npm (apt-get install nodejs npm)",
                allow_module_level=True)

from umind_core.evaluation.metrics import mask_iou  # noqa: E402
from umind_core.testing.server import start_server  # noqa: E402
from test_server import read_label  # noqa: E402
from viewer_page import ViewerPage  # noqa: E402


def _studies(folder: Path) -> None:
    import nrrd
    from PIL import Image

    import fixtures_imaging as fx
    from umind_core.data.synthetic import generate

    folder.mkdir()
    for k in range(3):
        Image.fromarray(generate(seed=1_000_001 + k, site="breast", size=256).image).save(folder / f"img{k}.png")
    frames = np.stack([generate(seed=1_000_011 + k, site="breast", size=128).image for k in range(4)])
    nrrd.write(str(folder / "cine.nrrd"), frames, {"kinds": ["domain", "domain", "time"]}, index_order="C")
    fx.dicom_mono_multiframe(folder / "clip.dcm", n=4)
    fx.nifti_cine_4d(folder / "nifti.nii.gz", t=4, y=48, x=64)
    Image.fromarray(generate(seed=1_000_003, site="kidney", size=256).image).convert("RGB").save(
        folder / "kidney.jpg", quality=95)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("viewer")
    _studies(root / "studies")
    srv = start_server(root / "studies", {"workdir": str(root / "work"), "retrain_every": "100",
                                          "max_new_tokens": "64", "max_steps": "1", "decode": "static"},
                       root / "server.log", env={"MONAI_LABEL_AUTO_UPDATE_SCORING": "false"}, timeout=300)
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def page(server, tmp_path_factory):
    p = ViewerPage.start(server.url, tmp_path_factory.mktemp("chromium") / "profile", OUT)
    yield p
    p.close()


def _reply_mask(server, image: str, params: dict, model: str = "umind_segment") -> np.ndarray:
    """The label map the server answers the same request with, read by SimpleITK (not by the page's code)."""
    r = requests.post(f"{server.url}/infer/{model}?image={image}&output=image",
                      files={"params": (None, json.dumps({**params, "umind_client": "web-viewer"}))}, timeout=300)
    r.raise_for_status()
    return read_label(r.content, ".nrrd")


def _saved_label(server, image: str) -> np.ndarray:
    r = requests.get(f"{server.url}/datastore/label?label={image}&tag=final", timeout=60)
    r.raise_for_status()
    return read_label(r.content, ".png" if r.content[:4] == b"\x89PNG" else ".nrrd")


def _since_last_run(server) -> int:
    return int(requests.get(f"{server.url}/info/", timeout=30).json()["umind"]["trigger"]["since_last_run"])


def _infer_posts(page) -> list[dict]:
    return [r for r in page.b.requests.values() if "/infer/" in r["url"] and r["method"] == "POST"]


def test_the_viewer_is_served_with_a_strict_policy_and_wasm_typed(server):
    r = requests.get(f"{server.url}/viewer/", timeout=30)
    assert r.status_code == 200 and "UMind" in r.text
    csp = r.headers["content-security-policy"]
    assert "default-src 'self'" in csp and "frame-ancestors 'none'" in csp and "unsafe-inline" not in csp.split(
        "style-src")[0]
    assert r.headers["x-content-type-options"] == "nosniff"
    wasm = requests.get(f"{server.url}/viewer/wasm/charlswasm_decode.wasm", timeout=30)
    assert wasm.status_code == 200 and wasm.headers["content-type"] == "application/wasm"
    assert requests.get(f"{server.url}/viewer/../monailabel_app/main.py", timeout=30).status_code == 404


def test_segment_from_an_empty_browser_to_a_saved_label_in_four_actions(server, page):
    """Open the study, type the target, Enter, `s`: the saved label is the model's mask, drawn as the reply."""
    page.actions = 0
    before = _since_last_run(server)
    page.open("image=img0")
    params = page.run(prompt="breast lesion")
    assert params["label_names"] == {"breast lesion": 1}, params.get("label_names")
    want = _reply_mask(server, "img0", {"prompt": "breast lesion", "result_extension": ".nrrd"})
    assert want.sum() > 200  # the demo model finds the lesion on this study
    drawn = page.drawn_mask(256, 256, "segment")
    assert mask_iou(drawn, want > 0) >= 0.98
    page.blur()
    page.key("s")
    assert "label saved for img0" in page.wait_done()
    assert page.actions == 4
    saved = _saved_label(server, "img0")
    assert np.array_equal(saved > 0, want > 0)
    assert _since_last_run(server) == before + 1
    info = requests.get(f"{server.url}/datastore/label/info?label=img0&tag=final", timeout=30).json()
    assert info["label_names"] == {"breast lesion": 1} and info["answer"] == "breast lesion"


def test_a_brush_stroke_and_an_eraser_stroke_change_the_saved_label(server, page):
    page.open("image=img1")
    page.blur()
    page.key("b")
    page.b.js("window.umind.view.setBrushSize(6)")
    page.drag([(40 + 4 * i, 200) for i in range(16)])  # x 40..100 along row 200
    page.key("s")
    assert "label saved for img1" in page.wait_done()
    saved = _saved_label(server, "img1")
    assert saved[200, 50:90].all() and saved[200, 50:90].max() == 1
    assert saved[150].sum() == 0 and saved[:, 150:].sum() == 0  # nowhere else
    page.key("e")
    page.drag([(60 + 2 * i, 200) for i in range(11)])  # erase x 60..80
    page.key("s")
    assert "label saved for img1" in page.wait_done()
    again = _saved_label(server, "img1")
    assert again[200, 64:76].sum() == 0 and again[200, 44:54].all() and again[200, 86:96].all()
    page.screenshot("brush-and-eraser")


def test_a_new_label_is_painted_beside_the_models_and_saved_with_its_name(server, page):
    """Segment, then New label with "cyst" typed: the brush paints value 2 where it goes, the model's mask stays 1,
    and the label info names both."""
    page.open("image=img0")
    page.run(task="segment", prompt="breast lesion")
    assert page.b.js("document.getElementById('umind-label').value") == "1"
    page.b.js("document.getElementById('umind-prompt').value = 'cyst'")
    page.b.js("document.getElementById('umind-new-label').click()")
    assert page.b.js("document.getElementById('umind-label').value") == "2"
    page.blur()
    page.key("b")
    page.b.js("window.umind.view.setBrushSize(6)")
    page.drag([(10 + 4 * i, 20) for i in range(11)])  # x 10..50 along row 20, away from the lesion
    page.key("s")
    assert "label saved for img0" in page.wait_done()
    saved = _saved_label(server, "img0")
    want = _reply_mask(server, "img0", {"prompt": "breast lesion", "result_extension": ".nrrd"})
    assert (saved[20, 15:45] == 2).all() and np.array_equal(saved == 1, (want > 0) & (saved != 2))
    info = requests.get(f"{server.url}/datastore/label/info?label=img0&tag=final", timeout=30).json()
    assert info["label_names"] == {"breast lesion": 1, "cyst": 2}
    page.screenshot("new-label")


def test_next_sample_opens_the_study_the_strategy_picks(server, page):
    page.open("image=img0")
    page.b.js("document.getElementById('umind-strategy').value = 'first'")
    page.blur()
    page.key("n")
    page.b.wait_for("window.umind.ui.study && window.umind.ui.study.id !== 'img0' && !window.umind.ui.busy", 60,
                    "the next sample")
    opened = page.b.js("window.umind.ui.study.id")
    picked = requests.post(f"{server.url}/activelearning/first", json={}, timeout=60).json()["id"]
    assert opened == picked and opened not in ("img0", "img1")  # both have final labels by now or are skipped
    assert page.b.js("new URLSearchParams(location.search).get('image')") == opened
    page.screenshot("next-sample")


@pytest.mark.parametrize("study,frames", [("cine", 4), ("clip", 4), ("nifti", 4)])
def test_a_clips_frame_n_is_answered_on_frame_n(server, page, study, frames):
    page.open(f"image={study}")
    assert page.b.js("window.umind.view.frameCount()") == frames
    page.go_to_frame(2)
    page.b.requests.clear()
    params = page.run(task="segment", prompt="breast lesion")
    assert "done" in page.message(), page.message()
    sent = json.loads(next(p for p in _infer_posts(page))["postData"].split("name=\"params\"")[1].split("\r\n\r\n", 1)[1]
                      .split("\r\n--")[0])
    assert sent["slice"] == 2 and sent["frames"] == "current"
    assert [r["frame_index"] for r in params["umind"]["results"]] == [2]
    masks = page.b.js("[0,1,2,3].map(k => window.umind.view.frameMask(k).reduce((a, b) => a + (b > 0), 0))")
    assert masks[0] == masks[1] == masks[3] == 0
    if study == "cine":
        want = _reply_mask(server, study, {"prompt": "breast lesion", "frames": "current", "slice": 2,
                                           "result_extension": ".nrrd"})
        assert masks[2] == int((want[2] > 0).sum()) > 0
    assert f"frame 3/{frames}" in page.b.js("document.getElementById('umind-frame').textContent")
    page.screenshot(f"{study}-frame-2")
    page.blur()
    page.key("s")
    assert f"label saved for {study}" in page.wait_done()
    saved = _saved_label(server, study)  # one label map for the clip, the answer on frame 2 only
    assert saved.shape[0] == frames and [int((saved[k] > 0).sum()) for k in range(frames)] == masks


def test_other_tasks_are_drawn_and_answered_in_the_panel(server, page):
    page.open("image=img2")
    params = page.run(task="detect", prompt="breast lesion")
    boxes = [o["box"] for r in params["umind"]["results"] for o in r["objects"] if o.get("box")]
    assert boxes and page.b.js("document.querySelectorAll('svg.umind-answers rect.answer').length") == len(boxes)
    drawn = page.b.js("[...document.querySelectorAll('svg.umind-answers rect.answer')].map(r => "
                      "[+r.getAttribute('x'), +r.getAttribute('y'), +r.getAttribute('width'), +r.getAttribute('height')])")
    x0, y0 = page.image_to_screen(boxes[0][0], boxes[0][1])
    x1, y1 = page.image_to_screen(boxes[0][2], boxes[0][3])
    r = page.b.js("document.getElementById('umind-viewport').getBoundingClientRect().left")
    t = page.b.js("document.getElementById('umind-viewport').getBoundingClientRect().top")
    assert abs(drawn[0][0] + r - x0) < 1 and abs(drawn[0][1] + t - y0) < 1
    assert abs(drawn[0][2] - (x1 - x0)) < 1 and abs(drawn[0][3] - (y1 - y0)) < 1
    page.screenshot("detect")
    params = page.run(task="diagnose", prompt="")
    assert page.b.js("document.getElementById('umind-answer').value") == params["answer"]
    assert page.b.js("document.getElementById('umind-finding').value") == params["class"]
    page.screenshot("diagnose")


def test_clicks_and_a_box_ask_the_interactive_model_and_its_mask_is_drawn(server, page):
    page.open("image=img2")
    page.blur()
    page.key("x")
    page.drag([(60, 60), (200, 200)])
    page.key("p")
    page.drag([(130, 130)])  # a click: press and release at one place
    page.b.requests.clear()
    params = page.run(task="segment", prompt="breast lesion")
    ui = page.b.js("({clicks: window.umind.ui.clicks, box: window.umind.ui.box})")
    assert [(c["x"], c["y"], c["sign"]) for c in ui["clicks"]] == [(130, 130, "positive")]
    assert ui["box"]["box"] == [60, 60, 200, 200]
    posts = _infer_posts(page)
    assert len(posts) == 1 and "/infer/umind_interactive?" in posts[0]["url"]
    sent = {"prompt": "breast lesion", "foreground": [[130, 130, 0]], "background": [], "roi": [60, 200, 60, 200, 0, 0],
            "slice": 0, "result_extension": ".nrrd"}
    want = _reply_mask(server, "img2", sent, model="umind_interactive") > 0
    assert params["label_names"] and want.sum() > 0
    assert mask_iou(page.drawn_mask(256, 256, "interactive"), want) >= 0.98
    status = page.b.js("document.getElementById('umind-status').textContent")
    assert "version 0" in status and "of 100" in status, status


def test_landmarks_report_and_ask_on_a_jpeg_study(server, page):
    """A JPEG study; the kidney's landmarks drawn where the reply put them, the report and a question's answer in the
    panel (and the report travels as the label's report)."""
    page.open("image=kidney")
    params = page.run(task="landmarks", prompt="kidney")
    points = [p for r in params["umind"]["results"] for o in r["objects"] for p in o["points"]]
    assert points, params["umind"]["results"]
    drawn = page.b.js("[...document.querySelectorAll('svg.umind-answers circle.answer')].map(c => "
                      "[+c.getAttribute('cx'), +c.getAttribute('cy')])")
    left, top = page.b.js("(() => { const r = document.getElementById('umind-viewport').getBoundingClientRect();"
                          " return [r.left, r.top]; })()")
    want = [page.image_to_screen(x, y) for x, y in points]
    assert len(drawn) == len(want)
    for (dx, dy), (wx, wy) in zip(drawn, want):
        assert abs(dx + left - wx) < 1.5 and abs(dy + top - wy) < 1.5
    page.screenshot("landmarks")
    params = page.run(task="report", prompt="")
    assert params["answer"] and page.b.js("document.getElementById('umind-answer').value") == params["answer"]
    page.blur()
    page.key("s")
    assert "label saved for kidney" in page.wait_done()
    info = requests.get(f"{server.url}/datastore/label/info?label=kidney&tag=final", timeout=30).json()
    assert info["report"] == params["answer"]
    params = page.run(task="ask", prompt="Which organ is shown?")
    assert params["answer"] and page.b.js("document.getElementById('umind-answer').value") == params["answer"]
    page.screenshot("ask")


def test_bad_input_shows_a_message_in_the_panel_not_a_blank_viewer(server, page):
    page.open("image=img0")
    page.run(task="ask", prompt="")
    assert "type a question first" in page.message()
    page.run(task="segment", prompt="x" * 5000)
    assert page.message().startswith("400") and "prompt" in page.message()
    assert page.b.js("window.umind.view.frameCount()") == 1  # the study stays shown
    page.open("image=no-such-study", wait_study=False)
    page.b.wait_for("document.getElementById('umind-message').textContent.includes('404')", 60, "the 404 message")
    assert "no-such-study" in page.message()
    page.screenshot("unknown-study")
    page.open("image=img0")
    page.b.send("Network.emulateNetworkConditions", offline=True, latency=0, downloadThroughput=-1,
                uploadThroughput=-1)
    try:
        page.run(task="segment", prompt="breast lesion")
        assert "cannot be reached" in page.message()
        assert page.b.js("window.umind.view.frameCount()") == 1
        page.screenshot("connection-lost")
    finally:
        page.b.send("Network.emulateNetworkConditions", offline=False, latency=0, downloadThroughput=-1,
                    uploadThroughput=-1)
