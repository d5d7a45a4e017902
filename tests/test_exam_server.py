"""Examinations through the real server: several datastore images, or a clip's frames, read as one exam.

One `monailabel start_server` with the bundled demo model. The demo model is not trained on examinations, so these
tests check the path, not the answer's quality: the views the reply lists, each object on a view that exists and
its markups in that view's geometry, lengths measured with the view's own spacing, and every bad exam a 4xx naming
the problem.
"""

from __future__ import annotations

import json

import numpy as np
import pydicom
import pytest
import requests

from fixtures_imaging import dicom_mono, dicom_mono_multiframe
from server_utils import start_server

pytestmark = [pytest.mark.server, pytest.mark.slow]


def _dicom_view(path, pixels: np.ndarray, spacing_xy, body_part: str):
    grey = pixels if pixels.ndim == 2 else pixels[..., 0]
    dicom_mono(path, grey.astype(np.uint8), pixel_spacing=(spacing_xy[1], spacing_xy[0]))
    ds = pydicom.dcmread(str(path))
    ds.BodyPartExamined = body_part
    ds.save_as(str(path), write_like_original=False)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    from umind_core.data.exams import generate_exam

    root = tmp_path_factory.mktemp("exam_server")
    studies = root / "studies"
    studies.mkdir()
    breast = generate_exam(3, site="breast", n_views=2)
    for k, view in enumerate(breast.views):
        _dicom_view(studies / f"breast{k + 1}.dcm", view.image, view.spacing, "BREAST")
    thyroid = generate_exam(4, site="thyroid", n_views=2).views[0]
    _dicom_view(studies / "thyroid.dcm", thyroid.image, thyroid.spacing, "THYROID")
    for k in range(5):
        _dicom_view(studies / f"plain{k}.dcm", breast.views[k % 2].image, (0.2, 0.2), "")
    dicom_mono_multiframe(studies / "cine.dcm", n=4)
    conf = {"workdir": str(root / "work"), "auto_retrain": "false", "max_new_tokens": "96", "max_exam_views": "3"}
    srv = start_server(studies, conf, root / "server.log")
    srv.spacings = {f"breast{k + 1}": v.spacing for k, v in enumerate(breast.views)}
    yield srv
    srv.stop()


def interpret(server, image: str, params: dict) -> requests.Response:
    return requests.post(f"{server.url}/infer/umind_interpret?image={image}",
                         data={"params": json.dumps(params)}, timeout=300)


@pytest.mark.parametrize("task", ["report", "diagnose", "measure"])
def test_two_views_answer_as_one_examination_with_each_object_on_its_view(server, task):
    params = {"task": task, "images": ["breast1", "breast2"]}
    if task == "measure":
        params["prompt"] = "breast lesion long axis"
    resp = interpret(server, "breast1", params)
    assert resp.status_code == 200, resp.text
    body = resp.json()
    views = body["exam"]["views"]
    assert [(v["view"], v["image"], v["frame"]) for v in views] == [(0, "breast1", 0), (1, "breast2", 0)]
    assert body["task"] == task and isinstance(body["answer"], str) and body["answer"].strip()
    assert body["geometry"] == views[0]["geometry"] and all(v["geometry"]["calibrated"] for v in views)
    for v in views:  # the geometry a client places view k's markups in: that view's own calibrated spacing
        assert v["geometry"]["frame_spacing"] == pytest.approx(list(server.spacings[v["image"]]))
    per_view = [0, 0]
    for obj in body["objects"]:
        assert obj["view"] in (0, 1)
        per_view[obj["view"]] += bool(obj.get("box") or obj.get("line") or obj.get("points"))
        if obj.get("line"):  # measured with its own view's spacing
            (x1, y1, x2, y2), (sx, sy) = obj["line"], server.spacings[f"breast{obj['view'] + 1}"]
            assert obj["physical"]["length_mm"] == pytest.approx(np.hypot((x2 - x1) * sx, (y2 - y1) * sy), rel=1e-3)
    assert [len(v["markups"]) > 0 for v in views] == [n > 0 for n in per_view]
    if task == "diagnose":
        assert body["class"] in (None, "normal", "benign", "malignant")
    lat = body["latencies"]  # the keys and sum of an image's reply (`infers.base._latencies`, one rule for both)
    assert set(lat) == {"pre", "load", "infer", "post", "total"} and all(v >= 0 for v in lat.values())
    assert lat["total"] == pytest.approx(lat["pre"] + lat["load"] + lat["infer"] + lat["post"], abs=1e-3)


