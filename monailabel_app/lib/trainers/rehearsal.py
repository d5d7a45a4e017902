"""The data a run keeps the old skills with: a rehearsal pool and a regression suite, per workdir.

Rehearsal: every run trains on the new labels mixed with images from a seeded synthetic pool with every
task's conversations (boxes, landmarks, calipers, findings, reports, refusals). Chosen over the other
candidate, the served model's own answers on unlabeled datastore images, because (1) it has exact ground
truth for every task, where pseudo-labels would rehearse the model's own mistakes on the new domain;
(2) it is the distribution the shipped model learned its other skills on, which is what forgetting erodes;
(3) it costs no annotation and no inference. The seeds are disjoint from the demo model's training
(0..7,999), its evaluation (1,000,000+) and the sample studies (5,000,000+).

Regression suite: a seeded synthetic set (the tasks no label covers) made once per workdir, plus the
held-out labels of every earlier run, which only grows. The gate scores both.
"""

from __future__ import annotations

import json
import logging
import os
import random
import shutil
from dataclasses import dataclass
from pathlib import Path

from umind_core.atomic import new_temp_dir, replace_dir
from umind_core.data.conversations import attach_conversations
from umind_core.data.manifest import Record, read_manifest, rebase, write_manifest

__all__ = ["REHEARSAL_SEED0", "REGRESSION_SEED0", "synthetic_set", "rehearsal_plan", "mix_rehearsal", "StyleMix",
           "training_set", "LabelHistory"]

logger = logging.getLogger(__name__)

REHEARSAL_SEED0 = 2_000_000
REGRESSION_SEED0 = 3_000_000
_META = "set.json"


def synthetic_set(folder: Path, n: int, seed0: int, size: int = 256, refusal_rate: float = 0.5,
                  appearance: str | None = None) -> Path:
    """folder/manifest.jsonl: `n` seeded synthetic images with all conversations, made once and reused
    (`appearance`: the generator's look, default its default look).

    Built in a temporary folder and renamed into place, so a run killed while making it leaves nothing
    half-made; a folder made with other settings is made again.
    """
    folder = Path(folder)
    manifest = folder / "manifest.jsonl"
    meta = {"n": int(n), "seed0": int(seed0), "size": int(size), "refusal_rate": float(refusal_rate)}
    if appearance is not None:
        meta["appearance"] = appearance
    try:
        if manifest.is_file() and json.loads((folder / _META).read_text()) == meta:
            return manifest
    except (OSError, ValueError):
        pass
    from umind_core.data.manifest import write_synthetic_dataset

    logger.info(f"umind: making the synthetic set {folder.name} ({n} images, seeds {seed0}..)")
    tmp = new_temp_dir(folder)
    try:
        raw = write_synthetic_dataset(tmp, n, seed0=seed0, size=size, progress=False, appearance=appearance)
        attach_conversations(raw, raw, seed=seed0, refusal_rate=refusal_rate)
        (tmp / _META).write_text(json.dumps(meta))
        replace_dir(tmp, folder)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return manifest


def rehearsal_plan(n_new: int, ratio: float, minimum: int, pool_size: int) -> tuple[int, int]:
    """(rehearsal records, copies of each new record) for `n_new` new training records.

    `ratio` rehearsal samples per new sample; at least `minimum` distinct rehearsal images (bounded by the
    pool), with the new records repeated to keep the ratio. A few rehearsal images seen many times were not
    enough: at 5 labels and ratio 2 (8 rehearsal images, 40 steps of 4) caliper error on the regression
    suite rose 0.087 -> 0.13 and the gate rejected the run; many distinct images at the same ratio held it.
    """
    if ratio <= 0 or pool_size <= 0 or n_new <= 0:
        return 0, 1
    n = min(pool_size, max(round(ratio * n_new), int(minimum)))
    return n, max(1, round(n / (ratio * n_new)))


def mix_rehearsal(train_manifest: Path, pool_manifest: Path | None, n: int, seed: int, out: Path,
                  copies: int = 1, augment: float = 0.0, style: StyleMix | None = None) -> tuple[Path, int]:
    """Write `out`: `copies` of each of the new labels' records plus `n` records drawn from the rehearsal pool.

    With `augment` > 0 every copy after the first is the label's image through `augment.augment_image` (that
    probability per transform, drawn from the run's seed and the copy), so a few labels seen several times are
    not seen as the same pixels; annotations are unchanged (the transforms move no structure). With `style`, its
    share of the rehearsal records is redrawn in the look of the studies' own images (`StyleMix`).
    """
    records = []
    for k in range(max(1, int(copies))):
        for rec in read_manifest(train_manifest):
            if k and augment > 0:
                _augment_copy(rec, out.parent / "augmented", f"{seed}:{k}", augment)
            rebase(rec, out.parent)
            if k:
                rec.id = f"{rec.id}#copy{k}"
            records.append(rec)
    picked: list[Record] = []
    if pool_manifest is not None and n > 0:
        pool = read_manifest(pool_manifest)
        picked = random.Random(f"umind-rehearsal:{seed}").sample(pool, min(int(n), len(pool)))
        for rec in picked:
            rebase(rec, out.parent)
            rec.id = f"rehearsal-{rec.id}"
        if style is not None:
            style.apply(picked, out.parent / "restyled", seed)
    return write_manifest(records + picked, out), len(picked)


