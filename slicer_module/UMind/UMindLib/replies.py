"""Server replies -> plain objects: multipart or JSON-only bodies, then the UMind params.

MONAI Label answers /infer with multipart/form-data (a ``params`` JSON part and a label-map file
part), with the file alone (output=image) or with JSON alone (output=json). The stock Slicer
client chokes on the JSON-only form; here all three come out as one `ParsedReply`, and
`InferReply.from_parsed` reads the UMind params (results of `umind_core.answers.results.Result.to_dict`)
without importing umind_core, which is not installed inside Slicer. An examination's reply (several views, one
answer) is `ExamReply.from_parsed`; each of its views reads as a single-image `InferReply` (`ExamView.infer_reply`),
so one set of builders places single-image and examination results alike.
"""

from __future__ import annotations

import base64
import binascii
import email.message
import email.parser
import email.policy
import json
import re
from dataclasses import dataclass, field
from typing import Any

__all__ = ["ReplyError", "ParsedReply", "ServerObject", "ServerResult", "InferReply", "ExamView", "ExamReply",
           "run_summary", "parse_reply", "filename_from_disposition", "train_progress", "hidden_calibration"]


class ReplyError(ValueError):
    """A reply body or its params do not have the expected shape; the message says where."""


@dataclass
class ParsedReply:
    """What came back: the params dict (may be empty) and the label-map file, if any."""

    params: dict
    label_bytes: bytes | None = field(default=None, repr=False)
    label_filename: str | None = None


def _basename(name: str) -> str:
    """A file name a reply gives, without any folder (a server names files; it does not choose where they go)."""
    return name.replace("\\", "/").rsplit("/", 1)[-1]


def filename_from_disposition(disposition: str) -> str | None:
    if not disposition:
        return None
    msg = email.message.EmailMessage(policy=email.policy.HTTP)
    msg["Content-Disposition"] = disposition
    name = msg.get_filename()
    return _basename(name) if name else None


def parse_reply(body: bytes, content_type: str, content_disposition: str = "") -> ParsedReply:
    """Decode one /infer reply body according to its Content-Type."""
    ctype = (content_type or "").split(";")[0].strip().lower()
    if ctype.startswith("multipart/"):
        return _parse_multipart(body, content_type)
    if ctype in ("application/json", "text/json") or (not ctype and body[:1] in (b"{", b"[")):
        return ParsedReply(_json_params(body, "reply"))
    if not body:
        return ParsedReply({})
    return ParsedReply({}, body, filename_from_disposition(content_disposition) or "label")


def _json_params(data: bytes, where: str) -> dict:
    try:
        d = json.loads(data.decode("utf-8") or "{}")
    except (UnicodeDecodeError, ValueError) as exc:
        raise ReplyError(f"{where}: invalid JSON: {exc}") from exc
    if d is None:
        return {}
    if not isinstance(d, dict):
        raise ReplyError(f"{where}: expected a JSON object, got {type(d).__name__}")
    return d


def _parse_multipart(body: bytes, content_type: str) -> ParsedReply:
    if "boundary=" not in content_type:
        raise ReplyError("multipart reply without a boundary in its Content-Type")
    head = f"Content-Type: {content_type}\r\nMIME-Version: 1.0\r\n\r\n".encode("latin-1")
    msg = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(head + body)
    if not msg.is_multipart():
        raise ReplyError("multipart reply could not be split into parts")
    params: dict = {}
    label, label_name = None, None
    for part in msg.iter_parts():
        name = part.get_param("name", header="content-disposition")
        filename = part.get_filename()
        payload = part.get_payload(decode=True) or b""
        if filename:
            if label is not None:
                raise ReplyError(f"multipart reply has two files: {label_name!r}, {filename!r}")
            label, label_name = payload, _basename(filename)
        elif name == "params":
            params = _json_params(payload, "params part")
    return ParsedReply(params, label, label_name)


def _opt_floats(v: Any, n: int, where: str) -> tuple[float, ...] | None:
    if v is None:
        return None
    try:
        out = tuple(float(c) for c in v)
    except (TypeError, ValueError) as exc:
        raise ReplyError(f"{where}: expected {n} numbers, got {v!r}") from exc
    if len(out) != n:
        raise ReplyError(f"{where}: expected {n} numbers, got {len(out)}")
    return out