def test_a_segment_exam_returns_each_views_label_map_in_that_views_geometry(server, tmp_path):
    import base64

    import SimpleITK as sitk

    from umind_core.data.exams import generate_exam

    shapes = [view.image.shape[:2] for view in generate_exam(3, site="breast", n_views=2).views]  # the fixture's
    resp = interpret(server, "breast1", {"task": "segment", "prompt": "breast lesion", "images": ["breast2"]})
    assert resp.status_code == 200, resp.text
    body = resp.json()
    views = body["exam"]["views"]
    pixels = {k: 0 for k in range(2)}
    for obj in body["objects"]:
        if obj.get("mask"):
            pixels[obj["view"]] += obj["mask"]["pixels"]
    for k, v in enumerate(views):
        label = v["label"]
        assert label["label_names"] == {"breast lesion": 1}
        path = tmp_path / f"view{k}{label['file'][len('labels'):]}"
        path.write_bytes(base64.b64decode(label["data"]))
        img = sitk.ReadImage(str(path))
        arr = sitk.GetArrayFromImage(img)
        # the view's own size and calibrated spacing, and exactly its own objects' pixels
        assert arr.shape[-2:] == shapes[k]
        assert img.GetSpacing()[:2] == pytest.approx(v["geometry"]["frame_spacing"])
        assert v["geometry"]["frame_spacing"] == pytest.approx(list(server.spacings[v["image"]]))
        assert int((arr == 1).sum()) == pixels[k]


def test_the_request_image_may_lead_or_be_left_out_of_images(server):
    a = interpret(server, "breast2", {"task": "diagnose", "images": ["breast1"]})
    b = interpret(server, "breast2", {"task": "diagnose", "images": ["breast2", "breast1"]})
    assert a.status_code == b.status_code == 200
    assert [v["image"] for v in a.json()["exam"]["views"]] == ["breast2", "breast1"]
    assert a.json()["answer"] == b.json()["answer"]


def test_a_clips_frames_are_the_views_with_exam_frames(server):
    resp = interpret(server, "cine", {"task": "report", "exam": "frames", "frames": [0, 2]})
    assert resp.status_code == 200, resp.text
    assert [(v["image"], v["frame"]) for v in resp.json()["exam"]["views"]] == [("cine", 0), ("cine", 2)]


def test_an_exams_caliper_readout_is_the_requests_choice(server):
    """A lesion caliper across views is read off the model's masks unless the request asks for the line it writes."""
    params = {"task": "measure", "prompt": "breast lesion long axis", "images": ["breast1", "breast2"]}
    texts = {}
    for readout in ("tokens", None):
        resp = interpret(server, "breast1", {**params, "readout": readout})
        assert resp.status_code == 200, resp.text
        texts[readout] = resp.json()["text"]
    assert "<|seg_mask|>" in texts[None] and "<|seg_mask|>" not in texts["tokens"]


