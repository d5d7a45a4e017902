"""Check a manifest before training on it: every problem named by its line and field, bad records skipped.

`umind train` used to take a manifest on trust: a diagnosis of "suspicious" became an answer the server refuses,
a misspelt key inside ``annotations`` left a record with nothing to learn, an empty mask (how segmentation
datasets store a normal case) became an object to draw, the classes of a multi-class label map merged into one
object, and a missing file surfaced as a bare ``[Errno 2]`` deep in a data loader. `check_manifest` finds all of
these up front and returns `Problem` records; `umind check` and `umind train` only print them.

Rules (the reason in brackets groups skipped records in the summary):

- the line is UTF-8 JSON [unreadable line], and passes `Record.from_json`, the same validation
  `read_manifest` applies (required ``id`` and ``image``, types, boxes...) [invalid field]; ids are unique
  [duplicate id];
- ``annotations`` is shaped as the schema says: no unknown key inside it or inside an object, no annotation key
  (``objects``, ``diagnosis``...) at the top level of the line, where it would be kept as an extra and ignored
  [annotations shape];
- the image, every object mask and the scan mask exist [missing file], Pillow reads them and the frame exists
  [unreadable file], and masks have the image's size [mask size];
- every diagnosis (image level, object level, and the answer of a ready-made diagnose conversation) names a class
  of `umind_core.answers.findings.FINDINGS` [unknown finding];
- ``mask_objects`` of a ready-made conversation points at an object with a mask [conversation];
- a mask file is one object (non-zero = object). A mask with more than one non-zero value is a multi-class
  label map: it is split by value when the object declares ``label_names`` (mask value -> name, the same
  convention as the server's label info, e.g. ``{"1": "kidney", "2": "renal sinus"}``), each value becoming its
  own object (lesion kinds one object per blob, as `umind import` splits label maps); without names it is
  refused, because guessing a name would teach a wrong word. A value missing from ``label_names`` is refused too,
  and so is a box, keypoint, line or diagnosis on a label map object (it cannot say which class it belongs to)
  [label map];
- a record with no annotation, site or conversation has nothing to learn [nothing to learn];
- a mask path kept in the extra ``labels`` (``mask``, ``<label>_mask``) is a note: it is never trained on, so the
  summary counts it instead of reading as if every annotation were kept [mask as a label].
- every record is a list of views (`manifest.Record`; a flat line is a record of one view) and each view gets
  every rule above, a problem's field naming the view as the line writes it (``images[1].annotations.objects[0]
  .mask`` in an examination, no prefix on a flat line); besides, a record holds at most `MAX_EXAM_VIEWS` views
  [exam], its views show one site [exam], an examination's own ``annotations`` hold only diagnosis, report and
  measurements [annotations shape], and each mask group of a ready-made conversation names a view (``mask_views``,
  else the only view) and an object of that view with a mask [conversation].

An all-zero mask is not an error but a note: the image shows no such object (a negative). The record is kept and
`training_manifest` drops that mask, so it never becomes a segmentation target (an object left with no other
annotation is dropped; a ready-made conversation that draws it is dropped).
"""

from __future__ import annotations

import copy
import json
import os
import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..answers.findings import FINDINGS, answer_finding, normal_finding
from .manifest import (MAX_EXAM_VIEWS, ManifestError, ManifestObject, Record, _Invalid, rebase, site_conflict,
                       view_lines, write_manifest)

__all__ = ["Problem", "CheckedRecord", "CheckResult", "check_manifest", "check_line", "report_lines",
           "training_manifest", "leave_out_test_split", "CHECKED_NAME"]

#: the file `training_manifest` writes in the output folder, with split masks under ``checked_masks/``
CHECKED_NAME = "checked_manifest.jsonl"
_ANNOTATION_KEYS = ("objects", "diagnosis", "report", "measurements")
_OBJECT_KEYS = ("label", "mask", "box", "keypoints", "lines", "diagnosis", "label_names")
#: keys that belong inside ``annotations`` (or inside one of its objects) when found at the top of a line
_MISPLACED = ("objects", "diagnosis", "report", "measurements", "mask", "box", "keypoints", "lines")