@dataclass
class ServerObject:
    """One grounded object, in pixel coordinates of its frame (x right, y down)."""

    label: str | None = None
    box: tuple[float, float, float, float] | None = None
    points: list[tuple[float, float]] = field(default_factory=list)
    line: tuple[float, float, float, float] | None = None
    score: float | None = None
    mask: dict | None = None
    physical: dict = field(default_factory=dict)
    #: an examination's object: the 0-based view it is in (its coordinates are that view's pixels); None otherwise
    view: int | None = None
    #: an ellipse (a head circumference): its long then its short axis, x1, y1, x2, y2 each, in pixels
    ellipse: tuple[float, ...] | None = None

    @classmethod
    def from_dict(cls, d: Any, where: str) -> "ServerObject":
        if not isinstance(d, dict):
            raise ReplyError(f"{where}: expected an object dict, got {type(d).__name__}")
        pts = d.get("points") or []
        if not isinstance(pts, list):
            raise ReplyError(f"{where}.points: expected a list, got {pts!r}")
        score, view = d.get("score"), d.get("view")
        if view is not None and (isinstance(view, bool) or not isinstance(view, int) or view < 0):
            raise ReplyError(f"{where}.view: expected a view number (0 = the first), got {view!r}")
        return cls(label=d.get("label") or None, view=view,
                   box=_opt_floats(d.get("box"), 4, f"{where}.box"),  # type: ignore[arg-type]
                   points=[_opt_floats(p, 2, f"{where}.points[{i}]")  # type: ignore[misc]
                           for i, p in enumerate(pts)],
                   line=_opt_floats(d.get("line"), 4, f"{where}.line"),  # type: ignore[arg-type]
                   ellipse=_opt_floats(d.get("ellipse"), 8, f"{where}.ellipse"),
                   score=None if score is None else float(score),
                   mask=d.get("mask") if isinstance(d.get("mask"), dict) else None,
                   physical=d.get("physical") if isinstance(d.get("physical"), dict) else {})


@dataclass
class ServerResult:
    """One frame's result (the dict form of umind_core's Result)."""

    task: str = ""
    prompt: str = ""
    text: str = ""
    answer: str = ""
    objects: list[ServerObject] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    timings: dict = field(default_factory=dict)
    frame_index: int = 0
    image_size: tuple[int, int] | None = None

    @classmethod
    def from_dict(cls, d: Any, where: str = "result") -> "ServerResult":
        if not isinstance(d, dict):
            raise ReplyError(f"{where}: expected a dict, got {type(d).__name__}")
        objs = d.get("objects") or []
        if not isinstance(objs, list):
            raise ReplyError(f"{where}.objects: expected a list")
        size = d.get("image_size")
        try:
            frame = int(d.get("frame_index") or 0)
        except (TypeError, ValueError) as exc:
            raise ReplyError(f"{where}.frame_index: not an integer: "
                             f"{d.get('frame_index')!r}") from exc
        return cls(task=str(d.get("task") or ""), prompt=str(d.get("prompt") or ""),
                   text=str(d.get("text") or ""), answer=str(d.get("answer") or ""),
                   objects=[ServerObject.from_dict(o, f"{where}.objects[{i}]")
                            for i, o in enumerate(objs)],
                   warnings=[str(w) for w in d.get("warnings") or []],
                   timings=dict(d.get("timings") or {}), frame_index=frame,
                   image_size=None if size is None else  # type: ignore[arg-type]
                   tuple(int(v) for v in _opt_floats(size, 2, f"{where}.image_size")))


@dataclass
class InferReply:
    """Everything the widget shows after one /infer call."""

    label_names: dict[str, int] = field(default_factory=dict)
    result: ServerResult | None = None
    results: list[ServerResult] = field(default_factory=list)
    markups: dict | None = None
    answer: str = ""
    version: str = ""
    label_bytes: bytes | None = field(default=None, repr=False)
    label_filename: str | None = None
    params: dict = field(default_factory=dict, repr=False)
    #: which geometry the reply's files and lengths are in (the server's `outputs.geometry_info`); {} if unsaid
    geometry: dict = field(default_factory=dict)

    @property
    def all_results(self) -> list[ServerResult]:
        """Per-frame results when there are several, else the single one."""
        if self.results:
            return self.results
        return [self.result] if self.result is not None else []

    @property
    def warnings(self) -> list[str]:
        return [w for r in self.all_results for w in r.warnings]

    @classmethod
    def from_parsed(cls, parsed: ParsedReply) -> "InferReply":
        """Read the UMind app's reply: `label_names`, per-frame results and the model version under `umind`,
        `markups` as the list of a mrk.json's markups (or the mrk.json file itself), `answer` for text tasks."""
        p = parsed.params or {}
        names = p.get("label_names") or {}
        if not isinstance(names, dict):
            raise ReplyError(f"label_names: expected a dict, got {type(names).__name__}")
        try:
            label_names = {str(k): int(v) for k, v in names.items()}
        except (TypeError, ValueError) as exc:
            raise ReplyError(f"label_names: values must be integers: {names!r}") from exc
        umind = p.get("umind") or {}
        if not isinstance(umind, dict):
            raise ReplyError(f"umind: expected a dict, got {type(umind).__name__}")
        results_raw = umind.get("results") or []
        if not isinstance(results_raw, list):
            raise ReplyError("umind.results: expected a list of per-frame results")
        results = [ServerResult.from_dict(r, f"umind.results[{i}]") for i, r in enumerate(results_raw)]
        label_bytes, label_filename = parsed.label_bytes, parsed.label_filename
        markups = p.get("markups")
        if label_bytes is not None and (label_filename or "").lower().endswith(".json"):
            markups = _json_params(label_bytes, f"markups file {label_filename!r}")  # the .mrk.json itself
            label_bytes = label_filename = None
        if isinstance(markups, list):
            markups = {"markups": markups}
        if markups is not None and not isinstance(markups, dict):
            raise ReplyError(f"markups: expected a Slicer mrk.json dict or its list of markups, got "
                             f"{type(markups).__name__}")
        answer = p.get("answer")
        if not answer:
            answer = results[0].answer if results else ""
        version = umind.get("version")
        geometry = p.get("geometry") or {}
        if not isinstance(geometry, dict):
            raise ReplyError(f"geometry: expected a dict, got {type(geometry).__name__}")
        return cls(label_names=label_names, result=results[0] if results else None, results=results,
                   markups=markups, answer=str(answer or ""), version="" if version is None else str(version),
                   label_bytes=label_bytes, label_filename=label_filename, params=p, geometry=geometry)


