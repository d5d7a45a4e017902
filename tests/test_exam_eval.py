"""`umind eval` on examinations: exam-level diagnosis and report scored beside the same model
reading the single best view. The scoring is checked on oracle answers; the tiny (untrained) model checks that a
manifest of examinations runs end to end and writes the exam metrics."""

from __future__ import annotations

import json

import numpy as np
import pytest

from umind_core.cli import main
from umind_core.data.exams import write_exam_dataset
from umind_core.data.manifest import read_manifest
from umind_core.evaluation.exams import (
    BEST_VIEW_RULE,
    best_view,
    exam_truth_sizes,
    parse_report_sizes,
    score_exam,
)
from umind_core.evaluation.runner import EvalError, aggregate, evaluate, write_eval
from umind_core.answers.results import Result


@pytest.fixture(scope="module")
def manifest(tmp_path_factory):
    # seeds 0..2: breast (malignant, 2 views), thyroid (benign, 3 views), kidney (normal, 2 views)
    return write_exam_dataset(tmp_path_factory.mktemp("exams") / "ds", 3, seed0=0, size=64)


@pytest.fixture(scope="module")
def exams(manifest):
    return read_manifest(manifest)


def test_report_sizes_are_read_by_name():
    exam = "Site: breast. Views: 1 radial. Finding: mass. Size: 25.0 x 18.5 x 14.9 mm (length x width x depth)."
    assert parse_report_sizes(exam) == {"length": 25.0, "width": 18.5, "depth": 14.9}
    single = "Site: breast. Finding: mass. Size: 15.2 x 9.7 mm (long x short axis). Impression: benign."
    assert parse_report_sizes(single) == {"length": 15.2, "depth": 9.7}  # the long-axis plane: length x depth
    fetal = "BPD: 58.7 mm. HC: 213.3 mm. FL: 46.2 mm. FL/BPD: 0.79."
    assert parse_report_sizes(fetal) == {"bpd": 58.7, "hc": 213.3, "fl": 46.2}
    assert parse_report_sizes("Site: kidney. Length: 118.5 mm.") == {"length": 118.5}
    assert parse_report_sizes("No size given.") == {} and parse_report_sizes("") == {}


def test_truth_sizes_and_best_view_of_generated_exams(exams):
    breast, _, kidney = exams
    assert exam_truth_sizes(breast) == {"length": 18.55, "width": 18.47, "depth": 13.17}
    assert set(exam_truth_sizes(kidney)) == {"length", "width", "depth"}  # "kidney AP" is the depth
    # the lesion's long-axis plane: radial (breast), the nodule lobe's longitudinal (thyroid); kidney: longitudinal
    assert [best_view(e) for e in exams] == [0, 0, 0]
    breast.views.reverse()  # the rule follows the caliper, not the order
    try:
        assert best_view(breast) == 1
    finally:
        breast.views.reverse()
    assert "long-axis" in BEST_VIEW_RULE


def _oracle(exam, reading: str, task: str) -> Result:
    """The exam's truth as the exam reading answers it; the best view states its two calipers only."""
    if task == "diagnose":
        return Result("diagnose", answer=f"{exam.annotations.diagnosis.capitalize()}. Irregular mass.")
    if reading == "exam":
        return Result("report", answer=exam.annotations.report)
    long_axis = next(ln for o in exam.views[0].annotations.objects for ln in o.lines if ln.name.endswith("long axis"))
    short = next(ln for o in exam.views[0].annotations.objects for ln in o.lines if ln.name.endswith("short axis"))
    return Result("report", answer=f"Site: {exam.site}. Finding: mass. Size: {long_axis.length_mm:.1f} x "
                                   f"{short.length_mm:.1f} mm (long x short axis). Impression: benign.")


