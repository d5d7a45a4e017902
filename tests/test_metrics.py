"""Metrics of the UMind-VL report, the U2-Bench protocol and the report writer, on hand-computed cases."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import numpy as np
import pytest

from umind_core.evaluation import (
    MetricInputError,
    ReportInputError,
    box_iou,
    box_iou_matrix,
    classification_metrics,
    detection_best_f1,
    detection_prf,
    is_refusal,
    keypoint_errors,
    mask_dice,
    mask_iou,
    match_boxes,
    measurement_error,
    measurement_errors,
    refusal_accuracy,
    render_markdown,
    segmentation_miou,
    write_report,
)


def _mask(shape, rows, cols):
    m = np.zeros(shape, dtype=bool)
    m[rows, cols] = True
    return m


# ---------------------------------------------------------------------------------------- masks

A = _mask((4, 4), slice(0, 2), slice(0, 2))  # 4 px: rows 0-1, cols 0-1
B = _mask((4, 4), slice(0, 2), slice(1, 3))  # 4 px: rows 0-1, cols 1-2; overlap = col 1 -> 2 px
EMPTY = np.zeros((4, 4), dtype=bool)


def test_mask_iou_and_dice_hand_computed():
    # intersection 2, union 4 + 4 - 2 = 6 -> IoU 1/3; Dice 2*2 / (4 + 4) = 0.5
    assert mask_iou(A, B) == pytest.approx(1 / 3)
    assert mask_dice(A, B) == pytest.approx(0.5)
    assert mask_iou(A, A) == pytest.approx(1.0)
    # 0/1 integer masks are accepted and mean the same
    assert mask_iou(A.astype(np.uint8), B.astype(np.int64)) == pytest.approx(1 / 3)


def test_mask_empty_cases():
    assert mask_iou(EMPTY, EMPTY) == 1.0  # both empty: a correct "nothing here"
    assert mask_dice(EMPTY, EMPTY) == 1.0
    assert mask_iou(A, EMPTY) == 0.0  # false positive on an empty image
    assert mask_iou(EMPTY, A) == 0.0  # missed target
    assert mask_dice(EMPTY, A) == 0.0


def test_mask_bad_input():
    with pytest.raises(MetricInputError, match="shapes differ"):
        mask_iou(A, np.zeros((4, 5), bool))
    with pytest.raises(MetricInputError, match="threshold"):
        mask_iou(A.astype(float) * 0.7, B)
    with pytest.raises(MetricInputError, match="pred"):
        mask_iou(np.zeros(4, bool), B)


def test_mask_iou_matches_numpy_and_monai_meaniou_on_random_masks():
    import torch
    from monai.metrics import DiceMetric, MeanIoU

    rng = np.random.default_rng(0)
    preds, gts = [], []
    for density in (0.05, 0.3, 0.5, 0.9):
        for _ in range(5):
            preds.append(rng.random((32, 40)) < density)
            gts.append(rng.random((32, 40)) < density)
    ours_iou = np.array([mask_iou(p, g) for p, g in zip(preds, gts)])
    ours_dice = np.array([mask_dice(p, g) for p, g in zip(preds, gts)])
    ref_iou = np.array([(p & g).sum() / (p | g).sum() for p, g in zip(preds, gts)])
    ref_dice = np.array([2 * (p & g).sum() / (p.sum() + g.sum()) for p, g in zip(preds, gts)])
    np.testing.assert_allclose(ours_iou, ref_iou, rtol=1e-6)
    np.testing.assert_allclose(ours_dice, ref_dice, rtol=1e-6)
    P = torch.from_numpy(np.stack(preds)[:, None].astype(np.float32))
    G = torch.from_numpy(np.stack(gts)[:, None].astype(np.float32))
    miou = MeanIoU(include_background=True, reduction="none")
    miou(P, G)
    np.testing.assert_allclose(ours_iou, miou.aggregate().numpy().ravel(), rtol=1e-6)
    dm = DiceMetric(include_background=True, reduction="none")
    dm(P, G)
    np.testing.assert_allclose(ours_dice, dm.aggregate().numpy().ravel(), rtol=1e-6)


def test_segmentation_miou_averages_sites_not_images():
    samples = [("breast", A, A), ("breast", A, B), ("thyroid", A, EMPTY)]
    res = segmentation_miou(samples)
    # breast: (1 + 1/3) / 2 = 2/3; thyroid: 0; mean over sites = 1/3 (over images it would be 4/9)
    assert res["per_site"] == pytest.approx({"breast": 2 / 3, "thyroid": 0.0})
    assert res["mean"] == pytest.approx(1 / 3)
    assert res["n"] == 3
    assert res["n_per_site"] == {"breast": 2, "thyroid": 1}


def test_segmentation_miou_errors():
    with pytest.raises(MetricInputError, match="empty"):
        segmentation_miou([])
    with pytest.raises(MetricInputError, match=r"samples\[0\] \(liver\)"):
        segmentation_miou([("liver", A, np.zeros((2, 2), bool))])
    with pytest.raises(MetricInputError, match="site"):
        segmentation_miou([("", A, A)])


# ---------------------------------------------------------------------------------------- boxes


def test_box_iou_hand_computed():
    # [0,0,2,2] and [1,1,3,3]: intersection 1x1 = 1, union 4 + 4 - 1 = 7
    assert box_iou([0, 0, 2, 2], [1, 1, 3, 3]) == pytest.approx(1 / 7)
    assert box_iou([0, 0, 10, 10], [0, 0, 10, 5]) == pytest.approx(0.5)  # 50 / 100
    assert box_iou([0, 0, 1, 1], [5, 5, 6, 6]) == 0.0
    m = box_iou_matrix([[0, 0, 2, 2], [0, 0, 1, 1]], [[1, 1, 3, 3], [0, 0, 2, 2], [5, 5, 6, 6]])
    # second row: [0,0,1,1] vs [0,0,2,2] -> 1 / 4
    np.testing.assert_allclose(m, [[1 / 7, 1, 0], [0, 0.25, 0]], rtol=1e-6)
    assert box_iou_matrix([], [[0, 0, 1, 1]]).shape == (0, 1)
    assert box_iou_matrix([[0, 0, 1, 1]], np.zeros((0, 4))).shape == (1, 0)


def test_box_bad_input():
    with pytest.raises(MetricInputError, match="x1 <= x2"):
        box_iou([2, 0, 1, 1], [0, 0, 1, 1])
    with pytest.raises(MetricInputError, match=r"shape \(n, 4\)"):
        box_iou_matrix([[0, 0, 1]], [[0, 0, 1, 1]])
    with pytest.raises(MetricInputError, match="finite"):
        box_iou([0, 0, np.nan, 1], [0, 0, 1, 1])
    with pytest.raises(MetricInputError, match="one box each"):
        box_iou([[0, 0, 1, 1], [0, 0, 2, 2]], [0, 0, 1, 1])


def test_detection_prf_hand_computed():
    preds = [
        [[0, 0, 10, 5], [21, 21, 31, 31], [50, 50, 60, 60]],  # IoU 0.5 -> TP; 81/119 -> TP; stray -> FP
        [],  # the target of image 2 is missed -> FN
        [[0, 0, 1, 1]],  # image 3 has no target -> FP
    ]
    gts = [[[0, 0, 10, 10], [20, 20, 30, 30]], [[0, 0, 10, 10]], []]
    res = detection_prf(preds, gts)
    # tp 2, fp 2, fn 1: precision 2/4, recall 2/3, F1 = 2 * 0.5 * 2/3 / (0.5 + 2/3) = 4/7
    assert (res["tp"], res["fp"], res["fn"]) == (2, 2, 1)
    assert res["precision"] == pytest.approx(0.5)
    assert res["recall"] == pytest.approx(2 / 3)
    assert res["f1"] == pytest.approx(4 / 7)
    # at IoU 0.6 the first box (IoU exactly 0.5) no longer counts: tp 1, fp 3, fn 2
    strict = detection_prf(preds, gts, iou_threshold=0.6)
    assert (strict["tp"], strict["fp"], strict["fn"]) == (1, 3, 2)


def test_detection_greedy_takes_highest_iou_and_is_one_to_one():
    gt = [[0, 0, 10, 10]]
    preds = [[0, 0, 10, 8], [0, 0, 10, 10]]  # IoU 0.8, then 1.0
    assert match_boxes(preds, gt) == [(1, 0, 1.0)]
    res = detection_prf([preds], [gt])
    assert (res["tp"], res["fp"], res["fn"]) == (1, 1, 0)  # a duplicate is a false positive


def test_detection_edge_cases():
    none = detection_prf([[], []], [[], []])
    assert (none["precision"], none["recall"], none["f1"]) == (1.0, 1.0, 1.0)
    silent = detection_prf([[]], [[[0, 0, 1, 1]]])
    assert (silent["precision"], silent["recall"], silent["f1"], silent["fn"]) == (0.0, 0.0, 0.0, 1)
    spurious = detection_prf([[[0, 0, 1, 1]]], [[]])
    assert (spurious["precision"], spurious["recall"], spurious["fp"]) == (0.0, 0.0, 1)
    all_miss = detection_prf([[[50, 50, 60, 60]], [[70, 70, 80, 80]]], [[[0, 0, 10, 10]], [[0, 0, 5, 5]]])
    assert (all_miss["tp"], all_miss["fp"], all_miss["fn"], all_miss["f1"]) == (0, 2, 2, 0.0)
    with pytest.raises(MetricInputError, match="2 images, expected 1"):
        detection_prf([[]], [[], []])
    with pytest.raises(MetricInputError, match="image 0"):
        detection_prf([[[0, 0, 1]]], [[]])
    with pytest.raises(MetricInputError, match="iou_threshold"):
        detection_prf([[]], [[]], iou_threshold=0)


def test_detection_label_aware():
    box = [[0, 0, 10, 10]]
    agnostic = detection_prf([box], [box])
    assert agnostic["tp"] == 1
    wrong = detection_prf([box], [box], pred_labels=[["benign"]], gt_labels=[["malignant"]])
    assert (wrong["tp"], wrong["fp"], wrong["fn"]) == (0, 1, 1)
    right = detection_prf([box], [box], pred_labels=[["benign"]], gt_labels=[["benign"]])
    assert right["tp"] == 1
    with pytest.raises(MetricInputError, match="both or neither"):
        detection_prf([box], [box], pred_labels=[["benign"]])


def test_detection_best_f1():
    gts = [[[0, 0, 10, 10]], [[20, 20, 30, 30]]]
    preds = [[[0, 0, 10, 10], [50, 50, 60, 60]], [[20, 20, 30, 30]]]
    scores = [[0.9, 0.8], [0.3]]
    res = detection_best_f1(preds, scores, gts)
    # cut-off 0.9: tp1 fn1 -> F1 2/3; 0.8: tp1 fp1 fn1 -> 0.5; 0.3: tp2 fp1 -> P 2/3, R 1, F1 0.8
    assert res["f1"] == pytest.approx(0.8)
    assert res["score_threshold"] == pytest.approx(0.3)
    assert (res["tp"], res["fp"], res["fn"]) == (2, 1, 0)
    with pytest.raises(MetricInputError, match=r"scores\[0\]"):
        detection_best_f1(preds, [[0.9], [0.3]], gts)


def test_prf_counts_hand_computed():
    from umind_core.evaluation import PRF

    # tp 3, fp 1, fn 2: precision 3/4, recall 3/5, F1 = 2tp / (2tp + fp + fn) = 6/9
    counts = PRF(tp=3, fp=1, fn=2)
    assert (counts.precision, counts.recall, counts.f1) == pytest.approx((0.75, 0.6, 2 / 3))


# ------------------------------------------------------------------------------------ keypoints


def test_keypoint_errors_hand_computed():
    gt = [(0, 0), (10, 10), (5, 5)]
    pred = [(3, 4), None, (5, 5)]  # errors 5 (3-4-5 triangle), missing, 0
    res = keypoint_errors(pred, gt, spacing=(0.5, 2.0), image_width=100)
    assert res["mean_px"] == pytest.approx(2.5)  # (5 + 0) / 2, the miss is not a zero error
    assert res["n"] == 3 and res["n_missing"] == 1
    assert res["per_point"] == [pytest.approx(5.0), None, 0.0]
    # mm: (3 * 0.5, 4 * 2.0) = (1.5, 8) -> sqrt(2.25 + 64) = sqrt(66.25); mean with 0 -> half of that
    assert res["mean_mm"] == pytest.approx(math.sqrt(66.25) / 2)
    assert res["mean_rel_width"] == pytest.approx(0.025)  # 2.5 / 100


def test_keypoint_errors_per_point_spacing_and_nan_as_missing():
    gt = np.array([[0.0, 0.0], [0.0, 0.0]])
    pred = [(3, 4), (np.nan, 1)]
    res = keypoint_errors(pred, gt, spacing=[[1.0, 1.0], [9.0, 9.0]], image_width=[10, 1000])
    assert res["n_missing"] == 1
    assert res["mean_mm"] == pytest.approx(5.0)
    assert res["mean_rel_width"] == pytest.approx(0.5)  # 5 / 10; the second point is missing
    assert "mean_mm" not in keypoint_errors(pred, gt)


def test_keypoint_errors_all_missing_and_bad_input():
    res = keypoint_errors([None, None], [(1, 1), (2, 2)], spacing=1.0)
    assert res["mean_px"] is None and res["mean_mm"] is None and res["n_missing"] == 2
    with pytest.raises(MetricInputError, match="pred_pts: 1 points for 2"):
        keypoint_errors([(0, 0)], [(1, 1), (2, 2)])
    with pytest.raises(MetricInputError, match="gt_pts"):
        keypoint_errors([(0, 0)], [(1, 1, 1)])
    with pytest.raises(MetricInputError, match="spacing"):
        keypoint_errors([(0, 0)], [(1, 1)], spacing=0)
    with pytest.raises(MetricInputError, match=r"pred_pts\[0\]"):
        keypoint_errors([(0, 0, 0)], [(1, 1)])


def test_measurement_errors():
    assert measurement_error(9, 10) == pytest.approx(0.1)
    assert measurement_error(12, 10) == pytest.approx(0.2)
    agg = measurement_errors([9, None, 12], [10, 10, 10])
    # (0.1 + 0.2) / 2 = 0.15; |9-10| and |12-10| -> mean 1.5; the None is a miss
    assert agg["mean_rel"] == pytest.approx(0.15)
    assert agg["median_rel"] == pytest.approx(0.15)
    assert agg["mean_abs"] == pytest.approx(1.5)
    assert (agg["n"], agg["n_missing"]) == (3, 1)
    assert measurement_errors([None], [1.0])["mean_rel"] is None
    with pytest.raises(MetricInputError, match="gt_len"):
        measurement_error(1, 0)
    with pytest.raises(MetricInputError, match="item 1"):
        measurement_errors([1, 2], [1, -1])


# ------------------------------------------------------------------------------- classification


def test_classification_metrics_hand_computed():
    y_true = ["benign", "benign", "malignant", "malignant"]
    y_pred = ["benign", "malignant", "malignant", "uncertain"]
    res = classification_metrics(y_true, y_pred, labels=["benign", "malignant"])
    assert res["accuracy"] == pytest.approx(0.5)  # 2 of 4; "uncertain" is an error
    # benign: P 1/1, R 1/2 -> F1 2/3; malignant: P 1/2 (2 predicted), R 1/2 -> F1 1/2
    assert res["per_class"]["benign"] == pytest.approx({"precision": 1.0, "recall": 0.5, "f1": 2 / 3, "support": 2})
    assert res["per_class"]["malignant"]["f1"] == pytest.approx(0.5)
    assert res["macro_f1"] == pytest.approx(7 / 12)  # (2/3 + 1/2) / 2
    assert res["confusion"] == {"benign": {"benign": 1, "malignant": 1}, "malignant": {"malignant": 1, "uncertain": 1}}
    # without labels "uncertain" becomes a class with F1 0: (2/3 + 1/2 + 0) / 3
    assert classification_metrics(y_true, y_pred)["macro_f1"] == pytest.approx(7 / 18)


def test_classification_metrics_errors():
    with pytest.raises(MetricInputError, match="not in labels"):
        classification_metrics(["cyst"], ["cyst"], labels=["benign"])
    with pytest.raises(MetricInputError, match="1 predictions for 2"):
        classification_metrics(["a", "b"], ["a"])
    with pytest.raises(MetricInputError, match="empty"):
        classification_metrics([], [])


def test_refusals():
    assert is_refusal("The question is not applicable to this anatomical region.")
    assert is_refusal("No such structure is present in this image")
    assert is_refusal("The gallbladder is NOT VISIBLE in this view")
    assert is_refusal("I can\u2019t determine this")  # typographic apostrophe
    assert not is_refusal("Malignant. The nodule measures 12 mm.")
    assert not is_refusal("Malignancy cannot be excluded; BI-RADS 4a.")  # a hedge, not a refusal
    answers = ["benign", "This image does not show a kidney.", "The liver is not present", "malignant"]
    # expected: answer, refuse, refuse, refuse -> the last is wrong: 3 / 4
    assert refusal_accuracy(answers, [False, True, True, True]) == pytest.approx(0.75)
    with pytest.raises(MetricInputError, match="should_refuse"):
        refusal_accuracy(["a"], [True, False])


# -------------------------------------------------------------------------------------- report


RESULTS = {
    "Segmentation mIoU (%)": {
        "UMind-VL": {"Breast": 0.8122, "Thyroid": 0.735, "Average": 0.7736},
        "Baseline": {"Breast": 0.7, "Average": 0.7},
    },
    "Keypoint MDE (px)": {"UMind-VL": {"Cardiac": 11.44, "n": 12}},
}


def test_render_markdown_table_layout():
    md = render_markdown(RESULTS, title="Demo", scale={"Segmentation mIoU (%)": 100})
    lines = md.splitlines()
    assert lines[0] == "# Demo"
    i = lines.index("## Segmentation mIoU (%)")
    assert lines[i + 2] == "|  | UMind-VL | Baseline |"
    assert lines[i + 3] == "|---|---:|---:|"
    assert lines[i + 4] == "| Breast | 81.22 | 70.00 |"
    assert lines[i + 5] == "| Thyroid | 73.50 | – |"  # the baseline has no thyroid cell
    assert lines[i + 6] == "| Average | 77.36 | 70.00 |"
    assert "| Cardiac | 11.44 |" in lines  # not scaled
    assert "| n | 12 |" in lines  # integers stay integers
    assert "| a\\|b | 1.00 |" in render_markdown({"s": {"m": {"a|b": 1.0}}}).splitlines()


def test_render_markdown_bad_input():
    with pytest.raises(ReportInputError, match="non-empty"):
        render_markdown({})
    with pytest.raises(ReportInputError, match=r"results\['s'\]\['m'\]\['r'\]"):
        render_markdown({"s": {"m": {"r": [1, 2]}}})
    with pytest.raises(ReportInputError, match="scale"):
        render_markdown(RESULTS, scale={"nope": 100})


def test_write_report(tmp_path):
    results = {"Detection": {"UMind-VL": {"precision": np.float32(0.5), "recall": float("nan"), "tp": np.int64(3)}}}
    paths = write_report(results, tmp_path / "out")
    assert paths.markdown.read_text(encoding="utf-8").startswith("# UMind evaluation")
    data = json.loads(paths.metrics.read_text(encoding="utf-8"))
    assert data == {"Detection": {"UMind-VL": {"precision": 0.5, "recall": None, "tp": 3}}}
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["metrics.json", "report.md"]
    assert "| recall | – |" in paths.markdown.read_text(encoding="utf-8")


def test_import_is_light():
    code = "import sys, umind_core.evaluation; print('torch' in sys.modules, 'monai' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]
