"""Plain annotations -> training conversations for every task (report section 4.2).

Every user turn is built by `prompts.build_user_text`, the function the Predictor calls, so training and
serving prompts cannot drift apart; only the wording variant is drawn at random. Every grounded answer is
written by `grounding` on the 0..1000 grid, from the manifest's pixel coordinates and the image size
(manifest pixels go straight into `grounding.*_to_grid`, the same mapping `grounding.*_from_grid` undoes).

Besides one sample per target and task, a record yields an interactive sample (a box or clicks inside one
object -> that object's mask) and, at `refusal_rate`, an alignment sample: a question about anatomy that is
not in this site, answered with a refusal that `evaluation.metrics.is_refusal` recognises.

An examination (`Record`) yields conversations about all its views at once (`build_exam_conversations`):
the question follows every view, and a grounded answer names the view each object is in (``View 2: ...``,
`grounding.format_view`), one view marker per object, on that view's own 0..1000 grid.
"""

from __future__ import annotations

import math
import numbers
import os
import random
import re
from pathlib import Path
from typing import Sequence

import numpy as np

from ..answers import grounding
from ..prompts import EXAM_TEMPLATES, TASKS, TEMPLATES, build_exam_text, build_user_text
from .manifest import (MIN_EXAM_VIEWS, Conversation, ManifestObject, Record, object_box, read_manifest, rebase,
                       write_manifest)

__all__ = [
    "ConversationError",
    "SITE_ANATOMY",
    "FOREIGN_ANATOMY",
    "REFUSAL_ANSWERS",
    "build_conversations",
    "build_exam_conversations",
    "attach_conversations",
]

#: Structures a scan of each site may show: never asked about as "absent" for that site.
SITE_ANATOMY: dict[str, tuple[str, ...]] = {
    "breast": ("breast", "breast lesion", "cyst", "mass", "pectoralis muscle", "skin", "fat"),
    "thyroid": ("thyroid", "thyroid nodule", "cyst", "nodule", "trachea", "carotid artery", "strap muscle"),
    "kidney": ("kidney", "liver", "renal sinus", "renal cortex", "renal pyramid", "hepatic vessel"),
    "fetal_head": ("fetal head", "skull", "thalamus", "midline echo", "cavum septi pellucidi", "uterus"),
}
#: Structures to ask about in a site whose SITE_ANATOMY does not list them.
FOREIGN_ANATOMY: tuple[str, ...] = (
    "left ventricle", "mitral valve", "aortic valve", "gallbladder", "spleen", "urinary bladder", "prostate",
    "ovary", "fetal heart", "fetal femur", "kidney", "liver", "thyroid", "trachea", "carotid artery",
    "fetal head", "breast lesion", "thyroid nodule", "appendix", "pancreas",
)
#: Refusals for an absent target; each contains a phrase of metrics.REFUSAL_PHRASES (tests check this).
REFUSAL_ANSWERS: tuple[str, ...] = (
    "The {target} is not visible in this {site} ultrasound image.",
    "This {site} ultrasound image does not show the {target}.",
    "I cannot find the {target}: this is a {site} ultrasound image.",
    "The {target} is not present in this {site} ultrasound image, so it cannot be located.",
)
_REFUSAL_TASKS = ("segment", "detect", "ask")
_REFUSAL_QUESTIONS = (
    "Where is the {target} in this image?",
    "Can you show me the {target}?",
    "Is the {target} normal in this scan?",
)
_SITE_QUESTIONS = ("What site does this ultrasound image show?", "Which organ is imaged here?",
                   "What body region was scanned?")
_MEASURE_QUESTIONS = ("What is the {name} in millimetres?", "How large is the {name}?",
                      "Give the {name} in mm.")
_FINDING_RE = re.compile(r"Finding:\s*(.+?)\.(?:\s+(?=[A-Z][A-Za-z ]*:)|\s*$)", re.S)


class ConversationError(ValueError):
    """Bad arguments to the conversation builder; the message names the argument and the problem."""


# ------------------------------------------------------------------------------------------- helpers

