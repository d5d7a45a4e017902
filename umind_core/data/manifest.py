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

Every line reads as one `Record`, a list of views: the line above is a record of one view. A line with ``images``
instead of ``image`` is an examination: ``{"id", "site", "images": [view, ...], "annotations": {"diagnosis",
"report", "measurements"}, "conversations"}``, each view a `View`
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

    @property
    def mask_pairs(self) -> list[tuple[int, int]]:
        """(view, object) of each mask group: its ``mask_views`` entry, else the only view (0)."""
        return list(zip(self.mask_views or [0] * len(self.mask_objects), self.mask_objects))

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


#: the most views one examination may hold (`umind check` refuses more): every view costs its own vision
#: tokens in one sequence, and four covers the usual sets (two planes of a lesion, both thyroid lobes in two
#: planes, a fetal biometry set)
MAX_EXAM_VIEWS = 4
#: the fewest views a request or a generated examination reads together (one image is asked as a single image; a
#: manifest may still hold an examination of one view, which reads as that single image)
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


def _frame(v: Any, where: str) -> int:
    if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < 0:
        raise _Invalid(f"{where} must be a non-negative integer, got {v!r}")
    return int(v)


@dataclass
class View:
    """One image of a record: its own file, frame, spacing, scan mask and annotations (objects, and in an
    examination optionally a finding of its own). ``name`` is the sonographer's label of the view ("radial",
    "right lobe transverse"), ``site`` what this view shows when the record's own site does not say it; unknown
    keys of a view line are kept in ``extra``."""
    image: str
    frame: int = 0
    spacing: tuple[float, float] | None = None
    site: str | None = None
    scan_mask: str | None = None
    name: str | None = None
    annotations: Annotations = field(default_factory=Annotations)
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def plain(self) -> bool:
        """Whether the view holds nothing a flat single-image line could not say (no name, site or extra keys)."""
        return self.name is None and self.site is None and not self.extra

    def to_json(self, objects_only: bool = False) -> dict:
        out: dict[str, Any] = {}
        if self.name is not None:
            out["name"] = self.name
        out.update({"image": self.image, "frame": self.frame,
                    "spacing": None if self.spacing is None else list(self.spacing)})
        if self.site is not None:
            out["site"] = self.site
        if self.scan_mask is not None:
            out["scan_mask"] = self.scan_mask
        ann = self.annotations.to_json()
        out["annotations"] = {"objects": ann["objects"]} if objects_only else ann
        for k, v in self.extra.items():
            if k in _VIEW_KEYS:
                raise _Invalid(f"extra key {k!r} of a view clashes with a schema key")
            out[k] = v
        return out

    @staticmethod
    def from_json(obj: Any, where: str) -> "View":
        obj = _dict(obj, where)
        scan = obj.get("scan_mask")
        return View(
            image=_rel_path(obj.get("image"), f"{where}.image"), frame=_frame(obj.get("frame", 0), f"{where}.frame"),
            spacing=_spacing(obj.get("spacing"), f"{where}.spacing"),
            site=_opt_str(obj.get("site"), f"{where}.site"),
            scan_mask=None if scan is None else _rel_path(scan, f"{where}.scan_mask"),
            name=_opt_str(obj.get("name"), f"{where}.name"),
            annotations=Annotations.from_json(obj.get("annotations", {}), f"{where}.annotations"),
            extra={k: v for k, v in obj.items() if k not in _VIEW_KEYS})


def _one_view_annotations(view: View, record: Annotations | None) -> Annotations:
    """A record of one view keeps one Annotations, its view's: the record's findings (diagnosis, report,
    measurements) join the view's objects, so that ``record.annotations`` and ``record.views[0].annotations``
    are the same object whichever layout the line came in."""
    own = view.annotations
    if record is None or record is own:
        return own
    if record.objects:
        raise _Invalid("annotations.objects of a record of views must be left out: objects belong to the view "
                       "that shows them (images[i].annotations.objects)")
    if own.diagnosis and record.diagnosis and own.diagnosis != record.diagnosis:
        raise _Invalid(f"the only view's diagnosis {own.diagnosis!r} and the record's {record.diagnosis!r} "
                       "disagree (a record of one view has one finding)")
    if own.report and record.report and own.report != record.report:
        raise _Invalid("the only view's report and the record's disagree (a record of one view has one report)")
    view.annotations = Annotations(own.objects, own.diagnosis or record.diagnosis, own.report or record.report,
                                   {**own.measurements, **record.measurements})
    return view.annotations


def _only_view_field(name: str) -> property:
    """A field of a single image's only view, read and set through its record (`Record._only` refuses several)."""
    return property(lambda record: getattr(record._only(), name),
                    lambda record, value: setattr(record._only(), name, value),
                    doc=f"the only view's {name} (a record of several views has one per view)")


