"""The server's examination reply and request reading in-process (`lib/exam.py`), the error names an infer reply
carries (`lib/infers/base._named`) and the params a request may not set (`lib/offloop.py`): what a client sends and
reads, without a model run."""

from __future__ import annotations

import base64
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from PIL import Image

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "monailabel_app"))

from fastapi import HTTPException  # noqa: E402
from lib.exam import exam_reply, read_exam  # noqa: E402
from lib.infers.base import _named  # noqa: E402
from lib.wall.errors import BadRequest  # noqa: E402
from lib.wall.exam_ref import EXAM_IDS, EXAM_PATHS  # noqa: E402

from umind_core.answers.results import GroundedObject, Result  # noqa: E402
from umind_core.exam_views import read_views  # noqa: E402
from umind_core.imageio import read_study  # noqa: E402


@pytest.fixture
def exam(tmp_path):
    studies = []
    for k, size in enumerate([(40, 30), (48, 32)]):
        path = tmp_path / f"v{k}.png"
        Image.fromarray(np.full(size[::-1], 90 + k, np.uint8)).save(path)
        studies.append(read_study(str(path)))
    return read_views(["v0", "v1"], studies, [0, 0], [[], ["view 2 (v1): read at frame 0"]], None)


def _segment(unparsable: bool) -> Result:
    mask = np.zeros((32, 48), bool)
    mask[4:12, 5:20] = True
    objects = [] if unparsable else [GroundedObject(label="lesion", mask=mask, view=1)]
    return Result(task="segment", prompt="lesion", text="", answer="" if unparsable else "lesion", objects=objects,
                  warnings=["the model's own warning"], unparsable=unparsable)


def test_each_views_label_map_and_every_views_notes_reach_the_reply(exam):
    body = exam_reply(_segment(False), exam, "segment", "lesion", calibrate=False)
    views = body["exam"]["views"]
    assert [v["image"] for v in views] == ["v0", "v1"]
    labels = [v["label"] for v in views]
    assert [lab["label_names"] for lab in labels] == [{"lesion": 1}, {"lesion": 1}]
    assert all(base64.b64decode(lab["data"]) for lab in labels)
    assert views[1]["warnings"] == ["view 2 (v1): read at frame 0"]
    assert body["warnings"] == ["the model's own warning", "view 2 (v1): read at frame 0"]


def test_an_unparsable_segment_writes_no_label_map(exam):
    body = exam_reply(_segment(True), exam, "segment", "lesion", calibrate=False)
    assert all("label" not in v for v in body["exam"]["views"])


def test_images_and_exam_frames_together_are_refused(exam):
    opts = {"exam": "frames", "frames": [0], EXAM_PATHS: ["/x/v1.png"], EXAM_IDS: ["v0", "v1"]}
    with pytest.raises(BadRequest, match="give either images"):
        read_exam(opts, exam.studies[0], SimpleNamespace(max_exam_views=4))


def test_an_error_names_the_image_file_never_its_server_path():
    path = "/srv/studies/private/patient7.dcm"
    err = _named(HTTPException(400, f"segment on {{image}}: cannot read {path}"), path)
    assert err.detail == "segment on 'patient7.dcm': cannot read patient7.dcm"
    assert _named(HTTPException(400, "x on {image}"), "img0").detail == "x on 'img0'"


def test_a_label_param_is_a_segment_name_never_a_path_or_a_control_string():
    """The stock extension names the segment it edits in `label`; anything that is not a plain name is refused
    like the other keys the server sets."""
    import json

    from lib.offloop import _check_request

    _check_request("img0", "", json.dumps({"label": "breast lesion"}), None, None)
    for bad in ("../../etc/passwd", "lesion\x00", "a\u202eb"):
        with pytest.raises(HTTPException) as info:
            _check_request("img0", "", json.dumps({"label": bad}), None, None)
        assert info.value.status_code == 400 and "may not set label" in info.value.detail


@pytest.mark.parametrize("value, flagged", [(True, True), ("true", True), ("YES", True), ("1", True), (1, True),
                                            (False, False), ("false", False), ("", False), (None, False)])
def test_save_label_is_read_in_every_spelling_the_task_reads_it(value, flagged):
    """Whether a request saves a label (and so needs the annotator role) is read as the infer task reads the
    flag: a string "true" is a save, and must not pass the role check as "not a bool"."""
    import json

    from lib.offloop import _flag

    assert _flag(json.dumps({"save_label": value}), "save_label") is flagged
