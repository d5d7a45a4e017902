"""The fast decode path against transformers' eager forward, the reference.

Greedy answers must be the same tokens, mask logits equal to 1e-5 (absolute, plus 1e-5 relative: on the CPU the
fast path keeps its projections transposed in memory, and MKL then sums each product in another order, which moves
the demo model's float32 logits (median magnitude 9, up to 13) by up to about 2e-5), for every task; on the trained
tiny fixture, on the shipped demo model (real weights, a real refusal), on a LoRA + trainable-token model whose
adapters the fast path merges, with a cache that has to grow, after weights change in place (also with the weights
frozen into a tuned graph), and when compiling fails. decode="auto" (the default) answers the same before and after
its background thread built a step's graph, never waits for a build, leaves a key whose build failed eager, and
never installs a graph built from weights that changed meanwhile.
"""

from __future__ import annotations

import copy
import logging
import os
import threading
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import make_image, task_answers
from umind_core.inference import fast_decode, step_builder
from umind_core.inference.predictor import Predictor, PredictorError

TASKS = list(task_answers())  # segment, detect, keypoints, measure, diagnose, report, ask


class _MaskSpy:
    """Records the mask logits a model's decoder returns, so two paths can be compared before thresholding."""

    def __init__(self, model):
        self.logits: list[torch.Tensor] = []
        original = model.decode_masks

        def spy(*args, **kwargs):
            out = original(*args, **kwargs)
            self.logits.extend(o.detach().float().clone() for o in out)
            return out

        model.decode_masks = spy


def _answers(model, decode, image, calls, pred=None, **kwargs):
    """Run `calls` [(task, prompt)] on one image (with `pred`, or a new Predictor); return (results, mask logits,
    token ids per call, the Predictor). Boxes and lines are the ones the model writes (`readout="tokens"`), so
    that every kind of answer the decoder produces is compared."""
    spy = _MaskSpy(model)
    try:
        pred = pred if pred is not None else Predictor(model, decode=decode, **{"readout": "tokens", **kwargs})
        pred.set_image(image)
        results, tokens = [], []
        for task, prompt in calls:
            results.append(pred.predict(task, prompt))
            tokens.append(model.tokenizer(results[-1].text, add_special_tokens=False)["input_ids"])
        return results, spy.logits, tokens, pred
    finally:
        del model.decode_masks  # back to the class method


def _assert_same(eager, fast):
    (res_e, masks_e, tok_e, _), (res_f, masks_f, tok_f, _) = eager, fast
    for a, b, ta, tb in zip(res_e, res_f, tok_e, tok_f):
        assert b.text == a.text and tb == ta, (a.task, a.text, b.text)
        assert [o.label for o in b.objects] == [o.label for o in a.objects]
        for key, value in a.confidence.items():
            assert b.confidence[key] == pytest.approx(value, abs=1e-5), key
    assert len(masks_f) == len(masks_e)
    for me, mf in zip(masks_e, masks_f):
        assert mf.shape == me.shape
        # Two arithmetic orders of float32 differ by a few 1e-6 of the logits' range (the demo model's masks reach
        # |logit| 13 and differed by up to 2.2e-5 there): 1e-5 of that range, and the same mask pixel for pixel
        # wherever a logit is farther from 0 than that.
        tol = 1e-5 * max(1.0, float(me.abs().max()))
        torch.testing.assert_close(mf, me, atol=tol, rtol=1e-5)
        clear = me.abs() > tol
        assert torch.equal((mf > 0)[clear], (me > 0)[clear])


def _task_calls():
    return [(task, prompt) for task, (prompt, _) in task_answers().items()]


def test_static_cache_path_equals_eager_for_every_task(trained_tiny):
    calls = _task_calls()
    eager = _answers(trained_tiny, "eager", make_image(0), calls, max_new_tokens=64)
    fast = _answers(trained_tiny, "static", make_image(0), calls, max_new_tokens=64)
    _assert_same(eager, fast)
    # the answers compared hold masks, boxes, points and plain text (what the fixture learnt, near enough)
    texts = {r.task: r.text for r in eager[0]}
    assert texts["segment"] == task_answers()["segment"][1] and texts["detect"] == task_answers()["detect"][1]
    joined = "".join(texts.values())
    assert all(tag in joined for tag in ("<|seg_mask|>", "<|box_start|>", "<|point_start|>")), texts
    assert texts["diagnose"] and "<|" not in texts["diagnose"]
    assert len(eager[1]) == 1 and eager[1][0].shape == (1, 256, 256)  # the segment answer's mask
    assert isinstance(fast[3]._state.cache, fast_decode.StaticKVCache)
    assert not isinstance(eager[3]._state.cache, fast_decode.StaticKVCache)


@pytest.mark.parametrize("mode", ["compiled", "tuned"])
def test_compiled_step_equals_eager_for_every_task(trained_tiny, mode):
    calls = _task_calls()
    eager = _answers(trained_tiny, "eager", make_image(0), calls, max_new_tokens=64)
    fast = _answers(trained_tiny, mode, make_image(0), calls, max_new_tokens=64)
    assert fast[3]._engine.fast.compile_error is None, fast[3]._engine.fast.compile_error
    compiled = fast[3]._engine.fast._compiled
    widths = {key[4] for key in compiled if key[5] == fast_decode.STEP}
    # the image prefix, the single-token step, the 16-token mask group and the prompts (each padded to a graph
    # width) ran graphs
    assert any(key[5] == fast_decode.PREFIX for key in compiled), compiled
    assert 1 in widths and fast[3].model.num_mask_tokens in widths, widths
    assert all(fast_decode.graph_tokens(k) for k in widths) and len(widths) >= 4, widths
    _assert_same(eager, fast)


