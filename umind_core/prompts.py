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

import math
import numbers
import re
from dataclasses import dataclass, field

from .answers import grounding
from .answers.grounding import Box, GroundingError, Point

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
    "VisualPrompt",
    "check_point_labels",
    "build_user_text",
    "chat_prompt",
    "turn_suffix",
    "EXAM_TEMPLATES",
    "exam_prefix",
    "build_exam_text",
    "user_text",
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


def _with_context(head: str, text: str) -> str:
    """A finding task's instruction with the user's words after it as context, ended as a sentence."""
    return f"{head} Context: {text}" + ("" if text.endswith((".", "?", "!")) else ".")


def _as_target(text: str) -> str:
    """A free phrase as the object of an instruction: no leading article, no trailing punctuation."""
    target = re.sub(r"^(the|a|an)\s+", "", text, flags=re.I).rstrip(" ,;:!")
    return target or text


def check_point_labels(points, labels, names: tuple[str, str] = ("points", "labels")) -> None:
    """The pairing rule every caller shares: labels come with points, one each, 1 (positive) or 0 (negative).

    ``names`` are how the caller calls the two (the CLI's "--points"/"--labels"), so messages name its options.
    """
    pn, ln = names
    if points is None and labels is None:
        return
    if points is None:
        raise PromptError(f"{ln} {list(labels)!r} given without {pn}")
    if labels is None:
        raise PromptError(f"{pn} gave {len(list(points))} point(s) but no {ln}: points need labels "
                          "(1 = positive, 0 = negative)")
    n, m = len(list(points)), len(list(labels))
    if n != m:
        raise PromptError(f"{pn} gave {n} point(s) but {ln} gave {m} label(s) ({n} points, {m} labels: one "
                          "label per point)")
    for i, label in enumerate(labels):
        if isinstance(label, bool) or not isinstance(label, numbers.Integral) or int(label) not in (0, 1):
            raise PromptError(f"{ln}[{i}]={label!r} must be 1 (positive) or 0 (negative)")


def _finite(values, n: int, what: str) -> tuple[float, ...]:
    try:
        out = tuple(float(v) for v in values)
    except (TypeError, ValueError):
        raise PromptError(f"{what} must be {n} numbers, got {values!r}") from None
    if len(out) != n or not all(math.isfinite(v) for v in out):
        raise PromptError(f"{what} must be {n} finite numbers, got {values!r}")
    return out


@dataclass(frozen=True)
class VisualPrompt:
    """A region and clicks on one frame, in that frame's pixels, checked once for every caller.

    `umind infer`, the server's interactive task and the Predictor all build one with `VisualPrompt.of`, so a
    box is 4 finite numbers with an area, a point 2 finite numbers, and labels pair with points by one rule
    (`check_point_labels`). `on_frame` places it on a frame of known size: outside is an error, partly outside
    is clipped with a warning, and the result is on the 0..1000 grid `build_user_text` writes.
    """

    box: tuple[float, float, float, float] | None = None
    points: tuple[tuple[float, float], ...] | None = None
    labels: tuple[int, ...] | None = None

    @classmethod
    def of(cls, box=None, points=None, labels=None,
           names: tuple[str, str, str] = ("box", "points", "labels")) -> "VisualPrompt":
        """Validated numbers; ``names`` are the caller's names for box, points and labels in messages."""
        bn, pn, ln = names
        vbox = None
        if box is not None:
            vbox = _finite(box, 4, bn)
            if vbox[0] == vbox[2] or vbox[1] == vbox[3]:
                raise PromptError(f"{bn} {' '.join(f'{v:g}' for v in vbox)} has no area")
        vpoints = None if points is None else tuple(_finite(p, 2, f"each of {pn}") for p in points)
        check_point_labels(vpoints, labels, (pn, ln))
        vlabels = None if labels is None else tuple(int(v) for v in labels)
        return cls(vbox, vpoints, vlabels)

    @property
    def empty(self) -> bool:
        return not self.points and self.box is None

    def on_frame(self, width: int, height: int, source: str | None = ""
                 ) -> tuple[Box | None, list[Point] | None, list[str]]:
        """Grid box and points on a ``width`` x ``height`` frame, and warnings (a box clipped to the frame)."""
        warnings: list[str] = []
        where = f"{width}x{height} image {source or ''}".rstrip()
        grid_box = None
        if self.box is not None:
            x1, x2 = sorted(self.box[0::2])
            y1, y2 = sorted(self.box[1::2])
            shown = f"box ({x1:g}, {y1:g}, {x2:g}, {y2:g})"
            if x2 <= 0 or y2 <= 0 or x1 >= width or y1 >= height:
                raise PromptError(f"{shown} lies outside the {where}")
            if x1 < 0 or y1 < 0 or x2 > width or y2 > height:
                warnings.append(f"{shown} was clipped to the {width}x{height} image")
            grid_box = grounding.box_to_grid(max(x1, 0), max(y1, 0), min(x2, width), min(y2, height), width, height)
        grid_points = None
        if self.points is not None:
            grid_points = []
            for x, y in self.points:
                if not (0 <= x <= width and 0 <= y <= height):
                    raise PromptError(f"point ({x:g}, {y:g}) lies outside the {where}")
                grid_points.append(grounding.point_to_grid(x, y, width, height))
        return grid_box, grid_points, warnings