@dataclass(frozen=True)
class Problem:
    """One finding of the check. `note` problems (an empty mask) keep the record; the others skip it."""
    line: int
    field: str
    message: str
    reason: str
    note: bool = False

    def text(self, manifest: str | os.PathLike) -> str:
        where = f"{manifest}:{self.line}: " + (f"{self.field}: " if self.field else "")
        return where + ("note: " if self.note else "") + self.message

    def to_json(self) -> dict:
        return {"line": self.line, "field": self.field, "message": self.message, "reason": self.reason,
                "severity": "note" if self.note else "error"}


@dataclass
class CheckedRecord:
    """A record that passed, with what training must change, per view: `negatives` (view -> objects whose mask is
    empty) and `label_maps` (view -> object index -> {mask value: name} of a multi-class map to split)."""
    line: int
    record: Record
    negatives: dict[int, list[int]] = field(default_factory=dict)
    label_maps: dict[int, dict[int, dict[int, str]]] = field(default_factory=dict)


@dataclass
class CheckResult:
    path: Path
    checked: int = 0
    kept: list[CheckedRecord] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)

    @property
    def errors(self) -> list[Problem]:
        return [p for p in self.problems if not p.note]

    @property
    def notes(self) -> list[Problem]:
        return [p for p in self.problems if p.note]

    def skipped_by_reason(self) -> dict[str, int]:
        """Skipped records counted under the reason of their first problem, so the counts add up."""
        first: dict[int, str] = {}
        for p in self.errors:
            first.setdefault(p.line, p.reason)
        return dict(Counter(first.values()).most_common())

    def to_json(self, manifest: str | os.PathLike | None = None) -> dict:
        return {"manifest": str(manifest if manifest is not None else self.path), "checked": self.checked,
                "kept": len(self.kept), "skipped": self.checked - len(self.kept),
                "skipped_by_reason": self.skipped_by_reason(), "notes": len(self.notes),
                "problems": [p.to_json() for p in self.problems]}


# --------------------------------------------------------------------------------------------- the file

def _lines(path: Path) -> Iterator[tuple[int, bytes]]:
    """(line number, raw bytes) of each line, numbered as read_manifest numbers them. A file that cannot be
    opened, or holds binary data, is one ManifestError: there is nothing line by line to report."""
    try:
        fh = open(path, "rb")
    except OSError as exc:
        raise ManifestError(f"cannot read the manifest: {exc.strerror or exc}", path) from None
    with fh:
        if b"\0" in fh.read(8192):
            raise ManifestError("not a JSONL manifest (binary data)", path)
        fh.seek(0)
        yield from enumerate(fh, start=1)


def check_manifest(path: str | os.PathLike) -> CheckResult:
    """Check every non-blank line; ManifestError (a ValueError, one line) only when the file is unreadable."""
    path = Path(path)
    result = CheckResult(path)
    seen: dict[str, int] = {}
    for lineno, raw in _lines(path):
        if not raw.strip():
            continue
        result.checked += 1
        kept, problems = check_line(raw, lineno, path.parent, seen)
        result.problems += problems
        if kept is not None:
            result.kept.append(kept)
    return result


def _duplicate_id(rid: str, lineno: int, seen: dict[str, int]) -> list[Problem]:
    """An id already seen is a problem naming its first line; the first line of each id is remembered."""
    first = seen.setdefault(rid, lineno)
    return [] if first == lineno else [Problem(lineno, "id", f"duplicate id {rid!r} (first on line {first})",
                                               "duplicate id")]


