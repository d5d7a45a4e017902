"""The annotation loop's parts that need no server: the gate, markups -> pixels, rehearsal, LoRA on any base,
and the held-out scanner appearance of the synthetic generator."""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "monailabel_app"))

from lib.trainers.corrections import read_corrections  # noqa: E402
from lib.trainers.gate import Tolerance, compare, decide  # noqa: E402

SPACING, ORIGIN = (0.5, 0.25), (10.0, -4.0)


# ------------------------------------------------------------------------------------------------ gate
def summary(**kw):
    base = {"segmentation_miou": 0.60, "detection_f1": 0.71, "keypoint_error_rel_width": 0.072,
            "measurement_rel_error": 0.109, "diagnosis_accuracy": 0.81, "refusal_accuracy": 0.99,
            "n_samples": dict.fromkeys(("segment", "detect", "keypoints", "measure", "diagnose", "refusal"), 40)}
    return {**base, **kw}


def test_gate_rejects_a_segmentation_gain_that_costs_detection():
    """A gain bought with a loss: segmentation up, detection down; the reason names the task and the set."""
    tol = Tolerance()
    tables = {"new labels": compare(summary(), summary(segmentation_miou=0.68), tol),
              "synthetic regression": compare(summary(), summary(segmentation_miou=0.74, detection_f1=0.48), tol)}
    promote, reason = decide(tables, tol)
    assert not promote
    assert "detect on synthetic regression: 0.710 -> 0.480" in reason and "segment" not in reason
    row = next(r for r in tables["synthetic regression"] if r["task"] == "segment")
    assert row["change"] == pytest.approx(0.14) and not row["worse"]


@pytest.mark.parametrize("task,key,worse,better", [
    ("segment", "segmentation_miou", 0.50, 0.70), ("detect", "detection_f1", 0.61, 0.81),
    ("keypoints", "keypoint_error_rel_width", 0.09, 0.05), ("measure", "measurement_rel_error", 0.15, 0.08),
    ("diagnose", "diagnosis_accuracy", 0.70, 0.90), ("refusal", "refusal_accuracy", 0.80, 1.0)])
def test_gate_knows_which_way_is_better_for_every_task(task, key, worse, better):
    """Each gated figure alone: a clearly worse value rejects (naming the task), a clearly better one promotes. A
    score read as an error (or the reverse) would promote a version that refuses in-scope questions."""
    tol = Tolerance()
    promote, reason = decide({"suite": compare(summary(), summary(**{key: worse}), tol)}, tol)
    assert not promote and f"{task} on suite" in reason
    assert decide({"suite": compare(summary(), summary(**{key: better}), tol)}, tol) == (
        True, "no task worse than the tolerance on any set")


def test_gate_tolerances_are_absolute_for_scores_and_relative_for_errors():
    tol = Tolerance(score=0.02, error=0.05)
    # 0.019 lower score and 4.6% higher error hold; 0.021 lower and 5.5% higher do not
    ok = compare(summary(), summary(diagnosis_accuracy=0.791, keypoint_error_rel_width=0.0753), tol)
    assert decide({"s": ok}, tol)[0]
    bad = compare(summary(), summary(diagnosis_accuracy=0.789), tol)
    assert decide({"s": bad}, tol) [0] is False
    bad = compare(summary(), summary(measurement_rel_error=0.115), tol)
    promote, reason = decide({"s": bad}, tol)
    assert not promote and "measure on s" in reason
    # a task one side has no data for is not compared; no data at all is no promotion
    assert [r["task"] for r in compare({"segmentation_miou": 0.5}, summary(), tol)] == ["segment"]
    assert decide({"s": [], "t": []}, tol) == (False, "no held-out set had data to score the new version on")


def test_a_task_scored_on_too_few_samples_is_shown_but_does_not_gate():
    tol = Tolerance(min_samples=10)
    few = {"detect": 3}
    rows = compare(summary(n_samples=few), summary(detection_f1=0.0, n_samples=few), tol)
    row = next(r for r in rows if r["task"] == "detect")
    assert row["n"] == 3 and not row["gates"] and not row["worse"]
    promote, reason = decide({"new labels": rows}, tol)  # nothing gates anywhere: no evidence, no promotion
    assert not promote and "no task had 10 scored samples" in reason
    enough = compare(summary(), summary(), tol)
    assert decide({"new labels": rows, "synthetic regression": enough}, tol)[0]
    many = {"detect": 10}
    rows = compare(summary(n_samples=many), summary(detection_f1=0.0, n_samples=many), tol)
    assert next(r for r in rows if r["task"] == "detect")["worse"]


def test_held_out_labels_gate_on_any_loss_beyond_noise_from_a_few_samples():
    """The pooled held-out corrections: a quarter of the tolerance and the noise rule, gating from 3 samples. A loss
    of 0.008 on every image (inside the 0.02 tolerance the synthetic set uses) rejects; the same mean from one
    image's flip among four does not, nor does 0.001 on every image; two samples do not gate at all."""
    from lib.trainers.gate import PER_SAMPLE, held_out_tolerance

    tol = held_out_tolerance(Tolerance(), 3)
    assert (tol.score, tol.error, tol.min_samples, tol.noise_z) == (0.005, 0.0125, 3, Tolerance().noise_z)

    def held(values):
        return summary(segmentation_miou=sum(values) / len(values), n_samples={"segment": len(values)},
                       **{PER_SAMPLE: {"segment": values}})

    before = [0.70, 0.60, 0.80, 0.75]
    after = held([v - 0.008 for v in before])
    promote, reason = decide({"held-out labels": compare(held(before), after, tol)}, tol)
    assert not promote and "segment on held-out labels" in reason
    plain = Tolerance(min_samples=3)  # the synthetic set's rule would let the same loss pass
    assert decide({"held-out labels": compare(held(before), after, plain)}, plain)[0]
    flip = compare(held(before), held([0.70, 0.60, 0.80, 0.718]), tol)
    row = next(r for r in flip if r["task"] == "segment")
    assert row["change"] == pytest.approx(-0.008) and row["gates"] and not row["worse"]
    tiny = compare(held(before), held([v - 0.001 for v in before]), tol)  # se 0: the tolerance keeps it
    assert not next(r for r in tiny if r["task"] == "segment")["worse"]
    two = compare(held(before[:2]), held([0.1, 0.1]), tol)
    assert not next(r for r in two if r["task"] == "segment")["gates"]


