"""What every importer needs, decided once: ids, image and mask files under the output folder, label maps split
into objects (the lesion-components rule), the skip-with-reason log, the split by group (`assign_split`) and the
final write of the manifests.

Readers turn one source layout into `Record`s whose paths are relative to the output folder; they never
build conversations (`finish` hands the written manifest to the one conversation builder) and never write a
manifest themselves, so the layout of an import (see `finish`) and its checks are the same for every format.
"""

from __future__ import annotations

import json
import os
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np
from PIL import Image

from ..atomic import atomic_path, copy_into, write_text
from ..data.manifest import ManifestError, ManifestObject, Record, read_manifest, rebase, write_manifest
from ..data.split import group_split, record_groups
from ..masks import is_lesion_kind, mask_box, mask_pieces, split_label_map  # noqa: F401  (re-exported)

__all__ = ["SourceError", "ImportFailure", "RowSkipped", "ImportLog", "ImportContext", "Placed", "ImportSummary",
           "label_name", "is_lesion_kind", "mask_pieces", "split_label_map",
           "load_json", "finish", "valid_split", "PIL_SUFFIXES", "parse_split", "assign_split", "foreground",
           "read_label_png", "lesion_label", "label_map_at"]

#: Image files linked or copied as they are (Pillow reads them, so the manifest can); others are converted.
PIL_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".tif", ".tiff")
#: Whole words (plural too) that make a label a lesion kind: its separate blobs are separate findings.
_ID_BAD = re.compile(r"[^A-Za-z0-9._-]+")
#: A split becomes the file DIR/<split>.jsonl: a plain name, never "manifest" or a path.
_SPLIT = re.compile(r"^(?!manifest$)[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")
#: The side `assign_split` puts the rest on.
TRAIN = "train"
#: the import's report, beside its manifests
REPORT = "import_report.json"


def valid_split(name: str) -> bool:
    return bool(_SPLIT.match(name))


class SourceError(ValueError):
    """The source cannot be read at all (missing folder, malformed JSON): one line, exit status 2."""


class ImportFailure(ValueError):
    """The import cannot be written (output folder taken, nothing importable): one line, exit status 2."""


class RowSkipped(Exception):
    """Raised inside one row (image, annotation, CSV line) to skip it; `reason` groups it in the summary."""

    def __init__(self, reason: str, detail: str = ""):
        super().__init__(reason)
        self.reason = reason
        self.detail = detail


# ------------------------------------------------------------------------------------------------ the log

#: how many skipped items a summary line names per reason (the report lists them all)
EXAMPLES = 3

@dataclass
class ImportLog:
    """Skipped rows (item, reason, detail) and dropped parts (reason counts), so a user sees what was left out
    and why without reading a traceback, and the counts can be tested."""
    skipped: list[dict] = field(default_factory=list)
    dropped: Counter = field(default_factory=Counter)

    def skip(self, item: str, reason: str, detail: str = "") -> None:
        self.skipped.append({"item": str(item), "reason": reason, "detail": detail})

    def drop(self, reason: str, n: int = 1) -> None:
        self.dropped[reason] += n

    def skip_counts(self) -> Counter:
        return Counter(s["reason"] for s in self.skipped)

    def examples(self, reason: str, n: int = EXAMPLES) -> list[str]:
        """The first `n` items skipped for `reason` (paths, rows, annotations), so a count says where to look."""
        return [s["item"] for s in self.skipped if s["reason"] == reason][:n]

    def reason_lines(self) -> list[str]:
        """One line per skip reason, most frequent first: its count, and its first items (with "..." for more)."""
        out = []
        for reason, n in self.skip_counts().most_common():
            shown = ", ".join(self.examples(reason))
            out.append(f"{n} {reason}: {shown}{', ...' if n > EXAMPLES else ''}")
        return out


