"""Boxes, lesion calipers and organ landmarks read off the masks the model segments: the caliper rule
(`umind_core.answers.calipers`), the landmark rule (`umind_core.answers.landmarks`) and the Predictor's `readout="mask"`, on single
images and examinations."""

from __future__ import annotations

import math

import numpy as np
import pytest
from forced_answer import force_answer

from umind_core.answers import grounding
from umind_core import prompts
from umind_core.answers.calipers import caliper_target, lesion_axes, main_component, mask_axes
from umind_core.data import synthetic
from umind_core.answers.grounding import Line
from umind_core.imageio import Frame, line_length
from umind_core.answers.landmarks import (
    ellipse_axes,
    ellipse_perimeter,
    landmark_target,
    line_target,
    measure_target,
    organ_landmarks,
    ramanujan_perimeter,
)
from umind_core.masks import mask_box
from umind_core.inference.predictor import Predictor, PredictorError
from umind_core.answers.results import Result


def _ellipse(h=128, w=160, cx=80.0, cy=60.0, a=40.0, b=15.0, angle=0.0) -> np.ndarray:
    yy, xx = np.mgrid[0:h, 0:w].astype(float)
    c, s = math.cos(angle), math.sin(angle)
    u, v = (xx - cx) * c + (yy - cy) * s, -(xx - cx) * s + (yy - cy) * c
    return (u / a) ** 2 + (v / b) ** 2 <= 1.0


def _length(line) -> float:
    return math.hypot(line[2] - line[0], line[3] - line[1])


@pytest.mark.parametrize("angle", [0.0, 0.5, 1.2])
def test_an_ellipse_has_its_diameters_as_calipers_at_right_angles(angle):
    long_axis, short_axis = lesion_axes(_ellipse(angle=angle))
    assert _length(long_axis) == pytest.approx(80, abs=2.5) and _length(short_axis) == pytest.approx(30, abs=2.5)
    du = np.subtract(long_axis[2:], long_axis[:2])
    dv = np.subtract(short_axis[2:], short_axis[:2])
    assert abs(du @ dv) / (np.linalg.norm(du) * np.linalg.norm(dv)) < 0.1
    for line in (long_axis, short_axis):  # left endpoint first
        assert (line[0], line[1]) <= (line[2], line[3])


def test_a_mask_cut_by_the_image_border_is_measured_to_the_border():
    cut = _ellipse(cx=10.0, cy=60.0, a=40.0, b=30.0)  # its left part is outside the image
    long_axis, _ = lesion_axes(cut)
    assert min(long_axis[0], long_axis[2]) == 0.0
    assert _length(long_axis) > 55


def test_a_whole_frame_mask_is_measured_corner_to_corner():
    """A model that calls the whole frame a lesion (480,000 pixels, 2,796 on the rim) still gets its calipers: the
    diagonal, and the widest chord at right angles to it, from the top edge to the bottom one."""
    long_axis, short_axis = lesion_axes(np.ones((600, 800), bool))
    assert long_axis == (0.0, 0.0, 799.0, 599.0)
    assert _length(short_axis) == pytest.approx(600 / 0.8, rel=0.01)  # across the diagonal: 600 px / cos


def test_an_empty_mask_has_no_calipers():
    for rule in (lesion_axes, mask_axes):
        with pytest.raises(ValueError, match="empty"):
            rule(np.zeros((8, 8), bool))


def test_the_largest_piece_is_measured_alone():
    two = _ellipse(cx=50.0, a=30.0, b=12.0) | _ellipse(cx=130.0, cy=100.0, a=8.0, b=6.0)
    assert np.array_equal(main_component(two), _ellipse(cx=50.0, a=30.0, b=12.0))
    assert _length(mask_axes(two)[0]) == pytest.approx(60, abs=2.5)  # not from one blob to the other


@pytest.mark.parametrize("name, target", [
    ("breast lesion long axis", ("breast lesion", "long axis")),
    ("thyroid nodule short axis", ("thyroid nodule", "short axis")),
    ("  cyst Long Axis ", ("cyst", "long axis")),
    ("kidney length", None), ("biparietal diameter", None), ("long axis", None), (None, None), ("", None),
])
def test_caliper_names_say_which_lesion_and_axis(name, target):
    assert caliper_target(name) == target


# ---------------------------------------------------------------- the Predictor