def test_held_out_labels_do_not_forgive_one_collapsed_mask_as_noise():
    """Loop benchmark run 2 (`random`, 20 labels): one held-out mask of six collapsed, the mean fell 0.10 with a
    paired SE of 0.10, and the uncapped noise rule served that version. Capped at the full score tolerance the
    held-out labels reject it; the same loss spread as noise on an error (keypoints) keeps the plain noise rule."""
    from lib.trainers.gate import PER_SAMPLE, held_out_tolerance

    tol = held_out_tolerance(Tolerance(), 3)
    before = [0.70, 0.65, 0.75, 0.62, 0.71, 0.64]
    after = before[:5] + [0.02]  # one mask lost, five unchanged

    def held(values, key="segmentation_miou", task="segment"):
        return summary(**{key: sum(values) / len(values), "n_samples": {task: len(values)},
                          PER_SAMPLE: {task: values}})

    row = next(r for r in compare(held(before), held(after), tol) if r["task"] == "segment")
    assert row["se"] == pytest.approx(0.62 / 6, abs=1e-3) and row["worse"]
    uncapped = replace(tol, score_noise_cap=None)
    assert not next(r for r in compare(held(before), held(after), uncapped) if r["task"] == "segment")["worse"]
    promote, reason = decide({"held-out labels": compare(held(before), held(after), tol)}, tol)
    assert not promote and "segment on held-out labels: 0.678 -> 0.575" in reason
    # errors are not capped: one keypoint error of six doubling (mean +17%) is judged by the noise rule alone
    kb = [0.04, 0.05, 0.045, 0.06, 0.05, 0.04]
    ka = kb[:5] + [0.08]
    krow = next(r for r in compare(held(kb, "keypoint_error_rel_width", "keypoints"),
                                   held(ka, "keypoint_error_rel_width", "keypoints"), tol) if r["task"] == "keypoints")
    assert krow["gates"] and not krow["worse"]


def test_the_synthetic_suite_is_judged_against_the_start_not_a_lucky_served_version():
    """The benchmark's case: a served version one diagnosis luckier than the start must not block a candidate
    that is still at the start's level; a candidate below the start beyond tolerance is rejected even when the
    served version was just as low (drift does not add up round after round)."""
    from lib.trainers.gate import format_table

    tol = Tolerance()
    start, lucky = summary(diagnosis_accuracy=0.615), summary(diagnosis_accuracy=0.731)
    rows = compare(lucky, summary(diagnosis_accuracy=0.692), tol, start=start)
    assert decide({"synthetic regression": rows}, tol)[0]
    assert not decide({"synthetic regression": compare(lucky, summary(diagnosis_accuracy=0.692), tol)}, tol)[0]
    row = next(r for r in rows if r["task"] == "diagnose")
    assert (row["start"], row["before"], row["after"]) == (0.615, 0.731, 0.692)
    drifted = summary(diagnosis_accuracy=0.6)
    rows = compare(drifted, summary(diagnosis_accuracy=0.59), tol, start=start)
    promote, reason = decide({"synthetic regression": rows}, tol)
    assert not promote and "diagnose on synthetic regression: start 0.615 -> 0.590" in reason
    table = format_table({"synthetic regression": rows})
    assert "start" in table.splitlines()[0] and "0.615" in table and "WORSE" in table


def test_a_change_beyond_the_tolerance_but_within_the_suites_noise_does_not_reject():
    """The benchmark's case: 74 caliper samples whose answers move both ways by up to 0.3 after any retrain. A
    mean rise of 0.009 (twice the 5% tolerance) inside that noise holds; the same rise with every sample moving
    together is a real regression; without per-sample values the tolerance alone decides."""
    from lib.trainers.gate import PER_SAMPLE, paired_se, per_sample_values

    tol = Tolerance()
    n = 74
    start_errs = [0.094] * n
    noisy = [0.094 + (0.009 + (0.12 if i % 2 else -0.12)) for i in range(n)]  # mean +0.009, sd of change 0.12
    steady = [0.103] * n  # every sample +0.009
    start = summary(measurement_rel_error=0.094, **{PER_SAMPLE: {"measure": start_errs}})
    for after, worse in ((noisy, False), (steady, True)):
        cand = summary(measurement_rel_error=sum(after) / n, **{PER_SAMPLE: {"measure": after}})
        row = next(r for r in compare(start, cand, tol, start=start) if r["task"] == "measure")
        assert row["worse"] is worse
    se = paired_se(start, summary(**{PER_SAMPLE: {"measure": noisy}}), "measure")
    assert se == pytest.approx(0.1208 / n ** 0.5, rel=0.01)
    # misaligned or missing per-sample values: the point rule
    bad = summary(measurement_rel_error=0.103, **{PER_SAMPLE: {"measure": noisy[:-1]}})
    assert next(r for r in compare(start, bad, tol) if r["task"] == "measure")["worse"]
    assert next(r for r in compare(summary(), summary(measurement_rel_error=0.12), tol)
                if r["task"] == "measure")["se"] is None
    # noise_z=0 is the tolerance alone
    cand = summary(measurement_rel_error=0.103, **{PER_SAMPLE: {"measure": noisy}})
    assert next(r for r in compare(start, cand, Tolerance(noise_z=0.0)) if r["task"] == "measure")["worse"]
    # per-sample values are the metric's own units: relative caliper error, keypoint error / width
    vals = per_sample_values([{"task": "measure", "rel_error": 0.1, "score": -0.1},
                              {"task": "keypoints", "score": -12.0, "width": 240},
                              {"task": "diagnose", "score": 1.0}, {"task": "report", "score": 0.3}])
    assert vals == {"measure": [0.1], "keypoints": [0.05], "diagnose": [1.0]}


