"""One user action = one method: the glue between client, request building and MRML builders.

Lives in the Lib (not in UMind.py) so that a whole Run / Submit round trip is testable against a
stub server and a headless scene; the Slicer Logic class only hands in ``slicer.mrmlScene``.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from dataclasses import replace as replace_
from typing import Any, Sequence

import numpy as np

from .client import MultipartFile, UMindClient, UMindServerError
from .labelfiles import decode_label_file, encode_image_nrrd
from .mrml import (IMAGE_ID_ATTRIBUTE, ExamNodes, MRMLBuildError, ResultNodes, build_exam_nodes,
                   build_result_nodes, sequence_frames, segmentation_sequence, set_calibrated_spacing,
                   volume_array, volume_geometry)
from .replies import ExamReply, InferReply, hidden_calibration
from .requests import (ImageTarget, InferRequest, RequestError, RoiBox, RunRequest, build_exam_frames_request,
                       build_exam_request, build_infer_request)
from .requests import current_frame as current_frame_rule  # image_target has a parameter of that name
from .submit import prepare_submission

__all__ = ["ServerInfo", "UMindSession", "markup_positions", "roi_box"]


@dataclass
class ServerInfo:
    """The parts of /info/ the widget shows."""

    name: str = ""
    version: str = ""
    models: dict = field(default_factory=dict)
    trainers: dict = field(default_factory=dict)
    strategies: dict = field(default_factory=dict)
    model_version: str = ""
    raw: dict = field(default_factory=dict, repr=False)

    @classmethod
    def from_dict(cls, d: dict) -> "ServerInfo":
        if not isinstance(d, dict):
            raise ValueError(f"/info/ returned {type(d).__name__}, not a JSON object")
        umind = d.get("umind") if isinstance(d.get("umind"), dict) else {}
        return cls(name=str(d.get("name", "")), version=str(d.get("version", "")),
                   models=dict(d.get("models") or {}), trainers=dict(d.get("trainers") or {}),
                   strategies=dict(d.get("strategies") or {}),
                   model_version=str(umind.get("current_version", "")), raw=d)


def markup_positions(node: Any) -> list[list[float]]:
    """RAS positions of a fiducial node's defined control points (none for a missing node)."""
    if node is None:
        return []
    out = []
    for i in range(node.GetNumberOfControlPoints()):
        if hasattr(node, "GetNthControlPointPositionStatus") and \
                node.GetNthControlPointPositionStatus(i) != 2:  # 2 = PositionDefined
            continue
        out.append([float(v) for v in node.GetNthControlPointPositionVector(i)])
    return out


def roi_box(node: Any) -> RoiBox | None:
    """An ROI markup -> `RoiBox` in RAS (None when absent or not placed yet)."""
    if node is None or node.GetNumberOfControlPoints() == 0:
        return None
    center = [0.0, 0.0, 0.0]
    node.GetCenter(center)
    axes = np.zeros((3, 3))
    for c, getter in enumerate((node.GetXAxis, node.GetYAxis, node.GetZAxis)):
        v = [0.0, 0.0, 0.0]
        getter(v)
        axes[:, c] = v
    return RoiBox(center, list(node.GetSize()), axes)


