"""The evaluation loop: a model's answers on a held-out manifest, scored with the report's metrics.

Three pure steps and one impure one, so the scoring can be tested without a model:

1. `build_queries(records, tasks)`: what to ask about each image. Every prompt is the trainer's own user text
   (`prompts.build_user_text`, canonical wording, via the Predictor) naming the annotated object's label, so the
   evaluation asks what the model was taught to answer.
2. `evaluate` runs the Predictor on every distinct (image, task, prompt) once, batching images that share a
   prompt (a dataset has few distinct labels, so batches fill up).
3. `score(query, result, record, masks)`: one per-sample record (a plain dict) from a Result and the truth.
4. `aggregate(samples)`: the metrics, all computed by `umind_core.evaluation.metrics`.

Matching rules. Segmentation: the union of every mask in the answer against the mask of each ground-truth object
of the prompted label (no mask is IoU 0). Detection: every box in the answer against every ground-truth box of the
prompted label in that image, one-to-one at IoU 0.5 (detection boxes carry no labels worth trusting: the prompt
already names the target). Keypoints: by name when the model labels a point with the landmark's name, the rest by
nearest distance. Measurement: the answer's line measured with the record's spacing, else a "... mm" number in the
text; a record's stored head circumference (``measurements["HC mm"]``, `landmarks.RECORD_MEASUREMENTS`) is asked
for as "head circumference" and scored as HC18 scores it, the mean absolute difference in mm, from the perimeter of
the answer's ellipse (`landmarks.ellipse_perimeter`). Diagnosis: benign vs malignant images only (the report's
Table 5); an answer naming neither class, or "normal", is wrong. Refusal: for every image of a known site one
question about anatomy foreign to it (should be refused) and one about what is there (should be answered), in the
same task, so the pair differs in the target only.

Examinations (manifest lines with ``images``: several views of one patient) are read whole and scored at the exam
level by `umind_core.evaluation.exams`, which owns that reading; `evaluate`, `aggregate`, `summary_table` and
`write_eval` hand examinations and their metrics to it. Steps 1 and 3 live in `scoring`, below both this loop and
the examination scorers, so that a view is scored by the single image's rules without importing this module.

Keys starting with "_" in a sample (masks, the record) are for overlays and aggregation in memory; `write_eval`
leaves them out of metrics.json.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..atomic import new_temp_dir, replace_dir, write_text
from ..answers.landmarks import RECORD_MEASUREMENTS
from . import metrics as M
from .exams import EXAM_NOTE, EXAM_TASKS, aggregate_exams, evaluate_exams, exam_scorable, exam_tables
from .scoring import (  # noqa: F401  (re-exported: the evaluation's public names)
    CHUNK_RECORDS,
    DIAGNOSIS_LABELS,
    EVAL_TASKS,
    IOU_THRESHOLD,
    SPATIAL_TASKS,
    EvalError,
    Query,
    _check_tasks,
    build_queries,
    detection_section,
    diagnosis_section,
    keypoint_section,
    match_keypoints,
    measurement_kind,
    measurement_section,
    parse_diagnosis,
    score,
)

__all__ = [
    "CHUNK_RECORDS",
    "EVAL_TASKS",
    "DIAGNOSIS_LABELS",
    "SUMMARY_KEYS",
    "EvalError",
    "EvalReport",
    "Query",
    "build_queries",
    "keypoint_section",
    "record_frame",
    "parse_diagnosis",
    "match_keypoints",
    "score",
    "aggregate",
    "evaluate",
    "write_eval",
    "summary_table",
]

#: the measurement kind HC18 scores (`measurement_kind` of its prompt): its mean absolute difference is a headline
HC_KIND = RECORD_MEASUREMENTS["HC mm"]
#: The headline numbers; `aggregate` always fills every key (None when the task was not run or had no data).
SUMMARY_KEYS: tuple[str, ...] = (
    "segmentation_miou",
    "detection_precision", "detection_recall", "detection_f1",
    "keypoint_error_px", "keypoint_error_mm", "keypoint_error_rel_width",
    "measurement_rel_error", "head_circumference_mad_mm",
    "diagnosis_accuracy", "diagnosis_macro_f1",
    "refusal_accuracy", "refusal_out_of_scope_accuracy", "refusal_in_scope_accuracy",
    "exam_diagnosis_accuracy", "exam_best_view_diagnosis_accuracy",
    "exam_report_size_rel_error", "exam_best_view_report_size_rel_error",
    "exam_report_bleu4", "exam_best_view_report_bleu4",
    "exam_segmentation_miou", "exam_view_alone_segmentation_miou",
    "exam_detection_f1", "exam_view_alone_detection_f1",
    "exam_keypoint_error_rel_width", "exam_view_alone_keypoint_error_rel_width",
    "exam_measurement_rel_error", "exam_view_alone_measurement_rel_error",
)


@dataclass
class EvalReport:
    metrics: dict
    samples: list[dict]
    model_name: str = "UMind"
    manifest: str | None = None
    readout: str = "mask"  # where the boxes and lesion calipers scored came from (`predictor.READOUTS`)


# ---------------------------------------------------------------------------------------------- aggregate

def _of(samples: Iterable[dict], task: str) -> list[dict]:
    return [s for s in samples if s.get("task") == task]


def aggregate(samples: Sequence[dict]) -> dict:
    """All metrics from per-sample records (the output of `score`); a pure function.

    Returns one section per task that has samples (the metric functions' own dicts) plus "summary" with every
    key of SUMMARY_KEYS and "n_samples" per task.
    """
    samples = list(samples)
    out: dict[str, Any] = {}
    summary: dict[str, Any] = dict.fromkeys(SUMMARY_KEYS)

    seg = _of(samples, "segment")
    if seg:
        triples = []
        for s in seg:
            if "_pred_mask" not in s or "_gt_masks" not in s:
                raise EvalError(f"segment sample of {s.get('id')!r} has no masks (aggregate the output of score)")
            triples += [(s["site"], s["_pred_mask"], g) for g in s["_gt_masks"]]
        out["segmentation"] = M.segmentation_miou(triples)
        summary["segmentation_miou"] = out["segmentation"]["mean"]

    det = _of(samples, "detect")
    if det:
        out["detection"] = detection_section(det)
        summary.update(detection_precision=out["detection"]["precision"],
                       detection_recall=out["detection"]["recall"], detection_f1=out["detection"]["f1"])

    kp = _of(samples, "keypoints")
    if kp:
        out["keypoints"] = keypoint_section(kp)
        summary.update(keypoint_error_px=out["keypoints"]["mean_px"], keypoint_error_mm=out["keypoints"]["mean_mm"],
                       keypoint_error_rel_width=out["keypoints"]["mean_rel_width"])

    meas = _of(samples, "measure")
    if meas:
        out["measurement"] = measurement_section(meas)
        summary["measurement_rel_error"] = out["measurement"]["mean_rel"]
        summary["head_circumference_mad_mm"] = out["measurement"]["by_kind"].get(HC_KIND, {}).get("mean_abs")

    dia = _of(samples, "diagnose")
    if dia:
        out["diagnosis"] = diagnosis_section(dia)
        summary.update(diagnosis_accuracy=out["diagnosis"]["accuracy"],
                       diagnosis_macro_f1=out["diagnosis"]["macro_f1"])

    ref = _of(samples, "refusal")
    if ref:
        def acc(items):
            return M.refusal_accuracy([s["answer"] for s in items], [s["should_refuse"] for s in items]) \
                if items else None
        out_scope = [s for s in ref if s["should_refuse"]]
        in_scope = [s for s in ref if not s["should_refuse"]]
        out["refusal"] = {"accuracy": acc(ref), "out_of_scope_accuracy": acc(out_scope),
                          "in_scope_accuracy": acc(in_scope), "n": len(ref), "n_out_of_scope": len(out_scope),
                          "n_in_scope": len(in_scope)}
        summary.update(refusal_accuracy=out["refusal"]["accuracy"],
                       refusal_out_of_scope_accuracy=out["refusal"]["out_of_scope_accuracy"],
                       refusal_in_scope_accuracy=out["refusal"]["in_scope_accuracy"])

    exams = [s for s in samples if s.get("task", "").startswith("exam_")]
    if exams:
        out["exam"], exam_summary = aggregate_exams(exams)
        summary.update(exam_summary)
    out["summary"] = summary
    out["n_samples"] = {t: len(_of(samples, t)) for t in EVAL_TASKS}
    return out


# ----------------------------------------------------------------------------------------------- evaluate

def _records(manifest) -> tuple[list, str | None]:
    from ..data.manifest import Record, read_manifest

    if isinstance(manifest, (str, os.PathLike)):
        path = Path(manifest)
        if not path.is_file():
            raise EvalError(f"manifest {path} does not exist or is not a file")
        return read_manifest(path), str(path)
    records = list(manifest)
    bad = [i for i, r in enumerate(records) if not isinstance(r, Record)]
    if bad:
        raise EvalError(f"manifest items {bad[:5]} are not manifest Records")
    return records, None


def _positive(value, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise EvalError(f"{what} must be a positive int, got {value!r}")
    return value


def evaluate(model, manifest, tasks: Sequence[str] | str | None = None, limit: int | None = None,
             batch_size: int = 8, progress: bool = True, *, max_new_tokens: int = 256,
             model_name: str = "UMind", readout: str = "mask") -> EvalReport:
    """Run the model (a UMindVL or a ready Predictor) over `manifest` (a path or records) and score it.

    Records of one view (single images) are scored on `tasks` of EVAL_TASKS; records of several (examinations) on
    those of EXAM_TASKS ("report" is for examinations only), each read whole and by its single best view
    (`exams.score_exam`). `readout` says where
    boxes and lesion calipers come from (`predictor.READOUTS`); a ready Predictor keeps its own."""
    from ..inference.predictor import Predictor, PredictorError

    explicit = tasks is not None
    tasks = _check_tasks(tasks, EVAL_TASKS + tuple(t for t in EXAM_TASKS if t not in EVAL_TASKS))
    _positive(batch_size, "batch_size")
    _positive(max_new_tokens, "max_new_tokens")
    records, manifest_name = _records(manifest)
    if limit is not None:
        records = records[:_positive(limit, "limit")]
    name = manifest_name or "<records>"
    if not records:
        raise EvalError(f"manifest {name} has no records to evaluate")
    images = [r for r in records if len(r.views) == 1]
    exams = [r for r in records if len(r.views) > 1]
    if explicit and "report" in tasks and not exams:
        raise EvalError(f"task 'report' is scored on examinations only (manifest lines with 'images'), and "
                        f"{name} has none")
    image_tasks = tuple(t for t in tasks if t in EVAL_TASKS)
    queries = build_queries(images, image_tasks) if images and image_tasks else []
    exam_work = [(exam, [t for t in tasks if t in EXAM_TASKS and exam_scorable(exam, t)]) for exam in exams]
    exam_work = [(exam, asked) for exam, asked in exam_work if asked]
    if not queries and not exam_work:
        raise EvalError(f"the records of {name} have no annotations for tasks {tasks}")
    try:
        predictor = model if isinstance(model, Predictor) else Predictor(
            model, max_new_tokens=max_new_tokens, batch_size=batch_size, readout=readout)
    except PredictorError as exc:
        raise EvalError(str(exc)) from None

    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(queries) + 2 * sum(len(asked) for _, asked in exam_work), desc="umind eval",
                   unit="sample")
    try:
        samples = _evaluate_images(predictor, images, queries, bar) + evaluate_exams(predictor, exam_work, bar)
    finally:
        if bar is not None:
            bar.close()
    return EvalReport(metrics=aggregate(samples), samples=samples, model_name=model_name,
                      manifest=manifest_name, readout=predictor.readout)


def record_frame(rec):
    """A single-image record as the Frame the Predictor reads (`exams.exam_frames` is an examination's)."""
    from ..imageio import Frame

    return Frame(pixels=rec.load_image(), spacing=rec.spacing, index=rec.frame, source=str(rec.image_path))


def _evaluate_images(predictor, records: list, queries: list[Query], bar) -> list[dict]:
    """Every single-image query answered (each distinct (image, task, prompt) once, images sharing a prompt
    batched) and scored; records are read a chunk at a time."""
    samples: list[dict] = []
    for start in range(0, len(records), CHUNK_RECORDS):
        chunk = range(start, min(start + CHUNK_RECORDS, len(records)))
        chunk_queries = [q for q in queries if q.record in chunk]
        frames = {}
        for i in chunk:
            frames[i] = record_frame(records[i])
        served: dict[tuple, int] = {}
        for q in chunk_queries:
            served[q.key] = served.get(q.key, 0) + 1
        groups: dict[tuple, list[int]] = {}
        for rec_i, ptask, prompt in served:
            groups.setdefault((ptask, prompt), []).append(rec_i)
        results = {}
        for (ptask, prompt), rec_ids in groups.items():
            out = predictor.predict_batch([frames[i] for i in rec_ids], ptask, prompt)
            for i, res in zip(rec_ids, out):
                results[(i, ptask, prompt)] = res
            if bar is not None:
                bar.update(sum(served[(i, ptask, prompt)] for i in rec_ids))
        masks = {}
        for q in chunk_queries:
            rec = records[q.record]
            if q.task == "segment" and q.record not in masks:
                masks[q.record] = rec.load_masks()
            samples.append(score(q, results[q.key], rec, masks.get(q.record)))
    return samples


# -------------------------------------------------------------------------------------------------- write

def summary_table(metrics: dict, model_name: str = "UMind") -> tuple[dict, dict]:
    """The report's tables as render_markdown's {section: {model: {row: value}}} and its scale per section."""
    tables: dict[str, dict[str, dict[str, Any]]] = {}
    scale: dict[str, float] = {}

    def add(section: str, rows: dict, factor: float = 1.0) -> None:
        tables[section] = {model_name: rows}
        if factor != 1.0:
            scale[section] = factor

    if "segmentation" in metrics:
        seg = metrics["segmentation"]
        add("Segmentation mIoU (%)", {**{s.replace("_", " "): v for s, v in seg["per_site"].items()},
                                      "Average": seg["mean"]}, 100.0)
    if "detection" in metrics:
        d = metrics["detection"]
        add(f"Detection at IoU {IOU_THRESHOLD:g} (%)",
            {"Precision": d["precision"], "Recall": d["recall"], "F1": d["f1"]}, 100.0)
    if "keypoints" in metrics:
        k = metrics["keypoints"]
        rel = k["mean_rel_width"]
        add("Keypoint mean distance error", {"px": k["mean_px"], "mm": k["mean_mm"],
                                             "% of image width": None if rel is None else 100.0 * rel,
                                             "missing points": f"{k['n_missing']} of {k['n']}"})
    if "measurement" in metrics:
        m = metrics["measurement"]
        add("Measurement length error", {"Mean relative error (%)": None if m["mean_rel"] is None
                                         else 100.0 * m["mean_rel"], "Mean absolute error (mm)": m["mean_abs"],
                                         "missing": f"{m['n_missing']} of {m['n']}"})
        if m.get("by_kind"):
            add("Measurement mean relative error by kind (%)",
                {k: None if v["mean_rel"] is None else 100.0 * v["mean_rel"] for k, v in m["by_kind"].items()})
        hc = m.get("by_kind", {}).get(HC_KIND)
        if hc:
            add("Head circumference (as HC18 scores it)", {"Mean absolute difference (mm)": hc["mean_abs"],
                                                           "missing": f"{hc['n_missing']} of {hc['n']}"})
    if "diagnosis" in metrics:
        d = metrics["diagnosis"]
        add("Diagnosis, benign vs malignant (%)", {"Accuracy": d["accuracy"], "Macro-F1": d["macro_f1"]}, 100.0)
    if "refusal" in metrics:
        r = metrics["refusal"]
        add("Refusal (%)", {"Accuracy": r["accuracy"], "Out-of-scope refused": r["out_of_scope_accuracy"],
                            "In-scope answered": r["in_scope_accuracy"]}, 100.0)
    if "exam" in metrics:
        tables.update(exam_tables(metrics["exam"]))
    counts = {t: n for t, n in metrics.get("n_samples", {}).items() if n}
    if "exam" in metrics:
        counts["examinations"] = metrics["exam"]["n_exams"]
    if counts:
        add("Samples", counts)
    return tables, scale


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name)[:80] or "sample"


def _ranked(samples: list[dict], k: int) -> tuple[list[dict], list[dict]]:
    """Best k and worst k samples by score (unscorable ones count as worst); the two never overlap."""
    order = sorted(range(len(samples)),
                   key=lambda i: (samples[i].get("score") is None, -(samples[i].get("score") or 0.0), i))
    best = order[:k]
    worst = [i for i in reversed(order) if i not in set(best)][:k]
    return [samples[i] for i in best], [samples[i] for i in worst]


def _draw(sample: dict, path: Path) -> Path:
    """Ground truth first (first palette colours), then the prediction."""
    from ..imageio import Frame, write_overlay_png

    record = sample.get("_record")
    if record is None:
        raise EvalError(f"sample {sample.get('id')!r} has no record to draw (write the output of evaluate)")
    pixels = record.load_image()
    if pixels.ndim == 2:
        pixels = np.repeat(pixels[..., None], 3, axis=2)
    frame = Frame(pixels=pixels[..., :3], spacing=record.spacing, index=record.frame, source=str(record.image_path))
    task = sample["task"]
    if task == "segment":
        return write_overlay_png(frame, [*sample["_gt_masks"], sample["_pred_mask"]], path)
    if task == "detect":
        return write_overlay_png(frame, [], path, boxes=[*sample["gt_boxes"], *sample["pred_boxes"]])
    if task == "keypoints":
        pts = [*sample["gt_points"], *(p for p in sample["pred_points"] if p is not None)]
        return write_overlay_png(frame, [], path, points=pts)
    ellipse = sample.get("pred_ellipse") or []
    lines = [ln for ln in (sample.get("gt_line"), sample.get("pred_line"), ellipse[:4], ellipse[4:]) if ln]
    return write_overlay_png(frame, [], path, lines=lines)


def _write_overlays(samples: list[dict], out: Path, k: int) -> dict[str, dict[str, list[str]]]:
    """Best and worst k per spatial task into out/overlays, swapped in whole so no run mixes with another."""
    listing: dict[str, dict[str, list[str]]] = {}
    final = out / "overlays"
    tmp = new_temp_dir(final)
    try:
        for task in SPATIAL_TASKS:
            items = _of(samples, task)
            if not items:
                continue
            best, worst = _ranked(items, k)
            listing[task] = {"best": [], "worst": []}
            for kind, chosen in (("best", best), ("worst", worst)):
                for rank, s in enumerate(chosen, start=1):
                    label = s.get("label") or ""
                    name = f"{task}_{kind}{rank:02d}_{_safe(s['id'])}" + (f"_{_safe(label)}" if label else "")
                    name += ".png"
                    _draw(s, tmp / name)
                    listing[task][kind].append(f"overlays/{name}")
        replace_dir(tmp, final)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return listing


def _public(sample: dict) -> dict:
    return {k: v for k, v in sample.items() if not k.startswith("_")}


def write_eval(report: EvalReport, out_dir: str | os.PathLike, overlays: int = 4,
               model_name: str | None = None) -> dict[str, Path]:
    """Write overlays/ (best and worst `overlays` per spatial task), metrics.json and report.md, each atomically.

    report.md is written last, so its presence means the rest is complete.
    """
    import json

    from .report import render_markdown, to_jsonable

    if isinstance(overlays, bool) or not isinstance(overlays, int) or overlays < 0:
        raise EvalError(f"overlays must be a non-negative int, got {overlays!r}")
    name = model_name or report.model_name
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    listing = _write_overlays(report.samples, out, overlays) if overlays else {}
    payload = {"model": name, "manifest": report.manifest, "readout": report.readout, "metrics": report.metrics,
               "overlays": listing, "samples": [_public(s) for s in report.samples]}
    paths = {"metrics": out / "metrics.json", "report": out / "report.md"}
    write_text(paths["metrics"], json.dumps(to_jsonable(payload), indent=2, ensure_ascii=False,
                                               allow_nan=False) + "\n")
    tables, scale = summary_table(report.metrics, name)
    if not tables:
        raise EvalError("the report has no metrics to tabulate")
    text = render_markdown(tables, title="UMind evaluation", scale=scale)
    notes = [f"Manifest: `{report.manifest}`." if report.manifest else None,
             "Prompts are the trainer's canonical task templates naming the annotated label. Detection counts "
             f"boxes matched one-to-one at IoU >= {IOU_THRESHOLD:g}; diagnosis scores benign/malignant images, an "
             "answer naming neither class counts as wrong; refusal pairs a question about foreign anatomy "
             "(should be refused) with one about the image's own (should be answered).",
             "Boxes and lesion calipers were read off the masks the model segments (readout: mask)."
             if report.readout == "mask" else
             "Boxes and lesion calipers are the coordinates the model writes (readout: tokens).",
             "Overlays (overlays/): ground truth in the first colours, the prediction after it." if listing else None,
             EXAM_NOTE if "exam" in report.metrics else None]
    text += "\n" + "\n\n".join(n for n in notes if n) + "\n"
    write_text(paths["report"], text)
    if listing:
        paths["overlays"] = out / "overlays"
    return paths
