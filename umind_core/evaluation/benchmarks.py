"""The metrics a source benchmark publishes, computed from `umind eval`'s samples, beside our own report.

UltraBench (adamtupper/ultrabench) only prepares data: its package computes no metric. The numbers published with it
(Tupper & Gagne, TMLR 2025) come from its experiment code, adamtupper/usaugment-experiments
(`src/usaugment/models/segmentation.py`, `classification.py`, `config/task/*.yaml`, torchmetrics 1.4):

- segmentation: `torchmetrics.Dice(ignore_index=0)`, i.e. average="micro", mdmc_average="global": 2 TP / (2 TP + FP +
  FN) over every pixel of the test set pooled, background excluded (a multi-class dataset pools its structures).
  The key metric of every segmentation task ("key_metric: dice").
- classification: Accuracy, Precision, Recall, F1Score (torchmetrics defaults: micro accuracy, macro precision, recall
  and F1 for multi-class) and AveragePrecision, the key metric ("key_metric: avg_precision").

What we report per dataset (the record's `extra["source"]["dataset"]`, written by `importers/ultrabench.py`):
- per structure (the object label) the pooled Dice and IoU and, as a check on outliers, the mean per-image Dice and
  IoU; and the pooled Dice over all structures (the published number). The truth is the union of the image's objects
  of that label, the prediction the union of the answer's masks. Only images where the structure is annotated are
  asked by `umind eval` (an empty mask is a negative and has no object), so negatives add no false positives here;
  torchmetrics over the whole test set would count them.
- classification over the diagnosis samples (benign vs malignant, what `umind eval` asks): accuracy, macro precision,
  recall (= balanced accuracy) and F1 over the classes present in truth or answer, an unparsed answer counting as
  wrong. Average precision needs class scores, which a text answer does not have: reported as null.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = [
    "BENCHMARKS",
    "benchmark_metrics",
    "classification_metrics",
    "record_benchmark",
    "render_benchmark",
    "require_benchmark",
    "segmentation_metrics",
]

BENCHMARKS: tuple[str, ...] = ("ultrabench",)
_SOURCE = {"ultrabench": "adamtupper/usaugment-experiments (UltraBench's published results; torchmetrics 1.4)"}


def record_benchmark(record) -> tuple[str, str] | None:
    """(benchmark, dataset) of a record an importer marked: `extra["source"]["format"]` and `["dataset"]`
    (importers/ultrabench.py), or a flat `extra["source_format"]` / `extra["dataset"]`; None when unmarked."""
    extra = getattr(record, "extra", None) or {}
    source = extra.get("source") if isinstance(extra.get("source"), dict) else {}
    fmt = source.get("format") or extra.get("source_format")
    if not isinstance(fmt, str) or fmt.lower() not in BENCHMARKS:
        return None
    dataset = source.get("dataset") or extra.get("dataset") or "unnamed"
    return fmt.lower(), str(dataset)


def require_benchmark(records: Sequence[Any], benchmark: str, manifest: Any = "the manifest") -> None:
    """`--benchmark NAME` names where the records came from, so a manifest whose records were not imported from NAME
    (`umind import NAME`, which marks each record) is refused in one line naming how many and which: its numbers
    would be published as NAME's when they are not."""
    if benchmark not in BENCHMARKS:
        raise ValueError(f"--benchmark {benchmark!r}: choose auto, none or one of {', '.join(BENCHMARKS)}")
    other = [r.id for r in records if (record_benchmark(r) or ("",))[0] != benchmark]
    if other:
        shown = ", ".join(other[:3]) + (", ..." if len(other) > 3 else "")
        raise ValueError(f"--benchmark {benchmark}: {manifest} is not an import of {benchmark}: {len(other)} of "
                         f"{len(records)} record(s) carry no {benchmark} mark (e.g. {shown}); import the data with "
                         f"`umind import {benchmark}`, or use --benchmark auto")


def _counts(pred: np.ndarray, gt: np.ndarray) -> tuple[int, int, int]:
    p, g = np.asarray(pred, dtype=bool), np.asarray(gt, dtype=bool)
    tp = int(np.count_nonzero(p & g))
    return tp, int(np.count_nonzero(p)) - tp, int(np.count_nonzero(g)) - tp


def _ratio(num: float, den: float) -> float:
    return num / den if den else 1.0  # nothing predicted and nothing there: a correct empty answer


def segmentation_metrics(samples: Sequence[dict]) -> dict[str, Any]:
    """Per structure: pooled Dice / IoU over all its pixels (the benchmark's), mean per-image Dice / IoU; and the
    pooled Dice / IoU over all structures. `samples` are `umind eval` segment samples (with `_pred_mask` and
    `_gt_masks`, the in-memory keys)."""
    per: dict[str, dict[str, Any]] = {}
    total = [0, 0, 0]
    for s in samples:
        gts = s["_gt_masks"]
        gt = np.logical_or.reduce([np.asarray(g, dtype=bool) for g in gts]) if len(gts) > 1 else gts[0]
        tp, fp, fn = _counts(s["_pred_mask"], gt)
        row = per.setdefault(s["label"], {"tp": 0, "fp": 0, "fn": 0, "dice": [], "iou": []})
        row["tp"] += tp
        row["fp"] += fp
        row["fn"] += fn
        row["dice"].append(_ratio(2 * tp, 2 * tp + fp + fn))
        row["iou"].append(_ratio(tp, tp + fp + fn))
        total = [total[0] + tp, total[1] + fp, total[2] + fn]
    structures = {
        label: {"dice": _ratio(2 * r["tp"], 2 * r["tp"] + r["fp"] + r["fn"]),
                "iou": _ratio(r["tp"], r["tp"] + r["fp"] + r["fn"]),
                "mean_image_dice": float(np.mean(r["dice"])), "mean_image_iou": float(np.mean(r["iou"])),
                "n_images": len(r["dice"])}
        for label, r in sorted(per.items())}
    tp, fp, fn = total
    return {"structures": structures, "dice": _ratio(2 * tp, 2 * tp + fp + fn), "iou": _ratio(tp, tp + fp + fn),
            "n_samples": len(samples)}


