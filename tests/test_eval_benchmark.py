"""`umind eval` reports a source benchmark's own metrics (UltraBench: pooled Dice / IoU per structure, accuracy,
balanced accuracy, macro-F1) beside ours, keyed off the records' import marks or --benchmark."""

from __future__ import annotations

import json

import numpy as np
import pytest

from umind_core.cli import main
from umind_core.data.manifest import (
    Record,
    read_manifest,
    write_manifest,
    write_synthetic_dataset,
)
from umind_core.evaluation import metrics as M
from umind_core.evaluation.benchmarks import (
    benchmark_metrics,
    classification_metrics,
    record_benchmark,
    segmentation_metrics,
)


def _mask(shape, *pixels):
    m = np.zeros(shape, dtype=bool)
    for y, x in pixels:
        m[y, x] = True
    return m


def _ub(dataset: str) -> Record:
    """A record as importers/ultrabench.py marks it."""
    return Record(id=dataset, image="x.png", extra={"split": "test", "labels": {},
                                                            "source": {"format": "ultrabench", "dataset": dataset}})


def test_record_marks():
    assert record_benchmark(_ub("open_kidney")) == ("ultrabench", "open_kidney")
    assert record_benchmark(Record(id="a", image="x.png", extra={"source_format": "UltraBench"})) == \
        ("ultrabench", "unnamed")
    assert record_benchmark(Record(id="a", image="x.png", extra={"source": {"generator": "umind"}})) is None
    assert record_benchmark(None) is None


def test_segmentation_is_pooled_over_pixels_per_structure():
    s = (4, 4)
    samples = [
        # kidney, image 1: truth 4 px (two objects, united), answer 2 of them -> TP 2, FP 0, FN 2
        {"label": "kidney", "_gt_masks": [_mask(s, (0, 0), (0, 1)), _mask(s, (1, 0), (1, 1))],
         "_pred_mask": _mask(s, (0, 0), (0, 1))},
        # kidney, image 2: truth 1 px, answer 4 px over it -> TP 1, FP 3, FN 0
        {"label": "kidney", "_gt_masks": [_mask(s, (2, 2))], "_pred_mask": _mask(s, (2, 2), (2, 3), (3, 2), (3, 3))},
        # cortex: truth 1 px, nothing answered -> TP 0, FP 0, FN 1
        {"label": "cortex", "_gt_masks": [_mask(s, (0, 3))], "_pred_mask": _mask(s)},
    ]
    out = segmentation_metrics(samples)
    kid = out["structures"]["kidney"]
    assert kid["dice"] == pytest.approx(2 * 3 / (2 * 3 + 3 + 2))  # pooled: TP 3, FP 3, FN 2
    assert kid["iou"] == pytest.approx(3 / 8)
    assert kid["mean_image_dice"] == pytest.approx(np.mean([4 / 6, 2 / 5]))  # not the same number
    assert kid["mean_image_iou"] == pytest.approx(np.mean([2 / 4, 1 / 4]))
    assert kid["n_images"] == 2 and out["structures"]["cortex"]["dice"] == 0.0
    assert out["dice"] == pytest.approx(6 / (6 + 3 + 3)) and out["iou"] == pytest.approx(3 / 9)  # + cortex's FN
    # the per-image numbers agree with our own (MONAI) mask metrics
    assert kid["mean_image_dice"] == pytest.approx(np.mean([
        M.mask_dice(samples[0]["_pred_mask"], samples[0]["_gt_masks"][0] | samples[0]["_gt_masks"][1]),
        M.mask_dice(samples[1]["_pred_mask"], samples[1]["_gt_masks"][0])]))


def test_classification_metrics_match_sklearn():
    sk = pytest.importorskip("sklearn.metrics")
    truths = ["benign", "benign", "malignant", "malignant", "benign"]
    preds = ["benign", "malignant", "malignant", None, "benign"]
    out = classification_metrics(truths, preds)
    # benign: TP 2 of 2 answered, 3 true -> P 1, R 2/3; malignant: TP 1 of 2 answered, 2 true -> P 1/2, R 1/2
    assert out["accuracy"] == pytest.approx(3 / 5)
    assert out["balanced_accuracy"] == pytest.approx((2 / 3 + 1 / 2) / 2)
    assert out["macro_f1"] == pytest.approx((0.8 + 0.5) / 2)
    flat = [p or "unparsed" for p in preds]
    labels = ["benign", "malignant"]
    assert out["macro_f1"] == pytest.approx(sk.f1_score(truths, flat, labels=labels, average="macro"))
    assert out["macro_precision"] == pytest.approx(sk.precision_score(truths, flat, labels=labels, average="macro"))
    assert out["balanced_accuracy"] == pytest.approx(sk.recall_score(truths, flat, labels=labels, average="macro"))
    assert out["average_precision"] is None and out["n_unparsed"] == 1


