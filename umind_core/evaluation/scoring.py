"""Per-sample scoring: what to ask about each record (`build_queries`) and one sample from an answer (`score`).

The pure steps of the evaluation, below the loop that runs a model (`runner`) and the examination scorers
(`exams`, `exam_objects`), which all score with these rules: a view of an examination is asked and scored exactly
as a single image is, so the two numbers mean the same thing. Kept apart from `runner` so that the examination
modules import them from below instead of from the module that calls them (an import cycle before). The matching
rules are `runner`'s module docstring.
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..answers.findings import SCORED_FINDINGS, answer_finding
from ..imageio import line_length
from ..answers.landmarks import RECORD_MEASUREMENTS, ellipse_perimeter
from . import metrics as M

__all__ = [
    "CHUNK_RECORDS",
    "DIAGNOSIS_LABELS",
    "detection_section",
    "diagnosis_section",
    "measurement_kind",
    "measurement_section",
    "EVAL_TASKS",
    "IOU_THRESHOLD",
    "SPATIAL_TASKS",
    "EvalError",
    "Query",
    "build_queries",
    "keypoint_section",
    "match_keypoints",
    "parse_diagnosis",
    "score",
]

EVAL_TASKS: tuple[str, ...] = ("segment", "detect", "keypoints", "measure", "diagnose", "refusal")
SPATIAL_TASKS: tuple[str, ...] = ("segment", "detect", "keypoints", "measure")
DIAGNOSIS_LABELS: tuple[str, ...] = SCORED_FINDINGS  # the finding list's scored classes (umind_core.answers.findings)
IOU_THRESHOLD = 0.5
#: Refusal questions use the templates the conversation builder trains refusals with (segment, detect, ask).
REFUSAL_TASKS: tuple[str, ...] = ("segment", "detect", "ask")
REFUSAL_QUESTION = "Where is the {target} in this image?"
SITE_QUESTION = "What site does this ultrasound image show?"
#: records whose images are held in memory at once (the single-image and examination scorers alike)
CHUNK_RECORDS = 64
_MM_RE = re.compile(r"([-+]?\d+(?:\.\d+)?)\s*mm\b", re.I)


class EvalError(ValueError):
    """Bad arguments to the evaluation, or a prediction that cannot be scored; the message names it."""


@dataclass(frozen=True)
class Query:
    """One question about one record.

    `task` is the evaluation task (one of EVAL_TASKS); `predict_task` is the Predictor task that asks it (refusal
    questions are asked as segment, detect or ask). `target` holds what the truth is looked up by: "objects"
    (indices into the record's annotations.objects), "line", "diagnosis", "target", "should_refuse".
    """

    record: int
    task: str
    predict_task: str
    prompt: str | None
    target: dict = field(default_factory=dict)

    @property
    def key(self) -> tuple[int, str, str | None]:
        """Queries with the same key share one prediction."""
        return self.record, self.predict_task, self.prompt



# ------------------------------------------------------------------------------------------------ queries

def _check_tasks(tasks: Sequence[str] | str | None, allowed: tuple[str, ...] = EVAL_TASKS) -> tuple[str, ...]:
    if tasks is None:
        return allowed
    if isinstance(tasks, str):
        tasks = [t.strip() for t in tasks.split(",") if t.strip()]
    tasks = tuple(dict.fromkeys(tasks))
    if not tasks:
        raise EvalError(f"tasks must not be empty; choose from {', '.join(allowed)}")
    bad = [t for t in tasks if t not in allowed]
    if bad:
        raise EvalError(f"tasks {bad} are not evaluation tasks; choose from {', '.join(allowed)}")
    return tasks


def _by_label(objects, keep) -> dict[str, list[int]]:
    groups: dict[str, list[int]] = {}
    for i, obj in enumerate(objects):
        if keep(obj):
            groups.setdefault(obj.label, []).append(i)
    return groups


def _record_diagnosis(rec) -> str | None:
    ann = rec.annotations
    return ann.diagnosis or next((o.diagnosis for o in ann.objects if o.diagnosis), None)


def _refusal_queries(i: int, rec) -> list[Query]:
    from ..data.conversations import FOREIGN_ANATOMY, SITE_ANATOMY

    if rec.site not in SITE_ANATOMY:
        return []  # for an unknown site nothing is known to be absent
    labels = [o.label for o in rec.annotations.objects]
    present = set(SITE_ANATOMY[rec.site]) | set(labels)
    absent = [t for t in FOREIGN_ANATOMY if t not in present]
    if not absent:
        return []
    rng = random.Random(f"umind-eval-refusal:{rec.id}")  # stable per record, whatever else is in the set
    target = absent[rng.randrange(len(absent))]
    task = REFUSAL_TASKS[rng.randrange(len(REFUSAL_TASKS))]
    if task == "ask" or not labels:
        task = "ask"
        out_prompt, in_prompt, in_target = REFUSAL_QUESTION.format(target=target), SITE_QUESTION, rec.site
    else:
        out_prompt, in_prompt, in_target = target, labels[0], labels[0]
    return [Query(i, "refusal", task, out_prompt, {"target": target, "should_refuse": True}),
            Query(i, "refusal", task, in_prompt, {"target": in_target, "should_refuse": False})]


def build_queries(records: Sequence, tasks: Sequence[str] | str | None = None) -> list[Query]:
    """Every question the records' annotations can score, in record order then task order."""
    tasks = _check_tasks(tasks)
    out: list[Query] = []
    for i, rec in enumerate(records):
        objects = rec.annotations.objects
        if "segment" in tasks:
            for label, idx in _by_label(objects, lambda o: o.mask is not None).items():
                out.append(Query(i, "segment", "segment", label, {"objects": idx}))
        if "detect" in tasks:
            for label, idx in _by_label(objects, lambda o: o.box is not None).items():
                out.append(Query(i, "detect", "detect", label, {"objects": idx}))
        if "keypoints" in tasks:
            for j, obj in enumerate(objects):
                if obj.keypoints:
                    out.append(Query(i, "keypoints", "keypoints", obj.label, {"objects": [j]}))
        if "measure" in tasks:
            for j, obj in enumerate(objects):
                for k, line in enumerate(obj.lines):
                    if line.length_mm is not None and line.length_mm > 0:
                        out.append(Query(i, "measure", "measure", line.name, {"objects": [j], "line": k}))
            for key, name in RECORD_MEASUREMENTS.items():
                value = rec.annotations.measurements.get(key)
                if value is not None and value > 0:
                    out.append(Query(i, "measure", "measure", name, {"measurement": key}))
        if "diagnose" in tasks:
            diagnosis = _record_diagnosis(rec)
            if diagnosis is not None and diagnosis.strip().lower() in DIAGNOSIS_LABELS:
                out.append(Query(i, "diagnose", "diagnose", None, {"diagnosis": diagnosis.strip().lower()}))
        if "refusal" in tasks:
            out += _refusal_queries(i, rec)
    return out


# ------------------------------------------------------------------------------------------------ scoring

def parse_diagnosis(text: str) -> str | None:
    """The class a diagnose answer names: `findings.answer_finding`, the one reading the server shares (two
    readers once disagreed: "Benign, not malignant." was malignant to the server and benign here)."""
    return answer_finding(text)


def match_keypoints(names: Sequence[str], gt_xy: Sequence[Sequence[float]],
                    predicted: Sequence[tuple[str | None, Sequence[float]]]) -> list[tuple[float, float] | None]:
    """For each ground-truth keypoint the predicted point scored against it, or None.

    A predicted point labelled with a landmark's name goes to that landmark; the remaining landmarks take the
    remaining points, closest pairs first, so an unlabelled answer is not punished for the order of its points.
    """
    out: list[tuple[float, float] | None] = [None] * len(names)
    used: set[int] = set()
    for g, name in enumerate(names):
        key = name.strip().lower()
        for p, (label, _) in enumerate(predicted):
            if p not in used and label is not None and label.strip().lower() == key:
                out[g] = (float(predicted[p][1][0]), float(predicted[p][1][1]))
                used.add(p)
                break
    pairs = sorted(
        (math.hypot(float(xy[0]) - float(gt_xy[g][0]), float(xy[1]) - float(gt_xy[g][1])), g, p)
        for g in range(len(names)) if out[g] is None
        for p, (_, xy) in enumerate(predicted) if p not in used)
    for _, g, p in pairs:
        if out[g] is None and p not in used:
            out[g] = (float(predicted[p][1][0]), float(predicted[p][1][1]))
            used.add(p)
    return out


def _text_mm(text: str) -> float | None:
    m = _MM_RE.search(text or "")
    return float(m.group(1)) if m else None


def score(query: Query, result, record, masks: Sequence[np.ndarray | None] | None = None) -> dict:
    """One per-sample record from the model's Result and the ground truth of `record`.

    `masks` are the record's object masks (record.load_masks()); they are loaded here when None and needed.
    Every sample has task, id, site, prompt, text and "score" (higher is better; None when nothing to rank).
    """
    objects = record.annotations.objects
    sample: dict[str, Any] = {"task": query.task, "id": record.id, "site": record.site or "unknown",
                              "predict_task": query.predict_task, "prompt": query.prompt,
                              "text": result.text, "answer": result.answer, "_record": record}
    task = query.task
    if task == "segment":
        if masks is None:
            masks = record.load_masks()
        gts = []
        for k in query.target["objects"]:
            if masks[k] is None:
                raise EvalError(f"record {record.id!r}: object {k} ({objects[k].label!r}) has no mask to score")
            gts.append(np.asarray(masks[k], dtype=bool))
        pred = np.zeros(gts[0].shape, dtype=bool)
        for o in result.objects:
            if o.mask is not None:
                if o.mask.shape != pred.shape:
                    raise EvalError(f"record {record.id!r}: predicted mask has shape {o.mask.shape}, the "
                                    f"ground-truth mask has {pred.shape}")
                pred |= o.mask
        # one IoU per ground-truth object of the label; the sample's score is their mean
        ious = [M.mask_iou(pred, g) for g in gts]
        sample.update(label=query.prompt, objects=list(query.target["objects"]), ious=ious,
                      iou=float(np.mean(ious)), pred_pixels=int(pred.sum()),
                      gt_pixels=[int(g.sum()) for g in gts], score=float(np.mean(ious)),
                      _pred_mask=pred, _gt_masks=gts)
    elif task == "detect":
        if masks is None and any(objects[k].box is None for k in query.target["objects"]):
            masks = record.load_masks()
        from ..data.manifest import object_box

        boxes = [object_box(objects[k], None if masks is None else masks[k]) for k in query.target["objects"]]
        gt = [list(b) for b in boxes if b is not None]
        pred = [list(o.box) for o in result.objects if o.box is not None]
        prf = M.detection_prf([pred], [gt], IOU_THRESHOLD)
        sample.update(label=query.prompt, gt_boxes=gt, pred_boxes=pred, tp=prf["tp"], fp=prf["fp"],
                      fn=prf["fn"], f1=prf["f1"], score=prf["f1"])
    elif task == "keypoints":
        obj = objects[query.target["objects"][0]]
        names = [k.name for k in obj.keypoints]
        gt = [[float(v) for v in k.xy] for k in obj.keypoints]
        predicted = [(o.label, p) for o in result.objects for p in o.points]
        matched = match_keypoints(names, gt, predicted)
        width = _image_width(result, record)
        err = M.keypoint_errors(matched, gt, spacing=record.spacing, image_width=width)
        sample.update(label=query.prompt, names=names, gt_points=gt,
                      pred_points=[None if p is None else list(p) for p in matched],
                      spacing=None if record.spacing is None else list(record.spacing), width=width,
                      errors_px=err["per_point"], errors_mm=err.get("per_point_mm"),
                      mean_px=err["mean_px"], n_missing=err["n_missing"],
                      score=None if err["mean_px"] is None else -err["mean_px"])
    elif task == "measure":
        sample.update(_measure_sample(query, result, record))
    elif task == "diagnose":
        truth = query.target["diagnosis"]
        pred = parse_diagnosis(result.answer)
        sample.update(true=truth, pred=pred, correct=pred == truth, score=float(pred == truth))
    elif task == "refusal":
        refused = M.is_refusal(result.answer)
        should = bool(query.target["should_refuse"])
        sample.update(target=query.target["target"], should_refuse=should, refused=refused,
                      correct=refused == should, score=float(refused == should))
    else:
        raise EvalError(f"query task {task!r} is not one of {EVAL_TASKS}")
    return sample


def _measure_sample(query: Query, result, record) -> dict:
    """A measurement's sample: the truth's line length (or the record's stored measurement, a head circumference)
    against the answer's line (or ellipse perimeter) measured with the record's spacing, else the number its text
    states (its raw answer)."""
    pred_line = next((list(o.line) for o in result.objects if o.line is not None), None)
    pred_ellipse = next((list(o.ellipse) for o in result.objects if o.ellipse is not None), None)
    if "measurement" in query.target:
        gt_mm, gt_line = float(record.annotations.measurements[query.target["measurement"]]), None
        pred_line, source = None, "ellipse"
        pred_mm = None if pred_ellipse is None else ellipse_perimeter(pred_ellipse, record.spacing).mm
    else:
        line = record.annotations.objects[query.target["objects"][0]].lines[query.target["line"]]
        gt_mm, gt_line, pred_ellipse, source = float(line.length_mm), [float(v) for v in line.xy], None, "line"
        # the one length rule: mm from the record's calibrated spacing, None (no mm) without it
        pred_mm = line_length(pred_line, record.spacing).mm if pred_line is not None else None
    if pred_mm is None:  # nothing drawn to measure: score the number the model wrote (its raw answer)
        pred_mm = _text_mm(getattr(result, "raw_answer", "") or result.answer)
        source = "text"
    rel = None if pred_mm is None else M.measurement_error(pred_mm, gt_mm)
    return dict(label=query.prompt, gt_line=gt_line, pred_line=pred_line, pred_ellipse=pred_ellipse, gt_mm=gt_mm,
                pred_mm=pred_mm, pred_source=None if pred_mm is None else source, rel_error=rel,
                abs_error_mm=None if pred_mm is None else abs(pred_mm - gt_mm), score=None if rel is None else -rel)


def _image_width(result, record) -> int:
    if result.image_size is not None:
        return int(result.image_size[0])
    from PIL import Image

    with Image.open(record.image_path) as im:
        return int(im.size[0])


# ---------------------------------------------------------------------------------------------- aggregate

def measurement_kind(line_name: str) -> str:
    """What a measurement line measures, for the per-kind breakdown: a lesion's two calipers are one kind (their
    names carry the lesion's label), every other line its own (kidney length, BPD)."""
    return "lesion calipers" if line_name.endswith((" long axis", " short axis")) else line_name


def detection_section(det: list[dict]) -> dict:
    """Detection precision, recall and F1 at IoU `IOU_THRESHOLD` over the samples' boxes: single images, or an
    examination's (view, target) samples; the one rule both readings are scored by."""
    return {**M.detection_prf([s["pred_boxes"] for s in det], [s["gt_boxes"] for s in det], IOU_THRESHOLD),
            "iou_threshold": IOU_THRESHOLD, "n": len(det)}


def measurement_section(meas: list[dict]) -> dict:
    """Caliper errors over all the samples and per kind (`measurement_kind` of each line's name)."""
    out = M.measurement_errors([s["pred_mm"] for s in meas], [s["gt_mm"] for s in meas])
    kinds: dict[str, list[dict]] = {}
    for s in meas:
        kinds.setdefault(measurement_kind(s["prompt"]), []).append(s)
    out["by_kind"] = {k: M.measurement_errors([s["pred_mm"] for s in v], [s["gt_mm"] for s in v])
                      for k, v in sorted(kinds.items())}
    out["n_samples"] = len(meas)
    return out


def diagnosis_section(dia: list[dict]) -> dict:
    """Classification metrics over `DIAGNOSIS_LABELS`; an unparsed answer stays a string outside the labels, so it
    counts as wrong."""
    return M.classification_metrics([s["true"] for s in dia], [s["pred"] or "unparsed" for s in dia],
                                    DIAGNOSIS_LABELS)


def keypoint_section(kp: list[dict]) -> dict:
    """Keypoint errors in pixels, in % of the image width, and in mm over the samples with a spacing."""
    preds = [p for s in kp for p in s["pred_points"]]
    gts = [g for s in kp for g in s["gt_points"]]
    widths = [s["width"] for s in kp for _ in s["gt_points"]]
    err = M.keypoint_errors(preds, gts, image_width=widths)
    with_sp = [s for s in kp if s.get("spacing") is not None]
    mm = None
    if with_sp:
        mm = M.keypoint_errors([p for s in with_sp for p in s["pred_points"]],
                               [g for s in with_sp for g in s["gt_points"]],
                               spacing=[s["spacing"] for s in with_sp for _ in s["gt_points"]])["mean_mm"]
    return {"mean_px": err["mean_px"], "mean_mm": mm, "mean_rel_width": err["mean_rel_width"],
            "n": err["n"], "n_missing": err["n_missing"], "n_samples": len(kp)}
