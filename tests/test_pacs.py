"""A real PACS in the loop: Orthanc + DICOMweb, the UMind server on `--studies http://.../dicom-web`.

The synthetic studies are written as DICOM US (region spacing, cine, YBR, palette colour) and uploaded with
STOW-RS; the server lists them, every infer task answers on each series fetched over DICOMweb, a corrected label
comes back as training data (kept in the server's PACS cache, not written to the PACS; lib/pacs.py says why),
`umind_lora` trains from it, and OHIF's DICOMweb proxy passes through the server's wall. Skipped, with the one
line saying what to install, where Orthanc is not installed.
"""

from __future__ import annotations

import io
import json
import os
import signal
from pathlib import Path

import numpy as np
import pytest
import requests
from PIL import Image

from browser import Browser
from ohif_flow import body_text, connect_panel, infer_calls, run_auto_segmentation, set_prompt, shot
from orthanc import start_orthanc
from pacs_studies import CINE_FRAMES, SIZE, write_pacs_studies, write_refused_series
from server_utils import start_server
from system_packages import missing_line
from test_server import multipart, read_label

if missing_line(("orthanc",)):
    pytest.skip(missing_line(("orthanc",)), allow_module_level=True)

pytestmark = [pytest.mark.server, pytest.mark.slow]

PROMPT = "breast lesion"
#: screenshots of the OHIF run (not committed: /runs/ is ignored)
OHIF_OUT = Path(os.environ.get("UMIND_TEST_OUTPUT", Path(__file__).resolve().parents[1] / "runs" / "test-output"))\
    / "ohif"
TASKS = ("umind_segment", "umind_interactive", "umind_detect", "umind_landmarks", "umind_interpret")


@pytest.fixture(scope="module")
def pacs(tmp_path_factory):
    root = tmp_path_factory.mktemp("pacs")
    orthanc = start_orthanc(root / "orthanc")
    studies = write_pacs_studies(root / "upload")
    refused = write_refused_series(root / "upload-refused")
    orthanc.stow([s.path for s in studies.values()] + [root / "upload-refused" / f for f in
                                                       ("ct.dcm", "no_pixels.dcm")])
    orthanc.studies, orthanc.refused, orthanc.root = studies, refused, root
    yield orthanc
    orthanc.stop()


@pytest.fixture(scope="module")
def server(pacs):
    conf = {"workdir": str(pacs.root / "work"), "retrain_every": "100", "max_new_tokens": "64", "max_steps": "1",
            "rehearsal_pool": "2", "regression_size": "2", "gate_min_samples": "1", "val_fraction": "0.5"}
    srv = start_server(pacs.root, conf, pacs.root / "server.log", timeout=300,
                       env={"MONAI_LABEL_AUTO_UPDATE_SCORING": "false", "MONAI_LABEL_DICOMWEB_PROXY_TIMEOUT": "4"},
                       studies_arg=pacs.dicomweb)
    yield srv
    srv.stop()


def infer(server, task: str, image: str, params: dict | None = None) -> requests.Response:
    return requests.post(f"{server.url}/infer/{task}?image={image}", data={"params": json.dumps(params or {})},
                         timeout=120)


def test_datastore_lists_the_ultrasound_series_of_the_pacs(server, pacs):
    stats = server.get_json("/datastore/?output=stats")
    # 4 studies + the US instance without pixels; the CT series is not ultrasound and is not listed
    assert stats["total"] == len(pacs.studies) + 1
    assert stats["completed"] == 0


def test_segment_on_each_dicomweb_series_has_its_frames_and_spacing(server, pacs):
    for study in pacs.studies.values():
        resp = infer(server, "umind_segment", study.series_uid, {"prompt": PROMPT})
        assert resp.status_code == 200, f"{study.name}: {resp.status_code} {resp.text[:300]}"
        reply, data = multipart(resp)
        results = reply["umind"]["results"]
        assert sorted(r["frame_index"] for r in results) == list(range(study.frames)), study.name
        labels = read_label(data, ".nrrd")  # a DICOM input gets NRRD (keeps spacing; lib: label_map_suffix)
        assert labels.shape == ((SIZE, SIZE) if study.frames == 1 else (CINE_FRAMES, SIZE, SIZE)), study.name
        mask = (labels if study.frames == 1 else labels[0]) > 0
        inside = (mask & study.lesion).sum() / max(mask.sum(), 1)
        assert mask.sum() > 0 and inside > 0.5, f"{study.name}: {inside:.2f} of the mask inside the lesion"
        objects = [o for r in results for o in r["objects"]]
        assert objects, study.name
        for o in objects:  # the US region's spacing (cm in the file) reached the model's results, in mm
            assert o["physical"]["spacing_mm"] == pytest.approx(list(study.spacing_mm), rel=1e-6), study.name


