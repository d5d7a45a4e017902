"""A model on the held-out part of the real data in ../shared/data, scored by the figures its goals are set in.

The held-out part is the `test` split of `umind import hc18|busi ... --split test=0.2 --split-seed 0` (HC18: whole
subjects, 104 of 564; BUSI: 112 of 546 images), the split `scripts/train_demo_model4.sh` makes once and never
trains on. Everything goes through the Predictor, as a user's script would:

* HC18: the fetal head segmented ("fetal head"), Dice against the filled annotation per image, how many masks are
  empty, and the head circumference read off the mask ("head circumference": the perimeter of its moment
  ellipse, mm from the record's pixel size) against the sonographer's value (mean absolute difference, as HC18
  scores it), with 95% bootstrap intervals over subjects;
* BUSI: the finding asked as a user asks it with no context (`predict("diagnose")`: "Is the finding in this
  ultrasound image normal, benign or malignant?", one of the wordings training uses), accuracy over the three classes, benign
  vs malignant on the images that have a lesion, lesion vs normal, and the majority-class baseline of the split;
  and each class's score (the likelihood of its answer, `evaluation.class_scores`): the forced choice's
  accuracies and the areas under the ROC curve for benign vs malignant and lesion vs normal.

    .venv/bin/python benchmarks/real_heldout.py --work /work/demo4 --model <folder> --out result.json

`--work` holds (or receives) the imports; without ../shared/data the script says so and exits 2.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
SPLIT = ["--split", "test=0.2", "--split-seed", "0"]


def held_out(work: Path, name: str) -> Path:
    """The test split's manifest of one data set, imported once into `work`."""
    out = work / name
    if not (out / "test.jsonl").is_file():
        subprocess.run([sys.executable, "-m", "umind_core.cli", "import", name, str(DATA / name), "--out", str(out),
                        *SPLIT], check=True)
    return out / "test.jsonl"


def _frame(record):
    from umind_core.imageio import Frame

    spacing = tuple(float(v) for v in record.spacing) if record.spacing else None
    return Frame(pixels=record.load_image(), spacing=spacing, index=0, source=record.id)


def _interval(values, groups, rng, n=2000) -> list[float]:
    """95% bootstrap interval of the mean, resampling whole groups (subjects)."""
    by = {}
    for v, g in zip(values, groups):
        by.setdefault(g, []).append(v)
    keys = list(by)
    means = []
    for _ in range(n):
        pick = rng.integers(0, len(keys), len(keys))
        vals = [v for i in pick for v in by[keys[i]]]
        means.append(float(np.mean(vals)))
    return [round(float(np.percentile(means, 2.5)), 4), round(float(np.percentile(means, 97.5)), 4)]


def read_head(predictor, frame) -> tuple[np.ndarray, float | None, float]:
    """What the model reads of a fetal head on `frame`, as a user asks it: the mask (the union of the segmented
    objects' masks; all False when none), the head circumference read off it (mm with the frame's spacing; None when
    none) and the segment call's seconds (the image set beforehand, not counted)."""
    predictor.set_image(frame)
    t0 = time.perf_counter()
    seg = predictor.predict("segment", "fetal head")
    seconds = time.perf_counter() - t0
    masks = [o.mask for o in seg.objects if o.mask is not None]
    mask = np.any(np.stack(masks), axis=0) if masks else np.zeros(frame.pixels.shape[:2], bool)
    hc = predictor.predict("measure", "head circumference")
    found = [o.physical["perimeter"] for o in hc.objects if o.physical and o.physical.get("perimeter")]
    return mask, (float(found[0]) if found else None), seconds


def hc18(predictor, manifest: Path) -> dict:
    from umind_core.data.manifest import read_manifest
    from umind_core.evaluation.metrics import mask_dice

    dice, empty, hc_diff, groups, t_seg, rows = [], 0, [], [], [], []
    records = read_manifest(manifest)
    for rec in records:
        truth = rec.load_masks()[0]
        pred, hc, seconds = read_head(predictor, _frame(rec))
        t_seg.append(seconds)
        empty += int(not pred.any())
        dice.append(mask_dice(pred, truth > 0))
        groups.append(rec.extra.get("group") or rec.id)
        truth_hc = rec.annotations.measurements.get("HC mm")
        hc_diff.append(hc - truth_hc if hc is not None and truth_hc else None)  # signed, mm
        rows.append({"id": rec.id, "dice": round(float(dice[-1]), 4), "truth_hc_mm": truth_hc,
                     "hc_mm": round(hc, 2) if hc is not None else None})
    signed = [d for d in hc_diff if d is not None]
    rng = np.random.default_rng(0)
    scored = [(abs(d), g) for d, g in zip(hc_diff, groups) if d is not None]
    return {"images": len(records), "subjects": len(set(groups)),
            "dice_mean": round(float(np.mean(dice)), 4), "dice_ci95": _interval(dice, groups, rng),
            "dice_median": round(float(np.median(dice)), 4), "empty_masks": empty,
            "dice_lowest": sorted((round(float(d), 4), r.id) for d, r in zip(dice, records))[:8],
            "hc_mad_mm": round(float(np.mean([e for e, _ in scored])), 3) if scored else None,
            "hc_mad_ci95": _interval([e for e, _ in scored], [g for _, g in scored], rng) if scored else None,
            "hc_missing": len(hc_diff) - len(scored),
            # the median and the sign say whether a few heads or a bias make the mean
            "hc_median_abs_mm": round(float(np.median(np.abs(signed))), 3) if signed else None,
            "hc_mean_signed_mm": round(float(np.mean(signed)), 3) if signed else None,
            "segment_p50_s": round(float(np.median(t_seg)), 4), "per_image": rows}


