"""A folder of images and their mask files, named by a pattern -> manifest records (``umind import folders DIR``).

Two layouts, found per folder ("unit"), so class folders may hold either:
- suffix: ``NAME.png`` with ``NAME_mask.png`` and, where the image shows more than one object, ``NAME_mask_1.png``,
  ``_mask_2.png``.. beside it (BUSI as released; ``--mask-suffix`` changes ``_mask``). A layout that numbers its mask
  files draws one object per file, so each file is one object (a lesion drawn in two pieces stays one lesion).
- pairs: ``images/NAME.<ext>`` with ``masks/NAME.<ext>`` (or ``masks/NAME_mask.<ext>``; ``labels/``, ``gt/`` and
  ``annotations/`` are read as ``masks/``): one file holds every object of its image, so lesion kinds give one object
  per connected blob (`common.mask_pieces`, the rule CSV and nnU-Net masks follow).
DIR is one unit, or holds class folders that are units (or one wrapper folder holding them, as BUSI's
``Dataset_BUSI_with_GT/``).

What a record holds, decided here:
- A mask file is one foreground label: 0/1, 0/255, grey or RGB with equal channels (`common.foreground`; a map of
  several values is skipped naming the file, never merged into one object). Its label is ``--label``, else the class
  folder's name, else DIR's name (underscores read as spaces).
- A class folder whose name is a finding (`findings.finding_word`: benign, malignant, normal and synonyms) is the
  record's diagnosis, and its masks are "<site> lesion" objects carrying the finding (`common.lesion_label`), as
  COCO finding categories are; a normal image has no lesion (a mask holding pixels there is left out and counted).
- An empty mask file makes no object (counted); an image without a mask file is imported only where its folder is a
  finding (the finding alone), else skipped with a reason: an image nobody drew on is not a negative.
- Mask names are recognised before anything is read, so a mask is never imported as an image; a mask without its
  image, a mask of another size and an unreadable file are skipped with a reason naming the path.
- No group: the layout names no patient, so each image is its own group when ``--split`` splits.
`busi` is this reader with BUSI's class folders and site fixed (`read_units`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..data.manifest import Annotations, Record
from ..answers.findings import finding_word
from .common import (PIL_SUFFIXES, ImportContext, RowSkipped, SourceError, foreground, is_lesion_kind, label_name,
                     lesion_label, mask_pieces, read_label_png)

DESCRIPTION = "folders of images with mask files (NAME.png + NAME_mask.png in class folders, or images/ + masks/)"

MASK_SUFFIX = "_mask"
#: the folder names a pairs layout keeps its masks in, beside images/
MASK_FOLDERS = ("masks", "labels", "gt", "annotations")
LESION_MASKS = ("apart", "merged")


@dataclass
class Item:
    """One image of a unit with its mask files in order (NAME_mask, NAME_mask_1, ...), its path for the report."""
    image: Path
    masks: list[Path]
    rel: str
    numbered: bool  # suffix layout: one object per file
    mask_rels: list[str] = field(default_factory=list)


@dataclass
class Unit:
    """A folder of images (and masks): its name (the class folder, or DIR) and its items."""
    name: str
    items: list[Item] = field(default_factory=list)


def _mask_name(suffix: str) -> re.Pattern:
    return re.compile(rf"^(?P<image>.+?){re.escape(suffix)}(?:_(?P<k>\d+))?(?P<ext>\.[A-Za-z]+)$")


def _is_image(path: Path) -> bool:
    return path.is_file() and path.suffix.lower() in PIL_SUFFIXES


def _mask_folder(folder: Path) -> Path | None:
    return next((folder / m for m in MASK_FOLDERS if (folder / m).is_dir()), None)


def _rel(path: Path, root: Path) -> str:
    return path.relative_to(root).as_posix()


def suffix_items(folder: Path, root: Path, ctx: ImportContext, suffix: str = MASK_SUFFIX) -> list[Item]:
    """The suffix layout of one folder: (image, its numbered masks). Masks without an image and files that are no
    image are skipped, naming their path."""
    pattern = _mask_name(suffix)
    images: dict[str, Path] = {}
    masks: dict[str, list[tuple[int, Path]]] = {}
    for path in sorted(p for p in folder.iterdir() if p.is_file()):
        m = pattern.match(path.name)
        if m and path.suffix.lower() in PIL_SUFFIXES:
            masks.setdefault(m.group("image"), []).append((int(m.group("k") or 0), path))
        elif _is_image(path):
            images[path.stem] = path
        else:
            ctx.log.skip(_rel(path, root), "not an image or mask file of the folder layout")
    for stem in sorted(set(masks) - set(images)):
        for _, path in masks[stem]:
            ctx.log.skip(_rel(path, root), "mask file without its image")
    items = []
    for stem, path in images.items():
        found = [p for _, p in sorted(masks.get(stem, []))]
        items.append(Item(path, found, _rel(path, root), True, [_rel(p, root) for p in found]))
    return items


def pair_items(folder: Path, root: Path, ctx: ImportContext, suffix: str = MASK_SUFFIX) -> list[Item]:
    """The pairs layout: images/NAME.* with masks/NAME.* (or NAME<suffix>.*), matched by stem."""
    mask_dir = _mask_folder(folder)
    assert mask_dir is not None
    pattern = _mask_name(suffix)
    by_stem: dict[str, list[Path]] = {}
    for path in sorted(p for p in mask_dir.iterdir() if _is_image(p)):
        m = pattern.match(path.name)
        by_stem.setdefault(m.group("image") if m else path.stem, []).append(path)
    items, used = [], set()
    for path in sorted(p for p in (folder / "images").iterdir() if p.is_file()):
        if not _is_image(path):
            ctx.log.skip(_rel(path, root), "not an image or mask file of the folder layout")
            continue
        found = by_stem.get(path.stem, [])
        used.add(path.stem)
        items.append(Item(path, found, _rel(path, root), False, [_rel(p, root) for p in found]))
    for stem in sorted(set(by_stem) - used):
        for path in by_stem[stem]:
            ctx.log.skip(_rel(path, root), "mask file without its image")
    return items


def is_unit(folder: Path) -> bool:
    """A folder with images/ beside a mask folder, or with image files of its own."""
    if (folder / "images").is_dir() and _mask_folder(folder) is not None:
        return True
    return any(_is_image(p) for p in folder.iterdir())


def find_units(source: Path, ctx: ImportContext, suffix: str = MASK_SUFFIX,
               classes: tuple[str, ...] | None = None) -> tuple[Path, list[Unit]]:
    """(the folder read, its units): SOURCE itself, its class folders (only `classes` where given), or those of the
    one folder inside it that holds them. SourceError when none holds images."""
    if not source.is_dir():
        raise SourceError(f"{source}: not a folder (expected images with mask files, or class folders of them)")

    def subunits(p: Path) -> list[Path]:
        subs = [d for d in sorted(p.iterdir()) if d.is_dir()]
        if classes is not None:
            return [d for d in subs if d.name in classes]
        return [d for d in subs if d.name not in ("images", *MASK_FOLDERS) and is_unit(d)]

    def units_of(p: Path) -> list[Path]:
        if classes is None and is_unit(p):  # its own images, and any class folders beside them (none left unread)
            return [p, *subunits(p)]
        return subunits(p)

    root, folders = source, units_of(source)
    if not folders:
        inner = [d for d in sorted(source.iterdir()) if d.is_dir() and units_of(d)]
        if len(inner) != 1:
            what = "benign/, malignant/ or normal/ folder" if classes else "images with mask files"
            raise SourceError(f"{source}: no {what} here"
                              + (f" (several inside: {', '.join(d.name for d in inner)})" if inner else ""))
        root, folders = inner[0], units_of(inner[0])
    units = []
    for folder in folders:
        pairs = (folder / "images").is_dir() and _mask_folder(folder) is not None
        items = (pair_items if pairs else suffix_items)(folder, root, ctx, suffix)
        units.append(Unit(folder.resolve().name, items))
    return root, units


def _objects(ctx: ImportContext, item: Item, label: str, shape: tuple[int, int], normal: bool
             ) -> list[tuple[str, np.ndarray]]:
    """(label, mask) of one image: one per numbered file, or per blob of a lesion kind in a pairs file;
    ``lesion_masks="merged"`` makes one object of the union."""
    read = [foreground(read_label_png(p, shape), p) for p in item.masks]
    if normal:
        if any(m.any() for m in read):
            ctx.log.drop("mask of a normal image holds pixels (normal = no lesion)")
        return []
    empty = sum(not m.any() for m in read)
    if empty:
        ctx.log.drop("empty lesion mask file" if is_lesion_kind(label) else "empty mask file", empty)
    masks = [m for m in read if m.any()]
    if ctx.options.get("lesion_masks") == "merged" and len(masks) > 1:
        masks = [np.logical_or.reduce(masks)]
    if item.numbered:
        return [(label, m) for m in masks]
    return [(label, piece) for m in masks for piece in mask_pieces(m, label)]


def _record(ctx: ImportContext, fmt: str, unit: Unit, item: Item, site: str | None) -> Record:
    finding = finding_word(unit.name)
    if not item.masks and finding is None:
        raise RowSkipped("image without a mask file (in a folder that is no finding)", item.rel)
    rid = ctx.new_id(item.image.stem)
    placed = ctx.place_image(item.image, rid)
    label = lesion_label(site) if finding else (ctx.options.get("label") or label_name(unit.name))
    pieces = _objects(ctx, item, label, (placed.height, placed.width), finding == "normal")
    objects = ctx.mask_objects(pieces, rid)
    for obj in objects:
        obj.diagnosis = finding
    source = {"format": fmt, "path": item.rel}
    if item.masks:
        source["masks"] = item.mask_rels
    return Record(id=rid, image=placed.rel, spacing=placed.spacing, site=site,
                          annotations=Annotations(objects=objects, diagnosis=finding),
                          extra={"source": source}, root=ctx.out)


def read_units(source: Path, ctx: ImportContext, fmt: str, *, site: str | None, suffix: str = MASK_SUFFIX,
               classes: tuple[str, ...] | None = None) -> tuple[list[Record], int]:
    """Every image of every unit as a record; returns (records, how many images had a mask file)."""
    option = ctx.options.get("lesion_masks") or "apart"
    if option not in LESION_MASKS:
        raise SourceError(f"--lesion-masks must be one of {', '.join(LESION_MASKS)}, got {option!r}")
    if not suffix or "/" in suffix:
        raise SourceError(f"--mask-suffix {suffix!r}: expected the text between a name and its extension, e.g. _mask")
    _, units = find_units(source, ctx, suffix, classes)
    jobs = [(unit, item) for unit in units for item in unit.items]
    records = []
    for unit, item in ctx.bar(jobs, fmt):
        rec = ctx.attempt(item.rel, _record, ctx, fmt, unit, item, site)
        if rec is not None:
            records.append(rec)
    return records, sum(bool(item.masks) for _, item in jobs)


def read(source: Path, ctx: ImportContext) -> list[Record]:
    records, _ = read_units(source, ctx, "folders", site=ctx.site,
                            suffix=ctx.options.get("mask_suffix") or MASK_SUFFIX)
    return records