def _site_words(site: str | None) -> str:
    return "" if site is None else site.replace("_", " ")


def _variant(task: str, rng: random.Random) -> int:
    return rng.randrange(len(TEMPLATES[task].variants))


def _conversation(task: str, user: str, answer: str, mask_objects: Sequence[int] = ()) -> Conversation:
    return Conversation(task, [{"role": "user", "content": user}, {"role": "assistant", "content": answer}],
                        list(mask_objects))


def _by_label(objects: Sequence[ManifestObject], keep) -> dict[str, list[int]]:
    """Object indices grouped by label, in order of first appearance, for objects where keep(obj)."""
    groups: dict[str, list[int]] = {}
    for i, obj in enumerate(objects):
        if keep(obj):
            groups.setdefault(obj.label, []).append(i)
    return groups


def _finding(report: str | None) -> str | None:
    """The report's "Finding:" sentence, the cues a diagnosis rests on."""
    if not report:
        return None
    m = _FINDING_RE.search(report)
    if not m:
        return None
    text = " ".join(m.group(1).split())
    return text[:1].upper() + text[1:] + "."


def _diagnosis_answer(diagnosis: str, report: str | None) -> str:
    """"Malignant." and the report's finding as the cues it rests on, for an image's and an examination's
    diagnose conversation alike."""
    cues = _finding(report)
    return diagnosis.strip().rstrip(".").capitalize() + "." + (f" {cues}" if cues else "")


def _measurement_asks(measurements: dict[str, float], rng: random.Random) -> list[tuple[str, str]]:
    """A question and its answer per measurement, the unit kept out of the quantity's name ("HC (mm)" asks for
    the HC), for an image's and an examination's ask conversation alike; one `rng.choice` each, in order."""
    out = []
    for name, value in measurements.items():
        quantity = re.sub(r"\s*\(?mm\)?$", "", name).strip() or name
        out.append((rng.choice(_MEASURE_QUESTIONS).format(name=quantity), f"The {quantity} is {float(value):.1f} mm."))
    return out


# ------------------------------------------------------------------------------------- per task

def _segment(rec: Record, rng: random.Random) -> list[Conversation]:
    out = []
    for label, idx in _by_label(rec.annotations.objects, lambda o: o.mask is not None).items():
        user = build_user_text("segment", label, variant=_variant("segment", rng))
        out.append(_conversation("segment", user, " ".join(grounding.format_mask(label) for _ in idx), idx))
    return out


def _detect(rec: Record, w: int, h: int, rng: random.Random) -> list[Conversation]:
    out = []
    for label, idx in _by_label(rec.annotations.objects, lambda o: o.box is not None).items():
        boxes = [grounding.box_to_grid(*rec.annotations.objects[i].box, w, h) for i in idx]  # type: ignore[misc]
        user = build_user_text("detect", label, variant=_variant("detect", rng))
        out.append(_conversation("detect", user, " ".join(grounding.format_box(b, label) for b in boxes)))
    return out


def _keypoints(rec: Record, w: int, h: int, rng: random.Random) -> list[Conversation]:
    out = []
    for obj in rec.annotations.objects:
        if not obj.keypoints:
            continue
        answer = " ".join(grounding.format_point(grounding.point_to_grid(*k.xy, w, h), k.name)
                          for k in obj.keypoints)
        out.append(_conversation("keypoints", build_user_text("keypoints", obj.label,
                                                              variant=_variant("keypoints", rng)), answer))
    return out


def _measure(rec: Record, w: int, h: int, rng: random.Random) -> list[Conversation]:
    out = []
    for obj in rec.annotations.objects:
        for line in obj.lines:
            answer = grounding.format_line(grounding.line_to_grid(*line.xy, w, h), line.name)
            if line.length_mm is not None:
                answer += f" Length: {line.length_mm:.1f} mm."
            out.append(_conversation("measure", build_user_text("measure", line.name,
                                                                variant=_variant("measure", rng)), answer))
    return out


