"""The evaluation loop: an untrained model runs end to end, and the scoring is checked against oracles whose
metrics are known by hand (a perfect one and a deliberately wrong one)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from PIL import Image

from umind_core.cli import main
from umind_core.data.manifest import read_manifest, write_synthetic_dataset
from umind_core.evaluation.runner import (
    EVAL_TASKS,
    SUMMARY_KEYS,
    EvalError,
    aggregate,
    build_queries,
    evaluate,
    match_keypoints,
    parse_diagnosis,
    score,
    write_eval,
)
from umind_core.answers.results import GroundedObject, Result

FRACTIONS = [k for k in SUMMARY_KEYS
             if k not in ("keypoint_error_px", "keypoint_error_mm", "head_circumference_mad_mm")]


@pytest.fixture(scope="module")
def manifest(tmp_path_factory):
    # seeds 18..23: breast benign, thyroid malignant, kidney, fetal head, breast benign, thyroid malignant
    return write_synthetic_dataset(tmp_path_factory.mktemp("eval") / "ds", 6, seed0=18, size=128, progress=False)


@pytest.fixture(scope="module")
def records(manifest):
    return read_manifest(manifest)


# ------------------------------------------------------------------------------------------------ oracles

def oracle_result(query, rec, wrong: bool = False) -> Result:
    """The ground truth as a Result; `wrong` spoils it in ways whose metrics are computed by hand below."""
    objs = rec.annotations.objects
    masks = rec.load_masks()
    size = rec.load_image().shape[::-1]
    if query.task == "segment":
        empty = wrong and rec.site == "thyroid"
        found = [] if empty else [GroundedObject(label=query.prompt, mask=masks[k]) for k in query.target["objects"]]
        return Result("segment", objects=found, image_size=size)
    if query.task == "detect":
        found = [GroundedObject(label=query.prompt, box=objs[k].box) for k in query.target["objects"]]
        if wrong:  # one false box far from everything, per query
            found.append(GroundedObject(label=query.prompt, box=(0, 0, 2, 2)))
        return Result("detect", objects=found, image_size=size)
    if query.task == "keypoints":
        dx, dy = (3.0, 4.0) if wrong else (0.0, 0.0)
        found = [GroundedObject(label=k.name, points=[(k.xy[0] + dx, k.xy[1] + dy)])
                 for k in objs[query.target["objects"][0]].keypoints]
        return Result("keypoints", objects=found, image_size=size)
    if query.task == "measure" and "measurement" in query.target:  # a stored HC: said in words (10 % long if wrong)
        hc = rec.annotations.measurements[query.target["measurement"]] * (1.1 if wrong else 1.0)
        return Result("measure", answer=f"{query.prompt}: {hc:.2f} mm.", image_size=size)
    if query.task == "measure":
        line = objs[query.target["objects"][0]].lines[query.target["line"]]
        if wrong:  # no line, a length 10 % too long in words
            return Result("measure", answer=f"Length: {1.1 * line.length_mm} mm.", image_size=size)
        return Result("measure", objects=[GroundedObject(label=line.name, line=line.xy)],
                      answer=f"Length: {line.length_mm:.1f} mm.", image_size=size)
    if query.task == "diagnose":
        truth = query.target["diagnosis"]
        first = rec.id == "syn-000018"
        return Result("diagnose", answer="Normal." if wrong and first else f"{truth.capitalize()}. Oval mass.")
    assert query.task == "refusal"
    if query.target["should_refuse"] or wrong:
        return Result(query.predict_task, answer=f"The {query.target['target']} is not visible in this image.")
    return Result(query.predict_task, answer=f"This is a {rec.site} ultrasound image.")


def oracle_metrics(records, wrong: bool = False) -> dict:
    queries = build_queries(records)
    return aggregate([score(q, oracle_result(q, records[q.record], wrong), records[q.record]) for q in queries])


def test_queries_use_the_annotated_labels(records):
    queries = build_queries(records)
    by_task = {t: [q for q in queries if q.task == t] for t in EVAL_TASKS}
    assert {q.prompt for q in by_task["segment"]} >= {"thyroid nodule", "thyroid", "kidney", "fetal head"}
    assert len(by_task["segment"]) == len(by_task["detect"]) == 8
    assert {q.prompt for q in by_task["keypoints"]} == {"kidney", "fetal head"}
    assert {q.prompt for q in by_task["measure"]} == {"kidney length", "BPD", "head circumference"} | {
        f"{lesion} {axis} axis" for lesion in ("cyst", "breast lesion", "thyroid nodule") for axis in ("long", "short")}
    assert [q.target["diagnosis"] for q in by_task["diagnose"]] == ["benign", "malignant", "benign", "malignant"]
    assert all(q.prompt is None for q in by_task["diagnose"])
    refusals = by_task["refusal"]
    assert len(refusals) == 12 and sum(q.target["should_refuse"] for q in refusals) == 6
    from umind_core.data.conversations import SITE_ANATOMY

    for q in refusals:
        rec = records[q.record]
        foreign = q.target["target"] not in SITE_ANATOMY[rec.site] and q.target["target"] not in {
            o.label for o in rec.annotations.objects}
        assert foreign == q.target["should_refuse"], q
    assert build_queries(records, "diagnose") == by_task["diagnose"]
    with pytest.raises(EvalError, match="report"):
        build_queries(records, ["segment", "report"])


def test_perfect_oracle_scores_perfectly(records):
    m = oracle_metrics(records)
    s = m["summary"]
    assert set(s) == set(SUMMARY_KEYS)
    assert s["segmentation_miou"] == pytest.approx(1.0)
    assert m["segmentation"]["per_site"] == pytest.approx(
        {"breast": 1.0, "thyroid": 1.0, "kidney": 1.0, "fetal_head": 1.0})
    assert (s["detection_precision"], s["detection_recall"], s["detection_f1"]) == (1.0, 1.0, 1.0)
    assert s["keypoint_error_px"] == 0.0 and s["keypoint_error_mm"] == 0.0 and s["keypoint_error_rel_width"] == 0.0
    assert s["measurement_rel_error"] < 1e-3  # ground-truth lengths are rounded to 0.01 mm
    assert s["diagnosis_accuracy"] == 1.0 and s["diagnosis_macro_f1"] == 1.0
    assert s["refusal_accuracy"] == s["refusal_out_of_scope_accuracy"] == s["refusal_in_scope_accuracy"] == 1.0
    assert m["n_samples"] == {"segment": 8, "detect": 8, "keypoints": 2, "measure": 11, "diagnose": 4,
                              "refusal": 12}
    by_kind = m["measurement"]["by_kind"]  # the lesions' two calipers apart from the organ lines
    assert {k: v["n"] for k, v in by_kind.items()} == {"lesion calipers": 8, "kidney length": 1, "BPD": 1,
                                                       "head circumference": 1}
    assert all(v["mean_rel"] < 1e-3 for v in by_kind.values())
    assert s["head_circumference_mad_mm"] < 0.01  # the stored HC, said to 0.01 mm


def test_wrong_oracle_gives_the_hand_computed_numbers(records):
    m = oracle_metrics(records, wrong=True)
    s = m["summary"]
    # thyroid masks missing: that site scores 0, the other three 1
    assert m["segmentation"]["per_site"]["thyroid"] == 0.0
    assert s["segmentation_miou"] == pytest.approx(0.75)
    # 8 true boxes found, plus 8 false ones
    assert (m["detection"]["tp"], m["detection"]["fp"], m["detection"]["fn"]) == (8, 8, 0)
    assert s["detection_precision"] == 0.5 and s["detection_recall"] == 1.0
    assert s["detection_f1"] == pytest.approx(2 / 3)
    # every point off by (3, 4) px
    kidney, head = (r for r in records if r.site in ("kidney", "fetal_head"))
    assert s["keypoint_error_px"] == pytest.approx(5.0)
    assert s["keypoint_error_mm"] == pytest.approx(5.0 * (kidney.spacing[0] + head.spacing[0]) / 2)
    assert s["keypoint_error_rel_width"] == pytest.approx(5.0 / 128)
    assert s["measurement_rel_error"] == pytest.approx(0.1)
    assert [v["mean_rel"] for v in m["measurement"]["by_kind"].values()] == pytest.approx([0.1] * 4, abs=1e-4)
    head = next(r for r in records if r.site == "fetal_head")
    assert s["head_circumference_mad_mm"] == pytest.approx(0.1 * head.annotations.measurements["HC mm"], abs=0.01)
    # truth benign, malignant, benign, malignant; the first answered "normal" (outside the classes)
    assert s["diagnosis_accuracy"] == 0.75
    assert s["diagnosis_macro_f1"] == pytest.approx((2 / 3 + 1.0) / 2)
    # refusing everything: right on the six foreign questions, wrong on the six in-scope ones
    assert s["refusal_out_of_scope_accuracy"] == 1.0 and s["refusal_in_scope_accuracy"] == 0.0
    assert s["refusal_accuracy"] == 0.5


def test_a_stored_head_circumference_is_scored_as_hc18_scores_it(tmp_path):
    """A record holding "HC mm" (an HC18 import) is asked "head circumference"; the answer's ellipse is measured with
    the record's spacing and the mean absolute difference in mm is a headline, beside the relative error."""
    from umind_core.data.manifest import Annotations, ManifestObject, Record
    from umind_core.evaluation.runner import summary_table
    from umind_core.answers.landmarks import ellipse_axes, ellipse_perimeter

    yy, xx = np.mgrid[0:120, 0:160]
    mask = ((xx - 80) / 50.0) ** 2 + ((yy - 60) / 40.0) ** 2 <= 1
    Image.fromarray(mask.astype(np.uint8) * 255).save(tmp_path / "head.png")
    Image.fromarray(np.zeros((120, 160), np.uint8)).save(tmp_path / "image.png")
    rec = Record(id="hc", image="image.png", spacing=(0.2, 0.2), site="fetal_head", root=tmp_path,
                         annotations=Annotations([ManifestObject("fetal head", mask="head.png")],
                                                 measurements={"HC mm": 60.0}))
    (q,) = build_queries([rec], "measure")
    assert (q.prompt, q.target) == ("head circumference", {"measurement": "HC mm"})
    axes = (*ellipse_axes(mask)[0], *ellipse_axes(mask)[1])
    read = ellipse_perimeter(axes, (0.2, 0.2)).mm
    sample = score(q, Result("measure", objects=[GroundedObject(label=q.prompt, ellipse=axes)]), rec)
    assert sample["pred_source"] == "ellipse" and sample["pred_mm"] == pytest.approx(read)
    assert sample["abs_error_mm"] == pytest.approx(abs(read - 60.0)) and read == pytest.approx(56.7, abs=0.5)
    missing = score(q, Result("measure", answer="I cannot tell."), rec)
    assert missing["pred_mm"] is None and missing["pred_source"] is None
    m = aggregate([sample, missing])
    assert m["summary"]["head_circumference_mad_mm"] == pytest.approx(abs(read - 60.0))
    assert m["measurement"]["by_kind"]["head circumference"]["n_missing"] == 1
    tables, _ = summary_table(m)
    assert tables["Head circumference (as HC18 scores it)"]["UMind"]["missing"] == "1 of 2"