# -------------------------------------------------------------------------------------- corrections
@pytest.fixture
def study(tmp_path):
    """A 2D 80x60 frame with 0.5 x 0.25 mm pixels at origin (10, -4) mm, identity directions."""
    from fixtures_imaging import sitk_volume
    from umind_core.imageio import read_study

    path = sitk_volume(tmp_path / "scan.nrrd", np.zeros((60, 80), np.uint8), spacing=SPACING, origin=ORIGIN)
    s = read_study(path)
    assert s.geometry.kind == "2d" and s.geometry.frame_shape == (60, 80)
    return s


def lps(x, y):
    """Hand-computed LPS of pixel (x, y) for the fixture's geometry."""
    return [ORIGIN[0] + SPACING[0] * x, ORIGIN[1] + SPACING[1] * y, 0.0]


def mrk(*markups):
    out = []
    for m in markups:
        kind, name = m[0], m[1]
        item = {"type": kind, "name": name, "coordinateSystem": "LPS"}
        if kind == "ROI":
            item.update(center=m[2], size=m[3], orientation=[1, 0, 0, 0, 1, 0, 0, 0, 1], controlPoints=[])
        else:
            item["controlPoints"] = [{"label": f"{name}-{i}", "position": p} for i, p in enumerate(m[2])]
        out.append(item)
    return {"@schema": "x", "markups": out}


def test_markups_and_finding_become_pixels_and_a_diagnosis(study):
    info = {"label_names": {"kidney": 1}, "finding": "Malignant", "report": "Finding: solid.",
            "landmark_target": "kidney",
            "markups": mrk(("Fiducial", "upper pole", [lps(12, 30)]),
                           ("Line", "kidney length", [lps(10, 20), lps(50, 20)]),
                           ("ROI", "lesion", lps(40, 30), [10.0, 5.0, 1.0]))}
    c = read_corrections(info, study)
    assert c.finding == "malignant" and c.report == "Finding: solid." and c.landmark_target == "kidney"
    assert c.skipped == []
    f = c.frames[0]
    assert f.keypoints == [("upper pole", pytest.approx((12.0, 30.0)))]
    (name, xy, mm), = f.lines
    assert name == "kidney length" and xy == pytest.approx((10, 20, 50, 20)) and mm == pytest.approx(40 * 0.5)
    # ROI 10 x 5 mm centred on pixel (40, 30): 20 x 20 pixels
    assert f.boxes == [("lesion", pytest.approx((30.0, 20.0, 50.0, 40.0)))]


def test_bad_corrections_are_skipped_with_their_reason(study):
    info = {"params": {"finding": "suspicious", "markups": mrk(
        ("Fiducial", "apex", [lps(500, 30)]),
        ("Line", "flat", [lps(10, 20), lps(10.2, 20)]),
        ("Fiducial", "", [lps(1, 1)]),
        ("Fiducial", "never seen landmark", [lps(5, 6)]))}}
    c = read_corrections(info, study)
    reasons = "\n".join(c.skipped)
    assert "finding 'suspicious' is not one of normal, benign, malignant" in reasons
    assert "'apex': a point (500.0, 30.0) lies outside the 80x60 image" in reasons
    assert "'flat': it has zero length" in reasons and "it has no name" in reasons
    assert c.finding is None and len(c.skipped) == 4
    assert c.frames[0].keypoints == [("never seen landmark", pytest.approx((5.0, 6.0)))]  # used, not refused
    assert not read_corrections({"markups": {"no": "markups"}}, study).frames
    assert "no 'markups' list" in read_corrections({"markups": {"no": "markups"}}, study).skipped[0]



def test_a_fiducial_node_names_each_point_by_its_label_and_a_line_stays_on_one_frame(tmp_path):
    """On a 3-frame volume: a node of two control points gives two landmarks named by their labels (the node's name
    where a label is empty), each on the frame its point lies on; a line whose ends lie on two frames is refused."""
    from fixtures_imaging import sitk_volume
    from umind_core.imageio import read_study

    vol = read_study(sitk_volume(tmp_path / "vol.nrrd", np.zeros((3, 60, 80), np.uint8),
                                 spacing=(*SPACING, 2.0), origin=(*ORIGIN, 0.0)))
    assert vol.geometry.n_frames == 3

    def at(x, y, k):
        return [ORIGIN[0] + SPACING[0] * x, ORIGIN[1] + SPACING[1] * y, 2.0 * k]

    markups = mrk(("Fiducial", "poles", [at(12, 30, 0), at(60, 30, 2)]), ("Line", "across", [at(10, 20, 0), at(50, 20, 1)]))
    markups["markups"][0]["controlPoints"][1]["label"] = ""
    c = read_corrections({"markups": markups}, vol)
    assert c.frames[0].keypoints == [("poles-0", pytest.approx((12.0, 30.0)))]
    assert c.frames[2].keypoints == [("poles", pytest.approx((60.0, 30.0)))]
    assert c.skipped == ["markup #1 Line 'across': its ends lie on different frames (0 and 1)"]