@dataclass
class ImportSummary:
    """What `finish` wrote: the manifests, records per split, groups per split (where records name a group), and
    the log."""
    manifest: Path
    split_manifests: dict[str, Path]
    imported: int
    per_split: dict[str, int]
    log: ImportLog
    groups_per_split: dict[str, int] = field(default_factory=dict)

    def lines(self, fmt: str) -> list[str]:
        splits = ", ".join(f"{k} {v}" for k, v in self.per_split.items())
        head = f"umind import {fmt}: imported {self.imported} record(s)"
        out = [f"{head}{f' ({splits})' if splits else ''} -> {self.manifest}"]
        if self.groups_per_split:
            groups = ", ".join(f"{k} {v}" for k, v in self.groups_per_split.items())
            out.append(f"groups (subjects) per split: {groups}")
        counts = self.log.skip_counts()
        out.append(f"skipped {sum(counts.values())}" + (":" if counts else ""))
        out += [f"  {n:5d}  {reason} (e.g. {', '.join(self.log.examples(reason))}"
                f"{', ...' if n > EXAMPLES else ''})" for reason, n in counts.most_common()]
        if counts:
            out.append(f"every skipped item with its reason: {self.manifest.parent / REPORT}")
        if self.log.dropped:
            out.append(f"left out of imported records {sum(self.log.dropped.values())}:")
            out += [f"  {n:5d}  {reason}" for reason, n in self.log.dropped.most_common()]
        return out


# -------------------------------------------------------------------------------------------- names, rules

def label_name(raw: Any) -> str:
    """A label as prompts say it: underscores to spaces, runs of space collapsed (case kept)."""
    return " ".join(str(raw).replace("_", " ").split())


def lesion_label(site: str | None) -> str:
    """The object a finding class (`findings.finding_word`) is drawn as: "<site> lesion" ("breast lesion"), or
    "lesion" where the import names no site."""
    site = label_name(site or "")
    return f"{site} lesion" if site else "lesion"


def load_json(path: Path, what: str) -> Any:
    """A JSON file of the source, or SourceError naming the file and the place of the fault."""
    if not path.is_file():
        raise SourceError(f"{path}: {what} not found")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise SourceError(f"{path}: malformed JSON ({exc.msg} at line {exc.lineno}, column {exc.colno})") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SourceError(f"{path}: cannot read {what}: {exc}") from None


# ------------------------------------------------------------------------------------------------ splits

def parse_split(text: str) -> tuple[str, float]:
    """``NAME=FRACTION`` (``test=0.2``) -> (name, fraction); ValueError saying what is wrong otherwise."""
    name, sep, value = str(text).partition("=")
    name = name.strip()
    try:
        fraction = float(value) if sep else float("nan")
    except ValueError:
        fraction = float("nan")
    if not (0.0 < fraction < 1.0):
        raise ValueError(f"--split {text!r}: expected NAME=FRACTION with a fraction between 0 and 1, e.g. test=0.2")
    if not valid_split(name) or name == TRAIN:
        raise ValueError(f"--split {text!r}: the name must be a plain file name (letters, digits, - and _), not "
                         f"'manifest' or '{TRAIN}' (the rest goes to {TRAIN})")
    return name, fraction


def assign_split(records: Sequence[Any], name: str, fraction: float, seed: int = 0) -> int:
    """Put `fraction` of the groups of the records the source left unsplit into split `name`, the rest into
    "train", in place, by the project's one split rule (`data.split.group_split`: whole groups, from a hash of each
    group and `seed`, so a record keeps its side when the source grows). Records with a split from the source (a
    challenge's unlabelled test set) keep it. Returns how many records were split; ImportFailure when none could be.
    """
    free = [r for r in records if not r.extra.get("split")]
    if not free:
        raise ImportFailure("--split: every record already has the source's own split; nothing left to split")
    ids = [r.id for r in free]
    try:
        _, held = group_split(ids, record_groups(free), fraction, min_val=1, salt=f"umind-import:{seed}")
    except ValueError as exc:
        raise ImportFailure(f"--split: {exc}") from None
    held_ids = set(held)
    for rec in free:
        rec.extra["split"] = name if rec.id in held_ids else TRAIN
    return len(free)


