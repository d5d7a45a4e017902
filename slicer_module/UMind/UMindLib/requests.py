"""What Run asks (`RunRequest`) + where it runs (`ImageTarget`) -> one /infer request, with no Qt in sight.

`RunRequest` is the one object the Run path carries from the widget through the Logic and the session to
here: task, typed prompt, model, clicks and ROI (RAS), all frames or the current one, options, the replace
choice. The session adds the `ImageTarget`: the server's id for the image and the current frame, decided
once there (`workflow.UMindSession.image_target`).

The server reads visual prompts as voxel indices of ITS copy of the image, as the stock MONAI
Label module sends them: ``foreground`` / ``background`` [[i, j, k], ...], ``roi``
[i0, i1, j0, j1, k0, k1]; the frame selection is ``frames`` ("current" | "all") plus
``slice`` = the current frame. Slicer places markups in RAS, so every point passes through the
volume's RAS->IJK matrix here, and a click outside the image is refused instead of clipped.
An examination (several views answered as one: `build_exam_request`, `build_exam_frames_request`) goes to the one
model that reads them, with the same task, prompt key and marker as a single image's request.
(Named ``requests`` after the job, not the PyPI package, which the Lib never imports.)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from .contract import CLIENT_MARKER, EXAM_MODEL, EXAM_TASKS, INTERACTIVE_MODEL, READOUT, READOUTS
from .geometry import GeometryError, as_matrix, box_ras_to_ijk_extent, ijk_index, ras_to_ijk

__all__ = ["RequestError", "TaskPreset", "TASK_PRESETS", "RoiBox", "RunRequest", "ImageTarget",
           "InferRequest", "build_infer_request", "current_frame", "preset_for", "model_for_task", "exam_tasks",
           "build_exam_request", "build_exam_frames_request"]


class RequestError(ValueError):
    """The UI state cannot make a valid request; the message says what to fix."""


@dataclass(frozen=True)
class TaskPreset:
    """A task the prompt box offers: which server model runs it and how the request names it.

    `server_task` is the app's own task name (the model's `task` option) and `prompt_key` the parameter the
    typed text goes to. `hint` is only shown in the empty prompt box: with nothing typed no prompt is sent,
    so the server's configured default target applies and the model reads the wording it was trained on.
    """

    task: str
    model: str
    server_task: str
    hint: str
    output: str  # "all" when a label map or a markups file can come back, "json" for JSON-only replies
    prompt_key: str = "prompt"
    needs_prompt: bool = False
    reads_masks: bool = False  # its boxes, points or lines may be read off the target's mask (`RunRequest.readout`)


#: part of the wire contract: each model and prompt key is held to the app's `wire.TASK_MODELS` and
#: `wire.prompt_key` by tests/test_one_owner.py (the contract's other names are in `contract`)
TASK_PRESETS: dict[str, TaskPreset] = {p.task: p for p in [
    TaskPreset("segment", "umind_segment", "segment", "what to segment, e.g. thyroid nodule, cyst", "all"),
    TaskPreset("detect", "umind_detect", "detect", "what to box, e.g. breast lesion", "all", reads_masks=True),
    TaskPreset("landmarks", "umind_landmarks", "keypoints", "whose landmarks, e.g. kidney", "json", reads_masks=True),
    TaskPreset("measure", "umind_landmarks", "measure", "what to measure, e.g. kidney length", "json",
               reads_masks=True),
    TaskPreset("diagnose", "umind_interpret", "diagnose", "optional context for the diagnosis", "json"),
    TaskPreset("report", "umind_interpret", "report", "optional context for the report", "json"),
    TaskPreset("ask", "umind_interpret", "ask", "type your question", "json", prompt_key="question",
               needs_prompt=True),
]}


def preset_for(task: str) -> TaskPreset:
    """The task's preset; an unknown task is a `RequestError` naming the ones there are."""
    if task not in TASK_PRESETS:
        raise RequestError(f"unknown task {task!r}; choose one of {', '.join(TASK_PRESETS)}")
    return TASK_PRESETS[task]


def model_for_task(task: str, has_visual_prompts: bool, available: Sequence[str] = ()) -> str:
    """The server model for a task: clicks/ROI on a segmentation go to the DEEPGROW model;
    when the server lacks the preferred one, fall back to the segmentation model."""
    model = preset_for(task).model
    if task == "segment" and has_visual_prompts:
        model = INTERACTIVE_MODEL
    if available and model not in available:
        if TASK_PRESETS[task].model in available:  # an interactive segment falls back to the segment model
            return TASK_PRESETS[task].model
        raise RequestError(f"the server offers no model for task {task!r} "
                           f"(has: {', '.join(available)})")
    return model


