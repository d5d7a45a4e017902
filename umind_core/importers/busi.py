"""BUSI (Breast Ultrasound Images, Al-Dhabyani et al. 2020, Data in Brief 28: 104863) -> manifest records.

Layout read: class folders ``benign/``, ``malignant/`` and ``normal/`` (SOURCE, or the one folder inside it that
holds them, as the release's ``Dataset_BUSI_with_GT/``), each holding ``benign (N).png`` and, in the original
release, the lesion's masks beside it: ``benign (N)_mask.png`` and, where the image shows more than one lesion,
``benign (N)_mask_1.png``, ``_mask_2.png``... A copy without masks (images only) reads as the finding alone.

What a record holds, decided here:
- site "breast"; the folder is the finding (``annotations.diagnosis``, in `findings.FINDINGS`' spelling), as the
  synthetic breast site stores it, and each lesion object carries it too;
- benign and malignant: one "breast lesion" object per mask file (the release draws one lesion per file, so a
  lesion drawn in two pieces stays one lesion), or with ``lesion_masks="merged"`` one object for the union of an
  image's masks. An empty mask file makes no object (counted as left out);
- normal: no lesion and no object; a normal image's mask that holds pixels is left out and counted;
- no group key: BUSI names no patient, so each image is its own group when `umind import --split` splits (the
  release holds a few near-duplicate images that a split by image cannot keep together).
A mask file is recognised by its name before anything is read and is never imported as an image; a mask without its
image, a mask of another size than its image and an unreadable file are skipped with a reason.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from ..data.manifest import Annotations, ManifestRecord
from ..findings import normal_finding
from .common import ImportContext, RowSkipped, SourceError, lesion_label, read_label_png

DESCRIPTION = "BUSI folder (benign/, malignant/, normal/ with 'benign (N).png' and optional '_mask.png' files)"

SITE = "breast"
LABEL = lesion_label(SITE)
CLASSES = ("benign", "malignant", "normal")
LESION_MASKS = ("apart", "merged")
_MASK = re.compile(r"^(?P<image>.+)_mask(?:_(?P<k>\d+))?\.png$", re.IGNORECASE)


def _folder(source: Path) -> Path:
    """The folder holding the class folders: SOURCE or the one folder inside it that does."""
    def holds(p: Path) -> bool:
        return any((p / c).is_dir() for c in CLASSES)

    if not source.is_dir():
        raise SourceError(f"{source}: not a folder (expected BUSI's benign/, malignant/, normal/ folders)")
    if holds(source):
        return source
    inner = [p for p in sorted(source.iterdir()) if p.is_dir() and holds(p)]
    if len(inner) == 1:
        return inner[0]
    raise SourceError(f"{source}: no benign/, malignant/ or normal/ folder here"
                      + (f" (several inside: {', '.join(p.name for p in inner)})" if inner else ""))


def _files(folder: Path, cls: str, ctx: ImportContext) -> list[tuple[Path, list[Path]]]:
    """(image, its mask files in order: _mask, _mask_1, ...) of one class folder. Names decide what is a mask, so a
    mask is never read as an image; masks without an image and files that are not PNG are skipped."""
    images: dict[str, Path] = {}
    masks: dict[str, list[tuple[int, Path]]] = {}
    for path in sorted(p for p in folder.iterdir() if p.is_file()):
        m = _MASK.match(path.name)
        if m:
            masks.setdefault(m.group("image") + ".png", []).append((int(m.group("k") or 0), path))
        elif path.suffix.lower() == ".png":
            images[path.name] = path
        else:
            ctx.log.skip(f"{cls}/{path.name}", "not a PNG image or mask of the BUSI layout")
    for name in sorted(set(masks) - set(images)):
        for _, path in masks[name]:
            ctx.log.skip(f"{cls}/{path.name}", "mask file without its image")
    return [(path, [p for _, p in sorted(masks.get(name, []))]) for name, path in images.items()]


def _lesions(ctx: ImportContext, cls: str, masks: list[Path], shape: tuple[int, int]) -> list[np.ndarray]:
    """The lesion masks of one image, as the option says (apart: one per non-empty file; merged: their union)."""
    read = [read_label_png(p, shape) != 0 for p in masks]
    if cls == "normal":
        if any(m.any() for m in read):
            ctx.log.drop("mask of a normal image holds pixels (normal = no lesion)")
        return []
    empty = sum(not m.any() for m in read)
    if empty:
        ctx.log.drop("empty lesion mask file", empty)
    lesions = [m for m in read if m.any()]
    if ctx.options.get("lesion_masks") == "merged" and len(lesions) > 1:
        return [np.logical_or.reduce(lesions)]
    return lesions


def _record(ctx: ImportContext, cls: str, image: Path, masks: list[Path]) -> ManifestRecord:
    rid = ctx.new_id(image.stem)
    placed = ctx.place_image(image, rid)
    finding = normal_finding(cls)
    lesions = _lesions(ctx, cls, masks, (placed.height, placed.width))
    objects = ctx.mask_objects([(LABEL, m) for m in lesions], rid)
    for obj in objects:
        obj.diagnosis = finding
    source = {"format": "busi", "path": f"{cls}/{image.name}"}
    if masks:
        source["masks"] = [f"{cls}/{p.name}" for p in masks]
    return ManifestRecord(id=rid, image=placed.rel, spacing=placed.spacing, site=ctx.site or SITE,
                          annotations=Annotations(objects=objects, diagnosis=finding),
                          extra={"source": source}, root=ctx.out)


def read(source: Path, ctx: ImportContext) -> list[ManifestRecord]:
    """Every image of every class folder, class by class."""
    option = ctx.options.get("lesion_masks") or "apart"
    if option not in LESION_MASKS:
        raise SourceError(f"--lesion-masks must be one of {', '.join(LESION_MASKS)}, got {option!r}")
    root = _folder(source)
    jobs = []
    for cls in CLASSES:
        if (root / cls).is_dir():
            jobs += [(cls, image, masks) for image, masks in _files(root / cls, cls, ctx)]
    records = []
    for cls, image, masks in ctx.bar(jobs, "busi"):
        rec = ctx.attempt(f"{cls}/{image.name}", _record, ctx, cls, image, masks)
        if rec is not None:
            records.append(rec)
    if records and not any(masks for _, _, masks in jobs):
        ctx.log.drop("lesion masks: none in this copy (mask-less layout: the finding only)", len(records))
    return records
