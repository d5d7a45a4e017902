"""Batch inference plumbing: which files INPUTS name, where each one's outputs go, and writing them.

Kept apart from the `umind infer` command so that the rules a folder of outputs obeys live in one place:

* Every input gets its own folder `<out>/<name>/`; names are computed from the whole input list (never from one
  process's shard), so one process and N processes write the same tree.
* `results.json` is written last and atomically: its presence means the input is done, which is what makes a
  batch resumable. It also records the request, so a rerun with another task never silently "skips" onto
  answers to a different question.
* The label map and markups follow `outputs` (one label stack across frames, "(frame N)" markups), the module the
  server's infer tasks write with too; here the label map takes the input family's suffix and unlabelled masks
  are named "object N".
"""

from __future__ import annotations

import glob
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from .atomic import write_text
from .imageio import (
    SUPPORTED_SUFFIXES,
    Geometry,
    Study,
    label_map_suffix,
    write_markups_json,
    write_overlay_png,
)
from .frames import FrameSpec, FrameSpecError
from .frames import parse_frames as _parse_frames
from .outputs import frame_markups, label_stack
from .results import Result

__all__ = [
    "BatchError",
    "FrameSpec",
    "FrameSpecError",
    "InputItem",
    "RESULTS_NAME",
    "RESULTS_FORMAT",
    "discover_inputs",
    "output_names",
    "parse_frames",
    "label_map_name",
    "existing_request",
    "clear_outputs",
    "write_outputs",
]

RESULTS_NAME = "results.json"
RESULTS_FORMAT = "umind-infer"
RESULTS_VERSION = 1
MARKUPS_NAME = "markups.mrk.json"
_OUTPUT_PATTERNS = (RESULTS_NAME, MARKUPS_NAME, "labels.png", "labels.nii.gz", "labels.nrrd", "overlay-*.png")
_GLOB_CHARS = re.compile(r"[*?\[]")


class BatchError(ValueError):
    """A bad INPUTS entry, frame selection or output folder; the message names it and the problem."""


# ------------------------------------------------------------------ inputs


@dataclass(frozen=True)
class InputItem:
    """One input file and the name of its output folder."""

    path: Path
    name: str

    @property
    def display(self) -> str:
        return str(self.path)


def _is_image_candidate(path: Path) -> bool:
    """Files a folder or glob contributes: supported suffixes, and suffix-less files with the DICOM marker."""
    low = path.name.lower()
    if low.endswith(SUPPORTED_SUFFIXES):
        return True
    if "." in path.name:
        return False
    try:
        with open(path, "rb") as fh:
            head = fh.read(132)
    except OSError:
        return False
    return len(head) == 132 and head[128:132] == b"DICM"


def _inside(path: Path, folder: Path | None) -> bool:
    if folder is None:
        return False
    try:
        path.resolve().relative_to(folder)
        return True
    except ValueError:
        return False


def _walk(folder: Path, exclude: Path | None) -> list[Path]:
    found = []
    for root, dirs, files in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and not _inside(Path(root) / d, exclude))
        for f in sorted(files):
            p = Path(root) / f
            if not f.startswith(".") and _is_image_candidate(p):
                found.append(p)
    return found


def discover_inputs(specs: Sequence[str], exclude: str | os.PathLike | None = None
                    ) -> tuple[list[Path], list[tuple[str, str]]]:
    """Expand INPUTS (files, folders searched recursively, glob patterns with ``**``) into files.

    A file named explicitly is always taken, whatever its suffix, so that a wrong file fails with a reason
    instead of vanishing; folders and globs contribute only image candidates. Anything under ``exclude``
    (the output folder) is never an input. Returns the files in order without duplicates, and the specs
    that named nothing, each with the reason.
    """
    excluded = Path(exclude).resolve() if exclude is not None else None
    files: list[Path] = []
    problems: list[tuple[str, str]] = []
    seen: set[Path] = set()

    def add(p: Path) -> None:
        key = p.resolve()
        if key not in seen:
            seen.add(key)
            files.append(p)

    for spec in specs:
        p = Path(spec)
        if p.is_file():
            add(p)
        elif p.is_dir():
            found = _walk(p, excluded)
            if not found:
                problems.append((spec, f"folder has no image files ({', '.join(SUPPORTED_SUFFIXES)} or DICOM)"))
            for f in found:
                add(f)
        elif _GLOB_CHARS.search(spec):
            found = []
            for m in sorted(glob.glob(spec, recursive=True)):
                mp = Path(m)
                if _inside(mp, excluded):
                    continue
                if mp.is_dir():
                    found.extend(_walk(mp, excluded))
                elif mp.is_file() and _is_image_candidate(mp):
                    found.append(mp)
            if not found:
                problems.append((spec, "pattern matches no image files"))
            for f in found:
                add(f)
        else:
            problems.append((spec, "file does not exist"))
    return files, problems


def _strip_suffix(name: str) -> str:
    low = name.lower()
    for suffix in sorted(SUPPORTED_SUFFIXES, key=len, reverse=True):
        if low.endswith(suffix) and len(name) > len(suffix):
            return name[: -len(suffix)]
    return name


def _safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("._") or "input"