def _groups_per_split(by_split: Mapping[str, Sequence[Any]]) -> dict[str, int]:
    """Distinct groups per split (a record without a group counts as its own), where any record names one."""
    if not any(g for recs in by_split.values() for g in record_groups(recs)):
        return {}
    return {k: len({g or f"id:{r.id}" for r, g in zip(recs, record_groups(recs))}) for k, recs in by_split.items()}


# ------------------------------------------------------------------------------------------ files out

@dataclass
class Placed:
    """An image written under the output folder: its path there, size, spacing (mm per pixel, None when the
    source has none) and, for files read through `imageio`, the geometry label maps must match."""
    rel: str
    width: int
    height: int
    spacing: tuple[float, float] | None
    geometry: Any = None


def _link_or_copy(src: Path, dst: Path) -> None:
    """Hard link (no second copy of a large dataset on the same file system), else copy; atomic either way."""
    with atomic_path(dst) as tmp:
        try:
            os.link(src, tmp)
        except OSError:
            copy_into(src, tmp)


def _save_png(arr: np.ndarray, dst: Path) -> None:
    with atomic_path(dst) as tmp:
        Image.fromarray(arr).save(tmp, format="PNG")


def _pil_info(src: Path) -> tuple[int, int, int]:
    try:
        with Image.open(src) as im:
            return im.size[0], im.size[1], int(getattr(im, "n_frames", 1))
    except (OSError, ValueError) as exc:
        raise RowSkipped("unreadable image", f"{src}: {exc}") from None


@dataclass
class ImportContext:
    """One import's output folder, options and log, handed to a reader."""
    out: Path
    log: ImportLog = field(default_factory=ImportLog)
    progress: bool = True
    site: str | None = None
    options: dict = field(default_factory=dict)
    _ids: set = field(default_factory=set)

    def new_id(self, base: str) -> str:
        """A unique, file-name-safe record id from a source name (a suffix -2, -3... on clashes)."""
        stem = _ID_BAD.sub("-", str(base)).strip("-.") or "image"
        rid, k = stem, 2
        while rid in self._ids:
            rid, k = f"{stem}-{k}", k + 1
        self._ids.add(rid)
        return rid

    def bar(self, items: Iterable, desc: str, total: int | None = None) -> Iterable:
        from tqdm import tqdm

        return tqdm(items, desc=f"import {desc}", total=total, unit="img", disable=not self.progress,
                    leave=False)

    def attempt(self, item: str, fn: Callable, *args, **kwargs) -> Any:
        """fn(...) or None: a bad row is skipped with its reason, never a traceback that ends the import."""
        from ..imageio import ImageReadError

        try:
            return fn(*args, **kwargs)
        except RowSkipped as exc:
            self.log.skip(item, exc.reason, exc.detail)
        except (ImageReadError, ManifestError, OSError) as exc:
            self.log.skip(item, "unreadable file", str(exc))
        except (KeyError, TypeError, ValueError, IndexError) as exc:
            self.log.skip(item, "malformed entry", f"{type(exc).__name__}: {exc}")
        return None

    def place_image(self, src: Path, rid: str) -> Placed:
        """Put the image under images/: Pillow formats linked or copied as they are, NIfTI/NRRD/DICOM
        converted to a PNG of their only frame (the manifest reads images through Pillow), with spacing."""
        if not src.is_file():
            raise RowSkipped("image file missing", str(src))
        suffix = src.suffix.lower()
        if suffix in PIL_SUFFIXES:
            w, h, n = _pil_info(src)
            if n != 1:
                raise RowSkipped("multi-frame image (only single frames are imported)", f"{src}: {n} frames")
            rel = f"images/{rid}{suffix}"
            _link_or_copy(src, self.out / rel)
            return Placed(rel, w, h, None)
        from ..imageio import read_study

        study = read_study(src)
        if len(study.frames) != 1:
            raise RowSkipped("multi-frame image (only single frames are imported)",
                             f"{src}: {len(study.frames)} frames ({study.geometry.kind})")
        frame = study.frames[0]
        px = frame.pixels
        if px.ndim == 3 and (px == px[..., :1]).all():
            px = px[..., 0]
        rel = f"images/{rid}.png"
        _save_png(np.ascontiguousarray(px), self.out / rel)
        known = study.geometry.spacing_known and frame.spacing is not None
        spacing = tuple(float(v) for v in frame.spacing) if known else None
        return Placed(rel, frame.size[0], frame.size[1], spacing, study.geometry)

    def write_mask(self, mask: np.ndarray, rid: str, tag: str) -> str:
        """A 0/255 PNG under masks/; returns its path relative to the output folder."""
        rel = f"masks/{rid}_{tag}.png"
        _save_png(np.asarray(mask, dtype=bool).astype(np.uint8) * 255, self.out / rel)
        return rel

    def mask_objects(self, pieces: Sequence[tuple[str, np.ndarray]], rid: str, start: int = 0) -> list[ManifestObject]:
        """(label, mask) pairs -> objects with their mask file and inclusive box."""
        return [ManifestObject(label=name, mask=self.write_mask(m, rid, str(start + k)), box=mask_box(m))
                for k, (name, m) in enumerate(pieces)]


