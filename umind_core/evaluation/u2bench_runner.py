"""Run UMind over a U2-Bench release with the evaluation kit's prompts, write the kit's result layout, and score it.

Why each step is as it is:
- Questions: every row is asked with the kit's own prompt (`u2bench_release`) through the Predictor's free
  question task ("ask"), so the model sees what every published model saw. A prompt the Predictor refuses (over its
  character limit, e.g. cla dataset 28_class) or an empty answer is written as the kit's failure string.
- Answers in the kit's format (its scorers compare strings): cla -> the option named in the prompt's "options:" line
  that the answer names (exactly, else the earliest and longest mention), else the answer as written; seg -> one of
  the ten location names (free text normalised), else a grounded answer: the model detects the structure the row
  asks about (keypoints for dataset 48) and the centre of what it found is binned by the kit's 0.45/0.55 rule
  ("not visible" when it finds nothing); measurement -> the first number of the answer (or "null"); report -> the
  text. The raw answer and how it was mapped go to a side file, never into the kit's records.
- Layout: `<out>/<task_type>/<dataset>/<model>/multimodal_test_results_<timestamp>.jsonl` (the file the kit's
  `eval_func` scripts look for) and `<model>_combined_results.jsonl` (the same records), each line
  {id, text_content, image_paths, category, response, model, timestamp} as `silicon_test/batch_test.py` writes it.
- Scores: per dataset with `u2bench` (the kit's definitions), read back from the written files and the release's
  truths by row position as the kit merges them; the U2-Score over the published table's datasets. Beside it
  `u2_score_kit_table`: what the kit's scripts themselves produce from the same answers, whose results files round
  each dataset (accuracy and RMSE to 4 decimals, BLEU-4 x 100 to 2) and whose table script reads task ids back as
  numbers when a file holds only numeric ids (so "04" and "09" turn into "4" and "9" and drop out of their task).
"""

from __future__ import annotations

import io
import json
import math
import re
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from ..atomic import new_temp_dir, replace_dir, write_text
from . import u2bench as U
from .u2bench_release import (
    KIT,
    KitDataset,
    KitItem,
    U2BenchReleaseError,
    find_datasets,
    load_image,
    read_items,
    u2_task,
)

__all__ = [
    "FAILED_ANSWER",
    "Answer",
    "answer_items",
    "cla_answer",
    "kit_table_score",
    "number_answer",
    "prompt_options",
    "read_kit_results",
    "region_of_result",
    "run_u2bench",
    "headline",
    "U2_FORMULA",
    "safe_model_name",
    "score_dataset",
    "score_results",
    "seg_answer",
    "summarize",
    "write_kit_results",
    "write_scores",
]

#: The kit's failure string (`extract_json_data`, `MeasureDataset`): an answer that could not be obtained.
FAILED_ANSWER = "Failed to obtain answer via API."
_CHUNK = 32  # rows whose images are held in memory at once
_NUMBER = re.compile(r"[-+]?\d+(?:\.\d+)?")
_KIT_FILES = {"cla": ("DD", "VRA"), "seg": ("LL", "OD", "KD"), "measurement": ("CVE",), "report": ("RG", "CG")}


@dataclass
class Answer:
    """What goes into the kit's record (`response`) and what the side file keeps about it."""

    response: str
    how: str  # option, text, region, grounded, number, null, report, raw, failed, unmapped
    raw: str = ""
    error: str | None = None


def safe_model_name(name: str) -> str:
    """The model folder name of the kit's layout: no path separators or spaces."""
    return re.sub(r"[^A-Za-z0-9._+-]+", "_", name).strip("._") or "UMind"


# ------------------------------------------------------------------------------------------- answer mapping

