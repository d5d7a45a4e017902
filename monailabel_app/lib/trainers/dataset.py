"""The datastore's labels -> a training manifest (and a held-out one) the trainer reads.

A final label is a label map in the image's geometry (what Slicer saves, or what umind_segment returned
and a person corrected) plus its info: `label_names`, and from the UMind Slicer module the corrected
markups, the finding and the report (corrections.py maps those onto the frames). Every frame with any
annotation becomes one manifest record: the frame as a PNG, one mask per named label value with its box (an
organ's mask with the structures inside it that the label map paints over it, as the manifests draw organs),
the ROIs, landmarks and calipers, and the image's diagnosis. The conversation builder turns the records
into every task's conversations, so training wording matches serving wording.

The split is by image id (a hash), so an image's frames never sit on both sides and the held-out set stays
the same from run to run as labels are added; images held out by an earlier run stay held out.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from PIL import Image

from umind_core.data.manifest import Annotations, Keypoint, Line, ManifestObject, Record, write_manifest
from umind_core.data.split import hash_split
from umind_core.imageio import Study, read_label_map, read_study
from umind_core.masks import mask_box
from umind_core.painter import unpainted

from ..wire import LABEL_NAMES
from .corrections import FrameCorrections, info_fields, read_corrections

__all__ = ["ExportedData", "DatasetError", "export_datastore"]

logger = logging.getLogger(__name__)


class DatasetError(ValueError):
    """The datastore's labels cannot make a training set (too few, unreadable); the message says which."""


@dataclass
class ExportedData:
    train_manifest: Path
    val_manifest: Path
    train_ids: list[str]
    val_ids: list[str]
    n_train_records: int
    n_val_records: int
    skipped: dict[str, str]
    notes: list[str] = field(default_factory=list)  # markups, values and findings skipped, with the reason


def _label_names(info: dict, conf_labels: tuple[str, ...]) -> dict[int, str]:
    names = {i + 1: name for i, name in enumerate(conf_labels)}
    given = info_fields(info).get(LABEL_NAMES)
    if isinstance(given, dict):
        for name, value in given.items():
            if isinstance(value, int) and not isinstance(value, bool) and value > 0 and str(name).strip():
                names[value] = str(name).strip()
    return names


def _split(ids: list[str], fraction: float, min_val: int, seed: int) -> tuple[list[str], list[str]]:
    """The project's one split (`umind_core.data.split`), salted by the run's seed; needs two images."""
    if len(ids) < 2:
        raise DatasetError(f"training needs at least 2 labeled images (one to train on, one held out), "
                           f"the datastore has {len(ids)}")
    train, val = hash_split(ids, fraction, min_val=min_val, salt=f"umind-holdout:{seed}")
    return train, sorted(val)


def _frame_objects(lab: np.ndarray, names: dict[int, str], fixes: FrameCorrections, target: str | None,
                   safe: str, out_dir: Path, notes: list[str]) -> list[ManifestObject]:
    """Objects of one frame: one per named label value (mask + its box), then the corrected markups.

    A corrected ROI replaces the box of the same-named mask object (the person drew it on purpose);
    landmarks join the object whose mask holds them, else the landmark target the client named, else
    an object of their own; lines join the object named by the target, else one of their own.
    """
    objects: list[ManifestObject] = []
    masks: list[np.ndarray] = []
    for v in [int(v) for v in np.unique(lab) if v > 0]:
        if v not in names:
            notes.append(f"{safe}: label value {v} has no name (label_names nor conf labels): skipped")
            continue
        m = unpainted(lab, v)  # an organ gets back the nested structures painted over it (umind_core.painter)
        mask_rel = f"masks/{safe}_{v}.png"
        Image.fromarray(m.astype(np.uint8) * 255).save(out_dir / mask_rel)
        objects.append(ManifestObject(label=names[v], mask=mask_rel, box=mask_box(m)))
        masks.append(m)
    boxed: set[int] = set()
    for label, box in fixes.boxes:
        i = next((i for i, o in enumerate(objects) if o.label == label and o.mask and i not in boxed), None)
        if i is None:
            objects.append(ManifestObject(label=label, box=box))
            masks.append(None)
        else:
            objects[i].box = box
            boxed.add(i)
    for name, xy in fixes.keypoints:
        x, y = int(round(xy[0])), int(round(xy[1]))
        i = next((i for i, m in enumerate(masks) if m is not None and m[y, x]), None)
        if i is None:
            i = _object_named(objects, masks, target or name)
        objects[i].keypoints.append(Keypoint(name, xy))
    for name, xy, mm in fixes.lines:
        if mm is None:  # a caliper answer always states its length: one without would teach to omit it
            notes.append(f"{safe}: line {name!r}: the image has no physical spacing, so its length in mm is "
                         "unknown: not used for the measure task")
            continue
        i = _object_named(objects, masks, target or name)
        objects[i].lines.append(Line(name, xy, mm))
    return objects


