"""Per-image labels in a CSV file -> manifest records, alone or merged into an existing import.

Columns (header row; names are case-insensitive, blank cells mean "not given"):
- ``image`` (required): the image path, relative to the CSV's folder (or to --images); with --merge, the image's
  name, matched against the records of the import (file name, file name without suffix, nnU-Net case id, id).
- ``finding`` (or ``diagnosis``): the image's finding, ``annotations.diagnosis``.
- ``view``: the view, kept in the record's extra key ``labels`` (our manifest has no view field).
- ``site``, ``report``, ``split``: the record's site, report text and split.
- ``spacing`` (one value for both axes) or ``spacing_x`` and ``spacing_y``: mm per pixel.
- measurement columns: any name ending in ``_mm``, `` mm`` or ``(mm)``, a number in millimetres, e.g.
  ``kidney_length_mm`` -> measurement "kidney length mm".
- mask columns: ``<label>_mask`` (e.g. ``nodule_mask``) holds the path of one object's mask file, which becomes an
  object of that label with its mask and box; ``mask`` is the same with the label in a ``mask_label`` column. A mask
  file is one object (0 = background; 0/1 and 0/255 alike, `common.foreground`); a lesion kind gives one object per
  blob, as label maps do, and an empty mask is a negative (no object). A ``mask`` column without ``mask_label`` is
  refused (the file would not say what it shows, and a path kept as a label is never trained on). ``scan_mask`` is
  the scanned region, the record's ``scan_mask`` (not an object).
- any other column is kept verbatim in ``labels``.
A row with an unreadable number, a non-positive spacing, a missing image or mask, a mask of another size than its
image or (with --merge) no or several matching records is skipped with its reason. Merged fields replace the
record's old values (mask columns add objects); records without a row keep theirs; the conversations of every record
are rebuilt.
"""

from __future__ import annotations

import csv
import math
import os
import re
from pathlib import Path

import numpy as np

from ..data.manifest import Annotations, Record, read_manifest
from .common import (ImportContext, RowSkipped, SourceError, foreground, label_name, mask_pieces, read_label_png,
                     valid_split)

DESCRIPTION = "CSV of per-image labels (image, finding, view, *_mm, spacing), alone or with --merge DIR"

_MM = re.compile(r"(?:[ _]mm|\s*\(mm\))$", re.IGNORECASE)
_SUFFIXES = (".nii.gz", ".png", ".jpg", ".jpeg", ".bmp", ".tif", ".tiff", ".nii", ".nrrd", ".nhdr", ".dcm", ".mha",
             ".mhd")
_KNOWN = {"image", "finding", "diagnosis", "view", "site", "report", "split", "spacing", "spacing_x", "spacing_y",
          "mask", "mask_label", "scan_mask"}
_MASK_COL = re.compile(r"^(?P<label>.+?)[ _]mask$", re.IGNORECASE)


def _rows(source: Path) -> list[dict]:
    if not source.is_file():
        raise SourceError(f"{source}: CSV file not found")
    try:
        with open(source, newline="", encoding="utf-8-sig") as fh:
            reader = csv.DictReader(fh)
            header = [(h or "").strip().lower() for h in (reader.fieldnames or [])]
            if "image" not in header:
                raise SourceError(f"{source}: no 'image' column (header: {', '.join(header) or 'none'})")
            if "mask" in header and "mask_label" not in header:
                raise SourceError(f"{source}: column 'mask' needs the object's name: add a 'mask_label' column, or "
                                  "name the column after it ('<label>_mask', e.g. nodule_mask)")
            return [{(k or "").strip().lower(): (v or "").strip() for k, v in row.items() if k is not None}
                    for row in reader]
    except (UnicodeDecodeError, csv.Error) as exc:
        raise SourceError(f"{source}: not a readable CSV file: {exc}") from None