def prompt_options(prompt: str) -> list[str]:
    """The options of a kit cla prompt's "options:" line ("options: 'Mild OA', 'No OA'" -> [Mild OA, No OA])."""
    for line in prompt.splitlines():
        m = re.match(r"\s*options?\s*:(.*)$", line, re.IGNORECASE)
        if m:
            body = m.group(1).strip().strip("[]")
            return [o.strip().strip("'\"").strip() for o in body.split(",") if o.strip().strip("'\"").strip()]
    return []


def cla_answer(text: str, prompt: str) -> Answer:
    """The option the answer names: an exact (case-free) match, else the earliest, longest whole-word mention;
    the answer as written when it names none (the kit then counts it wrong, as it would)."""
    clean = text.strip()
    if not clean:
        return Answer(FAILED_ANSWER, "failed", text)
    options = prompt_options(prompt)
    bare = clean.strip("'\"").rstrip(".").strip().lower()
    for opt in options:
        if opt.lower() == bare:
            return Answer(opt, "option", text)
    hits = []
    for opt in options:
        m = re.search(r"(?<![\w-])" + re.escape(opt.lower()) + r"(?![\w-])", clean.lower())
        if m:
            hits.append((m.start(), -len(opt), opt))
    if hits:
        return Answer(min(hits)[2], "option", text)
    return Answer(clean, "raw", text)


def seg_answer(text: str) -> Answer:
    """A location name when the answer names one (free text normalised), else unmapped (ask the grounded way)."""
    name = U.normalize_position(text) if text.strip() else None
    return Answer(name, "text", text) if name else Answer(FAILED_ANSWER, "unmapped", text)


def region_of_result(result) -> str | None:
    """The kit's region of the first thing a grounded answer found (box centre, else its first point), relative to
    the image; "not visible" when it found nothing; None when the answer was unreadable."""
    if getattr(result, "unparsable", False) or result.image_size is None:
        return None
    w, h = result.image_size
    for obj in result.objects:
        if obj.box is not None:
            x1, y1, x2, y2 = obj.box
            return U.position_class((x1 + x2) / 2 / w, (y1 + y2) / 2 / h)
        if obj.points:
            return U.position_class(obj.points[0][0] / w, obj.points[0][1] / h)
    return U.NOT_VISIBLE


def number_answer(text: str) -> Answer:
    """The first number of a measurement answer (the kit reads the response with float()); "null" when the model
    says the value cannot be estimated (dataset 27's instruction); the text itself otherwise."""
    m = _NUMBER.search(text)
    if m:
        return Answer(m.group(0), "number", text)
    if re.search(r"\bnull\b", text, re.IGNORECASE):
        return Answer("null", "null", text)
    return Answer(text.strip() or FAILED_ANSWER, "raw" if text.strip() else "failed", text)


def _first_answer(ds: KitDataset, item: KitItem, result) -> Answer:
    if isinstance(result, Exception):
        return Answer(FAILED_ANSWER, "failed", "", str(result))
    text = result.answer or result.text or ""
    if ds.task_type == "cla":
        return cla_answer(text, item.prompt)
    if ds.task_type == "seg":
        answer = seg_answer(text)
        region = region_of_result(result) if result.objects else None
        return Answer(region, "region", text) if answer.how == "unmapped" and region else answer
    if ds.task_type == "measurement":
        return number_answer(text)
    return Answer(text.strip(), "report", text) if text.strip() else Answer(FAILED_ANSWER, "failed", text)