def check_line(raw: bytes, lineno: int, root: Path, seen: dict[str, int]) -> tuple[CheckedRecord | None,
                                                                                 list[Problem]]:
    """All problems of one line, and the record when none of them is an error. `seen` maps ids to lines. The
    record's own rules once, then every single-image rule on each view, each problem's field naming the view as
    the line writes it (``images[1].annotations.objects[0].mask``; no prefix on a flat line)."""
    obj, problems = _parse(raw, lineno)
    if obj is None:
        return None, problems
    problems = shape_problems(obj, lineno)
    record, invalid = schema_problems(obj, lineno, root)
    problems += invalid
    if record is None:
        return None, problems
    problems += _duplicate_id(record.id, lineno, seen)
    problems += view_rule_problems(record, lineno) + _record_finding_problems(record, lineno)
    problems += conversation_problems(record, lineno) + label_mask_problems(record, lineno)
    checked = CheckedRecord(lineno, record)
    for i, (where, raw_view) in enumerate(view_lines(obj)[:MAX_EXAM_VIEWS]):
        problems += _in_view(_view_problems(record, i, raw_view, lineno, checked), where)
    if not [p for p in problems if not p.note] and not _has_content(record):
        problems.append(Problem(lineno, "annotations", "nothing to learn: no objects, diagnosis, report, "
                                "measurements, site or conversations", "nothing to learn"))
    return (None if any(not p.note for p in problems) else checked), problems


def _parse(raw: bytes, lineno: int) -> tuple[Any, list[Problem]]:
    try:
        return json.loads(raw.decode("utf-8").rstrip("\r\n")), []
    except UnicodeDecodeError as exc:
        return None, [Problem(lineno, "", f"not UTF-8 ({exc.reason})", "unreadable line")]
    except json.JSONDecodeError as exc:
        return None, [Problem(lineno, "", f"invalid JSON: {exc.msg} at column {exc.colno}", "unreadable line")]


def _in_view(problems: list[Problem], where: str) -> list[Problem]:
    """The same problems with their field moved under the view's own field (``images[i]``), so that the message
    names the view; a flat line's view is the line itself and keeps its fields."""
    if not where:
        return problems
    return [Problem(p.line, where + (f".{p.field}" if p.field else ""), p.message, p.reason, p.note)
            for p in problems]


def _view_problems(record: Record, i: int, raw: dict, lineno: int, checked: CheckedRecord) -> list[Problem]:
    """Files, findings and masks of view i by the single-image rules (fields relative to the view)."""
    view = record.view_record(i)
    found, size = file_problems(view, lineno)
    found += finding_problems(view, lineno)
    found += mask_problems(view, raw, lineno, size, checked, i)
    return found


def _record_finding_problems(record: Record, lineno: int) -> list[Problem]:
    """The finding said of all views, when it is not the only view's own (checked with that view)."""
    if any(record.annotations is v.annotations for v in record.views):
        return []
    return _unknown_findings([("annotations.diagnosis", record.annotations.diagnosis)], lineno)


# --------------------------------------------------------------------------------------------- the rules

def schema_problems(obj: Any, lineno: int, root: Path) -> tuple[Record | None, list[Problem]]:
    """read_manifest's own validation (`Record.from_json`), its message split into field and problem."""
    try:
        return Record.from_json(obj, root), []
    except _Invalid as exc:
        where, sep, rest = str(exc).partition(" must ")
        if not sep:
            return None, [Problem(lineno, "", str(exc), "invalid field")]
        return None, [Problem(lineno, "" if where == "line" else where, "must " + rest, "invalid field")]


_RECORD_ANNOTATION_KEYS = ("diagnosis", "report", "measurements")
#: keys of one image that, at the top of a line of several views, belong to one of its views
_VIEW_LEVEL = ("image", "frame", "spacing", "scan_mask")


def shape_problems(obj: Any, lineno: int) -> list[Problem]:
    """Keys in the wrong place: from_json ignores them, so the record would silently lose what they hold. Every
    view gets the single-image shape rules; the top of a line of views, what only a record holds."""
    views = view_lines(obj)
    out = [p for where, raw in views for p in _in_view(_view_shape_problems(raw, lineno), where)]
    if not isinstance(obj, dict) or any(raw is obj for _, raw in views):
        return out
    out += [Problem(lineno, k, "belongs to a view of the examination (images[i]), not to the examination",
                    "annotations shape") for k in _VIEW_LEVEL if k in obj]
    out += _view_shape_problems({k: v for k, v in obj.items() if k != "annotations"}, lineno)
    ann = obj.get("annotations")
    if isinstance(ann, dict):
        out += [Problem(lineno, f"annotations.{k}", f"unknown key (an examination's annotations hold "
                        f"{', '.join(_RECORD_ANNOTATION_KEYS)}; objects belong to its views)", "annotations shape")
                for k in ann if k not in _RECORD_ANNOTATION_KEYS + ("objects",)]
    return out


