"""COCO instance annotations (one JSON file) + an image folder -> manifest records.

Each non-crowd annotation is one object (COCO annotations are already instances, so the lesion-components rule of
label maps does not apply): label = its category's name, box = ``bbox`` [x, y, w, h] as inclusive pixels
[x, y, x + w - 1, y + h - 1] (COCO's box edges lie on pixel borders, ours on pixel centres), mask = the
``segmentation`` polygons rasterised (pixel-border coordinates, as COCO draws them) or the RLE decoded (counts
list or compressed string, decoded here so no pycocotools is needed).

Keypoints (COCO's person-keypoint layout: the category's ``keypoints`` names, the annotation's flat
``[x1, y1, v1, ...]``) become the object's named keypoints; a point with visibility 0 was not labelled and is left
out, 1 (labelled, occluded) and 2 (visible) are kept. Their values are taken as pixel indices, our pixel-centre
convention, as detectron2 reads COCO keypoints (it adds 0.5 to reach its continuous frame). An annotation with
keypoints alone (no box, no mask) is an object of its keypoints.

``iscrowd`` 1 with an RLE mask is one object with that mask: CVAT writes every mask (brush, magic wand, a mask
drawn by any tool) that way, because its COCO exporter (Datumaro's) sets ``iscrowd`` to "this instance is an RLE
mask", and in the tools that export ultrasound labels an RLE is how a hand-drawn region is stored, not a group. The
MS-COCO sense of a crowd (a group nobody outlined one by one) cannot be told from such a mask by the file alone; a
mask of a whole group would be read as one region of its category, never dropped silently. ``iscrowd`` 1 with
polygons or without a segmentation keeps the MS-COCO reading: not an object, left out of the record and counted in
the summary (the image and its other objects are kept). An image without annotations is a negative (a record with
no objects).

Categories that are findings (`findings.finding_word`: "benign", "malignant", "normal" and their synonyms, as
Roboflow's and Kaggle's breast and thyroid sets name their classes) are not objects to draw: an annotation of a
benign or malignant category becomes a lesion object (`common.lesion_label`: "<--site> lesion", "lesion" without
--site) carrying that finding, and the record's diagnosis is the gravest finding of its annotations, so diagnose is
trained and scored. A "normal" annotation has no lesion to draw: it makes the record's finding normal and its box
is counted as left out.

Annotations naming an unknown image or category, and images whose file is missing or whose size differs from the
JSON, are skipped with a reason.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image, ImageDraw

from ..data.manifest import Annotations, Keypoint, ManifestObject, Record
from ..answers.findings import finding_word, gravest
from ..masks import mask_box
from .common import ImportContext, RowSkipped, SourceError, label_name, lesion_label, load_json

DESCRIPTION = "COCO JSON (images, annotations with bbox / polygons / RLE / keypoints, categories) with --images DIR"


# ------------------------------------------------------------------------------------------------ masks

def rle_counts_from_string(s: str) -> list[int]:
    """COCO's compressed RLE string -> run lengths (the LEB128-like code of pycocotools' rleFrString:
    6-bit groups with a continuation bit, each count after the second stored as a difference)."""
    counts: list[int] = []
    p = 0
    while p < len(s):
        x, k, more = 0, 0, True
        while more:
            if p >= len(s):
                raise ValueError("truncated RLE string")
            c = ord(s[p]) - 48
            if not 0 <= c < 64:
                raise ValueError(f"character {s[p]!r} is not part of an RLE string")
            x |= (c & 0x1F) << (5 * k)
            more = bool(c & 0x20)
            p, k = p + 1, k + 1
            if not more and (c & 0x10):
                x |= -1 << (5 * k)
        if len(counts) > 2:
            x += counts[-2]
        counts.append(x)
    return counts


def rle_decode(rle: dict, height: int, width: int) -> np.ndarray:
    """An RLE dict (``counts`` list or string, ``size`` [h, w]) -> H x W bool mask (runs are column-major,
    starting with background)."""
    size = rle.get("size")
    if not isinstance(size, (list, tuple)) or [int(v) for v in size] != [height, width]:
        raise RowSkipped("RLE size differs from the image", f"size {size}, image {[height, width]}")
    counts = rle.get("counts")
    if isinstance(counts, (bytes, str)):
        counts = rle_counts_from_string(counts.decode("ascii") if isinstance(counts, bytes) else counts)
    if not isinstance(counts, list) or any(isinstance(c, bool) or not isinstance(c, int) or c < 0 for c in counts):
        raise RowSkipped("malformed RLE counts")
    if sum(counts) != height * width:
        raise RowSkipped("RLE counts do not sum to height x width", f"{sum(counts)} != {height * width}")
    flat = np.zeros(height * width, dtype=bool)
    pos = 0
    for i, c in enumerate(counts):
        if i % 2:
            flat[pos:pos + c] = True
        pos += c
    return flat.reshape(width, height).T


_FINE = 15  # odd: the middle sub-pixel of each pixel sits exactly on the pixel's centre


def polygons_mask(polygons: list, height: int, width: int) -> np.ndarray:
    """COCO polygons (flat [x1, y1, x2, y2, ...] lists, x/y on pixel borders) -> bool mask, union of parts.

    A pixel is inside when its centre is, as COCO's own rasteriser decides. Pillow rounds vertices to whole
    pixels and fills the outline too (IoU about 0.87 against pycocotools on 150-700 px shapes), so each polygon is
    drawn on a grid 15x finer over its own bounding box and the sub-pixel at each pixel centre is read
    (IoU >= 0.97 on the same shapes)."""
    out = np.zeros((height, width), dtype=bool)
    s = _FINE
    for poly in polygons:
        if not isinstance(poly, list) or len(poly) < 6 or len(poly) % 2:
            continue  # a polygon needs three points
        xs, ys = np.asarray(poly[0::2], dtype=np.float64), np.asarray(poly[1::2], dtype=np.float64)
        if not (np.isfinite(xs).all() and np.isfinite(ys).all()):
            continue
        x0, x1 = max(int(np.floor(xs.min())) - 1, 0), min(int(np.ceil(xs.max())) + 1, width)
        y0, y1 = max(int(np.floor(ys.min())) - 1, 0), min(int(np.ceil(ys.max())) + 1, height)
        if x0 >= x1 or y0 >= y1:
            continue  # wholly outside the image
        canvas = Image.new("1", ((x1 - x0) * s, (y1 - y0) * s), 0)
        ImageDraw.Draw(canvas).polygon([((x - x0) * s - 0.5, (y - y0) * s - 0.5) for x, y in zip(xs, ys)], fill=1)
        out[y0:y1, x0:x1] |= np.asarray(canvas, dtype=bool)[s // 2::s, s // 2::s]
    return out


def _mask_of(ann: dict, height: int, width: int) -> np.ndarray | None:
    seg = ann.get("segmentation")
    if isinstance(seg, dict):
        return rle_decode(seg, height, width)
    if isinstance(seg, list) and seg:
        return polygons_mask(seg, height, width)
    return None


def _box_of(ann: dict, width: int, height: int) -> tuple[float, float, float, float] | None:
    """COCO [x, y, w, h] (pixel borders) -> inclusive pixel box clipped to the image; None when absent."""
    bbox = ann.get("bbox")
    if bbox is None or bbox == []:
        return None
    if not isinstance(bbox, list) or len(bbox) != 4:
        raise RowSkipped("malformed bbox", repr(bbox))
    x, y, w, h = (float(v) for v in bbox)
    if w <= 0 or h <= 0:
        raise RowSkipped("empty bbox", repr(bbox))
    x1, y1 = min(max(x, 0.0), width - 1.0), min(max(y, 0.0), height - 1.0)
    x2, y2 = min(max(x + w - 1.0, x1), width - 1.0), min(max(y + h - 1.0, y1), height - 1.0)
    return x1, y1, x2, y2


def _keypoints_of(ann: dict, names: list[str], width: int, height: int) -> list[Keypoint]:
    """COCO's flat [x, y, v, ...] -> the labelled points (v > 0), named by the category's list."""
    flat = ann.get("keypoints")
    if flat is None or flat == []:
        return []
    if not isinstance(flat, list) or len(flat) % 3 or not all(isinstance(v, (int, float)) for v in flat):
        raise RowSkipped("malformed keypoints", "keypoints must be a flat list of x, y, visibility triples")
    if names and len(flat) // 3 != len(names):
        raise RowSkipped("keypoints do not match the category's names",
                         f"{len(flat) // 3} points, category names {len(names)}")
    out = []
    for i in range(len(flat) // 3):
        x, y, v = (float(c) for c in flat[3 * i: 3 * i + 3])
        if v <= 0:
            continue
        if not (0.0 <= x <= width - 1.0 and 0.0 <= y <= height - 1.0):
            raise RowSkipped("keypoint outside the image", f"point {i + 1} at ({x:g}, {y:g}), image {width}x{height}")
        out.append(Keypoint(names[i] if names else f"keypoint {i + 1}", (x, y)))
    return out


# ------------------------------------------------------------------------------------------------ records

def _object(ctx: ImportContext, ann: dict, category: tuple[str, list[str]], rid: str, k: int, width: int,
            height: int) -> ManifestObject:
    label, point_names = category
    keypoints = _keypoints_of(ann, point_names, width, height)
    mask = _mask_of(ann, height, width)
    if mask is not None and not mask.any():
        ctx.log.drop("segmentation with no pixels inside the image (box kept)")
        mask = None
    box = _box_of(ann, width, height)
    if box is None and mask is not None:
        box = tuple(float(v) for v in mask_box(mask))
    if box is None and not keypoints:
        raise RowSkipped("annotation without a box, a mask or keypoints")
    return ManifestObject(label=label, box=box, keypoints=keypoints,
                          mask=None if mask is None else ctx.write_mask(mask, rid, str(k)))


def _record(ctx: ImportContext, img: dict, anns: list[dict], cats: dict, images_dir: Path) -> Record:
    name = img.get("file_name")
    if not isinstance(name, str) or not name:
        raise RowSkipped("image entry without file_name")
    rid = ctx.new_id(Path(name).stem)
    placed = ctx.place_image(images_dir / name, rid)
    if (img.get("width"), img.get("height")) not in ((None, None), (placed.width, placed.height)):
        raise RowSkipped("image size differs from the COCO entry",
                         f"{name}: file {placed.width}x{placed.height}, JSON {img.get('width')}x{img.get('height')}")
    objects, findings = [], []
    for ann in anns:
        if ann.get("iscrowd") and not isinstance(ann.get("segmentation"), dict):
            ctx.log.drop("crowd region without an RLE mask (iscrowd 1 with polygons or no segmentation: not one "
                         "object)")
            continue
        category = cats[ann["category_id"]]
        finding = finding_word(category[0])
        if finding == "normal":
            findings.append(finding)
            ctx.log.drop("box or mask of a 'normal' category (kept as the image's finding: no lesion to draw)")
            continue
        if finding is not None:
            category = (lesion_label(ctx.site), category[1])
        obj = ctx.attempt(f"annotation {ann.get('id')} of {name}", _object, ctx, ann, category,
                          rid, len(objects), placed.width, placed.height)
        if obj is not None:
            obj.diagnosis = finding
            findings += [finding] if finding else []
            objects.append(obj)
    return Record(id=rid, image=placed.rel, spacing=placed.spacing, site=ctx.site,
                          annotations=Annotations(objects=objects, diagnosis=gravest(findings)),
                          extra={"source": {"format": "coco", "path": name, "image_id": img.get("id")}},
                          root=ctx.out)


def _is_key(v: Any) -> bool:
    """COCO ids are ints (some exporters write strings); anything else cannot name an image or category."""
    return isinstance(v, (int, str)) and not isinstance(v, bool)


def _load(source: Path) -> tuple[list, list, dict]:
    doc = load_json(source, "COCO annotation file")
    if not isinstance(doc, dict) or not isinstance(doc.get("images"), list):
        raise SourceError(f"{source}: not a COCO file (no 'images' list)")
    anns, cats = doc.get("annotations", []), doc.get("categories", [])
    if not isinstance(anns, list) or not isinstance(cats, list):
        raise SourceError(f"{source}: 'annotations' and 'categories' must be lists")
    names: dict[Any, tuple[str, list[str]]] = {}
    for c in cats:
        if not isinstance(c, dict) or not _is_key(c.get("id")) or not str(c.get("name", "")).strip():
            raise SourceError(f"{source}: every category needs an id and a name, got {c!r}")
        points = c.get("keypoints") or []
        if not isinstance(points, list) or not all(isinstance(n, str) and n.strip() for n in points):
            raise SourceError(f"{source}: category {c['name']!r}: 'keypoints' must be a list of names")
        names[c["id"]] = (label_name(c["name"]), [label_name(n) for n in points])
    return doc["images"], anns, names


def read(source: Path, ctx: ImportContext) -> list[Record]:
    """One record per entry of ``images``; --images (default: the JSON's folder) holds the files."""
    images, anns, cats = _load(source)
    images_dir = Path(ctx.options.get("images") or source.parent)
    if not images_dir.is_dir():
        raise SourceError(f"{images_dir}: image folder not found (give it with --images)")
    ids = {img.get("id") for img in images if isinstance(img, dict) and _is_key(img.get("id"))}
    by_image: dict[Any, list[dict]] = {}
    for ann in anns:
        where = f"annotation {ann.get('id') if isinstance(ann, dict) else ann!r}"
        if not isinstance(ann, dict) or not _is_key(ann.get("image_id")) or ann["image_id"] not in ids:
            ctx.log.skip(where, "annotation for an unknown image id")
        elif not _is_key(ann.get("category_id")) or ann["category_id"] not in cats:
            ctx.log.skip(where, "annotation with an unknown category id")
        else:
            by_image.setdefault(ann["image_id"], []).append(ann)
    records = []
    for img in ctx.bar(images, "coco"):
        if not isinstance(img, dict):
            ctx.log.skip(repr(img)[:80], "malformed entry", "image entry is not an object")
            continue
        rec = ctx.attempt(str(img.get("file_name")), _record, ctx, img, by_image.get(img.get("id"), []), cats,
                          images_dir)
        if rec is not None:
            records.append(rec)
    return records