def _diagnose(rec: Record, rng: random.Random) -> list[Conversation]:
    ann = rec.annotations
    diagnosis = ann.diagnosis or next((o.diagnosis for o in ann.objects if o.diagnosis), None)
    if diagnosis is None:
        return []
    answer = _diagnosis_answer(diagnosis, ann.report)
    return [_conversation("diagnose", build_user_text("diagnose", variant=_variant("diagnose", rng)), answer)]


def _report(rec: Record, rng: random.Random) -> list[Conversation]:
    report = rec.annotations.report
    if not report or not report.strip():
        return []
    return [_conversation("report", build_user_text("report", variant=_variant("report", rng)), report.strip())]


def _ask(rec: Record, rng: random.Random) -> list[Conversation]:
    """One factual question the annotations answer: the site, or one measurement."""
    options = []
    if rec.site:
        options.append((rng.choice(_SITE_QUESTIONS), f"This is a {_site_words(rec.site)} ultrasound image."))
    options += _measurement_asks(rec.annotations.measurements, rng)
    if not options:
        return []
    question, answer = options[rng.randrange(len(options))]
    return [_conversation("ask", build_user_text("ask", question), answer)]


def _inside_points(mask: np.ndarray, n: int, rng: random.Random) -> list[tuple[int, int]]:
    """Up to n (x, y) pixels of the mask, preferring ones away from the border (a user clicks inside)."""
    ys, xs = np.nonzero(mask)
    if len(xs) == 0:
        return []
    cy, cx = ys.mean(), xs.mean()
    spread = max(float(np.sqrt(((ys - cy) ** 2 + (xs - cx) ** 2).mean())), 1.0)
    near = np.flatnonzero(np.hypot(ys - cy, xs - cx) <= 0.7 * spread)
    pool = near if len(near) else np.arange(len(xs))
    picks = [int(pool[rng.randrange(len(pool))]) for _ in range(n)]
    return [(int(xs[i]), int(ys[i])) for i in dict.fromkeys(picks)]


def _outside_points(mask: np.ndarray, box: tuple[float, float, float, float], n: int,
                    rng: random.Random) -> list[tuple[int, int]]:
    """Up to n pixels outside the mask but near it (in the box grown by half its size)."""
    h, w = mask.shape
    x1, y1, x2, y2 = box
    gx, gy = 0.5 * (x2 - x1 + 1), 0.5 * (y2 - y1 + 1)
    xa, xb = max(0, int(x1 - gx)), min(w, int(math.ceil(x2 + gx)) + 1)
    ya, yb = max(0, int(y1 - gy)), min(h, int(math.ceil(y2 + gy)) + 1)
    ys, xs = np.nonzero(~mask[ya:yb, xa:xb])
    if len(xs) == 0:
        return []
    picks = [rng.randrange(len(xs)) for _ in range(n)]
    return [(int(xs[i]) + xa, int(ys[i]) + ya) for i in dict.fromkeys(picks)]


def _interactive(rec: Record, w: int, h: int, rng: random.Random,
                 masks: Sequence[np.ndarray | None]) -> list[Conversation]:
    """A box or clicks inside one object -> that object's mask (the DEEPGROW path)."""
    objects = rec.annotations.objects
    candidates = [i for i, o in enumerate(objects) if o.mask is not None and masks[i] is not None
                  and masks[i].any()]
    if not candidates:
        return []
    i = candidates[rng.randrange(len(candidates))]
    obj, mask = objects[i], np.asarray(masks[i], dtype=bool)
    if mask.shape != (h, w):
        raise ConversationError(f"record {rec.id!r}: mask of object {i} is {mask.shape}, image is {(h, w)}")
    box = object_box(obj, mask)
    if box is None:
        return []
    prompt = obj.label if rng.random() < 0.5 else None
    variant = _variant("segment", rng)
    if rng.random() < 0.5:
        x1, y1, x2, y2 = box
        jx, jy = 0.05 * (x2 - x1 + 1), 0.05 * (y2 - y1 + 1)  # a hand-drawn ROI is a little loose or tight
        jitter = [rng.uniform(-1, 1) for _ in range(4)]
        grid_box = grounding.box_to_grid(
            min(max(x1 + jitter[0] * jx, 0), w), min(max(y1 + jitter[1] * jy, 0), h),
            min(max(x2 + jitter[2] * jx, 0), w), min(max(y2 + jitter[3] * jy, 0), h), w, h)
        user = build_user_text("segment", prompt, box=grid_box, variant=variant)
    else:
        pos = _inside_points(mask, rng.randint(1, 3), rng)
        neg = _outside_points(mask, box, rng.randint(0, 2), rng)
        points = [grounding.point_to_grid(x, y, w, h) for x, y in pos + neg]
        labels = [1] * len(pos) + [0] * len(neg)
        user = build_user_text("segment", prompt, points=points, labels=labels, variant=variant)
    return [_conversation("segment", user, grounding.format_mask(obj.label), [i])]


