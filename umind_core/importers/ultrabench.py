"""A folder prepared by the ``ultrabench`` package -> manifest records, splits kept.

Layout read (the package's dataset docstrings): ``<name>_v<version>/`` holding ``train.json``,
``validation.json`` and ``test.json`` (UltraBench 1.x; 2.x writes ``train_val.json`` and ``test.json``), each an
array of records with paths relative to the folder. The split is the file's stem. SOURCE may also be the folder
above one ``<name>_v<version>``.

Record keys:
- ``image``: the image. ``scan_mask``: the scanned region, our record's ``scan_mask`` (not an object).
- Every other ``*_mask`` key (also ``*_mask_binary``, and CAMUS's plain ``mask``) is a segmentation: an object
  named after the key (``kidney_mask`` -> "kidney", ``tumor_mask_binary`` -> "tumor"). A map holding several
  values is a multi-class label map split by value, with the value names the dataset docstrings give
  (`VALUE_NAMES`; unnamed values become "<key> <value>"). A ``*_mask_multiclass`` beside its ``*_mask_binary`` is
  left out (the same pixels again). Lesion kinds give one object per blob (`common.is_lesion_kind`); an empty mask is
  a negative. A mask path that is null is no annotation; one that names a missing file skips the record.
- ``bboxes`` with ``bbox_labels`` (GBCU, x_min, y_min, x_max, y_max): box objects.
- ``pathology``: the image's finding (``annotations.diagnosis``), the one class field our manifest has a place
  for. Every other scalar field (``view``, ``transplant``, ``quality``, ``label``, ``age``...) is kept as is in
  the record's extra key ``labels``, so nothing the source knows is lost; ``frame`` there is CAMUS's cine frame
  number, not our record's frame.
The dataset name sets the record's site where it names one (`SITES`).
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import numpy as np

from ..data.manifest import Annotations, ManifestObject, Record
from .common import (ImportContext, RowSkipped, SourceError, label_name, load_json, mask_pieces, read_label_png,
                     split_label_map)

DESCRIPTION = "UltraBench prepared folder (<name>_v<version>/{train,validation,test}.json)"

SPLITS = ("train", "validation", "val", "train_val", "test")
#: Value names of the multi-class masks, from the ultrabench dataset docstrings and the datasets' papers.
VALUE_NAMES: dict[tuple[str, str], dict[int, str]] = {
    ("open_kidney", "regions_mask"): {1: "central echo complex", 2: "medulla", 3: "cortex"},
    ("camus", "mask"): {1: "left ventricle", 2: "myocardium", 3: "left atrium"},
    ("psfhs", "psfh_mask"): {1: "pubic symphysis", 2: "fetal head"},
}
#: Record site per dataset, where a dataset shows one site.
SITES: dict[str, str] = {
    "open_kidney": "kidney", "stanford_thyroid": "thyroid", "psfhs": "fetal_head", "camus": "heart",
    "aul_liver": "liver", "aul_mass": "liver", "aul": "liver", "fatty_liver": "liver", "gbcu": "gallbladder",
    "mmotu": "ovary", "pocus": "lung",
}
_PATH_KEYS = ("image", "scan_mask", "bboxes", "bbox_labels")


def _mask_keys(rec: dict) -> list[str]:
    keys = [k for k in rec if k != "scan_mask" and (k == "mask" or k.endswith("_mask") or "_mask_" in k)]
    return [k for k in keys if not (k.endswith("_mask_multiclass")
                                    and k.replace("_multiclass", "_binary") in rec)]


def _object_name(key: str, dataset: str) -> str:
    return label_name(dataset if key == "mask" else key.split("_mask")[0])


def _is_null(v: Any) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v))


def _mask_objects(ctx: ImportContext, folder: Path, rec: dict, dataset: str, shape: tuple[int, int],
                  rid: str) -> list[ManifestObject]:
    pieces: list[tuple[str, np.ndarray]] = []
    for key in _mask_keys(rec):
        if _is_null(rec[key]):
            continue
        if not isinstance(rec[key], str):
            raise RowSkipped("malformed entry", f"{key} is {rec[key]!r}, not a path")
        lm = read_label_png(folder / rec[key], shape)
        name, values = _object_name(key, dataset), [int(v) for v in np.unique(lm) if v != 0]
        table = VALUE_NAMES.get((dataset, key))
        if table is not None:
            pieces += split_label_map(lm, table, ctx.log)
        elif len(values) <= 1:
            pieces += [(name, m) for m in mask_pieces(lm != 0, name)]
        else:
            pieces += split_label_map(lm, {v: f"{name} {v}" for v in values}, ctx.log)
    return ctx.mask_objects(pieces, rid)


def _box_objects(ctx: ImportContext, rec: dict, w: int, h: int) -> list[ManifestObject]:
    boxes, labels = rec.get("bboxes"), rec.get("bbox_labels")
    if _is_null(boxes):
        return []
    if not isinstance(boxes, list) or not isinstance(labels, list) or len(boxes) != len(labels):
        raise RowSkipped("malformed entry", "bboxes and bbox_labels must be lists of one length")
    out = []
    for box, lab in zip(boxes, labels):
        x1, y1, x2, y2 = (float(v) for v in box)
        x1, x2 = max(0.0, min(x1, x2)), min(w - 1.0, max(x1, x2))
        y1, y2 = max(0.0, min(y1, y2)), min(h - 1.0, max(y1, y2))
        if x1 > x2 or y1 > y2:
            ctx.log.drop("box outside the image")
            continue
        out.append(ManifestObject(label=label_name(lab), box=(x1, y1, x2, y2)))
    return out


def _labels(rec: dict, mask_keys: list[str]) -> dict:
    """The class fields kept verbatim (scalars only; NaN as null)."""
    out = {}
    for k, v in rec.items():
        if k in _PATH_KEYS or k in mask_keys or k.endswith("_mask") or "_mask_" in k:
            continue
        if isinstance(v, (str, int, bool)) or v is None:
            out[k] = v
        elif isinstance(v, float):
            out[k] = None if not math.isfinite(v) else v
    return out


def _record(ctx: ImportContext, folder: Path, rec: Any, split: str, dataset: str) -> Record:
    if not isinstance(rec, dict) or not isinstance(rec.get("image"), str) or not rec["image"]:
        raise RowSkipped("record without an image path")
    rid = ctx.new_id(Path(rec["image"]).stem)
    placed = ctx.place_image(folder / rec["image"], rid)
    shape = (placed.height, placed.width)
    scan = None
    if isinstance(rec.get("scan_mask"), str):
        scan = ctx.write_mask(read_label_png(folder / rec["scan_mask"], shape) != 0, rid, "scan")
    objects = _mask_objects(ctx, folder, rec, dataset, shape, rid) + _box_objects(ctx, rec, placed.width,
                                                                                  placed.height)
    pathology = rec.get("pathology")
    diagnosis = label_name(pathology) if isinstance(pathology, str) and pathology.strip() else None
    extra = {"split": split, "labels": _labels(rec, _mask_keys(rec)),
             "source": {"format": "ultrabench", "dataset": dataset, "path": rec["image"]}}
    return Record(id=rid, image=placed.rel, spacing=placed.spacing, site=ctx.site or SITES.get(dataset),
                          scan_mask=scan, annotations=Annotations(objects=objects, diagnosis=diagnosis),
                          extra=extra, root=ctx.out)


def _folder(source: Path) -> Path:
    if not source.is_dir():
        raise SourceError(f"{source}: not a folder (expected an UltraBench <name>_v<version> folder)")
    if any((source / f"{s}.json").is_file() for s in SPLITS):
        return source
    inner = [p for p in sorted(source.iterdir()) if p.is_dir() and any((p / f"{s}.json").is_file() for s in SPLITS)]
    if len(inner) == 1:
        return inner[0]
    raise SourceError(f"{source}: no {', '.join(s + '.json' for s in SPLITS)} here"
                      + (f" (several dataset folders inside: {', '.join(p.name for p in inner)})" if inner else ""))


def read(source: Path, ctx: ImportContext) -> list[Record]:
    """Every record of every split file, in split order."""
    folder = _folder(source)
    dataset = re.sub(r"_v\d[\w.]*$", "", folder.name)
    jobs = []
    for split in SPLITS:
        path = folder / f"{split}.json"
        if not path.is_file():
            continue
        rows = load_json(path, f"{split} split")
        if not isinstance(rows, list):
            raise SourceError(f"{path}: expected a JSON array of records")
        jobs += [(split, i, row) for i, row in enumerate(rows)]
    records = []
    for split, i, row in ctx.bar(jobs, "ultrabench"):
        name = row.get("image") if isinstance(row, dict) else None
        rec = ctx.attempt(f"{split}.json[{i}] {name or ''}".strip(), _record, ctx, folder, row, split, dataset)
        if rec is not None:
            records.append(rec)
    return records