def read_label_png(path: Path, shape: tuple[int, int]) -> np.ndarray:
    """A label map or mask stored as an image (grey, or colour with equal channels) at the image's (H, W)."""
    if not path.is_file():
        raise RowSkipped("mask or label file missing", str(path))
    try:
        with Image.open(path) as im:
            arr = np.asarray(im)
    except (OSError, ValueError) as exc:
        raise RowSkipped("unreadable mask or label file", f"{path}: {exc}") from None
    if arr.ndim == 3:
        if not (arr[..., :3] == arr[..., :1]).all():
            raise RowSkipped("colour label map (values must be grey levels)", str(path))
        arr = arr[..., 0]
    if arr.shape != tuple(shape):
        raise RowSkipped("mask size differs from the image", f"{path}: {arr.shape[::-1]} vs {tuple(shape)[::-1]}")
    return arr


def label_map_at(path: Path, placed: "Placed") -> np.ndarray:
    """A label map at its image's (H, W), integers: through imageio for NIfTI/NRRD/MetaImage (the same axis order as
    the image's PNG, `imageio.read_label_map`), through Pillow for 2D image formats. A map of another size, or of
    non-integer values, is RowSkipped naming the file."""
    if placed.geometry is None:
        lm = read_label_png(path, (placed.height, placed.width))
    else:
        if not path.is_file():
            raise RowSkipped("mask or label file missing", str(path))
        from ..imageio import ImageReadError, read_label_map

        try:
            lm = read_label_map(path, placed.geometry)[0]
        except ImageReadError as exc:
            raise RowSkipped("mask size differs from the image", str(exc)) from None
    if not np.issubdtype(lm.dtype, np.integer):
        if not np.array_equal(lm, np.round(lm)):
            raise RowSkipped("label map with non-integer values", str(path))
        lm = lm.astype(np.int64)
    return lm


def foreground(arr: np.ndarray, path: Path | str) -> np.ndarray:
    """A mask file of one object (0 = background) as a bool mask: 0/1, 0/255 (how most tools and BUSI-derived sets
    save a mask) or any one other value are the same object. Several non-zero values are a label map, whose values
    need names: RowSkipped naming the file and its values, never one merged object."""
    values = [int(v) for v in np.unique(arr) if v != 0]
    if len(values) > 1:
        shown = ", ".join(str(v) for v in values[:6]) + (", ..." if len(values) > 6 else "")
        raise RowSkipped("mask file with several values (a label map, not one object)", f"{path}: values {shown}")
    return np.asarray(arr) != 0


# ------------------------------------------------------------------------------------------- writing