@pytest.fixture
def predictor(tiny_model_factory):
    return Predictor(tiny_model_factory(), max_new_tokens=64)


def _frame(spacing=(0.1, 0.1)):
    return Frame(pixels=np.zeros((128, 160, 3), np.uint8), spacing=spacing, index=0, source="scan.png")


def _segment_answer(monkeypatch, mask: np.ndarray) -> None:
    """The model answers the lesion with one mask group, which decodes to `mask`."""
    force_answer(monkeypatch, grounding.format_mask("breast lesion"), mask_groups=1)
    monkeypatch.setattr(Predictor, "_masks", lambda self, features, queries, size: ([mask.copy()], [0.9], 0.1))


def _read_off(predictor, monkeypatch, mask: np.ndarray, task: str, prompt: str, readout: str):
    """`task` on a frame whose lesion segments as `mask`, after checking that its row asks the model to segment the
    breast lesion and says what to read off the mask."""
    _segment_answer(monkeypatch, mask)
    frame = _frame()
    row = predictor._row(task, prompt, None, None, None, [frame])
    assert row.user_text == prompts.build_user_text("segment", "breast lesion") and row.readout == readout
    predictor.set_image(frame)
    return predictor.predict(task, prompt)


def test_a_lesion_caliper_asks_for_the_lesion_and_measures_its_mask(predictor, monkeypatch):
    mask = _ellipse(angle=0.5)
    res = _read_off(predictor, monkeypatch, mask, "measure", "breast lesion long axis", "long axis")
    assert res.task == "measure" and len(res.objects) == 1
    obj = res.objects[0]
    assert obj.label == "breast lesion long axis" and np.array_equal(obj.mask, mask)
    assert obj.line == pytest.approx(lesion_axes(mask)[0])
    mm = line_length(obj.line, (0.1, 0.1)).mm
    assert obj.physical["length_mm"] == pytest.approx(mm)
    assert res.answer == f"breast lesion long axis Length: {line_length(obj.line, (0.1, 0.1))}."
    short = predictor.predict("measure", "breast lesion short axis").objects[0].line
    assert short == pytest.approx(lesion_axes(mask)[1])


def test_with_calipers_model_the_line_the_model_draws_is_kept(tiny_model_factory, monkeypatch):
    drawn = Line(100, 200, 600, 300)
    force_answer(monkeypatch, f"{grounding.format_line(drawn, 'breast lesion long axis')} Length: 9.9 mm.")
    pred = Predictor(tiny_model_factory(), max_new_tokens=64, readout="tokens")
    frame = _frame()
    assert pred._row("measure", "breast lesion long axis", None, None, None, [frame]).readout is None
    pred.set_image(frame)
    res = pred.predict("measure", "breast lesion long axis")
    assert res.objects[0].line == pytest.approx(grounding.line_from_grid(drawn, 160, 128))
    assert res.objects[0].physical["model_length"] == "9.9 mm"


@pytest.mark.parametrize("name", ["kidney width", "FL", "breast lesion"])
def test_other_measurements_keep_the_models_line(predictor, name):
    row = predictor._row("measure", name, None, None, None, [_frame()])
    assert row.readout is None and row.user_text == prompts.build_user_text("measure", name)


def test_no_lesion_found_leaves_the_models_refusal_and_no_line(predictor, monkeypatch):
    refusal = "The breast lesion is not present in this image, so it cannot be located."
    force_answer(monkeypatch, refusal)
    predictor.set_image(_frame())
    res = predictor.predict("measure", "breast lesion long axis")
    assert res.objects == [] and res.answer == refusal and res.warnings == []


def test_an_empty_lesion_mask_measures_nothing_and_says_so(predictor, monkeypatch):
    _segment_answer(monkeypatch, np.zeros((128, 160), bool))
    predictor.set_image(_frame())
    res = predictor.predict("measure", "breast lesion short axis")
    assert res.objects == [] and res.answer == ""
    assert any("answer for 'breast lesion short axis' holds no mask pixels" in w for w in res.warnings)


def test_an_unknown_caliper_source_is_refused(tiny_model_factory):
    with pytest.raises(PredictorError, match="readout must be one of mask, tokens"):
        Predictor(tiny_model_factory(), readout="ruler")


