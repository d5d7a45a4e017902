"""Answers read off the target's mask: a detection's boxes, an organ's landmarks, a lesion's caliper, an organ's
length or a head's ellipse, drawn from the mask the model segments by the rules the truth is drawn with.

Why apart from the Predictor: which prompts are read this way (`mask_reading`) and how a segment answer becomes
boxes, points or lines (`read_off_masks`) are rules about answers, not about running the model; the Predictor asks
for the segment and hands its Result here (as Segment Anything's predictor leaves mask post-processing to its
utilities).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..answers import calipers as caliper_rule
from ..answers import landmarks
from ..answers.results import GroundedObject, Result
from ..imageio import Frame, line_length
from ..masks import drawn_objects, mask_box
from .decode_batch import Row

__all__ = ["mask_reading", "read_off_masks"]


def mask_reading(task: str, prompt: str | None) -> tuple[str | None, str] | None:
    """(what to segment, what to read off its mask: "boxes", "landmarks", an axis or "perimeter") for a prompt whose
    answer can be read off a mask, else None (the model's own tokens answer): a detection, a lesion caliper, an
    organ's landmarks, length or head circumference (`landmarks.ORGANS`, `landmarks.MEASURES`)."""
    if task == "detect":
        return prompt, "boxes"
    if task == "keypoints":
        organ = landmarks.landmark_target(prompt)
        return None if organ is None else (organ, "landmarks")
    if task == "measure":
        return caliper_rule.caliper_target(prompt) or landmarks.measure_target(prompt)
    return None


def read_off_masks(result: Result, row: Row, frames: Sequence[Frame]) -> None:
    """Turn the target's segment answer into the boxes, landmarks or caliper `row` asked for, in place, and measure
    them; `frames` are the image's one frame or an examination's views.

    Why: on 200 held-out images of each look the boxes and lesion lines demo model 3 writes as coordinates were
    looser than its masks: detection F1 0.857 and 0.802 (default look, `scanner_b`) against 0.950 and 0.893 with
    boxes read off its masks, lesion calipers 25.6% and 29.9% off against 18.4% and 19.1%; the truth's boxes and
    calipers are drawn from masks by the same rules (benchmarks/results/NOTES.md). Where the model refuses the target
    (its answer says it is not there), nothing is drawn and its answer stands."""
    drawn = [o for o in result.objects if o.mask is not None and o.mask.any()]
    if result.objects and not drawn:  # it named the target but drew no pixel of it: nothing to show
        result.raw_answer = ""
        result.warnings.append(f"nothing found: the model's answer for {row.prompt or row.task!r} holds no mask "
                               "pixels to read boxes, landmarks or calipers off")
    if row.readout == "boxes":
        result.objects = _boxes(drawn, row)
    elif row.readout == "landmarks":
        result.objects = _landmarks(result, drawn, row)
    else:
        result.objects = _caliper(result, drawn, row, frames) if drawn else []
    if result.views:
        result.attach_views(frames)
    else:
        result.attach_geometry(frames[0])


def _per_view(drawn: list[GroundedObject]) -> list[tuple[int | None, list[GroundedObject], np.ndarray, float | None]]:
    """(view, its objects, the union of their masks, their mean score) for each view the drawn masks are in, in the
    answer's order (one entry, view None, for a single image)."""
    by_view: dict[int | None, list[GroundedObject]] = {}
    for o in drawn:
        by_view.setdefault(o.view, []).append(o)
    out = []
    for view, objs in by_view.items():
        scores = [o.score for o in objs if o.score is not None]
        out.append((view, objs, np.logical_or.reduce([o.mask for o in objs]),
                    float(np.mean(scores)) if scores else None))
    return out


def _boxes(drawn: list[GroundedObject], row: Row) -> list[GroundedObject]:
    """A box per object of the drawn masks (`masks.drawn_objects`: each lesion, one organ), view by view."""
    out = []
    for view, objs, mask, score in _per_view(drawn):
        label = objs[0].label or row.prompt or "lesion"
        out += [GroundedObject(label=label, box=mask_box(piece), score=score, view=view)
                for piece in drawn_objects(mask, label)]
    return out


def _landmarks(result: Result, drawn: list[GroundedObject], row: Row) -> list[GroundedObject]:
    """The organ's two landmarks (`landmarks.organ_landmarks`), one object per point as the model writes them, in
    each view whose mask shows the organ; the answer names them (and the view)."""
    out, said = [], []
    for view, _, mask, score in _per_view(drawn):
        points = landmarks.organ_landmarks(row.prompt, mask)
        out += [GroundedObject(label=name, points=[xy], score=score, view=view) for name, xy in points]
        said.append(("" if view is None else f"View {view + 1}: ") + ", ".join(name for name, _ in points))
    result.raw_answer = "; ".join(said)
    return out


def _caliper(result: Result, drawn: list[GroundedObject], row: Row, frames: Sequence[Frame]) -> list[GroundedObject]:
    """The asked axis of the lesion (`calipers.mask_axes`) or of the organ (`landmarks.ellipse_axes`: a kidney's
    length, a BPD, an OFD; its ellipse for a head circumference, measured by its perimeter) with its mask, in the view
    where its long axis is longest in mm (the view a sonographer measures it in); the answer names the caliper (and
    the view)."""
    calibrated = all(f.spacing is not None for f in frames)  # views compare in mm, else all in pixels

    def spacing(o: GroundedObject):
        return frames[o.view or 0].spacing if calibrated else None

    def axes_of(o: GroundedObject):  # an organ's ellipse is fitted in mm, where its axes are perpendicular
        return landmarks.ellipse_axes(o.mask, spacing(o)) if landmarks.measure_target(row.prompt) \
            else caliper_rule.mask_axes(o.mask)

    lesion, axes = max(((o, axes_of(o)) for o in drawn), key=lambda found: line_length(
        found[1][0], spacing(found[0])).value)  # the long axis
    where = "" if lesion.view is None else f"View {lesion.view + 1}: "  # an exam answer names its view
    result.raw_answer = f"{where}{row.prompt or ''}"
    if row.readout == landmarks.PERIMETER:
        return [GroundedObject(label=row.prompt, ellipse=(*axes[0], *axes[1]), mask=lesion.mask, score=lesion.score,
                               view=lesion.view)]
    line = axes[caliper_rule.AXES[row.readout]]
    return [GroundedObject(label=row.prompt, line=line, mask=lesion.mask, score=lesion.score, view=lesion.view)]