@dataclass(frozen=True)
class StyleMix:
    """Rehearsal images redrawn in the look of the studies' own unlabeled images (`umind_core.data.style`).

    Why: the loop's few labels show a new scanner on a handful of images; the studies folder holds many more of
    them without labels. A rehearsal image in one of their looks keeps its exact truth for every task, so the
    model sees the new speckle and grey curve on structures it is told the answers for. A seeded sample of `share`
    of the rehearsal records each take one target image, drawn from the same seed; `beta` is the share of the
    spectrum taken (`style.restyle`). The rest stay in the pool's look, which holds the old skills.
    """

    targets: tuple[Path, ...]
    share: float
    beta: float

    def apply(self, records: list[Record], folder: Path, seed: int) -> int:
        """Point `share` of `records` at restyled copies in `folder`; returns how many were restyled."""
        import numpy as np
        from PIL import Image

        from umind_core.data.style import restyle, scan_region

        if not self.targets or self.share <= 0 or not records:
            return 0
        rng = random.Random(f"umind-style:{seed}")
        chosen = rng.sample(records, round(self.share * len(records)))
        folder.mkdir(parents=True, exist_ok=True)
        done = 0
        for rec in chosen:
            image = rec.load_image()
            if image.ndim != 2 or image.dtype != np.uint8:
                continue
            target_path = rng.choice(self.targets)
            target = np.asarray(Image.open(target_path).convert("L"))
            scan = rec.load_scan_mask()
            scan = scan_region(image) if scan is None else scan
            path = folder / f"{rec.id}.png"
            Image.fromarray(restyle(image, scan, target, scan_region(target), self.beta)).save(path)
            _point_at(rec, path)
            rec.extra["restyled_from"] = Path(target_path).name
            done += 1
        return done


def _augment_copy(rec: Record, folder: Path, key: str, p: float) -> None:
    """Point `rec` at a photometrically augmented copy of its frame written to `folder` (grey images only: the
    transforms are defined on echo intensity; a colour frame stays as it is)."""
    import zlib

    import numpy as np
    from PIL import Image

    from umind_core.data.augment import augment_image

    image = rec.load_image()
    if image.ndim != 2 or image.dtype != np.uint8:
        return
    scan = rec.load_scan_mask()
    scan = image > 0 if scan is None else scan
    draw = zlib.crc32(f"{key}:{rec.id}".encode())
    rng = np.random.default_rng([draw, 11])
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{draw:08x}.png"
    Image.fromarray(augment_image(image, scan, rng, p)).save(path)
    _point_at(rec, path)


def _point_at(rec: Record, path: Path) -> None:
    """Make `rec` read its (single-frame) image from `path`, relative to the record's root."""
    root = rec.root if rec.root is not None else Path(".")
    rec.image, rec.frame = Path(os.path.relpath(path.resolve(), root.resolve())).as_posix(), 0


def training_set(train_raw: Path, n_records: int, params, pool_dir: Path, seed: int | None = None,
                 appearance: str | None = None, style: StyleMix | None = None) -> tuple[Path, int, int]:
    """A run's training manifest beside `train_raw` (the exported new labels): their conversations
    (labels.jsonl), then the rehearsal `params` (a TrainParams) asks for, drawn from the seeded pool in
    `pool_dir` (train.jsonl). Returns (manifest, rehearsal records, copies of each new record).

    One owner of the recipe, so that `benchmarks/sweep_loop_recipe.py` trains on what `umind_lora` trains on.
    `seed` defaults to the params' own; `appearance` is the rehearsal pool's look (default: the params'
    `rehearsal_look`); `style` restyles a share of the rehearsal records (`StyleMix`; measured offline only,
    benchmarks/results/loop_recipe_demo3/NOTES.md: it moved nothing, so the server does not pass one).
    """
    seed = params.seed if seed is None else seed
    appearance = params.rehearsal_look if appearance is None else appearance
    out = Path(train_raw).parent
    labels = attach_conversations(train_raw, out / "labels.jsonl", seed=seed, refusal_rate=params.refusal_rate)
    n, copies = rehearsal_plan(n_records, params.rehearsal, params.rehearsal_min, params.rehearsal_pool)
    pool = synthetic_set(pool_dir, params.rehearsal_pool, REHEARSAL_SEED0, refusal_rate=max(params.refusal_rate, 0.5),
                         appearance=appearance) if n else None
    copies = max(copies, int(params.label_copies))
    manifest, picked = mix_rehearsal(labels, pool, n, seed, out / "train.jsonl", copies=copies,
                                     augment=params.label_augment, style=style)
    return manifest, picked, copies


class LabelHistory:
    """The held-out labels of all earlier runs: a manifest that only grows, with its own copies of the files
    (a later run's export folder is not kept, and a person may later change a label)."""

    def __init__(self, folder: Path):
        self.folder = Path(folder)
        self.manifest = self.folder / "manifest.jsonl"

    def records(self) -> list[Record]:
        return read_manifest(self.manifest) if self.manifest.is_file() else []

    def image_ids(self) -> set[str]:
        return {_image_id(r) for r in self.records()}

    def add(self, records: list[Record]) -> int:
        """Append copies of `records` whose datastore image is not there yet; returns how many were added."""
        have = self.records()
        known = {_image_id(r) for r in have}
        new = [r for r in records if _image_id(r) not in known]
        if not new:
            return 0
        (self.folder / "files").mkdir(parents=True, exist_ok=True)
        for rec in new:
            _copy_files(rec, self.folder / "files")
            rebase(rec, self.folder)
        write_manifest(have + new, self.manifest)
        return len(new)


def _image_id(rec: Record) -> str:
    return str(rec.extra.get("source", {}).get("datastore_image", rec.id))


def _copy_files(rec: Record, dest: Path) -> None:
    """Copy the record's image and masks into `dest` and point the record at the copies."""
    def copy(rel: str) -> str:
        src = rec.resolve(rel)
        target = dest / src.name
        shutil.copyfile(src, target)
        return str(target)

    rec.image = copy(rec.image)
    for obj in rec.annotations.objects:
        if obj.mask is not None:
            obj.mask = copy(obj.mask)
    rec.root = None