def _view_shape_problems(obj: dict, lineno: int) -> list[Problem]:
    out = [Problem(lineno, k, "belongs inside annotations (at the top level it is kept as an extra key and "
                   "never trained on)", "annotations shape") for k in _MISPLACED if k in obj]
    ann = obj.get("annotations")
    if not isinstance(ann, dict):
        return out
    out += [Problem(lineno, f"annotations.{k}", f"unknown key (annotations holds {', '.join(_ANNOTATION_KEYS)})",
                    "annotations shape") for k in ann if k not in _ANNOTATION_KEYS]
    objects = ann.get("objects")
    for i, o in enumerate(objects if isinstance(objects, list) else []):
        if isinstance(o, dict):
            out += [Problem(lineno, f"annotations.objects[{i}].{k}",
                            f"unknown key (an object holds {', '.join(_OBJECT_KEYS)})", "annotations shape")
                    for k in o if k not in _OBJECT_KEYS]
    return out


def view_rule_problems(record: Record, lineno: int) -> list[Problem]:
    """How many views, and one site across them."""
    out = []
    if len(record.views) > MAX_EXAM_VIEWS:
        out.append(Problem(lineno, "images", f"{len(record.views)} views: an examination holds at most "
                           f"MAX_EXAM_VIEWS={MAX_EXAM_VIEWS} (views past it are not checked)", "exam"))
    conflict = site_conflict([v.site for v in record.views], record.site)
    if conflict:
        i, shown, site = conflict
        out.append(Problem(lineno, f"images[{i}].site", f"view {i + 1} shows {shown!r}, the examination "
                           f"{site!r}: the views of one examination show one site", "exam"))
    return out


def finding_problems(record: Record, lineno: int) -> list[Problem]:
    """Diagnoses outside FINDINGS: trained as answers, they teach a class the server refuses."""
    ann = record.annotations
    pairs = [("annotations.diagnosis", ann.diagnosis)]
    pairs += [(f"annotations.objects[{i}].diagnosis", o.diagnosis) for i, o in enumerate(ann.objects)]
    return _unknown_findings(pairs, lineno)


def _unknown_findings(pairs: list[tuple[str, str | None]], lineno: int) -> list[Problem]:
    """A problem for each (field, diagnosis) whose diagnosis is set and not one of FINDINGS."""
    return [Problem(lineno, where, f"unknown finding {value!r} (a diagnosis is one of {', '.join(FINDINGS)})",
                    "unknown finding") for where, value in pairs if value is not None and normal_finding(value) is None]


def label_mask_problems(record: Record, lineno: int) -> list[Problem]:
    """A mask path kept in the record's extra ``labels`` (``mask``, ``nodule_mask``: an older CSV import kept a mask
    column there) is never trained on: a note per key, so the summary does not read as if every annotation were
    kept. The record itself is kept for what else it holds."""
    labels = record.extra.get("labels")
    if not isinstance(labels, dict):
        return []
    return [Problem(lineno, f"labels.{k}", f"mask file {v!r} kept as a label is never trained on; make it an object "
                    "with its mask (re-import: `umind import --help`, csv mask columns)", "mask as a label", note=True)
            for k, v in labels.items() if isinstance(v, str) and re.search(r"(^|[ _])mask$", str(k), re.I)]


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))