def test_exam_reading_and_best_view_are_scored_side_by_side(exams):
    breast, thyroid = exams[0], exams[1]
    samples = []
    for exam in (breast, thyroid):
        for reading in ("exam", "best_view"):
            view = None if reading == "exam" else best_view(exam)
            for task in ("diagnose", "report"):
                samples.append(score_exam(exam, task, reading, _oracle(exam, reading, task), view=view))
    m = aggregate(samples)
    ex, bv = m["exam"]["exam"], m["exam"]["best_view"]
    assert m["exam"]["n_exams"] == 2
    assert ex["diagnosis"]["accuracy"] == bv["diagnosis"]["accuracy"] == 1.0
    assert ex["report"]["size"]["mean_rel"] < 0.01 and ex["report"]["size"]["n_missing"] == 0
    # a single view states length and depth (its two calipers), never the width across it
    assert bv["report"]["size"]["n"] == 6 and bv["report"]["size"]["n_missing"] == 2
    assert ex["report"]["bleu_lenient"] == pytest.approx(1.0) and bv["report"]["bleu_lenient"] < 0.5
    assert ex["report"]["bleu4"] == pytest.approx(1.0, abs=1e-6) and bv["report"]["bleu4"] < 0.5
    s = m["summary"]
    assert s["exam_diagnosis_accuracy"] == 1.0 and s["exam_best_view_diagnosis_accuracy"] == 1.0
    assert s["exam_report_size_rel_error"] < 0.01 and s["exam_best_view_report_size_rel_error"] is not None
    report = next(x for x in samples if x["task"] == "exam_report" and x["reading"] == "best_view")
    assert report["sizes"]["width"] == {"gt": 18.47, "pred": None, "rel_error": None}
    assert report["view"] == 0 and report["n_views"] == 2


def test_a_wrong_diagnosis_and_a_size_off_by_ten_percent(exams):
    breast = exams[0]
    wrong = Result("diagnose", answer="Benign.")
    text = breast.annotations.report.replace("Size: 18.6 x", "Size: 20.4 x")
    samples = [score_exam(breast, "diagnose", "exam", wrong),
               score_exam(breast, "report", "exam", Result("report", answer=text))]
    m = aggregate(samples)["exam"]["exam"]
    assert m["diagnosis"]["accuracy"] == 0.0
    size = m["report"]["size"]
    assert size["n"] == 3 and size["mean_rel"] == pytest.approx((20.4 / 18.55 - 1 + 0.03 / 18.47 + 0.03 / 13.17) / 3,
                                                                 abs=1e-3)
    with pytest.raises(EvalError, match="no benign or malignant"):
        score_exam(exams[2], "diagnose", "exam", wrong)  # a kidney exam is "normal"


@pytest.fixture(scope="module")
def untrained_run(manifest, tiny_model_factory, tmp_path_factory):
    model = tiny_model_factory()
    model.eval()
    report = evaluate(model, manifest, progress=False, max_new_tokens=4)
    out = tmp_path_factory.mktemp("exam_eval")
    return report, write_eval(report, out, overlays=0)


