"""The HC18 challenge release (fetal head circumference) -> manifest records, subjects kept as groups.

Layout read (van den Heuvel et al. 2018, PLoS ONE 13(8): e0200412; data DOI 10.5281/zenodo.1327317), SOURCE being
the folder that holds it:
- ``training_set/NNN_HC.png`` and ``NNN_2HC.png`` .. ``NNN_4HC.png`` (further images of subject NNN), each with
  ``NNN_kHC_Annotation.png`` beside it: the head's ellipse drawn as a thin outline (copies that ship it filled read
  the same: filling a filled ellipse changes nothing);
- ``training_set_pixel_size_and_HC.csv``: ``filename``, ``pixel size(mm)`` (square pixels), ``head circumference
  (mm)`` measured by a sonographer;
- ``test_set/NNN_HC.png`` with ``test_set_pixel_size.csv`` (``filename``, ``pixel size(mm)``), where present.

What a record holds, decided here:
- the fetal head as one object labelled "fetal head" on site "fetal_head", the names the synthetic generator and
  `landmarks.ORGANS` use, so the model's existing prompts (segment, BPD, head circumference) apply; its mask is the
  annotation filled (`filled_annotation`: small gaps closed, holes filled, and the result checked to be the ellipse
  its own moments describe, so an outline that would not close is skipped, never imported as a ring);
- spacing = the pixel size on both axes; the head circumference in ``annotations.measurements["HC mm"]`` (the key
  the generator writes); no finding (the release states none);
- the subject in the extra key ``group`` (``NNN``; ``test_set/NNN`` for the test set, whose numbers are other
  subjects), so `umind import --split` never puts one subject on both sides;
- test-set images become unlabelled records (``labelled``: false, no objects) of split ``test_set``.
Rows and files that cannot be used are skipped with a reason: a CSV row without its image or with a number that is
not positive, an image without a CSV row or (training set) without its annotation, an annotation without its image,
a file name of another pattern, and an annotation whose ellipse disagrees with the CSV's head circumference by more
than `HC_TOLERANCE` (a mismatched file; on the release's 704 training images the two agree to 1.2 mm on average,
3.5 mm at most).
"""

from __future__ import annotations

import csv
import math
import re
from pathlib import Path

import numpy as np

from ..data.manifest import Annotations, Record
from ..data.split import GROUP_KEY
from ..answers.landmarks import ellipse_axes, mask_perimeter
from .common import ImportContext, RowSkipped, SourceError, read_label_png

DESCRIPTION = "HC18 release folder (training_set/NNN_HC.png + _Annotation.png, training_set_pixel_size_and_HC.csv)"

SITE, LABEL, HC_KEY = "fetal_head", "fetal head", "HC mm"
#: (folder, CSV, whether its images are annotated)
SETS = (("training_set", "training_set_pixel_size_and_HC.csv", True), ("test_set", "test_set_pixel_size.csv", False))
FILENAME, PIXEL_SIZE, HC = "filename", "pixel size(mm)", "head circumference (mm)"
#: the largest relative difference between the filled annotation's ellipse perimeter and the CSV's HC
HC_TOLERANCE = 0.10
#: the filled region's area over its moment ellipse's: 1 for a filled ellipse, far below for a ring left unfilled
FILL_RATIO = (0.9, 1.1)
_IMAGE = re.compile(r"^(\d+)_(\d*)HC\.png$", re.IGNORECASE)
_ANNOTATION = re.compile(r"^(\d+)_(\d*)HC_Annotation\.png$", re.IGNORECASE)


def filled_annotation(outline: np.ndarray) -> np.ndarray:
    """The head's solid mask from its annotation (non-zero = drawn): gaps of a pixel or two closed, the inside filled.
    RowSkipped when the result is not an ellipse: an empty drawing, or a region whose area is not that of the
    ellipse of its own second moments (`landmarks.ellipse_axes`), as an outline that stayed open leaves a ring."""
    from scipy import ndimage

    drawn = np.pad(np.asarray(outline) != 0, 3)  # padded: closing must not eat an outline at the image's edge
    closed = ndimage.binary_closing(drawn, structure=np.ones((3, 3), bool), iterations=2) | drawn
    mask = ndimage.binary_fill_holes(closed)[3:-3, 3:-3]
    if mask.sum() < 20:
        raise RowSkipped("empty annotation", f"{int(mask.sum())} pixels")
    long_axis, short_axis = ellipse_axes(mask)
    ellipse_area = math.pi * math.dist(long_axis[:2], long_axis[2:]) * math.dist(short_axis[:2], short_axis[2:]) / 4
    ratio = float(mask.sum()) / max(ellipse_area, 1e-9)
    if not FILL_RATIO[0] <= ratio <= FILL_RATIO[1]:
        raise RowSkipped("annotation outline could not be filled to an ellipse",
                         f"filled area {ratio:.2f} x its moment ellipse's")
    return mask


def _number(row: dict, col: str) -> float:
    """A positive, finite number of the row, or RowSkipped naming the column."""
    try:
        value = float(row.get(col) or "nan")
    except ValueError:
        value = float("nan")
    if not (math.isfinite(value) and value > 0):
        raise RowSkipped(f"'{col}' is not a positive number", repr(row.get(col)))
    return value