def conversation_problems(record: Record, lineno: int) -> list[Problem]:
    """Ready-made conversations: a diagnose answer naming no known class, a mask group pointing at an object
    without a mask (the collator would fail on it in the middle of a run); a group names its view in
    ``mask_views``, or is on the only view."""
    out = []
    for c, conv in enumerate(record.conversations):
        answers = [(j, m) for j, m in enumerate(conv.messages) if m.get("role") == "assistant"]
        for j, m in answers if conv.task == "diagnose" else []:
            if answer_finding(_text(m.get("content"))) is None:
                out.append(Problem(lineno, f"conversations[{c}].messages[{j}].content", "a diagnose answer naming "
                                   f"no known finding ({', '.join(FINDINGS)})", "unknown finding"))
        for v, k in conv.mask_pairs:
            objects = record.views[v].annotations.objects
            if k >= len(objects) or objects[k].mask is None:
                of_view = f" of view {v + 1}" if conv.mask_views else ""
                out.append(Problem(lineno, f"conversations[{c}].mask_objects", f"object {k}{of_view} has no mask "
                                   "to draw", "conversation"))
    return out


def _missing(lineno: int, where: str, rel: str) -> Problem:
    return Problem(lineno, where, f"file {rel} does not exist", "missing file")


def file_problems(record: Record, lineno: int) -> tuple[list[Problem], tuple[int, int] | None]:
    """The image (exists, readable, has the frame) and the scan mask; returns the image size (w, h) too."""
    from PIL import Image

    if not record.image_path.is_file():
        out, size = [_missing(lineno, "image", record.image)], None
    else:
        try:
            with Image.open(record.image_path) as im:
                size, frames = im.size, int(getattr(im, "n_frames", 1))
            out = [] if record.frame < frames else [Problem(
                lineno, "frame", f"frame {record.frame} does not exist ({frames} frame(s) in {record.image})",
                "unreadable file")]
        except (OSError, ValueError) as exc:
            out, size = [Problem(lineno, "image", f"cannot read {record.image}: {exc}", "unreadable file")], None
    if record.scan_mask is not None:
        out += _read_mask(record, record.scan_mask, "scan_mask", lineno, size)[1]
    return out, size


def _mask_array(path: Path) -> np.ndarray:
    """A mask's values: palette indices and grey levels as stored; colour masks through grey, as training
    reads them (`Record.load_masks`)."""
    from PIL import Image

    with Image.open(path) as im:
        if im.mode not in ("L", "P", "I", "I;16", "I;16B", "I;16L", "F"):
            im = im.convert("L")
        return np.asarray(im)


def _read_mask(record: Record, rel: str, where: str, lineno: int,
               size: tuple[int, int] | None) -> tuple[np.ndarray | None, list[Problem]]:
    path = record.resolve(rel)
    if not path.is_file():
        return None, [_missing(lineno, where, rel)]
    try:
        arr = _mask_array(path)
    except (OSError, ValueError) as exc:
        return None, [Problem(lineno, where, f"cannot read {rel}: {exc}", "unreadable file")]
    if size is not None and arr.shape[:2] != (size[1], size[0]):
        return None, [Problem(lineno, where, f"{rel} is {arr.shape[1]}x{arr.shape[0]} pixels, the image "
                              f"{size[0]}x{size[1]}", "mask size")]
    return arr, []


def _label_names(raw: Any, where: str, lineno: int) -> tuple[dict[int, str] | None, list[Problem]]:
    """An object's ``label_names`` as {positive mask value: name}, or the problem with its shape."""
    if raw is None:
        return None, []
    bad = [Problem(lineno, where, f"must map mask values to names, e.g. {{\"1\": \"kidney\"}}, got {raw!r}",
                   "label map")]
    if not isinstance(raw, dict) or not raw:
        return None, bad
    names = {}
    for k, v in raw.items():
        if not str(k).isdigit() or int(k) <= 0 or not isinstance(v, str) or not v.strip():
            return None, bad
        names[int(k)] = v.strip()
    return names, []


