"""Task templates and visual prompts -> the user text the model reads, and the chat frame around it.

The trainer's conversation builder and the Predictor both build user text with `build_user_text`, so a prompt
seen at serving time is worded the way the model was trained on. Templates are one table of data
(`TEMPLATES`); a task differs from another only by its row, never by code.

Visual prompts (a Slicer ROI, clicks) are written in the grounding grammar on the 0..1000 grid, after the
instruction::

    Segment the thyroid nodule in this ultrasound image. Region: <|box_start|>(120,80),(410,300)<|box_end|>.
    Positive points: <|point_start|>(250,190)<|point_end|>. Negative points: <|point_start|>(90,60)<|point_end|>.

`grounding.parse` reads such a text back as three objects (the region, the positive run, the negative run).
"""

from __future__ import annotations

import numbers
import re
from dataclasses import dataclass, field

from . import grounding
from .grounding import Box, GroundingError, Point

__all__ = [
    "TASKS",
    "TaskTemplate",
    "TEMPLATES",
    "MAX_PROMPT_CHARS",
    "INTERACTIVE_TARGET",
    "IMAGE_PLACEHOLDER",
    "IMAGE_PREFIX",
    "ASSISTANT_END",
    "PromptError",
    "build_user_text",
    "chat_prompt",
    "turn_suffix",
]

TASKS: tuple[str, ...] = ("segment", "detect", "keypoints", "measure", "diagnose", "report", "ask")
MAX_PROMPT_CHARS = 2000
#: The target named when a box or clicks are given without any text: "the lesion" would be wrong for a
#: click on a kidney, and the visual prompt already says which structure is meant.
INTERACTIVE_TARGET = "indicated structure"
IMAGE_PLACEHOLDER = "<|vision_start|><|image_pad|><|vision_end|>"
ASSISTANT_END = "<|im_end|>"
#: The start of every conversation up to the end of the image: the part the Predictor caches once per image and
#: the trainer shares between the turns it packs onto one image.
IMAGE_PREFIX = "<|im_start|>user\n" + IMAGE_PLACEHOLDER
_CHAT_TOKENS = ("<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>", "<|vision_pad|>",
                "<|image_pad|>", "<|video_pad|>", "<|endoftext|>")
_ANSWERS = ("mask", "box", "point", "line", "text")
_MAX_TARGET_WORDS = 6


class PromptError(ValueError):
    """A task, prompt or visual prompt that cannot become user text; the message names what is wrong."""


@dataclass(frozen=True)
class TaskTemplate:
    """One row of the template table.

    `instruction` is the canonical wording (the Predictor's); `variants` are the wordings the conversation
    builder draws from for training, the canonical one first, so serving always uses a trained wording.
    """

    task: str
    instruction: str
    default_target: str | None
    answer: str
    variants: tuple[str, ...] = field(default=())

    def __post_init__(self) -> None:
        if self.answer not in _ANSWERS:
            raise PromptError(f"template {self.task!r}: answer {self.answer!r} is not one of {_ANSWERS}")
        if not self.variants:
            object.__setattr__(self, "variants", (self.instruction,))
        elif self.variants[0] != self.instruction:
            raise PromptError(f"template {self.task!r}: variants must start with the instruction")


TEMPLATES: dict[str, TaskTemplate] = {
    t.task: t
    for t in (
        TaskTemplate(
            "segment", "Segment the {target} in this ultrasound image.", "lesion", "mask",
            ("Segment the {target} in this ultrasound image.",
             "Please outline the {target} in this ultrasound image.",
             "Draw the mask of the {target}.",
             "Show where the {target} is in this scan by segmenting it.",
             "Give a segmentation of the {target} in this image."),
        ),
        TaskTemplate(
            "detect", "Detect the {target} in this ultrasound image and give its bounding box.", "lesion", "box",
            ("Detect the {target} in this ultrasound image and give its bounding box.",
             "Locate the {target} and draw a box around it.",
             "Where is the {target} in this scan? Answer with a bounding box.",
             "Find every {target} in this ultrasound image and box it."),
        ),
        TaskTemplate(
            "keypoints", "Mark the landmarks of the {target} in this ultrasound image.", "anatomy", "point",
            ("Mark the landmarks of the {target} in this ultrasound image.",
             "Point to the keypoints of the {target}.",
             "Locate the anatomical landmarks of the {target} in this scan.",
             "Place the landmark points of the {target} on this image."),
        ),
        TaskTemplate(
            "measure", "Measure the {target} in this ultrasound image.", "main structure", "line",
            ("Measure the {target} in this ultrasound image.",
             "Draw the caliper line for the {target} and give its length.",
             "What is the {target}? Place the measurement line.",
             "Take the {target} measurement on this scan."),
        ),
        TaskTemplate(
            "diagnose", "Is the {target} in this ultrasound image normal, benign or malignant?", "finding", "text",
            ("Is the {target} in this ultrasound image normal, benign or malignant?",
             "Give the diagnosis for this ultrasound image: normal, benign or malignant?",
             "Classify the {target} in this scan as normal, benign or malignant.",
             "What is your diagnosis of the {target} in this image?"),
        ),
        TaskTemplate(
            "report", "Write a structured report for this ultrasound image.", "image", "text",
            ("Write a structured report for this ultrasound image.",
             "Describe the findings in this ultrasound image as a report.",
             "Generate the ultrasound report for this scan.",
             "Report this ultrasound examination: site, finding, size and impression."),
        ),
        TaskTemplate("ask", "{target}", None, "text"),
    )
}


def _template(task: object) -> TaskTemplate:
    if not isinstance(task, str) or task not in TEMPLATES:
        raise PromptError(f"unknown task {task!r}; valid tasks: {', '.join(TASKS)}")
    return TEMPLATES[task]