def _absent_targets(rec: Record) -> list[str]:
    site = rec.site
    if site not in SITE_ANATOMY:
        return []  # for an unknown site nothing is known to be absent
    present = set(SITE_ANATOMY[site]) | {o.label for o in rec.annotations.objects}
    return [t for t in FOREIGN_ANATOMY if t not in present]


def _refusal(rec: Record, rng: random.Random, tasks: Sequence[str]) -> list[Conversation]:
    targets = _absent_targets(rec)
    usable = [t for t in _REFUSAL_TASKS if t in tasks]
    if not targets or not usable:
        return []
    target, task = rng.choice(targets), rng.choice(usable)
    if task == "ask":
        user = build_user_text("ask", rng.choice(_REFUSAL_QUESTIONS).format(target=target))
    else:
        user = build_user_text(task, target, variant=_variant(task, rng))
    answer = rng.choice(REFUSAL_ANSWERS).format(target=target, site=_site_words(rec.site))
    return [_conversation(task, user, answer)]


# ------------------------------------------------------------------------------------------- public

def _check_tasks(tasks: Sequence[str] | None) -> tuple[str, ...]:
    if tasks is None:
        return TASKS
    if isinstance(tasks, str):
        tasks = (tasks,)
    tasks = tuple(tasks)
    bad = [t for t in tasks if t not in TASKS]
    if bad:
        raise ConversationError(f"tasks {bad!r} are not known; valid tasks: {', '.join(TASKS)}")
    if not tasks:
        raise ConversationError("tasks must not be empty")
    return tasks