@dataclass
class ExamView:
    """One view of an examination's reply: its image (datastore id), the frame that was read, the geometry its
    coordinates are in (a single-image reply's `geometry`, this view's own), its objects (pixels of that frame) and
    the server's markups of them in that geometry."""

    view: int
    image: str
    frame: int = 0
    geometry: dict = field(default_factory=dict)
    objects: list[ServerObject] = field(default_factory=list)
    markups: list[dict] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    #: a segment's label map of this view (the file a single-image segment of it returns), and its names
    label_bytes: bytes | None = field(default=None, repr=False)
    label_filename: str | None = None
    label_names: dict[str, int] = field(default_factory=dict)

    def infer_reply(self, task: str) -> InferReply:
        """This view as a single-image reply on its frame, so that the single-image builders place its objects
        (`mrml.build_result_nodes`) and `hidden_calibration` reads its geometry; the answer stays the exam's."""
        result = ServerResult(task=task, objects=list(self.objects), warnings=list(self.warnings),
                              frame_index=self.frame)
        return InferReply(result=result, results=[result], geometry=dict(self.geometry),
                          markups={"markups": list(self.markups)} if self.markups else None,
                          label_names=dict(self.label_names), label_bytes=self.label_bytes,
                          label_filename=self.label_filename)


@dataclass
class ExamReply:
    """What an examination's /infer call answered (the app's `lib/exam.py exam_reply`): one answer about all views,
    and per view (`views`, in the order the server read them) the objects in it."""

    task: str = ""
    prompt: str = ""
    answer: str = ""
    text: str = ""
    finding: str | None = None  # the class of a diagnose answer
    confidence: dict = field(default_factory=dict)  # the model's own (token_prob_mean, ...), as a Result's
    warnings: list[str] = field(default_factory=list)
    views: list[ExamView] = field(default_factory=list)
    version: str = ""
    params: dict = field(default_factory=dict, repr=False)

    @property
    def objects(self) -> list[ServerObject]:
        return [o for v in self.views for o in v.objects]

    @classmethod
    def from_parsed(cls, parsed: ParsedReply) -> "ExamReply":
        """Read the reply; every object must name a view the reply lists, or it could land on the wrong image."""
        p = parsed.params or {}
        exam = p.get("exam")
        raw_views = exam.get("views") if isinstance(exam, dict) else None
        if not isinstance(raw_views, list) or not raw_views:
            raise ReplyError("exam.views: expected the examination's views, got "
                             f"{type(raw_views).__name__ if raw_views is not None else 'none'}")
        views = [_exam_view(v, k) for k, v in enumerate(raw_views)]
        objs = p.get("objects") or []
        if not isinstance(objs, list):
            raise ReplyError("objects: expected a list")
        for i, o in enumerate(objs):
            obj = ServerObject.from_dict(o, f"objects[{i}]")
            if obj.view is None or obj.view >= len(views):
                raise ReplyError(f"objects[{i}].view: {obj.view!r} is not one of the {len(views)} views")
            views[obj.view].objects.append(obj)
        umind = p.get("umind") if isinstance(p.get("umind"), dict) else {}
        conf = p.get("confidence")
        return cls(task=str(p.get("task") or ""), prompt=str(p.get("prompt") or ""),
                   answer=str(p.get("answer") or ""), text=str(p.get("text") or ""),
                   finding=str(p["class"]) if p.get("class") else None,
                   confidence=dict(conf) if isinstance(conf, dict) else {},
                   warnings=[str(w) for w in p.get("warnings") or []], views=views,
                   version="" if umind.get("version") is None else str(umind["version"]), params=p)


