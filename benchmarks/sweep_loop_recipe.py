"""Which retraining recipe helps a model that already knows the new scanner? Measured offline, before the loop.

From demo model 2 the annotation loop's 20 labels added nothing on `scanner_b` and lost new-domain boxes
(benchmarks/results/annotation_loop_demo2_ci/NOTES.md). This sweep asks why without the server: 20 pool images
labeled through the same path the loop uses (a MONAI Label datastore with label map, markups and finding;
`export_datastore`; the conversation builder; rehearsal), one fresh LoRA adapter per recipe, then scores on

- `tune`: pool images that are not among the 20 (scanner_b), the set recipes are chosen on;
- `default`: default-appearance images (seeds 1,200,000+, never trained on), to see forgetting.

The 20 are a random draw by default; `--picks` labels the start model's most uncertain candidates, ones that cover
the pool in an image embedding, or (with the truth, as a bound) the ones it segments worst instead (`pick_labels`).

The loop benchmark's fixed test split (seeds 7,000,000+) is never read here, so the loop benchmark that follows
a choice made here is judged on data the choice did not see.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import json
import random
import sys
import time
from pathlib import Path

from bench_annotation_loop import POOL_SEED0, TARGETS, annotation  # a sibling: benchmarks/ is sys.path[0] when run

ROOT = Path(__file__).resolve().parents[1]

DEFAULT_SEED0 = 1_200_000
KEYS = ("segmentation_miou", "detection_recall", "detection_f1", "keypoint_error_rel_width",
        "measurement_rel_error", "diagnosis_accuracy", "refusal_accuracy")

#: the server's recipe the sweeps before 2026-12-05 varied (rehearsal 2:1 on the default look, LoRA without the
#: vision blocks): a recipe that leaves a data key out takes it from here, so the recorded results stay reproducible
BASE_DATA = {"rehearsal": 2.0, "rehearsal_look": "default", "label_augment": 0.0, "label_copies": 1, "pseudo": 0,
             "rehearsal_style": 0.0, "style_beta": 0.3}
#: name -> (TrainConfig overrides and data keys, LoraSettings overrides); "loop" is BASE_DATA, "server" what
#: `umind_lora` does today (TrainParams' defaults, monailabel_app/lib/conf.py: rehearsal 2.0 on the default look,
#: the vision blocks adapted)
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
    # half (or all) of the 2:1 rehearsal images redrawn in the look of the unlabeled pool images
    # (`rehearsal.StyleMix`): grey levels only (beta 0), a third of the spectrum, all of it
    "style_half_beta0": ({"rehearsal_style": 0.5, "style_beta": 0.0}, {"vision": True}),
    "style_half_beta03": ({"rehearsal_style": 0.5, "style_beta": 0.3}, {"vision": True}),
    "style_half_beta1": ({"rehearsal_style": 0.5, "style_beta": 1.0}, {"vision": True}),
    "style_all_beta03": ({"rehearsal_style": 1.0, "style_beta": 0.3}, {"vision": True}),
    "no_rehearsal_augment_copies4": ({"rehearsal": 0.0, "label_augment": 0.5, "label_copies": 4}, {"vision": True}),
    # what many labels can buy at all (run with --labels 140): each image seen about 8 times without rehearsal
    "ceiling_no_rehearsal": ({"rehearsal": 0.0, "max_steps": 300}, {}),
    "ceiling": ({"max_steps": 300}, {}),
    "ceiling_no_rehearsal_900": ({"rehearsal": 0.0, "max_steps": 900}, {}),
    # is the ceiling the adapter's? the same 300 steps training every weight, and with LoRA on the vision blocks too
    "ceiling_full": ({"rehearsal": 0.0, "max_steps": 300}, {"full": True}),
    "ceiling_vision_lora": ({"rehearsal": 0.0, "max_steps": 300}, {"vision": True}),
    # self-training: the start model's confident masks on the pool's unlabeled images (all of them: neither scored
    # nor labeled) join the 20 labels in the datastore, as a person's labels would (`pseudo_labels`)
    "pseudo120_vision_lora": ({"pseudo": 120}, {"vision": True}),
    "pseudo120_vision_lora_steps80": ({"pseudo": 120, "max_steps": 80}, {"vision": True}),
    # the same seen under photometric augmentation too (a second, augmented copy of every label): consistency-style
    "pseudo120_augment_vision_lora": ({"pseudo": 120, "label_augment": 0.5, "label_copies": 2}, {"vision": True}),
    # the server's recipe with three times its 40 steps: with more labels (--labels 40, 80, 140) the fixed 40 steps
    # show each label fewer times; how much of what more labels could teach do they leave on the table?
    "server_steps120": ({"rehearsal": None, "rehearsal_look": None, "max_steps": 120}, {"vision": None}),
    # is that plateau the labels' or the recipe's? the same 120 steps without rehearsal: the adapter, every weight
    "no_rehearsal_vision_lora_steps120": ({"rehearsal": 0.0, "max_steps": 120}, {"vision": True}),
    "no_rehearsal_full_steps120": ({"rehearsal": 0.0, "lr": 1e-4, "max_steps": 120}, {"full": True}),
}
#: recipe keys that shape the training set rather than the trainer
DATA_KEYS = ("rehearsal", "rehearsal_look", "label_augment", "label_copies", "pseudo", "rehearsal_style", "style_beta")
#: data keys the sweep applies itself (pseudo-labels, restyled rehearsal), not TrainParams fields of the server
SWEEP_ONLY_KEYS = ("pseudo", "rehearsal_style", "style_beta")
#: what a pseudo-label asks about an image of each site: the generator's label names (umind_core/data/synthetic.py),
#: never the image's own truth; the gland first, so a nodule inside it is painted over it (a label map holds one name
#: per pixel). No "cyst": asked for both names on the 20 labeled images, the start model segments the same spot under
#: either (mask scores 0.001-0.08 apart; the higher one named the truth in 5 of 9 lesions), so every lesion is the
#: site's lesion label here (cysts are about 14% of lesions)
SITE_TARGETS = {"breast": ("breast lesion",), "thyroid": ("thyroid", "thyroid nodule"), "kidney": ("kidney",),
                "fetal_head": ("fetal head",)}
#: a predicted mask is kept when its pixels' mean probability (`GroundedObject.score`) reaches this and the model's
#: detect answer for the same target holds a box at IoU >= 0.5 with the mask's box (the two answers agree). Set on
#: the 20 labeled images (their truth, never the pseudo-labeled images'): it dropped the two masks of IoU 0.16 and
#: 0.63 (a breast lesion's, scores 0.82 and 0.90, no agreeing box) and kept 23, of IoU 0.61-0.94 where named right
PSEUDO_MIN_SCORE = 0.85
#: the model every arm starts from and is scored against (`--model`; None: the bundled demo model)
START_MODEL: str | None = None



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


def build_training_set(picked, out: Path, seed: int, data_keys: dict, pseudo: dict | None = None,
                       style_targets: tuple = ()) -> Path:
    """The loop's own path: datastore labels -> export -> `training_set` (conversations, rehearsal mix), as
    `umind_lora` runs it; `data_keys` are the recipe's DATA_KEYS (rehearsal ratio and look, label copies).
    `pseudo` ({id: (record, label PNG, info)}, `pseudo_labels`) are saved beside the labels as final labels too, in a
    datastore of their own so no other recipe sees them. `style_targets`: the images a restyled rehearsal record
    may take its look from (the server's: every study not held out; here: the pool images not scored)."""
    from monailabel.datastore.local import LocalDatastore

    from monailabel_app.lib.conf import TrainParams
    from monailabel_app.lib.trainers.dataset import export_datastore
    from monailabel_app.lib.trainers.rehearsal import StyleMix, training_set

    p = dataclasses.replace(TrainParams(), **{k: v for k, v in data_keys.items() if k not in SWEEP_ONLY_KEYS})
    rehearsal, look = p.rehearsal, p.rehearsal_look
    tag = "_".join(str(data_keys[k]) for k in DATA_KEYS)
    studies = out / (f"studies_{rehearsal}" + (f"_pseudo{data_keys['pseudo']}" if pseudo else ""))
    studies.mkdir(parents=True, exist_ok=True)
    ds = LocalDatastore(str(studies), extensions=("*.png",), auto_reload=False)
    labels = {rec.id: (rec, *annotation(rec)) for rec in picked}
    labels.update(pseudo or {})
    for rec, _, _ in labels.values():
        dest = studies / f"{rec.id}.png"
        if not dest.is_file():
            dest.write_bytes(Path(rec.image_path).read_bytes())
    ds.refresh()
    for rec, data, info in labels.values():
        tmp = out / f"{rec.id}_label.png"
        tmp.write_bytes(data)
        ds.save_label(rec.id, str(tmp), "final", info)
    # the server's default `labels` conf ("lesion"): it names only values the label info leaves unnamed (none here)
    data = export_datastore(ds, out / f"data_{tag}", ("lesion",), p.val_fraction,
                            p.min_val, p.seed)
    style = None
    if data_keys["rehearsal_style"] > 0:
        style = StyleMix(tuple(style_targets), data_keys["rehearsal_style"], data_keys["style_beta"])
    manifest, _, _ = training_set(data.train_manifest, data.n_train_records, p, out / f"rehearsal_{look or 'default'}",
                                  seed=seed, appearance=look, style=style)
    return manifest


def unlabeled(pool, tune, picked, n: int) -> list:
    """The first `n` pool images (in seed order) that are neither scored nor labeled."""
    taken = {r.id for r in tune} | {r.id for r in picked}
    return [r for r in pool if r.id not in taken][:n]


def pseudo_labels(records) -> tuple[dict, dict]:
    """({id: (record, label PNG, info)}, counts): the start model's confident masks on `records` as an annotator's
    submission (`annotation`'s form: a label map and label_names, no markups or finding). Each image's site says
    what to ask (`SITE_TARGETS`); its annotations are never read. An image with no mask kept gets no label."""
    from umind_core import demo
    from umind_core.evaluation.runner import record_frame
    from umind_core.inference.predictor import Predictor

    predictor = Predictor(demo.load_model(START_MODEL))
    frames = {r.id: record_frame(r) for r in records}
    found: dict[str, list] = {r.id: [] for r in records}
    counts: dict[str, dict] = {}
    for target in dict.fromkeys(t for r in records for t in SITE_TARGETS.get(r.site, ())):
        ids = [r.id for r in records if target in SITE_TARGETS.get(r.site, ())]
        seg = predictor.predict_batch([frames[i] for i in ids], "segment", target)
        # the box the model writes: one read off the mask would agree with the mask by rule
        det = predictor.predict_batch([frames[i] for i in ids], "detect", target, readout="tokens")
        c = counts.setdefault(target, {"asked": len(ids), "masks": 0, "kept": 0})
        for i, s, d in zip(ids, seg, det):
            boxes = [o.box for o in d.objects if o.box is not None]
            for o in s.objects:
                if o.mask is None or not o.mask.any():
                    continue
                c["masks"] += 1
                if (o.score or 0.0) >= PSEUDO_MIN_SCORE and _agrees(o.mask, boxes):
                    c["kept"] += 1
                    found[i].append((target, o.mask, o.score))
    out = {}
    for rec in records:
        kept = sorted(found[rec.id], key=lambda f: SITE_TARGETS[rec.site].index(f[0]))
        if kept:
            out[rec.id] = (rec, *_paint(rec, kept))
    counts["images_labeled"] = {"of": len(records), "labeled": len(out)}
    return out, counts


def _agrees(mask, boxes) -> bool:
    """Whether a detect box matches the mask's box at IoU >= 0.5."""
    from umind_core.evaluation.metrics import box_iou
    from umind_core.masks import mask_box

    return any(box_iou(mask_box(mask), b) >= 0.5 for b in boxes)


def _paint(rec, kept: list) -> tuple[bytes, dict]:
    import io

    from PIL import Image

    from umind_core.painter import LabelPainter

    painter = LabelPainter(rec.load_image().shape[:2])
    for target, mask, _ in kept:
        painter.paint(target, mask)
    buf = io.BytesIO()
    Image.fromarray(painter.labels()).save(buf, format="PNG")
    return buf.getvalue(), {"label_names": painter.values, "landmark_target": ""}


PICK_RULES = ("random", "uncertainty", "uncertainty_balanced", "typical", "medoids", "oracle", "oracle_balanced")


def pick_labels(rule: str, candidates: list, n: int) -> tuple[list, dict]:
    """(picked, what the rule saw): `n` of `candidates` (the pool images not scored, in the seed's random order).
    "random": the first `n` (the order is the draw); "uncertainty": the `n` with the highest `combined` signal of
    the start model (`image_signals` over the loop's TARGETS); "typical": greedy k-center (farthest-point) on the
    start model's mean-pooled image states, from the candidate nearest the candidates' mean; "medoids": the
    candidate nearest each centre of a k-means on the same embedding (`_medoids`); "oracle": the `n` the start model
    segments worst against their truth (`_worst_segmented`), which no signal without the truth can beat at ranking
    errors: the bound on what an uncertainty rule could pick. "uncertainty_balanced" and "oracle_balanced": the
    same rankings taken in turn per site (`_by_site`); the others do not balance sites."""
    if rule == "random":
        return candidates[:n], {}
    from umind_core import demo
    from umind_core.evaluation.runner import record_frame
    from umind_core.inference.predictor import Predictor

    predictor = Predictor(demo.load_model(START_MODEL))
    if rule in ("uncertainty", "uncertainty_balanced"):
        from monailabel_app.lib.activelearning.uncertainty import image_signals

        combined = {r.id: round(image_signals(predictor, record_frame(r), list(TARGETS))["combined"], 4)
                    for r in candidates}
        ranked = sorted(candidates, key=lambda r: -combined[r.id])  # stable: ties keep the draw's order
        return (_by_site(ranked, n) if rule == "uncertainty_balanced" else ranked[:n]), {"combined": combined}
    if rule in ("oracle", "oracle_balanced"):
        picked, info = _worst_segmented(predictor, candidates, len(candidates))
        return (_by_site(picked, n) if rule == "oracle_balanced" else picked[:n]), info
    if rule == "typical":
        return _k_center(candidates, [_embedding(predictor, r) for r in candidates], n)
    if rule == "medoids":
        return _medoids(candidates, [_embedding(predictor, r) for r in candidates], n)
    raise ValueError(f"unknown pick rule {rule!r}")


def _worst_segmented(predictor, candidates: list, n: int) -> tuple[list, dict]:
    """The `n` candidates with the lowest mean IoU of the start model's masks over the loop's TARGETS their truth
    holds (an image without one of them counts as IoU 1: nothing there to correct)."""
    import numpy as np

    from umind_core.evaluation.metrics import mask_iou
    from umind_core.evaluation.runner import record_frame

    iou = {}
    for rec in candidates:
        predictor.set_image(record_frame(rec))
        truths: dict[str, np.ndarray] = {}  # a label's objects together: its answer is all of them
        for obj, mask in zip(rec.annotations.objects, rec.load_masks()):
            if mask is not None and obj.label in TARGETS:
                truths[obj.label] = mask | truths.get(obj.label, np.zeros_like(mask, bool))
        scores = []
        for label, truth in truths.items():
            pred = np.zeros_like(truth, bool)
            for o in predictor.predict("segment", label).objects:
                if o.mask is not None:
                    pred |= o.mask
            scores.append(mask_iou(pred, truth))
        predictor.reset_image()
        iou[rec.id] = round(float(np.mean(scores)) if scores else 1.0, 4)
    return sorted(candidates, key=lambda r: iou[r.id])[:n], {"start_iou": iou}  # stable: ties keep the draw's order


def _by_site(ranked: list, n: int) -> list:
    """`n` of `ranked` taken in turn from each site (the best-ranked of each site first), as the server's
    `pick_balanced` takes turns between targets: the rule's ranking without its skew to one site."""
    queues: dict[str, list] = {}
    for rec in ranked:
        queues.setdefault(rec.site, []).append(rec)
    picked: list = []
    while len(picked) < n and any(queues.values()):
        for site in sorted(queues):
            if queues[site] and len(picked) < n:
                picked.append(queues[site].pop(0))
    return picked


def _embedding(predictor, rec):
    """The mask decoder's image states of the encoded frame (H, W, D), averaged over H and W: a D-vector."""
    from umind_core.evaluation.runner import record_frame

    predictor.set_image(record_frame(rec))
    try:
        return predictor.get_image_embedding().float().mean(dim=(0, 1)).numpy()
    finally:
        predictor.reset_image()


def _k_center(candidates: list, vectors: list, n: int) -> tuple[list, dict]:
    """Greedy farthest-point: the candidate nearest the mean first, then each time the one farthest from every
    pick so far (Euclidean). Returns the picks, every candidate's distance to the mean and the covering radius
    after each pick."""
    import numpy as np

    x = np.stack(vectors).astype(np.float64)
    to_mean = np.linalg.norm(x - x.mean(axis=0), axis=1)
    chosen = [int(np.argmin(to_mean))]
    nearest = np.linalg.norm(x - x[chosen[0]], axis=1)
    radius = [float(nearest.max())]
    while len(chosen) < min(n, len(candidates)):
        chosen.append(int(np.argmax(nearest)))
        nearest = np.minimum(nearest, np.linalg.norm(x - x[chosen[-1]], axis=1))
        radius.append(float(nearest.max()))
    info = {"to_mean": {candidates[i].id: round(float(to_mean[i]), 4) for i in range(len(candidates))},
            "radius_after_each": [round(r, 4) for r in radius], "embedding": "mean-pooled image_states"}
    return [candidates[i] for i in chosen], info


def _medoids(candidates: list, vectors: list, n: int, rounds: int = 50) -> tuple[list, dict]:
    """k-means (Lloyd, started from the k-center picks) on the same embedding, then per cluster the candidate
    nearest its centre: picks that cover the pool and are each typical of their part of it (k-center's own picks
    sit on the pool's edge)."""
    import numpy as np

    x = np.stack(vectors).astype(np.float64)
    start, info = _k_center(candidates, vectors, n)
    index = {r.id: i for i, r in enumerate(candidates)}
    centres = x[[index[r.id] for r in start]]
    for _ in range(rounds):
        assign = np.argmin(((x[:, None, :] - centres[None]) ** 2).sum(-1), axis=1)
        moved = np.stack([x[assign == k].mean(axis=0) if (assign == k).any() else centres[k]
                          for k in range(len(centres))])
        if np.allclose(moved, centres):
            break
        centres = moved
    chosen: list[int] = []
    for c in centres:  # the nearest candidate not already chosen (two centres may share one)
        order = np.argsort(np.linalg.norm(x - c, axis=1))
        chosen.append(int(next(i for i in order if i not in chosen)))
    sizes = np.bincount(assign, minlength=len(centres))
    info = {"to_mean": info["to_mean"], "cluster_sizes": sizes.tolist(), "embedding": info["embedding"]}
    return [candidates[i] for i in chosen], info


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
    model = demo.load_model(START_MODEL, trainable=True)
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


def _legacy_setup(results: dict) -> dict | None:
    """A results file's setup; one written before `--picks` existed was a random draw of its `labels`."""
    setup = results.get("setup")
    if setup is None or "picks" in setup:
        return setup
    return {**setup, "picks": "random", "picked": results.get("labels")}


def main(argv=None) -> int:
    from umind_core import demo
    from umind_core.atomic import write_text

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "loop_recipe")
    ap.add_argument("--model", default=None, help="UMind folder to start from (default: the bundled demo model)")
    ap.add_argument("--labels", type=int, default=20)
    ap.add_argument("--tune", type=int, default=60, help="scanner_b pool images scored (not among the labels)")
    ap.add_argument("--default", type=int, default=40)
    ap.add_argument("--default-seed0", type=int, default=DEFAULT_SEED0,
                    help="first seed of the default-look set (3000000: the gate's synthetic regression suite)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--recipes", default=",".join(RECIPES))
    ap.add_argument("--site", default=None, help="label only pool images of this site (e.g. breast)")
    ap.add_argument("--picks", choices=PICK_RULES, default="random",
                    help="which candidates are labeled (pick_labels); use a separate --out per rule")
    args = ap.parse_args(argv)
    global START_MODEL
    START_MODEL = args.model
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
    candidates = [pool[i] for i in order[:-args.tune] if args.site in (None, pool[i].site)]
    picked, pick_info = pick_labels(args.picks, candidates, args.labels)
    sets = {"tune": (tune, ("segment", "detect")), "default": (default, None)}
    path = args.out / "results.json"
    setup = {k: v for k, v in vars(args).items() if k not in ("out", "recipes")}
    setup["picked"] = [r.id for r in picked]
    results = json.loads(path.read_text()) if path.is_file() else {}
    if _legacy_setup(results) != setup:  # another labeled/scored set: nothing earlier applies
        results = {}
    results["setup"] = setup
    results["labels"] = [r.id for r in picked]
    results["picks"] = {"rule": args.picks, "sites": dict(sorted(collections.Counter(r.site for r in picked).items())), **pick_info}
    if "start" not in results:
        results["start"] = score(demo.load_model(START_MODEL), sets)
        write_text(path, json.dumps(results, indent=2))
    print("start", json.dumps(results["start"]), flush=True)
    manifests: dict[tuple, Path] = {}
    pseudo: dict[int, tuple[dict, dict]] = {}
    for name in names:
        key = tuple(_data_value(name, k) for k in DATA_KEYS)
        n_pseudo = dict(zip(DATA_KEYS, key))["pseudo"]
        if n_pseudo and n_pseudo not in pseudo:
            pseudo[n_pseudo] = pseudo_labels(unlabeled(pool, tune, picked, n_pseudo))
            print("pseudo-labels", json.dumps(pseudo[n_pseudo][1]), flush=True)
        if key not in manifests:
            manifests[key] = build_training_set(picked, work, args.seed, dict(zip(DATA_KEYS, key)),
                                                pseudo[n_pseudo][0] if n_pseudo else None,
                                                tuple(Path(r.image_path) for r in candidates))
        row = run_recipe(name, manifests[key], sets, args.out)
        if n_pseudo:
            row["pseudo"] = pseudo[n_pseudo][1]
        results.setdefault("recipes", {})[name] = row
        write_text(path, json.dumps(results, indent=2))
        print(json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