def _number(row: dict, col: str) -> float:
    try:
        v = float(row[col])
    except ValueError:
        raise RowSkipped("not a number", f"column {col!r}: {row[col]!r}") from None
    if not math.isfinite(v):
        raise RowSkipped("not a number", f"column {col!r}: {row[col]!r}")
    return v


def _spacing(row: dict) -> tuple[float, float] | None:
    if row.get("spacing"):
        s = _number(row, "spacing")
        sp = (s, s)
    elif row.get("spacing_x") or row.get("spacing_y"):
        if not (row.get("spacing_x") and row.get("spacing_y")):
            raise RowSkipped("spacing_x without spacing_y (or the reverse)")
        sp = (_number(row, "spacing_x"), _number(row, "spacing_y"))
    else:
        return None
    if min(sp) <= 0:
        raise RowSkipped("spacing must be positive", str(sp))
    return sp


def _parse(row: dict) -> dict:
    """The row's given fields, checked (RowSkipped before anything is written for a bad row)."""
    measurements = {label_name(_MM.sub("", col)) + " mm": _number(row, col)
                    for col in row if _MM.search(col) and row[col]}
    if row.get("split") and not valid_split(row["split"]):
        raise RowSkipped("split must be a plain name (letters, digits, - and _; not 'manifest')", row["split"])
    masks = [(row.get("mask_label") or "", row["mask"])] if row.get("mask") else []
    masks += [(m.group("label"), row[col]) for col in row
              if row[col] and col != "scan_mask" and (m := _MASK_COL.match(col))]
    for label, path in masks:
        if not label_name(label):
            raise RowSkipped("mask without a mask_label", path)
    labels = {k: v for k, v in row.items() if v and k not in _KNOWN and not _MM.search(k) and not _MASK_COL.match(k)}
    if row.get("view"):
        labels["view"] = row["view"]
    return {"diagnosis": row.get("finding") or row.get("diagnosis") or None, "report": row.get("report") or None,
            "measurements": measurements, "spacing": _spacing(row), "site": row.get("site") or None,
            "split": row.get("split") or None, "labels": labels,
            "masks": [(label_name(label), path) for label, path in masks], "scan_mask": row.get("scan_mask") or None}


def _mask_pieces(fields: dict, rec: Record, folder: Path) -> tuple[list, np.ndarray | None]:
    """The row's mask columns as (label, mask) pieces at the record's image size (lesion kinds one per blob; an empty
    mask none), and its scan mask; RowSkipped before anything is written when a mask is missing, unreadable, of
    another size or a label map."""
    if not fields["masks"] and not fields["scan_mask"]:
        return [], None
    from PIL import Image

    with Image.open(rec.image_path) as im:
        shape = (im.size[1], im.size[0])
    pieces = []
    for label, rel in fields["masks"]:
        path = (folder / rel).resolve()
        pieces += [(label, m) for m in mask_pieces(foreground(read_label_png(path, shape), rel), label)]
    scan = fields["scan_mask"]
    return pieces, None if scan is None else foreground(read_label_png((folder / scan).resolve(), shape), scan)


def _add_masks(ctx: ImportContext, rec: Record, pieces: list, scan: np.ndarray | None) -> None:
    """Write the pieces as objects of the record (after its own) and the scan mask as its scan_mask. The files go
    under the output folder; their paths are made relative to the record's root (a merged import's folder until
    `finish` rebases them)."""
    def rel(path: str) -> str:
        return Path(os.path.relpath(ctx.out.resolve() / path, Path(rec.root).resolve())).as_posix()

    for obj in ctx.mask_objects(pieces, rec.id, start=len(rec.annotations.objects)):
        obj.mask = rel(obj.mask)
        rec.annotations.objects.append(obj)
    if scan is not None:
        rec.scan_mask = rel(ctx.write_mask(scan, rec.id, "scan"))


