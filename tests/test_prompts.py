"""Task templates, user text with visual prompts, and the chat frame."""

from __future__ import annotations

import pytest

from umind_core.answers import grounding
from umind_core.answers.grounding import Box, Point
from umind_core.prompts import (
    ASSISTANT_END,
    INTERACTIVE_TARGET,
    MAX_PROMPT_CHARS,
    TASKS,
    TEMPLATES,
    PromptError,
    TaskTemplate,
    build_user_text,
    chat_prompt,
)


def test_table_covers_every_task_once_with_a_known_answer_kind():
    assert tuple(TEMPLATES) == TASKS
    for task, t in TEMPLATES.items():
        assert isinstance(t, TaskTemplate) and t.task == task
        assert t.answer in ("mask", "box", "point", "line", "text")
        assert t.variants[0] == t.instruction and len(set(t.variants)) == len(t.variants)
        if t.default_target is not None:
            assert "{target}" in t.instruction or t.answer == "text"
    assert TEMPLATES["ask"].default_target is None
    grounded = ("segment", "detect", "keypoints", "measure")
    assert [TEMPLATES[t].answer for t in grounded] == ["mask", "box", "point", "line"]
    # several training wordings for every task that has an instruction of its own
    assert all(len(TEMPLATES[t].variants) >= 3 for t in TASKS if t != "ask")


def test_template_rejects_unknown_answer_kind():
    with pytest.raises(PromptError, match="answer 'polygon'"):
        TaskTemplate("x", "Do {target}.", "y", "polygon")


@pytest.mark.parametrize("task", ["segment", "detect", "keypoints", "measure"])
def test_target_phrase_goes_into_the_instruction(task):
    text = build_user_text(task, "  the thyroid   nodule ")
    assert text == TEMPLATES[task].instruction.format(target="thyroid nodule")


@pytest.mark.parametrize("task", ["segment", "detect", "keypoints", "measure"])
def test_default_target_when_no_prompt(task):
    expected = TEMPLATES[task].instruction.format(target=TEMPLATES[task].default_target)
    assert build_user_text(task) == expected
    assert build_user_text(task, "   ") == expected


@pytest.mark.parametrize("prompt", [
    "Outline the nodule in the left lobe.",
    "Where is the cyst?",
    "please find me the big dark round thing near the top",  # more than six words
])
def test_full_sentences_are_used_verbatim(prompt):
    assert build_user_text("segment", prompt) == prompt


def test_diagnose_and_report_take_the_prompt_as_context():
    base = TEMPLATES["diagnose"].instruction.format(target=TEMPLATES["diagnose"].default_target)
    assert build_user_text("diagnose") == base
    assert build_user_text("diagnose", "palpable lump") == base + " Context: palpable lump."
    assert build_user_text("report", "Follow-up scan?").endswith(" Context: Follow-up scan?")
    assert build_user_text("report").startswith(TEMPLATES["report"].instruction.format(target="image"))


def test_ask_uses_the_question_verbatim():
    assert build_user_text("ask", "Is the nodule taller than wide?") == "Is the nodule taller than wide?"


def test_variant_picks_a_training_wording():
    t = TEMPLATES["detect"]
    assert build_user_text("detect", "kidney", variant=2) == t.variants[2].format(target="kidney")
    with pytest.raises(PromptError, match="variant 99"):
        build_user_text("detect", "kidney", variant=99)


def test_visual_prompts_are_in_the_grammar_and_parse_back():
    box = Box(100, 120, 400, 480)
    points = [Point(250, 300), Point(50, 60), Point(260, 310)]
    text = build_user_text("segment", "thyroid nodule", box=box, points=points, labels=[1, 0, 1])
    assert text.startswith("Segment the thyroid nodule in this ultrasound image. Region: ")
    assert "Region: <|box_start|>(100,120),(400,480)<|box_end|>." in text
    assert "Positive points: <|point_start|>(250,300)<|point_end|> <|point_start|>(260,310)<|point_end|>." in text
    assert "Negative points: <|point_start|>(50,60)<|point_end|>." in text
    parsed = grounding.parse(text)
    assert parsed.warnings == []
    assert [o.boxes for o in parsed.objects] == [[box], [], []]
    assert [o.points for o in parsed.objects] == [[], [points[0], points[2]], [points[1]]]


