"""Dataset manifest: one JSON object per line (JSONL), one line per image frame or per examination.

Everything that trains or evaluates (trainer, metrics, MONAI Label datastore export, the synthetic
generator) meets in this format, so it is plain text a person can read and ``grep``, and a bad line is
reported with its number instead of failing somewhere inside a data loader.

Schema of one line (keys in this order when written; unknown top-level keys are kept and written back)::

    {"id": "syn-000123",                       # required, unique in the file, non-empty string
     "image": "images/syn-000123.png",          # required, path relative to the manifest's folder
     "frame": 0,                                # optional, default 0: frame of a multi-frame image
     "spacing": [0.2, 0.2],                     # optional, mm per pixel (x, y), positive; null if unknown
     "site": "breast",                          # optional string or null
     "scan_mask": "masks/syn-000123_scan.png",  # optional: where the probe saw (PNG, non-zero = inside)
     "annotations": {                           # optional, every key inside optional
       "objects": [
         {"label": "breast lesion",             # required, non-empty
          "mask": "masks/syn-000123_0.png",     # optional: PNG, same size as the image, non-zero = object
          "box": [x1, y1, x2, y2],              # optional: inclusive pixel indices, x1 <= x2, y1 <= y2
          "keypoints": [{"name": "upper pole", "xy": [x, y]}],
          "lines": [{"name": "kidney length", "xy": [x1, y1, x2, y2], "length_mm": 102.3}],
          "diagnosis": "benign"}],              # optional string or null
       "diagnosis": "benign",                   # optional string or null (image level)
       "report": "Site: breast. ...",           # optional string or null
       "measurements": {"lesion width mm": 12.3}},   # optional: name -> number
     "conversations": [                         # optional, default []: filled by the conversation builder
       {"task": "segment",
        "messages": [{"role": "user", "content": "..."}, {"role": "assistant", "content": "..."}],
        "mask_objects": [0]}],                  # optional: object index of each mask group in the answer
     "source": {"generator": "umind synthetic", "seed": 123}}  # example of an extra key, kept as is

Coordinates are pixels of the image (x = column, y = row, pixel centres on integers, origin top-left);
conversion to the model's 0..1000 grid happens in ``umind_core.answers.grounding``. A message ``role`` is
``system``, ``user`` or ``assistant``; ``content`` is a string or a list of content parts (objects).
Blank lines are ignored. Images load through Pillow (PNG, JPEG, BMP, TIFF, GIF; ``frame`` seeks in
multi-frame files).

A line with ``images`` instead of ``image`` is an examination (`ExamRecord`): ``{"id", "site", "images": [view,
...], "annotations": {"diagnosis", "report", "measurements"}, "conversations"}``, each view an `ExamView`
(``name``, ``image``, ``frame``, ``spacing``, ``site``, ``scan_mask``, ``annotations`` with its objects), and
each mask group of a conversation naming its view in ``mask_views``. docs/manifest.md shows one.
"""

from __future__ import annotations

import json
import numbers
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np

from ..atomic import write_text
from ..masks import mask_box

_ROLES = ("system", "user", "assistant")
_KNOWN_KEYS = ("id", "image", "frame", "spacing", "site", "scan_mask", "annotations", "conversations")


class ManifestError(ValueError):
    """A manifest line (or a record to be written) that does not follow the schema."""

    def __init__(self, message: str, path: str | os.PathLike | None = None, line: int | None = None):
        self.path = None if path is None else str(path)
        self.line = line
        where = ", ".join(p for p in (self.path, None if line is None else f"line {line}") if p)
        super().__init__(f"{where}: {message}" if where else message)


class _Invalid(Exception):
    """Schema problem found deep in a record; turned into a ManifestError that names the line."""


# ---------------------------------------------------------------------------------------- validation

def _is_number(v: Any) -> bool:
    return isinstance(v, numbers.Real) and not isinstance(v, (bool, np.bool_)) and np.isfinite(float(v))


def _num(v: Any, where: str) -> float | int:
    if not _is_number(v):
        raise _Invalid(f"{where} must be a finite number, got {v!r}")
    return int(v) if isinstance(v, (numbers.Integral,)) else float(v)


def _nums(v: Any, n: int, where: str) -> tuple:
    if not isinstance(v, (list, tuple)) or len(v) != n:
        raise _Invalid(f"{where} must be a list of {n} numbers, got {v!r}")
    return tuple(_num(x, f"{where}[{i}]") for i, x in enumerate(v))