def answer_items(predictor, ds: KitDataset, items: Sequence[KitItem], *, grounded: bool = True,
                 on_chunk: Callable[[int], None] | None = None) -> list[Answer]:
    """Ask every row its kit prompt, in chunks; for seg rows whose answer names no location, ask the grounded way."""
    from ..inference.predictor import Job

    out: list[Answer] = []
    for start in range(0, len(items), _CHUNK):
        chunk = list(items[start: start + _CHUNK])
        frames = [load_image(it, ds.tsv) for it in chunk]
        results = predictor.predict_many([Job(f, "ask", it.prompt) for f, it in zip(frames, chunk)], on_chunk)
        answers = [_first_answer(ds, it, r) for it, r in zip(chunk, results)]
        todo = [k for k, a in enumerate(answers) if a.how == "unmapped"]
        if todo and grounded:
            task = "keypoints" if ds.dataset == "48" else "detect"
            second = predictor.predict_many([Job(frames[k], task, chunk[k].target) for k in todo])
            for k, res in zip(todo, second):
                region = None if isinstance(res, Exception) else region_of_result(res)
                if region is not None:
                    answers[k] = Answer(region, "grounded", answers[k].raw)
        out += [Answer(FAILED_ANSWER, "failed", a.raw, a.error) if a.how == "unmapped" else a for a in answers]
    return out


# ------------------------------------------------------------------------------------------------ layout

def _model_dir(out: Path, ds: KitDataset, model: str) -> Path:
    return Path(out) / ds.task_type / ds.dataset / model


def write_kit_results(out: str | Path, ds: KitDataset, model: str, items: Sequence[KitItem],
                      answers: Sequence[Answer], timestamp: datetime | None = None) -> Path:
    """One dataset's records in the kit's layout, swapped in whole (an earlier run's files never linger, so the
    kit's scripts, which read every multimodal_test_results file of a model folder, see this run only)."""
    if len(items) != len(answers):
        raise ValueError(f"{len(answers)} answers for {len(items)} rows")
    now = timestamp or datetime.now()
    stamp = now.strftime("%Y-%m-%d %H:%M:%S")
    records = [{"id": it.id, "text_content": it.prompt, "image_paths": [it.image_ref], "category": ds.task_type,
                "response": a.response, "model": model, "timestamp": stamp} for it, a in zip(items, answers)]
    details = [{"id": it.id, "response": a.response, "mapped_from": a.how, "raw_answer": a.raw, "error": a.error}
               for it, a in zip(items, answers)]
    lines = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records)
    final = _model_dir(Path(out), ds, model)
    tmp = new_temp_dir(final)
    try:
        (tmp / f"multimodal_test_results_{now.strftime('%Y%m%d_%H%M%S')}.jsonl").write_text(lines, encoding="utf-8")
        (tmp / f"{model}_combined_results.jsonl").write_text(lines, encoding="utf-8")
        (tmp / "umind_details.jsonl").write_text(
            "".join(json.dumps(d, ensure_ascii=False) + "\n" for d in details), encoding="utf-8")
        replace_dir(tmp, final)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return final


def read_kit_results(out: str | Path, ds: KitDataset, model: str) -> list[Any]:
    """The `response` of each record of a model's combined results file, in file order (the kit's row order)."""
    path = _model_dir(Path(out), ds, model) / f"{model}_combined_results.jsonl"
    try:
        lines = [ln for ln in path.read_text(encoding="utf-8").splitlines() if ln.strip()]
        return [json.loads(ln).get("response") for ln in lines]
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, AttributeError) as exc:
        raise U2BenchReleaseError(f"{path}: not a readable kit results file ({exc})") from None


# ------------------------------------------------------------------------------------------------ scoring

def _counted_cla(responses: Sequence[Any], truths: Sequence[Any]) -> int:
    """How many answers the kit's cla scorer keeps (an integer label needs an integer answer)."""
    n = 0
    for p, g in zip(responses, truths):
        if isinstance(g, str):
            n += isinstance(p, str)
            continue
        try:
            int(p)
            n += 1
        except (TypeError, ValueError):
            pass
    return n