def _visual_prompt(box: Box | None, points: list[Point] | None, labels: list[int] | None) -> list[str]:
    """Grid box and points as text; the pixel-level checks are `VisualPrompt`'s, the pairing rule is shared."""
    parts: list[str] = []
    if box is not None:
        if not isinstance(box, Box):
            raise PromptError(f"box must be a grounding.Box on the 0..{grounding.GRID} grid, got {box!r}")
        try:
            parts.append(f"Region: {grounding.format_box(box)}.")
        except GroundingError as exc:
            raise PromptError(f"box {box!r} is not a valid grid box: {exc}") from None
    points = None if points is None else list(points)
    labels = None if labels is None else list(labels)
    check_point_labels(points, labels)
    if points is None:
        return parts
    groups: dict[int, list[str]] = {1: [], 0: []}
    for i, (point, label) in enumerate(zip(points, labels)):
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
            head = _with_context(head, text)
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


# ------------------------------------------------------------------------------------------- examinations

#: Wordings of the questions about a whole examination (several views in one turn), canonical one first.
#: Separate from TEMPLATES because "this ultrasound image" would be wrong for several images, and segment,
#: detect and measure ask for every view that shows the target (the answer names each view).
EXAM_TEMPLATES: dict[str, tuple[str, ...]] = {
    "segment": ("Segment the {target} in every view of this examination that shows it.",
                "Outline the {target} in each view of this examination.",
                "Draw the mask of the {target} in each view where it is seen."),
    "detect": ("Detect the {target} in every view of this examination and give its bounding boxes.",
               "Locate the {target} in each view of this examination and box it."),
    "keypoints": ("Mark the landmarks of the {target} in every view of this examination that shows it.",
                  "Point to the keypoints of the {target} in each view of this examination."),
    "measure": ("Measure the {target} in this ultrasound examination.",
                "Place the caliper line for the {target} in the view that shows it and give its length."),
    "diagnose": ("Is the {target} in this ultrasound examination normal, benign or malignant?",
                 "Give the diagnosis for this examination from all its views: normal, benign or malignant?",
                 "Read every view of this examination and classify the {target} as normal, benign or malignant."),
    "report": ("Write a structured report for this ultrasound examination.",
               "Report this examination from all its views: site, finding, size and impression.",
               "Generate the ultrasound report for these views of one examination."),
    "ask": ("{target}",),
}


def exam_prefix(n_views: int) -> str:
    """The start of an examination's conversation up to the end of its last image: each image labelled with
    its view marker (`grounding.format_view`), so that an answer's ``View 2:`` points where the prompt said.
    The part the trainer shares between the turns it packs onto one examination. One view is a single image
    (`IMAGE_PREFIX`, no marker): a record of one view reads exactly as the image it holds."""
    if isinstance(n_views, bool) or not isinstance(n_views, numbers.Integral) or n_views < 1:
        raise PromptError(f"n_views must be a positive int, got {n_views!r}")
    if n_views == 1:
        return IMAGE_PREFIX
    views = "\n".join(f"{grounding.format_view(k)} {IMAGE_PLACEHOLDER}" for k in range(1, int(n_views) + 1))
    return "<|im_start|>user\n" + views + "\n"


def user_text(task: str, prompt: str | None = None, n_views: int = 1, box: Box | None = None,
              points: list[Point] | None = None, labels: list[int] | None = None, variant: int = 0) -> str:
    """The user turn about `n_views` images read together: one image's wording (`TEMPLATES`, visual prompts
    allowed), several views' (`EXAM_TEMPLATES`; no box or clicks: no examination conversation is trained with
    them). The one place a view count picks the template table, as `exam_prefix` picks the prefix."""
    if n_views == 1:
        return build_user_text(task, prompt, box=box, points=points, labels=labels, variant=variant)
    if box is not None or points:
        raise PromptError("an examination takes no box or clicks (none is trained); ask that view alone")
    return build_exam_text(task, prompt, variant)


def build_exam_text(task: str, prompt: str | None = None, variant: int = 0) -> str:
    """The user turn about a whole examination: `EXAM_TEMPLATES`' wording around the target (segment, detect,
    measure, diagnose) or the question itself (ask); report and diagnose take the prompt as context."""
    if task not in EXAM_TEMPLATES:
        raise PromptError(f"unknown examination task {task!r}; valid: {', '.join(EXAM_TEMPLATES)}")
    wordings = EXAM_TEMPLATES[task]
    if isinstance(variant, bool) or not isinstance(variant, numbers.Integral) or not 0 <= variant < len(wordings):
        raise PromptError(f"variant {variant!r} for examination task {task!r} must be in 0..{len(wordings) - 1}")
    text = _clean_prompt(prompt)
    if task == "ask":
        if text is None:
            raise PromptError("task 'ask' needs a non-empty prompt (the question)")
        return text
    if task == "report":
        head = wordings[variant]
        return head if text is None else _with_context(head, text)
    target = _as_target(text) if text is not None else TEMPLATES[task].default_target
    return wordings[variant].format(target=target)