def _str(v: Any, where: str) -> str:
    if not isinstance(v, str) or not v:
        raise _Invalid(f"{where} must be a non-empty string, got {v!r}")
    return v


def _opt_str(v: Any, where: str) -> str | None:
    if v is None:
        return None
    if not isinstance(v, str) or not v:
        raise _Invalid(f"{where} must be a non-empty string or null, got {v!r}")
    return v


def _dict(v: Any, where: str) -> dict:
    if not isinstance(v, dict):
        raise _Invalid(f"{where} must be an object, got {type(v).__name__}")
    return v


def _list(v: Any, where: str) -> list:
    if not isinstance(v, (list, tuple)):
        raise _Invalid(f"{where} must be a list, got {type(v).__name__}")
    return list(v)


def _rel_path(v: Any, where: str) -> str:
    p = _str(v, where)
    if os.path.isabs(p):
        raise _Invalid(f"{where} must be relative to the manifest's folder, got absolute path {p!r}")
    return p


# ------------------------------------------------------------------------------------------ records

@dataclass
class Keypoint:
    name: str
    xy: tuple[float, float]

    def to_json(self) -> dict:
        return {"name": self.name, "xy": list(self.xy)}

    @staticmethod
    def from_json(obj: Any, where: str) -> "Keypoint":
        obj = _dict(obj, where)
        return Keypoint(_str(obj.get("name"), f"{where}.name"), _nums(obj.get("xy"), 2, f"{where}.xy"))


@dataclass
class Line:
    name: str
    xy: tuple[float, float, float, float]
    length_mm: float | None = None

    def to_json(self) -> dict:
        return {"name": self.name, "xy": list(self.xy), "length_mm": self.length_mm}

    @staticmethod
    def from_json(obj: Any, where: str) -> "Line":
        obj = _dict(obj, where)
        length = obj.get("length_mm")
        if length is not None:
            length = _num(length, f"{where}.length_mm")
            if length < 0:
                raise _Invalid(f"{where}.length_mm must not be negative, got {length}")
        return Line(_str(obj.get("name"), f"{where}.name"), _nums(obj.get("xy"), 4, f"{where}.xy"), length)


@dataclass
class ManifestObject:
    label: str
    mask: str | None = None
    box: tuple[float, float, float, float] | None = None
    keypoints: list[Keypoint] = field(default_factory=list)
    lines: list[Line] = field(default_factory=list)
    diagnosis: str | None = None

    def to_json(self) -> dict:
        out: dict[str, Any] = {"label": self.label}
        if self.mask is not None:
            out["mask"] = self.mask
        if self.box is not None:
            out["box"] = list(self.box)
        out["keypoints"] = [k.to_json() for k in self.keypoints]
        out["lines"] = [ln.to_json() for ln in self.lines]
        if self.diagnosis is not None:
            out["diagnosis"] = self.diagnosis
        return out

    @staticmethod
    def from_json(obj: Any, where: str) -> "ManifestObject":
        obj = _dict(obj, where)
        box = obj.get("box")
        if box is not None:
            box = _nums(box, 4, f"{where}.box")
            if box[0] > box[2] or box[1] > box[3]:
                raise _Invalid(f"{where}.box must have x1 <= x2 and y1 <= y2, got {list(box)}")
        mask = obj.get("mask")
        return ManifestObject(
            label=_str(obj.get("label"), f"{where}.label"),
            mask=None if mask is None else _rel_path(mask, f"{where}.mask"),
            box=box,
            keypoints=[Keypoint.from_json(k, f"{where}.keypoints[{i}]")
                       for i, k in enumerate(_list(obj.get("keypoints", []), f"{where}.keypoints"))],
            lines=[Line.from_json(ln, f"{where}.lines[{i}]")
                   for i, ln in enumerate(_list(obj.get("lines", []), f"{where}.lines"))],
            diagnosis=_opt_str(obj.get("diagnosis"), f"{where}.diagnosis"),
        )


