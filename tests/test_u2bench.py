"""U2-Bench protocol against cases derived by hand from the benchmark's published definitions.

Every expected number below is worked out in the comment next to it from the rules of the benchmark's
evaluation kit and U2-Score table script (fixed CVE ranges, per-dataset means, clip after averaging,
missing tasks, exact lowercase answer matching, pycocoevalcap BLEU-4); none comes from running our code.
"""

from __future__ import annotations

import math

import pytest

from umind_core.evaluation import (
    CVE_RANGES,
    NOT_VISIBLE,
    POSITION_CLASSES,
    U2_DATASETS,
    U2_WEIGHTS,
    U2BenchInputError,
    bleu4,
    bleu_lenient,
    classification_accuracy,
    cve_rmse,
    localization_accuracy,
    normalize_position,
    position_class,
    region_of,
    task_scores,
    tokenize,
    u2_score,
)

NAN = float("nan")


# ------------------------------------------------------------------------------------ regions


def test_position_class_thresholds_and_names():
    assert len(set(POSITION_CLASSES)) == 9
    assert position_class(0.0, 0.0) == "upper left"
    assert position_class(1.0, 1.0) == "lower right"
    assert position_class(0.4499, 0.5) == "middle left"  # just below low -> left
    assert position_class(0.45, 0.45) == "center"  # low itself is centre
    assert position_class(0.5499, 0.5499) == "center"
    assert position_class(0.55, 0.55) == "lower right"  # high itself is right / lower
    assert position_class(0.5, 0.2) == "upper center"
    assert position_class(1.2, 0.5) == "middle right"  # out of range is binned, as the benchmark does
    assert position_class(NAN, 0.5) == NOT_VISIBLE
    grid = {position_class(x, y) for x in (0.1, 0.5, 0.9) for y in (0.1, 0.5, 0.9)}
    assert grid == set(POSITION_CLASSES)
    with pytest.raises(U2BenchInputError, match="low, high"):
        position_class(0.5, 0.5, low=0.6, high=0.4)


def test_region_of_ground_truth_forms():
    assert region_of(None) == NOT_VISIBLE
    assert region_of(NAN) == NOT_VISIBLE
    assert region_of((NAN, 0.3)) == NOT_VISIBLE
    assert region_of(("x", 0.3)) == NOT_VISIBLE
    assert region_of([0.2, 0.3, 0.1, 0.1]) == "upper left"  # a box (cx, cy, w, h): its centre
    assert region_of("Upper Left") == "upper left"
    with pytest.raises(U2BenchInputError, match="region name"):
        region_of("top-left")


def test_normalize_position_is_lenient_only():
    assert normalize_position("Top-left") == "upper left"
    assert normalize_position("lower centre") == "lower center"
    assert normalize_position(" Center. ") == "center"
    assert normalize_position("Not visible") == NOT_VISIBLE
    assert normalize_position("somewhere over there") is None


def test_localization_accuracy_official_and_lenient():
    preds = ["upper left", "Upper Right", "top-left", None, "center ", 5]
    gts = [(0.2, 0.3), (0.9, 0.1), (0.1, 0.1), (0.5, 0.5), (0.5, 0.5), (0.1, 0.1)]
    # official: hit, hit (lowercased), miss (not the benchmark's name), dropped (None),
    # miss (trailing space is not trimmed), dropped (not a string) -> 2 / 4
    assert localization_accuracy(preds, gts) == pytest.approx(0.5)
    # lenient: hit, hit, hit, None = "not visible" vs center miss, hit, 5 = "not visible" miss -> 4 / 6
    assert localization_accuracy(preds, gts, lenient=True) == pytest.approx(4 / 6)
    # a missing ground truth is "not visible", and the answer must say so
    assert localization_accuracy(["not visible", "Not Visible"], [None, NAN]) == 1.0
    assert math.isnan(localization_accuracy([None, 1.0], [(0.1, 0.1), None]))  # no answer left
    with pytest.raises(U2BenchInputError, match="2 items for 1"):
        localization_accuracy(["a", "b"], [None])


# ----------------------------------------------------------------------------- classification


def test_classification_accuracy_hand_case():
    preds = ["Benign", "malignant ", "normal", None, "2", "two", 3]
    gts = ["['benign']", "malignant", "Normal", "benign", 2, 2, 3]
    # hit (lowercase, brackets and quotes removed from the label), miss (no trimming), hit,
    # dropped (no string), hit ("2" reads as 2), dropped ("two" is not an integer), hit -> 4 / 5
    assert classification_accuracy(preds, gts) == pytest.approx(0.8)
    assert math.isnan(classification_accuracy(["x"], [1]))
    with pytest.raises(U2BenchInputError, match="strings or integers"):
        classification_accuracy(["a"], [1.5])


# ------------------------------------------------------------------------------------------ CVE


def test_cve_fixed_ranges_are_the_benchmarks():
    assert CVE_RANGES == {"18": (10.0, 75.0), "27": (0.3, 1.5), "50": (100.0, 400.0), "57": (0.0, 85.0)}