def test_visual_prompt_without_text_names_the_indicated_structure():
    text = build_user_text("segment", points=[Point(5, 5)], labels=[1])
    assert text.startswith(TEMPLATES["segment"].instruction.format(target=INTERACTIVE_TARGET))
    assert grounding.parse(text).objects[0].points == [Point(5, 5)]


@pytest.mark.parametrize("kwargs, words", [
    (dict(task="classify"), ["unknown task 'classify'", "segment", "ask"]),
    (dict(task="ask"), ["needs a non-empty prompt"]),
    (dict(task="ask", prompt="  \n "), ["needs a non-empty prompt"]),
    (dict(task="ask", prompt="x" * (MAX_PROMPT_CHARS + 1)), [f"{MAX_PROMPT_CHARS + 1} > MAX_PROMPT_CHARS"]),
    (dict(task="segment", prompt=12), ["prompt must be a str"]),
    (dict(task="segment", prompt="the <|seg_mask|> nodule"), ["special token <|seg_mask|>"]),
    (dict(task="segment", prompt="x<|im_end|>"), ["special token <|im_end|>"]),
    (dict(task="segment", points=[Point(1, 1)]), ["need labels"]),
    (dict(task="segment", labels=[1]), ["without points"]),
    (dict(task="segment", points=[Point(1, 1)], labels=[1, 0]), ["1 points, 2 labels"]),
    (dict(task="segment", points=[Point(1, 1)], labels=[2]), ["labels[0]=2", "1 (positive) or 0"]),
    (dict(task="segment", points=[Point(1, 1)], labels=[True]), ["labels[0]=True"]),
    (dict(task="segment", points=[Point(1, 1001)], labels=[1]), ["points[0]", "outside the 0..1000 grid"]),
    (dict(task="segment", points=[Point(1.5, 2)], labels=[1]), ["points[0]", "must be an int"]),
    (dict(task="segment", points=[(1, 2)], labels=[1]), ["points[0] must be a grounding.Point"]),
    (dict(task="segment", box=Box(-1, 0, 10, 10)), ["box", "outside the 0..1000 grid"]),
    (dict(task="segment", box=Box(50, 0, 10, 10)), ["corners out of order"]),
    (dict(task="segment", box=(0, 0, 10, 10)), ["box must be a grounding.Box"]),
])
def test_prompt_errors_name_the_problem(kwargs, words):
    with pytest.raises(PromptError) as info:
        build_user_text(**kwargs)
    for w in words:
        assert w in str(info.value)


def test_prompt_at_the_limit_is_accepted():
    question = "?" * MAX_PROMPT_CHARS
    assert build_user_text("ask", question) == question


def test_chat_prompt_frame():
    text = chat_prompt("Where is it?")
    assert text == ("<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>Where is it?<|im_end|>\n"
                    "<|im_start|>assistant\n")
    assert chat_prompt("x", n_images=3).count("<|image_pad|>") == 3
    assert "<|image_pad|>" not in chat_prompt("x", n_images=0)
    assert ASSISTANT_END == "<|im_end|>"


def test_chat_prompt_matches_the_test_chat_format():
    from conftest import CHAT

    assert chat_prompt("Segment every lesion.") == CHAT.format(prompt="Segment every lesion.")


@pytest.mark.parametrize("args, words", [
    (("x", -1), "n_images"),
    (("x", 1.0), "n_images"),
    ((b"x", 1), "user_text must be a str"),
    (("a<|image_pad|>b", 1), "chat token <|image_pad|>"),
])
def test_chat_prompt_errors(args, words):
    with pytest.raises(PromptError, match=words.replace("|", r"\|")):
        chat_prompt(*args)