def test_keypoints_match_by_name_then_nearest():
    gt = [(10.0, 10.0), (50.0, 50.0), (90.0, 10.0)]
    names = ["a", "b", "c"]
    # "b" is named (though far away); the two unlabelled points go to the nearest remaining landmarks
    pred = [(None, (88.0, 12.0)), ("b", (0.0, 0.0)), (None, (11.0, 9.0))]
    assert match_keypoints(names, gt, pred) == [(11.0, 9.0), (0.0, 0.0), (88.0, 12.0)]
    assert match_keypoints(names, gt, [(None, (49.0, 50.0))]) == [None, (49.0, 50.0), None]


@pytest.mark.parametrize("text, label", [
    ("Benign. Oval circumscribed mass.", "benign"),
    ("Suspicious for malignancy.", "malignant"),
    ("malignant, not benign", "malignant"),
    ("Normal thyroid.", "normal"),
    ("I am not sure.", None),
    ("", None),
])
def test_parse_diagnosis(text, label):
    assert parse_diagnosis(text) == label


def test_segmentation_mask_of_the_wrong_size_is_an_error(records):
    q = next(q for q in build_queries(records, "segment"))
    bad = Result("segment", objects=[GroundedObject(label="x", mask=np.ones((5, 5), bool))])
    with pytest.raises(EvalError, match="shape"):
        score(q, bad, records[q.record])


