"""Which retraining recipe helps a model that already knows the new scanner? Measured offline, before the loop.

From demo model 2 the annotation loop's 20 labels added nothing on `scanner_b` and lost new-domain boxes
(README "Annotation loop"). This sweep asks why without the server: 20 pool images labeled through the same
path the loop uses (a MONAI Label datastore with label map, markups and finding; `export_datastore`; the
conversation builder; rehearsal), one fresh LoRA adapter per recipe, then scores on

- `tune`: pool images that are not among the 20 (scanner_b), the set recipes are chosen on;
- `default`: default-appearance images (seeds 1,200,000+, never trained on), to see forgetting.

The loop benchmark's fixed test split (seeds 7,000,000+) is never read here, so the loop benchmark that follows
a choice made here is judged on data the choice did not see.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import random
import sys
import time
from pathlib import Path

from bench_annotation_loop import POOL_SEED0, annotation  # a sibling script: benchmarks/ is sys.path[0] when run

ROOT = Path(__file__).resolve().parents[1]

DEFAULT_SEED0 = 1_200_000
KEYS = ("segmentation_miou", "detection_recall", "detection_f1", "keypoint_error_rel_width",
        "measurement_rel_error", "diagnosis_accuracy", "refusal_accuracy")

#: the server's recipe the sweeps before 2026-12-05 varied (rehearsal 2:1 on the default look, LoRA without the
#: vision blocks): a recipe that leaves a data key out takes it from here, so the recorded results stay reproducible
BASE_DATA = {"rehearsal": 2.0, "rehearsal_look": "default", "label_augment": 0.0, "label_copies": 1}
#: name -> (TrainConfig overrides and data keys, LoraSettings overrides); "loop" is BASE_DATA, "server" what
#: `umind_lora` does today (TrainParams' defaults: rehearsal 0.5 on the varied look, the vision blocks adapted)
RECIPES: dict[str, tuple[dict, dict]] = {
    "loop": ({}, {}),
    "server": ({"rehearsal": None, "rehearsal_look": None}, {"vision": None}),
    "lr1e-4": ({"lr": 1e-4}, {}),
    "steps80": ({"max_steps": 80}, {}),
    "decoder_lr1e-3": ({"decoder_lr": 1e-3}, {}),
    "decoder_lr1e-4": ({"decoder_lr": 1e-4}, {}),
    "vision_lora": ({}, {"vision": True}),
    "vision_lora_lr1e-4": ({"lr": 1e-4}, {"vision": True}),
    "no_rehearsal": ({"rehearsal": 0.0}, {}),
    # rehearse on the look demo model 2 trained on (a scanner drawn per image) instead of the default look alone
    "rehearsal_varied": ({"rehearsal_look": "varied"}, {}),
    # less rehearsal per new sample: the new labels are a larger share of every batch
    "rehearsal_half": ({"rehearsal": 0.5}, {}),
    "rehearsal_varied_half": ({"rehearsal": 0.5, "rehearsal_look": "varied"}, {}),
    # from demo model 3 rehearsal was what held the new look back (sweep of 2026-12-05): what else helps without it
    "no_rehearsal_steps80": ({"rehearsal": 0.0, "max_steps": 80}, {}),
    "no_rehearsal_decoder_lr1e-3": ({"rehearsal": 0.0, "decoder_lr": 1e-3}, {}),
    "no_rehearsal_vision_lora": ({"rehearsal": 0.0}, {"vision": True}),
    "no_rehearsal_lr1e-3": ({"rehearsal": 0.0, "lr": 1e-3}, {}),
    "no_rehearsal_full": ({"rehearsal": 0.0, "lr": 1e-4}, {"full": True}),
    "rehearsal_varied_half_vision_lora": ({"rehearsal": 0.5, "rehearsal_look": "varied"}, {"vision": True}),
    # in the loop, 0.5 on the varied look let the default look slip on the gate's suite (keypoints, calipers): the
    # ratio on the default look, judged on that suite itself (--default-seed0 3000000 --default 150)
    "rehearsal_half_vision_lora": ({"rehearsal": 0.5}, {"vision": True}),
    "rehearsal_one_vision_lora": ({"rehearsal": 1.0}, {"vision": True}),
    # the labels' repeats as photometrically augmented copies (not the same pixels every time)
    "augment": ({"label_augment": 0.5}, {"vision": True}),
    "augment_copies6": ({"label_augment": 0.5, "label_copies": 6, "max_steps": 60}, {"vision": True}),
    # only the mask decoder learns (the adapter at a negligible rate): no task but masks can drift
    "decoder_only_1e-3": ({"rehearsal": 0.0, "lr": 1e-9, "decoder_lr": 1e-3}, {"vision": True}),
    "decoder_only_3e-3_steps80": ({"rehearsal": 0.0, "lr": 1e-9, "decoder_lr": 3e-3, "max_steps": 80},
                                  {"vision": True}),
    "no_rehearsal_augment_copies4": ({"rehearsal": 0.0, "label_augment": 0.5, "label_copies": 4}, {"vision": True}),
    # what many labels can buy at all (run with --labels 140): each image seen about 8 times without rehearsal
    "ceiling_no_rehearsal": ({"rehearsal": 0.0, "max_steps": 300}, {}),
    "ceiling": ({"max_steps": 300}, {}),
    "ceiling_no_rehearsal_900": ({"rehearsal": 0.0, "max_steps": 900}, {}),
    # is the ceiling the adapter's? the same 300 steps training every weight, and with LoRA on the vision blocks too
    "ceiling_full": ({"rehearsal": 0.0, "max_steps": 300}, {"full": True}),
    "ceiling_vision_lora": ({"rehearsal": 0.0, "max_steps": 300}, {"vision": True}),
}
#: recipe keys that shape the training set rather than the trainer
DATA_KEYS = ("rehearsal", "rehearsal_look", "label_augment", "label_copies")



def make_sets(out: Path, n_pool: int, n_default: int, default_seed0: int = DEFAULT_SEED0):
    from umind_core.data.manifest import read_manifest, write_synthetic_dataset

    pool_m = out / "pool" / "manifest.jsonl"
    if not pool_m.is_file():
        write_synthetic_dataset(out / "pool", n_pool, seed0=POOL_SEED0, appearance="scanner_b", progress=True)
    name = "default" if default_seed0 == DEFAULT_SEED0 else f"default_{default_seed0}"
    default_m = out / name / "manifest.jsonl"
    if not default_m.is_file():
        write_synthetic_dataset(out / name, n_default, seed0=default_seed0, appearance="default", progress=True)
    return read_manifest(pool_m), read_manifest(default_m)


def build_training_set(picked, out: Path, seed: int, data_keys: dict) -> Path:
    """The loop's own path: datastore labels -> export -> `training_set` (conversations, rehearsal mix), as
    `umind_lora` runs it; `data_keys` are the recipe's DATA_KEYS (rehearsal ratio and look, label copies)."""
    from monailabel.datastore.local import LocalDatastore

    from monailabel_app.lib.conf import TrainParams
    from monailabel_app.lib.trainers.dataset import export_datastore
    from monailabel_app.lib.trainers.rehearsal import training_set

    p = dataclasses.replace(TrainParams(), **data_keys)
    rehearsal, look = p.rehearsal, p.rehearsal_look
    tag = "_".join(str(data_keys[k]) for k in DATA_KEYS)
    studies = out / f"studies_{rehearsal}"
    studies.mkdir(parents=True, exist_ok=True)
    ds = LocalDatastore(str(studies), extensions=("*.png",), auto_reload=False)
    for rec in picked:
        dest = studies / f"{rec.id}.png"
        if not dest.is_file():
            dest.write_bytes(Path(rec.image_path).read_bytes())
    ds.refresh()
    for rec in picked:
        data, info = annotation(rec)
        tmp = out / f"{rec.id}_label.png"
        tmp.write_bytes(data)
        ds.save_label(rec.id, str(tmp), "final", info)
    # the server's default `labels` conf ("lesion"): it names only values the label info leaves unnamed (none here)
    data = export_datastore(ds, out / f"data_{tag}", ("lesion",), p.val_fraction,
                            p.min_val, p.seed)
    manifest, _, _ = training_set(data.train_manifest, data.n_train_records, p, out / f"rehearsal_{look or 'default'}",
                                  seed=seed, appearance=look)
    return manifest