def output_names(paths: Sequence[Path]) -> list[str]:
    """A distinct output folder name per input: the file stem, made longer only where stems collide.

    Colliding inputs are named by their path relative to their common folder ('a/img.png' and 'b/img.png'
    become 'a__img' and 'b__img'); if that still collides (img.png next to img.nii.gz) the suffix is kept.
    """
    stems = [_safe(_strip_suffix(p.name)) for p in paths]
    counts: dict[str, int] = {}
    for s in stems:
        counts[s.lower()] = counts.get(s.lower(), 0) + 1
    clashing = [i for i, s in enumerate(stems) if counts[s.lower()] > 1]
    if clashing:
        resolved = [paths[i].resolve() for i in clashing]
        common = Path(os.path.commonpath([str(r.parent) for r in resolved]))
        for i, r in zip(clashing, resolved):
            rel = r.relative_to(common)
            stems[i] = _safe("__".join([*rel.parent.parts, _strip_suffix(rel.name)]))
        counts = {}
        for i in clashing:
            counts[stems[i].lower()] = counts.get(stems[i].lower(), 0) + 1
        for i, r in zip(clashing, resolved):
            if counts[stems[i].lower()] > 1:
                rel = r.relative_to(common)
                stems[i] = _safe("__".join([*rel.parent.parts, rel.name.replace(".", "_")]))
    taken: set[str] = set()
    for i, s in enumerate(stems):  # names that only differ in characters _safe replaced
        name, k = s, 2
        while name.lower() in taken:
            name, k = f"{s}-{k}", k + 1
        taken.add(name.lower())
        stems[i] = name
    return stems


# ------------------------------------------------------------------ frames


def parse_frames(text: str) -> FrameSpec:
    """`--frames` as a `frames.FrameSpec` (the server's grammar and meaning of "current"), named --frames in
    messages; `umind infer` applies it with past_end="clip" since one spec serves inputs of any length."""
    return _parse_frames(text, option="--frames")


# ------------------------------------------------------------------ outputs


def label_map_name(geometry: Geometry) -> str:
    """labels + the input family's suffix (`imageio.label_map_suffix`: PNG only for PNG/JPEG, whose
    geometry a PNG can hold; NRRD keeps the spacing that a PNG would lose, and Slicer reads it)."""
    return "labels" + label_map_suffix(geometry)


def existing_request(out_dir: Path) -> dict | None:
    """The request recorded in a finished output folder, or None when the input is not done."""
    path = out_dir / RESULTS_NAME
    if not path.is_file():
        return None
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None  # unreadable: treated as not done and redone
    if not isinstance(doc, dict) or doc.get("format") != RESULTS_FORMAT or not isinstance(doc.get("request"), dict):
        return None
    return doc["request"]


def clear_outputs(out_dir: Path) -> None:
    """Remove what an earlier run wrote (results.json first, so a crash never leaves a stale 'done' marker)."""
    if not out_dir.is_dir():
        return
    for pattern in _OUTPUT_PATTERNS:
        for p in sorted(out_dir.glob(pattern)):
            if p.is_file():
                p.unlink()


@dataclass
class WrittenOutputs:
    """The files written for one input, relative to its output folder."""

    results: str
    labels: str | None = None
    markups: str | None = None
    overlays: list[str] = field(default_factory=list)


def _overlay(path: Path, frame, res: Result) -> None:
    write_overlay_png(
        frame,
        [o.mask for o in res.objects if o.mask is not None],
        path,
        boxes=[o.box for o in res.objects if o.box is not None],
        points=[p for o in res.objects for p in o.points],
        lines=[o.line for o in res.objects if o.line is not None],
    )


def write_outputs(out_dir: Path, study: Study, frames: Sequence, results: Sequence[Result], request: dict,
                  model: str, overlay: bool = False, extra: dict | None = None) -> WrittenOutputs:
    """Write one input's label map, markups and overlays, then its results.json (last, atomically).

    ``frames`` are the Frames that ``results`` answer, in the same order (for overlays).
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    geometry = study.geometry
    viewer = study.viewer_geometry  # files for Slicer lie where Slicer shows the image (DICOM: ITK's reading)
    written = WrittenOutputs(results=RESULTS_NAME)
    stack = label_stack(results, geometry)
    if stack.values:
        written.labels = label_map_name(geometry)
        stack.write(out_dir / written.labels, viewer)
    markups = frame_markups(results, viewer)
    if markups:
        written.markups = MARKUPS_NAME
        write_markups_json(markups, out_dir / MARKUPS_NAME)
    if overlay:
        for frame, res in zip(frames, results):
            name = f"overlay-{res.frame_index:04d}.png"
            _overlay(out_dir / name, frame, res)
            written.overlays.append(name)
    frame_dicts = []
    for res, ov in zip(results, stack.object_values):
        d = res.to_dict()
        for i, value in ov.items():
            d["objects"][i]["mask"].update(file=written.labels, label_value=value)
        frame_dicts.append(d)
    doc = {
        "format": RESULTS_FORMAT,
        "version": RESULTS_VERSION,
        "input": study.path,
        "model": model,
        "task": request.get("task"),
        "request": request,
        "geometry": geometry.to_dict(),
        "n_frames": geometry.n_frames,
        "frames": [r.frame_index for r in results],
        "outputs": {"labels": written.labels, "markups": written.markups, "overlays": written.overlays},
        "label_values": stack.values,
        "results": frame_dicts,
        **(extra or {}),
    }
    write_text(out_dir / RESULTS_NAME, json.dumps(doc, indent=2))
    return written