def _exam_view(d: Any, k: int) -> ExamView:
    where = f"exam.views[{k}]"
    if not isinstance(d, dict):
        raise ReplyError(f"{where}: expected a dict, got {type(d).__name__}")
    if d.get("view", k) != k:
        raise ReplyError(f"{where}.view: expected {k}, got {d.get('view')!r}")
    frame, geometry, markups = d.get("frame") or 0, d.get("geometry") or {}, d.get("markups") or []
    if isinstance(frame, bool) or not isinstance(frame, int) or frame < 0:
        raise ReplyError(f"{where}.frame: expected a frame number, got {frame!r}")
    if not isinstance(geometry, dict):
        raise ReplyError(f"{where}.geometry: expected a dict, got {type(geometry).__name__}")
    if not isinstance(markups, list) or not all(isinstance(m, dict) for m in markups):
        raise ReplyError(f"{where}.markups: expected a list of markup dicts")
    view = ExamView(view=k, image=str(d.get("image") or ""), frame=frame, geometry=geometry, markups=markups,
                    warnings=[str(w) for w in d.get("warnings") or []])
    if d.get("label") is not None:
        view.label_bytes, view.label_filename, view.label_names = _exam_label(d["label"], f"{where}.label")
    return view


def _exam_label(d: Any, where: str) -> tuple[bytes, str, dict[str, int]]:
    """A view's inline label map: (file bytes, file name, label names)."""
    if not isinstance(d, dict):
        raise ReplyError(f"{where}: expected a dict, got {type(d).__name__}")
    try:
        data = base64.b64decode(str(d.get("data") or ""), validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ReplyError(f"{where}.data: not base64 ({exc})") from None
    if not data:
        raise ReplyError(f"{where}.data: empty")
    names = d.get("label_names") or {}
    try:
        names = {str(k): int(v) for k, v in names.items()}
    except (AttributeError, TypeError, ValueError):
        raise ReplyError(f"{where}.label_names: expected names -> integer values, got {names!r}") from None
    return data, _basename(str(d.get("file") or "label")), names


def hidden_calibration(geometry: dict) -> tuple[float, float] | None:
    """The (column, row) spacing in mm a volume must be given for the reply's lengths to be Slicer's, or None.

    That is the case when the server computed with a calibration the image file hides from Slicer (a DICOM
    whose spacing is only in its ultrasound regions loads at 1 mm per pixel) and wrote its files in it."""
    if not geometry.get("calibrated") or geometry.get("spacing_source") != "ultrasound_regions":
        return None
    spacing = _opt_floats(geometry.get("frame_spacing"), 2, "geometry.frame_spacing")
    if spacing is None or not all(v > 0 and v == v and v != float("inf") for v in spacing):
        raise ReplyError(f"geometry.frame_spacing: expected two positive numbers, got {spacing!r}")
    return spacing[0], spacing[1]


_PROGRESS = re.compile(r"\b(?:step|epoch)\b\W*(\d+)\s*/\s*(\d+)", re.I)


def train_progress(status: Any) -> float:
    """0..100 from a MONAI Label train status: its ``progress``, else the last "step a/b" (what the UMind
    trainer logs in a server's train job) or "epoch a/b" line of ``details`` (the job's last output lines);
    100 once the job is DONE."""
    if not isinstance(status, dict):
        return 0.0
    if "progress" in status:
        try:
            return max(0.0, min(100.0, float(status["progress"])))
        except (TypeError, ValueError):
            return 0.0
    if status.get("status") == "DONE":
        return 100.0
    for line in reversed(list(status.get("details") or [])):
        m = _PROGRESS.search(str(line))
        if m and int(m.group(2)) > 0:
            return max(0.0, min(100.0, 100.0 * int(m.group(1)) / int(m.group(2))))
    return 0.0


def run_summary(info: Any) -> str:
    """The last training run of a server's /info as text for the panel: version, verdict, time, the reason
    (which task regressed, or the error) and the per-task before/after table of the promotion gate."""
    umind = info.get("umind") if isinstance(info, dict) else None
    runs = [r for r in (umind or {}).get("runs") or [] if isinstance(r, dict) and r.get("version") is not None]
    if not runs:
        return "No training run yet."
    run = runs[-1]
    head = f"Run {run['version']}: {run.get('status', '?')}"
    if isinstance(run.get("seconds"), (int, float)):
        head += f" in {run['seconds']:.0f} s"
    lines = [head]
    for key in ("reason", "error"):
        if run.get(key):
            lines.append(str(run[key]))
    if run.get("gate_table"):
        lines.append(str(run["gate_table"]))
    return "\n".join(lines)

