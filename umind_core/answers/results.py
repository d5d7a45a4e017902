"""The one answer type every layer speaks: parsed model output for one frame.

Coordinates in a `GroundedObject` are pixels of the ORIGINAL frame (not the 0..1000 grid and
not the resized model input), so that writers and Slicer need no knowledge of preprocessing.
Millimetres are derived on demand by `Result.attach_geometry`, from the input's geometry.

An examination's answer (`Predictor.predict_exam`: several views read together) is one Result too: each object
says which view it is in (``view``, 0-based, the index into the views as the manifest's ``mask_views`` counts),
its coordinates and mask are that view's pixels, and ``views`` describes each view (source, frame, size).
`Result.attach_views` measures every object with its own view's spacing.

Lengths: the model writes a number after its caliper line ("Length: 140.2 mm."), but that number is
its guess, not a measurement. Every length a Result reports is the drawn line measured by
`imageio.line_length` with the frame's calibrated spacing (pixels, said as "px", without one); the
answer users see states that length in place of the model's, and the model's own words stay in
``raw_answer`` (and ``text``). A stated length that no drawn line backs is a warning.

An ellipse (``ellipse``: its long and short axis, two lines in pixels, as `landmarks.ellipse_axes` fits one to a
fetal head's mask) is measured by its perimeter (`landmarks.ellipse_perimeter`: Ramanujan's, from the axes' lengths
by `imageio.line_length`), the head circumference; the answer states it as it states a line's length, and its
markup is a closed curve along it carrying that length (`to_markups`).
"""

from __future__ import annotations

import json
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np
from PIL import Image

from ..atomic import atomic_path, write_text
from ..imageio import Frame, Geometry, Length, frame_axes_lps, frame_spacing, line_length, pixel_to_physical
from ..painter import LabelPainter
from .landmarks import ellipse_outline, ellipse_perimeter

__all__ = ["GroundedObject", "Result", "ResultFormatError", "RESULT_FORMAT"]

RESULT_FORMAT = "umind-result"
RESULT_VERSION = 1
MASK_FORMATS = ("png", "nrrd")


class ResultFormatError(ValueError):
    """A Result (or its JSON file and mask files) is inconsistent; the message says where."""


def _floats(v: Sequence[float] | None, n: int, what: str) -> tuple[float, ...] | None:
    if v is None:
        return None
    out = tuple(float(c) for c in v)
    if len(out) != n:
        raise ResultFormatError(f"{what} needs {n} numbers, got {len(out)}: {v!r}")
    return out


@dataclass(eq=False)
class GroundedObject:
    """One thing the model pointed at: any of a box, points, a line and a mask, plus a label."""

    label: str | None = None
    box: tuple[float, float, float, float] | None = None
    points: list[tuple[float, float]] = field(default_factory=list)
    line: tuple[float, float, float, float] | None = None
    mask: np.ndarray | None = None
    score: float | None = None
    physical: dict = field(default_factory=dict)
    #: the view of an examination it is in (0-based, as the manifest's mask_views); None for a single frame
    view: int | None = None
    #: an ellipse as its long axis then its short axis (x1, y1, x2, y2 each, pixels): a head circumference
    ellipse: tuple[float, ...] | None = None

    def __post_init__(self) -> None:
        if self.view is not None:
            if isinstance(self.view, bool) or not isinstance(self.view, (int, np.integer)) or self.view < 0:
                raise ResultFormatError(f"view must be a non-negative int (0 = the first view), got {self.view!r}")
            self.view = int(self.view)
        self.box = _floats(self.box, 4, "box")  # type: ignore[assignment]
        self.line = _floats(self.line, 4, "line")  # type: ignore[assignment]
        self.ellipse = _floats(self.ellipse, 8, "ellipse")
        self.points = [_floats(p, 2, "point") for p in (self.points or [])]  # type: ignore
        if self.mask is not None:
            m = np.asarray(self.mask)
            if m.ndim != 2:
                raise ResultFormatError(f"mask must be H x W, got shape {m.shape}")
            self.mask = m.astype(bool, copy=False)
        if self.score is not None:
            self.score = float(self.score)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, GroundedObject):
            return NotImplemented
        if (self.mask is None) != (other.mask is None):
            return False
        if self.mask is not None and not np.array_equal(self.mask, other.mask):
            return False
        same_score = self.score == other.score or (
            self.score is not None and other.score is not None
            and math.isnan(self.score) and math.isnan(other.score))
        return (self.label, self.box, self.points, self.line, self.physical, self.view, self.ellipse) == \
            (other.label, other.box, other.points, other.line, other.physical, other.view, other.ellipse) and same_score

    def to_dict(self, mask_file: str | None = None) -> dict:
        """JSON-ready dict; ``view`` only for an examination's object and ``ellipse`` only for an ellipse, so other
        files read as before."""
        out = {
            "label": self.label,
            "box": list(self.box) if self.box is not None else None,
            "points": [list(p) for p in self.points],
            "line": list(self.line) if self.line is not None else None,
            "score": self.score,
            "physical": self.physical,
            "mask": None if self.mask is None else
            {"shape": [int(s) for s in self.mask.shape], "file": mask_file,
             "pixels": int(self.mask.sum())},
        }
        if self.view is not None:
            out["view"] = self.view
        if self.ellipse is not None:
            out["ellipse"] = list(self.ellipse)
        return out