def test_every_infer_task_answers_on_a_dicomweb_series(server, pacs):
    study = pacs.studies["single frame"]
    params = {"umind_interactive": {"foreground": [[100, 110, 0]]}, "umind_interpret": {"task": "diagnose"}}
    for task in TASKS:
        resp = infer(server, task, study.series_uid, {"prompt": PROMPT, **params.get(task, {})})
        assert resp.status_code == 200, f"{task}: {resp.status_code} {resp.text[:300]}"
        reply, _ = multipart(resp)
        assert reply["umind"]["version"] == 0, task
    assert reply["task"] == "diagnose" and reply["answer"], reply  # the last task: umind_interpret's JSON


def test_bad_series_answer_4xx_naming_the_series(server, pacs):
    ct, empty = pacs.refused["ct"], pacs.refused["no pixels"]
    resp = infer(server, "umind_segment", ct)
    assert resp.status_code == 400 and ct in resp.text and "not ultrasound" in resp.text, resp.text
    resp = infer(server, "umind_segment", empty)
    assert resp.status_code == 400 and empty in resp.text and "PixelData" in resp.text, resp.text
    resp = infer(server, "umind_segment", "1.2.3.4.5.6.7")
    assert resp.status_code == 404 and "1.2.3.4.5.6.7" in resp.text, resp.text
    resp = infer(server, "umind_segment", "..%2F..%2Fetc%2Fpasswd")
    assert resp.status_code == 400 and "not a datastore id" in resp.text, resp.text


def _label_png(mask: np.ndarray) -> bytes:
    """The corrected lesion as an integer label map of a single-frame image."""
    buf = io.BytesIO()
    Image.fromarray(mask.astype(np.uint8)).save(buf, format="PNG")
    return buf.getvalue()


def test_corrected_label_comes_back_and_umind_lora_trains_from_it(server, pacs):
    studies = [s for s in pacs.studies.values() if s.frames == 1]
    for s in studies:
        resp = requests.put(f"{server.url}/datastore/label?image={s.series_uid}&tag=final",
                            files={"label": ("label.png", _label_png(s.lesion))},
                            data={"params": json.dumps({"label_names": {"breast lesion": 1}})}, timeout=60)
        assert resp.status_code == 200, resp.text
    assert server.get_json("/datastore/?output=stats")["completed"] == len(studies)
    exported = {d["image"]: d for d in server.get_json("/datastore/?output=train")}  # file names, never paths
    for s in studies:
        assert exported[f"{s.series_uid}.dcm"]["label"] == f"{s.series_uid}.png"
        label = requests.get(f"{server.url}/datastore/label", params={"label": s.series_uid, "tag": "final"},
                             timeout=60)
        back = np.asarray(Image.open(io.BytesIO(label.content))) > 0
        assert np.array_equal(back, s.lesion)
    # not written back to the PACS as DICOM SEG: the PACS holds exactly what was uploaded
    seg = requests.get(f"{pacs.dicomweb}/series", params={"Modality": "SEG"}, timeout=30).json()
    assert seg == [] or seg is None
    resp = requests.post(f"{server.url}/train/umind_lora", json={"max_steps": 1}, timeout=60)
    assert resp.status_code == 200, resp.text
    assert server.wait_train(timeout=1500)["status"] == "DONE", server.log_tail()  # a hang guard
    run = server.get_json("/info/")["umind"]["runs"][-1]
    assert run["status"] in ("promoted", "rejected"), run
    assert sorted(run["train_images"] + run["val_images"]) == sorted(s.series_uid for s in studies), run


def test_ohif_dicomweb_proxy_passes_the_wall(server, pacs):
    s = pacs.studies["single frame"]
    series = requests.get(f"{server.url}/proxy/dicom/qido/series", params={"SeriesInstanceUID": s.series_uid},
                          timeout=30)
    assert series.status_code == 200 and s.series_uid in series.text
    for hostile in ("..%2F..%2Ftools%2Fnow", "studies/..%2F..%2F..%2Fsystem", "%2E%2E/%2E%2E/system"):
        resp = requests.get(f"{server.url}/proxy/dicom/qido/{hostile}", timeout=30)
        assert resp.status_code == 400 and "DICOMweb" in resp.text, (hostile, resp.status_code, resp.text[:200])


