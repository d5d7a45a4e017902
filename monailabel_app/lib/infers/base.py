"""The one infer task class: request -> frames -> Predictor -> label map, markups JSON or answer JSON.

Every UMind infer task is this class with different class attributes (what MONAI Label type it shows as,
which Predictor tasks it may run, what it returns, which options the Slicer extension renders), so a fix
here fixes all of them and no task grows its own code path.

Outputs (written by `umind_core.outputs.write_viewer_files`, the writer `umind infer` uses too, so nothing found
and unparsable answers give the same files from both; every reply says in `geometry` which geometry its files
are in, `outputs.geometry_info`):
- "label_map": one label value per target (segment) where Slicer shows the image (`Study.output_geometry`:
  with the calibrated spacing, which a DICOM calibrated only in its ultrasound regions lacks in Slicer until the
  UMind module sets it from the reply's `geometry`; for the stock extension, which cannot be told, the image's
  geometry as ITK reads it),
  as the client's `result_extension` asks or the input's family (`imageio.label_map_suffix`: PNG only for
  PNG/JPEG), with `label_names` {name: value} in the JSON, as the stock Slicer extension reads it;
- "markups": a Slicer .mrk.json (ROIs for boxes, fiducials for points, lines for measurements, a closed curve for a
  head circumference's ellipse; each length also in the reply's `measurements`), which the
  stock extension loads as markups (nothing found: one empty point list, which Slicer loads); optionally a
  label map instead (`label_map: true`), with the markups in the JSON;

Requests from the stock MONAILabel extension are adapted by lib/stock_extension.py (targets onto its
segments, its `label` as the one segment of an interactive reply, `slice` given as a view offset in mm).
- "answer": JSON only (text, class, grounded objects).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

from monailabel.interfaces.tasks.infer_v2 import InferTask, InferType

from umind_core.answers.findings import answer_finding
from umind_core.frames import parse_frames
from umind_core.imageio import Geometry, Study, frame_spacing, label_map_suffix, line_length, read_study
from umind_core.answers.landmarks import ellipse_perimeter
from umind_core.outputs import TooManyLabels, all_unparsable, frame_markups, geometry_info, write_viewer_files
from umind_core.inference.predictor import Job
from umind_core.answers.results import Result

from ..exam import exam_prompt, exam_reply, is_exam_request, read_exam
from ..wall.caps import check_frame_count, check_image_budget, check_request_counts
from ..wall.errors import BadRequest, to_http
from ..wall.finite_json import finite_json
from ..params import (
    current_slice,
    parse_bool,
    parse_prompt,
    parse_readout,
    parse_targets,
    visual_prompt,
    with_defaults,
)
from ..reply_files import reply_path
from ..runtime import PREDICT_LOCK, Runtime
from ..stock_extension import frame_of_view, is_stock_extension, map_targets
from ..wire import prompt_key

__all__ = ["UMindInferTask"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Ask:
    """What one request asks the model and how its answers become the reply: `jobs` go to the scheduler in one
    submission, `reply(answers)` writes (path, body), `tasks` are the Predictor tasks it ran (the reply says)."""

    jobs: list[Job]
    tasks: list[str]
    reply: Callable[[list[Result]], tuple[str | None, dict]]


class UMindInferTask(InferTask):
    #: MONAI Label task type (the stock Slicer extension lists SEGMENTATION/DETECTION and DEEPGROW)
    infer_type: ClassVar[str] = InferType.SEGMENTATION
    #: Predictor tasks this MONAI Label task may run; the first is the default, "all" runs each of them
    umind_tasks: ClassVar[tuple[str, ...]] = ("segment",)
    #: "label_map", "markups" or "answer"
    output: ClassVar[str] = "label_map"
    #: clicks/ROI from the Slicer extension become the visual prompt
    interactive: ClassVar[bool] = False
    #: a comma-separated prompt names several targets, one label each
    multi_target: ClassVar[bool] = False
    description_text: ClassVar[str] = ""
    #: Predictor tasks this MONAI Label task may run on an examination (`lib/exam.py`); empty = single images only
    exam_tasks: ClassVar[tuple[str, ...]] = ()
    #: user options the Slicer extension renders (a list is a choice, its first item the default)
    default_config: ClassVar[dict[str, Any]] = {}

    def __init__(self, runtime: Runtime, labels: list[str] | None = None):
        labels = list(labels if labels is not None else runtime.conf.labels)
        label_dict = {name: i + 1 for i, name in enumerate(labels)} if self.output == "label_map" else labels
        super().__init__(type=self.infer_type, labels=label_dict, dimension=2, description=self.description_text,
                         config=dict(self.default_config))
        self.runtime = runtime
        self.default_labels = labels

    def is_valid(self) -> bool:
        return True

    def info(self) -> dict:
        out = super().info()
        out["umind"] = {"tasks": list(self.umind_tasks), "output": self.output,
                        "version": self.runtime.served_version()}
        return out

    # ------------------------------------------------------------------ request
    def __call__(self, request: dict):
        """One path for every request: what it asks (`_Ask`: an image's jobs, or an examination's one job), the
        jobs through the scheduler (batched with concurrent requests, on the model thread), the reply written."""
        t0 = time.perf_counter()
        try:
            opts = with_defaults(self._config, request)
            check_request_counts(opts, self.runtime.conf)  # caps first: nothing is read or allocated yet
            ask = self._exam_ask(opts) if is_exam_request(opts) else self._image_ask(opts)
            t1 = time.perf_counter()
            with PREDICT_LOCK:
                scheduler, version = self.runtime.scheduler()
            t2 = time.perf_counter()
            answers = scheduler.predict(ask.jobs)  # every job of the request in one submission: one batch
            t3 = time.perf_counter()
            path, body = ask.reply(answers)
        except Exception as exc:  # every failure leaves as an HTTP error naming the problem
            raise _named(to_http(exc, f"{self._name()} on {{image}}"), request.get("image")) from exc
        t4 = time.perf_counter()
        body["umind"] = {"version": version, "tasks": ask.tasks, **body.get("umind", {})}
        body["latencies"] = _latencies(t0, t1, t2, t3, t4)
        return path, finite_json(body)

    def _name(self) -> str:
        return type(self).__name__

    def _exam_ask(self, opts: dict) -> _Ask:
        """An examination (`lib/exam.py`): the views read together as one job, one answer with each object on its
        view."""
        if not self.exam_tasks:
            raise BadRequest(f"{self._name()} reads one image; an examination (images, exam) is read by the "
                             "interpret task")
        task = opts.get("task", self.exam_tasks[0])
        if task not in self.exam_tasks:
            raise BadRequest(f"an examination's task must be one of {', '.join(self.exam_tasks)}, got {task!r}")
        prompt = exam_prompt(task, opts)
        readout = parse_readout(opts.get("readout"))
        exam = read_exam(opts, self._read(opts), self.runtime.conf)

        def reply(answers: list[Result]) -> tuple[None, dict]:
            body = exam_reply(answers[0], exam, task, prompt, calibrate=not is_stock_extension(opts))
            body["geometry"] = body["exam"]["views"][0]["geometry"]
            return None, body

        return _Ask([Job(tuple(exam.frames), task, prompt, readout=readout)], [task], reply)

    def _read(self, opts: dict) -> Study:
        image = opts.get("image")
        if not isinstance(image, str) or not image:
            raise BadRequest(f"image must be a datastore id or an uploaded file, got {image!r}")
        axis = opts.get("axis")
        if axis is not None and (isinstance(axis, bool) or not isinstance(axis, int)):
            raise BadRequest(f"axis must be 0, 1 or 2, got {axis!r}")
        check_image_budget(image, self.runtime.conf)
        return read_study(image, axis=axis)

    def _targets(self, opts: dict) -> list[str | None]:
        stock = is_stock_extension(opts)
        if self.multi_target:
            targets = parse_targets("prompt", opts.get("prompt"), limit=self.runtime.conf.max_targets)
        else:  # the extension's interactive request names the segment it edits in `label`: the target
            prompt = parse_prompt("prompt", opts.get("prompt"))
            targets = [prompt or (parse_prompt("label", opts.get("label")) if stock and self.interactive else None)]
        if stock and (self.output == "label_map" or parse_bool("label_map", opts.get("label_map", False))):
            return map_targets(targets, self.default_labels, self._name())
        return targets

    def _tasks(self, opts: dict) -> list[str]:
        task = opts.get("task", self.umind_tasks[0])
        if task in ("all", "both"):
            return list(self.umind_tasks)
        if task not in self.umind_tasks:
            raise BadRequest(f"task must be one of {', '.join(self.umind_tasks)} (or 'all'), got {task!r}")
        return [task]

    def _image_ask(self, opts: dict) -> _Ask:
        """One image: a job per task, target and selected frame; the reply as `output` says (`_write`)."""
        targets = self._targets(opts)  # a bad prompt is refused before the image is read
        study = self._read(opts)
        geometry = study.geometry
        box = points = labels = None
        if self.interactive:
            frame, vp = visual_prompt(frame_of_view(opts, study.viewer_geometry), geometry)
            if vp.empty:
                raise BadRequest("interactive segmentation needs foreground/background clicks or an roi")
            box, points, labels = vp.box, vp.points, vp.labels
            frames = [frame]
        else:
            # one request is about one image: a range past its last frame is refused, not clipped as the CLI does
            frames = parse_frames(opts.get("frames")).select(geometry, current=current_slice(opts), past_end="refuse")
        check_frame_count(len(frames), self.runtime.conf)
        readout = parse_readout(opts.get("readout"))
        selected = [study.frames[i] for i in frames]
        asks = []
        for task in self._tasks(opts):
            key = prompt_key(task)
            for target in (targets if key == "prompt" else [parse_prompt(key, opts.get(key), required=True)]):
                asks.append((task, target))

        def reply(answers: list[Result]) -> tuple[str | None, dict]:
            """(task, target, one Result per selected frame) for every task and target, written."""
            it, runs = iter(answers), []
            for task, target in asks:
                results = [next(it) for _ in selected]
                for r in results:
                    r.attach_geometry(geometry)
                runs.append((task, target, results))
            return self._write(study, opts, runs)

        jobs = [Job(frame, task, target, box, points, labels, readout) for task, target in asks for frame in selected]
        return _Ask(jobs, sorted({task for task, _ in asks}), reply)

    # ------------------------------------------------------------------ outputs
    def _write(self, study: Study, opts: dict, runs) -> tuple[str | None, dict]:
        # the stock extension loads the image itself (ITK: no ultrasound regions) and cannot be told a spacing
        geometry = study.output_geometry(calibrate=not is_stock_extension(opts))
        if self.output == "answer":
            return None, dict(self._answer(runs), geometry=geometry_info(study, geometry))
        body: dict[str, Any] = {"geometry": geometry_info(study, geometry), "umind": {"results": _dicts(runs)}}
        if all_unparsable([r for _, _, rs in runs for r in rs]):
            return None, body  # no answer was readable: no file, the results' warnings say why
        if self.output == "markups":
            markups, measurements = self._markups(study, runs, geometry)
            body.update(markups=markups, measurements=measurements)
            if parse_bool("label_map", opts.get("label_map", False)):
                path, names = self._label_map(study, opts, runs, geometry, fill_boxes=True)
                body["label_names"] = names
                return path, body
            path = reply_path(".mrk.json")
            asked = [t for _, t, _ in runs if t] or list(self.default_labels)
            write_viewer_files([r for _, _, rs in runs for r in rs], study, geometry, markups_to=path,
                               markups=markups, targets=asked)
            return path, body
        path, names = self._label_map(study, opts, runs, geometry, fill_boxes=False)
        body["label_names"] = names
        return path, body

    def _label_map(self, study: Study, opts: dict, runs, geometry: Geometry,
                   fill_boxes: bool) -> tuple[str, dict[str, int]]:
        """One label value per requested target (the Slicer segment it updates), via `outputs.write_viewer_files`."""
        results = [r for _, _, rs in runs for r in rs]
        targets = [t for _, t, rs in runs for _ in rs]
        path = reply_path(label_map_suffix(study.geometry, opts.get("result_extension")))
        try:
            stack = write_viewer_files(results, study, geometry, labels_to=path, names=targets,
                                       fallback=self.default_labels[0], fill_boxes=fill_boxes, max_labels=255).stack
        except Exception as exc:
            Path(path).unlink(missing_ok=True)
            if isinstance(exc, TooManyLabels):
                raise BadRequest(str(exc)) from exc
            raise
        names = dict(stack.values)
        if not names:  # nothing found: still name the (first) target so that its Slicer segment is cleared
            names[next((t for _, t, _ in runs if t), None) or self.default_labels[0]] = 1
        return path, names

    def _markups(self, study: Study, runs, geometry: Geometry) -> tuple[list[dict], list[dict]]:
        """Markups in the files' ``geometry`` (`outputs.frame_markups`: a line as a Line, a head circumference's
        ellipse as a ClosedCurve) and each object's measurement (`_measurement`)."""
        spacing = frame_spacing(study.geometry) if study.geometry.spacing_known else None
        markups, measurements = [], []
        for task, _, results in runs:
            for m in frame_markups(results, geometry):
                if self.output == "markups" and task == "detect" and m["type"] != "ROI":
                    continue
                m["description"] = f"umind {task}"
                markups.append(m)
            measurements += [item for r in results for obj in r.objects
                             if (item := _measurement(obj, task, r.frame_index, spacing)) is not None]
        return markups, measurements

    def _answer(self, runs) -> dict:
        task, target, results = runs[0]
        frames = []
        for r in results:
            cls = answer_finding(r.answer) if task == "diagnose" else None
            frames.append({"frame": r.frame_index, "answer": r.answer, "text": r.text, "class": cls,
                           "objects": [o.to_dict() for o in r.objects], "confidence": r.confidence,
                           "warnings": r.warnings})
        first = frames[0]
        return {"task": task, "prompt": target, "answer": first["answer"], "class": first["class"],
                "objects": first["objects"], "frames": frames}


