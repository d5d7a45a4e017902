"""Do an examination's views hold more than its best view? Each view read alone, then combined.

The exam reading's goal is to beat the single best view by 0.05 on benign/malignant. That can only happen
where the views disagree in a way that carries information. This reads every view of each held-out examination
alone (`diagnose`), the whole exam in one prompt (`predict_exam`), and scores: the exam reading, the best view
(`exams.best_view`), a majority of the views' answers (ties to the best view) and "malignant if any view says so",
with how often the views' answers agree at all.

    .venv/bin/python benchmarks/exam_view_fusion.py --manifest EXAMS/manifest.jsonl [--model DIR] [--out FILE]
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CLASSES = ("benign", "malignant")


def readings(model, exams) -> list[dict]:
    from umind_core.evaluation.exams import best_view, exam_frames
    from umind_core.evaluation.runner import parse_diagnosis
    from umind_core.inference.predictor import Predictor

    predictor = Predictor(model)
    rows = []
    for exam in exams:
        truth = (exam.annotations.diagnosis or "").strip().lower()
        if truth not in CLASSES:
            continue
        frames = exam_frames(exam)
        views = []
        for frame in frames:
            predictor.set_image(frame)
            views.append(parse_diagnosis(predictor.predict("diagnose").answer))
        predictor.set_exam(frames)
        rows.append({"id": exam.id, "truth": truth, "views": views, "best": best_view(exam),
                     "exam": parse_diagnosis(predictor.predict_exam("diagnose").answer)})
    return rows


def fused(row: dict) -> dict[str, str | None]:
    best = row["views"][row["best"]]
    votes = collections.Counter(v for v in row["views"] if v in CLASSES).most_common()
    majority = best if not votes or (len(votes) > 1 and votes[0][1] == votes[1][1]) else votes[0][0]
    any_malignant = "malignant" if "malignant" in row["views"] else ("benign" if "benign" in row["views"] else best)
    return {"exam": row["exam"], "best_view": best, "majority": majority, "any_malignant": any_malignant}


def main(argv=None) -> int:
    from umind_core import demo
    from umind_core.atomic import write_text
    from umind_core.data.manifest import read_manifest

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--manifest", required=True, type=Path)
    ap.add_argument("--model", type=Path, default=None, help="a UMind folder (default: the bundled demo model)")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    model = demo.load_model(args.model)
    exams = [r for r in read_manifest(args.manifest) if hasattr(r, "images")]
    rows = readings(model, exams)
    picks = [fused(r) for r in rows]
    accuracy = {k: round(sum(p[k] == r["truth"] for p, r in zip(picks, rows)) / max(1, len(rows)), 4)
                for k in picks[0]} if rows else {}
    agree = sum(len({v for v in r["views"] if v in CLASSES}) <= 1 for r in rows)
    out = {"model": str(args.model or "bundled demo model"), "manifest": str(args.manifest), "exams": len(rows),
           "accuracy": accuracy, "views_agree_on_the_class": agree, "rows": rows}
    if args.out:
        write_text(args.out, json.dumps(out, indent=1))
    print(json.dumps({k: out[k] for k in ("exams", "accuracy", "views_agree_on_the_class")}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
