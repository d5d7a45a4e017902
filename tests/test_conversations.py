"""Conversation builder: every task from synthetic annotations, answers that parse back to the annotations."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

from umind_core.answers import grounding
from umind_core.data.conversations import (
    FOREIGN_ANATOMY,
    REFUSAL_ANSWERS,
    SITE_ANATOMY,
    ConversationError,
    attach_conversations,
    build_conversations,
)
from umind_core.data.manifest import Conversation, read_manifest, write_synthetic_dataset
from umind_core.evaluation.metrics import is_refusal
from umind_core.prompts import TASKS, TEMPLATES, build_user_text

SIZE = 128


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    path = write_synthetic_dataset(tmp_path_factory.mktemp("syn"), n=8, size=SIZE, progress=False)
    return path, read_manifest(path)


def _build(rec, seed=0, **kw):
    return build_conversations(rec, SIZE, SIZE, random.Random(seed), **kw)


def _user(c):
    return c.messages[0]["content"]


def _answer(c):
    return c.messages[1]["content"]


def _grid(v):
    return v / SIZE * grounding.GRID


def _close(a, b):
    assert len(a) == len(b)
    assert all(abs(x - y) <= 1 for x, y in zip(a, b)), (a, b)


def _wordings(task, target=None):
    return {build_user_text(task, target, variant=k) for k in range(len(TEMPLATES[task].variants))}


def test_every_task_is_produced_and_messages_are_user_then_assistant(dataset):
    _, records = dataset
    seen = set()
    for rec in records:
        for c in _build(rec, refusal_rate=0.0):
            seen.add(c.task)
            assert [m["role"] for m in c.messages] == ["user", "assistant"]
            assert all(isinstance(m["content"], str) and m["content"] for m in c.messages)
    assert seen == set(TASKS)


def test_segment_answers_one_mask_per_object_of_the_target(dataset):
    _, records = dataset
    checked = 0
    for rec in records:
        objects = rec.annotations.objects
        for c in _build(rec, refusal_rate=0.0, tasks=["segment"]):
            parsed = grounding.parse(_answer(c))
            assert parsed.warnings == [] and parsed.mask_groups == len(c.mask_objects) >= 1
            assert [o.label for o in parsed.objects] == [objects[k].label for k in c.mask_objects]
            assert all(m.n_tokens == grounding.NUM_MASK_TOKENS for o in parsed.objects for m in o.masks)
            label = objects[c.mask_objects[0]].label
            if grounding.parse(_user(c)).objects:
                continue  # interactive: checked below
            assert _user(c) in _wordings("segment", label)
            # the plain sample covers every object of that label
            assert c.mask_objects == [i for i, o in enumerate(objects) if o.label == label]
            checked += 1
    assert checked >= len(records) - 2  # normal breast images have no object


def test_detect_boxes_parse_back_to_the_annotation(dataset):
    _, records = dataset
    n = 0
    for rec in records:
        by_label = {}
        for o in rec.annotations.objects:
            by_label.setdefault(o.label, []).append(o.box)
        for c in _build(rec, refusal_rate=0.0, tasks=["detect"]):
            parsed = grounding.parse(_answer(c))
            assert parsed.warnings == []
            label = parsed.objects[0].label
            assert _user(c) in _wordings("detect", label)
            boxes = [b for o in parsed.objects for b in o.boxes]
            assert {o.label for o in parsed.objects} == {label}
            for got, want in zip(boxes, by_label[label], strict=True):
                _close([got.x1, got.y1, got.x2, got.y2], [_grid(v) for v in want])
            n += 1
    assert n >= 6


def test_keypoints_and_measurements_parse_back(dataset):
    _, records = dataset
    n_kp = n_line = 0
    for rec in records:
        for c in _build(rec, refusal_rate=0.0, tasks=["keypoints", "measure"]):
            parsed = grounding.parse(_answer(c))
            assert parsed.warnings == []
            if c.task == "keypoints":
                (obj,) = [o for o in rec.annotations.objects if o.keypoints]
                assert _user(c) in _wordings("keypoints", obj.label)
                assert [o.label for o in parsed.objects] == [k.name for k in obj.keypoints]
                for o, k in zip(parsed.objects, obj.keypoints):
                    (p,) = o.points
                    _close([p.x, p.y], [_grid(v) for v in k.xy])
                n_kp += 1
            else:
                (line,) = [ln for o in rec.annotations.objects for ln in o.lines
                           if _user(c) in _wordings("measure", ln.name)]
                (o,) = parsed.objects
                assert o.label == line.name
                _close([o.lines[0].x1, o.lines[0].y1, o.lines[0].x2, o.lines[0].y2], [_grid(v) for v in line.xy])
                assert _answer(c).endswith(f"{grounding.LINE_END} Length: {line.length_mm:.1f} mm.")
                n_line += 1
    lesions = sum(1 for rec in records for o in rec.annotations.objects if o.lines and not o.keypoints)
    assert n_kp == 4  # kidney and fetal head records
    assert n_line == 4 + 2 * lesions and lesions > 0  # their lines, and two calipers per breast or thyroid lesion


def test_diagnose_report_and_ask_answers(dataset):
    _, records = dataset
    for rec in records:
        convs = {c.task: c for c in _build(rec, refusal_rate=0.0, tasks=["diagnose", "report", "ask"])}
        assert set(convs) == {"diagnose", "report", "ask"}
        diag = _answer(convs["diagnose"])
        assert diag.startswith(rec.annotations.diagnosis.capitalize() + ". ")
        assert len(diag.split(". ", 1)[1]) > 20  # a cue sentence from the report's finding
        assert _user(convs["diagnose"]) in _wordings("diagnose")
        assert _answer(convs["report"]) == rec.annotations.report
        ask = convs["ask"]
        assert _user(ask) == build_user_text("ask", _user(ask))
        answer = _answer(ask)
        site = rec.site.replace("_", " ")
        values = [f"{v:.1f} mm" for v in rec.annotations.measurements.values()]
        assert answer == f"This is a {site} ultrasound image." or any(v in answer for v in values)
        for c in convs.values():
            assert not is_refusal(_answer(c)), _answer(c)


def test_interactive_samples_prompt_inside_the_object(dataset):
    _, records = dataset
    kinds = set()
    for seed in range(4):
        for rec in records:
            masks = rec.load_masks()
            for c in _build(rec, seed=seed, refusal_rate=0.0, tasks=["segment"]):
                visual = grounding.parse(_user(c)).objects
                if not visual:
                    continue
                (k,) = c.mask_objects
                mask, obj = masks[k], rec.annotations.objects[k]
                assert grounding.parse(_answer(c)).objects[0].label == obj.label
                if visual[0].boxes:
                    kinds.add("box")
                    b = visual[0].boxes[0]
                    x1, y1, x2, y2 = obj.box
                    slack = 0.05 * max(x2 - x1, y2 - y1) + 1
                    assert abs(grounding.from_grid(b.x1, SIZE) - x1) <= slack
                    assert abs(grounding.from_grid(b.y2, SIZE) - y2) <= slack
                else:
                    kinds.add("points")
                    text = _user(c)
                    positive = visual[0].points
                    x1, y1, x2, y2 = obj.box
                    assert text.index("Positive points:") < text.index(grounding.POINT_START)
                    for p in positive:
                        x, y = grounding.point_from_grid(p, SIZE, SIZE)
                        assert mask[int(round(y)), int(round(x))], (rec.id, p)
                    for o in visual[1:]:
                        kinds.add("negative")
                        for p in o.points:
                            x, y = grounding.point_from_grid(p, SIZE, SIZE)
                            assert not mask[int(round(y)), int(round(x))], (rec.id, p)
                            assert abs(x - (x1 + x2) / 2) <= x2 - x1 and abs(y - (y1 + y2) / 2) <= y2 - y1
    assert kinds == {"box", "points", "negative"}


def test_refusals_ask_about_absent_anatomy_and_are_recognised(dataset):
    _, records = dataset
    for rec in records:
        normal = _build(rec, refusal_rate=0.0)
        with_refusal = _build(rec, refusal_rate=1.0)
        assert len(with_refusal) == len(normal) + 1
        refusal = with_refusal[-1]
        assert refusal.task in ("segment", "detect", "ask") and refusal.mask_objects == []
        answer = _answer(refusal)
        assert is_refusal(answer), answer
        assert rec.site.replace("_", " ") in answer
        target = next(t for t in FOREIGN_ANATOMY if t in _user(refusal) and t in answer)
        assert target not in SITE_ANATOMY[rec.site]
        assert target not in {o.label for o in rec.annotations.objects}
        assert grounding.parse(answer).objects == []
        assert not any(is_refusal(_answer(c)) for c in normal)



def test_a_refusal_never_targets_anatomy_the_record_labels(dataset):
    """A site's usual anatomy and every label the record holds are present: an imported record that labels a kidney
    on a breast scan must never be taught to say there is no kidney."""
    import copy

    from umind_core.data.manifest import ManifestObject

    _, records = dataset
    rec = copy.deepcopy(records[0])
    foreign = [t for t in FOREIGN_ANATOMY if t not in SITE_ANATOMY[rec.site]]
    rec.annotations.objects += [ManifestObject(label=t) for t in foreign[:-1]]
    for seed in range(6):
        refusal = _build(rec, seed=seed, refusal_rate=1.0, tasks=["segment", "detect"])[-1]
        assert foreign[-1] in _user(refusal) and is_refusal(_answer(refusal)), _user(refusal)


def test_boxes_are_scaled_by_width_and_height_each(dataset):
    """x runs along the width and y along the height: on a frame twice as wide as high each axis keeps its own."""
    _, records = dataset
    rec = next(r for r in records if any(o.box for o in r.annotations.objects))
    c = build_conversations(rec, 2 * SIZE, SIZE, random.Random(0), refusal_rate=0.0, tasks=["detect"])[0]
    label = grounding.parse(_answer(c)).objects[0].label
    want = next(o.box for o in rec.annotations.objects if o.label == label)
    got = grounding.parse(_answer(c)).objects[0].boxes[0]
    _close([got.x1, got.y1, got.x2, got.y2], [want[0] / (2 * SIZE) * grounding.GRID, _grid(want[1]),
                                              want[2] / (2 * SIZE) * grounding.GRID, _grid(want[3])])

def test_every_refusal_wording_is_a_refusal():
    for wording in REFUSAL_ANSWERS:
        assert is_refusal(wording.format(target="left ventricle", site="breast"))


def test_no_refusal_for_an_unknown_site(dataset):
    _, records = dataset
    rec = records[0]
    rec2 = type(rec)(**{**rec.__dict__, "site": None})
    assert len(_build(rec2, refusal_rate=1.0)) == len(_build(rec2, refusal_rate=0.0))


def test_tasks_filter_and_determinism(dataset):
    _, records = dataset
    rec = records[2]  # kidney
    only = _build(rec, tasks=["measure"], refusal_rate=1.0)
    assert [c.task for c in only] == ["measure"]  # refusals need segment, detect or ask
    assert _build(rec, seed=5) == _build(rec, seed=5)
    variants = {tuple(_user(c) for c in _build(rec, seed=s, refusal_rate=0.0)) for s in range(6)}
    assert len(variants) > 1  # wordings vary with the generator


@pytest.mark.parametrize("kwargs, words", [
    (dict(tasks=["classify"]), "['classify'] are not known"),
    (dict(tasks=[]), "must not be empty"),
    (dict(refusal_rate=1.5), "refusal_rate"),
    (dict(width=0), "width must be a positive int"),
    (dict(height=12.5), "height must be a positive int"),
    (dict(rng=np.random.default_rng(0)), "rng must be a random.Random"),
])
def test_builder_errors(dataset, kwargs, words):
    _, records = dataset
    args = dict(record=records[0], width=SIZE, height=SIZE, rng=random.Random(0))
    args.update(kwargs)
    with pytest.raises(ConversationError, match=words.replace("[", r"\[").replace("]", r"\]")):
        build_conversations(**args)


def test_conversation_mask_objects_round_trip():
    c = Conversation("segment", [{"role": "user", "content": "u"}, {"role": "assistant", "content": "a"}], [2, 0])
    assert Conversation.from_json(json.loads(json.dumps(c.to_json())), "c") == c
    plain = Conversation("ask", [{"role": "user", "content": "q"}])
    assert "mask_objects" not in plain.to_json()
    assert Conversation.from_json(plain.to_json(), "c").mask_objects == []


def test_attach_writes_a_manifest_that_reads_back(dataset, tmp_path):
    path, records = dataset
    same = attach_conversations(path, path.parent / "with_conversations.jsonl", seed=3)
    elsewhere = attach_conversations(path, tmp_path / "out" / "manifest.jsonl", seed=3)
    a, b = read_manifest(same), read_manifest(elsewhere)
    assert [r.id for r in a] == [r.id for r in records]
    assert all(r.conversations for r in a)
    assert [r.conversations for r in a] == [r.conversations for r in b]
    assert any(c.mask_objects for r in a for c in r.conversations)
    # paths of the copy in another folder still point at the same files
    assert b[0].image.startswith("..")
    np.testing.assert_array_equal(b[0].load_image(), records[0].load_image())
    np.testing.assert_array_equal(b[1].load_masks()[0], records[1].load_masks()[0])
    # a record's conversations depend on the seed and its id only, not on the other records
    subset = tmp_path / "subset" / "manifest.jsonl"
    from umind_core.data.manifest import write_manifest

    write_manifest(list(reversed(read_manifest(path)[2:5])), path.parent / "subset.jsonl")
    sub = read_manifest(attach_conversations(path.parent / "subset.jsonl", subset, seed=3))
    by_id = {r.id: r.conversations for r in a}
    assert all(r.conversations == by_id[r.id] for r in sub)
    other_seed = read_manifest(attach_conversations(path, tmp_path / "seed4.jsonl", seed=4))
    assert [r.conversations for r in other_seed] != [r.conversations for r in a]


@pytest.mark.parametrize("views", [1, 2])
def test_a_diagnosis_rests_on_the_reports_finding_as_a_sentence_and_a_measurement_is_asked_without_its_unit(views):
    """An image's and an examination's conversations share the rules: "Malignant. Irregular mass..." (the finding
    capitalised as a sentence of its own) and "What is the HC?" for a measurement named "HC (mm)"."""
    from umind_core.data.conversations import build_exam_conversations
    from umind_core.data.manifest import Annotations, Record, View

    ann = Annotations(diagnosis="malignant", report="Site: breast. Finding: irregular mass, spiculated margins. "
                                                      "Impression: suspicious.", measurements={"HC (mm)": 180.04})
    images = [View(image=f"v{k}.png") for k in range(views)]
    rec = Record(id="r", site="breast", annotations=ann, views=images)
    asked = 0
    for seed in range(12):
        rng = random.Random(seed)
        convs = build_conversations(rec, 64, 64, rng, tasks=["diagnose", "ask"], refusal_rate=0.0) if views == 1 \
            else build_exam_conversations(rec, [(64, 64)] * views, rng, tasks=["diagnose", "ask"])
        answers = {c.task: _answer(c) for c in convs}
        assert answers["diagnose"] == "Malignant. Irregular mass, spiculated margins."
        if "HC" in answers["ask"]:
            asked += 1
            assert answers["ask"] == "The HC is 180.0 mm." and "(mm)" not in _user(
                next(c for c in convs if c.task == "ask"))
    assert asked > 0  # the measurement question was drawn at least once (else the site question)