def score(model, sets: dict) -> dict:
    from umind_core.evaluation.runner import evaluate

    out = {}
    for name, (records, tasks) in sets.items():
        report = evaluate(model, records, tasks=tasks, progress=False)
        out[name] = {k: report.metrics["summary"].get(k) for k in KEYS if report.metrics["summary"].get(k) is not None}
        by_target: dict[str, list[float]] = {}
        for sample in report.samples:
            if sample.get("task") == "segment" and sample.get("iou") is not None:
                by_target.setdefault(sample["label"], []).append(float(sample["iou"]))
        out[name]["segment_iou_by_target"] = {k: round(sum(v) / len(v), 4) for k, v in sorted(by_target.items())}
        best = [_best_iou(g, s["pred_boxes"]) for s in report.samples if s.get("task") == "detect"
                for g in s["gt_boxes"]]
        if best:  # how tight the boxes are, below the 0.5 threshold recall counts at
            out[name]["box_best_iou_mean"] = round(sum(best) / len(best), 4)
    return out


def _best_iou(gt, preds) -> float:
    from umind_core.evaluation.metrics import box_iou

    return max((box_iou(gt, p) for p in preds), default=0.0)


def _data_value(name: str, key: str):
    """A recipe's data key: its own, BASE_DATA's when it leaves it out, TrainParams' default when it says None."""
    from monailabel_app.lib.conf import TrainParams

    value = RECIPES[name][0].get(key, BASE_DATA[key])
    return getattr(TrainParams(), key) if value is None else value