@pytest.mark.parametrize("image, params, status, words", [
    ("breast1", {"task": "report", "images": ["thyroid"]}, 400, "view 2 ('thyroid') shows 'thyroid'"),
    ("breast1", {"task": "report", "images": []}, 400, "images is empty"),
    ("breast1", {"task": "report", "images": ["plain0", "plain1", "plain2"]}, 400, "max_exam_views = 3"),
    ("breast1", {"task": "report", "images": ["breast2", "breast2"]}, 400, "listed twice"),
    ("breast1", {"task": "report", "images": ["nope"]}, 404, "nope"),
    ("breast1", {"task": "report", "images": ["../etc/passwd"]}, 400, "not a datastore id"),
    ("breast1", {"task": "report", "images": "breast2"}, 400, "must be a list"),
    ("breast1", {"task": "explain", "images": ["breast2"]}, 400, "examination's task must be one of"),
    ("cine", {"task": "report", "exam": "frames", "frames": [0, 1, 2, 3]}, 400, "max_exam_views = 3"),
    ("cine", {"task": "report", "exam": "frames", "frames": [1]}, 400, "at least 2 views; it has 1"),
    ("cine", {"task": "report", "exam": "views"}, 400, "exam must be 'frames'"),
    ("breast1", {"task": "measure", "prompt": "breast lesion long axis", "images": ["breast2"], "readout": 1}, 400,
     "readout must be one of mask, tokens, got 1"),
])
def test_bad_examinations_are_a_4xx_naming_the_problem(server, image, params, status, words):
    resp = interpret(server, image, params)
    assert resp.status_code == status, resp.text
    assert words in resp.text


def test_only_interpret_reads_an_examination_and_a_client_cannot_name_server_paths(server):
    resp = requests.post(f"{server.url}/infer/umind_segment?image=breast1",
                         data={"params": json.dumps({"images": ["breast2"]})}, timeout=120)
    assert resp.status_code == 400 and "interpret task" in resp.text
    sneaky = {"task": "report", "_umind_exam_paths": ["/etc/hostname", "/etc/hostname"],
              "_umind_exam_ids": ["a", "b"]}
    body = interpret(server, "breast1", sneaky).json()  # the wall drops the keys: a single-image answer
    assert "exam" not in body


def test_the_site_recorded_with_an_image_counts_too(server):
    put = requests.put(f"{server.url}/datastore/image/info?image=plain3", data={"info": json.dumps({"site": "kidney"})},
                       timeout=30)
    assert put.status_code == 200, put.text
    resp = interpret(server, "breast1", {"task": "report", "images": ["plain3"]})
    assert resp.status_code == 400 and "shows 'kidney'" in resp.text
    assert interpret(server, "breast1", {"task": "report", "images": ["plain4"]}).status_code == 200


def test_an_examination_is_batched_beside_image_requests_and_answers_as_alone(server):
    """An examination is one Job of its views handed to the scheduler as every request's jobs: sent together with
    image requests, each reply equals its lone reply, and the scheduler counted the examination's batch."""
    from concurrent.futures import ThreadPoolExecutor

    exam = {"task": "report", "images": ["breast1", "breast2"]}

    def image(name: str) -> requests.Response:
        return requests.post(f"{server.url}/infer/umind_interpret?image={name}",
                             data={"params": json.dumps({"task": "report"})}, timeout=300)

    def batches() -> int:
        return requests.get(server.url + "/info/", timeout=30).json()["umind"]["batching"]["batches"]

    alone_image = image("plain0").json()
    before = batches()
    alone_exam = interpret(server, "breast1", exam).json()
    assert batches() == before + 1  # the examination ran as one of the scheduler's batches
    with ThreadPoolExecutor(4) as pool:
        futures = [pool.submit(interpret, server, "breast1", exam)] + [pool.submit(image, "plain0") for _ in range(3)]
        replies = [f.result() for f in futures]
    assert all(r.status_code == 200 for r in replies), [r.text for r in replies]
    together = replies[0].json()
    assert together["text"] == alone_exam["text"] and together["objects"] == alone_exam["objects"]
    assert [v["image"] for v in together["exam"]["views"]] == ["breast1", "breast2"]
    for r in replies[1:]:
        assert r.json()["frames"][0]["text"] == alone_image["frames"][0]["text"] and "exam" not in r.json()
