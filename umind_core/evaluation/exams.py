"""Examination-level evaluation: several views of one patient read as one exam, scored at the exam level.

An examination (a manifest line with ``images``) is not a batch of single images: the model reads every
view in one prompt (`Predictor.set_exam` once, then `predict_exam` per task), and the answer is scored against the
examination's own truth, not any one view's. This module owns that reading and its rules, apart from the
single-image path in `runner`:

- finding accuracy per exam (`score_exam`, task "diagnose"): the answer's class against the exam's finding,
  benign vs malignant as for one image (`scoring.parse_diagnosis`, `scoring.DIAGNOSIS_LABELS`);
- size error against the exam truth (task "report"): the sizes the answer states, read off its text by
  `parse_report_sizes`, against the exam's measurements that its own report states (`exam_truth_sizes`); a size
  the answer does not state is missing, not an error;
- BLEU-4 as U2-Bench computes it (pycocoevalcap's corpus BLEU-4, `u2bench.bleu4`) against the exam's report,
  beside the lenient BLEU of `_bleu.py`;
- the single-best-view comparison: beside each exam reading the same model reads the single best view alone
  (`best_view`, `BEST_VIEW_RULE`: the view a sonographer reports a lesion from, its long-axis plane) with the
  single-image prompt, so the report sets "exam reading vs single best view" side by side.

`runner` calls in here: `evaluate` hands examinations to `evaluate_exams` (after `exam_scorable`), `aggregate`
adds the "exam" section from `aggregate_exams`, `summary_table` its tables from `exam_tables`, and `write_eval`
its note (`EXAM_NOTE`). The objects of an examination's views (segment, detect) are scored per view by
`exam_objects`, which this module calls for those tasks.
"""

from __future__ import annotations

import math
import re
from typing import Any

import numpy as np

from . import metrics as M
from .exam_objects import (OBJECT_TASKS, aggregate_objects, exam_object_samples, object_scorable, object_table,
                           of_reading, view_alone_samples)
from .scoring import CHUNK_RECORDS, DIAGNOSIS_LABELS, EvalError, diagnosis_section, parse_diagnosis

__all__ = [
    "EXAM_TASKS",
    "READINGS",
    "BEST_VIEW_RULE",
    "parse_report_sizes",
    "exam_truth_sizes",
    "best_view",
    "exam_frames",
    "score_exam",
]

#: What an examination is scored on (`umind eval --tasks`); "report" is asked of examinations only; segment, detect,
#: keypoints and measure are scored per view (`exam_objects`).
EXAM_TASKS: tuple[str, ...] = ("diagnose", "report", "segment", "detect", "keypoints", "measure")
#: the tasks read at the exam level and by the single best view (`score_exam`)
_FINDING_TASKS: tuple[str, ...] = ("diagnose", "report")
#: The two readings of an examination that the report sets side by side.
READINGS: tuple[str, ...] = ("exam", "best_view")
BEST_VIEW_RULE = ("the view holding the examination's longest lesion long-axis caliper ('<label> long axis'), "
                  "else its longest caliper of any name (kidney length, BPD), else the first view")
_NUM = r"\d+(?:\.\d+)?"
# "Size: 25.0 x 18.5 x 14.9 mm (length x width x depth)" (an exam) or "Size: 15.2 x 9.7 mm (long x short axis)"
_SIZE_RE = re.compile(rf"\bsize:\s*({_NUM}(?:\s*[x×]\s*{_NUM})*)\s*mm\b(?:\s*\(([^)]*)\))?", re.I)
# "BPD: 58.7 mm", "Length: 118.5 mm" (a kidney's single view)
_NAMED_SIZE_RE = re.compile(rf"\b(BPD|HC|FL|OFD|AC|length|width|depth)\s*:\s*({_NUM})\s*mm\b", re.I)
# a single view's two calipers, in the plane of the long axis: its length and its depth (the width is across it)
_AXIS_NAMES = {"long axis": "length", "short axis": "depth", "long": "length", "short": "depth", "ap": "depth"}


# ------------------------------------------------------------------------------------------------ scoring