def classification_metrics(truths: Sequence[str], preds: Sequence[str | None]) -> dict[str, Any]:
    """Accuracy and macro precision / recall (balanced accuracy) / F1 over the classes present in truth or answer
    (torchmetrics' macro leaves out a class with no TP, FP or FN); an unparsed answer (None) is wrong."""
    if len(truths) != len(preds) or not truths:
        raise ValueError(f"classification: {len(preds)} answers for {len(truths)} labels")
    classes = sorted(set(truths) | {p for p in preds if p is not None})
    prec, rec, f1 = [], [], []
    for c in classes:
        tp = sum(t == c and p == c for t, p in zip(truths, preds))
        n_pred = sum(p == c for p in preds)
        support = sum(t == c for t in truths)
        pr = tp / n_pred if n_pred else 0.0
        rc = tp / support if support else 0.0
        prec.append(pr)
        rec.append(rc)
        f1.append(2 * pr * rc / (pr + rc) if pr + rc else 0.0)
    with_support = [r for c, r in zip(classes, rec) if c in set(truths)]
    return {"accuracy": sum(t == p for t, p in zip(truths, preds)) / len(truths),
            "balanced_accuracy": float(np.mean(with_support)), "macro_precision": float(np.mean(prec)),
            "macro_recall": float(np.mean(rec)), "macro_f1": float(np.mean(f1)), "average_precision": None,
            "classes": classes, "n": len(truths), "n_unparsed": sum(p is None for p in preds)}


def benchmark_metrics(samples: Sequence[dict], benchmark: str | None = "auto") -> dict[str, Any] | None:
    """The benchmark section for metrics.json, or None when no sample comes from a known benchmark.

    benchmark="auto" keys off the records' marks; "ultrabench" takes every sample as UltraBench (an unmarked record
    joins dataset "manifest"; `umind eval` refuses such a manifest first, `require_benchmark`); None or "none"
    computes nothing."""
    if benchmark in (None, "none"):
        return None
    if benchmark != "auto" and benchmark not in BENCHMARKS:
        raise ValueError(f"benchmark {benchmark!r}: choose auto, none or one of {', '.join(BENCHMARKS)}")
    groups: dict[tuple[str, str], list[dict]] = {}
    for s in samples:
        mark = record_benchmark(s.get("_record"))
        if benchmark != "auto":
            mark = (benchmark, mark[1] if mark and mark[0] == benchmark else "manifest")
        if mark is not None:
            groups.setdefault(mark, []).append(s)
    if not groups:
        return None
    names = sorted({b for b, _ in groups})
    out: dict[str, Any] = {"name": names[0] if len(names) == 1 else names, "datasets": {}}
    for (bench, dataset), items in sorted(groups.items()):
        seg = [s for s in items if s["task"] == "segment" and "_gt_masks" in s]
        dia = [s for s in items if s["task"] == "diagnose"]
        entry: dict[str, Any] = {"benchmark": bench, "definition": _SOURCE[bench]}
        if seg:
            entry["segmentation"] = segmentation_metrics(seg)
        if dia:
            entry["classification"] = classification_metrics([s["true"] for s in dia], [s["pred"] for s in dia])
        if seg or dia:
            out["datasets"][dataset] = entry
    return out if out["datasets"] else None


def _pct(v: Any) -> str:
    return "–" if v is None else f"{100.0 * v:.1f}"


def render_benchmark(bench: dict[str, Any]) -> str:
    """The report.md section: per dataset, the structures' Dice / IoU and the classification numbers."""
    name = bench["name"] if isinstance(bench["name"], str) else ", ".join(bench["name"])
    lines = [f"## Benchmark metrics ({name})", "",
             "As the benchmark publishes them (pooled over pixels; see metrics.json `benchmark`), in %.", ""]
    for dataset, entry in bench["datasets"].items():
        seg = entry.get("segmentation")
        if seg:
            lines += [f"### {dataset}: segmentation", "",
                      "| Structure | Dice | IoU | Mean image Dice | Mean image IoU | Images |",
                      "|---|---|---|---|---|---|"]
            for label, r in seg["structures"].items():
                lines.append(f"| {label} | {_pct(r['dice'])} | {_pct(r['iou'])} | {_pct(r['mean_image_dice'])} | "
                             f"{_pct(r['mean_image_iou'])} | {r['n_images']} |")
            lines += [f"| all structures | {_pct(seg['dice'])} | {_pct(seg['iou'])} | | | {seg['n_samples']} |", ""]
        cla = entry.get("classification")
        if cla:
            lines += [f"### {dataset}: classification", "",
                      "| Accuracy | Balanced accuracy | Macro-F1 | Macro precision | Average precision | Samples |",
                      "|---|---|---|---|---|---|",
                      (f"| {_pct(cla['accuracy'])} | {_pct(cla['balanced_accuracy'])} | {_pct(cla['macro_f1'])} | "
                       f"{_pct(cla['macro_precision'])} | – (no class scores) | {cla['n']} |"), ""]
    return "\n".join(lines) + "\n"