@dataclass(init=False)
class Record:
    """One manifest line: the views read together (in the order the model sees them) with what is said about
    all of them (``site``, ``annotations``: diagnosis, report, measurements) and the training conversations.

    A single image is a record of one view: ``Record(id, image=...)`` builds it, its ``annotations`` are its
    view's (objects included), ``image``/``frame``/``spacing``/``scan_mask`` read and set that view, and it is
    written as the flat ``image`` line. A record of several views (an examination) keeps objects on the view
    that shows them and is written as an ``images`` line; its conversations' mask groups name their view in
    ``mask_views``. Paths stay relative; ``root`` (the manifest's folder, set by ``read_manifest``) resolves
    them. Masks are read only when asked for."""
    id: str
    views: list[View]
    site: str | None
    annotations: Annotations
    conversations: list[Conversation]
    extra: dict[str, Any]
    root: Path | None = field(compare=False, repr=False)

    def __init__(self, id: str, image: str | None = None, frame: int = 0,
                 spacing: tuple[float, float] | None = None, site: str | None = None, scan_mask: str | None = None,
                 annotations: Annotations | None = None, conversations: list[Conversation] | None = None,
                 extra: dict[str, Any] | None = None, root: Path | None = None, *,
                 views: Sequence[View] | None = None):
        if views is None:
            if image is None:
                raise TypeError("a Record needs an image (one view) or its views")
            annotations = Annotations() if annotations is None else annotations
            views = [View(image=image, frame=frame, spacing=spacing, scan_mask=scan_mask, annotations=annotations)]
        else:
            if image is not None or scan_mask is not None or frame or spacing is not None:
                raise TypeError("image, frame, spacing and scan_mask belong to the views of a Record built from views")
            views = list(views)
            if not views:
                raise _Invalid("images must hold at least one view (an examination without images)")
            annotations = (_one_view_annotations(views[0], annotations) if len(views) == 1
                           else Annotations() if annotations is None else annotations)
        self.id, self.views, self.site, self.annotations = id, views, site, annotations
        self.conversations = [] if conversations is None else conversations
        self.extra = {} if extra is None else extra
        self.root = root

    # -- the only view of a single image
    def _only(self) -> View:
        if len(self.views) != 1:
            raise ValueError(f"record {self.id!r} holds {len(self.views)} views; read them one by one "
                             "(record.views, record.view_record(i))")
        return self.views[0]

    image = _only_view_field("image")
    frame = _only_view_field("frame")
    spacing = _only_view_field("spacing")
    scan_mask = _only_view_field("scan_mask")

    def resolve(self, rel: str) -> Path:
        return Path(rel) if self.root is None else self.root / rel

    @property
    def image_path(self) -> Path:
        return self.resolve(self.image)

    def load_image(self) -> np.ndarray:
        """H x W (grey) or H x W x 3 (colour) uint8/uint16 array of the only view's ``frame``."""
        return _load_pil(self.image_path, self.frame, grey=False)

    def load_masks(self) -> list[np.ndarray | None]:
        """One bool array per object of the only view, in object order; None for an object without a mask."""
        return [None if o.mask is None else _load_pil(self.resolve(o.mask), 0, grey=True) != 0
                for o in self._only().annotations.objects]

    def load_scan_mask(self) -> np.ndarray | None:
        return None if self.scan_mask is None else _load_pil(self.resolve(self.scan_mask), 0, grey=True) != 0

    # -- every view
    def view_record(self, i: int) -> "Record":
        """View i as a record of its own (id ``<id>/view<i+1>`` when there are several, the site inherited),
        sharing the view's annotations object, so that every single-image rule applies to a view unchanged."""
        if len(self.views) == 1:
            return self
        v = self.views[i]
        return Record(id=f"{self.id}/view{i + 1}", image=v.image, frame=v.frame, spacing=v.spacing,
                      site=v.site or self.site, scan_mask=v.scan_mask, annotations=v.annotations, root=self.root)

    def view_records(self) -> list["Record"]:
        return [self.view_record(i) for i in range(len(self.views))]

    def load_images(self) -> list[np.ndarray]:
        """Every view's image, in view order."""
        return [r.load_image() for r in self.view_records()]

    def load_view_masks(self) -> list[list[np.ndarray | None]]:
        """Per view, one bool array (or None) per object of that view."""
        return [r.load_masks() for r in self.view_records()]

    def to_json(self) -> dict:
        if len(self.views) == 1 and self.views[0].plain:
            return self._flat_json()
        ann = self.annotations.to_json()
        del ann["objects"]  # objects belong to the views
        one = len(self.views) == 1
        out: dict[str, Any] = {"id": self.id, "site": self.site,
                               "images": [v.to_json(objects_only=one) for v in self.views],
                               "annotations": ann, "conversations": [c.to_json() for c in self.conversations]}
        for k, v in self.extra.items():
            if k in _EXAM_KEYS or k in _KNOWN_KEYS:
                raise _Invalid(f"extra key {k!r} clashes with a schema key")
            out[k] = v
        return out

    def _flat_json(self) -> dict:
        view = self.views[0]
        out: dict[str, Any] = {"id": self.id, "image": view.image, "frame": view.frame,
                               "spacing": None if view.spacing is None else list(view.spacing), "site": self.site}
        if view.scan_mask is not None:
            out["scan_mask"] = view.scan_mask
        out["annotations"] = self.annotations.to_json()
        out["conversations"] = [c.to_json() for c in self.conversations]
        for k, v in self.extra.items():
            if k in _KNOWN_KEYS:
                raise _Invalid(f"extra key {k!r} clashes with a schema key")
            out[k] = v
        return out

    @staticmethod
    def from_json(obj: Any, root: Path | None = None) -> "Record":
        """A manifest line in either layout: ``image`` (one view, flat) or ``images`` (a list of views)."""
        obj = _dict(obj, "line")
        if "images" in obj and "image" in obj:
            raise _Invalid("image and images must not sit side by side: a record holds one image (image) or an "
                           "examination (images), not both")
        if "images" in obj:
            return _record_of_views(obj, root)
        conversations = _conversations(obj)
        for i, c in enumerate(conversations):
            if c.mask_views:
                raise _Invalid(f"conversations[{i}].mask_views must be left out of a single-image record "
                               "(it names views of an examination)")
        scan = obj.get("scan_mask")
        return Record(
            id=_str(obj.get("id"), "id"), image=_rel_path(obj.get("image"), "image"),
            frame=_frame(obj.get("frame", 0), "frame"), spacing=_spacing(obj.get("spacing"), "spacing"),
            site=_opt_str(obj.get("site"), "site"), scan_mask=None if scan is None else _rel_path(scan, "scan_mask"),
            annotations=Annotations.from_json(obj.get("annotations", {})), conversations=conversations,
            extra={k: v for k, v in obj.items() if k not in _KNOWN_KEYS}, root=root)