def _check_written(path: Path) -> int:
    """The check every import passes: the manifest loads, and every image and mask it names exists at the
    image's size (a mask of another size would fail only inside a training step)."""
    records = read_manifest(path)
    for rec in records:
        with Image.open(rec.image_path) as im:
            size = im.size
        for obj in rec.annotations.objects:
            if obj.mask is not None:
                with Image.open(rec.resolve(obj.mask)) as m:
                    if m.size != size:
                        raise ImportFailure(f"{path}: record {rec.id}: mask {obj.mask} is {m.size}, image is {size}")
    return len(records)


def _remove_stale_splits(out: Path, keep: set[str]) -> None:
    """A merge that moves every record out of a split leaves no stale <split>.jsonl behind to train on."""
    try:
        old = json.loads((out / "import_report.json").read_text(encoding="utf-8")).get("splits", {})
    except (OSError, ValueError, AttributeError):
        return
    for name, file in (old.items() if isinstance(old, dict) else ()):
        if name not in keep and isinstance(file, str) and file == f"{name}.jsonl" and (out / file).is_file():
            (out / file).unlink()


def finish(ctx: ImportContext, records: list[Record], conversations: bool = True, seed: int = 0,
           tasks: Sequence[str] | None = None) -> ImportSummary:
    """Write the import: DIR/manifest.jsonl holds every record (each with its source split in the extra key
    "split"), and, where the source has splits, DIR/<split>.jsonl holds that split's records with the same
    relative paths. Conversations come from the one builder (`attach_conversations`); the import report
    (DIR/import_report.json) lists every skipped row with its reason."""
    if not records:
        why = "; ".join(ctx.log.reason_lines()) or "the source holds no images"
        report = _write_report(ctx, {"manifest": None, "splits": {}, "imported": 0, "per_split": {},
                                     "groups_per_split": {}})
        raise ImportFailure(f"nothing imported ({why}); report: {report}")
    ctx.out.mkdir(parents=True, exist_ok=True)
    for rec in records:
        if rec.root is not None:
            rebase(rec, ctx.out)
        rec.root = ctx.out
    manifest = write_manifest(records, ctx.out / "manifest.jsonl")
    if conversations:
        from ..data.conversations import attach_conversations

        attach_conversations(manifest, manifest, seed=seed, tasks=tasks)
    written = read_manifest(manifest)
    by_split: dict[str, list[Record]] = {}
    for rec in written:
        split = rec.extra.get("split")
        if isinstance(split, str) and split:
            if not valid_split(split):
                raise ImportFailure(f"record {rec.id}: split {split!r} cannot name a manifest file")
            by_split.setdefault(split, []).append(rec)
    split_paths = {name: write_manifest(recs, ctx.out / f"{name}.jsonl") for name, recs in by_split.items()}
    _remove_stale_splits(ctx.out, set(split_paths))
    n = _check_written(manifest)
    for path in split_paths.values():
        _check_written(path)
    summary = ImportSummary(manifest, split_paths, n, {k: len(v) for k, v in by_split.items()}, ctx.log,
                            _groups_per_split(by_split))
    _write_report(ctx, {"manifest": manifest.name, "splits": {k: p.name for k, p in split_paths.items()},
                        "imported": n, "per_split": summary.per_split, "groups_per_split": summary.groups_per_split})
    return summary


def _write_report(ctx: ImportContext, head: dict) -> Path:
    """DIR/import_report.json: what was written (`head`), every skipped item with its reason and detail, and the
    parts left out of imported records. Written for a failed import too, so the user can see every skipped path."""
    ctx.out.mkdir(parents=True, exist_ok=True)
    report = {**head, "skipped": ctx.log.skipped, "skipped_by_reason": dict(ctx.log.skip_counts()),
              "dropped": dict(ctx.log.dropped)}
    path = ctx.out / REPORT
    write_text(path, json.dumps(report, indent=2, ensure_ascii=False) + "\n")
    return path