def _check_size(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value <= 0:
        raise ConversationError(f"{what} must be a positive int (pixels), got {value!r}")
    return int(value)


def build_conversations(
    record: Record,
    width: int,
    height: int,
    rng: random.Random,
    tasks: Sequence[str] | None = None,
    refusal_rate: float = 0.15,
    masks: Sequence[np.ndarray | None] | None = None,
) -> list[Conversation]:
    """All training conversations the record's annotations support, for the chosen tasks.

    `masks` (one array or None per object) is needed only for the interactive click samples; when it is
    None and segment is asked for, the record's masks are loaded from disk.
    """
    if not isinstance(record, Record):
        raise ConversationError(f"record must be a Record, got {type(record).__name__}")
    w, h = _check_size(width, "width"), _check_size(height, "height")
    if not isinstance(rng, random.Random):
        raise ConversationError(f"rng must be a random.Random, got {type(rng).__name__}")
    tasks = _check_tasks(tasks)
    if isinstance(refusal_rate, bool) or not isinstance(refusal_rate, numbers.Real) or not (
            0.0 <= float(refusal_rate) <= 1.0):
        raise ConversationError(f"refusal_rate must be a number in [0, 1], got {refusal_rate!r}")
    out: list[Conversation] = []
    if "segment" in tasks:
        out += _segment(record, rng)
        if any(o.mask is not None for o in record.annotations.objects):
            if masks is None:
                masks = record.load_masks()
            if len(masks) != len(record.annotations.objects):
                raise ConversationError(f"record {record.id!r}: {len(masks)} masks for "
                                        f"{len(record.annotations.objects)} objects")
            out += _interactive(record, w, h, rng, masks)
    if "detect" in tasks:
        out += _detect(record, w, h, rng)
    if "keypoints" in tasks:
        out += _keypoints(record, w, h, rng)
    if "measure" in tasks:
        out += _measure(record, w, h, rng)
    if "diagnose" in tasks:
        out += _diagnose(record, rng)
    if "report" in tasks:
        out += _report(record, rng)
    if "ask" in tasks:
        out += _ask(record, rng)
    if rng.random() < float(refusal_rate):
        out += _refusal(record, rng, tasks)
    return out


def _kind(record) -> str:
    return f"one of {len(record.views)} views" if isinstance(record, Record) else type(record).__name__


def _image_size(record: Record) -> tuple[int, int]:
    from PIL import Image

    with Image.open(record.image_path) as im:
        return im.size


def record_conversations(record: Record, rng: random.Random, tasks: Sequence[str] | None = None,
                         refusal_rate: float = 0.15) -> list[Conversation]:
    """Every training conversation a record supports, read at its views' sizes: a record of one view gets the
    single-image conversations (refusals and clicks included), a record of several the examination's."""
    sizes = [_image_size(view) for view in record.view_records()]
    if len(sizes) == 1:
        return build_conversations(record, *sizes[0], rng, tasks, refusal_rate)
    return build_exam_conversations(record, sizes, rng, tasks)


def attach_conversations(
    manifest_in: str | os.PathLike,
    manifest_out: str | os.PathLike,
    seed: int = 0,
    tasks: Sequence[str] | None = None,
    refusal_rate: float = 0.15,
) -> Path:
    """Fill every record's conversations (replacing old ones) and write the manifest atomically.

    Each record draws from its own generator seeded by (seed, record id), so a record's conversations do
    not change when others are added or reordered. Paths are rewritten when the output lives elsewhere.
    Each record gets `record_conversations` (examinations: no refusals or interactive samples yet).
    """
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
        raise ConversationError(f"seed must be an int, got {seed!r}")
    tasks = _check_tasks(tasks)
    records = read_manifest(manifest_in)
    out_path = Path(manifest_out)
    for rec in records:
        rng = random.Random(f"umind-conversations:{int(seed)}:{rec.id}")
        rec.conversations = record_conversations(rec, rng, tasks, refusal_rate)
        rebase(rec, out_path.parent)
    return write_manifest(records, out_path)


# ------------------------------------------------------------------------------------------- examinations

def _exam_conversation(task: str, user: str, answer: str, marks: Sequence[tuple[int, int]] = ()) -> Conversation:
    return Conversation(task, [{"role": "user", "content": user}, {"role": "assistant", "content": answer}],
                        [k for _, k in marks], [v for v, _ in marks])


def _exam_variant(task: str, rng: random.Random) -> int:
    return rng.randrange(len(EXAM_TEMPLATES[task]))


def _in_views(exam: Record, keep) -> dict[str, list[tuple[int, int]]]:
    """(view, object) pairs grouped by object label in order of first appearance, for objects where keep(obj)."""
    groups: dict[str, list[tuple[int, int]]] = {}
    for v, view in enumerate(exam.views):
        for k, obj in enumerate(view.annotations.objects):
            if keep(obj):
                groups.setdefault(obj.label, []).append((v, k))
    return groups


def _marked(view: int, text: str) -> str:
    return f"{grounding.format_view(view + 1)} {text}"


def _exam_grounded(exam: Record, sizes: Sequence[tuple[int, int]], rng: random.Random,
                   tasks: Sequence[str]) -> list[Conversation]:
    """segment, detect and keypoints per label, measure per caliper name: every view that shows it, marked."""
    out = []
    objects = lambda v, k: exam.views[v].annotations.objects[k]  # noqa: E731
    if "segment" in tasks:
        for label, marks in _in_views(exam, lambda o: o.mask is not None).items():
            answer = " ".join(_marked(v, grounding.format_mask(label)) for v, _ in marks)
            user = build_exam_text("segment", label, _exam_variant("segment", rng))
            out.append(_exam_conversation("segment", user, answer, marks))
    if "detect" in tasks:
        for label, marks in _in_views(exam, lambda o: o.box is not None).items():
            answer = " ".join(_marked(v, grounding.format_box(grounding.box_to_grid(*objects(v, k).box, *sizes[v]),
                                                              label)) for v, k in marks)
            out.append(_exam_conversation("detect", build_exam_text("detect", label, _exam_variant("detect", rng)),
                                          answer))
    if "keypoints" in tasks:
        for label, marks in _in_views(exam, lambda o: bool(o.keypoints)).items():
            answer = " ".join(_marked(v, " ".join(grounding.format_point(grounding.point_to_grid(*kp.xy, *sizes[v]),
                                                                         kp.name) for kp in objects(v, k).keypoints))
                              for v, k in marks)
            user = build_exam_text("keypoints", label, _exam_variant("keypoints", rng))
            out.append(_exam_conversation("keypoints", user, answer))
    if "measure" in tasks:
        out += _exam_measure(exam, sizes, rng)
    return out


def _exam_measure(exam: Record, sizes: Sequence[tuple[int, int]], rng: random.Random) -> list[Conversation]:
    lines: dict[str, list[tuple[int, object]]] = {}
    for v, view in enumerate(exam.views):
        for obj in view.annotations.objects:
            for line in obj.lines:
                lines.setdefault(line.name, []).append((v, line))
    out = []
    for name, found in lines.items():
        parts = []
        for v, line in found:
            text = grounding.format_line(grounding.line_to_grid(*line.xy, *sizes[v]), name)
            parts.append(_marked(v, text + ("" if line.length_mm is None else f" Length: {line.length_mm:.1f} mm.")))
        out.append(_exam_conversation("measure", build_exam_text("measure", name, _exam_variant("measure", rng)),
                                      " ".join(parts)))
    return out


def _exam_text(exam: Record, rng: random.Random, tasks: Sequence[str]) -> list[Conversation]:
    """diagnose (the exam's finding and its cues), report (the exam's), ask (its site or one measurement)."""
    ann, out = exam.annotations, []
    diagnosis = ann.diagnosis or next((o.diagnosis for v in exam.views for o in v.annotations.objects
                                       if o.diagnosis), None)
    if "diagnose" in tasks and diagnosis is not None:
        answer = _diagnosis_answer(diagnosis, ann.report)
        out.append(_exam_conversation("diagnose", build_exam_text("diagnose", None, _exam_variant("diagnose", rng)),
                                      answer))
    if "report" in tasks and ann.report and ann.report.strip():
        out.append(_exam_conversation("report", build_exam_text("report", None, _exam_variant("report", rng)),
                                      ann.report.strip()))
    if "ask" in tasks:
        options = [("What site does this ultrasound examination show?",
                    f"This is a {_site_words(exam.site)} ultrasound examination.")] if exam.site else []
        options += _measurement_asks(ann.measurements, rng)
        if options:
            question, answer = options[rng.randrange(len(options))]
            out.append(_exam_conversation("ask", build_exam_text("ask", question), answer))
    return out


def build_exam_conversations(exam: Record, sizes: Sequence[tuple[int, int]], rng: random.Random,
                             tasks: Sequence[str] | None = None) -> list[Conversation]:
    """All training conversations an examination's annotations support: one user turn that sees every view,
    then the question; grounded answers name the view of each object. `sizes` is (width, height) per view."""
    if not isinstance(exam, Record) or len(exam.views) < MIN_EXAM_VIEWS:
        raise ConversationError(f"exam must be a manifest Record of several views, got {_kind(exam)}")
    if len(sizes) != len(exam.views):
        raise ConversationError(f"exam {exam.id!r}: {len(sizes)} sizes for {len(exam.views)} views")
    sizes = [(_check_size(w, "width"), _check_size(h, "height")) for w, h in sizes]
    if not isinstance(rng, random.Random):
        raise ConversationError(f"rng must be a random.Random, got {type(rng).__name__}")
    tasks = _check_tasks(tasks)
    return _exam_grounded(exam, sizes, rng, tasks) + _exam_text(exam, rng, tasks)