def busi(predictor, manifest: Path) -> dict:
    from umind_core.data.manifest import read_manifest
    from umind_core.evaluation.class_scores import class_scores
    from umind_core.answers.findings import answer_finding
    from umind_core.prompts import build_user_text

    truth, said, scores = [], [], []
    question = build_user_text("diagnose")  # what predict("diagnose") asks; a prompt would be appended as context
    for rec in read_manifest(manifest):
        predictor.set_image(_frame(rec))
        said.append(answer_finding(predictor.predict("diagnose").answer or ""))
        scores.append(class_scores(predictor.model, rec.load_image(), question))
        truth.append(rec.annotations.diagnosis)
    pairs = list(zip(truth, said))

    def acc(rows):
        return round(sum(t == s for t, s in rows) / len(rows), 4) if rows else None

    lesion = [(t, s) for t, s in pairs if t in ("benign", "malignant")]
    majority = max(set(truth), key=truth.count)
    return {"images": len(pairs), "by_class": {c: truth.count(c) for c in sorted(set(truth))},
            "three_class_accuracy": acc(pairs), "majority_baseline": round(truth.count(majority) / len(truth), 4),
            "benign_vs_malignant": acc(lesion),
            "lesion_vs_normal": acc([(t == "normal", s == "normal") for t, s in pairs]),
            "unanswered": sum(s is None for s in said),
            "confusion": _confusion(pairs), "class_scores": _scored(truth, scores)}


def _scored(truth: list[str], scores: list[dict]) -> dict:
    """The class scores' figures: the forced choice (argmax) accuracies and the areas under the ROC curve, benign
    vs malignant by P(malignant) / (P(benign) + P(malignant)) on the lesion images, lesion vs normal by
    1 - P(normal)."""
    from umind_core.evaluation.class_scores import auc

    forced = [max(s, key=s.get) for s in scores]
    lesion = [i for i, t in enumerate(truth) if t in ("benign", "malignant")]

    def acc(idx, same):
        return round(sum(same(truth[i], forced[i]) for i in idx) / len(idx), 4) if idx else None

    def rnd(v):
        return None if v is None else round(v, 4)

    every = range(len(truth))
    return {"forced_three_class_accuracy": acc(every, lambda t, f: t == f),
            "forced_benign_vs_malignant": acc(lesion, lambda t, f: t == f),
            "forced_lesion_vs_normal": acc(every, lambda t, f: (t == "normal") == (f == "normal")),
            "auc_benign_vs_malignant": rnd(auc([scores[i]["malignant"] / max(1e-12, scores[i]["malignant"] +
                                                                          scores[i]["benign"]) for i in lesion],
                                           [truth[i] == "malignant" for i in lesion])),
            "auc_lesion_vs_normal": rnd(auc([1 - s["normal"] for s in scores], [t != "normal" for t in truth])),
            "per_image": [{"truth": t, **{k: round(v, 4) for k, v in s.items()}} for t, s in zip(truth, scores)]}


def _confusion(pairs) -> dict:
    """truth -> what was said -> count (None: the answer named no class)."""
    said = sorted({s for _, s in pairs}, key=str)
    return {t: {str(s): sum(1 for tt, ss in pairs if (tt, ss) == (t, s)) for s in said}
            for t in sorted({t for t, _ in pairs})}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", required=True, type=Path, help="folder for the imports (made once)")
    ap.add_argument("--model", help="a UMind folder (default: the bundled demo model)")
    ap.add_argument("--out", required=True, type=Path, help="result JSON")
    args = ap.parse_args(argv)
    if not DATA.is_dir():
        print(f"real_heldout: {DATA} is not there (see the README of ../shared/data); nothing to score",
              file=sys.stderr)
        return 2
    from umind_core.atomic import write_text
    from umind_core.demo import load_model
    from umind_core.inference.predictor import Predictor

    predictor = Predictor(load_model(args.model))
    t0 = time.perf_counter()
    result = {"model": args.model or "demo", "hc18": hc18(predictor, held_out(args.work, "hc18")),
              "busi": busi(predictor, held_out(args.work, "busi"))}
    result["seconds"] = round(time.perf_counter() - t0, 1)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_text(args.out, json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