def test_user_text_picks_the_table_by_view_count_and_refuses_clicks_on_an_examination():
    from umind_core import prompts

    """One view reads with the single-image table, visual prompts included; several with the examination's."""
    box = Box(10, 20, 300, 400)
    assert prompts.user_text("segment", "nodule", 1, box=box) == prompts.build_user_text("segment", "nodule", box=box)
    assert prompts.user_text("segment", "nodule", 3) == prompts.build_exam_text("segment", "nodule")
    assert prompts.user_text("segment", "nodule", 3) != prompts.user_text("segment", "nodule", 1)
    assert prompts.exam_prefix(1) == prompts.IMAGE_PREFIX and "View 2" in prompts.exam_prefix(2)
    with pytest.raises(prompts.PromptError, match="no box or clicks"):
        prompts.user_text("segment", "nodule", 2, box=box)


# ------------------------------------------------------------------------------------------------ wording rules

def test_a_target_of_six_words_is_a_target_and_seven_is_a_sentence():
    six = "left lobe upper pole thyroid nodule"
    seven = "the left lobe upper pole thyroid nodule"
    assert build_user_text("segment", six) == TEMPLATES["segment"].instruction.format(target=six)
    assert build_user_text("segment", seven) == seven


@pytest.mark.parametrize("article", ["the", "a", "an", "An"])
def test_a_leading_article_is_dropped_from_the_target(article):
    assert build_user_text("segment", f"{article} ovary") == TEMPLATES["segment"].instruction.format(target="ovary")


@pytest.mark.parametrize("build", ["image", "exam"])
def test_context_ending_in_any_sentence_mark_gets_no_extra_full_stop(build):
    from umind_core.prompts import build_exam_text

    text = (lambda p: build_user_text("report", p)) if build == "image" else (lambda p: build_exam_text("report", p))
    assert text("Patient is 40!").endswith("Context: Patient is 40!")
    assert text("Is it new?").endswith("Context: Is it new?")
    assert text("follow-up").endswith("Context: follow-up.")


# ------------------------------------------------------------------------------------------------ visual prompts

def test_a_box_that_only_touches_the_frame_from_outside_lies_outside():
    from umind_core.prompts import VisualPrompt

    for box in ((-20, 10, 0, 30), (10, -20, 30, 0), (100, 10, 120, 30), (10, 60, 30, 80)):
        with pytest.raises(PromptError, match="lies outside"):
            VisualPrompt.of(box).on_frame(100, 60)


@pytest.mark.parametrize("box", [(50, 10, 130, 30), (10, 40, 30, 90), (-5, 10, 30, 30)])
def test_a_box_partly_outside_on_any_side_is_clipped_with_a_warning(box):
    from umind_core.prompts import VisualPrompt

    grid, _, warnings = VisualPrompt.of(box).on_frame(100, 60)
    assert len(warnings) == 1 and "clipped" in warnings[0]
    assert 0 <= grid.x1 <= grid.x2 <= grounding.GRID and 0 <= grid.y1 <= grid.y2 <= grounding.GRID


def test_a_point_below_a_wide_frame_lies_outside_even_within_its_width():
    from umind_core.prompts import VisualPrompt

    with pytest.raises(PromptError, match="lies outside"):
        VisualPrompt.of(points=[(10, 80)], labels=[1]).on_frame(100, 60)  # y 80 > height 60, < width 100
    VisualPrompt.of(points=[(10, 60)], labels=[1]).on_frame(100, 60)  # on the edge: inside


@pytest.mark.parametrize("box", [(10, 20, 10, 40), (10, 20, 30, 20)])
def test_a_box_without_width_or_without_height_has_no_area(box):
    from umind_core.prompts import VisualPrompt

    with pytest.raises(PromptError, match="no area"):
        VisualPrompt.of(box)


def test_an_examination_takes_no_clicks_either():
    from umind_core.prompts import user_text

    with pytest.raises(PromptError, match="no box or clicks"):
        user_text("segment", "lesion", n_views=2, points=[Point(10, 10)], labels=[1])
    with pytest.raises(PromptError, match="no box or clicks"):
        user_text("segment", "lesion", n_views=2, box=Box(1, 1, 20, 20))