def _apply(fields: dict, rec: Record) -> None:
    """Parsed fields onto the record (given cells replace old values)."""
    ann = rec.annotations
    ann.diagnosis = fields["diagnosis"] or ann.diagnosis
    ann.report = fields["report"] or ann.report
    ann.measurements.update(fields["measurements"])
    rec.spacing = fields["spacing"] or rec.spacing
    rec.site = fields["site"] or rec.site
    if fields["split"]:
        rec.extra["split"] = fields["split"]
    if fields["labels"]:
        rec.extra["labels"] = {**(rec.extra.get("labels") or {}), **fields["labels"]}


def _standalone(ctx: ImportContext, row: dict, folder: Path, seen: set) -> Record:
    if not row.get("image"):
        raise RowSkipped("no image path")
    fields = _parse(row)
    src = (folder / row["image"]).resolve()
    if src in seen:
        raise RowSkipped("image listed twice", row["image"])
    seen.add(src)
    rid = ctx.new_id(_stem(row["image"]))
    placed = ctx.place_image(src, rid)
    rec = Record(id=rid, image=placed.rel, spacing=placed.spacing, site=ctx.site,
                         annotations=Annotations(), extra={"source": {"format": "csv", "path": row["image"]}},
                         root=ctx.out)
    pieces, scan = _mask_pieces(fields, rec, folder)
    _apply(fields, rec)
    _add_masks(ctx, rec, pieces, scan)
    return rec


def _stem(name: str) -> str:
    base = Path(name).name
    low = base.lower()
    for s in _SUFFIXES:
        if low.endswith(s):
            return base[: -len(s)]
    return Path(base).stem


def _keys(name: str) -> list[str]:
    """Names an image goes by, most specific first."""
    base, stem = Path(name).name, _stem(name)
    keys = [base, stem] + ([stem[:-5]] if stem.endswith("_0000") else [])
    return list(dict.fromkeys(k for k in keys if k))


def _index(records: list[Record]) -> dict[str, set[int]]:
    index: dict[str, set[int]] = {}
    for i, rec in enumerate(records):
        src = rec.extra.get("source")
        names = [rec.image, rec.id] + ([src["path"]] if isinstance(src, dict) and isinstance(src.get("path"), str)
                                       else [])
        for key in {k for n in names for k in _keys(n)}:
            index.setdefault(key, set()).add(i)
    return index


def _merge_row(ctx: ImportContext, row: dict, records: list[Record], index: dict, used: set,
               folder: Path) -> None:
    if not row.get("image"):
        raise RowSkipped("no image path")
    fields = _parse(row)
    for key in _keys(row["image"]):
        hits = index.get(key)
        if hits:
            if len(hits) > 1:
                raise RowSkipped("image name matches several records", f"{row['image']}: {len(hits)} records")
            (i,) = hits
            if i in used:
                raise RowSkipped("image listed twice", row["image"])
            rec = records[i]
            pieces, scan = _mask_pieces(fields, rec, folder)
            used.add(i)
            _apply(fields, rec)
            _add_masks(ctx, rec, pieces, scan)
            return
    raise RowSkipped("no record with this image name in the merged import", row["image"])


def read(source: Path, ctx: ImportContext) -> list[Record]:
    """Standalone: one record per row. With options["merge"]: the merged import's records, rows applied."""
    rows = _rows(source)
    merge = ctx.options.get("merge")
    if merge is None:
        folder = Path(ctx.options.get("images") or source.parent)
        seen: set = set()
        records = [ctx.attempt(f"row {i + 2} {row.get('image', '')}".strip(), _standalone, ctx, row, folder, seen)
                   for i, row in enumerate(ctx.bar(rows, "csv"))]
        return [r for r in records if r is not None]
    manifest = Path(merge) / "manifest.jsonl"
    if not manifest.is_file():
        raise SourceError(f"{merge}: no manifest.jsonl to merge into (import the images first)")
    records = read_manifest(manifest)
    index, used = _index(records), set()
    folder = Path(ctx.options.get("images") or source.parent)
    for i, row in enumerate(rows):
        ctx.attempt(f"row {i + 2} {row.get('image', '')}".strip(), _merge_row, ctx, row, records, index, used,
                    folder)
    return records