def test_a_stock_client_label_has_no_corrections(study):
    c = read_corrections({"label_names": {"lesion": 1}}, study)
    assert not c.frames and c.finding is None and c.skipped == []


# ------------------------------------------------------------------------------ appearance, rehearsal
def test_scanner_b_renders_the_same_anatomy_with_another_look():
    from umind_core.data.synthetic import generate

    a = generate(11, site="breast", geometry="linear")
    b = generate(11, site="breast", geometry="linear", appearance="scanner_b")
    assert [o.label for o in a.objects] == [o.label for o in b.objects]
    assert all(np.array_equal(x.mask, y.mask) for x, y in zip(a.objects, b.objects))
    assert a.diagnosis == b.diagnosis and a.spacing == b.spacing

    def axial_corr(img):  # speckle length: correlation of pixels 3 rows apart, inside the scan
        x = img[60:200, 50:206].astype(np.float64)
        x = x - x.mean()
        return float((x[3:] * x[:-3]).mean() / x.var())
    pairs = [(generate(s, site="breast", geometry="linear").image,
              generate(s, site="breast", geometry="linear", appearance="scanner_b").image) for s in (11, 12, 13)]
    # a shorter pulse -> shorter speckle along depth (measured 0.10-0.14 lower on these seeds)
    assert np.mean([axial_corr(a) - axial_corr(b) for a, b in pairs]) > 0.05
    # same probe type, another footprint: a fan from a closer apex covers less of the image (30,302-30,658
    # pixels against 32,038-32,836 on these seeds)
    for seed in (12, 13, 14):
        a, b = generate(seed, site="kidney"), generate(seed, site="kidney", appearance="scanner_b")
        assert a.geometry == b.geometry == "sector" and b.scan_mask.sum() < a.scan_mask.sum() - 1000


def test_rehearsal_mix_keeps_the_new_labels_and_adds_every_task(tmp_path):
    from lib.trainers.rehearsal import mix_rehearsal, synthetic_set
    from umind_core.data.manifest import read_manifest, write_synthetic_dataset

    pool = synthetic_set(tmp_path / "pool", 6, seed0=2_000_000, refusal_rate=1.0)
    assert synthetic_set(tmp_path / "pool", 6, seed0=2_000_000, refusal_rate=1.0) == pool  # made once
    new = write_synthetic_dataset(tmp_path / "new", 2, seed0=9, progress=False, appearance="scanner_b")
    out, n = mix_rehearsal(new, pool, 3, seed=0, out=tmp_path / "mix" / "train.jsonl")
    recs = read_manifest(out)
    assert n == 3 and len(recs) == 5
    assert [r.id for r in recs[:2]] == [r.id for r in read_manifest(new)]
    assert all(r.id.startswith("rehearsal-") and r.image_path.is_file() for r in recs[2:])
    tasks = {c.task for r in recs[2:] for c in r.conversations}
    assert {"segment", "detect"} <= tasks and len(tasks) >= 4
    out, n = mix_rehearsal(new, pool, 4, seed=0, out=tmp_path / "mix2" / "train.jsonl", copies=2)
    ids = [r.id for r in read_manifest(out)]
    assert n == 4 and len(ids) == 8 and len(set(ids)) == 8 and sum("#copy1" in i for i in ids) == 2


def test_augmented_copies_change_pixels_inside_the_scan_and_nothing_else(tmp_path):
    import numpy as np

    from lib.trainers.rehearsal import mix_rehearsal
    from umind_core.data.manifest import read_manifest, write_synthetic_dataset

    new = write_synthetic_dataset(tmp_path / "new", 2, seed0=9, progress=False, appearance="scanner_b")
    out, _ = mix_rehearsal(new, None, 0, seed=0, out=tmp_path / "mix" / "train.jsonl", copies=3, augment=1.0)
    recs = read_manifest(out)
    assert len(recs) == 6
    firsts, copies = recs[:2], recs[2:]
    assert [r.image_path.resolve() for r in firsts] == [r.image_path.resolve() for r in read_manifest(new)]
    for copy in copies:
        orig = firsts[0] if copy.id.startswith(firsts[0].id) else firsts[1]
        a, b = orig.load_image(), copy.load_image()
        scan = orig.load_scan_mask()
        assert a.shape == b.shape and np.abs(a.astype(int) - b.astype(int))[scan].mean() > 1.0
        assert not b[~scan].any()  # outside the scan stays black
        assert copy.annotations.to_json() == orig.annotations.to_json()
        assert [m.sum() for m in copy.load_masks()] == [m.sum() for m in orig.load_masks()]
    assert copies[0].image != copies[2].image  # every copy its own draw
    out2, _ = mix_rehearsal(new, None, 0, seed=0, out=tmp_path / "plain" / "train.jsonl", copies=2)
    assert len({r.image_path.resolve() for r in read_manifest(out2)}) == 2  # augment 0: plain copies


@pytest.mark.parametrize("n_new,ratio,minimum,pool,expected", [
    (16, 2.0, 0, 200, (32, 1)),  # the ratio alone
    (4, 2.0, 96, 200, (96, 12)),  # few labels: many distinct rehearsal images, the new ones repeated
    (4, 2.0, 96, 50, (50, 6)),  # bounded by the pool
    (100, 2.0, 96, 200, (200, 1)),
    (4, 0.0, 96, 200, (0, 1)), (0, 2.0, 96, 200, (0, 1)),  # no rehearsal / nothing new
])
def test_rehearsal_plan_keeps_the_ratio_with_many_distinct_images(n_new, ratio, minimum, pool, expected):
    from lib.trainers.rehearsal import rehearsal_plan

    assert rehearsal_plan(n_new, ratio, minimum, pool) == expected


