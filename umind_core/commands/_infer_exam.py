"""`umind infer --exam`: every input is one examination, read by the model in one conversation.

A folder is an examination of its image files (searched as `umind infer` searches folders, in name order; a clip
or volume among them is one view, the frame a viewer opens on); a single file is an examination of its selected
frames (--frames), e.g. the frames of a biometry sweep. An examination has 2 to `MAX_EXAM_VIEWS` views of one
site (a DICOM's BodyPartExamined; `exam_views.check_view_sites`, the rule the server applies).

Each examination gets <out>/<name>/ with view-<k>/ per view (that view's label map and markups in its own
geometry, as `umind infer` writes them for one image: `batch.write_outputs`) and results.json (the answer, every
object with its 0-based ``view``, and which input and frame each view is), written last so that its presence
marks the examination done.
"""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from ..atomic import write_text
from ._infer_input import Outcome, _check_content, _read, already_done

__all__ = ["VIEW_FOLDER", "ExamItem", "process_exam"]

#: each view's output folder inside the examination's: view-1, view-2, ...
VIEW_FOLDER = "view-{k}"


@dataclass(frozen=True)
class ExamItem:
    """One examination: a folder of images (its views) or one file (its frames), and its output folder name."""

    path: Path
    files: tuple[Path, ...]
    name: str

    @property
    def display(self) -> str:
        return str(self.path)


def _views(item: ExamItem, request):
    """The examination's views in reading order, checked: count and sites (ValueError naming the problem)."""
    from ..exam_views import check_view_count, read_views, view_frame

    if len(item.files) == 1:
        study = _read(item.files[0], request.axis)
        frames = request.frames.select(study.geometry, item.display)
        return read_views([str(item.files[0])] * len(frames), [study] * len(frames), frames,
                          what="selected frames (--frames)")
    check_view_count(len(item.files), "image files in the folder")  # counted before any file is read
    studies = [_read(path, request.axis) for path in item.files]
    chosen = [view_frame(study) for study in studies]
    return read_views([str(p) for p in item.files], studies, [k for k, _ in chosen],
                      [[f"{p.name}: {n}" for n in notes] for p, (_, notes) in zip(item.files, chosen)],
                      what="image files in the folder")


def process_exam(ctx, index: int, item: ExamItem) -> Outcome:
    """Answer one examination and write its outputs (`infer._process`'s twin for an examination)."""
    from .. import batch
    from ..exam_views import view_result

    out_dir = ctx.out / item.name
    wanted = ctx.request.to_dict()
    if already_done(ctx, out_dir, wanted):
        return Outcome(index, item.display, item.name, "skipped")
    t0 = time.perf_counter()
    exam = _views(item, ctx.request)
    for study in {id(s): s for s in exam.studies}.values():  # a clip's frames share one study: checked once
        _check_content(study, study.path)
    _clear(out_dir)
    n = len(exam.views)
    ctx.grow_bar(total=n, postfix=item.name[-30:])
    frames = exam.frames
    result = ctx.predict_exam(frames)
    ctx.grow_bar(done=n)
    view_docs = []
    for k, (view, study, frame) in enumerate(zip(exam.views, exam.studies, frames)):
        folder = VIEW_FOLDER.format(k=k + 1)
        mine = view_result(result, k, frame.index, frame.size)
        batch.write_outputs(out_dir / folder, study, [frame], [mine], {**wanted, "view": k},
                            ctx.model_name, overlay=ctx.overlay)
        view_docs.append({"view": k, "input": study.path, "frame": view.frame, "folder": folder,
                          "spacing": list(view.spacing) if view.spacing is not None else None})
    doc = {"format": batch.RESULTS_FORMAT, "version": batch.RESULTS_VERSION, "exam": True,
           "input": str(item.path), "model": ctx.model_name, "task": ctx.request.task, "request": wanted,
           "answer": result.answer, "text": result.text, "objects": [o.to_dict() for o in result.objects],
           "warnings": result.warnings + [w for notes in exam.notes for w in notes], "confidence": result.confidence,
           "views": view_docs, "elapsed_s": round(time.perf_counter() - t0, 3)}
    write_text(out_dir / batch.RESULTS_NAME, json.dumps(doc, indent=2))
    return Outcome(index, item.display, item.name, "done", frames=n)


def _clear(out_dir: Path) -> None:
    """An earlier run's outputs: results.json first (never a stale 'done' marker), then its view folders."""
    from .. import batch

    if not out_dir.is_dir():
        return
    batch.clear_outputs(out_dir)
    for p in sorted(out_dir.glob(VIEW_FOLDER.format(k="*"))):
        if p.is_dir():
            shutil.rmtree(p)