def parse_report_sizes(text: str) -> dict[str, float]:
    """The sizes a report states, by name: "length", "width", "depth" from its ``Size: A x B x C mm (length x
    width x depth)`` (a single view's ``(long x short axis)`` read as length x depth: the plane of the long axis
    shows those two), and named ones ("bpd", "hc", "fl", "ofd", "length"...) from ``BPD: 58.7 mm``. The first
    statement of a name counts."""
    out: dict[str, float] = {}
    for m in _SIZE_RE.finditer(text or ""):
        values = [float(v) for v in re.split(r"\s*[x×]\s*", m.group(1).strip())]
        names = [n.strip().lower() for n in re.split(r"\s+[x×]\s+", m.group(2) or "") if n.strip()]
        if names and names[-1].endswith(" axis"):  # "long x short axis": the axis word belongs to each
            names = [n if n.endswith(" axis") else f"{n} axis" for n in names]
        if len(names) != len(values):
            names = ["length", "width", "depth"] if len(values) == 3 else ["length", "depth"][:len(values)]
        for name, value in zip(names, values):
            out.setdefault(_AXIS_NAMES.get(name, name), value)
    for m in _NAMED_SIZE_RE.finditer(text or ""):
        out.setdefault(m.group(1).lower(), float(m.group(2)))
    return out


def _size_name(key: str) -> str:
    """A measurement's key as `parse_report_sizes` names it: "lesion length mm" -> "length", "kidney AP mm" ->
    "depth", "BPD mm" -> "bpd"."""
    words = re.sub(r"\(?\bmm\b\)?", " ", key).split()
    last = words[-1].lower() if words else key.lower()
    return _AXIS_NAMES.get(last, last)


def exam_truth_sizes(exam) -> dict[str, float]:
    """The examination's sizes to score a report against: its measurements (the exam truth), by
    `parse_report_sizes` name, limited to those its own report states (a fetal report gives no OFD)."""
    truth = {}
    for key, value in exam.annotations.measurements.items():
        if isinstance(value, (int, float)) and math.isfinite(value) and value > 0:
            truth.setdefault(_size_name(key), float(value))
    stated = parse_report_sizes(exam.annotations.report or "")
    return {k: v for k, v in truth.items() if k in stated} if stated else truth


def best_view(exam) -> int:
    """The single view the baseline reads (BEST_VIEW_RULE): where the lesion's long axis was measured, the plane
    a sonographer reports a lesion from; a kidney's longitudinal view and the fetal head by the same rule."""
    def longest(keep) -> tuple[float, int] | None:
        found = [(line.length_mm or 0.0, -v) for v, view in enumerate(exam.views)
                 for obj in view.annotations.objects for line in obj.lines if keep(line.name)]
        return max(found) if found else None

    best = longest(lambda name: name.endswith(" long axis")) or longest(lambda name: True)
    return 0 if best is None else -best[1]


def _exam_diagnosis(exam) -> str | None:
    diagnosis = exam.annotations.diagnosis or next(
        (o.diagnosis for v in exam.views for o in v.annotations.objects if o.diagnosis), None)
    if diagnosis is None or diagnosis.strip().lower() not in DIAGNOSIS_LABELS:
        return None
    return diagnosis.strip().lower()


def exam_scorable(exam, task: str) -> bool:
    """Whether `exam` has the truth `task` is scored against: a benign or malignant finding, a report, a view with
    a mask or box."""
    if task in OBJECT_TASKS:
        return object_scorable(exam, task)
    if task == "diagnose":
        return _exam_diagnosis(exam) is not None
    return bool((exam.annotations.report or "").strip())