# ------------------------------------------------------------------------------------ LoRA on any base
def test_a_model_without_adapter_gets_one_and_saves_only_what_changed(tmp_path):
    import torch

    from lib.trainers.umind_lora import folder_bytes
    from umind_core.modeling.tiny import build_model
    from umind_core.modeling.umind import UMindModelError, UMindVL

    build_model("tiny", lora=None).save_pretrained(tmp_path / "full")
    model = UMindVL.from_pretrained(tmp_path / "full", trainable=True)
    assert model.config.lora is None
    model.attach_lora()
    with pytest.raises(UMindModelError, match="already carries"):
        model.attach_lora()
    counts = model.parameter_counts()
    assert 0 < counts["lora"] and counts["trainable"] < counts["total"] / 2
    with torch.no_grad():  # move the adapter off zero so a reload that dropped it would show
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.add_(0.01)
    model.save_pretrained(tmp_path / "v1")
    cfg = json.loads((tmp_path / "v1" / "umind_config.json").read_text())
    assert cfg["base_model"] == str((tmp_path / "full" / "base").resolve()) and cfg["lora"]["r"] == 16
    assert not (tmp_path / "v1" / "base").exists() and (tmp_path / "v1" / "adapter").is_dir()
    assert folder_bytes(tmp_path / "v1") < folder_bytes(tmp_path / "full")
    back = UMindVL.from_pretrained(tmp_path / "v1")
    ids = torch.tensor([[1, 2, 3, 4]])
    model.eval()
    with torch.no_grad():
        a = model.qwen(input_ids=ids).logits
        b = back.qwen(input_ids=ids).logits
        c = UMindVL.from_pretrained(tmp_path / "full").qwen(input_ids=ids).logits
    assert torch.allclose(a, b, atol=1e-5) and not torch.allclose(a, c, atol=1e-4)


def test_a_model_built_in_memory_cannot_refer_to_its_base():
    from umind_core.modeling.tiny import build_model
    from umind_core.modeling.umind import UMindModelError

    with pytest.raises(UMindModelError, match="built in memory"):
        build_model("tiny", lora=None).attach_lora()


# --------------------------------------------------------------------------------------------- trigger
def test_trigger_counts_labels_beyond_the_last_completed_run():
    """Labels saved while a run trains count for the next run; a killed run's labels count again."""
    from lib.retrain import RetrainTrigger

    state = {"labeled": 0, "consumed": 0, "busy": False, "started": 0}

    def start():
        state["started"] += 1
        state["busy"] = True

    t = RetrainTrigger(3, start, labeled=lambda: [f"img{i}" for i in range(state["labeled"])],
                       consumed=lambda: state["consumed"], busy=lambda: state["busy"])

    def save():
        state["labeled"] += 1
        return t.on_label(f"img{state['labeled'] - 1}")

    assert [save()["retrain"] for _ in range(3)] == ["counting", "counting", "started"]
    assert save()["retrain"].startswith("deferred")  # saved while the run trains
    state.update(busy=False, consumed=3)  # the run completed on the first 3 labels
    assert t.state()["since_last_run"] == 1
    assert [save()["retrain"] for _ in range(2)] == ["counting", "started"]
    state.update(busy=False)  # ... and that run was killed: nothing consumed, the next save starts again
    reply = save()
    assert reply["retrain"] == "started" and reply["labels_since_last_run"] == 4 and state["started"] == 3
    assert RetrainTrigger(0, start, lambda: [], lambda: 0).on_label("x") == {"retrain": "disabled"}


def test_trigger_counts_the_label_just_saved_even_while_the_datastore_briefly_drops_it():
    """MONAI Label's file watcher removes a rewritten label and adds it back 0.15 s later; a count in between saw 4 of
    5 labels, started no run, and the loop benchmark scored the previous model for that round."""
    from lib.retrain import RetrainTrigger

    started = []
    listed = ["a", "b", "c", "d"]  # "e" was just saved, and the watcher has dropped it for the moment
    t = RetrainTrigger(5, lambda: started.append(1), labeled=lambda: listed, consumed=lambda: 0, busy=lambda: False)
    assert t.on_label("e")["retrain"] == "started" and started == [1]
    listed[:] = ["a", "b", "c", "d"]
    two = RetrainTrigger(6, lambda: started.append(2), labeled=lambda: listed, consumed=lambda: 0, busy=lambda: False)
    two.on_label("e")  # saved, listed, then dropped by the watcher while "f" is saved
    assert two.on_label("f")["labels_since_last_run"] == 6 and started == [1, 2]
    assert two.on_label("a")["labels_since_last_run"] == 6  # an image listed already counts once


def test_trigger_restarts_a_killed_run_at_server_start_only_when_its_labels_are_due():
    from lib.retrain import RetrainTrigger

    started = []
    due = RetrainTrigger(3, lambda: started.append(1), labeled=lambda: ["a", "b", "c", "d", "e"], consumed=lambda: 0,
                         busy=lambda: False)
    assert due.after_killed_runs([]) is None and started == []  # nothing was killed: wait for label saves
    assert due.after_killed_runs([{"version": 4, "status": "killed"}])["retrain"] == "started" and started == [1]
    few = RetrainTrigger(3, lambda: started.append(1), labeled=lambda: ["a", "b"], consumed=lambda: 0, busy=lambda: False)
    assert few.after_killed_runs([{"version": 4, "status": "killed"}])["retrain"] == "counting" and len(started) == 1
    off = RetrainTrigger(0, lambda: started.append(1), labeled=lambda: [str(i) for i in range(9)], consumed=lambda: 0)
    assert off.after_killed_runs([{"version": 4}]) == {"retrain": "disabled"} and len(started) == 1


