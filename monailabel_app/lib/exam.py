"""An interpret request about a whole examination: its views read, checked and answered as one.

Two ways to name the views: `images` (datastore ids, the request's own image first; resolved at the door by
`wall/exam_ref.py`) or `exam: "frames"` (the selected frames of the request's own clip or series, e.g. the frames
of a biometry sweep). Each view is read and capped like any infer image; views that show different sites
(the datastore image info's `site`, or a DICOM's BodyPartExamined) are refused with the rule `umind check` uses
(`manifest.site_conflict`). The model reads all views in one conversation: one `Job` whose image is the list
of views, handed to the scheduler as any request's jobs (a row of the Predictor's batches like any image); every
grounded object names its view, is measured with that view's spacing and comes back as markups in that view's
geometry, so a client puts it on the right image; a segment's masks come back per view as that view's label map,
inline (`_view_label`).
"""

from __future__ import annotations

import base64
from pathlib import Path

from umind_core.answers.findings import answer_finding
from umind_core.exam_views import ExamRead, ExamViewError, read_views, view_frame, view_result
from umind_core.frames import parse_frames
from umind_core.imageio import Geometry, Study, label_map_suffix, read_study
from umind_core.outputs import frame_markups, geometry_info, write_viewer_files
from umind_core.prompts import TEMPLATES
from umind_core.answers.results import Result

from .params import current_slice, parse_prompt
from .reply_files import reply_path
from .wall.caps import check_image_budget
from .wall.errors import BadRequest
from .wall.exam_ref import EXAM_IDS, EXAM_PATHS, EXAM_SITES, check_exam_count
from .wire import prompt_key

__all__ = ["EXAM_FRAMES", "exam_prompt", "exam_reply", "is_exam_request", "read_exam"]

#: the `exam` value that makes the selected frames of the request's own image the views
EXAM_FRAMES = "frames"


def is_exam_request(opts: dict) -> bool:
    return bool(opts.get(EXAM_PATHS)) or opts.get("exam") not in (None, "", False)


def read_exam(opts: dict, study: Study, conf) -> ExamRead:
    """The examination's views, checked (BadRequest): the request's own `study` first."""
    mode = opts.get("exam")
    if mode not in (None, "", False, EXAM_FRAMES):
        raise BadRequest(f"exam must be {EXAM_FRAMES!r} (the selected frames as the views) or left out, got {mode!r}")
    if mode == EXAM_FRAMES:
        if opts.get(EXAM_PATHS):
            raise BadRequest("give either images (other datastore images as views) or exam: 'frames', not both")
        idx = parse_frames(opts.get("frames")).select(study.geometry, current=current_slice(opts), past_end="refuse")
        check_exam_count(len(idx), "the frames selected with 'frames'", conf.max_exam_views)
        image = str((opts.get(EXAM_IDS) or ["image"])[0])
        return _checked([image] * len(idx), [study] * len(idx), idx, None, None, conf)
    paths, ids = opts[EXAM_PATHS], [str(i) for i in opts[EXAM_IDS]]
    studies, frames, notes = [], [], []
    for i, (path, image) in enumerate(zip(paths, ids)):
        view_study = study if i == 0 else _read_view(path, image, conf)
        k, said = view_frame(view_study, current_slice(opts) if i == 0 else None)
        studies.append(view_study)
        frames.append(k)
        notes.append([f"view {i + 1} ({image}): {n}" for n in said])
    return _checked(ids, studies, frames, notes, opts.get(EXAM_SITES), conf)


def _checked(ids, studies, frames, notes, sites, conf) -> ExamRead:
    """`exam_views.read_views` (the rules `umind infer --exam` applies) under the server's cap, as a 400."""
    try:
        return read_views(ids, studies, frames, notes, sites, what="views", cap=conf.max_exam_views,
                          cap_rule=f"allowed by max_exam_views = {conf.max_exam_views}")
    except ExamViewError as exc:
        raise BadRequest(str(exc)) from None


def _read_view(path: str, image: str, conf) -> Study:
    try:
        check_image_budget(path, conf)
        return read_study(path)
    except BadRequest as exc:
        raise BadRequest(f"view {image!r}: {exc.detail}") from None


def exam_reply(result: Result, exam: ExamRead, task: str, prompt: str | None, calibrate: bool) -> dict:
    """The answer JSON: the answer and objects (each with its 0-based `view`), and per view its image, frame,
    geometry and the markups of its objects in that geometry (where the client loads that view)."""
    out_views = []
    for k, (view, study, frame) in enumerate(zip(exam.views, exam.studies, exam.frames)):
        geometry = study.output_geometry(calibrate=calibrate)
        mine = view_result(result, k, frame.index, frame.size)
        entry = {"view": k, "image": view.image, "frame": view.frame,
                 "geometry": geometry_info(study, geometry),
                 "markups": frame_markups([mine], geometry), "warnings": exam.notes[k]}
        if task == "segment" and not result.unparsable:
            entry["label"] = _view_label(mine, study, geometry, prompt or TEMPLATES["segment"].default_target)
        out_views.append(entry)
    cls = answer_finding(result.answer) if task == "diagnose" else None
    return {"task": task, "prompt": prompt, "answer": result.answer, "text": result.text, "class": cls,
            "objects": [o.to_dict() for o in result.objects], "confidence": result.confidence,
            "warnings": result.warnings + [w for notes in exam.notes for w in notes],
            "exam": {"views": out_views}}


def _view_label(mine: Result, study: Study, geometry: Geometry, target: str) -> dict:
    """A view's masks as the label map a single-image segment of that view returns (its format, in its geometry),
    inline and base64-encoded: one reply carries every view's, and a client decodes each as it decodes a single
    image's label file. Named by the target (value 1), also when nothing was found, so its segment is cleared."""
    suffix = label_map_suffix(study.geometry)
    path = reply_path(suffix)
    try:
        files = write_viewer_files([mine], study, geometry, labels_to=path, names=[target], fallback=target)
        data = Path(path).read_bytes()
    finally:
        Path(path).unlink(missing_ok=True)
    return {"file": "labels" + suffix, "data": base64.b64encode(data).decode("ascii"),
            "label_names": dict(files.stack.values) or {target: 1}}


def exam_prompt(task: str, opts: dict) -> str | None:
    """The prompt of an exam task: the question for `ask` (required), else the optional target."""
    key = prompt_key(task)
    return parse_prompt(key, opts.get(key), required=key == "question")