def score_exam(exam, task: str, reading: str, result, view: int | None = None) -> dict:
    """One per-exam sample: `reading` "exam" (all views, `predict_exam`) or "best_view" (view `view` alone).

    diagnose: the answer's class against the exam's (benign vs malignant). report: the model's own words
    (``raw_answer``) against the exam's report (sentence BLEU, lenient, as the sample's score) and its sizes
    against `exam_truth_sizes`; a size the answer does not state is missing, not an error of 0."""
    from ._bleu import bleu_lenient

    if reading not in READINGS:
        raise EvalError(f"reading must be one of {READINGS}, got {reading!r}")
    words = getattr(result, "raw_answer", "") or result.answer
    sample: dict[str, Any] = {"task": f"exam_{task}", "reading": reading, "view": view, "id": exam.id,
                              "site": exam.site or "unknown", "n_views": len(exam.views), "text": result.text,
                              "answer": result.answer}
    if task == "diagnose":
        truth, pred = _exam_diagnosis(exam), parse_diagnosis(result.answer)
        if truth is None:
            raise EvalError(f"exam {exam.id!r}: no benign or malignant diagnosis to score")
        sample.update(true=truth, pred=pred, correct=pred == truth, score=float(pred == truth))
    elif task == "report":
        reference = (exam.annotations.report or "").strip()
        if not reference:
            raise EvalError(f"exam {exam.id!r}: no report to score")
        stated = parse_report_sizes(words)
        sizes = {name: {"gt": gt, "pred": stated.get(name)} for name, gt in exam_truth_sizes(exam).items()}
        for entry in sizes.values():
            entry["rel_error"] = None if entry["pred"] is None else M.measurement_error(entry["pred"], entry["gt"])
        errors = [e["rel_error"] for e in sizes.values() if e["rel_error"] is not None]
        sample.update(reference=reference, hypothesis=words, sizes=sizes,
                      size_rel_error=float(np.mean(errors)) if errors else None,
                      n_missing=sum(e["pred"] is None for e in sizes.values()),
                      bleu=bleu_lenient([words], [reference]) if words.strip() else 0.0)
        sample["score"] = sample["bleu"]
    else:
        raise EvalError(f"score_exam scores {_FINDING_TASKS}, not {task!r} (objects: exam_objects)")
    return sample


# ---------------------------------------------------------------------------------------------- aggregate

def aggregate_exams(samples: list[dict]) -> tuple[dict, dict]:
    """(the "exam" section: per reading, diagnosis metrics and report BLEU-4 and size errors; summary keys)."""
    from ._bleu import bleu_lenient

    section: dict[str, Any] = {"best_view_rule": BEST_VIEW_RULE,
                               "n_exams": len({s.get("exam", s["id"]) for s in samples})}
    summary: dict[str, Any] = {}
    objects, summary_objects = aggregate_objects(samples)
    if any(objects.values()):
        section["objects"] = objects
        summary.update(summary_objects)
    for reading in READINGS:
        key = "exam" if reading == "exam" else "exam_best_view"
        dia, rep = of_reading(samples, "exam_diagnose", reading), of_reading(samples, "exam_report", reading)
        part: dict[str, Any] = {}
        if dia:
            part["diagnosis"] = diagnosis_section(dia)
            summary[f"{key}_diagnosis_accuracy"] = part["diagnosis"]["accuracy"]
        if rep:
            hyps, refs = [s["hypothesis"] for s in rep], [s["reference"] for s in rep]
            pairs = [(e["pred"], e["gt"]) for s in rep for e in s["sizes"].values()]
            part["report"] = {"bleu4": _bleu4(hyps, refs), "bleu_lenient": bleu_lenient(hyps, refs), "n": len(rep),
                              "size": M.measurement_errors([p for p, _ in pairs], [g for _, g in pairs])}
            summary.update({f"{key}_report_size_rel_error": part["report"]["size"]["mean_rel"],
                            f"{key}_report_bleu4": part["report"]["bleu4"]})
        section[reading] = part
    return section, summary


def _bleu4(hypotheses: list[str], references: list[str]) -> float | None:
    """BLEU-4 as U2-Bench computes it (pycocoevalcap's scorer); None where the eval extra is not installed. An
    empty answer is a hypothesis of no words, which the scorer cannot take: it scores as ".", matching nothing."""
    from .u2bench import bleu4

    try:
        return bleu4([h if h.strip() else "." for h in hypotheses], references)
    except ImportError:
        return None


# ----------------------------------------------------------------------------------------------- evaluate

def exam_frames(exam) -> list:
    """An examination's views as the Frames `Predictor.set_exam` reads, in the record's order."""
    from ..imageio import Frame

    return [Frame(pixels=pixels, spacing=view.spacing, index=view.frame, source=str(exam.resolve(view.image)))
            for pixels, view in zip(exam.load_images(), exam.views)]