def view_lines(obj: Any) -> list[tuple[str, dict]]:
    """The views of a decoded manifest line as written, each with the field that names it: the line itself
    (``""``) in the flat layout, ``images[i]`` in the nested one; anything not an object is left out (the
    schema's own check names it). How `umind check` reports a problem of a view where the line has it."""
    if not isinstance(obj, dict):
        return []
    if "images" not in obj or "image" in obj:
        return [("", obj)]
    views = obj["images"] if isinstance(obj["images"], list) else []
    return [(f"images[{i}]", v) for i, v in enumerate(views) if isinstance(v, dict)]


def _conversations(obj: dict) -> list[Conversation]:
    return [Conversation.from_json(c, f"conversations[{i}]")
            for i, c in enumerate(_list(obj.get("conversations", []), "conversations"))]


def _record_of_views(obj: dict, root: Path | None) -> Record:
    """An ``images`` line: every view, the record's findings and the conversations whose mask groups name views."""
    views = [View.from_json(v, f"images[{i}]") for i, v in enumerate(_list(obj.get("images"), "images"))]
    if not views:
        raise _Invalid("images must hold at least one view (an examination without images)")
    ann_obj = _dict(obj.get("annotations", {}), "annotations")
    if ann_obj.get("objects"):
        raise _Invalid("annotations.objects must be left out of an examination: objects belong to the view "
                       "that shows them (images[i].annotations.objects)")
    conversations = _conversations(obj)
    for i, c in enumerate(conversations):
        if c.mask_objects and len(c.mask_views) != len(c.mask_objects):
            raise _Invalid(f"conversations[{i}].mask_views must name the view of each mask object "
                           f"({len(c.mask_objects)}) in an examination, got {len(c.mask_views)}")
        bad = [k for k in c.mask_views if k >= len(views)]
        if bad:
            raise _Invalid(f"conversations[{i}].mask_views must index images (0..{len(views) - 1}), got {bad}")
        if len(views) == 1:
            c.mask_views = []  # one view: every mask is on it, as in a single-image line
    return Record(id=_str(obj.get("id"), "id"), views=views, site=_opt_str(obj.get("site"), "site"),
                  annotations=Annotations.from_json(ann_obj), conversations=conversations,
                  extra={k: v for k, v in obj.items() if k not in _EXAM_KEYS}, root=root)


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

def read_manifest(path: str | os.PathLike) -> list[Record]:
    """All records of a JSONL manifest (one `Record` a line, whichever layout); a ManifestError names the first bad line."""
    path = Path(path)
    root = path.parent
    records: list[Record] = []
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
                rec = Record.from_json(obj, root)
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


def rebase(record: Record, new_root: Path) -> None:
    """Rewrite the record's relative paths for a manifest written in another folder."""
    old_root = record.root if record.root is not None else Path(".")
    if old_root.resolve() == Path(new_root).resolve():
        return

    def move(rel: str) -> str:
        return Path(os.path.relpath((old_root / rel).resolve(), Path(new_root).resolve())).as_posix()

    for holder in record.views:
        holder.image = move(holder.image)
        if holder.scan_mask is not None:
            holder.scan_mask = move(holder.scan_mask)
        for obj in holder.annotations.objects:
            if obj.mask is not None:
                obj.mask = move(obj.mask)
    record.root = Path(new_root)


def write_manifest(records: Iterable[Record], path: str | os.PathLike) -> Path:
    """Validate every record, then write the file atomically (a temporary file, then os.replace)."""
    path = Path(path)
    lines, seen = [], {}
    for i, rec in enumerate(records):
        try:
            obj = _plain(rec.to_json())
            Record.from_json(obj)  # same checks as reading
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
        records.append(Record(
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
