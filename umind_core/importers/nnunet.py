"""nnU-Net v2 raw dataset folder -> manifest records.

Layout read: ``dataset.json`` (``labels`` {name: value or [values]}, ``file_ending``, ``channel_names``),
``imagesTr/<case>_0000<ending>`` with ``labelsTr/<case><ending>``, and ``imagesTs/<case>_0000<ending>`` (with
``labelsTs/`` when a dataset ships test labels). 2D PNG, NIfTI, NRRD and MetaImage (``.mha``, or ``.mhd`` with
``ElementDataFile = LOCAL``: `imageio.opening` refuses a header that names its data elsewhere; a NIfTI/NRRD/MetaImage
of one slice counts as 2D).

Edge cases, decided here so a user can predict the manifest:
- Label values become label names (underscores read as spaces); a list value is an nnU-Net region (the union of
  its values). Background (0) and the ``ignore`` label (pixels nobody annotated) are not objects.
- A label whose name is a lesion kind (`common.is_lesion_kind`) gives one object per connected blob; any other
  label gives one object per value. A label absent from an image's map is a negative: no object.
- imagesTs cases without labels are imported as unlabelled records of split ``test`` (no objects, so no
  segmentation conversations), so a model can be run on them; cases of imagesTr without a label file, label files
  without an image and 3D volumes of several slices are skipped with a reason.
- Masks saved as 0/255 (how BUSI-derived sets are often shipped, grey or RGB with equal channels): when
  dataset.json names one foreground label of one value and a map holds no value but 0 and 255, 255 is that label
  (`_one_label_255`), so the cases are not emptied as "value 255 has no name". With several labels 255 stays unnamed
  and is counted, since it cannot say which label it is.
- Only channel 0000 is imported (the model reads one image); channel files 0001.. that exist are counted as left
  out (an RGB PNG dataset lists "R", "G", "B" in channel_names but ships one file per case: nothing is left out).
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from ..data.manifest import Annotations, Record
from .common import ImportContext, SourceError, label_map_at, label_name, load_json, split_label_map

DESCRIPTION = "nnU-Net v2 raw dataset folder (dataset.json, imagesTr/, labelsTr/, imagesTs/)"


def _label_names(spec: dict, path: Path) -> tuple[dict, set[int]]:
    """dataset.json `labels` -> ({value or tuple of values: name} without background, the ignore values)."""
    labels = spec.get("labels")
    if not isinstance(labels, dict) or not labels:
        raise SourceError(f"{path}: 'labels' must be an object of name -> value")
    names: dict = {}
    ignore: set[int] = set()
    for raw, value in labels.items():
        values = value if isinstance(value, list) else [value]
        if not values or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in values):
            raise SourceError(f"{path}: label {raw!r} has value {value!r}; expected a non-negative int or a list")
        if str(raw).lower() == "ignore":
            ignore.update(values)
            continue
        if str(raw).lower() == "background" or values == [0]:
            continue
        key = tuple(values) if isinstance(value, list) else values[0]
        names[key] = label_name(raw)
    return names, ignore


def _spec(source: Path) -> tuple[dict, str]:
    if not source.is_dir():
        raise SourceError(f"{source}: not a folder (expected an nnU-Net raw dataset folder)")
    path = source / "dataset.json"
    spec = load_json(path, "dataset.json")
    if not isinstance(spec, dict):
        raise SourceError(f"{path}: expected a JSON object")
    ending = spec.get("file_ending")
    if not isinstance(ending, str) or not ending.startswith("."):
        raise SourceError(f"{path}: 'file_ending' must be a file suffix such as \".png\" or \".nii.gz\"")
    if not (source / "imagesTr").is_dir() and not (source / "imagesTs").is_dir():
        raise SourceError(f"{source}: no imagesTr/ or imagesTs/ folder")
    return spec, ending


def _cases(folder: Path, ending: str) -> dict[str, Path]:
    """case id -> channel-0000 file of an images folder (other channels are not cases)."""
    tail = "_0000" + ending
    if not folder.is_dir():
        return {}
    return {p.name[: -len(tail)]: p for p in sorted(folder.iterdir())
            if p.is_file() and p.name.endswith(tail) and len(p.name) > len(tail)}


def _other_channels(folder: Path, ending: str) -> int:
    """How many channel files other than 0000 (``<case>_0001<ending>``...) an images folder holds."""
    if not folder.is_dir():
        return 0
    return sum(1 for p in folder.iterdir() if p.is_file() and p.name.endswith(ending)
               and re.fullmatch(r".+_(?!0000)\d{4}", p.name[: -len(ending)]))


def _one_label_255(lm: np.ndarray, names: dict, ignore: set[int]) -> np.ndarray:
    """A 0/255 map of a dataset.json with one foreground label of one value, that label's value in place of 255;
    any other map unchanged (several labels, regions, or values besides 0 and 255 say nothing about 255)."""
    if len(names) != 1 or 255 in ignore:
        return lm
    (key,) = names
    if isinstance(key, tuple) or key == 255:
        return lm
    present = {int(v) for v in np.unique(lm)} - {0}
    return np.where(lm == 255, key, lm) if present == {255} else lm


def _record(ctx: ImportContext, case: str, image: Path, label: Path | None, split: str,
            names: tuple[dict, set[int]], source: Path) -> Record:
    rid = ctx.new_id(case)
    placed = ctx.place_image(image, rid)
    objects = []
    if label is not None:
        lm = _one_label_255(label_map_at(label, placed), *names)
        objects = ctx.mask_objects(split_label_map(lm, names[0], ctx.log, ignore=names[1]), rid)
    src = {"format": "nnunet", "path": image.relative_to(source).as_posix()}
    if label is not None:
        src["label"] = label.relative_to(source).as_posix()
    return Record(id=rid, image=placed.rel, spacing=placed.spacing, site=ctx.site,
                          annotations=Annotations(objects=objects),
                          extra={"split": split, "labelled": label is not None, "source": src}, root=ctx.out)


def read(source: Path, ctx: ImportContext) -> list[Record]:
    """Every case of imagesTr (split train) and imagesTs (split test) as a record."""
    spec, ending = _spec(source)
    names = _label_names(spec, source / "dataset.json")
    jobs = []
    for split, images, labels in (("train", "imagesTr", "labelsTr"), ("test", "imagesTs", "labelsTs")):
        cases = _cases(source / images, ending)
        label_dir = source / labels
        for case, image in cases.items():
            label = label_dir / f"{case}{ending}"
            if not label.is_file():
                if split == "train":
                    ctx.log.skip(image.relative_to(source).as_posix(), "no label file in labelsTr")
                    continue
                label = None
            jobs.append((case, image, label, split))
        if label_dir.is_dir():
            for orphan in sorted(label_dir.glob(f"*{ending}")):
                if orphan.name[: -len(ending)] not in cases:
                    ctx.log.skip(orphan.relative_to(source).as_posix(), f"label file without an image in {images}")
    others = sum(_other_channels(source / folder, ending) for folder in ("imagesTr", "imagesTs"))
    if others:
        ctx.log.drop("image channel other than 0000 (the model reads one image)", others)
    records = []
    for case, image, label, split in ctx.bar(jobs, "nnunet"):
        rec = ctx.attempt(image.relative_to(source).as_posix(), _record, ctx, case, image, label, split, names,
                          source)
        if rec is not None:
            records.append(rec)
    return records