def test_benchmark_metrics_group_by_dataset_and_flag():
    s = (2, 2)
    seg = {"task": "segment", "label": "tumor", "_gt_masks": [_mask(s, (0, 0))], "_pred_mask": _mask(s, (0, 0))}
    dia = {"task": "diagnose", "true": "benign", "pred": "malignant"}
    samples = [{**seg, "_record": _ub("mmotu")}, {**dia, "_record": _ub("mmotu")},
               {**seg, "_record": Record(id="plain", image="x.png")}]
    auto = benchmark_metrics(samples)
    assert auto["name"] == "ultrabench" and list(auto["datasets"]) == ["mmotu"]
    assert auto["datasets"]["mmotu"]["segmentation"]["dice"] == 1.0
    assert auto["datasets"]["mmotu"]["classification"]["accuracy"] == 0.0
    forced = benchmark_metrics(samples, "ultrabench")  # the unmarked record joins "manifest"
    assert sorted(forced["datasets"]) == ["manifest", "mmotu"]
    assert benchmark_metrics(samples, "none") is None
    assert benchmark_metrics([{**seg, "_record": Record(id="p", image="x.png")}]) is None
    with pytest.raises(ValueError, match="choose auto"):
        benchmark_metrics(samples, "medsegbench")


@pytest.fixture(scope="module")
def ub_manifest(tmp_path_factory):
    """The synthetic set (seeds 18..23: breast benign, thyroid malignant, kidney, fetal head, ...) with its first
    four records marked as UltraBench's "synthetic_ub" the way the importer marks them; the rest unmarked."""
    path = write_synthetic_dataset(tmp_path_factory.mktemp("ub") / "ds", 6, seed0=18, size=128, progress=False)
    records = read_manifest(path)
    for rec in records[:4]:
        rec.extra = {"split": "test", "labels": {}, "source": {"format": "ultrabench", "dataset": "synthetic_ub"}}
    write_manifest(records, path)
    return path


def test_cli_eval_reports_the_benchmark_beside_ours(ub_manifest, tiny_model_factory, monkeypatch, tmp_path):
    from umind_core import demo

    model = tiny_model_factory()
    model.eval()
    monkeypatch.setattr(demo, "load_model", lambda *a, **k: model)
    out = tmp_path / "out"
    assert main(["eval", "--manifest", str(ub_manifest), "--out", str(out), "--tasks", "segment,diagnose",
                 "--max-new-tokens", "4", "--overlays", "0", "--batch-size", "4"]) == 0
    data = json.loads((out / "metrics.json").read_text())
    bench = data["benchmark"]
    assert bench["name"] == "ultrabench" and list(bench["datasets"]) == ["synthetic_ub"]
    entry = bench["datasets"]["synthetic_ub"]
    marked = {r.id for r in read_manifest(ub_manifest)[:4]}
    seg_labels = {s["label"] for s in data["samples"] if s["task"] == "segment" and s["id"] in marked}
    assert set(entry["segmentation"]["structures"]) == seg_labels
    n_seg = sum(s["task"] == "segment" and s["id"] in marked for s in data["samples"])
    assert entry["segmentation"]["n_samples"] == n_seg
    for r in entry["segmentation"]["structures"].values():
        assert 0.0 <= r["dice"] <= 1.0 and 0.0 <= r["iou"] <= r["dice"] + 1e-12
    n_dia = sum(s["task"] == "diagnose" and s["id"] in marked for s in data["samples"])
    assert entry["classification"]["n"] == n_dia > 0
    assert "metrics" in data and data["metrics"]["summary"]  # our own report is still there
    report = (out / "report.md").read_text()
    assert "## Benchmark metrics (ultrabench)" in report and "### synthetic_ub: segmentation" in report
    assert report.index("UMind evaluation") < report.index("## Benchmark metrics")

    out2 = tmp_path / "none"
    assert main(["eval", "--manifest", str(ub_manifest), "--out", str(out2), "--tasks", "segment", "--limit", "1",
                 "--max-new-tokens", "2", "--overlays", "0", "--benchmark", "none"]) == 0
    assert "benchmark" not in json.loads((out2 / "metrics.json").read_text())
    assert "Benchmark metrics" not in (out2 / "report.md").read_text()