@dataclass
class Annotations:
    objects: list[ManifestObject] = field(default_factory=list)
    diagnosis: str | None = None
    report: str | None = None
    measurements: dict[str, float] = field(default_factory=dict)

    def to_json(self) -> dict:
        return {"objects": [o.to_json() for o in self.objects], "diagnosis": self.diagnosis,
                "report": self.report, "measurements": dict(self.measurements)}

    @staticmethod
    def from_json(obj: Any, where: str = "annotations") -> "Annotations":
        obj = _dict(obj, where)
        report = obj.get("report")
        if report is not None and not isinstance(report, str):
            raise _Invalid(f"{where}.report must be a string or null, got {type(report).__name__}")
        meas = _dict(obj.get("measurements", {}), f"{where}.measurements")
        return Annotations(
            objects=[ManifestObject.from_json(o, f"{where}.objects[{i}]")
                     for i, o in enumerate(_list(obj.get("objects", []), f"{where}.objects"))],
            diagnosis=_opt_str(obj.get("diagnosis"), f"{where}.diagnosis"),
            report=report,
            measurements={str(k): _num(v, f"{where}.measurements[{k!r}]") for k, v in meas.items()},
        )


@dataclass
class Conversation:
    """``mask_objects``: for each mask group of the assistant answer, in order, the index of the object
    (in ``annotations.objects``) whose mask supervises it; written only when non-empty.

    ``mask_views``: in an examination's conversation, the view (index into ``images``) of each of those
    objects, one per entry of ``mask_objects``; empty for a single-image record. A parallel list rather than
    pairs, so that ``mask_objects`` keeps one meaning (an object index) in both kinds of record."""
    task: str
    messages: list[dict[str, Any]] = field(default_factory=list)
    mask_objects: list[int] = field(default_factory=list)
    mask_views: list[int] = field(default_factory=list)

    def to_json(self) -> dict:
        out: dict[str, Any] = {"task": self.task, "messages": [dict(m) for m in self.messages]}
        if self.mask_objects:
            out["mask_objects"] = list(self.mask_objects)
        if self.mask_views:
            out["mask_views"] = list(self.mask_views)
        return out

    @staticmethod
    def from_json(obj: Any, where: str) -> "Conversation":
        obj = _dict(obj, where)
        messages = _list(obj.get("messages"), f"{where}.messages")
        for i, m in enumerate(messages):
            w = f"{where}.messages[{i}]"
            m = _dict(m, w)
            if m.get("role") not in _ROLES:
                raise _Invalid(f"{w}.role must be one of {_ROLES}, got {m.get('role')!r}")
            content = m.get("content")
            if not isinstance(content, str) and not (
                    isinstance(content, list) and all(isinstance(p, dict) for p in content)):
                raise _Invalid(f"{w}.content must be a string or a list of objects, got {content!r}")
        mask_objects = _indices(obj.get("mask_objects", []), f"{where}.mask_objects", "object")
        mask_views = _indices(obj.get("mask_views", []), f"{where}.mask_views", "view")
        if mask_views and len(mask_views) != len(mask_objects):
            raise _Invalid(f"{where}.mask_views must name one view per entry of mask_objects "
                           f"({len(mask_objects)}), got {len(mask_views)}")
        return Conversation(_str(obj.get("task"), f"{where}.task"), [dict(m) for m in messages],
                            mask_objects, mask_views)


def _indices(v: Any, where: str, what: str) -> list[int]:
    out = []
    for i, k in enumerate(_list(v, where)):
        if isinstance(k, bool) or not isinstance(k, numbers.Integral) or k < 0:
            raise _Invalid(f"{where}[{i}] must be a non-negative {what} index, got {k!r}")
        out.append(int(k))
    return out