def _object_named(objects: list[ManifestObject], masks: list, label: str) -> int:
    i = next((i for i, o in enumerate(objects) if o.label == label), None)
    if i is None:
        objects.append(ManifestObject(label=label))
        masks.append(None)
        i = len(objects) - 1
    return i


def _image_records(image_id: str, study: Study, labels: np.ndarray, info: dict, conf_labels: tuple[str, ...],
                   out_dir: Path, notes: list[str]) -> list[Record]:
    """Manifest records (one per annotated frame) of one labeled image."""
    names = _label_names(info, conf_labels)
    fixes = read_corrections(info, study)
    notes += [f"{image_id}: {reason}" for reason in fixes.skipped]
    recs = []
    for frame in study.frames:
        lab = labels[frame.index]
        frame_fixes = fixes.frames.get(frame.index, FrameCorrections())
        whole = study.geometry.kind == "2d"  # a finding is about the image; on a clip, about marked frames
        if not lab.any() and not frame_fixes and not (whole and (fixes.finding or fixes.report)):
            continue  # unlabeled slices of a volume/clip are not negatives: nobody looked at them
        rid = f"{image_id}-f{frame.index:04d}"
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in rid)
        Image.fromarray(frame.pixels).save(out_dir / "images" / f"{safe}.png")
        objects = _frame_objects(lab, names, frame_fixes, fixes.landmark_target, safe, out_dir, notes)
        diagnosis = fixes.finding
        recs.append(Record(id=safe, image=f"images/{safe}.png", frame=0, spacing=frame.spacing,
                                   annotations=Annotations(objects, diagnosis=diagnosis, report=fixes.report),
                                   conversations=[],
                                   extra={"source": {"datastore_image": image_id, "frame": frame.index}},
                                   root=out_dir))
    return recs


def export_datastore(datastore, out_dir: Path, conf_labels: tuple[str, ...], val_fraction: float,
                     min_val: int, seed: int, held_out: set[str] | frozenset[str] = frozenset()) -> ExportedData:
    """Write out_dir/{images,masks} and train_raw.jsonl / val.jsonl from the final labels.

    `held_out`: image ids that stay on the held-out side whatever the split says (the regression history:
    an image an earlier run was scored on must never be trained on later, or the gate would grade its own
    homework).
    """
    from monailabel.interfaces.datastore import DefaultLabelTag

    tag = DefaultLabelTag.FINAL.value
    out_dir = Path(out_dir)
    (out_dir / "images").mkdir(parents=True, exist_ok=True)
    (out_dir / "masks").mkdir(parents=True, exist_ok=True)
    records: dict[str, list[Record]] = {}
    skipped: dict[str, str] = {}
    notes: list[str] = []
    for image_id in sorted(datastore.get_labeled_images()):
        try:
            study = read_study(datastore.get_image_uri(image_id))
            labels = read_label_map(datastore.get_label_uri(image_id, tag), study.geometry)
            info = datastore.get_label_info(image_id, tag) or {}
            recs = _image_records(image_id, study, labels, info, conf_labels, out_dir, notes)
        except Exception as exc:  # one bad label must not stop training on the others
            skipped[image_id] = f"{type(exc).__name__}: {exc}"
            logger.warning(f"umind train: skipping {image_id}: {exc}")
            continue
        if any(r.annotations.objects or r.annotations.diagnosis or r.annotations.report for r in recs):
            records[image_id] = recs
        else:
            skipped[image_id] = "the label holds no annotation (empty label map, no markups or finding)"
    fresh = sorted(i for i in records if i not in held_out)
    kept_out = set(records) & set(held_out)
    train_ids, val_ids = _split(fresh, val_fraction, min_val, seed) if len(fresh) >= 2 or not kept_out \
        else (fresh, [])
    val_ids = sorted(set(val_ids) | kept_out)
    if not train_ids:
        raise DatasetError(f"training needs at least 1 labeled image that is not held out; the datastore has "
                           f"{len(records)} usable, {len(val_ids)} held out")
    train = [r for i in train_ids for r in records[i]]
    val = [r for i in val_ids for r in records[i]]
    return ExportedData(write_manifest(train, out_dir / "train_raw.jsonl"),
                        write_manifest(val, out_dir / "val.jsonl"),
                        train_ids, val_ids, len(train), len(val), skipped, notes)