# --------------------------------------------------------------------------------- end to end, untrained

@pytest.fixture(scope="module")
def untrained_run(manifest, tiny_model_factory, tmp_path_factory):
    model = tiny_model_factory()
    model.eval()
    report = evaluate(model, manifest, batch_size=4, progress=False, max_new_tokens=6)
    out = tmp_path_factory.mktemp("evalout")
    return report, write_eval(report, out, overlays=1), out


def test_untrained_model_runs_every_task_and_writes_the_report(untrained_run, records):
    report, paths, out = untrained_run
    assert paths["report"].is_file() and paths["metrics"].is_file()
    data = json.loads(paths["metrics"].read_text())
    summary = data["metrics"]["summary"]
    assert set(summary) == set(SUMMARY_KEYS)
    for key in FRACTIONS:
        v = summary[key]
        assert v is None or 0.0 <= v <= 1.0, (key, v)
    for key in ("keypoint_error_px", "keypoint_error_mm"):
        assert summary[key] is None or summary[key] >= 0.0
    # scores that cannot be missing: a missing mask is IoU 0, an unparsed diagnosis is wrong
    for key in ("segmentation_miou", "detection_f1", "diagnosis_accuracy", "refusal_accuracy"):
        assert summary[key] is not None
    counts = {t: sum(q.task == t for q in build_queries(records)) for t in EVAL_TASKS}
    assert data["metrics"]["n_samples"] == counts
    assert len(data["samples"]) == sum(counts.values())
    assert all(not k.startswith("_") for s in data["samples"] for k in s)
    assert {s["task"] for s in data["samples"]} == set(EVAL_TASKS)
    text = paths["report"].read_text()
    for heading in ("Segmentation mIoU", "Detection at IoU 0.5", "Keypoint mean distance error",
                    "Measurement length error", "Diagnosis", "Refusal"):
        assert f"## {heading}" in text
    assert "| UMind |" in text and "| Average |" in text
    assert data["readout"] == "mask" and "read off the masks the model segments (readout: mask)" in text


