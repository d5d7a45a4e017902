"""The annotation loop, measured: does a simulated annotator's correction make the served model better on a
scanner it never saw, without making it worse anywhere else?

One run (docs/annotation-loop.md; each run's account in the NOTES.md beside its results):
1. data: a pool of images of the generator's held-out appearance `scanner_b` (another probe geometry per site,
   speckle size and density, log curve, gain/TGC, lesion echogenicity, noise: umind_core/data/synthetic.py
   APPEARANCES), a fixed test split of the same appearance, and the default appearance's held-out seeds
   1,000,000+ (the model card's evaluation set), none of them ever trained on;
2. for each strategy (`umind_uncertainty`, `random`), a fresh `monailabel start_server` on the pool with the
   demo model and `retrain_every K`; the annotator asks the strategy for the next image, saves its ground truth
   over HTTP (label map + label_names, landmarks and calipers as markups, the finding), and after every K labels
   the server retrains by itself; the benchmark waits, reads the run record (gate table, times) and scores the
   served version on the test split (all tasks) and on the default-appearance set;
3. before the loop, the start model's uncertainty signals on a sample of the pool against its true IoU
   (Spearman), to see which signal ranks errors;
4. writes results.json (after every round, so a stopped run keeps what it measured; with each test image's scores),
   table.md (with each round's new-domain change from the start and its 95% paired bootstrap interval) and
   loop.png.

On real scans (`--real hc18`, the loop on real data): the pool is a seeded draw of the training split of HC18 from
../shared/data (imported and split by subject as benchmarks/real_heldout.py does), the test set a fixed spread of
its held-out subjects (never in any pool), the annotator's corrections are the sonographers' outlines filled to a
"fetal head" mask, the start model is `--model` (demo model 3 has never seen a real image), and the table adds the
fetal head Dice and the head circumference's mean absolute difference (mm), each with its paired interval. The
default-appearance synthetic set and the gate's suite still show what the synthetic sites kept. `--real busi` is the
same on BUSI's breast images, whose corrections in this copy are the finding alone (normal, benign, malignant; no
lesion masks): the test set's diagnosis accuracy is the column to read.

    .venv/bin/python benchmarks/bench_annotation_loop.py --real hc18 --model /path/to/demo_model3 --k 20 \
        --max-labels 40 --pool-seed 0 --out benchmarks/results/annotation_loop_hc18/run0
"""

from __future__ import annotations

import argparse
import io
import json
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import requests

from umind_core.testing.server import start_server

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT / "monailabel_app") not in sys.path:
    sys.path.insert(0, str(ROOT / "monailabel_app"))
from lib.wire import FINDING, LABEL_NAMES, LANDMARK_TARGET, MARKUPS  # noqa: E402  the label info keys' one owner

POOL_SEED0, TEST_SEED0, DEFAULT_TEST_SEED0 = 6_000_000, 7_000_000, 1_000_000
TARGETS = ("breast lesion", "thyroid nodule", "kidney", "fetal head")
#: real data set -> the targets its corrections teach (what umind_uncertainty scores the pool on)
REAL_TARGETS = {"hc18": ("fetal head",), "busi": ("breast lesion",)}
REPORTED = [("segmentation_miou", "segment mIoU", "score"), ("detection_recall", "detect recall", "score"),
            ("detection_f1", "detect F1", "score"), ("keypoint_error_rel_width", "keypoint err", "error"),
            ("measurement_rel_error", "caliper err", "error"), ("diagnosis_accuracy", "diagnosis acc", "score"),
            ("refusal_accuracy", "refusal acc", "score")]


# ------------------------------------------------------------------------------------------------ data
def make_data(out: Path, pool: int, test: int, default_test: int) -> dict[str, Path]:
    from umind_core.data.manifest import write_synthetic_dataset

    sets = {"pool": (pool, POOL_SEED0, "scanner_b"), "test": (test, TEST_SEED0, "scanner_b"),
            "default_test": (default_test, DEFAULT_TEST_SEED0, "default")}
    paths = {}
    for name, (n, seed0, look) in sets.items():
        if not n:
            continue
        manifest = out / name / "manifest.jsonl"
        if not manifest.is_file():
            write_synthetic_dataset(out / name, n, seed0=seed0, appearance=look, progress=True)
        paths[name] = manifest
    return paths