def score_dataset(ds: KitDataset, items: Sequence[KitItem], responses: Sequence[Any]) -> dict:
    """One dataset's value by the kit's definition (`u2bench`): accuracy (cla, seg), RMSE after the fixed min-max
    scaling (measurement; only datasets the kit gives a range), corpus BLEU-4 as a fraction (report)."""
    if len(responses) > len(items):
        raise U2BenchReleaseError(f"{ds.task_type}/{ds.dataset}: {len(responses)} results for {len(items)} rows")
    truths = [it.truth for it in items[: len(responses)]]
    row = {"task_type": ds.task_type, "dataset": ds.dataset, "u2_task": u2_task(ds.task_type, ds.dataset),
           "n": len(responses)}
    if ds.task_type == "cla":
        return {**row, "metric": "accuracy", "value": U.classification_accuracy(responses, truths),
                "n_scored": _counted_cla(responses, truths)}
    if ds.task_type == "seg":
        return {**row, "metric": "accuracy", "value": U.localization_accuracy(responses, truths),
                "n_scored": sum(isinstance(p, str) for p in responses)}
    if ds.task_type == "measurement":
        if ds.dataset not in U.CVE_RANGES:
            return {**row, "metric": "rmse", "value": None, "n_scored": 0,
                    "note": "the kit has no fixed range for this dataset (MIN_MAX_DICT); not scored"}
        res = U.cve_rmse(responses, truths, ds.dataset)
        return {**row, "metric": "rmse", "value": res["rmse"], "n_scored": res["n"], "failed": res["failed"]}
    pairs = [(p, g) for p, g in zip(responses, truths) if isinstance(p, str) and isinstance(g, str)]
    value = U.bleu4([p for p, _ in pairs], [g for _, g in pairs]) if pairs else None
    return {**row, "metric": "bleu4", "value": value, "n_scored": len(pairs)}


def _table_rows(rows: Sequence[dict]) -> dict[str, dict[str, float]]:
    per: dict[str, dict[str, float]] = {}
    for r in rows:
        if r["u2_task"] is not None and r["value"] is not None:
            per.setdefault(r["u2_task"], {})[r["dataset"]] = float(r["value"])
    return per


def kit_table_score(rows: Sequence[dict]) -> tuple[float, list[str]]:
    """The U2-Score the kit's own scripts give: each `eval_func` script writes its datasets' values to a results
    file rounded as there (acc and RMSE ".4f", BLEU-4 x 100 ".2f"; a cla or seg dataset without a value has no row;
    a NaN RMSE is written "nan"), the table script reads the files with pandas (an all-numeric task_id column comes
    back as integers: "04" -> "4"), averages per task, clips, weights and rounds to 4 decimals.

    Returns the score and the datasets that dropped out on the way (ids the table no longer recognises)."""
    import pandas as pd

    means: dict[str, float] = {}
    dropped: list[str] = []
    for task_type, tasks in _KIT_FILES.items():
        mine = [r for r in rows if r["task_type"] == task_type and r["value"] is not None
                and (task_type == "measurement" or math.isfinite(float(r["value"])))]
        scale, fmt = (100.0, "{:.2f}") if task_type == "report" else (1.0, "{:.4f}")
        text = "task_id\tvalue\n" + "".join(f"{r['dataset']}\t{fmt.format(float(r['value']) * scale)}\n" for r in mine)
        table = pd.read_csv(io.StringIO(text), sep="\t")
        table["task_id"] = table["task_id"].astype(str)
        read_ids = list(table["task_id"])
        dropped += [f"{r['task_type']}/{r['dataset']}" for r, rid in zip(mine, read_ids)
                    if r["u2_task"] is not None and rid != r["dataset"]]
        for task in tasks:
            vals = table[table["task_id"].isin(U.U2_DATASETS[task])]["value"]
            if task == "CVE":
                vals = vals.replace([math.inf, -math.inf], math.nan).dropna()
            means[task] = float(vals.mean()) / scale if not vals.empty else 0.0
    scores = {t: (1.0 - means[t]) if t == "CVE" else means[t] for t in U.U2_WEIGHTS}
    total = sum(U.U2_WEIGHTS[t] * max(0.0, min(1.0, scores[t])) for t in U.U2_WEIGHTS)
    return round(total, 4), dropped


