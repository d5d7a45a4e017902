"""Does the bf16 path answer what the float32 reference answers? Tokens and masks, side by side.

The faster CPU path for a large model is bf16 weights and arithmetic (`bench_qwen4b_cpu.py`); whether it may be
used depends on what it changes. Two models, each loaded twice (float32 and bfloat16), asked the same questions:

- the bundled demo model (trained weights, the only model here whose answers mean something): every question
  `umind eval` asks of held-out default-look images (segment, detect, keypoints, measure, diagnose); the share of
  answers whose text is identical, the IoU between the two dtypes' masks, and each dtype's score against truth;
- the small layout with Qwen's real 151,936-token vocabulary (`scripts/make_qwen_layout.py --variant small`),
  random weights: its greedy answers to a segment and an open question on `--images` images, token by token;
- with `--qwen4b`, the 4B layout: bf16 (how it is served) against bf16 weights with float32 arithmetic.

`python benchmarks/bench_dtype_agreement.py --work DIR` writes benchmarks/results/dtype_agreement.json; with
`--qwen4b FOLDER` also the 4B layout (`--images 0 --qwen4b FOLDER` adds only that to the existing file).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "dtype_agreement.json"
DTYPES = ("float32", "bfloat16")


def answers(model, records, queries) -> dict:
    """(record, task, prompt) -> Result, each distinct question asked once (the runner's order)."""
    from umind_core.evaluation.runner import record_frame
    from umind_core.inference.predictor import Predictor

    predictor = Predictor(model, readout="tokens")  # the model's own answers: what bf16 may change
    out = {}
    for q in queries:
        if q.key in out:
            continue
        predictor.set_image(record_frame(records[q.record]))
        out[q.key] = predictor.predict(q.predict_task, q.prompt)
    return out


def _pairs(a, b) -> dict[str, list[float]]:
    """What differs between two answers' objects, paired in order: mask IoU, box IoU (`metrics`, their one owner),
    the largest point shift and the relative change of a drawn line's length (pixels)."""
    from umind_core.evaluation.metrics import box_iou, mask_iou

    out: dict[str, list[float]] = {"mask_iou": [], "box_iou": [], "point_shift_px": [], "line_rel_change": []}
    for oa, ob in zip(a.objects, b.objects):
        if oa.mask is not None and ob.mask is not None:
            out["mask_iou"].append(mask_iou(oa.mask, ob.mask))
        if oa.box is not None and ob.box is not None:
            out["box_iou"].append(box_iou(oa.box, ob.box))
        if oa.points and len(oa.points) == len(ob.points):
            out["point_shift_px"].append(max(float(np.hypot(p[0] - q[0], p[1] - q[1]))
                                             for p, q in zip(oa.points, ob.points)))
        if oa.line is not None and ob.line is not None:
            la = float(np.hypot(oa.line[2] - oa.line[0], oa.line[3] - oa.line[1]))
            lb = float(np.hypot(ob.line[2] - ob.line[0], ob.line[3] - ob.line[1]))
            if la > 0:
                out["line_rel_change"].append(abs(lb - la) / la)
    return out


def _spread(values: list[float]) -> dict:
    v = np.asarray(values, float)
    return {"n": int(v.size), "mean": round(float(v.mean()), 4), "p05": round(float(np.percentile(v, 5)), 4),
            "p95": round(float(np.percentile(v, 95)), 4), "min": round(float(v.min()), 4),
            "max": round(float(v.max()), 4)}


def compare(ref: dict, fast: dict) -> dict:
    """Per task: answers with identical text, the same number of objects, and how far paired objects moved."""
    by_task: dict[str, dict] = {}
    for key, a in ref.items():
        b = fast[key]
        row = by_task.setdefault(key[1], {"answers": 0, "same_text": 0, "same_objects": 0, "_pairs": {}})
        row["answers"] += 1
        row["same_text"] += int(a.text == b.text)
        row["same_objects"] += int(len(a.objects) == len(b.objects))
        for name, values in _pairs(a, b).items():
            row["_pairs"].setdefault(name, []).extend(values)
    for row in by_task.values():
        pairs = row.pop("_pairs")
        row["same_text_share"] = round(row["same_text"] / max(1, row["answers"]), 4)
        for name, values in pairs.items():
            if values:
                row[name] = _spread(values)
        if pairs.get("mask_iou"):
            row["masks_iou_ge_099"] = round(float(np.mean(np.asarray(pairs["mask_iou"]) >= 0.99)), 4)
    return by_task


def demo_model(work: Path, n: int, model_dir: str | None = None) -> dict:
    from umind_core import demo
    from umind_core.data.manifest import read_manifest, write_synthetic_dataset
    from umind_core.evaluation.runner import build_queries, evaluate

    folder = work / "default"
    if not (folder / "manifest.jsonl").is_file():
        write_synthetic_dataset(folder, n, seed0=1_000_000, size=256, progress=False)
    records = read_manifest(folder / "manifest.jsonl")
    queries = build_queries(records, ("segment", "detect", "keypoints", "measure", "diagnose"))
    got, truth, seconds = {}, {}, {}
    for dtype in DTYPES:
        model = demo.load_model(model_dir, dtype=dtype)
        t = time.perf_counter()
        got[dtype] = answers(model, records, queries)
        seconds[dtype] = round(time.perf_counter() - t, 1)
        summary = evaluate(model, records, tasks=("segment", "detect", "keypoints", "measure", "diagnose"),
                           progress=False).metrics["summary"]
        truth[dtype] = {k: round(v, 4) for k, v in summary.items()
                        if isinstance(v, float) and not k.startswith("exam_")}
    return {"model": model_dir or "bundled demo model", "images": n, "questions": len(got["float32"]), "agreement": compare(got["float32"], got["bfloat16"]),
            "against_truth": truth, "answer_seconds": seconds}


def layout_answers(model, n: int, max_new_tokens: int) -> tuple[dict, dict]:
    """A random-weight layout's greedy answers to a segment and an open question on `n` test images, and their
    token ids: {(image, task, prompt): Result}, {same key: ids}."""
    from umind_core.inference.predictor import Predictor
    from umind_core.testing.samples import make_image

    predictor = Predictor(model, max_new_tokens=max_new_tokens, readout="tokens")
    rows = {}
    for i in range(n):
        predictor.set_image(make_image(i, height=256, width=256))
        for task, prompt in (("segment", "lesion"), ("ask", "What organ is shown?")):
            rows[(i, task, prompt)] = predictor.predict(task, prompt)
    return rows, {k: model.tokenizer(r.text, add_special_tokens=False)["input_ids"] for k, r in rows.items()}


def first_differences(ids: dict, other: dict) -> list[int]:
    """Where each answer that differs between the two readings first differs (token index); an answer that is a
    prefix of the other's, or equal to it, counts as not differing."""
    first = [next((j for j, (x, y) in enumerate(zip(a, other[k])) if x != y), None) for k, a in ids.items()]
    return [j for j in first if j is not None]


def small_layout(work: Path, n: int, max_new_tokens: int = 16) -> dict:
    """The random small layout (no planted answer): its greedy tokens decided by whatever margins random weights
    leave, the hardest case for agreement; masks are not compared (a random model rarely asks for one, and the
    planted layout's mask logits are exactly 0 in float32, so their sign is rounding)."""
    from umind_core.modeling.umind import UMindVL
    from umind_core.tools import qwen_layout

    folder = work / "Qwen3-VL-small"
    if not (folder / "config.json").is_file():
        shutil.rmtree(folder, ignore_errors=True)
        qwen_layout.write_layout(folder, "small")
        UMindVL.from_pretrained(folder).save_pretrained(work / "umind-small")  # one mask decoder for both dtypes
    got, ids = {}, {}
    for dtype in DTYPES:
        model = UMindVL.from_pretrained(work / "umind-small", dtype=dtype)
        got[dtype], ids[dtype] = layout_answers(model, n, max_new_tokens)
    diverged = first_differences(ids["float32"], ids["bfloat16"])
    return {"images": n, "max_new_tokens": max_new_tokens, "agreement": compare(got["float32"], got["bfloat16"]),
            "first_different_token": {"answers_that_differ": len(diverged),
                                      "mean_position": round(float(np.mean(diverged)), 2) if diverged else None}}


def qwen4b(folder: Path, n: int, max_new_tokens: int = 12) -> dict:
    """Qwen3-VL-4B's layout (random weights: `scripts/make_qwen_layout.py --variant 4b`): the bf16 path this project
    serves it with against bf16 weights with float32 arithmetic (`modeling.speedups.upcast`, the nearest to a float32 reference
    that fits in this machine's memory), the same greedy answers token by token."""
    import gc

    from umind_core.modeling.umind import UMindVL
    from umind_core.modeling.speedups.upcast import compute_in_float32

    got, ids, seconds = {}, {}, {}
    for mode in ("bfloat16", "bf16-weights"):
        model = UMindVL.from_pretrained(folder, dtype="bfloat16")
        if mode == "bf16-weights":
            compute_in_float32(model)
        t = time.perf_counter()
        got[mode], ids[mode] = layout_answers(model, n, max_new_tokens)
        seconds[mode] = round(time.perf_counter() - t, 1)
        del model
        gc.collect()
    diverged = first_differences(ids["bfloat16"], ids["bf16-weights"])
    return {"images": n, "max_new_tokens": max_new_tokens, "seconds": seconds,
            "agreement": compare(got["bf16-weights"], got["bfloat16"]),
            "first_different_token": {"answers_that_differ": len(diverged),
                                      "positions": diverged}}


def main(argv=None) -> int:
    from umind_core.atomic import write_text

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", required=True, type=Path)
    ap.add_argument("--images", type=int, default=40)
    ap.add_argument("--qwen4b", type=Path, default=None,
                    help="also the 4B layout in this folder (bf16 against bf16 weights with float32 arithmetic)")
    ap.add_argument("--qwen4b-images", type=int, default=4)
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--model", default=None, help="UMind folder for the demo model's part (default: the bundled one)")
    args = ap.parse_args(argv)
    args.work.mkdir(parents=True, exist_ok=True)
    # the parts not rerun are kept: the 4B layout's needs weights few machines hold
    result = json.loads(args.out.read_text()) if args.out.is_file() else {}
    if args.images:
        result.update(demo_model=demo_model(args.work, args.images, args.model),
                      small_real_vocabulary=small_layout(args.work, args.images))
    if args.qwen4b:
        result["qwen3_vl_4b"] = qwen4b(args.qwen4b, args.qwen4b_images)
    write_text(args.out, json.dumps(result, indent=1))
    print(json.dumps({k: v["agreement"] for k, v in result.items()}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