def mask_problems(record: Record, obj: dict, lineno: int, size: tuple[int, int] | None,
                  checked: CheckedRecord, view: int = 0) -> list[Problem]:
    """Object masks of one view (`record` that view's record, `obj` its line): readable, the image's size, values
    against ``label_names``; an empty mask is a note and a negative (`checked.negatives[view]`), a named label map
    is recorded in `checked.label_maps[view]` to be split."""
    out: list[Problem] = []
    raws = obj.get("annotations", {}).get("objects", [])
    for i, o in enumerate(record.annotations.objects):
        where = f"annotations.objects[{i}]"
        names, bad = _label_names(raws[i].get("label_names"), f"{where}.label_names", lineno)
        out += bad
        if o.mask is None:
            if names is not None:
                out.append(Problem(lineno, f"{where}.label_names", "names the values of a mask, but the object "
                                   "has none", "label map"))
            continue
        arr, problems = _read_mask(record, o.mask, f"{where}.mask", lineno, size)
        out += problems
        if arr is None:
            continue
        values = [v.item() for v in np.unique(arr) if v != 0]
        if not values:
            checked.negatives.setdefault(view, []).append(i)
            out.append(Problem(lineno, f"{where}.mask", f"empty mask {o.mask}: a negative (no {o.label} in "
                               "this image), not trained as an object to draw", "empty mask", note=True))
        elif names is not None:
            out += _named_map_problems(o, names, values, where, lineno)
            checked.label_maps.setdefault(view, {})[i] = names
        elif len(values) > 1:
            shown = ", ".join(str(v) for v in values[:8]) + (", ..." if len(values) > 8 else "")
            out.append(Problem(lineno, f"{where}.mask", f"{o.mask} is a label map with values [{shown}], but a "
                               "mask is one object; declare their names in label_names (e.g. {\"1\": \"kidney\", "
                               "\"2\": \"renal sinus\"}) to split it", "label map"))
    return out


def _named_map_problems(o: ManifestObject, names: dict[int, str], values: list, where: str,
                        lineno: int) -> list[Problem]:
    out = []
    undeclared = [v for v in values if v not in names]
    if undeclared:
        out.append(Problem(lineno, f"{where}.mask", f"values {undeclared[:8]} of {o.mask} are not in "
                           f"label_names {sorted(names)}", "label map"))
    extra = [k for k, v in (("box", o.box), ("keypoints", o.keypoints), ("lines", o.lines),
                            ("diagnosis", o.diagnosis)) if v]
    out += [Problem(lineno, f"{where}.{k}", "a label map object is split by value, so its "
                    f"{k} cannot say which class it belongs to; give that class its own object", "label map")
            for k in extra]
    return out


def _has_content(record: Record) -> bool:
    return bool(record.site or record.conversations) or any(
        ann.objects or ann.diagnosis or (ann.report or "").strip() or ann.measurements
        for ann in [record.annotations] + [v.annotations for v in record.views])


# --------------------------------------------------------------------------------------------- output

def report_lines(result: CheckResult, manifest: str | os.PathLike | None = None) -> list[str]:
    """Every problem as ``manifest:line: field: message``, then the summary (checked, kept, skipped by reason)."""
    name = str(manifest if manifest is not None else result.path)
    lines = [p.text(name) for p in result.problems]
    skipped = result.checked - len(result.kept)
    lines.append(f"{name}: {result.checked} records checked, {len(result.kept)} kept, {skipped} skipped"
                 + (f", {len(result.notes)} note{'s' * (len(result.notes) != 1)}" if result.notes else ""))
    lines += [f"  skipped, {reason}: {n}" for reason, n in result.skipped_by_reason().items()]
    lines += [f"  kept, but not trained on ({reason}): {n}"
              for reason, n in Counter(p.reason for p in result.notes).most_common()]
    return lines


# --------------------------------------------------------------------------------------------- training