def test_cve_rmse_hand_case():
    preds = [55, 30, "about 60", 50]
    gts = [60, 30, 45, None]
    # dataset 18 (EF, range 10-75): pairs (55, 60) and (30, 30); "about 60" fails to parse and is
    # counted; the item without truth is skipped. Scaled errors 5/65 and 0 -> RMSE (5/65) / sqrt(2).
    res = cve_rmse(preds, gts, "18")
    assert res["rmse"] == pytest.approx((5 / 65) / math.sqrt(2))
    assert (res["n"], res["failed"]) == (2, 1)
    # the same errors in the sample's own range [30, 60] (lenient): (5/30) / sqrt(2)
    assert cve_rmse(preds, gts, sample_range=True)["rmse"] == pytest.approx((5 / 30) / math.sqrt(2))
    assert cve_rmse([2.0], [1.0], value_range=(0, 4))["rmse"] == pytest.approx(0.25)
    # an error larger than the range is not clipped at the dataset level: |400 - 100| / 65
    assert cve_rmse([400], [100], "18")["rmse"] == pytest.approx(300 / 65)
    assert math.isnan(cve_rmse(["nan"], [50], "18")["rmse"])  # "nan" parses, as in the benchmark
    with pytest.raises(U2BenchInputError, match="no fixed range for '31'"):
        cve_rmse([1], [1], "31")


# ----------------------------------------------------------------------------------------- BLEU


def _coco_bleu4(pairs):
    """BLEU-4 by pycocoevalcap's definition, worked out from per-order match counts given by hand.

    pairs: (matches per order 1..4, hypothesis n-gram counts per order 1..4, hyp length, ref length)
    summed over the corpus. Smoothing tiny = 1e-15 on matches, small = 1e-9 on counts.
    """
    (m, g, hl, rl) = pairs
    prod = 1.0
    for k in range(4):
        prod *= (m[k] + 1e-15) / (g[k] + 1e-9)
    score = prod ** 0.25
    ratio = (hl + 1e-15) / (rl + 1e-9)
    return score * math.exp(1 - 1 / ratio) if ratio < 1 else score


def test_bleu4_matches_pycocoevalcap_definition():
    pytest.importorskip("pycocoevalcap")
    # "a b c d e" vs "a b c d f": matches 4/5, 3/4, 2/3, 1/2 -> (1/5) ** 0.25
    assert bleu4(["a b c d e"], ["a b c d f"]) == pytest.approx(0.2 ** 0.25, rel=1e-6)
    assert bleu4(["a b c d e"], ["a b c d f"]) == pytest.approx(_coco_bleu4(([4, 3, 2, 1], [5, 4, 3, 2], 5, 5)))
    # case is kept: "A" is not "a" -> matches 3/5, 2/4, 1/3, 0/2
    assert bleu4(["A b c d e"], ["a b c d f"]) == pytest.approx(_coco_bleu4(([3, 2, 1, 0], [5, 4, 3, 2], 5, 5)))
    assert bleu4(["A b c d e"], ["a b c d f"]) < 1e-3
    # short hypothesis: all orders match, brevity penalty exp(1 - 6/4)
    assert bleu4(["a b c d"], ["a b c d e f"]) == pytest.approx(math.exp(-0.5), rel=1e-6)
    # corpus pooling: 8/9, 6/7, 4/5, 2/3 over both items, equal lengths
    pooled = bleu4(["a b c d e", "a b c d"], ["a b c d f", "a b c d"])
    assert pooled == pytest.approx((8 / 9 * 6 / 7 * 4 / 5 * 2 / 3) ** 0.25, rel=1e-6)
    # Chinese without spaces is one token: orders 2-4 have no n-gram, so BLEU-4 is about 3e-5
    zh = bleu4(["甲状腺结节"], ["甲状腺结节"])
    assert zh == pytest.approx(_coco_bleu4(([1, 0, 0, 0], [1, 0, 0, 0], 1, 1)), rel=1e-6)
    assert zh < 1e-4
    with pytest.raises(U2BenchInputError, match="references"):
        bleu4(["a"], ["a", "b"])


def test_bleu_lenient_hand_cases():
    text = "The left ventricle is normal in size, with preserved systolic function."
    assert bleu_lenient([text], [text]) == pytest.approx(1.0)
    assert bleu_lenient(["alpha beta gamma delta"], ["one two three four"]) == 0.0
    # p1 = 5/6, p2 = 3/5, p3 = 1/4, p4 = 0/3 -> exp smoothing 1 / (2 * 3): (1/48) ** 0.25
    assert bleu_lenient(["the cat sat on the mat"], ["the cat is on the mat"]) == pytest.approx(48 ** -0.25)
    assert bleu_lenient(["the cat"], ["the cat sat on the mat"]) == pytest.approx(math.exp(-2))
    assert bleu_lenient(["the cat"], [["a dog", "the cat"]]) == pytest.approx(1.0)
    assert tokenize("Normal, 5mm.") == ["normal", ",", "5mm", "."]
    assert tokenize("甲状腺 nodule") == ["甲", "状", "腺", "nodule"]