def test_overlays_are_the_best_and_worst_per_spatial_task(untrained_run):
    report, paths, out = untrained_run
    listing = json.loads(paths["metrics"].read_text())["overlays"]
    assert set(listing) == {"segment", "detect", "keypoints", "measure"}
    for task, kinds in listing.items():
        assert len(kinds["best"]) == 1 and len(kinds["worst"]) == 1, task
        for name in kinds["best"] + kinds["worst"]:
            assert (out / name).is_file()
    files = sorted(p.name for p in (out / "overlays").iterdir())
    assert len(files) == 8 and not [p for p in out.iterdir() if p.name.startswith(".")]
    with Image.open(out / listing["segment"]["best"][0]) as im:
        assert im.size == (128, 128) and im.mode == "RGB"


def test_rewriting_replaces_old_overlays(untrained_run, tmp_path):
    report, _, _ = untrained_run
    write_eval(report, tmp_path, overlays=2)
    # segment, detect (8 samples) and measure (2 lines + 8 lesion calipers): 2 best + 2 worst; keypoints (2
    # samples): 2 best, no repeats
    assert len(list((tmp_path / "overlays").iterdir())) == 14
    write_eval(report, tmp_path, overlays=1)
    assert len(list((tmp_path / "overlays").iterdir())) == 8