@dataclass
class ManifestRecord:
    """One image frame with its annotations. Paths stay relative; ``root`` (the manifest's folder,
    set by ``read_manifest``) resolves them. Masks are read only when asked for."""
    id: str
    image: str
    frame: int = 0
    spacing: tuple[float, float] | None = None
    site: str | None = None
    scan_mask: str | None = None
    annotations: Annotations = field(default_factory=Annotations)
    conversations: list[Conversation] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)
    root: Path | None = field(default=None, compare=False, repr=False)

    def resolve(self, rel: str) -> Path:
        return Path(rel) if self.root is None else self.root / rel

    @property
    def image_path(self) -> Path:
        return self.resolve(self.image)

    def load_image(self) -> np.ndarray:
        """H x W (grey) or H x W x 3 (colour) uint8/uint16 array of ``frame``."""
        return _load_pil(self.image_path, self.frame, grey=False)

    def load_masks(self) -> list[np.ndarray | None]:
        """One bool array per object, in object order; None for an object without a mask."""
        return [None if o.mask is None else _load_pil(self.resolve(o.mask), 0, grey=True) != 0
                for o in self.annotations.objects]

    def load_scan_mask(self) -> np.ndarray | None:
        return None if self.scan_mask is None else _load_pil(self.resolve(self.scan_mask), 0, grey=True) != 0

    def to_json(self) -> dict:
        out: dict[str, Any] = {"id": self.id, "image": self.image, "frame": self.frame,
                               "spacing": None if self.spacing is None else list(self.spacing),
                               "site": self.site}
        if self.scan_mask is not None:
            out["scan_mask"] = self.scan_mask
        out["annotations"] = self.annotations.to_json()
        out["conversations"] = [c.to_json() for c in self.conversations]
        for k, v in self.extra.items():
            if k in _KNOWN_KEYS:
                raise _Invalid(f"extra key {k!r} clashes with a schema key")
            out[k] = v
        return out

    @staticmethod
    def from_json(obj: Any, root: Path | None = None) -> "ManifestRecord":
        obj = _dict(obj, "line")
        frame = obj.get("frame", 0)
        if isinstance(frame, bool) or not isinstance(frame, numbers.Integral) or frame < 0:
            raise _Invalid(f"frame must be a non-negative integer, got {frame!r}")
        spacing = obj.get("spacing")
        if spacing is not None:
            spacing = _nums(spacing, 2, "spacing")
            if min(spacing) <= 0:
                raise _Invalid(f"spacing must be positive, got {list(spacing)}")
        scan = obj.get("scan_mask")
        if "images" in obj:
            raise _Invalid("images must not sit beside image: a record holds one image (image) or an "
                           "examination (images), not both")
        conversations = [Conversation.from_json(c, f"conversations[{i}]")
                         for i, c in enumerate(_list(obj.get("conversations", []), "conversations"))]
        for i, c in enumerate(conversations):
            if c.mask_views:
                raise _Invalid(f"conversations[{i}].mask_views must be left out of a single-image record "
                               "(it names views of an examination)")
        return ManifestRecord(
            id=_str(obj.get("id"), "id"),
            image=_rel_path(obj.get("image"), "image"),
            frame=int(frame),
            spacing=spacing,
            site=_opt_str(obj.get("site"), "site"),
            scan_mask=None if scan is None else _rel_path(scan, "scan_mask"),
            annotations=Annotations.from_json(obj.get("annotations", {})),
            conversations=conversations,
            extra={k: v for k, v in obj.items() if k not in _KNOWN_KEYS},
            root=root,
        )


#: the most views one examination may hold (`umind check` refuses more): every view costs its own vision
#: tokens in one sequence, and four covers the usual sets (two planes of a lesion, both thyroid lobes in two
#: planes, a fetal biometry set)
MAX_EXAM_VIEWS = 4
#: the fewest views a request or a generated examination reads together (one image is asked as a single image; a
#: manifest may still hold an examination of one view)
MIN_EXAM_VIEWS = 2
def site_conflict(sites: Sequence[str | None], site: str | None = None) -> tuple[int, str, str] | None:
    """The first view that shows another site than the views before it (and the examination's own `site`):
    (0-based index, its site, the site before it), or None. The views of one examination show one site: the
    report speaks for all of them, and an exam of a breast and a thyroid view has no one report. A view
    without a site (unknown) conflicts with nothing. One rule for `umind check` and the server's exams."""
    for i, view_site in enumerate(sites):
        if view_site is None:
            continue
        if site is None:
            site = view_site
        elif view_site != site:
            return i, view_site, site
    return None


_VIEW_KEYS = ("name", "image", "frame", "spacing", "site", "scan_mask", "annotations")
_EXAM_KEYS = ("id", "site", "images", "annotations", "conversations")


def _spacing(v: Any, where: str) -> tuple[float, float] | None:
    if v is None:
        return None
    spacing = _nums(v, 2, where)
    if min(spacing) <= 0:
        raise _Invalid(f"{where} must be positive, got {list(spacing)}")
    return spacing