def _measurement(obj, task: str, frame: int, spacing) -> dict | None:
    """An object's measurement for the reply: a line's length (`imageio.line_length`) or an ellipse's perimeter (the
    head circumference, `landmarks.ellipse_perimeter`) in the calibrated ``spacing``, mm where there is one, else px:
    the length the results, the answer and the markups state. ``shape`` says which ("line" or "ellipse")."""
    if obj.line is not None:
        length, px, shape = line_length(obj.line, spacing), line_length(obj.line, None), "line"
    elif obj.ellipse is not None:
        length, px, shape = ellipse_perimeter(obj.ellipse, spacing), ellipse_perimeter(obj.ellipse, None), "ellipse"
    else:
        return None
    item = {"name": obj.label or task, "frame": frame, "shape": shape, "length": length.value, "unit": length.unit,
            "length_px": px.value}
    if length.mm is not None:
        item["length_mm"] = length.mm
    return item


def _named(err, image: object):
    """The error's message with the image's server path replaced by its file name (ids stay as they are)."""
    shown = os.path.basename(image) if isinstance(image, str) else repr(image)
    if isinstance(err.detail, str):
        detail = err.detail.replace("{image}", repr(shown))
        err.detail = detail.replace(image, shown) if isinstance(image, str) and image else detail
    return err


def _dicts(runs) -> list[dict]:
    """Each Result as JSON for the reply. `source` is cut to the file's name: the study's absolute path on the
    server is none of a client's business (it maps the server's disk for anyone who can ask for an inference)."""
    out = []
    for _, target, results in runs:
        for r in results:
            d = dict(r.to_dict(), target=target)
            if d.get("source"):
                d["source"] = Path(str(d["source"])).name
            out.append(d)
    return out


def _latencies(t0: float, t1: float, t2: float, t3: float, t4: float) -> dict:
    """A reply's latencies from its five clock readings (start, read, model held, answered, written): MONAI Label's
    own keys, one rule for an image's reply and an examination's."""
    return {"pre": round(t1 - t0, 4), "load": round(t2 - t1, 4), "infer": round(t3 - t2, 4),
            "post": round(t4 - t3, 4), "total": round(t4 - t0, 4)}