def summarize(rows: Sequence[dict], model: str) -> dict:
    """The scores.json payload from per-dataset rows: per U2 task, task scores, the U2-Score(s)."""
    per = _table_rows(rows)
    present = sorted(per, key=list(U.U2_WEIGHTS).index)
    kit_score, dropped = kit_table_score(rows)
    return {
        "benchmark": "U2-Bench", "kit": KIT, "model": model, "datasets": list(rows), "per_dataset": per,
        "task_scores": U.task_scores(per), "u2_score": U.u2_score(per),
        "u2_score_present_tasks": U.u2_score(per, renormalize=True) if present else None,
        "tasks_present": present, "u2_score_kit_table": kit_score, "kit_table_dropped": dropped,
        "not_in_u2_score": [f"{r['task_type']}/{r['dataset']}" for r in rows if r["u2_task"] is None],
    }


def score_results(out: str | Path, datasets: Sequence[KitDataset], model: str) -> dict:
    """Score a model's kit-layout results (any model's) against the release's truths."""
    return summarize([score_dataset(ds, read_items(ds), read_kit_results(out, ds, model)) for ds in datasets], model)


# ------------------------------------------------------------------------------------------------ running

def run_u2bench(load_model: Callable[[], Any] | None, release: str | Path, out: str | Path, *,
                model_name: str = "UMind", task_types: Sequence[str] | None = None,
                datasets: Sequence[str] | None = None, limit: int | None = None, batch_size: int = 8,
                max_new_tokens: int = 256, grounded: bool = True, progress: bool = True) -> dict:
    """Check every row of the release, then load the model, answer each dataset, write its layout and score it.

    `load_model()` gives a UMindVL or a ready Predictor; it is called only once the release has been read without
    error (a malformed release costs no model load). None scores the results already in `out` (any model's).
    Datasets are read one at a time while running, so only one dataset's images are in memory."""
    model_name = safe_model_name(model_name)
    found = find_datasets(release, task_types, datasets)
    total = 0
    for ds in found:  # every row and image header checked before any model work
        checked = read_items(ds)[:limit] if limit else read_items(ds)
        for it in checked:
            load_image(it, ds.tsv, header_only=True)
        total += len(checked)
    t0 = time.perf_counter()
    counts: dict[str, int] = {}
    predictor, bar = None, None
    if load_model is not None:
        from ..inference.predictor import Predictor

        model = load_model()
        predictor = model if isinstance(model, Predictor) else Predictor(
            model, max_new_tokens=max_new_tokens, batch_size=batch_size)
        if progress:
            from tqdm.auto import tqdm

            bar = tqdm(total=total, desc="umind u2bench", unit="row")
    rows = []
    try:
        for ds in found:
            items = read_items(ds)[:limit] if limit else read_items(ds)
            if predictor is not None:
                answers = answer_items(predictor, ds, items, grounded=grounded,
                                       on_chunk=None if bar is None else bar.update)
                write_kit_results(out, ds, model_name, items, answers)
                for a in answers:
                    counts[a.how] = counts.get(a.how, 0) + 1
            rows.append(score_dataset(ds, items, read_kit_results(out, ds, model_name)))
    finally:
        if bar is not None:
            bar.close()
    scores = summarize(rows, model_name)
    scores.update(release=str(Path(release)), answers_mapped=counts, seconds=round(time.perf_counter() - t0, 2),
                  rows=total, limit=limit)
    return scores


#: the U2-Score as the kit's table script (gurenolun/Dolphin-ai-bench `update_table_score_format.py`) defines it
U2_FORMULA = ("U2-Score = sum of w_t x s_t / sum of w_t, weights DD .20, VRA .20, LL .07, OD .27, KD .07, CVE .07, "
              "RG .08, CG .04; s_t the task's mean over its datasets clipped to [0, 1], s_CVE = 1 - mean RMSE")