@dataclass
class ExamView:
    """One image of an examination: its own file, frame, spacing and annotations (objects, and optionally a
    finding of its own), as a single-image record has them. ``name`` is the sonographer's label of the view
    ("radial", "right lobe transverse"); unknown keys are kept in ``extra``."""
    image: str
    frame: int = 0
    spacing: tuple[float, float] | None = None
    site: str | None = None
    scan_mask: str | None = None
    name: str | None = None
    annotations: Annotations = field(default_factory=Annotations)
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict:
        out: dict[str, Any] = {}
        if self.name is not None:
            out["name"] = self.name
        out.update({"image": self.image, "frame": self.frame,
                    "spacing": None if self.spacing is None else list(self.spacing)})
        if self.site is not None:
            out["site"] = self.site
        if self.scan_mask is not None:
            out["scan_mask"] = self.scan_mask
        out["annotations"] = self.annotations.to_json()
        for k, v in self.extra.items():
            if k in _VIEW_KEYS:
                raise _Invalid(f"extra key {k!r} of a view clashes with a schema key")
            out[k] = v
        return out

    @staticmethod
    def from_json(obj: Any, where: str) -> "ExamView":
        obj = _dict(obj, where)
        frame = obj.get("frame", 0)
        if isinstance(frame, bool) or not isinstance(frame, numbers.Integral) or frame < 0:
            raise _Invalid(f"{where}.frame must be a non-negative integer, got {frame!r}")
        scan = obj.get("scan_mask")
        return ExamView(
            image=_rel_path(obj.get("image"), f"{where}.image"), frame=int(frame),
            spacing=_spacing(obj.get("spacing"), f"{where}.spacing"),
            site=_opt_str(obj.get("site"), f"{where}.site"),
            scan_mask=None if scan is None else _rel_path(scan, f"{where}.scan_mask"),
            name=_opt_str(obj.get("name"), f"{where}.name"),
            annotations=Annotations.from_json(obj.get("annotations", {}), f"{where}.annotations"),
            extra={k: v for k, v in obj.items() if k not in _VIEW_KEYS})


@dataclass
class ExamRecord:
    """An examination: several views of one site read together (``images``, in the order the model sees
    them), with exam-level ``annotations`` (diagnosis, report, measurements; objects belong to the views) and
    conversations whose mask groups name a view and an object (``mask_views``, ``mask_objects``).

    `view_record(i)` gives view i as a single-image ManifestRecord, so that loading, checking and every other
    single-image rule apply to a view unchanged."""
    id: str
    images: list[ExamView]
    site: str | None = None
    annotations: Annotations = field(default_factory=Annotations)
    conversations: list[Conversation] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)
    root: Path | None = field(default=None, compare=False, repr=False)

    def resolve(self, rel: str) -> Path:
        return Path(rel) if self.root is None else self.root / rel

    def view_record(self, i: int) -> ManifestRecord:
        """View i as a ManifestRecord (id ``<exam id>/view<i+1>``) sharing this view's annotations object."""
        v = self.images[i]
        return ManifestRecord(id=f"{self.id}/view{i + 1}", image=v.image, frame=v.frame, spacing=v.spacing,
                              site=v.site or self.site, scan_mask=v.scan_mask, annotations=v.annotations,
                              root=self.root)

    def load_images(self) -> list[np.ndarray]:
        return [self.view_record(i).load_image() for i in range(len(self.images))]

    def load_masks(self) -> list[list[np.ndarray | None]]:
        """Per view, one bool array (or None) per object of that view."""
        return [self.view_record(i).load_masks() for i in range(len(self.images))]

    def to_json(self) -> dict:
        ann = self.annotations.to_json()
        del ann["objects"]  # objects belong to the views
        out: dict[str, Any] = {"id": self.id, "site": self.site, "images": [v.to_json() for v in self.images],
                               "annotations": ann, "conversations": [c.to_json() for c in self.conversations]}
        for k, v in self.extra.items():
            if k in _EXAM_KEYS or k in _KNOWN_KEYS:
                raise _Invalid(f"extra key {k!r} clashes with a schema key")
            out[k] = v
        return out

    @staticmethod
    def from_json(obj: Any, root: Path | None = None) -> "ExamRecord":
        obj = _dict(obj, "line")
        if "image" in obj:
            raise _Invalid("image must not sit beside images: a record holds one image (image) or an "
                           "examination (images), not both")
        views = [ExamView.from_json(v, f"images[{i}]") for i, v in enumerate(_list(obj.get("images"), "images"))]
        if not views:
            raise _Invalid("images must hold at least one view (an examination without images)")
        ann_obj = _dict(obj.get("annotations", {}), "annotations")
        if ann_obj.get("objects"):
            raise _Invalid("annotations.objects must be left out of an examination: objects belong to the view "
                           "that shows them (images[i].annotations.objects)")
        conversations = [Conversation.from_json(c, f"conversations[{i}]")
                         for i, c in enumerate(_list(obj.get("conversations", []), "conversations"))]
        for i, c in enumerate(conversations):
            if c.mask_objects and len(c.mask_views) != len(c.mask_objects):
                raise _Invalid(f"conversations[{i}].mask_views must name the view of each mask object "
                               f"({len(c.mask_objects)}) in an examination, got {len(c.mask_views)}")
            bad = [k for k in c.mask_views if k >= len(views)]
            if bad:
                raise _Invalid(f"conversations[{i}].mask_views must index images (0..{len(views) - 1}), got {bad}")
        return ExamRecord(id=_str(obj.get("id"), "id"), images=views, site=_opt_str(obj.get("site"), "site"),
                          annotations=Annotations.from_json(ann_obj), conversations=conversations,
                          extra={k: v for k, v in obj.items() if k not in _EXAM_KEYS}, root=root)