def run_recipe(name: str, manifest: Path, sets: dict, out: Path) -> dict:
    from monailabel_app.lib.conf import TrainParams
    from umind_core import demo
    from umind_core.modeling.config import lora_settings
    from umind_core.training.trainer import train

    overrides, lora = RECIPES[name]
    model = demo.load_model(None, trainable=True)
    full = bool(lora.get("full"))
    if not full:
        vision = TrainParams().lora_vision if "vision" in lora and lora["vision"] is None else bool(lora.get("vision"))
        model.attach_lora(lora_settings(vision))
    p = TrainParams()
    trainer_keys = {k: v for k, v in overrides.items() if k not in DATA_KEYS}
    config = p.trainer_config(out / "data" / f"trainer_{name}", val_fraction=0.0, full=full, progress=False,
                              keep_checkpoints=1)
    config = dataclasses.replace(config, **trainer_keys)
    t = time.perf_counter()
    train(model, manifest, config)
    seconds = time.perf_counter() - t
    model.eval()
    model.requires_grad_(False)
    return {"recipe": name, "overrides": overrides, "lora": lora, "train_s": round(seconds, 1), **score(model, sets)}


def main(argv=None) -> int:
    from monailabel_app.lib.conf import TrainParams
    from umind_core import demo
    from umind_core.atomic import write_text

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "loop_recipe")
    ap.add_argument("--labels", type=int, default=20)
    ap.add_argument("--tune", type=int, default=60, help="scanner_b pool images scored (not among the labels)")
    ap.add_argument("--default", type=int, default=40)
    ap.add_argument("--default-seed0", type=int, default=DEFAULT_SEED0,
                    help="first seed of the default-look set (3000000: the gate's synthetic regression suite)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--recipes", default=",".join(RECIPES))
    ap.add_argument("--site", default=None, help="label only pool images of this site (e.g. breast)")
    args = ap.parse_args(argv)
    names = [r.strip() for r in args.recipes.split(",") if r.strip()]
    unknown = [n for n in names if n not in RECIPES]
    if unknown:
        ap.error(f"unknown recipe(s) {', '.join(unknown)}; known: {', '.join(RECIPES)}")
    work = args.out / "data"
    work.mkdir(parents=True, exist_ok=True)
    pool, default = make_sets(work, 200, args.default, args.default_seed0)
    rng = random.Random(args.seed)
    order = list(range(len(pool)))
    rng.shuffle(order)
    tune = [pool[i] for i in order[-args.tune:]]  # the same scored images whatever is labeled
    picked = [pool[i] for i in order[:-args.tune] if args.site in (None, pool[i].site)][:args.labels]
    sets = {"tune": (tune, ("segment", "detect")), "default": (default, None)}
    path = args.out / "results.json"
    setup = {k: v for k, v in vars(args).items() if k not in ("out", "recipes")}
    results = json.loads(path.read_text()) if path.is_file() else {}
    if results.get("setup") != setup:  # another labeled/scored set: nothing earlier applies
        results = {"setup": setup}
    results["labels"] = [r.id for r in picked]
    if "start" not in results:
        results["start"] = score(demo.load_model(None), sets)
        write_text(path, json.dumps(results, indent=2))
    print("start", json.dumps(results["start"]), flush=True)
    manifests: dict[tuple, Path] = {}
    for name in names:
        key = tuple(_data_value(name, k) for k in DATA_KEYS)
        if key not in manifests:
            manifests[key] = build_training_set(picked, work, args.seed, dict(zip(DATA_KEYS, key)))
        row = run_recipe(name, manifests[key], sets, args.out)
        results.setdefault("recipes", {})[name] = row
        write_text(path, json.dumps(results, indent=2))
        print(json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