def current_frame(kind: str, n_frames: int, current: int | None = None) -> int:
    """The current frame: ``current`` (the frame the viewer shows) when known, else the frame Slicer opens the
    image on: the middle slice of a volume, the first frame of a cine clip (and the one frame of a 2D image).

    The module's one copy of `umind_core.frames.current_frame` (the server's rule for a request without
    `slice`), which the Lib cannot import inside Slicer; tests/test_one_owner.py holds the two to the same
    answers. The session (`workflow.UMindSession.image_target`) and the panel (`UMind._currentSlice`) ask it.
    """
    if current is not None:
        return current
    return n_frames // 2 if kind == "volume" else 0


@dataclass
class RoiBox:
    """A Slicer ROI in RAS: centre, full size along its axes, and the axes (unit columns)."""

    center: Sequence[float]
    size: Sequence[float]
    axes: Sequence[Sequence[float]] | None = None  # 3x3, columns = ROI x, y, z in RAS

    def corners(self) -> np.ndarray:
        c = np.asarray(self.center, dtype=np.float64)
        half = np.asarray(self.size, dtype=np.float64) / 2.0
        if c.shape != (3,) or half.shape != (3,) or np.any(half < 0):
            raise RequestError(f"ROI needs a 3D centre and a non-negative size, got "
                               f"{list(self.center)} / {list(self.size)}")
        ax = np.eye(3) if self.axes is None else np.asarray(self.axes, dtype=np.float64)
        signs = np.array([[sx, sy, sz] for sx in (-1, 1) for sy in (-1, 1) for sz in (-1, 1)])
        return c[None, :] + (signs * half[None, :]) @ ax.T


@dataclass
class RunRequest:
    """What the user asks when Run is pressed (all positions in RAS), from the widget to the request.

    ``prompt`` is the typed text: the target of segment/detect/landmarks/measure, context for diagnose and
    report, the question of ask (the task's preset names the param it goes to). ``current_frame`` is the
    slice the viewer shows on a volume; the session decides the frame (a clip's comes from its browser, a
    volume without one gets the middle slice: `current_frame`)."""

    task: str
    prompt: str = ""
    model: str = ""  # empty: chosen from the task (and the clicks) among ``available_models``
    foreground: list[Sequence[float]] = field(default_factory=list)
    background: list[Sequence[float]] = field(default_factory=list)
    roi: RoiBox | None = None
    all_frames: bool = False
    current_frame: int | None = None
    options: dict = field(default_factory=dict)  # extra task config from /info
    available_models: Sequence[str] = ()
    replace: bool = True  # new segments replace those of the previous run's segmentation
    #: where a box, landmark or caliper comes from (`contract.READOUTS`): read off the target's mask, or as the
    #: model writes it
    readout: str = READOUTS[0]

    @property
    def has_visual_prompts(self) -> bool:
        return bool(self.foreground or self.background or self.roi is not None)


@dataclass(frozen=True)
class ImageTarget:
    """The server's copy of the image a run goes to, and its current frame: decided once, by the session.

    ``ras_to_ijk`` and ``dims`` (I, J, K) are the displayed volume's; the server's image has ``n_frames``
    frames and ``frame`` is the current one among them. On a cine clip (``clip``) the displayed volume is the
    browser's proxy, one frame (K = 1), while the server holds the whole clip: clicks and the ROI land on
    ``frame`` there."""

    image_id: str
    ras_to_ijk: Any  # 4x4 (vtkMatrix4x4 or array)
    dims: Sequence[int]
    n_frames: int
    frame: int
    clip: bool = False


@dataclass
class InferRequest:
    model: str
    image_id: str
    params: dict
    output: str = "all"


def build_infer_request(request: RunRequest, target: ImageTarget) -> InferRequest:
    """The /infer request for ``request`` on ``target``; every problem is a `RequestError` for the user."""
    preset = preset_for(request.task)
    prompt = _typed_prompt(request, preset)
    model = request.model or model_for_task(request.task, request.has_visual_prompts,
                                            request.available_models)
    frames = "all" if request.all_frames else "current"
    dims = [int(d) for d in target.dims]
    if len(dims) != 3 or min(dims) < 1:
        raise RequestError(f"the image has invalid dimensions {list(target.dims)}")
    k = int(target.frame)
    if not 0 <= k < (target.n_frames or 1) and frames == "current":
        raise RequestError(f"current frame {k} is outside the clip")
    params: dict[str, Any] = dict(request.options)
    params.update({"task": preset.server_task, "frames": frames, "slice": k, CLIENT_MARKER[0]: CLIENT_MARKER[1]})
    params.update(_readout(request, preset))
    if prompt:
        params[preset.prompt_key] = prompt
    if request.has_visual_prompts:
        params.update(_visual_prompts(request, target, dims))
    return InferRequest(model=model, image_id=target.image_id, params=params,
                        output=preset.output)


def _readout(request: RunRequest, preset: TaskPreset) -> dict[str, str]:
    """The readout param of a task that reads boxes, points or lines off masks (none for the others)."""
    if not preset.reads_masks:
        return {}
    if request.readout not in READOUTS:
        raise RequestError(f"readout must be one of {', '.join(READOUTS)}, got {request.readout!r}")
    return {READOUT: request.readout}