def test_cli_eval_says_which_readout_it_scored(manifest, tiny_model_factory, monkeypatch, tmp_path, capsys):
    from umind_core import demo

    model = tiny_model_factory()
    model.eval()
    monkeypatch.setattr(demo, "load_model", lambda *a, **k: model)
    out = tmp_path / "out"
    assert main(["eval", "--manifest", str(manifest), "--out", str(out), "--tasks", "detect", "--limit", "2",
                 "--max-new-tokens", "4", "--overlays", "0", "--readout", "tokens"]) == 0
    assert json.loads((out / "metrics.json").read_text())["readout"] == "tokens"
    assert "the coordinates the model writes (readout: tokens)" in (out / "report.md").read_text()
    with pytest.raises(SystemExit) as exit_info:
        main(["eval", "--manifest", str(manifest), "--out", str(out), "--readout", "ruler"])
    assert exit_info.value.code == 2 and "invalid choice: 'ruler'" in capsys.readouterr().err


def test_cli_eval_is_a_thin_shell(manifest, tiny_model_factory, monkeypatch, tmp_path, capsys):
    from umind_core import demo

    model = tiny_model_factory()
    model.eval()
    monkeypatch.setattr(demo, "load_model", lambda *a, **k: model)
    out = tmp_path / "out"
    assert main(["eval", "--manifest", str(manifest), "--out", str(out), "--tasks", "segment,refusal",
                 "--limit", "2", "--max-new-tokens", "4", "--overlays", "0", "--batch-size", "2"]) == 0
    line = capsys.readouterr().out.strip()
    assert line.startswith("umind eval:") and "refusal_accuracy=" in line and "segmentation_miou=" in line
    data = json.loads((out / "metrics.json").read_text())
    assert {t for t, n in data["metrics"]["n_samples"].items() if n} == {"segment", "refusal"}
    assert data["metrics"]["summary"]["detection_f1"] is None and data["overlays"] == {}
    assert {s["id"] for s in data["samples"]} == {"syn-000018", "syn-000019"}
    assert not (out / "overlays").exists()


@pytest.mark.parametrize("argv, needle", [
    (["--manifest", "/nonexistent/m.jsonl"], "does not exist"),
    (["--tasks", "segment,report"], "report"),
])
def test_cli_eval_errors_are_one_line(manifest, tmp_path, capsys, monkeypatch, argv, needle):
    from umind_core import demo

    monkeypatch.setattr(demo, "load_model", lambda *a, **k: object())
    args = ["eval", "--manifest", str(manifest), "--out", str(tmp_path / "o"), *argv]
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("umind eval: error:") and needle in err[-1]