@dataclass
class Result:
    """Everything one prediction produced for one frame."""

    task: str
    prompt: str = ""
    text: str = ""
    answer: str = ""
    objects: list[GroundedObject] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    frame_index: int = 0
    source: str | None = None
    image_size: tuple[int, int] | None = None  # (W, H)
    # the model's own confidence (active learning reads it): token_prob_mean, token_prob_min, mask_entropy
    confidence: dict[str, float] = field(default_factory=dict)
    #: the answer as the model wrote it (its own length numbers); ``answer`` states the measured ones
    raw_answer: str = ""
    #: the model's text was not a readable answer (degenerate): no objects, nothing is written for it
    unparsable: bool = False
    #: an examination's views in the order the model read them, each {"source", "frame_index", "image_size"};
    #: empty for a single frame. An object's ``view`` indexes this list.
    views: list[dict] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.image_size is not None:
            self.image_size = (int(self.image_size[0]), int(self.image_size[1]))
        self.frame_index = int(self.frame_index)
        if not self.raw_answer:
            self.raw_answer = self.answer

    # geometry ---------------------------------------------------------------------------

    def attach_geometry(self, geometry_or_spacing: Geometry | Frame | Sequence[float] | None
                        ) -> None:
        """Fill each object's ``physical`` with measurements, and state the lines' lengths in ``answer``.

        In-plane keys (``box_mm``, ``points_mm``, ``line_mm``: pixel coordinates times spacing,
        from the frame's top-left; ``length_mm``, ``box_size_mm``, ``area_mm2``) need only the
        spacing. With a `Geometry` the LPS positions (``points_lps``, ``line_lps``,
        ``box_center_lps``) are added for the frame ``frame_index``. Unknown spacing (a PNG,
        or None) leaves only a line's ``length`` in ``length_unit`` "px": pixel numbers are never
        reported as millimetres. Every line gets ``length`` and ``length_unit`` from
        `imageio.line_length`, and ``model_length`` when the model stated one for it.

        ``answer`` is rebuilt from ``raw_answer`` each time (so calling this again with another
        geometry is safe): see `_state_lengths`.
        """
        spacing = _spacing_of(geometry_or_spacing)
        geometry = geometry_or_spacing if isinstance(geometry_or_spacing, Geometry) else None
        self._measure(lambda obj: (spacing, geometry, self.frame_index), spacing is not None)

    def attach_views(self, views: Sequence[Geometry | Frame | Sequence[float] | None]) -> None:
        """`attach_geometry` for an examination's answer: each object measured in its own view (``view``), with
        that view's spacing (a Frame's, a Geometry's, an (x, y) pair, or None for uncalibrated), since the views
        of one examination are scanned at different depths. A stated length without a line is taken out of the
        answer unless every view is calibrated."""
        places = []
        for v in views:
            frame_index = v.index if isinstance(v, Frame) else 0
            places.append((_spacing_of(v), v if isinstance(v, Geometry) else None, frame_index))

        def place(obj: GroundedObject):
            if obj.view is None or not 0 <= obj.view < len(places):
                raise ResultFormatError(f"attach_views: object {obj.label!r} has view {obj.view!r}, but "
                                        f"{len(places)} view(s) were given")
            return places[obj.view]

        self._measure(place, bool(places) and all(p[0] is not None for p in places))

    def _measure(self, place, calibrated: bool) -> None:
        """Each object's ``physical`` from place(obj) = (spacing, geometry, frame index); the answer's stated
        lengths replaced by the drawn lines' (`_state_lengths`)."""
        lines, lengths = [], []
        for obj in self.objects:
            spacing, geometry, frame_index = place(obj)
            obj.physical = _physical(obj, spacing, geometry, frame_index)
            if obj.line is not None:
                lines.append(obj)
                lengths.append(line_length(obj.line, spacing))
            elif obj.ellipse is not None:
                lines.append(obj)
                lengths.append(Length(obj.physical["perimeter"], obj.physical["perimeter_unit"]))
        self.answer, stated, warnings = _state_lengths(self.raw_answer, lengths, calibrated)
        for obj, model in zip(lines, stated):
            obj.physical["model_length"] = model
        self.warnings.extend(w for w in warnings if w not in self.warnings)

    def to_markups(self, geometry: Geometry) -> list[dict]:
        """Markup dicts for `imageio.write_markups_json`, in LPS mm of ``geometry``, on the
        frame ``frame_index``: points -> Fiducial, line -> Line, ellipse -> ClosedCurve, box -> ROI.
        A Line carries its `imageio.line_length` in ``geometry`` (px where ``geometry`` is not
        calibrated), the length the markup's coordinates give; a ClosedCurve goes through
        `landmarks.ellipse_outline`'s points and carries the ellipse's perimeter
        (`landmarks.ellipse_perimeter`, the head circumference) measured the same way."""
        out: list[dict] = []
        k = self.frame_index
        sx, sy = frame_spacing(geometry)
        spacing = (sx, sy) if geometry.spacing_known else None
        ex, ey, ez, through = frame_axes_lps(geometry)

        def lps(points) -> list[list[float]]:
            return [list(pixel_to_physical(geometry, k, x, y)) for x, y in points]

        for i, obj in enumerate(self.objects):
            name = obj.label or f"{self.task} {i + 1}"
            if obj.points:
                out.append({"type": "Fiducial", "name": name, "points_lps": lps(obj.points)})
            if obj.line is not None:
                x1, y1, x2, y2 = obj.line
                out.append({"type": "Line", "name": name, "points_lps": lps([(x1, y1), (x2, y2)]),
                            **_length_keys(line_length(obj.line, spacing))})
            if obj.ellipse is not None:
                out.append({"type": "ClosedCurve", "name": name, "points_lps": lps(ellipse_outline(obj.ellipse)),
                            **_length_keys(ellipse_perimeter(obj.ellipse, spacing))})
            if obj.box is not None:
                x1, y1, x2, y2 = obj.box
                center = pixel_to_physical(geometry, k, (x1 + x2) / 2, (y1 + y2) / 2)
                orientation = np.stack([ex, ey, ez], axis=1)  # columns = box axes
                out.append({"type": "ROI", "name": name, "point_labels": [name], "center": list(center),
                            "size": [abs(x2 - x1) * sx, abs(y2 - y1) * sy, through],
                            "orientation": [float(v) for v in orientation.ravel()]})
        return out

    def label_map(self) -> tuple[np.ndarray, dict[int, str]]:
        """H x W uint8 map with one value per distinct label (in order of first appearance;
        unlabelled objects get their own value); where objects overlap the smaller keeps its pixels
        (`painter.LabelPainter`, the rule every label map follows; here at most 255 labels, so the map stays uint8)."""
        masked = [o for o in self.objects if o.mask is not None]
        if masked:
            shape = masked[0].mask.shape
        elif self.image_size is not None:
            shape = (self.image_size[1], self.image_size[0])
        else:
            raise ResultFormatError("label_map: no masks and no image_size to size an empty map")
        painter = LabelPainter(shape)
        for i, obj in enumerate(self.objects):
            if obj.mask is None:
                continue
            if obj.mask.shape != shape:
                raise ResultFormatError(f"label_map: mask {i} has shape {obj.mask.shape}, "
                                        f"the first has {shape}")
            key = obj.label if obj.label else f"object {i + 1}"
            if key not in painter.values and len(painter.values) >= 255:
                raise ResultFormatError("label_map: more than 255 labels do not fit uint8")
            painter.paint(key, obj.mask)
        return painter.labels(), {value: key for key, value in painter.values.items()}

    # serialisation ------------------------------------------------------------------------

    def to_dict(self, mask_files: dict[int, str] | None = None) -> dict:
        """JSON-ready dict; masks appear as shape (+ file name once saved by `to_json`). ``views`` only for an
        examination's answer."""
        files = mask_files or {}
        out = {
            "format": RESULT_FORMAT, "version": RESULT_VERSION,
            "task": self.task, "prompt": self.prompt, "text": self.text, "answer": self.answer,
            "objects": [o.to_dict(files.get(i)) for i, o in enumerate(self.objects)],
            "warnings": list(self.warnings), "timings": dict(self.timings),
            "frame_index": self.frame_index, "source": self.source,
            "image_size": list(self.image_size) if self.image_size is not None else None,
            "confidence": dict(self.confidence),
            "raw_answer": self.raw_answer, "unparsable": self.unparsable,
        }
        if self.views:
            out["views"] = [dict(v) for v in self.views]
        return out

    def to_json(self, path: str | os.PathLike, mask_format: str = "png") -> Path:
        """Write the JSON and one mask file per masked object next to it (``<stem>.maskN.png``
        or ``.nrrd``, referenced by relative name). Every file is written atomically."""
        if mask_format not in MASK_FORMATS:
            raise ResultFormatError(f"mask_format must be one of {MASK_FORMATS}, "
                                    f"got {mask_format!r}")
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        stem = path.name[:-5] if path.name.lower().endswith(".json") else path.name
        files: dict[int, str] = {}
        for i, obj in enumerate(self.objects):
            if obj.mask is None:
                continue
            fname = f"{stem}.mask{i}.{mask_format}"
            _write_mask(obj.mask, path.parent / fname, mask_format)
            files[i] = fname
        text = json.dumps(self.to_dict(files), indent=2)
        write_text(path, text)
        return path

    @classmethod
    def from_json(cls, path: str | os.PathLike) -> "Result":
        path = Path(path)
        try:
            d = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ResultFormatError(f"{path}: cannot read result JSON: {exc}") from exc
        if not isinstance(d, dict) or d.get("format") != RESULT_FORMAT:
            raise ResultFormatError(f"{path}: not a {RESULT_FORMAT} file")
        objects = []
        for i, od in enumerate(d.get("objects", [])):
            mask = None
            if od.get("mask"):
                fname = od["mask"].get("file")
                if not fname:
                    raise ResultFormatError(f"{path}: object {i} has a mask but no mask file")
                mask = _read_mask(path.parent / fname)
                shape = tuple(od["mask"].get("shape", mask.shape))
                if mask.shape != shape:
                    raise ResultFormatError(f"{path}: mask file {fname} has shape {mask.shape},"
                                            f" the JSON says {shape}")
            objects.append(GroundedObject(
                label=od.get("label"), box=od.get("box"), points=od.get("points") or [],
                line=od.get("line"), mask=mask, score=od.get("score"),
                physical=od.get("physical") or {}, view=od.get("view"), ellipse=od.get("ellipse")))
        return cls(task=d["task"], prompt=d.get("prompt", ""), text=d.get("text", ""),
                   answer=d.get("answer", ""), objects=objects,
                   warnings=list(d.get("warnings", [])),
                   timings={k: float(v) for k, v in (d.get("timings") or {}).items()},
                   frame_index=int(d.get("frame_index", 0)), source=d.get("source"),
                   image_size=d.get("image_size"),
                   confidence={k: float(v) for k, v in (d.get("confidence") or {}).items()},
                   raw_answer=d.get("raw_answer") or "", unparsable=bool(d.get("unparsable", False)),
                   views=[dict(v) for v in d.get("views") or []])