class UMindSession:
    """A scene and a server client. Stateless apart from the node attributes it sets."""

    def __init__(self, scene: Any, client: UMindClient) -> None:
        self.scene = scene
        self.client = client

    def info(self) -> ServerInfo:
        return ServerInfo.from_dict(self.client.info())

    # images ------------------------------------------------------------------------------

    def image_file(self, volume_node: Any, sequence_node: Any = None) -> MultipartFile:
        """The image as an upload: a volume as it is, a cine sequence stacked to (W, H, N)."""
        if sequence_node is not None:
            frames, geometry = sequence_frames(sequence_node)
            data, name = frames, sequence_node.GetName()
            m = geometry.ijk_to_ras
        else:
            data, name = volume_array(volume_node), volume_node.GetName()
            m = volume_geometry(volume_node).ijk_to_ras
        # the server takes ids as names: no separators, and no leading '.' (reserved there)
        safe = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in name).lstrip(".") or "image"
        return MultipartFile(f"{safe}.nrrd", encode_image_nrrd(data, m))

    def ensure_image_id(self, volume_node: Any, sequence_node: Any = None) -> str:
        """The server id of the image; uploaded once (id kept as a node attribute). The id is the node's name;
        where the server already holds another image under it (409), the name plus a hash of the content, so
        that the same scan uploaded again lands on the same id and a different one never replaces it."""
        holder = sequence_node if sequence_node is not None else volume_node
        image_id = holder.GetAttribute(IMAGE_ID_ATTRIBUTE)
        if image_id:
            return image_id
        upload = self.image_file(volume_node, sequence_node)
        base = upload.filename[:-len(".nrrd")]
        try:
            image_id = self.client.upload_image(upload, base)
        except UMindServerError as exc:
            if exc.status != 409:  # 409: another image holds that name; the server never replaces it silently
                raise
            image_id = self.client.upload_image(upload, f"{base}-{hashlib.sha256(upload.data).hexdigest()[:10]}")
        holder.SetAttribute(IMAGE_ID_ATTRIBUTE, image_id)
        if holder is not volume_node:
            volume_node.SetAttribute(IMAGE_ID_ATTRIBUTE, image_id)
        return image_id

    # inference ---------------------------------------------------------------------------

    def image_target(self, volume_node: Any, browser_node: Any = None,
                     current_frame: int | None = None) -> ImageTarget:
        """The server's image (uploaded once) and the current frame, decided here and only here.

        A cine clip (a browser whose proxy is ``volume_node``) is uploaded whole and its current frame is the
        browser's item. A volume's is ``current_frame``, the slice the viewer shows, or when none is given
        the middle slice: `requests.current_frame`, the module's copy of `umind_core.frames.current_frame`."""
        sequence = browser_node.GetMasterSequenceNode() if browser_node is not None else None
        g = volume_geometry(volume_node)
        image_id = self.ensure_image_id(volume_node, sequence)
        if sequence is not None:
            n = sequence.GetNumberOfDataNodes()
            return ImageTarget(image_id, g.ras_to_ijk, g.dims, n,
                               current_frame_rule("cine", n, int(browser_node.GetSelectedItemNumber())), clip=True)
        n = int(g.dims[2])
        frame = current_frame_rule("volume", n, None if current_frame is None else int(current_frame))
        return ImageTarget(image_id, g.ras_to_ijk, g.dims, n, frame)

    def run(self, volume_node: Any, request: RunRequest, browser_node: Any = None,
            previous: ResultNodes | None = None) -> tuple[InferReply, ResultNodes]:
        """Run ``request`` on the current frame (or all frames) and put the results into the scene.

        ``previous`` (the last run's nodes) lends its segmentation (to replace or add segments, not after an
        all-frames run) and its text node."""
        if volume_node is None:
            raise RequestError("select an image first")
        target = self.image_target(volume_node, browser_node, request.current_frame)
        req = build_infer_request(request, target)
        reply = InferReply.from_parsed(
            self.client.infer(req.model, req.image_id, req.params, output=req.output))
        _calibrate(volume_node, reply.geometry, browser_node)
        labels = None
        if reply.label_bytes:
            labels = decode_label_file(reply.label_bytes, reply.label_filename or "label").array
        seg = previous.segmentation if previous is not None and not request.all_frames else None
        text = previous.text if previous is not None else None
        if target.clip:
            nodes = self._place_on_clip(volume_node, browser_node, reply, labels, request.all_frames,
                                        target.frame, seg, request.replace, text)
        else:
            nodes = build_result_nodes(self.scene, volume_node, reply, labels, seg, request.replace, text)
        nodes.frame = None if request.all_frames else target.frame
        return reply, nodes

    def _place_on_clip(self, volume_node: Any, browser_node: Any, reply: InferReply,
                       labels: np.ndarray | None, all_frames: bool, current_frame: int,
                       segmentation_node: Any, replace: bool, text_node: Any) -> ResultNodes:
        """Cine: all frames -> a segmentation sequence; one frame -> nodes on the proxy."""
        if all_frames and labels is not None:
            if labels.shape[0] != browser_node.GetMasterSequenceNode().GetNumberOfDataNodes():
                raise MRMLBuildError(f"the server returned {labels.shape[0]} label frames for "
                                     f"a clip of {browser_node.GetNumberOfItems()}")
            plain = InferReply(answer=reply.answer, markups=None,
                               result=reply.results[current_frame]
                               if current_frame < len(reply.results) else reply.result)
            nodes = build_result_nodes(self.scene, volume_node, plain, None, None, replace,
                                       text_node)
            nodes.segmentation_sequence = segmentation_sequence(self.scene, browser_node, labels,
                                                                reply.label_names)
            return nodes
        if labels is not None and labels.shape[0] > 1:
            labels = labels[current_frame]
        result = _frame_result(reply, current_frame)
        one = InferReply(label_names=reply.label_names, answer=reply.answer,
                         markups=reply.markups,  # the proxy volume holds just this frame: k = 0
                         result=None if result is None else replace_(result, frame_index=0))
        return build_result_nodes(self.scene, volume_node, one, labels, segmentation_node,
                                  replace, text_node)

    # examinations ------------------------------------------------------------------------

    def run_exam(self, volume_nodes: Sequence[Any], request: RunRequest, browser_nodes: Sequence[Any] = (),
                 previous: ExamNodes | None = None) -> tuple[ExamReply, ExamNodes]:
        """Read several images as one examination and put the answer into the scene: the one answer in a text node
        ("UMind exam <task>", ``previous``'s when given), each view's objects on that view's volume.

        The first volume is the request's image. Each is uploaded once as Run uploads it (`image_target`);
        ``browser_nodes`` (beside the volumes, None for a plain volume) make a clip a view, its browser's frame the
        first view's current frame. The server reads the other views at its default frame and names each."""
        volumes = list(volume_nodes)
        if not volumes or any(v is None for v in volumes):
            raise RequestError("select the examination's images first")
        browsers = (list(browser_nodes) + [None] * len(volumes))[:len(volumes)]
        targets = [self.image_target(v, b, request.current_frame if k == 0 else None)
                   for k, (v, b) in enumerate(zip(volumes, browsers))]
        req = build_exam_request(request, targets)
        reply = self._ask_exam(req, [t.image_id for t in targets])
        names = [f"view {k + 1}" for k in range(len(volumes))]
        return reply, self._place_exam(reply, volumes, browsers, names, request.task, previous)

    def run_exam_frames(self, volume_node: Any, request: RunRequest, frames: Sequence[int],
                        browser_node: Any = None, previous: ExamNodes | None = None) -> tuple[ExamReply, ExamNodes]:
        """Read the chosen frames of one clip (a browser's sequence, uploaded whole as Run uploads it) or of a
        multi-frame volume as the views of one examination, e.g. the frames of a sweep. Each view's objects land on
        its frame: a volume's slice, or a clip's proxy (which holds one frame) named by the frame."""
        if volume_node is None:
            raise RequestError("select an image first")
        target = self.image_target(volume_node, browser_node, request.current_frame)
        req = build_exam_frames_request(request, target, frames)
        reply = self._ask_exam(req, [target.image_id] * len(req.params["frames"]), req.params["frames"])
        n = len(reply.views)
        return reply, self._place_exam(reply, [volume_node] * n, [browser_node] * n,
                                       [f"frame {v.frame}" for v in reply.views], request.task, previous)

    def _ask_exam(self, req: InferRequest, images: list[str], frames: Sequence[int] | None = None) -> ExamReply:
        """Send the exam and read its reply; a reply about other views than those asked places nothing, since each
        view's objects would land on the wrong volume."""
        reply = ExamReply.from_parsed(self.client.infer(req.model, req.image_id, req.params, output=req.output))
        answered, read = [v.image for v in reply.views], [v.frame for v in reply.views]
        if answered != images or (frames is not None and read != list(frames)):
            asked = images if frames is None else f"{images} (frames {list(frames)})"
            raise MRMLBuildError(f"the server answered about the views {answered} (frames {read}), not those "
                                 f"asked: {asked}; nothing was placed")
        return reply

    def _place_exam(self, reply: ExamReply, volumes: list[Any], browsers: list[Any], names: list[str],
                    task: str, previous: ExamNodes | None) -> ExamNodes:
        """Each view's calibration onto its volume (as `run` does for one image), then the nodes."""
        views = [view.infer_reply(reply.task) for view in reply.views]
        labels = []
        for one, volume, browser in zip(views, volumes, browsers):
            _calibrate(volume, one.geometry, browser)
            labels.append(_view_labels(one, volume))
        return build_exam_nodes(self.scene, volumes, views, reply.answer, names,
                                previous.text if previous is not None else None, f"UMind exam {task}", labels)

    # labels and learning -------------------------------------------------------------------

    def submit(self, volume_node: Any, segmentation_node: Any = None,
               markup_nodes: Sequence[Any] = (), answer: str = "",
               sequence_node: Any = None, finding: str = "", report: str = "",
               landmark_target: str = "") -> dict:
        image_id = self.ensure_image_id(volume_node, sequence_node)
        sub = prepare_submission(self.scene, volume_node, image_id, segmentation_node,
                                 markup_nodes, answer, finding, report, landmark_target)
        return self.client.save_label(sub.image_id, sub.file, sub.info)

    def next_sample(self, strategy: str) -> tuple[str, bytes, str]:
        """(image id, file bytes, file name) of the sample the strategy picks."""
        sample = self.client.next_sample(strategy)
        data, name = self.client.download_image(str(sample["id"]))
        return str(sample["id"]), data, name


