"""`umind infer --exam`: a folder of views, or one file's frames, read as one examination.

The tiny model is untrained, so the model's answer is forced (as tests/test_exam_predict.py does): these tests check
that each view's objects land in that view's folder, in its geometry and millimetres, and that bad examinations
fail alone with one line naming the problem.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pydicom
import pytest

from fixtures_imaging import dicom_mono, dicom_mono_multiframe, ramp
from forced_answer import force_answer
from umind_core.answers import grounding
from umind_core.cli import main
from umind_core.answers.grounding import Box, Line
from umind_core.imageio import line_length


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    from umind_core.modeling.tiny import build_model

    return build_model("tiny").save_pretrained(tmp_path_factory.mktemp("model") / "umind")


def _view(path: Path, seed: int, spacing_rc, body_part: str = "BREAST", shape=(48, 64)) -> Path:
    dicom_mono(path, ramp(*shape, seed=seed), pixel_spacing=spacing_rc)
    ds = pydicom.dcmread(str(path))
    ds.BodyPartExamined = body_part
    ds.save_as(str(path), write_like_original=False)
    return path


def _exam_folder(root: Path, n: int = 2, parts=None) -> Path:
    root.mkdir(parents=True)
    spacings = [(0.2, 0.25), (0.5, 0.4), (0.3, 0.3), (0.1, 0.1), (0.2, 0.2)]
    for k in range(n):
        _view(root / f"v{k + 1}.dcm", k, spacings[k], (parts or ["BREAST"] * n)[k], shape=(48 + 8 * k, 64))
    return root


def _infer(capsys, model_dir, *argv) -> tuple[int, str, str]:
    rc = main(["infer", *map(str, argv), "--model", str(model_dir), "--quiet", "--max-new-tokens", "8"])
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


def _doc(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def test_a_folder_is_one_examination_and_each_view_gets_its_objects(tmp_path, capsys, model_dir, monkeypatch):
    exam = _exam_folder(tmp_path / "exam1")
    line = Line(100, 500, 900, 500)
    force_answer(monkeypatch, f"View 1: {grounding.format_box(Box(100, 100, 600, 600), 'lesion')} "
                        f"View 2: {grounding.format_line(line, 'lesion long axis')} Length: 99.0 mm.")
    rc, out, err = _infer(capsys, model_dir, exam, "--exam", "--task", "measure", "--prompt", "lesion long axis",
                          "--readout", "tokens", "--out", tmp_path / "out")
    assert rc == 0, err
    assert out.startswith("umind infer: 1 inputs, 2 frames, 0 failed")
    doc = _doc(tmp_path / "out" / "exam1" / "results.json")
    assert doc["exam"] is True and doc["request"]["exam"] is True and doc["task"] == "measure"
    assert [(v["view"], Path(v["input"]).name, v["folder"]) for v in doc["views"]] == [
        (0, "v1.dcm", "view-1"), (1, "v2.dcm", "view-2")]
    assert [o["view"] for o in doc["objects"]] == [0, 1]
    # the caliper is in view 2's pixels (56 rows) and millimetres (0.4 x 0.5 mm), in the answer and on disk
    x1, y1, x2, y2 = grounding.line_from_grid(line, 64, 56)
    mm = math.hypot((x2 - x1) * 0.4, (y2 - y1) * 0.5)
    assert doc["objects"][1]["physical"]["length_mm"] == pytest.approx(mm)
    assert str(line_length((x1, y1, x2, y2), (0.4, 0.5))) in doc["answer"] and "99.0" not in doc["answer"]
    v1 = _doc(tmp_path / "out" / "exam1" / "view-1" / "results.json")
    v2 = _doc(tmp_path / "out" / "exam1" / "view-2" / "results.json")
    assert [o["label"] for o in v1["results"][0]["objects"]] == ["lesion"]
    assert v1["results"][0]["objects"][0]["box"] is not None
    (obj2,) = v2["results"][0]["objects"]
    assert obj2["line"] == pytest.approx([x1, y1, x2, y2]) and v2["input"].endswith("v2.dcm")
    assert v2["output_geometry"]["frame_spacing"] == pytest.approx([0.4, 0.5])
    markups = json.loads((tmp_path / "out" / "exam1" / "view-2" / "markups.mrk.json").read_text())
    assert [m["type"] for m in markups["markups"]] == ["Line"]
    # done: a rerun skips it; the same folder without --exam is another request
    rc, out, _ = _infer(capsys, model_dir, exam, "--exam", "--task", "measure", "--prompt", "lesion long axis",
                        "--readout", "tokens", "--out", tmp_path / "out")
    assert rc == 0 and "1 skipped" in out


def test_a_segment_exam_writes_each_views_mask_in_its_own_label_map(tmp_path, capsys, model_dir, monkeypatch):
    exam = _exam_folder(tmp_path / "exam2", n=3)
    force_answer(monkeypatch, "View 3: " + grounding.format_mask("lesion"), mask_groups=1)
    rc, _, err = _infer(capsys, model_dir, exam, "--exam", "--task", "segment", "--prompt", "lesion",
                        "--out", tmp_path / "out")
    assert rc == 0, err
    base = tmp_path / "out" / "exam2"
    assert sorted(p.name for p in base.iterdir()) == ["results.json", "view-1", "view-2", "view-3"]
    import SimpleITK as sitk

    (obj,) = _doc(base / "view-3" / "results.json")["results"][0]["objects"]
    assert obj["mask"]["shape"] == [64, 64]  # view 3's own size
    for k, rows in ((1, 48), (2, 56), (3, 64)):
        labels = sitk.GetArrayFromImage(sitk.ReadImage(str(next((base / f"view-{k}").glob("labels.*")))))
        assert labels.shape[-2:] == (rows, 64)
        # views 1 and 2 hold no object: empty label maps; view 3's holds exactly its mask
        assert int((labels != 0).sum()) == (obj["mask"]["pixels"] if k == 3 else 0)


def test_parallel_examinations_answer_as_one_after_another(tmp_path, capsys, model_dir, monkeypatch):
    """--parallel 2 hands each examination to the scheduler as one Job of its views: the same answers and files
    as running them one after another."""
    for k in range(3):
        _exam_folder(tmp_path / "in" / f"exam{k}", n=2 + k % 2)
    force_answer(monkeypatch, f"View 2: {grounding.format_box(Box(100, 100, 600, 600), 'lesion')}")
    from umind_core.inference.scheduler import BatchScheduler

    handed, schedulers, original = [], set(), BatchScheduler.predict
    monkeypatch.setattr(BatchScheduler, "predict", lambda self, jobs: schedulers.add(self)
                        or handed.append([len(j.image) for j in jobs]) or original(self, jobs))
    docs = {}
    for parallel in (1, 2):
        out = tmp_path / f"out{parallel}"
        rc, stdout, err = _infer(capsys, model_dir, tmp_path / "in" / "exam0", tmp_path / "in" / "exam1",
                                 tmp_path / "in" / "exam2", "--exam", "--task", "detect", "--prompt", "lesion",
                                 "--readout", "tokens", "--parallel", parallel, "--out", out)
        assert rc == 0 and stdout.startswith("umind infer: 3 inputs, 7 frames, 0 failed"), err
        docs[parallel] = {k: _doc(out / f"exam{k}" / "results.json") for k in range(3)}
        assert sorted(handed) == ([] if parallel == 1 else [[2], [2], [3]])  # one Job of its views each
    assert len(schedulers) == 1 and next(iter(schedulers))._worker is None  # closed with the run, not left idling
    for k in range(3):
        one, two = docs[1][k], docs[2][k]
        assert one["objects"] == two["objects"] and one["answer"] == two["answer"]
        assert [o["view"] for o in two["objects"]] == [1] and len(two["views"]) == 2 + k % 2


def test_one_files_frames_are_the_views(tmp_path, capsys, model_dir, monkeypatch):
    clip, _ = dicom_mono_multiframe(tmp_path / "sweep.dcm", n=4)
    force_answer(monkeypatch, "Normal study.")
    rc, _, err = _infer(capsys, model_dir, clip, "--exam", "--task", "report", "--frames", "1-2",
                        "--out", tmp_path / "out")
    assert rc == 0, err
    doc = _doc(tmp_path / "out" / "sweep" / "results.json")
    assert [(v["view"], v["frame"]) for v in doc["views"]] == [(0, 1), (1, 2)]
    assert doc["answer"] == "Normal study."


@pytest.mark.parametrize("make, words", [
    (lambda p: _exam_folder(p, n=5), "5 views (image files in the folder), more than the 4"),
    (lambda p: _exam_folder(p, n=1), "at least 2 views; it has 1"),
    (lambda p: _exam_folder(p, n=2, parts=["BREAST", "THYROID"]), "shows 'thyroid', an earlier view 'breast'"),
])
def test_bad_examinations_fail_alone_with_one_line(tmp_path, capsys, model_dir, monkeypatch, make, words):
    bad = make(tmp_path / "bad")
    good = _exam_folder(tmp_path / "good")
    force_answer(monkeypatch, "Normal study.")
    rc, out, _ = _infer(capsys, model_dir, bad, good, "--exam", "--task", "report", "--out", tmp_path / "out")
    assert rc == 1
    assert f"FAILED {bad}: " in out and words in out, out
    assert (tmp_path / "out" / "good" / "results.json").is_file()
    assert not (tmp_path / "out" / "bad" / "results.json").exists()
    assert "1 failed" in out


def test_too_few_selected_frames_fail(tmp_path, capsys, model_dir):
    clip, _ = dicom_mono_multiframe(tmp_path / "sweep.dcm", n=4)
    rc, out, _ = _infer(capsys, model_dir, clip, "--exam", "--task", "report", "--frames", "2",
                        "--out", tmp_path / "out")
    assert rc == 1 and "at least 2 views; it has 1 (selected frames (--frames))" in out, out


@pytest.mark.parametrize("argv, words", [
    (["--task", "explain"], "unknown task 'explain'"),
    (["--task", "detect", "--box", "1", "2", "30", "40"], "--exam takes no --box or --points"),
    (["--task", "segment", "--points", "10", "20", "--labels", "1"], "--exam takes no --box or --points"),
    (["--task", "ask"], "needs a non-empty prompt"),
])
def test_bad_exam_requests_exit_2_before_loading_a_model(tmp_path, capsys, argv, words):
    exam = _exam_folder(tmp_path / "exam")
    rc = main(["infer", str(exam), "--exam", "--out", str(tmp_path / "out"), "--model", str(tmp_path / "none"), *argv])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and words in err, err
    assert not (tmp_path / "out").exists()


def test_an_exam_output_folder_is_not_taken_for_a_single_image_request(tmp_path, capsys, model_dir, monkeypatch):
    exam = _exam_folder(tmp_path / "exam1")
    force_answer(monkeypatch, "Normal study.")
    assert _infer(capsys, model_dir, exam, "--exam", "--task", "report", "--out", tmp_path / "out")[0] == 0
    # the same name without --exam: the folder's images are inputs of their own (v1, v2), not 'exam1'
    rc, _, err = _infer(capsys, model_dir, tmp_path / "exam1" / "v1.dcm", "--task", "report",
                          "--out", tmp_path / "out")
    assert rc == 0, err
    assert _doc(tmp_path / "out" / "exam1" / "results.json")["exam"] is True  # untouched
    assert np.asarray(json.loads((tmp_path / "out" / "v1" / "results.json").read_text())["frames"]).tolist() == [0]


def test_a_degenerate_exam_answer_writes_no_label_map_for_any_view(tmp_path, capsys, model_dir, monkeypatch):
    exam = _exam_folder(tmp_path / "exam1")
    force_answer(monkeypatch, "View 2: " + grounding.format_mask("lesion") + "...33773thyroidthyroid6A773",
                 mask_groups=1)
    rc, _, err = _infer(capsys, model_dir, exam, "--exam", "--task", "segment", "--prompt", "lesion",
                        "--out", tmp_path / "out")
    assert rc == 0, err
    doc = _doc(tmp_path / "out" / "exam1" / "results.json")
    assert doc["objects"] == [] and any(w.startswith("unparsable answer:") for w in doc["warnings"])
    for k in (1, 2):  # as for one image: an unreadable answer is not a result, not even an empty label map
        assert not list((tmp_path / "out" / "exam1" / f"view-{k}").glob("labels.*"))
        assert _doc(tmp_path / "out" / "exam1" / f"view-{k}" / "results.json")["outputs"]["labels"] is None


def test_a_rerun_clears_the_views_an_examination_no_longer_has_and_keeps_every_views_note(tmp_path, capsys,
                                                                                          model_dir, monkeypatch):
    exam = _exam_folder(tmp_path / "exam1", n=3)
    force_answer(monkeypatch, "Normal study.")
    assert _infer(capsys, model_dir, exam, "--exam", "--task", "report", "--out", tmp_path / "out")[0] == 0
    assert (tmp_path / "out" / "exam1" / "view-3").is_dir()
    (exam / "v3.dcm").unlink()
    dicom_mono_multiframe(exam / "v3.dcm", n=3)  # the third view is now a clip, read at one frame
    (exam / "v2.dcm").unlink()
    rc, _, err = _infer(capsys, model_dir, exam, "--exam", "--task", "report", "--out", tmp_path / "out",
                        "--overwrite")
    assert rc == 0, err
    doc = _doc(tmp_path / "out" / "exam1" / "results.json")
    assert [v["folder"] for v in doc["views"]] == ["view-1", "view-2"]
    assert sorted(p.name for p in (tmp_path / "out" / "exam1").glob("view*")) == ["view-1", "view-2"]
    assert any("a clip of 3 frames" in w for w in doc["warnings"]), doc["warnings"]