def make_real_data(out: Path, name: str, pool: int, test: int, default_test: int,
                   pool_seed: int) -> dict[str, Path]:
    """The real loop's sets: `pool` training-split images drawn with `pool_seed`, `test` held-out images spread
    evenly over the held-out split (the same for every run and seed), and the synthetic default-look set. The
    subsets are manifests beside the import's own, so their relative paths hold."""
    from real_heldout import held_out

    test_all = held_out(out, name)
    train_lines = (test_all.parent / "train.jsonl").read_text().splitlines()
    test_lines = test_all.read_text().splitlines()
    rng = np.random.default_rng(pool_seed)
    picked = sorted(rng.choice(len(train_lines), size=min(pool, len(train_lines)), replace=False))
    spread = np.linspace(0, len(test_lines) - 1, num=min(test, len(test_lines))).round().astype(int)
    paths = {"pool": test_all.parent / f"loop_pool{pool}_seed{pool_seed}.jsonl",
             "test": test_all.parent / f"loop_test{test}.jsonl"}
    paths["pool"].write_text("".join(train_lines[i] + "\n" for i in picked))
    paths["test"].write_text("".join(test_lines[i] + "\n" for i in sorted(set(spread))))
    paths["default_test"] = make_data(out, 0, 0, default_test)["default_test"]
    return paths


def annotation(rec) -> tuple[bytes, dict]:
    """The ground truth of one pool record as an annotator's submission: label map PNG + label info."""
    from PIL import Image

    from umind_core.answers.findings import FINDINGS
    from umind_core.painter import LabelPainter

    masks = rec.load_masks()
    painter = LabelPainter(rec.load_image().shape[:2])  # a normal scan may have no object at all
    markups, target = [], ""
    for obj, mask in zip(rec.annotations.objects, masks):
        if mask is not None:
            painter.paint(obj.label, mask)
        else:
            painter.value(obj.label)
        for kp in obj.keypoints:  # a PNG's LPS is its pixel grid (spacing 1, origin 0)
            target = obj.label
            markups.append({"type": "Fiducial", "name": kp.name, "coordinateSystem": "LPS",
                            "controlPoints": [{"label": kp.name, "position": [kp.xy[0], kp.xy[1], 0.0]}]})
        for line in obj.lines:
            x1, y1, x2, y2 = line.xy
            markups.append({"type": "Line", "name": line.name, "coordinateSystem": "LPS", "controlPoints": [
                {"label": "1", "position": [x1, y1, 0.0]}, {"label": "2", "position": [x2, y2, 0.0]}]})
    buf = io.BytesIO()
    Image.fromarray(painter.labels()).save(buf, format="PNG")
    info = {LABEL_NAMES: painter.values, LANDMARK_TARGET: target}
    if markups:
        info[MARKUPS] = {"@schema": "https://raw.githubusercontent.com/slicer/slicer/main/Modules/Loadable/"
                                      "Markups/Resources/Schema/markups-schema-v1.0.3.json#", "markups": markups}
    if rec.annotations.diagnosis in FINDINGS:
        info[FINDING] = rec.annotations.diagnosis
    return buf.getvalue(), info


# ------------------------------------------------------------------------------------------ scoring
def evaluate_version(workdir: Path, version: int, manifests: dict[str, Path],
                     splits=("test", "default_test"), start_model: Path | None = None) -> dict[str, dict]:
    """Version 0 is the start model (`start_model`, else the bundled demo model)."""
    from umind_core import demo
    from umind_core.modeling.umind import UMindVL

    model = demo.load_model(start_model) if version == 0 else \
        UMindVL.from_pretrained(workdir / "versions" / f"{version:04d}" / "model")
    return evaluate_model(model, manifests, splits)


def evaluate_model(model, manifests: dict[str, Path], splits=("test", "default_test")) -> dict[str, dict]:
    """Every task's summary on each split, with the per-sample values the paired intervals need."""
    from umind_core.evaluation.runner import EVAL_TASKS, evaluate

    out = {}
    for name in splits:
        report = evaluate(model, manifests[name], tasks=EVAL_TASKS, progress=False)
        out[name] = {**report.metrics["summary"], "samples": paired_samples(report.samples)}
    return out