def _rows(path: Path, columns: tuple[str, ...]) -> dict[str, dict]:
    """filename -> row of one of the release's CSVs; SourceError for a file without the columns."""
    try:
        with open(path, newline="", encoding="utf-8-sig") as fh:
            reader = csv.DictReader(fh)
            header = [(h or "").strip() for h in reader.fieldnames or []]
            missing = [c for c in columns if c not in header]
            if missing:
                raise SourceError(f"{path}: no column {', '.join(map(repr, missing))} (header: {', '.join(header)})")
            rows = [{(k or "").strip(): (v or "").strip() for k, v in row.items()} for row in reader]
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise SourceError(f"{path}: not a readable CSV file: {exc}") from None
    return {row[FILENAME]: row for row in rows if row.get(FILENAME)}


def _files(folder: Path, ctx: ImportContext, where: str) -> tuple[dict[str, Path], dict[str, Path]]:
    """(image name -> path, image name -> its annotation's path) of one set's folder; other files are skipped."""
    images, annotations = {}, {}
    for path in sorted(p for p in folder.iterdir() if p.is_file()):
        m = _ANNOTATION.match(path.name)
        if m:
            annotations[path.name[: -len("_Annotation.png")] + ".png"] = path
        elif _IMAGE.match(path.name):
            images[path.name] = path
        else:
            ctx.log.skip(f"{where}/{path.name}", "not an HC18 file name (NNN_HC.png, NNN_kHC_Annotation.png)")
    for name in sorted(set(annotations) - set(images)):
        ctx.log.skip(f"{where}/{annotations[name].name}", "annotation without its image")
    return images, annotations


def _record(ctx: ImportContext, where: str, image: Path, annotation: Path | None, row: dict,
            labelled: bool) -> Record:
    """One image's record; RowSkipped (before anything is written) for a bad row."""
    spacing = None if row is None else (_number(row, PIXEL_SIZE),) * 2
    hc = _number(row, HC) if labelled else None
    subject = _IMAGE.match(image.name).group(1)
    rid = ctx.new_id(image.stem)
    placed = ctx.place_image(image, rid)
    objects, measurements = [], {}
    if labelled:
        mask = filled_annotation(read_label_png(annotation, (placed.height, placed.width)))
        read = mask_perimeter(mask, spacing).value
        if abs(read - hc) > HC_TOLERANCE * hc:
            raise RowSkipped("annotation's ellipse disagrees with the CSV's head circumference",
                             f"{read:.1f} mm read off the annotation, {hc} mm in the CSV")
        objects = ctx.mask_objects([(LABEL, mask)], rid)
        measurements[HC_KEY] = hc
    source = {"format": "hc18", "path": f"{where}/{image.name}"}
    extra = {GROUP_KEY: subject if labelled else f"{where}/{subject}", "labelled": labelled, "source": source}
    if annotation is not None:
        source["annotation"] = f"{where}/{annotation.name}"
    if not labelled:
        extra["split"] = where
    return Record(id=rid, image=placed.rel, spacing=spacing, site=ctx.site or SITE,
                          annotations=Annotations(objects=objects, measurements=measurements), extra=extra,
                          root=ctx.out)


def _jobs(source: Path, ctx: ImportContext) -> list[tuple]:
    """(set folder, image, annotation, CSV row, labelled) for every usable image; the rest skipped with a reason."""
    jobs = []
    for where, csv_name, labelled in SETS:
        folder = source / where
        if not folder.is_dir():
            continue
        columns = (FILENAME, PIXEL_SIZE) + ((HC,) if labelled else ())
        if not (source / csv_name).is_file():
            if labelled:
                raise SourceError(f"{source / csv_name}: not found (the training set's pixel sizes and HC)")
            rows = None
        else:
            rows = _rows(source / csv_name, columns)
        images, annotations = _files(folder, ctx, where)
        for name in sorted(set(rows or ()) - set(images)):
            ctx.log.skip(f"{csv_name}: {name}", f"CSV row names no image in {where}/")
        for name, image in images.items():
            if rows is not None and name not in rows:
                ctx.log.skip(f"{where}/{name}", f"image not listed in {csv_name}")
            elif labelled and name not in annotations:
                ctx.log.skip(f"{where}/{name}", "no annotation (NNN_kHC_Annotation.png) beside the image")
            else:
                jobs.append((where, image, annotations.get(name), None if rows is None else rows[name], labelled))
    return jobs


def read(source: Path, ctx: ImportContext) -> list[Record]:
    """Every training image (labelled) and test image (unlabelled) of the release."""
    if not source.is_dir() or not any((source / where).is_dir() for where, _, _ in SETS):
        raise SourceError(f"{source}: no training_set/ or test_set/ folder (expected the HC18 release's folder)")
    records = []
    for where, image, annotation, row, labelled in ctx.bar(_jobs(source, ctx), "hc18"):
        rec = ctx.attempt(f"{where}/{image.name}", _record, ctx, where, image, annotation, row, labelled)
        if rec is not None:
            records.append(rec)
    return records
