"""The Predictor on a tiny model that has memorised one answer per task: every task, the cache, the one-forward
mask path, batching, and bad input."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import lesion_boxes, make_image, task_answers

from umind_core.imageio import Frame
from umind_core.masks import mask_box
from umind_core.inference.predictor import Predictor, PredictorError
from umind_core.prompts import PromptError
from umind_core.answers.results import GroundedObject, Result

(Y0, Y1, X0, X1), = lesion_boxes(256, 256, 1)


@pytest.fixture()
def predictor(trained_tiny):
    p = Predictor(trained_tiny, max_new_tokens=64, readout="tokens")  # the coordinates the model writes
    p.set_image(make_image(0))
    return p


def _upscaled(factor: int) -> np.ndarray:
    return np.kron(make_image(0), np.ones((factor, factor, 1), dtype=np.uint8))


def _teacher_forced(model, image, task, prompt, answer_text):
    """A second path to what the Predictor must report: one plain forward over prompt + answer (no KV cache,
    no incremental decoding, no forced mask tokens). Returns the answer's token ids, the probability the model
    gives each of them, and the mask logits of its mask groups at the image size."""
    from umind_core import prompts

    chat = prompts.chat_prompt(prompts.build_user_text(task, prompt))
    enc = dict(model.processor(images=[image], text=[chat + answer_text + prompts.ASSISTANT_END],
                               return_tensors="pt"))
    n_prompt = len(model.processor(images=[image], text=[chat], return_tensors="pt")["input_ids"][0])
    with torch.no_grad():
        out = model(**enc)
    ids = enc["input_ids"][0, n_prompt:]
    probs = torch.softmax(out.logits[0, n_prompt - 1:-1].float(), dim=-1)
    return ids, probs[torch.arange(len(ids)), ids], out.mask_logits[0].float()


def test_segment_returns_a_mask_at_the_frame_resolution(predictor):
    res = predictor.predict("segment", "lesion")
    assert isinstance(res, Result) and res.task == "segment" and res.image_size == (256, 256)
    (obj,) = [o for o in res.objects if o.mask is not None]
    assert isinstance(obj, GroundedObject) and obj.label == "lesion"
    assert obj.mask.shape == (256, 256) and obj.mask.dtype == bool
    truth = np.zeros((256, 256), bool)
    truth[Y0:Y1, X0:X1] = True
    iou = (obj.mask & truth).sum() / (obj.mask | truth).sum()
    assert iou > 0.6, iou
    # the score is the mean probability over the mask's pixels, recomputed here from a plain forward
    _, _, logits = _teacher_forced(predictor.model, make_image(0), "segment", "lesion", res.text)
    assert logits.shape == (1, 256, 256)
    inside = logits[0] > 0
    assert (inside.numpy() == obj.mask).mean() > 0.999
    assert obj.score == pytest.approx(float(torch.sigmoid(logits[0])[inside].mean()), abs=1e-3)


def test_detect_keypoints_measure_return_pixel_coordinates(predictor):
    box = predictor.predict("detect", "lesion").objects[0].box
    assert box == pytest.approx((X0, Y0, X1 - 1, Y1 - 1), abs=3)
    (pt,) = predictor.predict("keypoints", "lesion centre").objects[0].points
    assert pt == pytest.approx(((X0 + X1) / 2, (Y0 + Y1) / 2), abs=3)
    line = next(o.line for o in predictor.predict("measure", "lesion width").objects if o.line)
    assert line == pytest.approx((X0, (Y0 + Y1) / 2, X1 - 1, (Y0 + Y1) / 2), abs=3)


def test_by_default_a_detection_is_the_box_of_the_mask_the_model_segments(trained_tiny):
    p = Predictor(trained_tiny, max_new_tokens=64)
    p.set_image(make_image(0))
    mask = next(o.mask for o in p.predict("segment", "lesion").objects if o.mask is not None)
    res = p.predict("detect", "lesion")
    (obj,) = res.objects
    assert obj.box == mask_box(mask) and obj.mask is None and obj.label == "lesion"
    assert res.task == "detect" and res.answer == "lesion"


@pytest.mark.parametrize("task", ["diagnose", "report", "ask"])
def test_text_tasks_answer_in_words(predictor, task):
    prompt, answer = task_answers()[task]
    res = predictor.predict(task, prompt)
    assert res.answer == answer and res.objects == [] and res.text == answer


def test_coordinates_and_masks_follow_the_original_image_size(trained_tiny):
    p = Predictor(trained_tiny, max_new_tokens=64, readout="tokens")
    p.set_image(_upscaled(2))
    box = p.predict("detect", "lesion").objects[0].box
    assert box == pytest.approx((2 * X0, 2 * Y0, 2 * (X1 - 1), 2 * (Y1 - 1)), abs=6)
    mask = next(o.mask for o in p.predict("segment", "lesion").objects if o.mask is not None)
    assert mask.shape == (512, 512)


def test_spacing_gives_millimetres(trained_tiny):
    p = Predictor(trained_tiny, max_new_tokens=64)
    p.set_image(Frame(pixels=make_image(0), spacing=(0.2, 0.2), index=3, source="scan.dcm"))
    res = p.predict("measure", "lesion width")
    obj = next(o for o in res.objects if o.line)
    length_px = abs(obj.line[2] - obj.line[0])
    assert obj.physical["length_mm"] == pytest.approx(0.2 * length_px, rel=1e-6)
    assert res.frame_index == 3 and res.source == "scan.dcm"


def test_second_prompt_on_cached_image_equals_cold_run_and_processes_fewer_tokens(trained_tiny):
    warm = Predictor(trained_tiny, max_new_tokens=64)
    warm.set_image(make_image(0))
    prefix = warm.last_stats["prefix_tokens"]
    warm.predict("detect", "lesion")
    second = warm.predict("segment", "lesion")
    cached_tokens = warm.last_stats["processed_tokens"]

    cold = Predictor(trained_tiny, max_new_tokens=64)
    cold.set_image(make_image(0))
    first = cold.predict("segment", "lesion")
    cold_tokens = prefix + cold.last_stats["processed_tokens"]

    assert second.text == first.text
    assert second.objects == first.objects
    assert cached_tokens < cold_tokens
    assert cached_tokens == cold.last_stats["processed_tokens"]


def test_one_forward_masks_equal_token_by_token(trained_tiny):
    results, queries = {}, {}
    for mode in (True, False):
        p = Predictor(trained_tiny, max_new_tokens=64, one_forward_masks=mode)
        p.set_image(make_image(0))
        results[mode] = p.predict("segment", "lesion")
        state = p._state
        suffix_ids = trained_tiny.tokenizer(
            "Segment the lesion in this ultrasound image.<|im_end|>\n<|im_start|>assistant\n", add_special_tokens=False
        )["input_ids"]
        out = p._engine.forward(state, torch.tensor([suffix_ids]), state.prefix_len)
        decoded, _ = p._engine._decode(state, out.logits[:, -1], state.prefix_len + len(suffix_ids))
        extra = state.cache.get_seq_length() - state.prefix_len
        state.cache.crop(-extra)
        queries[mode] = torch.stack(decoded[0].mask_queries)
    assert queries[True].shape == (1, 16, trained_tiny.qwen.config.text_config.hidden_size)
    torch.testing.assert_close(queries[True], queries[False], rtol=1e-5, atol=1e-5)
    one, many = results[True].objects, results[False].objects
    assert len(one) == len(many) >= 1 and results[True].text == results[False].text
    for a, b in zip(one, many):
        assert (a.label, a.box, a.points, a.line) == (b.label, b.box, b.points, b.line)
        assert a.mask is not None and b.mask is not None and np.array_equal(a.mask, b.mask)
        assert a.score == pytest.approx(b.score, abs=1e-5)


def test_predict_batch_matches_single_frames_and_keeps_order(trained_tiny):
    p = Predictor(trained_tiny, max_new_tokens=64, batch_size=2)
    frames = [make_image(0), _upscaled(2), make_image(0), make_image(0)]
    batched = p.predict_batch(frames, "detect", "lesion")
    assert [r.image_size for r in batched] == [(256, 256), (512, 512), (256, 256), (256, 256)]
    for frame, res in zip(frames, batched):
        p.set_image(frame)
        single = p.predict("detect", "lesion")
        assert res.text == single.text
        assert res.objects[0].box == pytest.approx(single.objects[0].box, abs=1e-6)


def test_predict_batch_leaves_the_set_image_alone(predictor):
    before = predictor.predict("detect", "lesion")
    predictor.predict_batch([_upscaled(2)], "segment", "lesion")
    assert predictor.predict("detect", "lesion").objects == before.objects


def test_bfloat16_predictions(trained_tiny, tmp_path):
    from umind_core.modeling.umind import UMindVL

    folder = trained_tiny.save_pretrained(tmp_path / "m")
    model = UMindVL.from_pretrained(folder, dtype="bfloat16")
    p = Predictor(model, max_new_tokens=64, readout="tokens")
    p.set_image(make_image(0))
    res = p.predict("segment", "lesion")
    ref = Predictor(trained_tiny, max_new_tokens=64)
    ref.set_image(make_image(0))
    want = ref.predict("segment", "lesion")
    assert res.text == want.text  # the same answer in bfloat16 as in float32
    (got,), (exp,) = [o.mask for o in res.objects if o.mask is not None], [o.mask for o in want.objects if o.mask is not None]
    assert (got & exp).sum() / (got | exp).sum() > 0.95  # and nearly the same pixels
    truth = np.zeros((256, 256), bool)
    truth[Y0:Y1, X0:X1] = True
    assert (got & truth).sum() / (got | truth).sum() > 0.6
    box = p.predict("detect", "lesion").objects[0].box
    assert box == pytest.approx((X0, Y0, X1 - 1, Y1 - 1), abs=4)


def test_max_new_tokens_bounds_the_answer(trained_tiny):
    p = Predictor(trained_tiny, max_new_tokens=3)
    p.set_image(make_image(0))
    res = p.predict("report")
    assert any("max_new_tokens=3" in w for w in res.warnings)
    assert p.last_stats["generated_tokens"] == 3


@pytest.mark.parametrize(
    "kwargs,error,message",
    [
        (dict(task="paint"), PromptError, "unknown task"),
        (dict(task="ask", prompt=""), PromptError, "needs a non-empty prompt"),
        (dict(task="ask", prompt="x" * 10_000), PromptError, "10000"),
        (dict(task="segment", box=(300, 300, 400, 400)), PredictorError, "outside the 256x256 image"),
        (dict(task="segment", points=[(10, 10)]), PromptError, "label"),
        (dict(task="segment", points=[(10, 999)], labels=[1]), PredictorError, "outside"),
        (dict(task="segment", box=(1, 2, 3)), PredictorError, "box must be 4"),
    ],
)
def test_bad_prompts_name_the_problem(predictor, kwargs, error, message):
    with pytest.raises(error, match=message):
        predictor.predict(**kwargs)


def test_partly_outside_box_is_clipped_with_a_warning(predictor):
    res = predictor.predict("segment", box=(-20, 10, 100, 120))
    assert any("clipped" in w for w in res.warnings)


@pytest.mark.parametrize(
    "image,message",
    [
        (np.zeros((1, 1, 3), np.uint8), "outside 8..16384"),
        (np.full((64, 64), np.nan, np.float32), "non-finite"),
        (np.zeros((4, 64, 64, 3), np.uint8), "must be H x W"),
    ],
)
def test_bad_images_name_the_problem(trained_tiny, image, message):
    with pytest.raises(PredictorError, match=message):
        Predictor(trained_tiny).set_image(image)


def test_predict_before_set_image(trained_tiny):
    with pytest.raises(PredictorError, match="call set_image"):
        Predictor(trained_tiny).predict("segment")
    with pytest.raises(PredictorError, match="call set_image"):
        Predictor(trained_tiny).get_image_embedding()


def test_image_embedding_is_the_set_frames_and_differs_between_frames(trained_tiny):
    p = Predictor(trained_tiny, max_new_tokens=8)
    p.set_image(make_image(0))
    first = p.get_image_embedding().clone()
    assert first.ndim == 3 and min(first.shape) > 1
    p.predict("segment", "lesion")  # answering leaves the image's features as they were
    assert torch.equal(p.get_image_embedding(), first)
    p.set_image(make_image(1))
    assert not torch.equal(p.get_image_embedding(), first)


def test_constant_and_grey_images_are_valid(trained_tiny):
    p = Predictor(trained_tiny, max_new_tokens=8)
    p.set_image(np.full((100, 120), 7, np.float64))
    assert p.predict("report").image_size == (120, 100)


def test_results_carry_the_models_confidence(predictor, tmp_path):
    seg = predictor.predict("segment", "lesion")
    model = predictor.model
    ids, token_p, logits = _teacher_forced(model, make_image(0), "segment", "lesion", seg.text)
    # the 15 mask tokens after the first of each group are forced, not chosen: they carry no confidence
    seg_id, n = model.seg_mask_id, model.num_mask_tokens
    chosen, run = [], 0
    for tok, prob in zip(ids.tolist(), token_p.tolist()):
        run = run + 1 if tok == seg_id else 0
        if not (tok == seg_id and run % n != 1):
            chosen.append(prob)
    assert len(chosen) == len(ids) - (n - 1)
    assert seg.confidence["token_prob_min"] == pytest.approx(min(chosen), abs=1e-4)
    assert seg.confidence["token_prob_mean"] == pytest.approx(sum(chosen) / len(chosen), abs=1e-4)
    q = torch.sigmoid(logits).clamp(1e-6, 1 - 1e-6)
    entropy = float((-(q * torch.log2(q) + (1 - q) * torch.log2(1 - q))).mean())  # mean binary entropy, bits
    assert seg.confidence["mask_entropy"] == pytest.approx(entropy, abs=1e-3)
    assert "mask_entropy" not in predictor.predict("report").confidence
    back = Result.from_json(seg.to_json(tmp_path / "r.json"))
    assert back.confidence == seg.confidence


@pytest.mark.parametrize("text", ["<|box_start|>(12,340),(56,78)<|box_end|> a benign lesion",
                                  "résumé: 5 mm ±1 — ок", ""])
def test_token_end_offsets_equal_decoding_every_prefix(trained_tiny, text):
    """`_char_offsets` takes one batched decode where the pieces add up to the text, and decodes prefixes where
    they do not (characters split across byte tokens): either way, the offsets decoding each prefix gives."""
    from umind_core.inference.predictor import _char_offsets

    tok = trained_tiny.tokenizer
    ids = tok(text, add_special_tokens=False)["input_ids"]
    by_prefix = [len(tok.decode(ids[: i + 1], skip_special_tokens=False)) for i in range(len(ids))]
    assert _char_offsets(tok, ids) == by_prefix
    if text:
        assert by_prefix[-1] == len(tok.decode(ids, skip_special_tokens=False))


# ------------------------------------------------------------------------------------------------ small rules

def test_a_span_scores_only_the_tokens_that_overlap_it():
    from umind_core.inference.predictor import _span_score

    offsets, probs = [5, 10, 15], [0.1, 0.5, 0.9]  # tokens cover [0, 5), [5, 10), [10, 15)
    assert _span_score((5, 10), offsets, probs) == pytest.approx(0.5)
    assert _span_score((4, 11), offsets, probs) == pytest.approx(0.5)  # one character into each neighbour
    assert _span_score((15, 20), offsets, probs) is None


def test_a_frame_wider_than_the_largest_side_is_refused(tiny_model_factory):
    p = Predictor(tiny_model_factory(), max_new_tokens=4)
    with pytest.raises(PredictorError, match="outside 8..16384"):
        p.set_image(np.zeros((8, 16385), np.uint8))


def test_a_float_image_is_stretched_from_its_own_minimum_to_its_maximum():
    from umind_core.inference.predictor import _as_frame

    frame = _as_frame(np.linspace(100.0, 200.0, 64 * 64).reshape(64, 64))
    assert frame.pixels.min() == 0 and frame.pixels.max() == 255 and frame.pixels.dtype == np.uint8


def test_only_the_first_object_of_a_span_carries_its_points():
    from umind_core.answers import grounding
    from umind_core.inference.predictor import _span_objects

    text = (grounding.format_ref("nodule") + grounding.format_box(grounding.Box(10, 10, 200, 200))
            + grounding.format_box(grounding.Box(300, 300, 500, 500)) + grounding.format_point(grounding.Point(50, 50)))
    (span,) = grounding.parse(text).objects
    objects = _span_objects(span, 100, 100, {}, {}, None)
    assert [len(o.points) for o in objects] == [1, 0] and all(o.box is not None for o in objects)