def paired_samples(samples: list[dict]) -> dict[str, list]:
    """What a paired bootstrap of the new-domain goals needs, per sample in evaluation order (the same order for
    every version on one split): each segment query's site and per-object IoUs, each detect query's hits and
    misses, each measurement's absolute error in mm (None: nothing measured)."""
    def _mm(v):
        return None if v is None else round(float(v), 3)

    return {"segment": [{"site": s["site"], "ious": [round(float(v), 5) for v in s["ious"]]}
                        for s in samples if s.get("task") == "segment"],
            "detect": [{"tp": int(s["tp"]), "fn": int(s["fn"])} for s in samples if s.get("task") == "detect"],
            "measure": [{"abs_error_mm": _mm(s.get("abs_error_mm"))} for s in samples if s.get("task") == "measure"]}


def _miou(segment: list[dict], idx) -> float:
    """The runner's mIoU (`metrics.mean_over_sites`) of the samples `idx`."""
    from umind_core.evaluation.metrics import mean_over_sites

    per_site: dict[str, list[float]] = {}
    for i in idx:
        per_site.setdefault(segment[i]["site"], []).extend(segment[i]["ious"])
    return mean_over_sites(per_site)


def _recall(detect: list[dict], idx) -> float:
    tp = sum(detect[i]["tp"] for i in idx)
    return tp / max(1, tp + sum(detect[i]["fn"] for i in idx))


def _dice(segment: list[dict], idx) -> float:
    """Mean Dice over the objects of the samples `idx` (Dice = 2 IoU / (1 + IoU) per object)."""
    ious = [v for i in idx for v in segment[i]["ious"]]
    return float(np.mean([2 * v / (1 + v) for v in ious])) if ious else float("nan")


def _mad_mm(measure: list[dict], idx) -> float:
    """Mean absolute difference in mm of the samples `idx` that measured something."""
    errs = [measure[i]["abs_error_mm"] for i in idx if measure[i]["abs_error_mm"] is not None]
    return float(np.mean(errs)) if errs else float("nan")


#: task -> (per-sample list, its statistic): what `change_interval` resamples
CHANGE_METRICS = {"segment": ("segment", _miou), "detect": ("detect", _recall), "dice": ("segment", _dice),
                  "hc_mm": ("measure", _mad_mm)}


def change_interval(start: dict, now: dict, task: str, n_boot: int = 2000, seed: int = 0):
    """(change, low, high): the new-domain goal's change from the start with its 95% paired bootstrap interval
    (images resampled, both versions on the same draw), or None when either run kept no per-sample values.
    Why: 40 test images hold 48 boxes, so one box moves recall by 0.02; a goal judged on a point value alone
    cannot tell a lost box from noise."""
    key, metric = CHANGE_METRICS[task]
    a, b = (start.get("samples") or {}).get(key), (now.get("samples") or {}).get(key)
    if not a or not b or len(a) != len(b):
        return None
    rng = np.random.default_rng(seed)
    full = range(len(a))
    draws = [metric(b, idx) - metric(a, idx) for idx in rng.integers(0, len(a), size=(n_boot, len(a)))]
    lo, hi = np.nanpercentile(draws, [2.5, 97.5])  # a draw with nothing measured on one side has no change
    return metric(b, full) - metric(a, full), float(lo), float(hi)


def signal_study(manifest: Path, n: int, start_model: Path | None = None, targets=TARGETS) -> dict:
    """Spearman of each uncertainty signal of the start model against 1 - true segmentation IoU."""
    from scipy.stats import spearmanr

    from monailabel_app.lib.activelearning.signals import union_mask
    from monailabel_app.lib.activelearning.uncertainty import image_signals
    from umind_core import demo
    from umind_core.data.manifest import read_manifest
    from umind_core.evaluation.metrics import mask_iou
    from umind_core.evaluation.runner import record_frame
    from umind_core.inference.predictor import Predictor

    predictor = Predictor(demo.load_model(start_model))
    rows = []
    for rec in [r for r in read_manifest(manifest) if r.annotations.objects][:n]:  # a normal scan has no IoU
        frame = record_frame(rec)
        gts = rec.load_masks()
        ious = []
        for obj, gt in zip(rec.annotations.objects, gts):
            pred = union_mask(predictor.predict_batch([frame], "segment", obj.label)[0], gt.shape)
            ious.append(mask_iou(pred, gt))
        rows.append({"error": 1.0 - float(np.mean(ious)), **image_signals(predictor, frame, list(targets))})
    out = {"n": len(rows)}
    for key in ("confidence", "flip", "task", "combined"):
        rho, p = spearmanr([r[key] for r in rows], [r["error"] for r in rows])
        out[key] = {"spearman_vs_error": round(float(rho), 3), "p": round(float(p), 4)}
    return out