def test_random_strategy_serves_only_unlabeled_images_even_when_asked_twice_a_second():
    """MONAI Label's stock Random weighted images by seconds since last served: 0 for all -> a bare 500."""
    from lib.activelearning import RandomUnlabeled

    class Store:
        def get_unlabeled_images(self, tag=None, labels=None):
            return ["b", "c"]

    pick = RandomUnlabeled(seed=0)
    seen = {pick({"strategy": "random"}, Store())["id"] for _ in range(50)}
    assert seen == {"b", "c"}

    class Empty(Store):
        def get_unlabeled_images(self, tag=None, labels=None):
            return []
    assert pick({}, Empty()) is None


def test_balanced_pick_serves_the_target_with_fewest_labels_before_a_more_uncertain_one():
    from lib.activelearning.uncertainty import NO_TARGET, pick_balanced

    scores = {"b1": {"score": 0.9, "target": "breast lesion"}, "b2": {"score": 0.8, "target": "breast lesion"},
              "k1": {"score": 0.2, "target": "kidney"}, "k2": {"score": 0.3, "target": "kidney"},
              "n1": {"score": 1.0, "target": NO_TARGET}}
    assert pick_balanced(["b2", "k1", "k2", "n1"], [], scores) == "n1"  # nothing labelled: the most uncertain
    assert pick_balanced(["b2", "k1", "k2"], ["breast lesion"], scores) == "k2"  # breast has a label, kidney none
    assert pick_balanced(["b2", "k1"], ["breast lesion", "kidney"], scores) == "b2"  # one each: the higher score
    assert pick_balanced(["x", "a"], ["breast lesion"], scores) == "a"  # nothing scored: the first unscored


def test_labelled_images_count_for_the_names_their_labels_give():
    from lib.activelearning.uncertainty import labeled_groups

    class Store:  # the two datastore calls labeled_groups makes
        def get_labeled_images(self):
            return ["b1", "k9", "n1"]

        def get_label_info(self, image_id, tag):
            return {"b1": {"params": {"label_names": {"kidney": 1}}}, "k9": {}, "n1": None}[image_id]

    scores = {"b1": {"score": 0.9, "target": "breast lesion"}, "k9": {"score": 0.1, "target": "kidney"}}
    # b1 was mistaken for a breast image but its label says kidney; k9 has no names: the model's guess;
    # n1 has neither a name nor a score
    assert sorted(labeled_groups(Store(), scores)) == ["kidney", "kidney"]


def test_the_app_builds_the_trainers_config_and_the_trainer_validates_it(tmp_path):
    from lib.conf import ConfError, parse_train_params
    from umind_core.training.config import TrainConfig

    params = parse_train_params({"lr": "3e-4", "max_steps": "40", "batch_size": "4"})
    config = params.trainer_config(tmp_path, val_fraction=0.0, full=False)
    assert (config.lr, config.max_steps, config.batch_size, config.epochs) == (3e-4, 40, 4,
                                                                              TrainConfig(output_dir="x").epochs)
    assert (config.val_fraction, config.full, config.output_dir) == (0.0, False, str(tmp_path))
    # the trainer's augmentation is a train key like the others: off by default, a share in 0..1 when asked for
    assert parse_train_params({}).trainer.augment == 0.0
    assert parse_train_params({"augment": "0.8"}).trainer.augment == 0.8
    assert parse_train_params({"augment": "0.8"}).record()["augment"] == 0.8
    with pytest.raises(ConfError, match="augment"):
        parse_train_params({"augment": "1.5"})
    # the app's parser let warmup_ratio 1 through and the run failed; the trainer's own rule now refuses it here
    with pytest.raises(ConfError, match="warmup_ratio"):
        parse_train_params({"warmup_ratio": "1"})


def test_an_exported_thyroid_label_teaches_the_nodule_and_the_whole_gland(tmp_path):
    """A corrected thyroid as the Slicer module or the loop benchmark submits it (the gland and, inside it, the
    nodule, on one label map): the export gives the nodule its own mask and the gland its full outline, nodule
    included, as the generator's manifests (and so the model) draw a gland. Before, the gland painted last erased
    the nodule, and a nodule painted last left the gland with a hole."""
    from monailabel.datastore.local import LocalDatastore
    from PIL import Image

    from lib.trainers.dataset import export_datastore
    from umind_core.data.manifest import read_manifest
    from umind_core.painter import LabelPainter

    studies = tmp_path / "studies"
    studies.mkdir()
    gland = np.zeros((64, 64), bool)
    gland[10:50, 8:56] = True
    nodule = np.zeros((64, 64), bool)
    nodule[20:30, 20:34] = True
    for k in range(2):
        Image.fromarray(np.full((64, 64), 90 + k, np.uint8)).save(studies / f"thy{k}.png")
    ds = LocalDatastore(str(studies), extensions=("*.png",), auto_reload=False)
    for k in range(2):
        painter = LabelPainter((64, 64))
        for name, mask in ((("thyroid nodule", nodule), ("thyroid", gland)) if k == 0
                           else (("thyroid", gland), ("thyroid nodule", nodule))):
            painter.paint(name, mask)
        path = tmp_path / f"thy{k}_label.png"
        Image.fromarray(painter.labels()).save(path)
        ds.save_label(f"thy{k}", str(path), "final", {"label_names": painter.values})
    data = export_datastore(ds, tmp_path / "out", ("lesion",), 0.5, 1, 0)
    records = read_manifest(data.train_manifest) + read_manifest(data.val_manifest)
    assert len(records) == 2
    for rec in records:
        masks = dict(zip((o.label for o in rec.annotations.objects), rec.load_masks()))
        assert set(masks) == {"thyroid", "thyroid nodule"}
        assert np.array_equal(masks["thyroid nodule"], nodule) and np.array_equal(masks["thyroid"], gland)