def _length_keys(length: Length) -> dict:
    """A length as JSON keys (markup dicts travel in server replies)."""
    return {"length": length.value, "length_unit": length.unit}


def _spacing_of(geometry_or_spacing: Geometry | Frame | Sequence[float] | None) -> tuple[float, float] | None:
    """The calibrated in-plane (column, row) spacing, or None where there is none (never a default of 1)."""
    if isinstance(geometry_or_spacing, Geometry):
        return frame_spacing(geometry_or_spacing) if geometry_or_spacing.spacing_known else None
    if isinstance(geometry_or_spacing, Frame):
        return geometry_or_spacing.spacing
    if geometry_or_spacing is None:
        return None
    return _floats(geometry_or_spacing, 2, "spacing")  # type: ignore[return-value]


def _physical(obj: GroundedObject, spacing: Sequence[float] | None, geometry: Geometry | None,
              frame_index: int) -> dict:
    phys: dict[str, Any] = {}
    if obj.line is not None:
        length = line_length(obj.line, spacing)
        phys.update(length=length.value, length_unit=length.unit)
    if obj.ellipse is not None:
        perimeter = ellipse_perimeter(obj.ellipse, spacing)
        phys.update(perimeter=perimeter.value, perimeter_unit=perimeter.unit)
        if perimeter.mm is not None:
            phys["perimeter_mm"] = perimeter.mm
    if spacing is None:
        return phys
    sx, sy = float(spacing[0]), float(spacing[1])
    phys["spacing_mm"] = [sx, sy]

    def lps(x: float, y: float) -> list[float]:
        return list(pixel_to_physical(geometry, frame_index, x, y))  # type: ignore[arg-type]

    if obj.points:
        phys["points_mm"] = [[x * sx, y * sy] for x, y in obj.points]
        if geometry is not None:
            phys["points_lps"] = [lps(x, y) for x, y in obj.points]
    if obj.box is not None:
        x1, y1, x2, y2 = obj.box
        phys["box_mm"] = [x1 * sx, y1 * sy, x2 * sx, y2 * sy]
        phys["box_size_mm"] = [abs(x2 - x1) * sx, abs(y2 - y1) * sy]
        if geometry is not None:
            phys["box_center_lps"] = lps((x1 + x2) / 2, (y1 + y2) / 2)
    if obj.line is not None:
        x1, y1, x2, y2 = obj.line
        phys["line_mm"] = [x1 * sx, y1 * sy, x2 * sx, y2 * sy]
        phys["length_mm"] = phys["length"]
        if geometry is not None:
            phys["line_lps"] = [lps(x1, y1), lps(x2, y2)]
    if obj.mask is not None:
        phys["area_mm2"] = float(obj.mask.sum()) * sx * sy
    return phys