# ------------------------------------------------------------------------------------------ the loop
def run_strategy(strategy: str, args, manifests: dict[str, Path], out: Path, results: dict) -> None:
    from umind_core.data.manifest import read_manifest

    pool = {r.id: r for r in read_manifest(manifests["pool"])}
    root = args.work / strategy  # the server refuses a workdir inside the source tree
    shutil.rmtree(root, ignore_errors=True)
    studies, workdir = root / "studies", root / "work"
    studies.mkdir(parents=True)
    for rid, rec in pool.items():
        shutil.copyfile(rec.image_path, studies / f"{rid}.png")
    conf = {"workdir": str(workdir), "retrain_every": str(args.k),  # conf values cannot hold spaces (see README)
            "scoring_sample": str(args.scoring_sample), **dict(kv.split("=", 1) for kv in args.train_conf)}
    if args.model:
        conf["model"] = str(args.model.resolve())
    server = start_server(studies, conf, root / "server.log", env={"MONAI_LABEL_AUTO_UPDATE_SCORING": "false"})
    rows = results.setdefault("strategies", {}).setdefault(strategy, [])
    try:
        start = next((r[0] for r in results["strategies"].values() if r and r[0]["labels"] == 0), None)
        rows.append(dict(start) if start else {"labels": 0, "version": 0,
                                               **evaluate_version(workdir, 0, manifests, start_model=args.model)})
        save(out, results)
        labels, picks = 0, []
        while labels < args.max_labels:
            if strategy == "umind_uncertainty":
                requests.post(f"{server.url}/scoring/umind_uncertainty?run_sync=true", json={"targets": list(args.targets)},
                              timeout=3600).raise_for_status()
            for _ in range(args.k):
                pick = requests.post(f"{server.url}/activelearning/{strategy}", json={}, timeout=60).json()
                picks.append(pick["id"])
                data, info = annotation(pool[pick["id"]])
                requests.put(f"{server.url}/datastore/label?image={pick['id']}&tag=final",
                             files={"label": (f"{pick['id']}.png", data)},
                             data={"params": json.dumps(info)}, timeout=60).raise_for_status()
                labels += 1
            job = server.wait_train(args.train_timeout, poll=2.0)
            splits = ("test", "default_test") if labels % args.default_every == 0 else ("test",)
            run = requests.get(f"{server.url}/info/", timeout=30).json()["umind"]["runs"][-1]
            served = requests.get(f"{server.url}/info/", timeout=30).json()["umind"]["current_version"]
            sites: dict[str, int] = {}
            for rid in picks:
                sites[pool[rid].site] = sites.get(pool[rid].site, 0) + 1
            rows.append({"labels": labels, "version": served, "job": job.get("status"), "picked_sites": sites,
                         "run": {k: run.get(k) for k in ("version", "status", "reason", "seconds",
                                                         "seconds_training", "seconds_scoring_served",
                                                         "gate", "n_rehearsal_records", "version_bytes",
                                                         "base_bytes", "notes", "scores_new", "scores_current",
                                                         "scores_start")},
                         **evaluate_version(workdir, served, manifests, splits, start_model=args.model)})
            test = rows[-1]["test"]  # a findings-only test set (BUSI here) has no mIoU, a mask set no accuracy
            shown = "; ".join(f"test {name} {test[key]:.3f}" for key, name in
                              (("segmentation_miou", "mIoU"), ("diagnosis_accuracy", "diagnosis"))
                              if test.get(key) is not None)
            print(f"{strategy}: {labels} labels: run {run.get('version')} {run.get('status')} in "
                  f"{run.get('seconds')} s; {shown or 'nothing scored on the test set'}", flush=True)
            save(out, results)
    finally:
        server.stop()