def test_ohif_monai_label_panel_on_a_pacs_study(server, pacs, tmp_path):
    """What works in the bundled OHIF with UMind and a PACS; README "OHIF" says what does not, and why."""
    if missing_line(("chromium",)):
        pytest.skip(missing_line(("chromium",)))
    study = pacs.studies["single frame"]
    browser = Browser(tmp_path / "chromium")
    try:
        browser.goto(f"{server.url}/ohif/monai-label?StudyInstanceUIDs={study.study_uid}")
        connect_panel(browser, server.url, timeout=300)
        shot(browser, OHIF_OUT, "01_panel_connected")
        # the study came from Orthanc through UMind's guarded proxy: listed, and its thumbnail rendered from WADO-RS
        assert study.name in body_text(browser)
        browser.wait_for("Array.from(document.images).some(i => i.src.startsWith('data:image') && "
                         "i.naturalWidth > 0)", 120, "the series thumbnail")
        proxied = [r for r in browser.requests.values() if "/proxy/dicom/" in r["url"] and r["status"]]
        assert proxied and all(r["status"] == 200 for r in proxied), proxied
        # UMind's tasks in the panel: umind_segment under Auto-Segmentation, umind_interactive under Point Prompts
        options = browser.js("Array.from(document.querySelectorAll('.modelSelector option')).map(o => o.value)")
        assert "umind_segment" in options and "umind_interactive" in options, options
        # the text prompt is umind_segment's `prompt` option: the Options dialog renders it as a text field
        assert set_prompt(browser, "umind_segment", PROMPT, timeout=120)
        shot(browser, OHIF_OUT, "02_prompt_set")
        # the MONAI Label mode lays studies out for MPR only: a 2D ultrasound frame is not reconstructable, so
        # the viewports stay empty and Run has no image to send (README "OHIF and 2D ultrasound")
        run_auto_segmentation(browser, "umind_segment", timeout=60)
        browser.pump(10)
        shot(browser, OHIF_OUT, "03_after_run")
        assert infer_calls(browser, "umind_segment") == []
    finally:
        browser.close()


def test_the_browser_viewer_opens_a_pacs_cine_and_answers_its_frame_in_mm(server, pacs, tmp_path):
    """A PACS series in the UMind viewer (the server fetches it over DICOMweb, the page loads it with Cornerstone's
    DICOM loader): all frames, frame 2 segmented on frame 2 with the server's mask on screen, and a caliper's
    length in mm from the ultrasound regions (the server's figure, to one decimal)."""
    if not (Path(__file__).resolve().parents[1] / "web/dist/index.html").is_file():
        pytest.skip("viewer not built: scripts/web.sh needs node and npm (apt-get install nodejs npm)")
    from umind_core.evaluation.metrics import mask_iou
    from viewer_page import ViewerPage

    study = pacs.studies["cine"]
    page = ViewerPage.start(server.url, tmp_path / "profile", OHIF_OUT.parent / "viewer-pacs")
    try:
        page.open(f"image={study.series_uid}")
        assert page.b.js("window.umind.view.frameCount()") == CINE_FRAMES
        page.go_to_frame(2)
        params = page.run(task="segment", prompt=PROMPT)
        assert [r["frame_index"] for r in params["umind"]["results"]] == [2]
        resp = infer(server, "umind_segment", study.series_uid, {"prompt": PROMPT, "frames": "current", "slice": 2,
                                                                  "umind_client": "web-viewer"})
        want = read_label(multipart(resp)[1], ".nrrd")[2] > 0
        assert want.sum() > 0 and mask_iou(page.drawn_mask(SIZE, SIZE, "pacs-cine-frame-2"), want) >= 0.98
        params = page.run(task="measure", prompt="breast lesion long axis")
        lengths = [m for m in params.get("measurements", []) if m.get("length_mm") is not None]
        assert lengths, params.get("measurements")
        text = page.b.js("[...document.querySelectorAll('svg.umind-answers text.length')].map(t => t.textContent)")
        assert any(f"{lengths[0]['length_mm']:.1f} mm" in t for t in text), (text, lengths)
        page.screenshot("pacs-measure")
    finally:
        page.close()


def test_pacs_down_and_slow_are_5xx_not_hangs(server, pacs):
    pacs.proc.send_signal(signal.SIGSTOP)  # a PACS that accepts connections and never answers
    try:
        # answered by the server's own read timeout (MONAI_LABEL_DICOMWEB_PROXY_TIMEOUT = 4), not after retries:
        # that each call to the PACS is made once is counted in test_pacs_calls.py (no timing asserted here)
        resp = infer(server, "umind_segment", "1.2.3.4.5.6.8")
        assert resp.status_code == 504 and "1.2.3.4.5.6.8" in resp.text, resp.text
        assert "did not answer within 4 s" in resp.text, resp.text
    finally:
        pacs.proc.send_signal(signal.SIGCONT)
    pacs.stop()
    resp = infer(server, "umind_segment", "1.2.3.4.5.6.9")
    assert resp.status_code == 502 and "cannot be reached" in resp.text and "1.2.3.4.5.6.9" in resp.text
    # series already in the cache still answer while the PACS is down
    assert infer(server, "umind_interpret", pacs.studies["cine"].series_uid).status_code == 200