# A length in the model's words: a number (or "A x B") and a length unit. Units of other quantities (ml, Hz, %)
# are not lengths and are left alone.
_STATED_LENGTH = re.compile(
    r"(?<![\w.])\d+(?:\.\d+)?(?:\s*[x×]\s*\d+(?:\.\d+)?)*\s*"
    r"(?:mm|cm|millimet(?:er|re)s?|centimet(?:er|re)s?|px|pixels?)(?![\w])", re.I)


def _state_lengths(answer: str, lengths: Sequence[Length], calibrated: bool) -> tuple[str, list[str], list[str]]:
    """(the answer users see, the model's stated length for each line, warnings).

    Why: the model's number and the drawn line disagree (a caliper said 140.2 mm where its line measured
    66.1 mm), and only the line can be checked. The k-th length the model states belongs to its k-th line (the
    trained answer is "<line> Length: X mm." per line) and is replaced by that line's measured length; a line it
    drew without stating a length gets " Length: X." appended. A stated length without a line to back it is a
    warning; on an image without calibration it is also taken out of the text, since no "mm" can be true there.
    """
    found = list(_STATED_LENGTH.finditer(answer))
    out, pos, warnings = [], 0, []
    for k, m in enumerate(found):
        out.append(answer[pos:m.start()])
        if k < len(lengths):
            out.append(str(lengths[k]))
        else:
            warnings.append(f"the answer states a length ({m.group(0)}) but draws no line for it: that is the "
                            "model's own number, not a measurement")
            out.append(m.group(0) if calibrated else "[not measured: the image has no calibration]")
        pos = m.end()
    out.append(answer[pos:])
    text = "".join(out)
    for length in lengths[len(found):]:
        text = f"{text.rstrip()} Length: {length}.".lstrip()
    return text, [m.group(0) for m in found[:len(lengths)]], warnings


def _write_mask(mask: np.ndarray, path: Path, fmt: str) -> None:
    data = np.ascontiguousarray(mask.astype(np.uint8))
    if fmt == "png":
        with atomic_path(path) as tmp:
            Image.fromarray(data * 255, mode="L").save(tmp, format="PNG")
    else:
        import nrrd

        with atomic_path(path) as tmp:
            nrrd.write(str(tmp), data, index_order="C")


def _read_mask(path: Path) -> np.ndarray:
    try:
        if path.name.lower().endswith(".nrrd"):
            import nrrd

            data, _ = nrrd.read(str(path), index_order="C")
            return np.asarray(data) > 0
        with Image.open(path) as im:
            return np.asarray(im.convert("L")) > 127
    except Exception as exc:
        raise ResultFormatError(f"{path}: cannot read mask file: {exc}") from exc