# ------------------------------------------------------------------------------------------ output
def save(out: Path, results: dict) -> None:
    (out / "results.json").write_text(json.dumps(results, indent=2, default=str))


def fmt(v) -> str:
    return "-" if v is None else f"{v:.3f}"


REGRESSION_SET = "synthetic regression"
SUITE = [REPORTED[0], *REPORTED[2:]]  # the gate scores detection by F1


def served_regression(rows: list[dict]) -> list[dict]:
    """The served version's scores on the gate's seeded regression set after each round, from the run records
    (a promoted run's candidate scores; a rejected run leaves the served version and its scores as they were)."""
    first = next((r["run"]["scores_current"].get(REGRESSION_SET) for r in rows
                  if (r.get("run") or {}).get("scores_current")), None) or {}
    out, served = [], first
    for r in rows:
        run = r.get("run") or {}
        if run.get("status") == "promoted":
            served = (run.get("scores_new") or {}).get(REGRESSION_SET) or served
        out.append(served)
    return out


def regression_vs_start(start: dict, now: dict) -> str:
    """'held', or the tasks worse than at the start beyond the default tolerance, by the point values alone (the
    loop's goal; the gate also weighs each change against its paired noise, which the run record's table shows)."""
    from monailabel_app.lib.trainers.gate import Tolerance, compare, decide

    if not start or not now:
        return "-"
    tol = Tolerance(noise_z=0.0)
    ok, reason = decide({"vs start": compare(start, now, tol)}, tol)
    return "held" if ok else re.sub(r" \(allowed [^)]*\)", "", reason).replace("rejected: ", "")


def fmt_change(interval) -> str:
    return "-" if interval is None else f"{interval[0]:+.3f} [{interval[1]:+.3f}, {interval[2]:+.3f}]"


def real_cells(rows: list[dict], r: dict) -> list[str]:
    """The real loop's own columns: fetal head Dice and head circumference MAD (mm) on the held-out subjects, each
    with its change from the start and the 95% paired interval."""
    first, now = rows[0]["test"], r["test"]
    idx = range(len((now.get("samples") or {}).get("segment") or []))
    dice = _dice(now["samples"]["segment"], idx) if idx else None
    changes = [fmt_change(change_interval(first, now, task)) if r is not rows[0] else "-" for task in ("dice", "hc_mm")]
    hc = now.get("head_circumference_mad_mm")
    return [fmt(dice), changes[0], "-" if hc is None else f"{hc:.1f}", changes[1]]


def write_table(out: Path, results: dict) -> str:
    real = bool(results.get("real"))
    extra_head = " new Dice | Dice change [95%] | new HC MAD mm | HC change mm [95%] |" if real else ""
    lines = []
    for strategy, rows in results.get("strategies", {}).items():
        regression = served_regression(rows)
        lines += [f"### {strategy}", "", "| labels | served | run | retrain s | " +
                  " | ".join(f"new {label}" for _, label, _ in REPORTED[:3]) +
                  " | new mIoU change [95%] | new recall change [95%] |" + extra_head + " " +
                  " | ".join(f"suite {label}" for _, label, _ in SUITE) + " | suite vs start | " +
                  " | ".join(f"default {label}" for _, label, _ in REPORTED) + " |",
                  "|" + "---|" * (4 + 3 + 2 + 4 * real + len(SUITE) + 1 + len(REPORTED))]
        for r, reg in zip(rows, regression):
            run = r.get("run") or {}
            changes = [fmt_change(change_interval(rows[0]["test"], r["test"], task)) if r is not rows[0] else "-"
                       for task in ("segment", "detect")]
            lines.append(f"| {r['labels']} | v{r['version']} | {run.get('status', 'start')} | "
                         f"{run.get('seconds', '-')} | "
                         + " | ".join(fmt(r["test"].get(k)) for k, _, _ in REPORTED[:3]) + " | "
                         + " | ".join(changes + (real_cells(rows, r) if real else [])) + " | "
                         + " | ".join(fmt(reg.get(k)) for k, _, _ in SUITE) + " | "
                         + regression_vs_start(regression[0], reg) + " | "
                         + " | ".join(fmt(r.get("default_test", {}).get(k)) for k, _, _ in REPORTED) + " |")
        lines.append("")
    text = "\n".join(lines)
    (out / "table.md").write_text(text)
    return text