def headline(scores: dict) -> str:
    """The one number a run reports first: the U2-Score over the tasks that were run (the kit's weights, divided by
    their sum), since the all-eight score counts a task not run as 0 (and a CVE not run as a perfect 1)."""
    present = scores["tasks_present"]
    if not present:
        return "U2-Score: no task of the published table was run"
    value = scores["u2_score_present_tasks"]
    if len(present) == len(U.U2_WEIGHTS):
        return f"U2-Score {value:.4f} (all eight tasks)"
    return (f"U2-Score over the {len(present)} tasks run ({', '.join(present)}) {value:.4f}; "
            f"the kit's all-eight formula would give {scores['u2_score']:.4f}, counting the tasks not run")


def _fmt(v: Any, digits: int = 4) -> str:
    return "–" if v is None or (isinstance(v, float) and not math.isfinite(v)) else f"{v:.{digits}f}"


def write_scores(out: str | Path, scores: dict) -> dict[str, Path]:
    """DIR/scores.json (everything) and DIR/report.md (the U2-Score, task scores and per-dataset values)."""
    from .report import to_jsonable

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"scores": out / "scores.json", "report": out / "report.md"}
    write_text(paths["scores"], json.dumps(to_jsonable(scores), indent=2, ensure_ascii=False) + "\n")
    lines = [f"# U2-Bench: {scores['model']}", "",
             f"Release `{scores.get('release')}`, scored with the definitions of {scores['kit']}.", "",
             (f"- U2-Score over the tasks run ({', '.join(scores['tasks_present']) or 'none'}): "
              f"**{_fmt(scores['u2_score_present_tasks'])}** ({U2_FORMULA}, the sums over the tasks run)"),
             (f"- The kit's formula over all eight tasks, as its table computes it: {_fmt(scores['u2_score'])}"
              + ("" if len(scores["tasks_present"]) == len(U.U2_WEIGHTS) else
                 " (a task not run scores 0 and a CVE not run 1, so this is not comparable with the published table)")),
             (f"- As the kit's own scripts compute it (rounded results files): {_fmt(scores['u2_score_kit_table'])}"
              + (f"; they drop {', '.join(scores['kit_table_dropped'])} (numeric ids read back as numbers)"
                 if scores["kit_table_dropped"] else "")), "",
             "| Task | Weight | Score | Datasets |", "|---|---|---|---|"]
    for task, w in U.U2_WEIGHTS.items():
        ds = scores["per_dataset"].get(task, {})
        lines.append(f"| {task} | {w:.2f} | {_fmt(scores['task_scores'][task])} | {', '.join(ds) or '–'} |")
    lines += ["", "| Task type | Dataset | U2 task | Metric | Value | Rows | Scored |", "|---|---|---|---|---|---|---|"]
    for r in scores["datasets"]:
        lines.append(f"| {r['task_type']} | {r['dataset']} | {r['u2_task'] or '–'} | {r['metric']} | "
                     f"{_fmt(r['value'])} | {r['n']} | {r['n_scored']} |")
    notes = []
    if scores.get("answers_mapped"):
        notes.append("Answers mapped to the kit's format: "
                     + ", ".join(f"{k} {v}" for k, v in sorted(scores["answers_mapped"].items())) + ".")
    if scores["not_in_u2_score"]:
        notes.append(f"Not in the published table, so not in the U2-Score: {', '.join(scores['not_in_u2_score'])}.")
    if scores.get("limit"):
        notes.append(f"Only the first {scores['limit']} rows per dataset were run (the kit's cla scorer refuses "
                     "result files shorter than their TSV).")
    if scores.get("seconds") is not None:
        notes.append(f"{scores.get('rows')} rows in {scores['seconds']} s.")
    text = "\n".join(lines) + "\n" + ("\n" + "\n\n".join(notes) + "\n" if notes else "")
    write_text(paths["report"], text)
    return paths
