"""`umind infer`'s output folders: one distinct name per input whatever the file system's case rule, the
longest known suffix taken off, and only a results.json of our own format marking an input done."""

from __future__ import annotations

import json
from pathlib import Path

from umind_core import batch


def test_the_longest_known_suffix_is_taken_off():
    assert batch.output_names([Path("in/scan.nii.gz"), Path("in/clip.nrrd")]) == ["scan", "clip"]


def test_names_differ_without_regard_to_case(tmp_path):
    for name in ("Scan.png", "scan.PNG"):
        (tmp_path / name).write_bytes(b"x")
    names = batch.output_names([tmp_path / "Scan.png", tmp_path / "scan.PNG"])
    assert len({n.lower() for n in names}) == 2, names  # on a case-insensitive disk both would be one folder


def test_only_a_results_file_of_our_format_marks_an_input_done(tmp_path):
    request = {"task": "segment", "prompt": "lesion"}
    (tmp_path / batch.RESULTS_NAME).write_text(json.dumps({"request": request}))
    assert batch.existing_request(tmp_path) is None  # someone else's results.json: redo
    (tmp_path / batch.RESULTS_NAME).write_text(json.dumps({"format": batch.RESULTS_FORMAT, "request": request}))
    assert batch.existing_request(tmp_path) == request