def plot(out: Path, results: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, len(REPORTED), figsize=(3.2 * len(REPORTED), 6), squeeze=False)
    for row, split in enumerate(("test", "default_test")):
        for col, (key, label, _) in enumerate(REPORTED):
            ax = axes[row][col]
            for strategy, rows in results.get("strategies", {}).items():
                xs = [r["labels"] for r in rows if r.get(split, {}).get(key) is not None]
                ys = [r[split][key] for r in rows if r.get(split, {}).get(key) is not None]
                ax.plot(xs, ys, marker="o", label=strategy)
            ax.set_title(f"{'new' if split == 'test' else 'default'}: {label}", fontsize=9)
            ax.set_xlabel("labels")
    axes[0][0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "loop.png", dpi=80)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "annotation_loop")
    p.add_argument("--pool", type=int, default=200)
    p.add_argument("--test", type=int, default=40)
    p.add_argument("--default-test", type=int, default=48)
    p.add_argument("--default-every", type=int, default=20,
                   help="score the default-appearance set after every this many labels (and at the start)")
    p.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "umind-annotation-loop",
                   help="the data and each strategy's server studies and workdir; outside the source tree, which "
                        "the server refuses as a workdir (results.json, table.md and loop.png go to --out)")
    p.add_argument("--k", type=int, default=5)
    p.add_argument("--max-labels", type=int, default=40)
    p.add_argument("--strategies", default="umind_uncertainty,random")
    p.add_argument("--scoring-sample", type=int, default=20,
                   help="pool images one umind_uncertainty run scores (conf scoring_sample)")
    p.add_argument("--signal-sample", type=int, default=0,
                   help="score the start model's uncertainty signals on this many pool images first (0: skip)")
    p.add_argument("--resume", action="store_true", help="keep the strategies already in OUT/results.json")
    p.add_argument("--train-timeout", type=float, default=1800)
    p.add_argument("--real", choices=sorted(REAL_TARGETS), default=None,
                   help="the pool and test set from this real data set in ../shared/data (see the module doc)")
    p.add_argument("--pool-seed", type=int, default=0, help="--real: which training-split images form the pool")
    p.add_argument("--model", type=Path, default=None,
                   help="the start model's folder (the server's conf model; default: the bundled demo model)")
    p.add_argument("--train-conf", nargs="*", default=[],
                   help="conf KEY=VALUE for the server's train parameters (default: the server's own defaults, "
                        "which is what a user gets)")
    args = p.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    args.work.mkdir(parents=True, exist_ok=True)
    if args.real:
        from real_heldout import DATA

        if not DATA.is_dir():
            print(f"bench_annotation_loop: no real data at {DATA} (see ../shared/data/README.md)", file=sys.stderr)
            return 2
        manifests = make_real_data(args.work / "data", args.real, args.pool, args.test, args.default_test,
                                   args.pool_seed)
    else:
        manifests = make_data(args.work / "data", args.pool, args.test, args.default_test)
    args.targets = REAL_TARGETS[args.real] if args.real else TARGETS
    results = {"args": {k: str(v) for k, v in vars(args).items()}, "started": time.strftime("%Y-%m-%d %H:%M"),
               "real": args.real}
    if args.resume and (args.out / "results.json").is_file():  # keep the strategies an earlier run measured
        old = json.loads((args.out / "results.json").read_text())
        results["strategies"] = old.get("strategies", {})
        results["earlier_args"] = old.get("args")
    if args.signal_sample:
        results["signals"] = signal_study(manifests["pool"], args.signal_sample, args.model, args.targets)
        print("signals:", json.dumps(results["signals"]), flush=True)
        save(args.out, results)
    for strategy in [s.strip() for s in args.strategies.split(",") if s.strip()]:  # "": the signal study alone
        run_strategy(strategy, args, manifests, args.out, results)
        write_table(args.out, results)
        plot(args.out, results)
    if results.get("strategies"):
        print(write_table(args.out, results))
        plot(args.out, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