def test_an_exams_lesion_caliper_is_drawn_in_the_view_where_the_lesion_is_longest(predictor, monkeypatch):
    """Two views show the lesion; the caliper goes in the one whose mask is longest in mm (view 3 here: fewer
    pixels than view 1's, but at 0.8 mm a pixel), measured with that view's spacing; the answer names the view."""
    views = [Frame(pixels=np.zeros((h, w, 3), np.uint8), spacing=sp, index=0, source=f"v{k}")
             for k, ((h, w), sp) in enumerate([((64, 96), (0.2, 0.2)), ((48, 48), (0.5, 0.5)),
                                                ((80, 56), (0.8, 0.8))])]
    masks = {(64, 96): _ellipse(64, 96, 48.0, 32.0, 40.0, 20.0), (80, 56): _ellipse(80, 56, 28.0, 40.0, 20.0, 8.0)}
    force_answer(monkeypatch, "View 1: " + grounding.format_mask("breast lesion") + " View 3: "
                 + grounding.format_mask("breast lesion"), mask_groups=2)
    monkeypatch.setattr(Predictor, "_masks", lambda self, features, queries, size: (
        [masks[size].copy() for _ in queries], [0.9] * len(queries), 0.1))
    row = predictor._row("measure", "breast lesion short axis", None, None, None, views)
    assert row.user_text == prompts.build_exam_text("segment", "breast lesion") and row.readout == "short axis"
    res = predictor.predict_exam("measure", "breast lesion short axis", views=views)
    (obj,) = res.objects
    assert obj.view == 2 and np.array_equal(obj.mask, masks[(80, 56)])
    assert obj.line == pytest.approx(lesion_axes(masks[(80, 56)])[1])
    assert obj.physical["length_mm"] == pytest.approx(line_length(obj.line, (0.8, 0.8)).mm)
    assert res.answer.startswith("View 3: breast lesion short axis Length: ")


def _blob_mask(h=128, w=160) -> tuple[np.ndarray, list[np.ndarray]]:
    """A mask of two lesions (the second over half the first's size) and a 2-pixel speck."""
    first, second = _ellipse(h, w, 50.0, 50.0, 25.0, 15.0), _ellipse(h, w, 120.0, 90.0, 18.0, 14.0)
    speck = np.zeros((h, w), bool)
    speck[5, 150:152] = True
    return first | second | speck, [first, second]


def test_a_detection_boxes_each_lesion_of_the_mask_and_drops_specks(predictor, monkeypatch):
    mask, lesions = _blob_mask()
    res = _read_off(predictor, monkeypatch, mask, "detect", "breast lesion", "boxes")
    assert [o.box for o in res.objects] == [mask_box(m) for m in lesions]
    assert all(o.label == "breast lesion" and o.mask is None and o.score == 0.9 for o in res.objects)
    x1, y1, x2, y2 = mask_box(lesions[0])
    assert res.objects[0].physical["box_size_mm"] == pytest.approx([(x2 - x1) * 0.1, (y2 - y1) * 0.1])


def test_an_organ_in_two_pieces_is_one_box(predictor, monkeypatch):
    mask, lesions = _blob_mask()
    force_answer(monkeypatch, grounding.format_mask("kidney"), mask_groups=1)
    monkeypatch.setattr(Predictor, "_masks", lambda self, features, queries, size: ([mask.copy()], [0.9], 0.1))
    predictor.set_image(_frame())
    (obj,) = predictor.predict("detect", "kidney").objects
    assert obj.box == mask_box(lesions[0] | lesions[1])  # both pieces, not the speck


def test_with_readout_tokens_a_detection_is_the_models_box(tiny_model_factory, monkeypatch):
    force_answer(monkeypatch, grounding.format_box(grounding.Box(100, 200, 500, 700), "breast lesion"))
    pred = Predictor(tiny_model_factory(), max_new_tokens=64, readout="tokens")
    pred.set_image(_frame())
    (obj,) = pred.predict("detect", "breast lesion").objects
    assert obj.box == pytest.approx(grounding.box_from_grid(grounding.Box(100, 200, 500, 700), 160, 128))


