"""Batch inference plumbing: which files INPUTS name, where each one's outputs go, and writing them.

Kept apart from the `umind infer` command so that the rules a folder of outputs obeys live in one place:

* Every input gets its own folder `<out>/<name>/`; names are computed from the whole input list (never from one
  process's shard), so one process and N processes write the same tree.
* `results.json` is written last and atomically: its presence means the input is done, which is what makes a
  batch resumable. It also records the request, so a rerun with another task never silently "skips" onto
  answers to a different question.
* The label map and markups follow `outputs` (one label stack across frames, "(frame N)" markups, the files'
  geometry, nothing found, unparsable answers), the module the server's infer tasks write with too; here the
  label map takes the input family's suffix and unlabelled masks are named after the requested target. A
  segment request always gets a label map and a detect, keypoints or measure request always gets markups
  (empty ones when nothing was found), so a folder of outputs never depends on what the model happened to say.
* Where the image's calibration is not in what Slicer reads (a DICOM whose spacing is only in its ultrasound
  regions), the image is written beside its outputs as image.nrrd in the calibrated geometry, the one the label
  map and markups are written in: opening that pair in Slicer shows the lengths results.json states.
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
import numpy as np

from . import prompts
from .imageio import (
    SUPPORTED_SUFFIXES,
    Geometry,
    ImageReadError,
    Study,
    detect_format,
    label_map_suffix,
    write_image,
    write_overlay_png,
)
from .frames import FrameSpec, FrameSpecError
from .frames import parse_frames as _parse_frames
from .outputs import frame_markups, geometry_info, write_viewer_files
from .answers.results import Result

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
    "discover_exams",
]

RESULTS_NAME = "results.json"
RESULTS_FORMAT = "umind-infer"
RESULTS_VERSION = 1
MARKUPS_NAME = "markups.mrk.json"
IMAGE_NAME = "image.nrrd"
_OUTPUT_PATTERNS = (RESULTS_NAME, MARKUPS_NAME, IMAGE_NAME, "labels.png", "labels.nii.gz", "labels.nrrd",
                    "overlay-*.png")
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
    """Files a folder or glob contributes: those the readers would decode (`imageio.detect_format`, the one owner
    of that rule: supported suffixes, and suffix-less files with the DICOM marker). A file whose format refuses it
    (a detached `.nhdr`) is taken, so that it fails with its reason instead of vanishing."""
    try:
        detect_format(path)
    except (ImageReadError, OSError):
        return False
    return True


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


def discover_exams(specs: Sequence[str], exclude: str | os.PathLike | None = None
                   ) -> tuple[list[tuple[Path, tuple[Path, ...]]], list[tuple[str, str]]]:
    """INPUTS as examinations (`umind infer --exam`): each folder, named or matched by a glob, with its image files
    (found as `discover_inputs` finds a folder's), and each file alone (its frames are the views). Returns the
    examinations in order without duplicates, and the specs that named none, each with the reason."""
    excluded = Path(exclude).resolve() if exclude is not None else None
    exams: list[tuple[Path, tuple[Path, ...]]] = []
    problems: list[tuple[str, str]] = []
    seen: set[Path] = set()
    for spec in specs:
        pattern = bool(_GLOB_CHARS.search(spec))
        matches = [Path(m) for m in sorted(glob.glob(spec, recursive=True))] if pattern else [Path(spec)]
        matches = [p for p in matches if (p.is_file() or p.is_dir()) and not _inside(p, excluded)]
        if not matches:
            problems.append((spec, "pattern matches no file or folder" if pattern else "file or folder does not exist"))
        for p in matches:
            files = (p,) if p.is_file() else tuple(_walk(p, excluded))
            if not files:
                problems.append((str(p), "folder has no image files to read as the views of an examination"))
            elif p.resolve() not in seen:
                seen.add(p.resolve())
                exams.append((p, files))
    return exams, problems


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
    image: str | None = None


def _overlay(path: Path, frame, res: Result) -> None:
    write_overlay_png(
        frame,
        [o.mask for o in res.objects if o.mask is not None],
        path,
        boxes=[o.box for o in res.objects if o.box is not None],
        points=[p for o in res.objects for p in o.points],
        lines=[o.line for o in res.objects if o.line is not None],
    )


def write_calibrated_image(path: Path, study: Study, geometry: Geometry) -> Path:
    """The study's frames as a NRRD in ``geometry`` (grey where the frames are grey, else RGB).

    Why: Slicer reads a DICOM through ITK, which ignores the ultrasound regions, so the file itself opens at
    1 mm per pixel and label maps and markups in the calibrated geometry would not overlay it."""
    frames = sorted(study.frames, key=lambda f: f.index)
    if [f.index for f in frames] != list(range(geometry.n_frames)):
        raise BatchError(f"{study.path}: the calibrated image needs every frame of the study")
    stack = np.stack([f.pixels for f in frames])
    if (stack[..., 1:] == stack[..., :1]).all():
        stack = stack[..., 0]
    return write_image(stack[0] if geometry.kind == "2d" else stack, geometry, path)


def _wanted(task: str | None, results: Sequence[Result], markups: list[dict]) -> tuple[bool, bool]:
    """(label map, markups) for a request: what its task answers with, and whatever the answers hold."""
    answer = prompts.TEMPLATES[task].answer if task in prompts.TEMPLATES else "text"
    masks = any(o.mask is not None for r in results for o in r.objects)
    return answer == "mask" or masks, answer in ("box", "point", "line") or bool(markups)


def write_outputs(out_dir: Path, study: Study, frames: Sequence, results: Sequence[Result], request: dict,
                  model: str, overlay: bool = False, extra: dict | None = None) -> WrittenOutputs:
    """Write one input's label map, markups and overlays, then its results.json (last, atomically).

    ``frames`` are the Frames that ``results`` answer, in the same order (for overlays). The label map and
    markups go through `outputs.write_viewer_files`, in the study's `output_geometry`.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    geometry = study.geometry
    files_geometry = study.output_geometry()  # where Slicer shows the image, with the calibrated spacing
    written = WrittenOutputs(results=RESULTS_NAME)
    task = request.get("task")
    target = request.get("prompt") or (prompts.TEMPLATES[task].default_target if task in prompts.TEMPLATES
                                       else None)
    markups = frame_markups(results, files_geometry)
    want_labels, want_markups = _wanted(task, results, markups)
    files = write_viewer_files(results, study, files_geometry,
                               labels_to=out_dir / label_map_name(geometry) if want_labels else None,
                               markups_to=out_dir / MARKUPS_NAME if want_markups else None,
                               markups=markups, targets=[target], fallback=target)
    written.labels = files.labels.name if files.labels is not None else None
    written.markups = files.markups.name if files.markups is not None else None
    if study.calibration_hidden and (written.labels or written.markups):
        written.image = write_calibrated_image(out_dir / IMAGE_NAME, study, files_geometry).name
    if overlay:
        for frame, res in zip(frames, results):
            name = f"overlay-{res.frame_index:04d}.png"
            _overlay(out_dir / name, frame, res)
            written.overlays.append(name)
    frame_dicts = []
    for res, ov in zip(results, files.stack.object_values):
        d = res.to_dict()
        for i, value in ov.items():
            d["objects"][i]["mask"].update(file=written.labels, label_value=value)
        frame_dicts.append(d)
    doc = {
        "format": RESULTS_FORMAT,
        "version": RESULTS_VERSION,
        "input": study.path,
        "model": model,
        "task": task,
        "request": request,
        "geometry": geometry.to_dict(),
        "output_geometry": geometry_info(study, files_geometry),
        "n_frames": geometry.n_frames,
        "frames": [r.frame_index for r in results],
        "outputs": {"labels": written.labels, "markups": written.markups, "overlays": written.overlays,
                    "image": written.image},
        "label_values": files.stack.values if written.labels else {},
        "results": frame_dicts,
        **(extra or {}),
    }
    write_text(out_dir / RESULTS_NAME, json.dumps(doc, indent=2))
    return written