def leave_out_test_split(result: CheckResult) -> dict[str, int]:
    """Take the records of a test split (`data.split.is_test_split`: nnU-Net's imagesTs/labelsTs, UltraBench's
    test.json, HC18's test_set) out of ``result.kept``, so `training_manifest` never writes them; returns how many
    per split name.

    An import's DIR/manifest.jsonl holds every split, and a user (or a guide) may pass it to `umind train`: the
    check keeps them (they are valid records, `umind eval` scores on them), training alone leaves them out."""
    from .split import is_test_split, record_split

    left = Counter(record_split(c.record) for c in result.kept if is_test_split(c.record))
    result.kept = [c for c in result.kept if not is_test_split(c.record)]
    return dict(left.most_common())


def training_manifest(result: CheckResult, out_dir: str | os.PathLike) -> Path:
    """The manifest to train on: the checked one when every record passed unchanged, else
    ``OUT/checked_manifest.jsonl`` with only the kept records, empty masks dropped, named label maps split
    (masks under ``OUT/checked_masks/``) and findings in their one spelling."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)  # rebased paths go through it ("OUT/../data/x.png")
    records, changed = [], len(result.kept) != result.checked
    for checked in result.kept:
        rec = copy.deepcopy(checked.record)
        rebase(rec, out)
        changed |= _apply_fixes(rec, checked, out)
        records.append(rec)
    if not changed:
        return result.path
    return write_manifest(records, out / CHECKED_NAME)


def _respell(rec: Record) -> bool:
    """Every finding (the record's, each view's, each object's) in its one spelling; True when one changed."""
    changed = False
    for ann in [rec.annotations] + [v.annotations for v in rec.views]:
        for holder in [ann] + ann.objects:
            spelt = normal_finding(holder.diagnosis) if holder.diagnosis is not None else None
            changed |= spelt != holder.diagnosis
            holder.diagnosis = spelt
    return changed


def _apply_fixes(rec: Record, checked: CheckedRecord, out: Path) -> bool:
    """Respell findings, drop empty masks, split label maps, in every view; ready-made conversations that drew a
    changed object are dropped and the others' mask_objects renumbered. True when anything changed."""
    changed = _respell(rec)
    touched = {(v, k) for part in (checked.negatives, checked.label_maps) for v, ks in part.items() for k in ks}
    if not touched:
        return changed
    index = {v: _fix_view(rec, v, checked, out) for v in range(len(rec.views))}
    rec.conversations = [c for c in rec.conversations if not set(c.mask_pairs) & touched]
    for c in rec.conversations:
        c.mask_objects = [index[v][k] for v, k in c.mask_pairs]
    return True


def _fix_view(rec: Record, v: int, checked: CheckedRecord, out: Path) -> dict[int, int]:
    """View v's objects after the fixes; returns old object index -> new for the objects kept."""
    ann = rec.views[v].annotations
    negatives, maps = checked.negatives.get(v, []), checked.label_maps.get(v, {})
    index: dict[int, int] = {}
    objects: list[ManifestObject] = []
    for i, o in enumerate(ann.objects):
        if i in negatives:
            o.mask = None
        if i in maps or (i in negatives and not (o.box or o.keypoints or o.lines or o.diagnosis)):
            continue
        index[i] = len(objects)
        objects.append(o)
    view = rec.view_record(v)
    for i, names in maps.items():
        stem = f"line{checked.line}_obj{i}" if v == 0 else f"line{checked.line}_view{v + 1}_obj{i}"
        objects += _split(view, ann.objects[i], names, stem, out)
    ann.objects = objects
    return index


def _split(rec: Record, obj: ManifestObject, names: dict[int, str], stem: str,
           out: Path) -> list[ManifestObject]:
    """One object per named value of a label map, by the importers' rule (`masks.split_label_map`), each with its
    own binary mask file and box."""
    from PIL import Image

    from ..atomic import atomic_path
    from ..masks import mask_box, split_label_map

    pieces = split_label_map(_mask_array(rec.resolve(obj.mask)), names)
    objects = []
    for k, (name, mask) in enumerate(pieces):
        rel = f"checked_masks/{stem}_{k}.png"
        with atomic_path(out / rel) as tmp:
            Image.fromarray(mask.astype(np.uint8) * 255).save(tmp)
        objects.append(ManifestObject(label=name, mask=rel, box=mask_box(mask)))
    return objects