def test_an_exam_detection_boxes_each_views_mask_in_that_view(predictor, monkeypatch):
    views = [Frame(pixels=np.zeros((h, w, 3), np.uint8), spacing=(0.3, 0.3), index=0, source=f"v{k}")
             for k, (h, w) in enumerate([(64, 96), (128, 160)])]
    masks = {(64, 96): _ellipse(64, 96, 48.0, 32.0, 20.0, 10.0), (128, 160): _blob_mask()[0]}
    force_answer(monkeypatch, "View 1: " + grounding.format_mask("breast lesion") + " View 2: "
                 + grounding.format_mask("breast lesion"), mask_groups=2)
    monkeypatch.setattr(Predictor, "_masks", lambda self, features, queries, size: (
        [masks[size].copy() for _ in queries], [0.9] * len(queries), 0.1))
    res = predictor.predict_exam("detect", "breast lesion", views=views)
    assert [(o.view, o.box) for o in res.objects] == [(0, mask_box(masks[(64, 96)]))] + [
        (1, mask_box(m)) for m in _blob_mask()[1]]


def test_one_call_can_ask_for_the_models_own_box(predictor, monkeypatch):
    """The uncertainty signal compares the model's written box with its mask: it asks for `readout="tokens"` on a
    Predictor that reads boxes off masks, and gets the written box for that call only."""
    force_answer(monkeypatch, grounding.format_box(grounding.Box(100, 200, 500, 700), "breast lesion"))
    (res,) = predictor.predict_batch([_frame()], "detect", "breast lesion", readout="tokens")
    assert res.objects[0].box == pytest.approx(grounding.box_from_grid(grounding.Box(100, 200, 500, 700), 160, 128))
    assert predictor.predict_batch([_frame()], "detect", "breast lesion")[0].objects == []  # no mask in that answer
    with pytest.raises(PredictorError, match="readout must be one of mask, tokens, got 'ruler'"):
        predictor.predict_batch([_frame()], "detect", "breast lesion", readout="ruler")


# ---------------------------------------------------------------- organ landmarks and lengths


@pytest.mark.parametrize("site", ["kidney", "fetal_head"])
def test_the_landmark_rule_finds_the_generators_landmarks_on_its_masks(site):
    """The generator places the points on its ellipse; the rule reads them off the rendered mask: within 0.5 px of
    each (measured: 0.2 px at most on 40 images of each), the line's length within 1% (the Predictor's reading is
    then only as wrong as the model's mask). The rim rule that sizes lesions missed BPD endpoints by up to 10 px."""
    for seed in range(1_000_000, 1_000_008):
        obj = synthetic.generate(seed, site=site).objects[0]
        points = organ_landmarks(obj.label, obj.mask)
        assert [name for name, _ in points] == [name for name, _ in obj.keypoints]
        for (_, xy), (_, truth) in zip(points, obj.keypoints):
            assert math.dist(xy, truth) < 0.5, (seed, xy, truth)
        (name, line, _), = obj.lines
        target = line_target(name)
        assert target is not None and target[0] == obj.label
        read = ellipse_axes(obj.mask)[0 if target[1] == "long axis" else 1]
        assert _length(read) == pytest.approx(_length(line), rel=0.01)


@pytest.mark.parametrize("angle", [0.0, 0.7, 2.6])
def test_an_ellipses_axes_are_its_diameters(angle):
    long_axis, short_axis = ellipse_axes(_ellipse(angle=angle) | _ellipse(cx=150.0, cy=120.0, a=3.0, b=3.0))
    assert _length(long_axis) == pytest.approx(80, abs=1) and _length(short_axis) == pytest.approx(30, abs=1)
    for line in (long_axis, short_axis):  # through the centre, left endpoint first
        assert ((line[0] + line[2]) / 2, (line[1] + line[3]) / 2) == pytest.approx((80, 60), abs=0.2)
        assert (line[0], line[1]) <= (line[2], line[3])
    du = np.subtract(long_axis[2:], long_axis[:2])
    assert math.atan2(du[1], du[0]) % math.pi == pytest.approx(angle % math.pi, abs=0.02)
    with pytest.raises(ValueError, match="empty"):
        ellipse_axes(np.zeros((8, 8), bool))


def test_a_kidneys_poles_are_its_long_axis_left_first_and_a_heads_bpd_near_side_first():
    tilted = _ellipse(angle=2.6)  # the long axis runs from lower left to upper right
    (upper, p), (lower, q) = organ_landmarks("Kidney ", tilted)
    assert (upper, lower) == ("upper pole", "lower pole") and p[0] < q[0]
    assert (*p, *q) == pytest.approx(ellipse_axes(tilted)[0])
    (near, p), (far, q) = organ_landmarks("fetal head", tilted)
    assert (near, far) == ("BPD near", "BPD far") and p[1] < q[1]
    short = ellipse_axes(tilted)[1]
    assert sorted([*p, *q]) == pytest.approx(sorted(short))
    with pytest.raises(ValueError, match="no landmark rule for 'thyroid'"):
        organ_landmarks("thyroid", tilted)
    with pytest.raises(ValueError, match="empty"):
        organ_landmarks("kidney", np.zeros((8, 8), bool))