# -------------------------------------------------------------------------------------- U2-Score


def test_weights_and_dataset_lists():
    assert math.isclose(sum(U2_WEIGHTS.values()), 1.0)
    assert set(U2_WEIGHTS) == set(U2_DATASETS)
    assert U2_DATASETS["KD"] == ("48",) and U2_DATASETS["RG"] == ("39",) and U2_DATASETS["CG"] == ("10", "44")
    assert len(U2_DATASETS["DD"]) == 13 and len(U2_DATASETS["OD"]) == 13 and len(U2_DATASETS["VRA"]) == 10


def test_u2_score_hand_case():
    per = {
        "DD": {"21": 0.6, "23": 0.4},  # mean 0.5
        "VRA": {"03": 0.9},
        "LL": {"04": 1.0, "17": 0.0, "23": 0.5},  # mean 0.5 (per dataset, not pooled over items)
        "OD": {},  # no dataset -> 0
        "CVE": {"18": 0.2, "27": 0.4},  # 1 - mean RMSE 0.3 = 0.7
        "RG": {"39": 0.25},
    }  # KD, CG missing -> 0
    expect = {"DD": 0.5, "VRA": 0.9, "LL": 0.5, "OD": 0.0, "KD": 0.0, "CVE": 0.7, "RG": 0.25, "CG": 0.0}
    assert task_scores(per) == pytest.approx(expect)
    # 0.2*0.5 + 0.2*0.9 + 0.07*0.5 + 0.07*0.7 + 0.08*0.25 = 0.1 + 0.18 + 0.035 + 0.049 + 0.02
    assert u2_score(per) == pytest.approx(0.384)
    # lenient: divide by the weight of the six tasks given (0.2 + 0.2 + 0.07 + 0.27 + 0.07 + 0.08)
    assert u2_score(per, renormalize=True) == pytest.approx(0.384 / 0.89)


def test_u2_missing_cve_and_clipping_after_averaging():
    assert u2_score({}) == pytest.approx(0.07)  # every task 0, but a missing CVE RMSE counts as 0 -> 1
    # RMSEs 1.4 and 0.2: mean 0.8 -> CVE 0.2 (clipping per dataset first would give (0 + 0.8) / 2)
    assert task_scores({"CVE": {"18": 1.4, "27": 0.2}})["CVE"] == pytest.approx(0.2)
    assert task_scores({"CVE": {"18": 1.4, "27": 1.2}})["CVE"] == 0.0
    assert task_scores({"DD": {"21": NAN, "23": 0.4}})["DD"] == pytest.approx(0.4)  # no row for NaN


def test_u2_dataset_lists_are_enforced():
    with pytest.raises(U2BenchInputError, match=r"\['99'\] are not in the DD list"):
        task_scores({"DD": {"99": 1.0}})
    assert task_scores({"DD": {"99": 1.0}}, datasets=None)["DD"] == 1.0
    with pytest.raises(U2BenchInputError, match="unknown task 'XX'"):
        u2_score({"XX": {}})


def test_u2_end_to_end_fixed_predictions():
    """A fixed set of answers through the per-dataset scorers into the U2-Score."""
    dd = classification_accuracy(["benign", "Malignant", "benign"], ["benign", "malignant", "malignant"])  # 2/3
    ll = localization_accuracy(["upper left", "center"], [(0.1, 0.2), (0.9, 0.9)])  # 1/2
    kd = localization_accuracy(["lower right"], [(0.7, 0.8)])  # 1
    cve = cve_rmse([41.5, 75], [35, 75], "18")["rmse"]  # errors 6.5/65 = 0.1, 0 -> 0.1/sqrt(2)
    per = {"DD": {"21": dd}, "LL": {"04": ll}, "KD": {"48": kd}, "CVE": {"18": cve}}
    expect = 0.2 * 2 / 3 + 0.07 * 0.5 + 0.07 * 1.0 + 0.07 * (1 - 0.1 / math.sqrt(2))
    assert u2_score(per) == pytest.approx(expect)


def test_a_row_word_then_a_column_word_in_either_order_but_middle_only_as_a_row():
    assert normalize_position("left upper") == normalize_position("upper left") == "upper left"
    assert normalize_position("middle left") == "middle left"
    assert normalize_position("middle upper") is None  # "middle" before a row word is no column


def test_lenient_bleu_takes_the_closest_reference_length_ties_to_the_shorter():
    hyp = "a b c d e f g h"  # 8 tokens, every n-gram in the long reference
    assert bleu_lenient([hyp], [["a b c d", "a b c d e f g h i"]]) == pytest.approx(math.exp(1 - 9 / 8))
    assert bleu_lenient([hyp], [["a b c d e f g", "a b c d e f g h i"]]) == pytest.approx(1.0)  # 7 and 9: 7
