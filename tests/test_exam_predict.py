"""Predictor.set_exam / predict_exam: several views of one examination read as one prompt.

The tiny model is untrained, so these tests check mechanics, not quality: every exam task runs, the prompt is laid
out as the exam conversations train it, the prefix is encoded once per examination, and a forced answer's
``View k:`` objects land in view k's pixels, mask decoder and millimetres.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from forced_answer import force_answer
from umind_core.answers import grounding
from umind_core import prompts
from umind_core.data.exams import write_exam_dataset
from umind_core.data.manifest import MAX_EXAM_VIEWS, read_manifest
from umind_core.answers.grounding import Box, Line
from umind_core.imageio import Frame, line_length
from umind_core.inference.predictor import Predictor, PredictorError
from umind_core.answers.results import Result
from umind_core.training.collate import to_rgb_uint8

EXAM_TASKS = {"segment": "thyroid nodule", "detect": "thyroid nodule", "keypoints": "thyroid nodule",
              "measure": "thyroid nodule long axis", "diagnose": None, "report": None,
              "ask": "What site does this ultrasound examination show?"}


@pytest.fixture(scope="module")
def exam_views(tmp_path_factory):
    """The three views of a generated thyroid examination, as Frames with their own spacing."""
    path = write_exam_dataset(tmp_path_factory.mktemp("exam") / "ds", 2, seed0=1, sites=["thyroid"], size=64)
    exam = read_manifest(path)[0]
    assert len(exam.views) == 3
    return [Frame(pixels=im, spacing=v.spacing, index=v.frame, source=f"view{k + 1}.png")
            for k, (im, v) in enumerate(zip(exam.load_images(), exam.views))]


@pytest.fixture
def predictor(tiny_model_factory):
    model = tiny_model_factory()
    model.eval()
    return Predictor(model, max_new_tokens=6, readout="tokens")  # where the model's own coordinates land


def _mixed_views() -> list[Frame]:
    """Three views of different sizes and spacings, so a wrong view shows in every coordinate."""
    rng = np.random.default_rng(0)
    sizes, spacings = [(64, 64), (48, 96), (80, 56)], [(0.5, 0.5), (0.25, 0.2), (0.8, 0.8)]
    return [Frame(pixels=rng.integers(0, 255, (h, w, 3), dtype=np.uint8), spacing=sp, index=0, source=f"v{k}")
            for k, ((h, w), sp) in enumerate(zip(sizes, spacings))]


# ------------------------------------------------------------------------------------------------ every task

def test_every_exam_task_runs_on_a_generated_examination(predictor, exam_views):
    predictor.set_exam(exam_views)
    assert predictor.is_exam_set and not predictor.is_image_set
    for task, prompt in EXAM_TASKS.items():
        res = predictor.predict_exam(task, prompt)
        assert isinstance(res, Result) and res.task == task and res.prompt == (prompt or "")
        assert [v["image_size"] for v in res.views] == [list(f.size) for f in exam_views]
        assert [v["source"] for v in res.views] == ["view1.png", "view2.png", "view3.png"]
        assert res.image_size is None and res.source is None  # no one frame is the answer's
        assert all(o.view is not None and 0 <= o.view < 3 for o in res.objects)
        assert res.timings["encode_s"] > 0 and "prompt_s" in res.timings


def test_the_prompt_is_the_exam_conversations_layout(predictor, exam_views):
    """The first answer token and its probability are what one forward of the training layout gives:
    `prompts.exam_prefix` through the processor, then `turn_suffix` of the canonical exam wording."""
    model = predictor.model
    seen = {}
    from umind_core.inference import predictor as P

    original = P.Predictor._result

    def capture(self, state, b, dec, task, prompt, warnings):
        seen["dec"] = dec
        return original(self, state, b, dec, task, prompt, warnings)

    predictor._result = capture.__get__(predictor)  # this instance only
    predictor.predict_exam("report", views=exam_views)
    dec = seen["dec"]

    user = prompts.build_exam_text("report")
    assert user == prompts.EXAM_TEMPLATES["report"][0]
    images = [to_rgb_uint8(f.pixels) for f in exam_views]  # as the trainer reads a view
    enc = model.processor(images=images, text=[prompts.exam_prefix(3)], return_tensors="pt")
    suffix = model.tokenizer(prompts.turn_suffix(user), add_special_tokens=False)["input_ids"]
    ids = torch.cat([enc["input_ids"], torch.tensor([suffix])], dim=1)
    mm = torch.cat([enc["mm_token_type_ids"], torch.zeros((1, len(suffix)), dtype=torch.long)], dim=1)
    pos, _ = model.rope_index(ids, mm, enc["image_grid_thw"])
    with torch.no_grad():
        out = model(input_ids=ids, pixel_values=enc["pixel_values"], image_grid_thw=enc["image_grid_thw"],
                    mm_token_type_ids=mm, position_ids=pos, decode_masks=False)
    probs = torch.softmax(out.logits[0, -1].float(), dim=-1)
    assert dec.token_ids[0] == int(probs.argmax())
    assert dec.token_probs[0] == pytest.approx(float(probs.max()), abs=1e-4)


def test_the_prefix_is_encoded_once_for_several_prompts(predictor, exam_views, monkeypatch):
    model = predictor.model
    calls = []
    forward, encode_images = model.forward, model.encode_images

    def counting(*args, **kwargs):  # transformers' forward over the prefix (the eager decode)
        if kwargs.get("pixel_values") is not None:
            calls.append(kwargs["image_grid_thw"].shape[0])
        return forward(*args, **kwargs)

    def counting_images(pixel_values, image_grid_thw):  # the vision tower alone (the fast decoder's prefix)
        calls.append(image_grid_thw.shape[0])
        return encode_images(pixel_values, image_grid_thw)

    monkeypatch.setattr(model, "forward", counting)
    monkeypatch.setattr(model, "encode_images", counting_images)
    predictor.set_exam(exam_views)
    assert calls == [3]  # one encoder pass, all three views in it
    predictor.predict_exam("diagnose")
    predictor.predict_exam("segment", "thyroid nodule")
    predictor.predict_exam("report")
    assert calls == [3]
    predictor.predict_exam("report", views=exam_views[:2])  # a new examination is a new prefix
    assert calls == [3, 2]


def test_an_examination_and_an_image_are_held_apart(predictor, exam_views):
    predictor.set_image(exam_views[1])
    single = predictor.predict("diagnose")
    predictor.set_exam(exam_views)
    again = predictor.predict("diagnose")
    assert again.text == single.text and again.image_size == exam_views[1].size and not again.views
    assert all(o.view is None for o in again.objects)
    predictor.reset_exam()
    assert not predictor.is_exam_set and predictor.is_image_set
    with pytest.raises(PredictorError, match="no examination set"):
        predictor.predict_exam("report")


# ------------------------------------------------------------------------------------------------ views

def test_a_box_in_view_2_is_in_view_2s_pixels(predictor, monkeypatch):
    views = _mixed_views()
    grid = Box(100, 200, 500, 900)
    text = (f"View 1: {grounding.format_box(Box(0, 0, 1000, 1000), 'lesion')} "
            f"View 2: {grounding.format_box(grid, 'lesion')}")
    force_answer(monkeypatch, text)
    res = predictor.predict_exam("detect", "lesion", views=views)
    assert [o.view for o in res.objects] == [0, 1]
    w1, h1 = views[0].size
    w2, h2 = views[1].size
    assert res.objects[0].box == pytest.approx(grounding.box_from_grid(Box(0, 0, 1000, 1000), w1, h1))
    assert res.objects[1].box == pytest.approx(grounding.box_from_grid(grid, w2, h2))
    assert res.objects[1].box != pytest.approx(grounding.box_from_grid(grid, w1, h1))
    x1, y1, x2, y2 = res.objects[1].box
    assert res.objects[1].physical["box_size_mm"] == pytest.approx([(x2 - x1) * 0.25, (y2 - y1) * 0.2])
    assert res.to_dict()["objects"][1]["view"] == 1


def test_a_mask_group_in_view_2_decodes_against_view_2_at_its_size(predictor, monkeypatch):
    views = _mixed_views()
    text = "View 2: " + grounding.format_mask("lesion") + " View 3: " + grounding.format_mask("lesion")
    force_answer(monkeypatch, text, mask_groups=2)
    decoded = []
    model = predictor.model
    original = model.decode_masks

    def spy(queries, states, sizes):
        decoded.append((tuple(states[0].shape[:2]), tuple(sizes[0]), queries[0].shape[0]))
        return original(queries, states, sizes)

    monkeypatch.setattr(model, "decode_masks", spy)
    res = predictor.predict_exam("segment", "lesion", views=views)
    assert [o.view for o in res.objects] == [1, 2]
    (w2, h2), (w3, h3) = views[1].size, views[2].size
    assert res.objects[0].mask.shape == (h2, w2) and res.objects[1].mask.shape == (h3, w3)
    grids = [tuple(s.shape[:2]) for s in predictor._exam.image_states[0]]
    assert len(set(grids)) == 3  # three sizes, three token grids
    assert decoded == [(grids[1], (h2, w2), 1), (grids[2], (h3, w3), 1)]  # one decoder call per view
    assert res.objects[0].physical["area_mm2"] == pytest.approx(res.objects[0].mask.sum() * 0.25 * 0.2)
    assert "mask_entropy" in res.confidence


def test_a_caliper_in_view_3_is_measured_with_view_3s_spacing(predictor, monkeypatch):
    views = _mixed_views()
    line = Line(100, 500, 900, 500)
    text = f"View 3: {grounding.format_line(line, 'lesion long axis')} Length: 140.2 mm."
    force_answer(monkeypatch, text)
    res = predictor.predict_exam("measure", "lesion long axis", views=views)
    (obj,) = res.objects
    w3, h3 = views[2].size
    x1, y1, x2, y2 = grounding.line_from_grid(line, w3, h3)
    assert obj.view == 2 and obj.line == pytest.approx((x1, y1, x2, y2))
    mm = math.hypot((x2 - x1) * 0.8, (y2 - y1) * 0.8)
    assert obj.physical["length_mm"] == pytest.approx(mm)
    assert str(line_length(obj.line, (0.8, 0.8))) in res.answer  # the drawn line in view 3's millimetres
    assert "140.2" not in res.answer and "140.2 mm" in res.raw_answer and res.answer.startswith("View 3:")


def test_objects_without_a_marker_or_past_the_last_view(predictor, monkeypatch):
    views = _mixed_views()
    text = (grounding.format_box(Box(0, 0, 500, 500), "a") + " View 7: " + grounding.format_box(Box(0, 0, 10, 10), "b"))
    force_answer(monkeypatch, text)
    res = predictor.predict_exam("detect", "lesion", views=views)
    assert [(o.label, o.view) for o in res.objects] == [("a", 0)]
    assert any("no 'View k:' marker" in w for w in res.warnings)
    assert any("View 7" in w and "3 view(s)" in w for w in res.warnings)


def test_exam_result_round_trips_through_json(predictor, monkeypatch, tmp_path):
    views = _mixed_views()
    force_answer(monkeypatch, "View 2: " + grounding.format_mask("lesion"), mask_groups=1)
    res = predictor.predict_exam("segment", "lesion", views=views)
    back = Result.from_json(res.to_json(tmp_path / "exam.json"))
    assert back.views == res.views and [o.view for o in back.objects] == [1]
    assert back.objects[0] == res.objects[0]


# ------------------------------------------------------------------------------------------------ bad input

@pytest.mark.parametrize("views, message", [
    ([], "at least one view"),
    ([np.zeros((32, 32), np.uint8)] * (MAX_EXAM_VIEWS + 1), f"at most {MAX_EXAM_VIEWS} views"),
    (np.zeros((32, 32, 3), np.uint8), "a list of views"),
    ([np.zeros((32, 32), np.uint8), np.zeros((4, 32), np.uint8)], "view 2 of the examination"),
    ([np.zeros((32, 32), np.uint8), np.full((32, 32), np.nan)], "view 2 of the examination: .*non-finite"),
])
def test_bad_examinations_are_refused_by_name(predictor, views, message):
    with pytest.raises(PredictorError, match=message):
        predictor.set_exam(views)
    assert not predictor.is_exam_set


def test_bad_exam_prompts_are_refused_by_name(predictor, exam_views):
    predictor.set_exam(exam_views)
    with pytest.raises(PredictorError, match="unknown examination task 'classify'"):
        predictor.predict_exam("classify")
    with pytest.raises(PredictorError, match="'ask' needs a non-empty prompt"):
        predictor.predict_exam("ask")


def test_eager_and_fast_decoding_read_an_examination_alike(tiny_model_factory, exam_views):
    """The fast decoder's static cache holds the exam prefix as transformers' own forward does."""
    model = tiny_model_factory()
    model.eval()
    fast = Predictor(model, max_new_tokens=6).predict_exam("diagnose", views=exam_views)
    eager = Predictor(model, max_new_tokens=6, decode="eager").predict_exam("diagnose", views=exam_views)
    assert fast.text == eager.text
    assert fast.confidence["token_prob_mean"] == pytest.approx(eager.confidence["token_prob_mean"], abs=1e-4)


def test_a_mask_marker_past_the_decoded_groups_gets_no_mask_and_no_error(predictor, monkeypatch):
    """An answer cut short may name more mask groups than were decoded: the extra marker draws nothing."""
    force_answer(monkeypatch, f"View 1: {grounding.format_mask('nodule')} View 2: {grounding.format_mask('cyst')}",
                 mask_groups=1)
    res = predictor.predict_exam("segment", "thyroid nodule", views=_mixed_views())
    assert [(o.label, o.view, o.mask is not None) for o in res.objects] == [("nodule", 0, True)]


def test_an_exams_mask_entropy_weighs_each_view_by_its_masks_and_pixels(predictor, monkeypatch):
    """Two masks in view 1 at entropy 0.2 and one in view 2 at 0.8, views of one size: (2 x 0.2 + 0.8) / 3."""
    views = [Frame(pixels=np.zeros((64, 64, 3), np.uint8), spacing=None, index=0, source=f"v{k}") for k in range(2)]
    force_answer(monkeypatch, f"View 1: {grounding.format_mask('a')} {grounding.format_mask('b')} "
                              f"View 2: {grounding.format_mask('c')}", mask_groups=3)
    entropies = iter([0.2, 0.8])
    monkeypatch.setattr(Predictor, "_masks", lambda self, features, queries, size: (
        [np.ones(size, bool) for _ in queries], [0.9] * len(queries), next(entropies)))
    res = predictor.predict_exam("segment", "thyroid nodule", views=views)
    assert [o.view for o in res.objects] == [0, 0, 1]
    assert res.confidence["mask_entropy"] == pytest.approx((2 * 0.2 + 0.8) / 3)