@pytest.mark.parametrize("name, target", [("kidney length", ("kidney", "long axis")),
                                          (" BPD", ("fetal head", "short axis")),
                                          ("OFD", ("fetal head", "long axis")),
                                          ("kidney width", None), ("FL", None), (None, None),
                                          ("head circumference", None)])  # a perimeter, not a line
def test_organ_measurement_names_say_which_organ_and_axis(name, target):
    assert line_target(name) == target


@pytest.mark.parametrize("name, target", [("Head circumference ", ("fetal head", "perimeter")),
                                          ("HC", ("fetal head", "perimeter")),
                                          ("occipitofrontal diameter", ("fetal head", "long axis")),
                                          ("BPD", ("fetal head", "short axis")), ("abdominal circumference", None)])
def test_every_measurement_read_off_an_organ_names_its_organ_and_what_to_read(name, target):
    assert measure_target(name) == target


# ---------------------------------------------------------------- head circumference: the ellipse's perimeter

def test_ramanujans_perimeter_is_the_ellipses():
    """Against the series of the exact perimeter (Gauss-Kummer) for the shapes heads have."""
    for a, b in ((10.0, 10.0), (40.0, 30.0), (60.0, 35.0)):
        h = ((a - b) / (a + b)) ** 2
        exact = math.pi * (a + b) * sum((math.comb(2 * n, n) / (4 ** n * (2 * n - 1))) ** 2 * h ** n
                                        for n in range(12))
        assert ramanujan_perimeter(a, b) == pytest.approx(exact, rel=1e-5)


@pytest.mark.parametrize("angle", [0.0, 0.4, 2.0])
def test_a_drawn_ellipses_perimeter_is_ramanujans_of_its_axes_in_mm_and_in_px(angle):
    mask = _ellipse(h=300, w=360, cx=180.0, cy=150.0, a=120.0, b=90.0, angle=angle)
    axes = sum(ellipse_axes(mask, (0.2, 0.2)), ())
    mm = ellipse_perimeter(axes, (0.2, 0.2))
    assert mm.unit == "mm" and mm.value == pytest.approx(ramanujan_perimeter(24.0, 18.0), rel=0.01)
    px = ellipse_perimeter(sum(ellipse_axes(mask), ()), None)  # no spacing: pixels, and it says so
    assert px.unit == "px" and px.mm is None and px.value == pytest.approx(ramanujan_perimeter(120.0, 90.0), rel=0.01)
    with pytest.raises(ValueError, match="8 numbers"):
        ellipse_perimeter(axes[:4], None)


def test_on_non_square_pixels_the_ellipse_is_fitted_in_mm():
    """A head 30 mm round drawn with pixels 0.1 mm wide and 0.2 mm tall is 300 x 150 px: in mm both axes are 30 mm
    and the perimeter is a circle's; a fit in pixels would call it an ellipse twice as long as wide."""
    spacing = (0.1, 0.2)
    mask = _ellipse(h=200, w=400, cx=200.0, cy=100.0, a=150.0, b=75.0)
    long_axis, short_axis = ellipse_axes(mask, spacing)
    assert line_length(long_axis, spacing).mm == pytest.approx(30.0, rel=0.01)
    assert line_length(short_axis, spacing).mm == pytest.approx(30.0, rel=0.01)
    assert ellipse_perimeter((*long_axis, *short_axis), spacing).mm == pytest.approx(math.pi * 30.0, rel=0.01)