def test_eval_on_an_exam_manifest_writes_the_exam_metrics(untrained_run):
    _, paths = untrained_run
    data = json.loads(paths["metrics"].read_text())
    exam = data["metrics"]["exam"]
    assert exam["n_exams"] == 3 and exam["best_view_rule"] == BEST_VIEW_RULE
    for reading in ("exam", "best_view"):
        part = exam[reading]
        assert part["diagnosis"]["n"] == 2  # breast and thyroid; the kidney is "normal"
        assert part["report"]["n"] == 3 and part["report"]["size"]["n"] == 9
        assert part["report"]["bleu_lenient"] is not None and part["report"]["bleu4"] is not None
    summary = data["metrics"]["summary"]
    for key in ("exam_diagnosis_accuracy", "exam_best_view_diagnosis_accuracy", "exam_report_bleu4",
                "exam_best_view_report_bleu4"):
        assert summary[key] is not None
    samples = [s for s in data["samples"] if s["task"] in ("exam_diagnose", "exam_report")]
    assert len(samples) == 2 * (2 + 3)
    assert {(s["task"], s["reading"]) for s in samples} == {
        ("exam_diagnose", "exam"), ("exam_diagnose", "best_view"), ("exam_report", "exam"),
        ("exam_report", "best_view")}
    assert all(s["view"] == 0 for s in samples if s["reading"] == "best_view")
    objects = exam["objects"]  # every view's masks and boxes, read with all views and alone
    for reading in ("exam", "view_alone"):
        assert objects[reading]["segmentation"]["n"] == objects[reading]["detection"]["n"] > 0
        assert 0.0 <= objects[reading]["segmentation"]["miou"] <= 1.0
    assert objects["exam"]["segmentation"]["n"] == objects["view_alone"]["segmentation"]["n"]
    # calipers: one per examination and name in the exam reading, one per view that has it read alone
    pairs = {(s["exam"], s["label"]) for s in data["samples"] if s["task"] == "exam_measure"}
    assert objects["exam"]["measurement"]["n_samples"] == len(pairs) > 0
    assert objects["view_alone"]["measurement"]["n_samples"] >= len(pairs)
    for key in ("exam_segmentation_miou", "exam_view_alone_segmentation_miou", "exam_detection_f1",
                "exam_view_alone_detection_f1"):
        assert summary[key] is not None
    text = paths["report"].read_text()
    assert "## Examinations: objects per view" in text and "| exam reading (all views) | each view alone |" in text
    assert "## Examinations: diagnosis, benign vs malignant" in text and "## Examinations: report" in text
    assert "| exam reading (all views) | single best view |" in text
    assert "long-axis caliper" in text


def test_the_exam_reading_sees_all_views_and_the_baseline_one(manifest, tiny_model_factory, monkeypatch):
    from umind_core.inference import predictor as P

    seen = []
    set_exam, predict_batch = P.Predictor.set_exam, P.Predictor.predict_batch
    monkeypatch.setattr(P.Predictor, "set_exam", lambda self, views: seen.append(("exam", len(views)))
                        or set_exam(self, views))
    monkeypatch.setattr(P.Predictor, "predict_batch", lambda self, frames, task, *a, **k: seen.append(
        (task, len(frames))) or predict_batch(self, frames, task, *a, **k))
    model = tiny_model_factory()
    model.eval()
    evaluate(model, manifest, tasks="diagnose", progress=False, max_new_tokens=2)
    # each exam encoded once with all its views; the best views of the chunk's benign/malignant exams in one batch
    assert seen == [("exam", 2), ("exam", 3), ("diagnose", 2)]


def test_report_is_for_examinations_only(tmp_path, tiny_model_factory):
    from umind_core.data.manifest import write_synthetic_dataset

    single = write_synthetic_dataset(tmp_path / "single", 1, seed0=18, size=64, progress=False)
    with pytest.raises(EvalError, match="'report' is scored on examinations only"):
        evaluate(object(), single, tasks="report", progress=False)


def test_cli_eval_on_exams(manifest, tmp_path, capsys, monkeypatch, tiny_model_factory):
    from umind_core import demo

    monkeypatch.setattr(demo, "load_model", lambda *a, **k: tiny_model_factory())
    monkeypatch.setattr(demo, "has_demo_model", lambda: False)
    rc = main(["eval", "--manifest", str(manifest), "--out", str(tmp_path / "o"), "--tasks", "report",
               "--max-new-tokens", "2", "--overlays", "0"])
    assert rc == 0, capsys.readouterr().err
    data = json.loads((tmp_path / "o" / "metrics.json").read_text())
    assert set(data["metrics"]["exam"]["exam"]) == {"report"}
    assert "exam_report_bleu4=" in capsys.readouterr().out


class _OraclePredictor:
    """predict_exam: the truth mask of `view` for the asked target, plus one stray object on view `stray`;
    predict_batch: nothing found."""

    def __init__(self, exam, view: int, stray: int):
        self.exam, self.view, self.stray = exam, view, stray

    def predict_exam(self, task, prompt):
        from umind_core.answers.results import GroundedObject

        record = self.exam.view_record(self.view)
        masks = record.load_masks()
        truth = next(m for o, m in zip(record.annotations.objects, masks) if o.label == prompt and m is not None)
        objects = [GroundedObject(label=prompt, mask=truth.copy(), view=self.view),
                   GroundedObject(label=prompt, mask=np.zeros_like(truth), view=self.stray)]
        return Result(task, answer=prompt, objects=objects)

    def predict_batch(self, frames, task, prompt):
        return [Result(task, answer="") for _ in frames]