def test_restyled_rehearsal_takes_the_studies_look_and_keeps_its_truth(tmp_path):
    import numpy as np

    from lib.trainers.rehearsal import StyleMix, mix_rehearsal, synthetic_set
    from umind_core.data.manifest import read_manifest, write_synthetic_dataset

    pool = synthetic_set(tmp_path / "pool", 6, seed0=2_000_000)
    new = write_synthetic_dataset(tmp_path / "new", 2, seed0=9, progress=False, appearance="scanner_b")
    targets = tuple(r.image_path for r in read_manifest(new))
    style = StyleMix(targets, share=0.5, beta=0.3)
    out, n = mix_rehearsal(new, pool, 4, seed=0, out=tmp_path / "mix" / "train.jsonl", style=style)
    rehearsal = read_manifest(out)[2:]
    restyled = [r for r in rehearsal if "restyled_from" in r.extra]
    assert n == 4 and len(restyled) == 2
    assert {r.extra["restyled_from"] for r in restyled} <= {p.name for p in targets}
    originals = {f"rehearsal-{r.id}": r for r in read_manifest(pool)}
    for rec in restyled:
        orig = originals[rec.id]
        a, b = orig.load_image(), rec.load_image()
        assert rec.image_path.parent.name == "restyled" and a.shape == b.shape
        assert np.abs(a.astype(int) - b.astype(int)).mean() > 1.0
        assert [o.box for o in rec.annotations.objects] == [o.box for o in orig.annotations.objects]
        assert [m.sum() for m in rec.load_masks()] == [m.sum() for m in orig.load_masks()]
        assert rec.conversations == orig.conversations
    again, _ = mix_rehearsal(new, pool, 4, seed=0, out=tmp_path / "mix2" / "train.jsonl", style=style)
    assert [r.extra.get("restyled_from") for r in read_manifest(again)] == [
        r.extra.get("restyled_from") for r in read_manifest(out)]  # the run's seed decides
    plain, _ = mix_rehearsal(new, pool, 4, seed=0, out=tmp_path / "mix3" / "train.jsonl")
    assert not any("restyled_from" in r.extra for r in read_manifest(plain))


def _gate_params(**kw):
    from lib.conf import TrainParams

    return replace(TrainParams(), **kw)


def _gate_sets(held_before, held_after, suite_before, suite_after):
    """(sets, before, after) as `umind_lora.gate_tables` takes them: the held-out labels and the suite, scored."""
    from lib.trainers.umind_lora import SET_HELD_OUT, SET_SYNTHETIC

    return ({SET_HELD_OUT: [], SET_SYNTHETIC: []}, {SET_HELD_OUT: held_before, SET_SYNTHETIC: suite_before},
            {SET_HELD_OUT: held_after, SET_SYNTHETIC: suite_after})


def test_a_version_clearly_better_on_the_teams_scans_is_judged_on_the_suite_within_its_budget():
    """The measured real-image run: 20 fetal-head corrections lifted the held-out labels 0.43 -> 0.69 mIoU, the
    suite lost 0.037 mIoU and keypoints went 1.4% -> 2.0%. Rejected by the tolerance; promoted within the budget."""
    from lib.trainers.umind_lora import SET_HELD_OUT, SET_SYNTHETIC, gate_tables

    held_b = summary(segmentation_miou=0.43, detection_f1=0.40, n_samples={"segment": 8, "detect": 8})
    held_a = summary(segmentation_miou=0.69, detection_f1=1.00, n_samples={"segment": 8, "detect": 8})
    suite_b = summary(segmentation_miou=0.837, keypoint_error_rel_width=0.014)
    suite_a = summary(segmentation_miou=0.800, keypoint_error_rel_width=0.020)
    sets, before, after = _gate_sets(held_b, held_a, suite_b, suite_a)
    params = _gate_params()
    tables, rule, on_budget = gate_tables(before, after, suite_b, sets, params)
    assert on_budget
    assert "clearly better" in rule and "segment 0.430 -> 0.690" in rule
    assert decide(tables, Tolerance())[0] is True
    # the same suite loss without a gain on the team's scans: the tolerance rejects it
    tables, rule, on_budget = gate_tables({**before, SET_HELD_OUT: held_b}, {**after, SET_HELD_OUT: held_b}, suite_b,
                                          sets, params)
    assert "within the tolerance" in rule and not on_budget and decide(tables, Tolerance())[0] is False
    # past the budget the suite still vetoes: 0.837 -> 0.77 is more than 0.05
    tables, _, _ = gate_tables(before, {**after, SET_SYNTHETIC: summary(segmentation_miou=0.77)}, suite_b, sets,
                               params)
    promote, reason = decide(tables, Tolerance())
    # the reason quotes what the row was judged with: the budget here, not the 0.02 tolerance
    assert not promote and "segment on synthetic regression: start 0.837 -> 0.770 (allowed -0.05 absolute)" in reason
    # and any loss on the held-out labels rejects, whatever the suite
    worse = summary(segmentation_miou=0.69, detection_f1=0.30, n_samples={"segment": 8, "detect": 8})
    tables, _, _ = gate_tables(before, {**after, SET_HELD_OUT: worse}, suite_b, sets, params)
    assert decide(tables, Tolerance())[0] is False