def test_a_head_circumference_is_read_off_the_heads_mask(predictor, monkeypatch):
    """`predict(task="measure", prompt="head circumference")` segments the fetal head and answers the perimeter of
    its moment ellipse in mm; OFD is the same ellipse's long axis."""
    mask = _ellipse(a=50.0, b=38.0, angle=0.3)
    _organ_answer(monkeypatch, "fetal head", mask)
    row = predictor._row("measure", "head circumference", None, None, None, [_frame()])
    assert row.user_text == prompts.build_user_text("segment", "fetal head") and row.readout == "perimeter"
    predictor.set_image(_frame())
    res = predictor.predict("measure", "head circumference")
    (obj,) = res.objects
    assert obj.label == "head circumference" and obj.line is None and obj.mask is not None
    assert obj.ellipse == pytest.approx((*ellipse_axes(mask, (0.1, 0.1))[0], *ellipse_axes(mask, (0.1, 0.1))[1]))
    hc = ramanujan_perimeter(5.0, 3.8)  # the drawn ellipse's semi-axes in mm
    assert obj.physical["perimeter_mm"] == pytest.approx(hc, rel=0.01) and obj.physical["perimeter_unit"] == "mm"
    assert res.answer == f"head circumference Length: {obj.physical['perimeter']:.2f} mm."
    (ofd,) = predictor.predict("measure", "OFD").objects
    assert ofd.line == pytest.approx(ellipse_axes(mask, (0.1, 0.1))[0]) and ofd.physical["length_mm"] == \
        pytest.approx(10.0, rel=0.01)


def test_a_head_circumference_without_spacing_is_in_pixels_and_survives_the_result_file(predictor, monkeypatch,
                                                                                       tmp_path):
    mask = _ellipse(a=50.0, b=38.0)
    _organ_answer(monkeypatch, "fetal head", mask)
    predictor.set_image(_frame(spacing=None))
    res = predictor.predict("measure", "HC")
    (obj,) = res.objects
    assert obj.physical["perimeter_unit"] == "px" and "perimeter_mm" not in obj.physical
    assert obj.physical["perimeter"] == pytest.approx(ramanujan_perimeter(50.0, 38.0), rel=0.01)
    assert res.answer.endswith(" px.") and "mm" not in res.answer
    back = Result.from_json(res.to_json(tmp_path / "hc.json"))
    assert back.objects[0].ellipse == pytest.approx(obj.ellipse) and back.objects[0].physical == obj.physical
    res.attach_geometry((0.2, 0.2))  # a later calibration measures the same ellipse in mm
    assert obj.physical["perimeter_mm"] == pytest.approx(0.2 * ramanujan_perimeter(50.0, 38.0), rel=0.01)


def test_only_organs_with_a_rule_have_their_landmarks_read_off_a_mask():
    assert landmark_target("Fetal Head") == "fetal head" and landmark_target("kidney") == "kidney"
    assert landmark_target("fetal femur") is None and landmark_target(None) is None


def _organ_answer(monkeypatch, organ: str, mask: np.ndarray) -> None:
    force_answer(monkeypatch, grounding.format_mask(organ), mask_groups=1)
    monkeypatch.setattr(Predictor, "_masks", lambda self, features, queries, size: ([mask.copy()], [0.8], 0.1))


def test_a_kidneys_landmarks_are_read_off_its_mask(predictor, monkeypatch):
    mask = _ellipse(angle=0.3)
    _organ_answer(monkeypatch, "kidney", mask)
    row = predictor._row("keypoints", "kidney", None, None, None, [_frame()])
    assert row.user_text == prompts.build_user_text("segment", "kidney") and row.readout == "landmarks"
    predictor.set_image(_frame())
    res = predictor.predict("keypoints", "kidney")
    assert [(o.label, o.points, o.score, o.mask) for o in res.objects] == [
        (name, [pytest.approx(xy)], 0.8, None) for name, xy in organ_landmarks("kidney", mask)]
    assert res.answer == "upper pole, lower pole"


def test_a_kidney_length_is_its_masks_long_axis(predictor, monkeypatch):
    mask = _ellipse(angle=0.3)
    _organ_answer(monkeypatch, "kidney", mask)
    assert predictor._row("measure", "kidney length", None, None, None, [_frame()]).readout == "long axis"
    predictor.set_image(_frame())
    (obj,) = predictor.predict("measure", "kidney length").objects
    assert obj.label == "kidney length" and obj.line == pytest.approx(ellipse_axes(mask)[0])
    assert obj.physical["length_mm"] == pytest.approx(line_length(obj.line, (0.1, 0.1)).mm)