def test_exam_objects_are_scored_on_their_own_view(exams):
    from umind_core.evaluation.exam_objects import aggregate_objects, exam_object_samples, view_alone_samples
    from umind_core.evaluation.exams import exam_frames

    thyroid = exams[1]
    shows = [{o.label for o in thyroid.views[k].annotations.objects if o.mask is not None}
             for k in range(len(thyroid.views))]
    target = "thyroid nodule"
    showing = [k for k, labels in enumerate(shows) if target in labels]
    hidden = [k for k, labels in enumerate(shows) if target not in labels]
    assert len(showing) >= 2 and hidden, shows  # the generator: the nodule in two planes, a lobe without it
    frames = exam_frames(thyroid)
    predictor = _OraclePredictor(thyroid, view=showing[0], stray=hidden[0])
    samples = [s for s in exam_object_samples(predictor, thyroid, "segment", frames) if s["label"] == target]
    by_view = {s["view"]: s for s in samples}
    assert sorted(by_view) == showing  # only views that show the nodule are scored for it
    assert by_view[showing[0]]["iou"] == pytest.approx(1.0)  # the truth, on its own view
    assert by_view[showing[1]]["iou"] == 0.0  # nothing drawn there
    assert sum(s["objects_on_views_without_target"] for s in samples) == 1
    alone = [s for s in view_alone_samples(predictor, [(thyroid, frames)], "segment") if s["label"] == target]
    assert sorted(s["view"] for s in alone) == showing and all(s["iou"] == 0.0 for s in alone)
    section, summary = aggregate_objects(samples + alone)
    assert section["exam"]["segmentation"]["miou"] == pytest.approx(1.0 / len(showing))
    assert section["exam"]["objects_on_views_without_target"] == 1
    assert summary["exam_view_alone_segmentation_miou"] == 0.0


class _CaliperOracle(_OraclePredictor):
    """predict_exam("measure"): the truth caliper of `view` (the view the model chooses to draw it in)."""

    def predict_exam(self, task, prompt):
        from umind_core.answers.results import GroundedObject

        record = self.exam.view_record(self.view)
        line = next(ln for o in record.annotations.objects for ln in o.lines if ln.name == prompt)
        return Result(task, answer=prompt, objects=[GroundedObject(label=prompt, line=tuple(line.xy), view=self.view)])


def test_an_exam_caliper_is_scored_once_on_the_view_it_was_drawn_in(exams):
    from umind_core.evaluation.exam_objects import exam_object_samples
    from umind_core.evaluation.exams import exam_frames

    exam = next(e for e in exams if sum(1 for v in e.views for o in v.annotations.objects if o.lines) >= 2)
    names = {}
    for k, view in enumerate(exam.views):
        for o in view.annotations.objects:
            for ln in o.lines:
                if ln.length_mm:
                    names.setdefault(ln.name, []).append(k)
    # a caliper two views show, where there is one (the breast lesion's in both planes)
    name, views = next(((n, v) for n, v in names.items() if len(v) > 1), next(iter(names.items())))
    chosen = views[-1]
    samples = [s for s in exam_object_samples(_CaliperOracle(exam, view=chosen, stray=0), exam, "measure",
                                              exam_frames(exam)) if s["label"] == name]
    (sample,) = samples  # once per examination and name, whatever number of views show it
    # the truth line on its own view: its length in that view's spacing is the truth (lengths are stored to 0.01 mm)
    assert sample["view"] == chosen and sample["rel_error"] == pytest.approx(0.0, abs=1e-3)


def _exam(views_lines, measurements=None, report=None):
    from umind_core.data.manifest import Annotations, Line, ManifestObject, Record, View

    views = [View(image=f"v{k}.png", spacing=(0.2, 0.2), annotations=Annotations(
        [ManifestObject("kidney", lines=[Line(name, (0.0, 0.0, 1.0, 1.0), mm) for name, mm in lines])]))
        for k, lines in enumerate(views_lines)]
    return Record(id="e", site="kidney", views=views,
                  annotations=Annotations(measurements=measurements or {}, report=report))