#: what a manifest line reads as: one image, or an examination of several
AnyRecord = ManifestRecord | ExamRecord


def is_exam(obj: Any) -> bool:
    """Whether a decoded manifest line is an examination (it holds ``images``, not ``image``)."""
    return isinstance(obj, dict) and "images" in obj and "image" not in obj


def record_from_json(obj: Any, root: Path | None = None) -> AnyRecord:
    """A manifest line as a ManifestRecord or, when it holds ``images``, an ExamRecord."""
    return ExamRecord.from_json(obj, root) if is_exam(obj) else ManifestRecord.from_json(obj, root)


def _load_pil(path: Path, frame: int, grey: bool) -> np.ndarray:
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(path) as im:
            try:
                im.seek(frame)
            except EOFError:
                raise ManifestError(f"{path}: frame {frame} does not exist "
                                    f"({getattr(im, 'n_frames', 1)} frame(s))") from None
            if grey:
                im = im.convert("L")
            elif im.mode in ("P", "RGBA", "CMYK", "YCbCr"):
                im = im.convert("RGB")
            elif im.mode in ("LA", "1"):
                im = im.convert("L")
            return np.array(im)
    except UnidentifiedImageError:
        raise ManifestError(f"{path}: not an image Pillow can read (use umind_core.imageio for "
                            "DICOM, NIfTI or NRRD)") from None


# ------------------------------------------------------------------------------------------- file I/O

def read_manifest(path: str | os.PathLike) -> list[AnyRecord]:
    """All records of a JSONL manifest (examinations as ExamRecord); a ManifestError names the first bad line."""
    path = Path(path)
    root = path.parent
    records: list[AnyRecord] = []
    seen: dict[str, int] = {}
    with open(path, "rb") as f:
        for lineno, raw in enumerate(f, start=1):
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise ManifestError(f"not UTF-8 ({e.reason})", path, lineno) from None
            if not text.strip():
                continue
            try:
                obj = json.loads(text)
            except json.JSONDecodeError as e:
                raise ManifestError(f"invalid JSON: {e.msg} at column {e.colno}", path, lineno) from None
            try:
                rec = record_from_json(obj, root)
            except _Invalid as e:
                raise ManifestError(str(e), path, lineno) from None
            if rec.id in seen:
                raise ManifestError(f"duplicate id {rec.id!r} (first on line {seen[rec.id]})", path, lineno)
            seen[rec.id] = lineno
            records.append(rec)
    return records