def test_landmarks_without_a_rule_or_with_readout_tokens_are_the_models_points(predictor, monkeypatch):
    force_answer(monkeypatch, grounding.format_point(grounding.Point(500, 500), "upper pole"))
    assert predictor._row("keypoints", "fetal femur", None, None, None, [_frame()]).readout is None
    (res,) = predictor.predict_batch([_frame()], "keypoints", "kidney", readout="tokens")
    assert [(o.label, o.points) for o in res.objects] == [
        ("upper pole", [pytest.approx(grounding.point_from_grid(grounding.Point(500, 500), 160, 128))])]


def test_an_exams_landmarks_are_read_in_each_view_that_shows_the_organ(predictor, monkeypatch):
    views = [Frame(pixels=np.zeros((h, w, 3), np.uint8), spacing=(0.3, 0.3), index=0, source=f"v{k}")
             for k, (h, w) in enumerate([(64, 96), (128, 160)])]
    masks = {(64, 96): _ellipse(64, 96, 48.0, 32.0, 30.0, 12.0), (128, 160): _ellipse(angle=1.0)}
    force_answer(monkeypatch, "View 1: " + grounding.format_mask("fetal head") + " View 2: "
                 + grounding.format_mask("fetal head"), mask_groups=2)
    monkeypatch.setattr(Predictor, "_masks", lambda self, features, queries, size: (
        [masks[size].copy() for _ in queries], [0.9] * len(queries), 0.1))
    res = predictor.predict_exam("keypoints", "fetal head", views=views)
    expected = [(v, name, pytest.approx(xy)) for v, size in enumerate(masks)
                for name, xy in organ_landmarks("fetal head", masks[size])]
    assert [(o.view, o.label, o.points[0]) for o in res.objects] == expected
    assert res.answer == "View 1: BPD near, BPD far; View 2: BPD near, BPD far"


def test_calipers_span_the_largest_piece_not_the_first():
    """A stray fragment drawn above a lesion comes first in scan order; the caliper and the axes are the lesion's."""
    mask = np.zeros((60, 80), bool)
    mask[2:4, 2:4] = True  # the fragment, first in scan order
    mask[20:50, 10:70] = True  # the lesion
    assert main_component(mask).sum() == 30 * 60
    long_axis, _ = lesion_axes(main_component(mask))
    assert math.hypot(long_axis[2] - long_axis[0], long_axis[3] - long_axis[1]) > 59


def test_an_exam_with_an_uncalibrated_view_compares_its_calipers_in_pixels(predictor, monkeypatch):
    """Millimetres of one view against pixels of another mean nothing: with any view uncalibrated the caliper goes
    where the lesion is longest in pixels (view 1: 60 px, against view 2's 40 px at 2 mm a pixel, 80 mm)."""
    views = [Frame(pixels=np.zeros((96, 96, 3), np.uint8), spacing=sp, index=0, source=f"v{k}")
             for k, sp in enumerate([None, (2.0, 2.0)])]
    long_px, short_px = _ellipse(96, 96, 48.0, 48.0, 30.0, 10.0), _ellipse(96, 96, 48.0, 48.0, 20.0, 8.0)
    force_answer(monkeypatch, "View 1: " + grounding.format_mask("breast lesion") + " View 2: "
                 + grounding.format_mask("breast lesion"), mask_groups=2)
    given = iter([long_px, short_px])
    monkeypatch.setattr(Predictor, "_masks", lambda self, features, queries, size: (
        [next(given).copy() for _ in queries], [0.9] * len(queries), 0.1))
    (obj,) = predictor.predict_exam("measure", "breast lesion long axis", views=views).objects
    assert obj.view == 0 and np.array_equal(obj.mask, long_px)


def test_read_off_boxes_keep_the_label_the_model_gave_its_mask(predictor, monkeypatch):
    mask, _ = _blob_mask()
    force_answer(monkeypatch, grounding.format_mask("thyroid nodule"), mask_groups=1)
    monkeypatch.setattr(Predictor, "_masks", lambda self, features, queries, size: ([mask.copy()], [0.9], 0.1))
    predictor.set_image(_frame())
    assert {o.label for o in predictor.predict("detect", "breast lesion").objects} == {"thyroid nodule"}
    monkeypatch.undo()
    force_answer(monkeypatch, grounding.format_mask(), mask_groups=1)  # an unlabelled mask: the prompt names it
    monkeypatch.setattr(Predictor, "_masks", lambda self, features, queries, size: ([mask.copy()], [0.9], 0.1))
    assert {o.label for o in predictor.predict("detect", "breast lesion").objects} == {"breast lesion"}