def test_a_step_of_several_tokens_equals_the_eager_forward_on_a_cache_with_holes(trained_tiny):
    """static_step (what every graph computes) fed k tokens at once: the same logits and states as eager_forward,
    with a row whose prompt is left-padded (holes in the middle of its cache) beside one without."""
    torch.manual_seed(0)
    w = fast_decode.DecodeWeights(trained_tiny)
    rows, capacity, start, k = 2, 64, 20, 8
    shape = (rows, w.n_kv, capacity, w.head_dim)
    prefix = [(torch.randn(shape), torch.randn(shape)) for _ in w.layers]
    valid = torch.ones(rows, capacity, dtype=torch.bool)
    valid[1, :3] = False  # a shorter image prefix, right-aligned
    valid[1, start: start + 3] = False  # a prompt left-padded by 3
    ids = torch.randint(0, w.embed.shape[0], (rows, k))
    cos_t, sin_t = w.rope_table(capacity)
    pos = torch.arange(start, start + k)[None].expand(rows, -1)
    cos, sin = cos_t[pos][:, None], sin_t[pos][:, None]
    outs = []
    for run in ("eager", "static"):
        keys = [kv[0].clone() for kv in prefix]
        values = [kv[1].clone() for kv in prefix]
        if run == "eager":
            out = fast_decode.eager_forward(w, keys, values, ids, cos, sin, start, valid)
        else:
            out = fast_decode.static_step(w, keys, values, ids, cos, sin, torch.arange(start, start + k), valid)
        outs.append((out, keys))
    (eager, keys_e), (static, keys_s) = outs
    torch.testing.assert_close(static[0], eager[0], atol=1e-5, rtol=1e-5)
    # every real token's state agrees; a padding token's is never read (it attends where the eager mask differs)
    torch.testing.assert_close(static[1][0], eager[1][0], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(static[1][1, 3:], eager[1][1, 3:], atol=1e-5, rtol=1e-5)
    for ke, ks in zip(keys_e, keys_s):
        torch.testing.assert_close(ks[:, :, start: start + k], ke[:, :, start: start + k], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("layout", ["two frames", "an examination of two sizes"])
def test_the_lean_image_prefix_equals_transformers_prefix(trained_tiny, layout):
    """The fast decoder's prefix (lean layers, M-RoPE positions and DeepStack handed over) against transformers'
    forward: the same keys and values in every layer and the same image states the mask decoder reads."""
    from umind_core.inference.decode_batch import BatchDecoder
    from umind_core.inference.predictor import _as_frame

    if layout == "two frames":
        rows = [(_as_frame(make_image(0)),), (_as_frame(make_image(1)),)]
    else:
        rows = [(_as_frame(make_image(0)), _as_frame(make_image(1)[:48, :40]))]
    fast = BatchDecoder(trained_tiny, fast_decode.FastDecoder(trained_tiny, compile=False), 64, True, 8)
    eager = BatchDecoder(trained_tiny, None, 64, True, 8)
    lean, ref = fast.encode(rows), eager.encode(rows)
    assert isinstance(lean.cache, fast_decode.StaticKVCache) and lean.prefix_len == ref.prefix_len
    n = ref.prefix_len
    for layer, (k, v) in enumerate(zip(lean.cache.keys, lean.cache.values)):
        torch.testing.assert_close(k[:, :, :n], ref.cache.layers[layer].keys, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(v[:, :, :n], ref.cache.layers[layer].values, atol=1e-5, rtol=1e-5)
    lean_states = [s for row in lean.image_states for s in row]
    ref_states = [s for row in ref.image_states for s in row]
    assert len(lean_states) == len(ref_states) == 2 and len(lean.image_states) == len(rows)
    for a, b in zip(lean_states, ref_states):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(lean.rope_delta, ref.rope_delta)


def test_prompts_are_padded_to_a_graph_width_only_where_graphs_run(trained_tiny):
    assert [fast_decode.graph_tokens(k) for k in (1, 2, 8, 16, 17, 24, 64, 72)] == [
        True, False, True, True, False, True, True, False]
    # batches of several rows run the single-token step's graph only (each (rows, width) would be a graph to tune)
    assert [fast_decode.graph_tokens(k, rows=4) for k in (1, 8, 16)] == [True, False, False]
    graphs = fast_decode.FastDecoder(trained_tiny, compile=True)
    lean = fast_decode.FastDecoder(trained_tiny, compile=False)
    assert [graphs.prompt_width(n) for n in (8, 17, 24, 62, 64, 65, 90)] == [8, 24, 24, 64, 64, 65, 90]
    assert [lean.prompt_width(n) for n in (17, 62)] == [17, 62]


def test_batched_frames_equal_eager(trained_tiny):
    frames = [make_image(0), make_image(1), make_image(2)]
    out = {}
    for decode in ("eager", "static"):
        spy = _MaskSpy(trained_tiny)
        try:
            pred = Predictor(trained_tiny, decode=decode, max_new_tokens=64)
            out[decode] = (pred.predict_batch(frames, "segment", "lesion"), spy.logits)
        finally:
            del trained_tiny.decode_masks
    assert [r.text for r in out["static"][0]] == [r.text for r in out["eager"][0]]
    assert len(out["eager"][1]) == 3
    for me, mf in zip(out["eager"][1], out["static"][1]):
        torch.testing.assert_close(mf, me, atol=1e-5, rtol=1e-5)


def test_a_cache_that_must_grow_gives_the_same_answers(trained_tiny, monkeypatch):
    monkeypatch.setattr(fast_decode, "CAPACITY_STEP", 8)
    # no room beyond the image prefix: every prompt has to grow the cache
    monkeypatch.setattr(fast_decode, "PROMPT_ROOM", -(64 + trained_tiny.num_mask_tokens))
    calls = [("segment", "lesion"), ("report", None), ("measure", "lesion width")]
    eager = _answers(trained_tiny, "eager", make_image(0), calls, max_new_tokens=64)
    fast = _answers(trained_tiny, "static", make_image(0), calls, max_new_tokens=64)
    state = fast[3]._state
    allocated = -(-state.prefix_len // 8) * 8
    assert state.cache.capacity > allocated and state.cache.capacity % 8 == 0
    _assert_same(eager, fast)


def test_capacity_reserves_room_for_a_prompt_and_a_short_answer_not_for_max_new_tokens():
    # the demo model: a 70-slot image prefix, max_new_tokens 256 + 16 mask tokens
    assert fast_decode._capacity(70, 256 + 16) == 256
    assert fast_decode._capacity(70, 16) == 256  # a shorter budget needs no smaller step
    assert fast_decode._capacity(200, 272) == 512  # the prefix, prompt room and answer room always fit


@pytest.mark.parametrize("mode", ["static", "compiled"])
def test_an_answer_longer_than_its_room_grows_the_cache_and_equals_eager(trained_tiny, monkeypatch, mode):
    """No room beyond the image prefix: each prompt grows the cache, and then its answer grows it again mid-decode
    (the compiled mode builds its step anew for each capacity met)."""
    monkeypatch.setattr(fast_decode, "CAPACITY_STEP", 8)
    monkeypatch.setattr(fast_decode, "PROMPT_ROOM", 0)
    monkeypatch.setattr(fast_decode, "ANSWER_ROOM", 0)
    calls = [("segment", "lesion"), ("detect", "lesion"), ("report", None)]
    eager = _answers(trained_tiny, "eager", make_image(0), calls, max_new_tokens=64)
    fast = _answers(trained_tiny, mode, make_image(0), calls, max_new_tokens=64)
    pred = fast[3]
    prefix, stats = pred._state.prefix_len, pred.last_stats  # of the report, the last and longest answer
    after_prompt = -(-(prefix + stats["prompt_tokens"]) // 8) * 8
    assert stats["processed_tokens"] - stats["prompt_tokens"] > 8  # the answer ran past the prompt's capacity
    assert pred._state.cache.capacity >= prefix + stats["processed_tokens"] > after_prompt
    if mode == "compiled":
        capacities = {key[1] for key in pred._engine.fast._compiled}
        assert len(capacities) >= 3, capacities  # a step per capacity met while answering
    _assert_same(eager, fast)


@pytest.mark.slow
def test_demo_model_fast_equals_eager_including_a_refusal():
    from umind_core import demo
    from umind_core.data import synthetic

    if not demo.has_demo_model():
        pytest.skip("the bundled demo model is not built")
    model = demo.load_model(None)
    sample = synthetic.generate(3, site="breast", size=256)
    calls = [("segment", "lesion"), ("detect", "lesion"), ("keypoints", "lesion"), ("measure", "lesion"),
             ("diagnose", None), ("detect", "fetal head")]
    eager = _answers(model, "eager", sample.image, calls)
    fast = _answers(model, "static", sample.image, calls)
    _assert_same(eager, fast)
    assert eager[1], "the demo model drew no mask: the mask comparison would be empty"
    assert any(not r.objects and r.text for r in eager[0]), [r.text for r in eager[0]]  # a refusal in words


def _drafted_answers(model, decode, images, calls, rounds=2, **kwargs):
    """(results, mask logits, token ids, draft tokens kept) of `calls` on each image, the images asked `rounds`
    times over with one Predictor: from the second answer to a prompt on, its trusted drafts are fed."""
    pred = Predictor(model, decode=decode, **kwargs)
    out, kept = [], 0
    for _ in range(rounds):
        for image in images:
            out.append(_answers(model, decode, image, calls, pred=pred))
            kept += pred.last_stats.get("draft_tokens_kept", 0)
    return out, kept


@pytest.mark.parametrize("mode", ["static", "compiled"])
def test_drafted_answers_equal_eager(trained_tiny, mode):
    """A lone request's draft (the continuation its prompt's earlier answers agreed on) is fed with its next token
    in one forward, and only what the model picks at every position is kept: the same answers and masks as
    transformers' step-by-step greedy decode."""
    calls = _task_calls()
    images = [make_image(i) for i in range(3)]
    eager, _ = _drafted_answers(trained_tiny, "eager", images, calls, max_new_tokens=64)
    fast, kept = _drafted_answers(trained_tiny, mode, images, calls, max_new_tokens=64)
    assert kept > 0, "no draft was ever kept: the comparison did not exercise the speculative forward"
    for e, f in zip(eager, fast):
        _assert_same(e, f)


@pytest.mark.slow
def test_demo_model_drafted_answers_equal_eager():
    """The same on the shipped model: real templates (refusals, reports), drafts that fail at box coordinates."""
    from umind_core import demo
    from umind_core.data import synthetic

    if not demo.has_demo_model():
        pytest.skip("the bundled demo model is not built")
    model = demo.load_model(None)
    images = [synthetic.generate(seed, site=site, size=256).image for seed, site in ((3, "breast"), (4, "thyroid"))]
    calls = [("segment", "lesion"), ("detect", "lesion"), ("diagnose", None), ("report", None)]
    eager, _ = _drafted_answers(model, "eager", images, calls)
    fast, kept = _drafted_answers(model, "static", images, calls)
    # drafts must really be taken (how many depends on the model's answers: demo model 3 kept 20 or more here,
    # demo model 4 keeps 12), and every answer must still equal the eager one
    assert kept >= 10, kept
    for e, f in zip(eager, fast):
        _assert_same(e, f)


def test_answer_drafts_offer_only_continuations_two_answers_agreed_on():
    from umind_core.inference.answer_drafts import AnswerDrafts

    drafts = AnswerDrafts(context=2, longest=4)
    prompt = [7, 8]
    drafts.learn(prompt, [1, 2, 3, 4, 5, 6])
    assert drafts.draft(prompt, [1], room=10) == []  # seen once: not trusted yet
    drafts.learn(prompt, [1, 2, 3, 9, 9])
    assert drafts.draft(prompt, [1], room=10) == [2, 3, 9, 9]  # agreed on 2 after (1,): the latest continuation
    assert drafts.draft(prompt, [1], room=2) == [2, 3]
    assert drafts.draft(prompt, [5, 1, 2], room=10) == [3, 9, 9]  # keyed by the last two tokens
    assert drafts.draft(prompt, [2, 3], room=10) == []  # 4 then 9: they disagreed
    assert drafts.draft([7], [1], room=10) == []  # another prompt
    small = AnswerDrafts(context=1, longest=2, max_entries=3)
    small.learn(prompt, [1, 2, 3])
    small.learn(prompt, [1, 2, 3])
    assert small.draft(prompt, [1], room=5) == [2, 3] and len(small) == 2
    small.learn(prompt, [4, 5, 6])  # a fourth run would pass max_entries: the table starts over
    assert len(small) == 1 and small.draft(prompt, [1], room=5) == []
    with pytest.raises(ValueError, match="at least 1"):
        AnswerDrafts(context=0)


def _lora_model(tiny_model_factory):
    """A LoRA + trainable-token model whose adapters are not zero, so that merging them matters."""
    model = tiny_model_factory()  # LoRA on the text layers, new grounding rows as trainable tokens
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name or "trainable_tokens_delta" in name:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.5)
    model.eval()
    return model


def test_adapters_are_merged_once_and_match_the_wrapped_forward(tiny_model_factory):
    model = _lora_model(tiny_model_factory)
    kinds = {type(m).__name__ for m in model.qwen.modules()}
    assert "TrainableTokensWrapper" in kinds and "Linear" in kinds
    eager, fast = Predictor(model, decode="eager"), Predictor(model, decode="static")
    eager.set_image(make_image(0))
    fast.set_image(make_image(0))
    added = model.config.added_token_ids
    ids = torch.tensor([[*added, 100, 7, added[-1], 3, 200]])  # new rows among ordinary ones
    start = eager._state.prefix_len
    a = eager._engine.forward(eager._state, ids, start)
    b = fast._engine.forward(fast._state, ids, start)
    torch.testing.assert_close(b.hidden_states, a.hidden_states, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(b.logits, a.logits[:, -1:], atol=1e-5, rtol=1e-5)
    for i, tok in enumerate([added[0], 9, added[2]]):  # single-token steps after the block
        one = torch.tensor([[tok]])
        a = eager._engine.forward(eager._state, one, start + ids.shape[1] + i)
        b = fast._engine.forward(fast._state, one, start + ids.shape[1] + i)
        torch.testing.assert_close(b.logits, a.logits[:, -1:], atol=1e-5, rtol=1e-5)
    # the merge is the fast path's copy: the model keeps its PEFT modules for training
    assert "TrainableTokensWrapper" in {type(m).__name__ for m in model.qwen.modules()}


@pytest.mark.parametrize("mode", ["static", "tuned"])  # tuned: the weights are frozen into the compiled graph
def test_weights_changed_in_place_are_picked_up_at_the_next_image(trained_tiny, mode):
    model = copy.deepcopy(trained_tiny)
    fast = Predictor(model, decode=mode, max_new_tokens=64)
    fast.set_image(make_image(0))
    before = fast.predict("diagnose").text
    with torch.no_grad():  # swap the (tied) rows of the answer's first token and a digit: the answer must change
        first = model.tokenizer(before, add_special_tokens=False)["input_ids"][0]
        digit = model.tokenizer("7", add_special_tokens=False)["input_ids"][0]
        weight = model.qwen.get_input_embeddings().weight
        weight[[first, digit]] = weight[[digit, first]].clone()
    eager = Predictor(model, decode="eager", max_new_tokens=64)
    eager.set_image(make_image(0))
    fast.set_image(make_image(0))
    after = fast.predict("diagnose").text
    assert after == eager.predict("diagnose").text
    assert after != before


def test_tuned_step_builds_its_own_graph_after_a_compiled_one(trained_tiny):
    """Dynamo reuses a graph whose guards pass: without a code object of its own, the tuned step would run the
    compiled mode's graph (no frozen weights, no tuned products) and never tune."""
    from torch._dynamo.utils import counters

    _answers(trained_tiny, "compiled", make_image(0), [("detect", "lesion")], max_new_tokens=64)
    before = counters["stats"]["unique_graphs"]
    _answers(trained_tiny, "tuned", make_image(0), [("detect", "lesion")], max_new_tokens=64)
    assert counters["stats"]["unique_graphs"] > before


def test_a_failing_compile_falls_back_to_eager_with_one_warning(trained_tiny, monkeypatch, caplog):
    def broken_compile(*args, **kwargs):
        def fn(*a, **k):
            raise RuntimeError("inductor: no C++ compiler\nlong trace")
        return fn

    monkeypatch.setattr(torch, "compile", broken_compile)
    calls = [("segment", "lesion"), ("detect", "lesion"), ("diagnose", None)]
    eager = _answers(trained_tiny, "eager", make_image(0), calls, max_new_tokens=64)
    with caplog.at_level(logging.WARNING, logger=fast_decode.__name__):
        fast = _answers(trained_tiny, "compiled", make_image(0), calls, max_new_tokens=64)
    _assert_same(eager, fast)
    warnings = [r for r in caplog.records if "torch.compile" in r.getMessage()]
    assert len(warnings) == 1 and "\n" not in warnings[0].getMessage(), [r.getMessage() for r in warnings]
    assert fast[3]._engine.fast.compile_error.startswith("RuntimeError: inductor: no C++ compiler")


def test_training_mode_keeps_the_eager_cache(trained_tiny):
    model = copy.deepcopy(trained_tiny)
    model.train()
    pred = Predictor(model, decode="static")
    pred.set_image(make_image(0))
    assert not isinstance(pred._state.cache, fast_decode.StaticKVCache)


def test_decode_mode_is_checked_and_read_from_the_environment(trained_tiny, monkeypatch):
    with pytest.raises(PredictorError, match="decode must be one of auto, static, compiled, tuned, eager"):
        Predictor(trained_tiny, decode="fastest")
    monkeypatch.setenv(fast_decode.DECODE_ENV, "eager")
    assert Predictor(trained_tiny)._engine.fast is None
    monkeypatch.setenv(fast_decode.DECODE_ENV, "compiled")
    assert Predictor(trained_tiny)._engine.fast.compile is True
    monkeypatch.setenv(fast_decode.DECODE_ENV, "tuned")
    fast = Predictor(trained_tiny)._engine.fast
    assert fast.tune is True and fast.background is False
    monkeypatch.setenv(fast_decode.DECODE_ENV, "static")
    assert Predictor(trained_tiny)._engine.fast.compile is False
    monkeypatch.setenv(fast_decode.DECODE_ENV, "bogus")
    with pytest.raises(PredictorError, match="UMIND_DECODE"):
        Predictor(trained_tiny)
    monkeypatch.delenv(fast_decode.DECODE_ENV)  # unset: a plain Predictor (evaluation, scripts) decodes static
    fast = Predictor(trained_tiny)._engine.fast
    assert not fast.compile and fast.mode == "static"
    fast = Predictor(trained_tiny, decode=fast_decode.serving_mode())._engine.fast  # the server's and umind infer's
    assert fast.compile and fast.tune and fast.background and fast.mode == "auto"


def test_static_cache_crop_and_length_follow_dynamic_cache_semantics():
    keys = [torch.zeros(1, 2, 16, 4)]
    cache = fast_decode.StaticKVCache(keys, [torch.zeros(1, 2, 16, 4)], length=10)
    cache.crop(-3)
    assert cache.get_seq_length() == 7
    cache.crop(5)
    assert cache.get_seq_length() == 5
    cache.crop(9)  # keeping more than there is changes nothing
    assert cache.get_seq_length() == 5
    keys[0][:, :, :5] = 1.0
    cache.ensure(fast_decode.CAPACITY_STEP + 1)
    assert cache.capacity == 2 * fast_decode.CAPACITY_STEP
    assert bool((cache.keys[0][:, :, :5] == 1).all()) and bool((cache.keys[0][:, :, 5:] == 0).all())


def test_rope_table_equals_transformers_text_rotary(trained_tiny):
    weights = fast_decode.DecodeWeights(trained_tiny)
    cos, sin = weights.rope_table(300)
    pos = torch.arange(0, 300)[None]
    rot = trained_tiny.qwen.model.language_model.rotary_emb
    ref_cos, ref_sin = rot(torch.zeros(1, dtype=weights.dtype), pos[None].expand(3, -1, -1))
    assert torch.equal(cos[:300], ref_cos[0]) and torch.equal(sin[:300], ref_sin[0])


def test_queries_and_keys_normed_and_rotated_together_equal_the_model_s_own_modules(trained_tiny):
    """The lean step norms and rotates q and k as one tensor (fewer calls per step); bit for bit what the model's
    q_norm and k_norm modules and transformers' RoPE give them apart, on the same projection."""
    from transformers.models.qwen3_vl.modeling_qwen3_vl import apply_rotary_pos_emb

    weights = fast_decode.DecodeWeights(trained_tiny)
    layer, att = weights.layers[1], trained_tiny.qwen.model.language_model.layers[1].self_attn
    b, k, hd = 3, 5, weights.head_dim
    x = torch.randn(b, k, weights.embed.shape[1], generator=torch.Generator().manual_seed(0))
    cos, sin = weights.rope_table(64)
    pos = torch.tensor([[10, 11, 12, 13, 14], [3, 4, 5, 6, 7], [0, 1, 2, 3, 4]])
    q, key, value = fast_decode._attention_inputs(weights, layer, x, cos[pos][:, None], sin[pos][:, None])

    qkv = fast_decode.linear(fast_decode._rms(x, layer.ln1, weights.eps), layer.wqkv, layer.bqkv)
    q_ref, k_ref, v_ref = qkv.split([weights.n_heads * hd, weights.n_kv * hd, weights.n_kv * hd], dim=-1)
    with torch.no_grad():
        q_ref = att.q_norm(q_ref.view(b, k, -1, hd)).transpose(1, 2)
        k_ref = att.k_norm(k_ref.view(b, k, -1, hd)).transpose(1, 2)
    q_ref, k_ref = apply_rotary_pos_emb(q_ref, k_ref, cos[pos], sin[pos])
    assert torch.equal(q, q_ref) and torch.equal(key, k_ref)
    assert torch.equal(value, v_ref.view(b, k, -1, hd).transpose(1, 2))


# ------------------------------------------------------------------ decode="auto"

GUARD_S = 600  # a generous bound on waiting for the builder thread: a wrong implementation fails, never hangs


def _eager_graph_steps(monkeypatch) -> list[tuple[int, int]]:
    """(rows, tokens) of every forward of a graph width (single-token steps, mask groups, padded prompts) that the
    eager lean forward ran (those that did not replay a graph)."""
    steps, original = [], fast_decode.eager_forward

    def spy(w, keys, values, ids, *args, **kwargs):
        if fast_decode.graph_tokens(ids.shape[1]):
            steps.append(tuple(ids.shape))
        return original(w, keys, values, ids, *args, **kwargs)

    monkeypatch.setattr(fast_decode, "eager_forward", spy)
    return steps


class _FakeBuild:
    """Stands in for fast_decode.build_step: no compile; the "graph" is the step's own code run eagerly
    (static_step, what the compiled graph computes), counting its calls. `gate` holds the first build until it is
    set; `error` makes every build raise it. Records each build's thread and weight snapshot."""

    def __init__(self, gate: threading.Event | None = None, error: Exception | None = None):
        self.gate, self.error = gate, error
        self.started = threading.Event()
        self.calls, self.threads, self.weights = 0, [], []

    def __call__(self, w, args, tune, part=fast_decode.STEP):
        self.threads.append(threading.current_thread().name)
        self.weights.append(w)
        self.started.set()
        if self.gate is not None and len(self.weights) == 1 and not self.gate.wait(GUARD_S):
            raise TimeoutError("the test never released the build")
        if self.error is not None:
            raise self.error

        def step(*a):
            self.calls += 1
            return (fast_decode.prefix_forward if part == fast_decode.PREFIX else fast_decode.static_step)(w, *a)

        return step, None

    @property
    def builds(self) -> int:
        return len(self.weights)


def test_auto_answers_equal_eager_before_and_after_its_tuned_graph_is_built(trained_tiny, monkeypatch):
    """The one real tuned build of these tests: the first answers come from the eager lean step while the builder
    thread tunes; once built, the same answers come from the graph, with no recompile on the calling thread."""
    from torch._dynamo.utils import counters

    calls = _task_calls()
    eager = _answers(trained_tiny, "eager", make_image(0), calls, max_new_tokens=64)
    first = _answers(trained_tiny, "auto", make_image(0), calls, max_new_tokens=64)
    _assert_same(eager, first)
    pred = first[3]
    pred._engine.drafts = None  # drafted forwards have widths of their own (test_drafted_answers_equal_eager)
    assert pred._engine.fast.wait_for_builds(GUARD_S)
    steps = pred.decode_status()["steps"]
    assert steps and all(s["state"] == "tuned" for s in steps), steps
    graphs = counters["stats"]["unique_graphs"]
    eager_steps = _eager_graph_steps(monkeypatch)
    second = _answers(trained_tiny, "auto", make_image(0), calls, pred=pred)
    assert eager_steps == []  # every step, mask group and prompt replayed a tuned graph
    assert counters["stats"]["unique_graphs"] == graphs  # built from zeros of the live layout: its guards passed
    _assert_same(eager, second)


def test_auto_answers_before_its_graph_is_built_and_replays_it_after(trained_tiny, monkeypatch):
    gate = threading.Event()
    build = _FakeBuild(gate)
    monkeypatch.setattr(fast_decode, "build_step", build)
    eager_steps = _eager_graph_steps(monkeypatch)
    calls = [("detect", "lesion"), ("diagnose", None)]
    eager = _answers(trained_tiny, "eager", make_image(0), calls, max_new_tokens=64)
    eager_steps.clear()
    try:
        first = _answers(trained_tiny, "auto", make_image(0), calls, max_new_tokens=64)
        pred = first[3]
        pred._engine.drafts = None  # drafted forwards have widths of their own (test_drafted_answers_equal_eager)
        fast, capacity, prefix = pred._engine.fast, pred._state.cache.capacity, pred._state.prefix_len
        # answered while the build was held: every step ran eagerly, and the first build (the image prefix's) is
        # still under way, the detect prompt's (padded to 32 tokens), the step's and the diagnose prompt's queued
        assert build.started.wait(GUARD_S) and not gate.is_set() and build.builds == 1
        assert {k for _, k in eager_steps} == {1, 24, 32} and build.calls == 0, eager_steps
        queued = "eager (tuning queued)"
        assert pred.decode_status() == {"mode": "auto", "steps": [
            {"rows": 1, "capacity": capacity, "tokens": k, "part": part, "dtype": "float32", "device": "cpu",
             "state": state}
            for k, part, state in sorted(((1, "step", queued), (24, "step", queued), (32, "step", queued),
                                          (prefix, "prefix", "building")))]}
        pred.predict_batch([make_image(1), make_image(2)], "detect", "lesion")  # a second batch size queues
        states = {(s["rows"], s["capacity"], s["tokens"]): s["state"] for s in pred.decode_status()["steps"]}
        assert states[(1, capacity, prefix)] == "building", states
        assert {state for (rows, _, _), state in states.items() if rows == 2} == {queued}, states
    finally:
        gate.set()
    assert fast.wait_for_builds(GUARD_S)
    assert build.threads == [step_builder.BUILDER_THREAD] * build.builds and build.builds == len(states)
    assert {(1, capacity, torch.float32, "cpu", k, "step") for k in (1, 24, 32)} <= set(fast._compiled)
    assert (1, capacity, torch.float32, "cpu", prefix, "prefix") in fast._compiled
    eager_steps.clear()
    second = _answers(trained_tiny, "auto", make_image(0), calls, pred=pred)
    assert eager_steps == [] and build.calls > 0  # the installed graphs ran every step and prompt
    assert {s["state"] for s in pred.decode_status()["steps"]} == {"tuned"}
    _assert_same(eager, first)
    _assert_same(eager, second)


def test_auto_build_that_fails_leaves_its_key_eager_with_one_warning(trained_tiny, monkeypatch, caplog):
    build = _FakeBuild(error=RuntimeError("inductor: no C++ compiler\nlong trace"))
    monkeypatch.setattr(fast_decode, "build_step", build)
    calls = [("segment", "lesion"), ("diagnose", None)]
    eager = _answers(trained_tiny, "eager", make_image(0), calls, max_new_tokens=64)
    with caplog.at_level(logging.WARNING, logger=step_builder.__name__):
        first = _answers(trained_tiny, "auto", make_image(0), calls, max_new_tokens=64)
        pred = first[3]
        assert pred._engine.fast.wait_for_builds(GUARD_S)
        again = _answers(trained_tiny, "auto", make_image(0), calls, pred=pred)
    _assert_same(eager, first)
    _assert_same(eager, again)
    steps = pred.decode_status()["steps"]
    # the image prefix, the step, the mask group, both prompts (17 and 24 wide)
    assert {(s["tokens"], s["part"]) for s in steps} == {
        (pred._state.prefix_len, "prefix"), (1, "step"), (16, "step"), (24, "step")}
    assert build.builds == len(steps)  # a failed key is not built again
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING and r.name.startswith("umind")]
    assert len(warnings) == len(steps), warnings  # one line for each key, when its build failed
    assert all("\n" not in w and "no C++ compiler" in w for w in warnings), warnings
    assert {s["state"] for s in steps} == {"failed: RuntimeError: inductor: no C++ compiler"}
    assert pred._engine.fast.compile_error is None  # per key: other batch sizes still get their graphs


def test_auto_drops_a_graph_built_from_weights_that_changed_meanwhile(trained_tiny, monkeypatch):
    model = copy.deepcopy(trained_tiny)
    gate = threading.Event()
    build = _FakeBuild(gate)
    monkeypatch.setattr(fast_decode, "build_step", build)
    pred = Predictor(model, decode="auto", max_new_tokens=64)
    fast = pred._engine.fast
    try:
        pred.set_image(make_image(0))
        before = pred.predict("diagnose").text
        assert build.started.wait(GUARD_S)  # the builder holds the build of the old weights
        old = fast.weights
        with torch.no_grad():  # swap the (tied) rows of the answer's first token and a digit: the answer changes
            first = model.tokenizer(before, add_special_tokens=False)["input_ids"][0]
            digit = model.tokenizer("7", add_special_tokens=False)["input_ids"][0]
            weight = model.qwen.get_input_embeddings().weight
            weight[[first, digit]] = weight[[digit, first]].clone()
        pred.set_image(make_image(0))  # a new weight snapshot while the old one's graph is being built
        assert fast.weights is not old  # the old builds are dropped; the new prefix's is queued
        assert [(s["part"], s["state"]) for s in pred.decode_status()["steps"]] == [("prefix", "eager (tuning queued)")]
    finally:
        gate.set()
    assert fast.wait_for_builds(GUARD_S)
    # the old weights' graph was built but not installed; the new prefix's, queued by set_image, was
    assert build.builds == 2 and build.weights[0] is old and build.weights[1] is fast.weights
    assert [key[5] for key in fast._compiled] == ["prefix"]
    after = pred.predict("diagnose").text  # eager; queues a build from the new weights
    assert fast.wait_for_builds(GUARD_S)
    # the new weights' prefix, prompt (24 tokens) and single-token step graphs
    assert build.builds == 4 and build.weights[-1] is fast.weights and len(fast._compiled) == 3
    replayed = pred.predict("diagnose").text
    reference = Predictor(model, decode="eager", max_new_tokens=64)
    reference.set_image(make_image(0))
    assert build.calls > 0 and after == replayed == reference.predict("diagnose").text != before


def test_compile_cache_folder_is_set_when_unset_and_left_alone_when_set(trained_tiny, tmp_path, monkeypatch):
    env = step_builder.COMPILE_CACHE_ENV
    monkeypatch.setenv(env, "x")
    monkeypatch.delenv(env)  # unset for this test; restored to the session's value afterwards
    Predictor(trained_tiny, decode="static", compile_cache=tmp_path / "a")
    assert env not in os.environ  # a mode that never compiles leaves inductor alone
    pred = Predictor(trained_tiny, decode="auto", compile_cache=tmp_path / "a")
    assert os.environ[env] == str((tmp_path / "a").resolve()) == pred._engine.fast.compile_cache
    assert (tmp_path / "a").is_dir()
    # torch's own default, which importing torch._dynamo writes into the environment, is not a user's choice
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir

    monkeypatch.setenv(env, default_cache_dir())
    Predictor(trained_tiny, decode="compiled", compile_cache=tmp_path / "c")
    assert os.environ[env] == str((tmp_path / "c").resolve())
    monkeypatch.setenv(env, str(tmp_path / "mine"))  # the user's folder wins
    pred = Predictor(trained_tiny, decode="tuned", compile_cache=tmp_path / "b")
    assert os.environ[env] == str(tmp_path / "mine") == pred._engine.fast.compile_cache
    assert not (tmp_path / "b").exists()
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert step_builder.default_compile_cache() == tmp_path / "xdg" / "umind" / "compile"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert step_builder.default_compile_cache() == Path.home() / ".cache" / "umind" / "compile"


def test_auto_is_the_default_of_the_server_and_umind_infer_not_of_a_plain_predictor(trained_tiny, monkeypatch):
    from umind_core.cli import build_parser

    monkeypatch.delenv(fast_decode.DECODE_ENV, raising=False)
    assert Predictor(trained_tiny).decode_status() == {"mode": "static", "steps": []}  # a plain Predictor
    args = build_parser().parse_args(["infer", "scan.png", "--out", "out", "--task", "detect"])
    assert args.decode is None and fast_decode.serving_mode(args.decode) == "auto"  # what `umind infer` hands it
    assert fast_decode.serving_mode("tuned") == "tuned"
    monkeypatch.setenv(fast_decode.DECODE_ENV, "compiled")
    assert fast_decode.serving_mode() is None  # the Predictor reads UMIND_DECODE itself
    monkeypatch.delenv(fast_decode.DECODE_ENV)
    assert Predictor(trained_tiny, decode=fast_decode.serving_mode()).decode_status() == {"mode": "auto", "steps": []}
    assert Predictor(trained_tiny, decode="static").decode_status() == {"mode": "static", "steps": []}
    assert Predictor(trained_tiny, decode="eager").decode_status() == {"mode": "eager", "steps": []}


def test_a_large_language_model_decodes_eagerly_unless_a_mode_is_named(trained_tiny, monkeypatch, caplog):
    monkeypatch.delenv(fast_decode.DECODE_ENV, raising=False)
    weights = fast_decode._language_weight_bytes(trained_tiny)
    assert 0 < weights < fast_decode.LEAN_MAX_WEIGHT_BYTES  # the tiny model: the lean path by default
    monkeypatch.setattr(fast_decode, "LEAN_MAX_WEIGHT_BYTES", weights - 1)  # as if it were the 4B
    with caplog.at_level("INFO", logger=fast_decode.__name__):
        assert Predictor(trained_tiny).decode_status()["mode"] == "eager"
        status = Predictor(trained_tiny, decode="auto").decode_status()
    assert "language-model weights, over the" in caplog.text
    assert status["mode"] == "eager" and "language-model weights, over the" in status["why"]  # /info says why
    assert Predictor(trained_tiny, decode="static").decode_status()["mode"] == "static"  # named: honoured
    monkeypatch.setenv(fast_decode.DECODE_ENV, "tuned")
    assert Predictor(trained_tiny).decode_status()["mode"] == "tuned"


def test_background_builds_wait_for_the_model_thread_to_be_idle(monkeypatch):
    """A build starts once the model has been idle BUILD_QUIET_S, so that the request which queued it is not slowed
    by dynamo's tracing; a model that is never idle still gets its graph after BUILD_QUIET_MAX_S."""

    class Owner:
        busy = True

        def idle_seconds(self):
            return 0.0 if self.busy else 1.0

    for never_idle in (False, True):
        if never_idle:
            monkeypatch.setattr(step_builder, "BUILD_QUIET_MAX_S", 0.3)
        owner, started = Owner(), threading.Event()
        builder = step_builder.BackgroundBuilder(lambda w, args, key: (started.set(), lambda *a: None)[1],
                                                 owner=owner)
        builder.request((1, 256, torch.float32, "cpu", 1, "step"), None, (torch.zeros(1),))
        if not never_idle:
            assert not started.wait(0.5)  # the model is busy: the build waits (up to 2 s)
            owner.busy = False
        assert started.wait(GUARD_S) and builder.wait(GUARD_S)
        assert set(builder.graphs) == {(1, 256, torch.float32, "cpu", 1, "step")}


def test_graphs_past_the_memory_budget_stay_eager(trained_tiny, monkeypatch):
    """Each tuned graph holds a copy of the language model's weights: a decoder builds at most max_graphs (from
    GRAPH_WEIGHT_BUDGET, never fewer than MIN_GRAPHS), and the shapes met after that run the eager lean forward."""
    monkeypatch.setattr(fast_decode, "GRAPH_WEIGHT_BUDGET", 0)
    monkeypatch.setattr(fast_decode, "MIN_GRAPHS", 2)
    build = _FakeBuild()
    monkeypatch.setattr(fast_decode, "build_step", lambda w, args, tune, part="step": (
        lambda fn: (fn, fn(*args)))(build(w, args, tune, part)[0]))
    calls = _task_calls()
    eager = _answers(trained_tiny, "eager", make_image(0), calls, max_new_tokens=64)
    fast = _answers(trained_tiny, "compiled", make_image(0), calls, max_new_tokens=64)
    decoder = fast[3]._engine.fast
    assert decoder.max_graphs == 2 and len(decoder._compiled) == 2 and build.builds == 2
    _assert_same(eager, fast)
    monkeypatch.undo()
    assert fast_decode.FastDecoder(trained_tiny).max_graphs > 2  # the tiny model's weights fit the real budget


def test_the_builder_counts_the_keys_it_lists(trained_tiny, monkeypatch):
    """BackgroundBuilder.count (what the graph budget reads at every unbuilt step) equals len(states()) while a build
    is held, after it, and after one failed."""
    gate = threading.Event()
    build = _FakeBuild(gate)
    monkeypatch.setattr(fast_decode, "build_step", build)
    try:
        pred = _answers(trained_tiny, "auto", make_image(0), [("segment", "lesion")], max_new_tokens=64)[3]
        builder = pred._engine.fast._builder
        assert build.started.wait(GUARD_S)
        states = builder.states()
        assert "building" in states.values() and builder.count() == len(states) >= 3
    finally:
        gate.set()
    assert builder.wait(GUARD_S)
    builder.fail(next(iter(builder.graphs)), "RuntimeError: x")
    assert builder.count() == len(builder.states())


def test_background_builds_wait_while_the_process_holds_them(monkeypatch):
    """The server holds builds while a retraining runs (their autotuning cost a retrain's scoring 378 s against 32 s
    alone on 2 cores): a queued build does not start while held, starts once the hold is lifted, and a hold that
    raises does not stop builds for good; a stop while held ends the wait."""

    class Idle:
        def idle_seconds(self):
            return 1.0

    monkeypatch.setattr(step_builder, "HOLD_POLL_S", 0.05)
    training = {"now": True}
    step_builder.hold_builds_while(lambda: training["now"])
    try:
        owner, started = Idle(), threading.Event()
        builder = step_builder.BackgroundBuilder(lambda w, args, key: (started.set(), lambda *a: None)[1],
                                                 owner=owner)
        key = (1, 256, torch.float32, "cpu", 1, "step")
        builder.request(key, None, (torch.zeros(1),))
        assert not started.wait(0.5)  # held: a retraining is running
        assert builder.states() == {key: "eager (tuning queued)"}
        training["now"] = False
        assert started.wait(GUARD_S) and builder.wait(GUARD_S)
        assert set(builder.graphs) == {key}

        held = step_builder.BackgroundBuilder(lambda w, args, key: lambda *a: None, owner=owner)
        training["now"] = True
        held.request(key, None, (torch.zeros(1),))
        assert held.stop(GUARD_S)  # a stop does not wait for the hold to lift

        def broken():
            raise OSError("versions.json unreadable")

        step_builder.hold_builds_while(broken)
        again, done = step_builder.BackgroundBuilder(lambda w, args, key: (done.set(), lambda *a: None)[1],
                                                     owner=owner), threading.Event()
        again.request(key, None, (torch.zeros(1),))
        assert done.wait(GUARD_S) and again.wait(GUARD_S)
    finally:
        step_builder.hold_builds_while(None)


def test_kernel_templates_are_compiled_once_and_render_as_a_fresh_compile():
    from torch._inductor.codegen.common import KernelTemplate

    fresh = KernelTemplate._template_from_string  # torch's own, or already memoised by an earlier tuned build
    fast_decode._reuse_kernel_templates()
    fast_decode._reuse_kernel_templates()  # once is enough: not wrapped twice
    memo = KernelTemplate._template_from_string
    assert getattr(memo, "_umind_reused", False) and getattr(memo, "__wrapped__", None) is not None
    assert memo.__wrapped__ is getattr(fresh, "__wrapped__", fresh)
    source = "{% for i in range(n) %}{{ i }}{{ sep }}{% endfor %}{{ text | indent_except_first(1) }}"
    assert memo(source) is memo(source)  # one compile per source
    context = {"n": 3, "sep": ",", "text": "a\nb"}
    assert memo(source).render(**context) == memo.__wrapped__(source).render(**context) == "0,1,2,a\n    b"