def _typed_prompt(request: RunRequest, preset: TaskPreset) -> str:
    """The typed text, stripped; a task that needs it (ask) refuses to run without it."""
    prompt = (request.prompt or "").strip()
    if preset.needs_prompt and not prompt:
        raise RequestError(f"task {request.task!r} needs a question in the prompt box")
    return prompt


def _visual_prompts(request: RunRequest, target: ImageTarget, dims: list[int]) -> dict[str, Any]:
    """Clicks and ROI in RAS -> voxel indices of the server's image (a clip's k is the current frame)."""
    if target.ras_to_ijk is None:
        raise RequestError("points or ROI were placed but the image geometry is unknown")
    try:
        m = as_matrix(target.ras_to_ijk, "RAS->IJK matrix")
        out: dict[str, Any] = {
            "foreground": [ijk_index(ras_to_ijk(m, p), dims, "positive point") for p in request.foreground],
            "background": [ijk_index(ras_to_ijk(m, p), dims, "negative point") for p in request.background]}
        if request.roi is not None:
            out["roi"] = box_ras_to_ijk_extent(m, request.roi.corners(), dims)
    except GeometryError as exc:
        raise RequestError(str(exc)) from exc
    if target.clip:
        k = int(target.frame)
        out["foreground"] = [[i, j, k] for i, j, _ in out["foreground"]]
        out["background"] = [[i, j, k] for i, j, _ in out["background"]]
        if "roi" in out:
            out["roi"] = out["roi"][:4] + [k, k]
    return out


# examinations ---------------------------------------------------------------------------

def exam_tasks() -> list[str]:
    """The panel's tasks an examination can run (their server task is one of `contract.EXAM_TASKS`)."""
    return [t for t, p in TASK_PRESETS.items() if p.server_task in EXAM_TASKS]


def build_exam_request(request: RunRequest, targets: Sequence[ImageTarget]) -> InferRequest:
    """The /infer request that reads several images as one examination: each view's `ImageTarget`, the first the
    request's own image. `images` lists every view's id, the first again first (the server allows it), so the list
    the server counts and checks is the whole exam; ``slice`` is the first view's current frame (the server reads
    the other views at its default frame and names each view's frame in the reply)."""
    ids = [str(t.image_id) for t in targets]
    if len(ids) < 2:
        raise RequestError("an examination needs at least two images: check more volumes (Run reads one image)")
    params = _exam_params(request)
    params.update({"images": ids, "slice": int(targets[0].frame)})
    return InferRequest(model=EXAM_MODEL, image_id=ids[0], params=params, output="json")


def build_exam_frames_request(request: RunRequest, target: ImageTarget, frames: Sequence[int]) -> InferRequest:
    """The /infer request that reads the chosen ``frames`` of one clip or multi-frame volume as the views of one
    examination (``exam: "frames"``, e.g. the frames of a sweep). Frames outside the image are refused here, as a
    current frame outside the clip is; how many views an exam may have is the server's rule (`max_exam_views`)."""
    if not all(isinstance(f, (int, np.integer)) and not isinstance(f, bool) for f in frames):
        raise RequestError(f"frames must be frame numbers, got {list(frames)!r}")
    idx = sorted({int(f) for f in frames})  # the server reads them in this order, once each
    n = int(target.n_frames or 1)
    outside = [f for f in idx if not 0 <= f < n]
    if outside:
        raise RequestError(f"frame {outside[0]} is outside the image's {n} frame(s)")
    params = _exam_params(request)
    params.update({"exam": "frames", "frames": idx})
    return InferRequest(model=EXAM_MODEL, image_id=str(target.image_id), params=params, output="json")


def _exam_params(request: RunRequest) -> dict[str, Any]:
    """Task, prompt and marker of an examination, checked as a single image's are (`build_infer_request`)."""
    preset = preset_for(request.task)
    if preset.server_task not in EXAM_TASKS:
        raise RequestError(f"an examination runs {', '.join(exam_tasks())}, not {request.task!r}")
    if request.has_visual_prompts:
        raise RequestError("points and an ROI belong to one image; an examination reads its views without them")
    if request.model and request.model != EXAM_MODEL:
        raise RequestError(f"an examination is read by {EXAM_MODEL}, not {request.model}")
    if request.available_models and EXAM_MODEL not in request.available_models:
        raise RequestError(f"the server offers no {EXAM_MODEL}, which reads examinations")
    prompt = _typed_prompt(request, preset)
    params: dict[str, Any] = dict(request.options)
    params.update({"task": preset.server_task, CLIENT_MARKER[0]: CLIENT_MARKER[1]})
    params.update(_readout(request, preset))
    if prompt:
        params[preset.prompt_key] = prompt
    return params