def evaluate_exams(predictor, work: list[tuple[Any, list[str]]], bar) -> list[dict]:
    """Each examination read whole (`set_exam` once, `predict_exam` per task), then its best view alone (the
    single-image prompt, views of a chunk batched per task) for diagnose and report (`score_exam`), and each view
    alone for segment and detect (`exam_objects`)."""

    samples: list[dict] = []
    try:
        for start in range(0, len(work), CHUNK_RECORDS):
            chunk = work[start:start + CHUNK_RECORDS]
            frames_of: dict[str, list] = {}
            for exam, asked in chunk:
                frames = frames_of[exam.id] = exam_frames(exam)
                predictor.set_exam(frames)
                for task in asked:
                    samples += (exam_object_samples(predictor, exam, task, frames) if task in OBJECT_TASKS
                                else [score_exam(exam, task, "exam", predictor.predict_exam(task))])
                if bar is not None:
                    bar.update(len(asked))
            for task in EXAM_TASKS:
                todo = [exam for exam, asked in chunk if task in asked]
                if not todo:
                    continue
                if task in OBJECT_TASKS:
                    samples += view_alone_samples(predictor, [(exam, frames_of[exam.id]) for exam in todo], task)
                else:
                    views = [best_view(exam) for exam in todo]
                    results = predictor.predict_batch([frames_of[e.id][b] for e, b in zip(todo, views)], task)
                    samples += [score_exam(exam, task, "best_view", res, view=b)
                                for exam, b, res in zip(todo, views, results)]
                if bar is not None:
                    bar.update(len(todo))
    finally:
        predictor.reset_exam()
    return samples


# -------------------------------------------------------------------------------------------------- write

def exam_tables(exam: dict) -> dict[str, dict[str, dict[str, Any]]]:
    """The examination sections, the exam reading and the single best view side by side (percent and mm
    already scaled here, since one table mixes them)."""
    columns = {"exam": "exam reading (all views)", "best_view": "single best view"}

    def pct(v):
        return None if v is None else 100.0 * v

    diagnosis, report = {}, {}
    for reading, column in columns.items():
        part = exam.get(reading, {})
        if "diagnosis" in part:
            d = part["diagnosis"]
            diagnosis[column] = {"Accuracy (%)": pct(d["accuracy"]), "Macro-F1 (%)": pct(d["macro_f1"]),
                                 "examinations": d["n"]}
        if "report" in part:
            r, size = part["report"], part["report"]["size"]
            report[column] = {"BLEU-4, U2-Bench (%)": pct(r["bleu4"]), "BLEU-4, lenient (%)": pct(r["bleu_lenient"]),
                              "Size mean relative error (%)": pct(size["mean_rel"]),
                              "Size mean absolute error (mm)": size["mean_abs"],
                              "sizes stated": f"{size['n'] - size['n_missing']} of {size['n']}",
                              "reports": r["n"]}
    out = {}
    if diagnosis:
        out["Examinations: diagnosis, benign vs malignant"] = diagnosis
    if report:
        out["Examinations: report"] = report
    if "objects" in exam:
        out["Examinations: objects per view"] = object_table(exam["objects"])
    return out


#: report.md's note on the examination sections (`runner.write_eval` adds it when the metrics have an "exam" one).
EXAM_NOTE = (
    "Examinations: the exam reading is one prompt over all views (`Predictor.predict_exam`); the single best view is "
    f"the same model asked the single-image prompt on one view, {BEST_VIEW_RULE}. Diagnosis scores benign/malignant "
    "examinations against the exam's finding. Report sizes are read off the answer's text (`Size: L x W x D mm`, "
    "`BPD: x mm`; a single view's `long x short axis` as length x depth) and compared with the exam's "
    "measurements that its report states; a size the answer does not state is counted under 'sizes stated', not "
    "as an error. BLEU-4 (U2-Bench) is pycocoevalcap's corpus BLEU-4 against the exam's report; the lenient "
    "BLEU lowercases and splits punctuation. Objects per view: one exam prompt per target, each view's share of the "
    "answer scored against that view's masks and boxes as a single image is (IoU; detection at IoU 0.5), beside "
    "each view asked alone; views that do not show the target are not scored, and the objects the exam answer "
    "places on them are counted. Keypoints per view are scored as a single image's are; a caliper is asked once per "
    "examination and scored on the view the model drew it in, against that view's caliper of that name.")