def _calibrate(volume_node: Any, geometry: dict, browser_node: Any = None) -> None:
    """Where the image file hides its calibration from Slicer (`replies.hidden_calibration` of the reply's
    `geometry`: a DICOM calibrated only in its ultrasound regions), give the volume, and a clip's every frame, the
    spacing the server measured with, so that Slicer's lengths are the server's. Run does it for its image, an
    examination for each view with that view's geometry."""
    spacing = hidden_calibration(geometry)
    if spacing is not None:
        sequence = browser_node.GetMasterSequenceNode() if browser_node is not None else None
        set_calibrated_spacing(volume_node, spacing, sequence)


def _frame_result(reply: InferReply, frame: int):
    for r in reply.results:
        if r.frame_index == frame:
            return r
    return reply.result


def _view_labels(reply: InferReply, volume_node: Any) -> np.ndarray | None:
    """An exam view's label map (a segment's), as its volume holds it: the view's own frame where the map covers a
    clip and the volume is the clip's one-frame proxy."""
    if not reply.label_bytes:
        return None
    labels = decode_label_file(reply.label_bytes, reply.label_filename or "label").array
    frames = volume_geometry(volume_node).dims[2]
    if labels.shape[0] != frames and frames == 1:
        frame = reply.result.frame_index if reply.result is not None else 0
        if not 0 <= frame < labels.shape[0]:
            raise MRMLBuildError(f"the view's label map has {labels.shape[0]} frames, not frame {frame}")
        labels = labels[frame:frame + 1]
    return labels