def _clean_prompt(prompt: object) -> str | None:
    """Whitespace-collapsed prompt, or None for no prompt; rejects what would corrupt the chat frame."""
    if prompt is None:
        return None
    if not isinstance(prompt, str):
        raise PromptError(f"prompt must be a str or None, got {type(prompt).__name__} {prompt!r}")
    if len(prompt) > MAX_PROMPT_CHARS:
        raise PromptError(f"prompt is too long: {len(prompt)} > MAX_PROMPT_CHARS={MAX_PROMPT_CHARS} characters")
    for tok in grounding.GROUNDING_TOKENS + _CHAT_TOKENS:
        if tok in prompt:
            raise PromptError(
                f"prompt {prompt[:60]!r} contains the special token {tok}; pass boxes and points as "
                "box=/points= arguments"
            )
    clean = " ".join(prompt.split())
    return clean or None


def _is_sentence(text: str) -> bool:
    return text.endswith(("?", ".")) or len(text.split()) > _MAX_TARGET_WORDS


def _as_target(text: str) -> str:
    """A free phrase as the object of an instruction: no leading article, no trailing punctuation."""
    target = re.sub(r"^(the|a|an)\s+", "", text, flags=re.I).rstrip(" ,;:!")
    return target or text


def _visual_prompt(box: Box | None, points: list[Point] | None, labels: list[int] | None) -> list[str]:
    parts: list[str] = []
    if box is not None:
        if not isinstance(box, Box):
            raise PromptError(f"box must be a grounding.Box on the 0..{grounding.GRID} grid, got {box!r}")
        try:
            parts.append(f"Region: {grounding.format_box(box)}.")
        except GroundingError as exc:
            raise PromptError(f"box {box!r} is not a valid grid box: {exc}") from None
    if points is None and labels is None:
        return parts
    if points is None:
        raise PromptError(f"labels {labels!r} were given without points")
    if labels is None:
        raise PromptError(f"points {points!r} need labels (1 = positive, 0 = negative), got none")
    points, labels = list(points), list(labels)
    if len(points) != len(labels):
        raise PromptError(f"points and labels differ in length: {len(points)} points, {len(labels)} labels")
    groups: dict[int, list[str]] = {1: [], 0: []}
    for i, (point, label) in enumerate(zip(points, labels)):
        if isinstance(label, bool) or not isinstance(label, numbers.Integral) or int(label) not in (0, 1):
            raise PromptError(f"labels[{i}]={label!r} must be 1 (positive) or 0 (negative)")
        if not isinstance(point, Point):
            raise PromptError(f"points[{i}] must be a grounding.Point on the 0..{grounding.GRID} grid, got {point!r}")
        try:
            groups[int(label)].append(grounding.format_point(point))
        except GroundingError as exc:
            raise PromptError(f"points[{i}] {point!r} is not a valid grid point: {exc}") from None
    if groups[1]:
        parts.append("Positive points: " + " ".join(groups[1]) + ".")
    if groups[0]:
        parts.append("Negative points: " + " ".join(groups[0]) + ".")
    return parts


def build_user_text(
    task: str,
    prompt: str | None = None,
    box: Box | None = None,
    points: list[Point] | None = None,
    labels: list[int] | None = None,
    variant: int = 0,
) -> str:
    """The user turn for `task`: the template's wording around the prompt, then any visual prompts.

    segment/detect/keypoints/measure: the prompt names the target ("thyroid nodule") unless it is already a
    sentence (ends with '?' or '.', or has more than six words), which is then used verbatim. diagnose/report:
    the prompt is extra context after the instruction. ask: the prompt is the question, verbatim.
    `variant` picks one of the template's wordings (0, the canonical one, for serving).
    """
    template = _template(task)
    if isinstance(variant, bool) or not isinstance(variant, numbers.Integral) or not (
        0 <= int(variant) < len(template.variants)
    ):
        raise PromptError(
            f"variant {variant!r} for task {task!r} must be an int in 0..{len(template.variants) - 1}"
        )
    wording = template.variants[int(variant)]
    text = _clean_prompt(prompt)
    visual = _visual_prompt(box, points, labels)
    if template.default_target is None:  # ask
        if text is None:
            raise PromptError(f"task {task!r} needs a non-empty prompt (the question)")
        head = text
    elif template.answer == "text":  # diagnose, report
        head = wording.format(target=template.default_target)
        if text is not None:
            head += f" Context: {text}" + ("" if text.endswith((".", "?", "!")) else ".")
    elif text is not None and _is_sentence(text):
        head = text
    else:
        target = _as_target(text) if text is not None else (
            INTERACTIVE_TARGET if visual else template.default_target
        )
        head = wording.format(target=target)
    return " ".join([head, *visual])


def chat_prompt(user_text: str, n_images: int = 1) -> str:
    """Qwen's chat frame for one user turn with `n_images` image placeholders, open for the assistant."""
    if not isinstance(user_text, str):
        raise PromptError(f"user_text must be a str, got {type(user_text).__name__}")
    for tok in _CHAT_TOKENS:
        if tok in user_text:
            raise PromptError(f"user_text contains the chat token {tok}; chat_prompt adds the frame itself")
    if isinstance(n_images, bool) or not isinstance(n_images, numbers.Integral) or n_images < 0:
        raise PromptError(f"n_images must be a non-negative int, got {n_images!r}")
    return "<|im_start|>user\n" + IMAGE_PLACEHOLDER * int(n_images) + turn_suffix(user_text)


def turn_suffix(user_text: str) -> str:
    """What follows the image prefix for one question: the user text, then the frame open for the answer."""
    return user_text + ASSISTANT_END + "\n<|im_start|>assistant\n"