def test_a_gain_on_the_teams_scans_counts_as_clear_only_beyond_their_noise():
    """The budget opens on a clear gain: beyond the tolerance and beyond `noise_z` paired standard errors. Six
    held-out masks whose mean rose 0.10 because one rose 0.6 and the rest held (SE 0.10) are not clearly better;
    the same mean with every mask rising 0.10 is; a rise inside the tolerance never is."""
    from lib.trainers.gate import PER_SAMPLE, clear_gains, held_out_tolerance

    tol = held_out_tolerance(Tolerance(), 3)
    before_vals = [0.5] * 6

    def table(after_vals):
        n = {"segment": 6}
        before = summary(segmentation_miou=0.5, n_samples=n, **{PER_SAMPLE: {"segment": before_vals}})
        after = summary(segmentation_miou=sum(after_vals) / 6, n_samples=n, **{PER_SAMPLE: {"segment": after_vals}})
        return [r for r in compare(before, after, tol) if r["task"] == "segment"]

    assert clear_gains(table([1.1] + [0.5] * 5), tol) == []  # one image carries it: within 1.28 SE
    assert [r["task"] for r in clear_gains(table([0.6] * 6), tol)] == ["segment"]  # every image: clear
    assert clear_gains(table([0.504] * 6), tol) == []  # +0.004, inside the 0.005 tolerance

def test_a_run_holds_out_what_the_gate_needs_until_earlier_runs_have_pooled_it():
    """At min_val 1, 20 real corrections held out 1 or 2 and the gate could not call any gain clear (it needs
    held_out_min_samples), so the suite's tolerance ruled. The floor tops the first runs up, then steps back."""
    from umind_core.data.split import hash_split
    from lib.trainers.umind_lora import held_out_floor

    params = _gate_params()
    assert (params.min_val, params.held_out_min_samples) == (1, 3)
    assert [held_out_floor(params, n) for n in (0, 1, 2, 3, 9)] == [3, 2, 1, 1, 1]
    assert held_out_floor(_gate_params(min_val=5), 9) == 5
    ids = [f"{i:03d}_HC" for i in range(20)]
    salts = [f"umind-holdout:{s}" for s in range(40)]
    drawn = [len(hash_split(ids, params.val_fraction, min_val=1, salt=s)[1]) for s in salts]
    floored = [len(hash_split(ids, params.val_fraction, min_val=held_out_floor(params, 0), salt=s)[1])
               for s in salts]
    assert min(drawn) < 3 <= min(floored)  # some seeds draw too few for the gate; with the floor none does
    assert all(f == max(d, 3) for d, f in zip(drawn, floored))


def test_a_budget_granted_to_the_served_version_stays_for_the_next_run():
    """Measured: 20 real corrections promoted within the budget (suite keypoints 0.014 -> 0.018 of the width); at 40
    the candidate held the held-out labels (0.796 -> 0.790, nothing left to gain) and had keypoints 0.017, better
    than served, and was rejected against the start within the 5% tolerance. The budget now stays once granted,
    still counted from the start; a held-out loss still rejects, and nothing carries from a version never promoted
    within the budget."""
    from lib.trainers.umind_lora import SET_HELD_OUT, SET_SYNTHETIC, gate_tables

    n = {"segment": 7, "detect": 7}
    held_b = summary(segmentation_miou=0.796, detection_f1=1.0, n_samples=n)
    held_a = summary(segmentation_miou=0.794, detection_f1=1.0, n_samples=n)  # measured 0.790, within its noise
    start = summary(segmentation_miou=0.837, keypoint_error_rel_width=0.014)
    served = summary(segmentation_miou=0.818, keypoint_error_rel_width=0.018)
    cand = summary(segmentation_miou=0.820, keypoint_error_rel_width=0.017)
    sets, before, after = _gate_sets(held_b, held_a, served, cand)
    params = _gate_params()
    tables, rule, on_budget = gate_tables(before, after, start, sets, params)
    assert not on_budget and decide(tables, Tolerance())[0] is False  # the tolerance: keypoints +21% from the start
    tables, rule, on_budget = gate_tables(before, after, start, sets, params, served_on_budget=True)
    assert on_budget and "the served version was promoted within the synthetic budget" in rule
    assert decide(tables, Tolerance())[0] is True
    # the budget counts from the start: past it, rejected whatever the served version had
    far = summary(segmentation_miou=0.820, keypoint_error_rel_width=0.022)
    tables, _, _ = gate_tables(before, {**after, SET_SYNTHETIC: far}, start, sets, params, served_on_budget=True)
    assert decide(tables, Tolerance())[0] is False
    # a loss on the team's held-out labels rejects, budget or not
    lost = summary(segmentation_miou=0.70, detection_f1=1.0, n_samples=n)
    tables, _, _ = gate_tables(before, {**after, SET_HELD_OUT: lost}, start, sets, params, served_on_budget=True)
    assert decide(tables, Tolerance())[0] is False


def test_an_exported_frame_joins_landmarks_to_the_mask_holding_them_and_each_roi_to_one_object(tmp_path):
    """x is the column, y the row (on a frame that is not square, a swap lands in the other lesion); two ROIs for
    one name correct two objects of that name, one each; and training needs two labelled images."""
    from lib.trainers.corrections import FrameCorrections
    from lib.trainers.dataset import DatasetError, _frame_objects, _split

    lab = np.zeros((40, 60), np.uint8)
    lab[2:10, 20:29] = 1  # rows 2-9, columns 20-28
    lab[25:35, 5:20] = 2  # rows 25-34, columns 5-19
    (tmp_path / "masks").mkdir()
    fixes = FrameCorrections(keypoints=[("tip", (25.0, 5.0))],
                             boxes=[("lesion", (1.0, 1.0, 30.0, 12.0)), ("lesion", (3.0, 20.0, 22.0, 38.0))])
    notes: list[str] = []
    objects = _frame_objects(lab, {1: "lesion", 2: "lesion"}, fixes, None, "img", tmp_path, notes)
    assert [o.box for o in objects] == [(1.0, 1.0, 30.0, 12.0), (3.0, 20.0, 22.0, 38.0)] and not notes
    assert [[k.name for k in o.keypoints] for o in objects] == [["tip"], []]
    with pytest.raises(DatasetError, match="at least 2 labeled images"):
        _split(["only"], 0.5, 1, 0)
