"""The objects of an examination's views, scored per view: masks, boxes, landmarks and calipers the model
draws when it reads all views at once, against each view's own truth, beside the same model reading each view alone.

Why per view: an examination's grounded answer names the view every object is in (`View k:`), so a mask is only
right if it is on the right view and right there. Each (view, target) pair is scored exactly as a single image's
query is (`scoring.build_queries` on the view as a record, `scoring.score` on that view's share of the answer,
`exam_views.view_result`), so the exam reading and the single-image numbers mean the same thing:

- "exam": one `predict_exam(task, target)` per target the examination's views show, its objects split by view;
- "view_alone": each view that shows the target asked the single-image prompt on its own (views batched per target).

A view that does not show a target is not scored for it; objects the exam answer places there are counted
(`objects_on_views_without_target`), since a reader would see them as false findings. A caliper is asked once per
examination ("the view that shows it"): it is scored on the view the model drew it in, against that view's caliper
of that name (not drawn: missing, on the first view that has one).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .scoring import build_queries, detection_section, keypoint_section, measurement_section, score

__all__ = ["OBJECT_READINGS", "OBJECT_TASKS", "aggregate_objects", "exam_object_samples", "object_scorable",
           "object_table", "of_reading", "view_alone_samples"]

#: examination tasks scored per view
OBJECT_TASKS: tuple[str, ...] = ("segment", "detect", "keypoints", "measure")
#: the two readings compared
OBJECT_READINGS: tuple[str, ...] = ("exam", "view_alone")


def of_reading(samples: list[dict], task: str, reading: str) -> list[dict]:
    """The samples of one exam task (``exam_<task>``) and one reading."""
    return [s for s in samples if s["task"] == task and s["reading"] == reading]


def _view_queries(exam, task: str) -> list[tuple[int, Any, list]]:
    """(view index, view record, its queries of `task`) for every view."""
    out = []
    for k in range(len(exam.views)):
        record = exam.view_record(k)
        out.append((k, record, build_queries([record], (task,))))
    return out


def object_scorable(exam, task: str) -> bool:
    return any(queries for _, _, queries in _view_queries(exam, task))


def _sample(exam, view: int, reading: str, sample: dict, stray: int | None = None) -> dict:
    sample.update(task=f"exam_{sample['task']}", reading=reading, view=view, exam=exam.id, n_views=len(exam.views))
    if stray is not None:
        sample["objects_on_views_without_target"] = stray
    return sample


def exam_object_samples(predictor, exam, task: str, frames: list) -> list[dict]:
    """The exam reading of `task`: one `predict_exam` per target (the examination set on `predictor` already),
    each view's share scored against that view's truth."""
    from ..exam_views import view_result

    per_view = _view_queries(exam, task)
    labels = sorted({q.prompt for _, _, queries in per_view for q in queries})
    samples = []
    for label in labels:
        result = predictor.predict_exam(task, label)
        showing = [k for k, _, queries in per_view if any(q.prompt == label for q in queries)]
        stray = sum(1 for o in result.objects if o.view is not None and o.view not in showing)
        if task == "measure":  # one caliper per examination, in the view the model chose ("the view that shows it")
            drawn = [o.view for o in result.objects if o.line is not None and o.view in showing]
            showing = drawn[:1] or showing[:1]
        for k, record, queries in per_view:
            if k not in showing:
                continue
            mine = view_result(result, k, frames[k].index, frames[k].size)
            for q in queries:
                if q.prompt == label:  # the target's stray objects counted once, on its first scored view
                    samples.append(_sample(exam, k, "exam", score(q, mine, record), stray))
                    stray = 0
    return samples


def view_alone_samples(predictor, exams_frames: list[tuple[Any, list]], task: str) -> list[dict]:
    """The baseline: every (view, target) of these examinations asked the single-image prompt on the view alone,
    the views of one target batched."""
    todo: dict[str, list[tuple[Any, int, Any, Any, Any]]] = {}
    for exam, frames in exams_frames:
        for k, record, queries in _view_queries(exam, task):
            for q in queries:
                todo.setdefault(q.prompt, []).append((exam, k, record, q, frames[k]))
    samples = []
    for label, items in todo.items():
        results = predictor.predict_batch([frame for *_, frame in items], task, label)
        samples += [_sample(exam, k, "view_alone", score(q, res, record))
                    for (exam, k, record, q, _), res in zip(items, results)]
    return samples


def aggregate_objects(samples: list[dict]) -> tuple[dict, dict]:
    """(per reading: segmentation mIoU over (view, target) samples, detection P/R/F1 at IoU 0.5, keypoint and
    caliper errors as a single image's are aggregated; summary keys)."""
    section: dict[str, Any] = {}
    summary: dict[str, Any] = {}
    for reading in OBJECT_READINGS:
        key = "exam" if reading == "exam" else "exam_view_alone"
        seg, det = of_reading(samples, "exam_segment", reading), of_reading(samples, "exam_detect", reading)
        part: dict[str, Any] = {}
        if seg:
            part["segmentation"] = {"miou": float(np.mean([s["iou"] for s in seg])), "n": len(seg)}
            summary[f"{key}_segmentation_miou"] = part["segmentation"]["miou"]
        if det:
            part["detection"] = detection_section(det)
            summary[f"{key}_detection_f1"] = part["detection"]["f1"]
        kp, meas = of_reading(samples, "exam_keypoints", reading), of_reading(samples, "exam_measure", reading)
        if kp:
            part["keypoints"] = keypoint_section(kp)  # n and n_missing count points, n_samples the samples
            summary[f"{key}_keypoint_error_rel_width"] = part["keypoints"]["mean_rel_width"]
        if meas:
            part["measurement"] = measurement_section(meas)
            summary[f"{key}_measurement_rel_error"] = part["measurement"]["mean_rel"]
        scored = seg + det + kp + meas
        if reading == "exam" and scored:
            part["objects_on_views_without_target"] = sum(s["objects_on_views_without_target"] for s in scored)
        section[reading] = part
    return section, summary


def object_table(section: dict) -> dict[str, dict[str, Any]]:
    """report.md's table: the exam reading and each view alone, side by side (percent)."""
    columns = {"exam": "exam reading (all views)", "view_alone": "each view alone"}

    def pct(v):
        return None if v is None else 100.0 * v

    table: dict[str, dict[str, Any]] = {}
    for reading, column in columns.items():
        part = section.get(reading, {})
        row: dict[str, Any] = {}
        if "segmentation" in part:
            row.update({"Segmentation mIoU (%)": pct(part["segmentation"]["miou"]),
                        "views x targets (segment)": part["segmentation"]["n"]})
        if "detection" in part:
            d = part["detection"]
            row.update({"Detection F1 (%)": pct(d["f1"]), "Detection recall (%)": pct(d["recall"]),
                        "views x targets (detect)": d["n"]})
        if "keypoints" in part:
            row["Keypoint error (% of width)"] = pct(part["keypoints"]["mean_rel_width"])
        if "measurement" in part:
            m = part["measurement"]
            row.update({"Caliper mean relative error (%)": pct(m["mean_rel"]),
                        "calipers drawn": f"{m['n'] - m['n_missing']} of {m['n']}"})
        if "objects_on_views_without_target" in part:
            row["objects on views without the target"] = part["objects_on_views_without_target"]
        if row:
            table[column] = row
    return table