@pytest.mark.slow
def test_class_scores_rank_the_answer_a_model_was_taught():
    """Each finding's score is the likelihood of its answer: a probability over the classes, whose likeliest class
    is the synthetic truth on most breast images for the bundled model (diagnosis accuracy 0.84 on its held-out
    set), and an AUC that ranks."""
    from umind_core import demo
    from umind_core.data.synthetic import generate
    from umind_core.evaluation.class_scores import auc, class_scores
    from umind_core.answers.findings import normal_finding
    from umind_core.prompts import build_user_text

    model = demo.load_model(None)
    question = build_user_text("diagnose")  # what predict("diagnose") asks
    right = 0
    samples = [generate(seed, site="breast") for seed in range(1_000_000, 1_000_006)]
    for sample in samples:
        scores = class_scores(model, sample.image, question)
        assert set(scores) == {"normal", "benign", "malignant"} and abs(sum(scores.values()) - 1) < 1e-5
        assert all(0 < v < 1 for v in scores.values())
        right += max(scores, key=scores.get) == normal_finding(sample.diagnosis)
    assert right >= 4, right
    assert auc([0.1, 0.4, 0.35, 0.8], [False, False, True, True]) == 0.75
    # the score is the class word's own likelihood, not its turn's end: one answer at a time, summed by hand
    import torch
    from umind_core.data.manifest import Conversation
    from umind_core.training.collate import IGNORE_INDEX, collate, encode_turns

    tok = model.processor.tokenizer
    by_hand = {}
    for c in ("Normal.", "Benign.", "Malignant."):
        turns = [Conversation("diagnose", [{"role": "user", "content": question},
                                           {"role": "assistant", "content": c}], [])]
        batch = collate([encode_turns(model.processor, samples[0].image, turns, (), model.num_mask_tokens)],
                        tok.pad_token_id)
        labels = batch.pop("labels")[0, 1:]
        batch.pop("mask_targets")
        with torch.no_grad():
            logp = torch.log_softmax(model(**batch, decode_masks=False).logits.float()[0, :-1], -1)
        at = (labels != IGNORE_INDEX).nonzero().flatten()[:len(tok(c, add_special_tokens=False)["input_ids"])]
        by_hand[c.rstrip(".").lower()] = float(logp[at, labels[at]].sum())
    total = np.logaddexp.reduce(list(by_hand.values()))
    scores = class_scores(model, samples[0].image, question)
    for c, ll in by_hand.items():
        assert scores[c] == pytest.approx(float(np.exp(ll - total)), abs=1e-4), (c, scores, by_hand)
    assert auc([0.5, 0.5], [True, False]) == 0.5 and auc([0.2], [True]) is None


def test_a_refusal_never_asks_for_a_structure_the_record_labels():
    """A kidney scan with a labelled spleen: the spleen is not absent, so no refusal query asks for it (200 records,
    about 11 would draw it if labels were ignored)."""
    from umind_core.data.manifest import Annotations, ManifestObject, Record

    records = [Record(id=f"k{i}", image="k.png", site="kidney",
                      annotations=Annotations([ManifestObject("spleen", box=(1.0, 1.0, 5.0, 5.0))]))
               for i in range(200)]
    targets = [q.target["target"] for q in build_queries(records, "refusal") if q.target["should_refuse"]]
    assert len(targets) >= 100 and "spleen" not in targets and "kidney" not in targets


def test_a_line_of_no_length_is_not_asked_and_labels_match_keypoints_in_any_case():
    from umind_core.data.manifest import Annotations, Line, ManifestObject, Record

    lines = [Line("cyst long axis", (1.0, 1.0, 9.0, 1.0), 0.0), Line("cyst short axis", (1.0, 1.0, 1.0, 5.0), 2.5)]
    rec = Record(id="c", image="c.png", spacing=(0.5, 0.5), site="breast",
                 annotations=Annotations([ManifestObject("cyst", lines=lines)]))
    assert [q.prompt for q in build_queries([rec], "measure")] == ["cyst short axis"]
    assert match_keypoints(["Upper pole", "lower pole"], [(0.0, 0.0), (9.0, 9.0)],
                           [(None, (1.0, 1.0)), (" upper POLE ", (8.0, 8.0))]) == [(8.0, 8.0), (1.0, 1.0)]


def test_without_a_drawn_line_the_number_the_model_wrote_is_scored():
    """The answer a reader sees drops a length no line backs; the score reads the model's own words."""
    from umind_core.data.manifest import Annotations, Line, ManifestObject, Record

    rec = Record(id="c", image="c.png", spacing=(0.5, 0.5), site="breast", annotations=Annotations(
        [ManifestObject("cyst", lines=[Line("cyst long axis", (1.0, 1.0, 9.0, 1.0), 20.0)])]))
    (q,) = build_queries([rec], "measure")
    result = Result("measure", answer="cyst long axis", raw_answer="cyst long axis Length: 25.0 mm.")
    sample = score(q, result, rec)
    assert sample["pred_source"] == "text" and sample["pred_mm"] == pytest.approx(25.0)