def test_best_view_prefers_a_long_axis_and_else_the_longest_line():
    # view 1 has the longest line, but view 2 holds the long axis: the long-axis plane is the one reported from
    assert best_view(_exam([[("kidney length", 110.0)], [("lesion long axis", 20.0)]])) == 1
    assert best_view(_exam([[("kidney width", 50.0)], [("kidney length", 110.0)]])) == 1  # no long axis: longest
    assert best_view(_exam([[], []])) == 0


def test_truth_sizes_are_the_ones_the_report_states_and_a_size_is_read_at_its_first_statement():
    exam = _exam([[]], measurements={"kidney length mm": 110.0, "kidney AP mm": 45.0, "kidney width mm": 50.0},
                 report="Site: kidney. Length: 111.0 mm.")
    assert exam_truth_sizes(exam) == {"length": 110.0}
    assert set(exam_truth_sizes(_exam([[]], measurements=exam.annotations.measurements))) == {"length", "width",
                                                                                               "depth"}
    assert parse_report_sizes("Size: 20.0 x 9.0 mm (long x short axis). Size: 30.0 x 12.0 mm (long x short axis).") \
        == {"length": 20.0, "depth": 9.0}


def test_an_examinations_sections_are_a_single_images_sections():
    """Detection, calipers and diagnosis have one aggregation rule (`scoring.*_section`): the same samples tagged as
    an examination's (view, target) samples give the sections single images give, key for key."""
    from umind_core.evaluation.exam_objects import aggregate_objects
    from umind_core.evaluation.exams import aggregate_exams

    det = [{"task": "detect", "pred_boxes": [[0, 0, 10, 10], [50, 50, 60, 60]], "gt_boxes": [[1, 1, 10, 10]]},
           {"task": "detect", "pred_boxes": [], "gt_boxes": [[5, 5, 20, 20]]}]
    meas = [{"task": "measure", "prompt": "breast lesion long axis", "pred_mm": 11.0, "gt_mm": 10.0},
            {"task": "measure", "prompt": "kidney length", "pred_mm": None, "gt_mm": 90.0},
            {"task": "measure", "prompt": "BPD", "pred_mm": 40.0, "gt_mm": 50.0}]
    dia = [{"task": "diagnose", "true": "benign", "pred": "benign"},
           {"task": "diagnose", "true": "malignant", "pred": None},
           {"task": "diagnose", "true": "malignant", "pred": "malignant"}]
    image = aggregate(det + meas + dia)

    def as_exam(samples, reading):
        return [{**s, "task": f"exam_{s['task']}", "reading": reading, "objects_on_views_without_target": 0,
                 "id": f"exam-{i}"} for i, s in enumerate(samples)]

    objects, _ = aggregate_objects(as_exam(det + meas, "exam"))
    assert objects["exam"]["detection"] == image["detection"]
    assert objects["exam"]["measurement"] == image["measurement"]
    assert image["measurement"]["by_kind"]["lesion calipers"]["n"] == 1
    section, _ = aggregate_exams(as_exam(dia, "exam") + as_exam(dia[:1], "best_view"))
    assert section["exam"]["diagnosis"] == image["diagnosis"]
    assert section["best_view"]["diagnosis"] != image["diagnosis"]


def test_the_object_table_counts_the_calipers_drawn_and_report_cells_scale_integers():
    from umind_core.evaluation.exam_objects import object_table
    from umind_core.evaluation.report import _cell

    part = {"measurement": {"mean_rel": 0.1, "n": 4, "n_missing": 1}}
    table = object_table({"exam": part, "view_alone": {}})
    assert table["exam reading (all views)"]["calipers drawn"] == "3 of 4"
    assert _cell(1, 100.0, 1) == "100.0" and _cell(np.int64(3), 1, 2) == "3" and _cell(0.25, 100.0, 1) == "25.0"