def _plain(v: Any) -> Any:
    """numpy scalars and tuples -> JSON types, so records built from arrays serialise."""
    if isinstance(v, dict):
        return {str(k): _plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if isinstance(v, np.generic):
        return v.item()
    return v


def rebase(record: AnyRecord, new_root: Path) -> None:
    """Rewrite the record's relative paths for a manifest written in another folder."""
    old_root = record.root if record.root is not None else Path(".")
    if old_root.resolve() == Path(new_root).resolve():
        return

    def move(rel: str) -> str:
        return Path(os.path.relpath((old_root / rel).resolve(), Path(new_root).resolve())).as_posix()

    for holder in (record.images if isinstance(record, ExamRecord) else [record]):
        holder.image = move(holder.image)
        if holder.scan_mask is not None:
            holder.scan_mask = move(holder.scan_mask)
        for obj in holder.annotations.objects:
            if obj.mask is not None:
                obj.mask = move(obj.mask)
    record.root = Path(new_root)


def write_manifest(records: Iterable[AnyRecord], path: str | os.PathLike) -> Path:
    """Validate every record, then write the file atomically (a temporary file, then os.replace)."""
    path = Path(path)
    lines, seen = [], {}
    for i, rec in enumerate(records):
        try:
            obj = _plain(rec.to_json())
            record_from_json(obj)  # same checks as reading
            text = json.dumps(obj, ensure_ascii=False, allow_nan=False)
        except (_Invalid, TypeError, ValueError) as e:
            raise ManifestError(f"record {i} (id {getattr(rec, 'id', None)!r}): {e}", path) from None
        if rec.id in seen:
            raise ManifestError(f"record {i}: duplicate id {rec.id!r} (first in record {seen[rec.id]})", path)
        seen[rec.id] = i
        lines.append(text + "\n")
    write_text(path, "".join(lines))
    return path


def write_synthetic_dataset(out_dir: str | os.PathLike, n: int, seed0: int = 0,
                            sites: Sequence[str] | None = None, size: int = 256,
                            progress: bool = True, appearance: str | None = None,
                            augment: float = 0.0) -> Path:
    """Write ``n`` synthetic samples (seeds ``seed0..``) as images/, masks/ and manifest.jsonl.

    ``augment`` > 0 passes every image through `augment.photometric_hook` with that probability per transform.

    Conversations are left empty for the conversation builder. Returns the manifest path.
    """
    from tqdm import tqdm

    from umind_core.data.augment import photometric_hook
    from umind_core.data.synthetic import generate_many

    hook = photometric_hook(augment) if augment > 0 else None
    out = Path(out_dir)
    (out / "images").mkdir(parents=True, exist_ok=True)
    (out / "masks").mkdir(parents=True, exist_ok=True)
    records = []
    for sample in tqdm(generate_many(n, seed0=seed0, sites=sites, size=size, appearance=appearance,
                                     augment=hook), total=n,
                       disable=not progress, desc="synthetic", unit="img"):
        sid = f"syn-{sample.seed:06d}"
        image_rel, scan_rel, objects = save_synthetic_view(sample, out, sid)
        records.append(ManifestRecord(
            id=sid, image=image_rel, frame=0, spacing=tuple(float(v) for v in sample.spacing),
            site=sample.site, scan_mask=scan_rel,
            annotations=Annotations(objects, sample.diagnosis, sample.report, dict(sample.measurements)),
            conversations=[],
            extra={"source": {"generator": "umind synthetic", "seed": sample.seed,
                              "geometry": sample.geometry, "size": size,
                              "appearance": appearance or "default"}},
            root=out))
    return write_manifest(records, out / "manifest.jsonl")


def save_synthetic_view(sample, out: Path, stem: str) -> tuple[str, str, list[ManifestObject]]:
    """Write one synthetic image, its scan mask and its object masks as PNGs under ``out`` (``images/<stem>.png``,
    ``masks/<stem>_scan.png``, ``masks/<stem>_<j>.png``); returns their relative paths and the manifest objects.
    Shared by single images and the views of an examination, so both are saved alike."""
    from PIL import Image

    image_rel, scan_rel = f"images/{stem}.png", f"masks/{stem}_scan.png"
    Image.fromarray(sample.image).save(out / image_rel)
    Image.fromarray(sample.scan_mask.astype(np.uint8) * 255).save(out / scan_rel)
    objects = []
    for j, obj in enumerate(sample.objects):
        mask_rel = f"masks/{stem}_{j}.png"
        Image.fromarray(obj.mask.astype(np.uint8) * 255).save(out / mask_rel)
        objects.append(ManifestObject(
            label=obj.label, mask=mask_rel, box=tuple(int(v) for v in obj.box),
            keypoints=[Keypoint(name, (float(x), float(y))) for name, (x, y) in obj.keypoints],
            lines=[Line(name, tuple(float(v) for v in xy), float(mm)) for name, xy, mm in obj.lines],
            diagnosis=obj.diagnosis))
    return image_rel, scan_rel, objects


def object_box(obj: ManifestObject, mask: np.ndarray | None) -> tuple[float, float, float, float] | None:
    """An object's box as training and scoring read it: the drawn box, else its mask's (inclusive pixels), else
    None (keypoints or a line alone)."""
    if obj.box is not None:
        return tuple(float(v) for v in obj.box)  # type: ignore[return-value]
    if mask is not None and mask.any():
        return tuple(float(v) for v in mask_box(mask))  # type: ignore[return-value]
    return None
