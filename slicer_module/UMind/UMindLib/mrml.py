"""Server results -> MRML nodes in a given scene (no slicer.app, no slicer.mrmlScene).

Every builder takes the scene as an argument, so the same code runs inside Slicer and under
pytest with the PyPI package slicer-core. Results are placed on the geometry of the volume the
user ran on: pixel (x, y) of frame k is voxel (x, y, k) of that volume (for a single-frame volume
or a cine sequence item, k = 0), so segments overlay the image exactly and a line's length (and a head
circumference's closed curve's) in mm follows from the volume's spacing, as the server computed it.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass, field
from typing import Any, Iterable

import numpy as np
import slicer
import vtk
from vtk.util import numpy_support

from .geometry import as_matrix, ellipse_outline, ijk_to_ras, voxel_spacing
from .replies import InferReply, ServerResult

__all__ = [
    "MRMLBuildError", "VolumeGeometry", "SEGMENT_COLORS", "ensure_node_classes",
    "volume_geometry", "volume_array", "labels_for_volume", "label_map_to_segmentation",
    "segment_array", "add_fiducials", "add_lines", "add_closed_curves", "add_rois", "set_answer_text",
    "markups_dict_to_nodes", "ResultNodes", "build_result_nodes", "frame_slice",
    "sequence_frames", "segmentation_sequence", "IMAGE_ID_ATTRIBUTE", "set_calibrated_spacing",
    "ExamNodes", "build_exam_nodes", "EXAM_VIEW_ATTRIBUTE",
]

IMAGE_ID_ATTRIBUTE = "UMind.ImageId"
LENGTH_ATTRIBUTE = "UMind.ServerLengthMm"
#: on an examination's markups: the 0-based view (of the reply) they belong to
EXAM_VIEW_ATTRIBUTE = "UMind.ExamView"

# Distinct, colour-blind-friendlier hues (Okabe-Ito first, then Tableau), RGB 0..1.
SEGMENT_COLORS: list[tuple[float, float, float]] = [
    (0.902, 0.624, 0.0), (0.337, 0.706, 0.914), (0.0, 0.620, 0.451), (0.941, 0.894, 0.259),
    (0.0, 0.447, 0.698), (0.835, 0.369, 0.0), (0.800, 0.475, 0.655), (0.6, 0.6, 0.6),
    (0.122, 0.467, 0.706), (1.0, 0.498, 0.055), (0.173, 0.627, 0.173), (0.839, 0.153, 0.157),
    (0.580, 0.404, 0.741), (0.549, 0.337, 0.294), (0.890, 0.467, 0.761), (0.737, 0.741, 0.133),
]


class MRMLBuildError(ValueError):
    """A result does not fit the target volume (shape, frame) or a node cannot be made."""


# scene helpers ------------------------------------------------------------------------------

_CLASSES = ("vtkMRMLSequenceBrowserNode", "vtkMRMLMarkupsJsonStorageNode",
            "vtkMRMLMarkupsROIJsonStorageNode", "vtkMRMLSegmentationStorageNode",
            "vtkMRMLTextStorageNode", "vtkMRMLSequenceStorageNode")


def ensure_node_classes(scene: Any) -> None:
    """Register node classes a bare scene lacks (inside Slicer the modules did it already)."""
    for name in _CLASSES:
        probe = scene.CreateNodeByClass(name)
        if probe is None and hasattr(slicer, name):
            scene.RegisterNodeClass(getattr(slicer, name)())
    # Copying segmentations (sequence items) constructs representations through the converter
    # factory, which the Segmentations module fills at Slicer start-up; a bare process has none.
    factory = slicer.vtkSegmentationConverterFactory.GetInstance()
    if not factory.GetConverterRules():
        factory.RegisterConverterRule(slicer.vtkBinaryLabelmapToClosedSurfaceConversionRule())
        factory.RegisterConverterRule(slicer.vtkClosedSurfaceToBinaryLabelmapConversionRule())


def _new(scene: Any, cls: str, name: str) -> Any:
    node = scene.AddNewNodeByClass(cls, name)
    if node is None:
        ensure_node_classes(scene)
        node = scene.AddNewNodeByClass(cls, name)
    if node is None:
        raise MRMLBuildError(f"the scene cannot create a {cls}")
    return node


@dataclass
class VolumeGeometry:
    """Where a volume's voxels lie: IJK->RAS, its inverse, and dimensions (I, J, K)."""

    ijk_to_ras: np.ndarray
    ras_to_ijk: np.ndarray
    dims: tuple[int, int, int]

    @property
    def spacing(self) -> np.ndarray:
        return voxel_spacing(self.ijk_to_ras)

    @property
    def directions(self) -> np.ndarray:
        """Unit i, j, k axes in RAS as columns."""
        m = self.ijk_to_ras[:3, :3]
        return m / np.linalg.norm(m, axis=0)[None, :]

    def vtk_ijk_to_ras(self) -> Any:
        m = vtk.vtkMatrix4x4()
        for r in range(4):
            for c in range(4):
                m.SetElement(r, c, float(self.ijk_to_ras[r, c]))
        return m


def volume_geometry(volume_node: Any) -> VolumeGeometry:
    if volume_node is None or volume_node.GetImageData() is None:
        raise MRMLBuildError("the volume has no image data")
    m = vtk.vtkMatrix4x4()
    volume_node.GetIJKToRASMatrix(m)
    inv = vtk.vtkMatrix4x4()
    volume_node.GetRASToIJKMatrix(inv)
    dims = tuple(int(d) for d in volume_node.GetImageData().GetDimensions())
    return VolumeGeometry(as_matrix(m), as_matrix(inv), dims)  # type: ignore[arg-type]


def set_calibrated_spacing(volume_node: Any, spacing: Iterable[float], sequence_node: Any = None) -> bool:
    """Give a volume (and every frame of its cine sequence) the in-plane (column, row) spacing in mm that its
    file does not tell Slicer; returns whether anything changed.

    Why: Slicer reads a DICOM through ITK, which ignores the ultrasound regions, so such an image loads at
    1 mm per pixel and a line on it measured 129.5 "mm" where the server stated 66.1 mm. With the spacing the
    server computed with (`replies.hidden_calibration` of its reply), Slicer's own line lengths are the stated
    ones. Columns run along I and rows along J; the origin, the axes and the slice spacing (K) stay."""
    col, row = (float(v) for v in spacing)
    if not (np.isfinite([col, row]).all() and col > 0 and row > 0):
        raise MRMLBuildError(f"spacing must be two positive numbers, got {(col, row)}")
    nodes = [volume_node]
    if sequence_node is not None:
        nodes += [sequence_node.GetNthDataNode(i) for i in range(sequence_node.GetNumberOfDataNodes())]
    changed = False
    for node in nodes:
        if node is None or not node.IsA("vtkMRMLVolumeNode"):
            continue
        old = [float(v) for v in node.GetSpacing()]
        if not np.allclose(old[:2], (col, row), rtol=1e-9, atol=0.0):
            node.SetSpacing(col, row, old[2])
            changed = True
    return changed


def volume_array(volume_node: Any) -> np.ndarray:
    """Voxels as (k, j, i) or (k, j, i, components); a copy, safe to keep."""
    img = volume_node.GetImageData() if volume_node is not None else None
    if img is None or img.GetPointData().GetScalars() is None:
        raise MRMLBuildError("the volume has no voxels")
    sc = img.GetPointData().GetScalars()
    shape = tuple(img.GetDimensions())[::-1]
    n = sc.GetNumberOfComponents()
    arr = numpy_support.vtk_to_numpy(sc)
    return arr.reshape(shape + ((n,) if n > 1 else ())).copy()


def frame_slice(geometry: VolumeGeometry, frame_index: int) -> int:
    """Voxel k of a result frame: the frame itself in a multi-frame volume, 0 in a 2D one
    (a cine sequence item holds one frame; the browser, not k, selects it)."""
    if geometry.dims[2] == 1:
        return 0
    if not 0 <= frame_index < geometry.dims[2]:
        raise MRMLBuildError(f"result frame {frame_index} is outside the volume's "
                             f"{geometry.dims[2]} slices")
    return int(frame_index)


def labels_for_volume(labels: np.ndarray, geometry: VolumeGeometry,
                      frame_index: int = 0) -> np.ndarray:
    """A decoded label map -> a (K, J, I) array on the volume: the whole volume, or one frame
    (H x W / 1 x H x W) put at its slice with the other slices empty."""
    a = np.asarray(labels)
    full = geometry.dims[::-1]
    if a.shape == full:
        return a
    frame = a[0] if a.ndim == 3 and a.shape[0] == 1 else a
    if frame.ndim == 2 and frame.shape == full[1:]:
        out = np.zeros(full, dtype=a.dtype)
        out[frame_slice(geometry, frame_index)] = frame
        return out
    raise MRMLBuildError(f"label map of shape {a.shape} fits neither the volume (K, J, I) = "
                         f"{full} nor one of its frames {full[1:]}")


def _oriented_image(mask: np.ndarray, geometry: VolumeGeometry) -> Any:
    img = slicer.vtkOrientedImageData()
    k, j, i = mask.shape
    img.SetDimensions(i, j, k)
    img.GetPointData().SetScalars(numpy_support.numpy_to_vtk(
        np.ascontiguousarray(mask.astype(np.uint8)).ravel(), deep=True,
        array_type=vtk.VTK_UNSIGNED_CHAR))
    img.SetImageToWorldMatrix(geometry.vtk_ijk_to_ras())
    return img


def _unique_name(name: str, taken: set[str]) -> str:
    if name not in taken:
        return name
    n = 2
    while f"{name} {n}" in taken:
        n += 1
    return f"{name} {n}"


def label_map_to_segmentation(scene: Any, volume_node: Any, labels: np.ndarray,
                              label_names: dict[str, int], segmentation_node: Any = None,
                              replace: bool = True, frame_index: int = 0,
                              name: str = "UMind segmentation") -> Any:
    """Label map -> segments of one segmentation node on ``volume_node``'s geometry.

    Segments are named by ``label_names`` (object-ref labels; values without a name become
    "label N") and coloured from `SEGMENT_COLORS`, skipping colours already used in the node.
    ``replace`` clears the node's segments first; otherwise new segments are added beside
    them, with " 2", " 3" appended to repeated names so nothing the user drew is overwritten.
    """
    geometry = volume_geometry(volume_node)
    full = labels_for_volume(labels, geometry, frame_index)
    by_value: dict[int, str] = {}
    for label_name, value in label_names.items():
        if int(value) <= 0:
            continue  # background
        if int(value) in by_value:
            raise MRMLBuildError(f"label value {value} is named twice: {by_value[int(value)]!r}"
                                 f" and {label_name!r}")
        by_value[int(value)] = str(label_name)
    for value in np.unique(full):
        if value > 0 and int(value) not in by_value:
            by_value[int(value)] = f"label {int(value)}"
    if segmentation_node is None:
        segmentation_node = _new(scene, "vtkMRMLSegmentationNode", name)
        segmentation_node.CreateDefaultDisplayNodes()
    seg = segmentation_node.GetSegmentation()
    if replace:
        seg.RemoveAllSegments()
    segmentation_node.SetReferenceImageGeometryParameterFromVolumeNode(volume_node)
    taken = {seg.GetNthSegment(i).GetName() for i in range(seg.GetNumberOfSegments())}
    used = {tuple(round(c, 3) for c in seg.GetNthSegment(i).GetColor())
            for i in range(seg.GetNumberOfSegments())}
    palette = [c for c in SEGMENT_COLORS if tuple(round(v, 3) for v in c) not in used]
    palette += [c for c in SEGMENT_COLORS if c not in palette]
    for n, value in enumerate(sorted(by_value)):
        seg_name = _unique_name(by_value[value], taken)
        taken.add(seg_name)
        color = palette[n % len(palette)]
        sid = segmentation_node.AddSegmentFromBinaryLabelmapRepresentation(
            _oriented_image(full == value, geometry), seg_name, list(color))
        segment = seg.GetSegment(sid)
        segment.SetTag("UMind.LabelValue", str(value))
    if volume_node.GetAttribute(IMAGE_ID_ATTRIBUTE):
        segmentation_node.SetAttribute(IMAGE_ID_ATTRIBUTE, volume_node.GetAttribute(
            IMAGE_ID_ATTRIBUTE))
    return segmentation_node


def segment_array(scene: Any, segmentation_node: Any, segment_id: str,
                  volume_node: Any) -> np.ndarray:
    """One segment as a (K, J, I) 0/1 array on the volume's grid (what slicer.util does,
    without slicer.mrmlScene)."""
    seg = segmentation_node.GetSegmentation()
    if seg.GetSegment(segment_id) is None:
        raise MRMLBuildError(f"segmentation {segmentation_node.GetName()!r} has no segment "
                             f"{segment_id!r}")
    out = scene.AddNewNodeByClass("vtkMRMLLabelMapVolumeNode", "__umind_temp__")
    try:
        ids = vtk.vtkStringArray()
        ids.InsertNextValue(segment_id)
        if not slicer.vtkSlicerSegmentationsModuleLogic.ExportSegmentsToLabelmapNode(
                segmentation_node, ids, out, volume_node):
            raise MRMLBuildError(f"exporting segment {segment_id!r} failed")
        a = volume_array(out)
    finally:
        scene.RemoveNode(out)
    expected = volume_geometry(volume_node).dims[::-1]
    if a.shape != expected:
        raise MRMLBuildError(f"segment {segment_id!r} exported as {a.shape}, expected {expected}")
    return (a > 0).astype(np.uint8)


# markups ------------------------------------------------------------------------------------

def _pixel_ras(geometry: VolumeGeometry, x: float, y: float, k: int) -> list[float]:
    return [float(v) for v in ijk_to_ras(geometry.ijk_to_ras, (x, y, k))]


def _object_name(result: ServerResult, i: int, label: str | None) -> str:
    return label or f"{result.task or 'object'} {i + 1}"


def add_fiducials(scene: Any, volume_node: Any, result: ServerResult,
                  name: str = "UMind points") -> Any | None:
    """All objects' points -> one fiducial node; each point is labelled by its object."""
    geometry = volume_geometry(volume_node)
    k = frame_slice(geometry, result.frame_index)
    pts = [(_object_name(result, i, o.label), p) for i, o in enumerate(result.objects)
           for p in o.points]
    if not pts:
        return None
    node = _new(scene, "vtkMRMLMarkupsFiducialNode", name)
    node.CreateDefaultDisplayNodes()
    for label, (x, y) in pts:
        idx = node.AddControlPoint(vtk.vtkVector3d(*_pixel_ras(geometry, x, y, k)))
        node.SetNthControlPointLabel(idx, label)
    return node


def add_lines(scene: Any, volume_node: Any, result: ServerResult) -> list[Any]:
    """Each object's line -> a line node (length measured by Slicer in mm from the volume's
    spacing, which `set_calibrated_spacing` makes the server's where the file hides it); the
    server's own length_mm is kept as an attribute for comparison."""
    geometry = volume_geometry(volume_node)
    k = frame_slice(geometry, result.frame_index)
    nodes = []
    for i, obj in enumerate(result.objects):
        if obj.line is None:
            continue
        x1, y1, x2, y2 = obj.line
        node = _new(scene, "vtkMRMLMarkupsLineNode", _object_name(result, i, obj.label))
        node.CreateDefaultDisplayNodes()
        node.AddControlPoint(vtk.vtkVector3d(*_pixel_ras(geometry, x1, y1, k)))
        node.AddControlPoint(vtk.vtkVector3d(*_pixel_ras(geometry, x2, y2, k)))
        if "length_mm" in obj.physical:
            node.SetAttribute(LENGTH_ATTRIBUTE, repr(float(obj.physical["length_mm"])))
        nodes.append(node)
    return nodes


def add_closed_curves(scene: Any, volume_node: Any, result: ServerResult) -> list[Any]:
    """Each object's ellipse (a head circumference) -> a closed curve node through `geometry.ellipse_outline`'s
    points, the points of the server's markups file. Its length measurement is switched on, so that Slicer shows
    the perimeter beside the curve in mm from the volume's spacing, as it shows a line's length (a closed curve's
    is off by default); the server's perimeter_mm is kept in the same attribute as a line's length_mm."""
    geometry = volume_geometry(volume_node)
    k = frame_slice(geometry, result.frame_index)
    nodes = []
    for i, obj in enumerate(result.objects):
        if obj.ellipse is None:
            continue
        node = _new(scene, "vtkMRMLMarkupsClosedCurveNode", _object_name(result, i, obj.label))
        node.CreateDefaultDisplayNodes()
        for x, y in ellipse_outline(obj.ellipse):
            node.AddControlPoint(vtk.vtkVector3d(*_pixel_ras(geometry, x, y, k)))
        length = node.GetMeasurement("length")
        if length is not None:
            length.SetEnabled(True)
        if "perimeter_mm" in obj.physical:
            node.SetAttribute(LENGTH_ATTRIBUTE, repr(float(obj.physical["perimeter_mm"])))
        nodes.append(node)
    return nodes


def add_rois(scene: Any, volume_node: Any, result: ServerResult) -> list[Any]:
    """Each object's box -> an ROI node aligned with the volume's axes, one slice thick."""
    geometry = volume_geometry(volume_node)
    k = frame_slice(geometry, result.frame_index)
    sp = geometry.spacing
    axes = geometry.directions
    nodes = []
    for i, obj in enumerate(result.objects):
        if obj.box is None:
            continue
        x1, y1, x2, y2 = obj.box
        node = _new(scene, "vtkMRMLMarkupsROINode", _object_name(result, i, obj.label))
        node.CreateDefaultDisplayNodes()
        m = vtk.vtkMatrix4x4()
        for r in range(3):
            for c in range(3):
                m.SetElement(r, c, float(axes[r, c]))
        node.SetAndObserveObjectToNodeMatrix(m)
        node.SetCenter(_pixel_ras(geometry, (x1 + x2) / 2, (y1 + y2) / 2, k))
        node.SetSize(abs(x2 - x1) * sp[0], abs(y2 - y1) * sp[1], sp[2])
        if obj.score is not None:
            node.SetAttribute("UMind.Score", repr(obj.score))
        nodes.append(node)
    return nodes


def set_answer_text(scene: Any, text: str, node: Any = None,
                    name: str = "UMind answer") -> Any:
    """The model's answer -> a text node (reused when given, so edits stay in one place)."""
    if node is None:
        node = _new(scene, "vtkMRMLTextNode", name)
    node.SetText(text or "")
    return node


_MARKUP_CLASSES = {"Fiducial": "vtkMRMLMarkupsFiducialNode", "Line": "vtkMRMLMarkupsLineNode",
                   "ROI": "vtkMRMLMarkupsROINode", "Curve": "vtkMRMLMarkupsCurveNode",
                   "ClosedCurve": "vtkMRMLMarkupsClosedCurveNode",
                   "Angle": "vtkMRMLMarkupsAngleNode", "Plane": "vtkMRMLMarkupsPlaneNode"}


def markups_dict_to_nodes(scene: Any, markups: dict, name: str = "UMind") -> list[Any]:
    """A Slicer mrk.json dict (LPS or RAS, as it declares) -> markups nodes, read by Slicer's
    own storage nodes so that the coordinate system is honoured exactly as in File > Load."""
    items = markups.get("markups") if isinstance(markups, dict) else None
    if not isinstance(items, list):
        raise MRMLBuildError("markups: expected a mrk.json dict with a 'markups' list")
    ensure_node_classes(scene)
    nodes = []
    with tempfile.TemporaryDirectory(prefix="umind-mrk-") as tmp:
        for i, item in enumerate(items):
            kind = item.get("type") if isinstance(item, dict) else None
            if kind not in _MARKUP_CLASSES:
                raise MRMLBuildError(f"markups[{i}]: unsupported type {kind!r}")
            path = os.path.join(tmp, f"m{i}.mrk.json")
            one = {k: v for k, v in markups.items() if k != "markups"}
            one["markups"] = [item]
            with open(path, "w", encoding="utf-8") as fh:
                json.dump(one, fh)
            node = _new(scene, _MARKUP_CLASSES[kind], item.get("name") or f"{name} {kind}")
            storage = node.CreateDefaultStorageNode()
            storage.SetFileName(path)
            ok = storage.ReadData(node)
            if not ok:
                scene.RemoveNode(node)
                raise MRMLBuildError(f"markups[{i}]: Slicer could not read the {kind}")
            if item.get("name"):
                node.SetName(str(item["name"]))
            node.CreateDefaultDisplayNodes()
            nodes.append(node)
    return nodes


@dataclass
class ResultNodes:
    """Nodes one reply produced; the widget keeps them to replace or submit later.

    ``segmentation`` is always a vtkMRMLSegmentationNode (or None): the segments on the displayed volume, the
    one a later run may replace and Submit sends. An all-frames run on a cine clip gives a segmentation per
    frame instead: ``segmentation_sequence``, a sequence of segmentation nodes kept in step with the clip's
    browser, and ``segmentation`` stays None. ``frame`` is the frame the results belong to (None after an
    all-frames run)."""

    segmentation: Any = None
    segmentation_sequence: Any = None
    frame: int | None = None
    fiducials: list[Any] = field(default_factory=list)
    lines: list[Any] = field(default_factory=list)
    #: closed curves: a head circumference's ellipse
    curves: list[Any] = field(default_factory=list)
    rois: list[Any] = field(default_factory=list)
    markups: list[Any] = field(default_factory=list)
    text: Any = None

    def all_markups(self) -> list[Any]:
        return self.fiducials + self.lines + self.curves + self.rois + self.markups


def build_result_nodes(scene: Any, volume_node: Any, reply: InferReply, labels: np.ndarray | None,
                       segmentation_node: Any = None, replace: bool = True,
                       text_node: Any = None) -> ResultNodes:
    """Everything in a reply -> nodes: label map -> segments, per-frame objects -> markups (or
    the server's markups JSON when no structured result came), answer -> a text node."""
    out = ResultNodes()
    results = reply.all_results
    frame = results[0].frame_index if results else 0
    if labels is not None:
        out.segmentation = label_map_to_segmentation(
            scene, volume_node, labels, reply.label_names, segmentation_node, replace, frame)
    single = volume_geometry(volume_node).dims[2] == 1
    for res in (results[:1] if single and len(results) > 1 else results):
        f = add_fiducials(scene, volume_node, res)
        if f is not None:
            out.fiducials.append(f)
        out.lines += add_lines(scene, volume_node, res)
        out.curves += add_closed_curves(scene, volume_node, res)
        out.rois += add_rois(scene, volume_node, res)
    if not results and reply.markups:
        out.markups = markups_dict_to_nodes(scene, reply.markups)
    if reply.answer:
        out.text = set_answer_text(scene, reply.answer, text_node)
    return out


# examinations -------------------------------------------------------------------------------

@dataclass
class ExamNodes:
    """Nodes one examination's reply produced: the answer's text node and, per view, the nodes on that view's
    volume (``views[k]`` on ``volumes[k]``; several views may share a volume: the frames of one clip)."""

    text: Any = None
    views: list[ResultNodes] = field(default_factory=list)
    volumes: list[Any] = field(default_factory=list)

    def all_markups(self) -> list[Any]:
        return [n for v in self.views for n in v.all_markups()]


def build_exam_nodes(scene: Any, volume_nodes: list[Any], view_replies: list[InferReply], answer: str,
                     view_names: list[str], text_node: Any = None, name: str = "UMind exam",
                     view_labels: list[np.ndarray | None] | None = None) -> ExamNodes:
    """An examination's reply -> nodes: each view's reply (`replies.ExamView.infer_reply`) onto that view's volume
    by `build_result_nodes`, so that a view is placed exactly as the same image run alone would be, its markups
    named after the view (two views' "lesion" stay apart); the one answer -> one text node called ``name``.

    ``view_labels[k]`` (a segment's label map of view k, decoded) becomes a segmentation on view k's volume, as a single
    image's label map does. The caller gives each volume its view's calibration first (`workflow.UMindSession`), as
    for a single image."""
    view_labels = list(view_labels) if view_labels is not None else [None] * len(view_replies)
    if not len(volume_nodes) == len(view_replies) == len(view_names) == len(view_labels):
        raise MRMLBuildError(f"{len(view_replies)} view replies for {len(volume_nodes)} volumes and "
                             f"{len(view_names)} names")
    out = ExamNodes(volumes=list(volume_nodes))
    for k, (volume, reply, view_name) in enumerate(zip(volume_nodes, view_replies, view_names)):
        if volume is None:
            raise MRMLBuildError(f"view {k + 1} has no volume to place its results on")
        nodes = build_result_nodes(scene, volume, reply, view_labels[k])
        for node in nodes.all_markups():
            node.SetName(f"{node.GetName()} ({view_name})")
            node.SetAttribute(EXAM_VIEW_ATTRIBUTE, str(k))
        if nodes.segmentation is not None:
            nodes.segmentation.SetName(f"{nodes.segmentation.GetName()} ({view_name})")
            nodes.segmentation.SetAttribute(EXAM_VIEW_ATTRIBUTE, str(k))
        out.views.append(nodes)
    if answer:
        out.text = set_answer_text(scene, answer, text_node, name)
    return out


# cine (sequences) ---------------------------------------------------------------------------

def sequence_frames(sequence_node: Any) -> tuple[np.ndarray, VolumeGeometry]:
    """A cine clip held as a sequence of single-frame volumes -> (N, H, W[, C]) frames and the
    geometry of the first item (all items must share the frame size)."""
    n = sequence_node.GetNumberOfDataNodes() if sequence_node is not None else 0
    if n == 0:
        raise MRMLBuildError("the sequence holds no frames")
    frames, geometry = [], None
    for i in range(n):
        vol = sequence_node.GetNthDataNode(i)
        if vol is None or not vol.IsA("vtkMRMLVolumeNode"):
            raise MRMLBuildError(f"sequence item {i} is not a volume")
        g = volume_geometry(vol)
        if g.dims[2] != 1:
            raise MRMLBuildError(f"sequence item {i} has {g.dims[2]} slices; a cine frame "
                                 "has one")
        if geometry is not None and g.dims != geometry.dims:
            raise MRMLBuildError(f"sequence item {i} is {g.dims[:2]}, item 0 is "
                                 f"{geometry.dims[:2]}")
        geometry = geometry or g
        frames.append(volume_array(vol)[0])
    return np.stack(frames), geometry  # type: ignore[return-value]


def segmentation_sequence(scene: Any, browser_node: Any, labels: np.ndarray,
                          label_names: dict[str, int], frames: Iterable[int] | None = None,
                          name: str = "UMind segmentation") -> Any:
    """Per-frame label maps of a cine clip -> a sequence of segmentation nodes, synchronised
    with the clip's browser so that each frame shows its own segments.

    ``labels`` is (F, H, W) for the frames listed in ``frames`` (default: all, in order)."""
    ensure_node_classes(scene)
    master = browser_node.GetMasterSequenceNode() if browser_node is not None else None
    if master is None:
        raise MRMLBuildError("the sequence browser has no clip")
    stack = np.asarray(labels)
    if stack.ndim == 2:
        stack = stack[None]
    idx = list(range(master.GetNumberOfDataNodes())) if frames is None else list(frames)
    if len(idx) != stack.shape[0]:
        raise MRMLBuildError(f"{stack.shape[0]} label frames for {len(idx)} clip frames")
    seg_seq = _new(scene, "vtkMRMLSequenceNode", name)
    seg_seq.SetIndexName(master.GetIndexName())
    seg_seq.SetIndexUnit(master.GetIndexUnit())
    seg_seq.SetIndexType(master.GetIndexType())
    for f, frame_labels in zip(idx, stack):
        if not 0 <= f < master.GetNumberOfDataNodes():
            raise MRMLBuildError(f"frame {f} is outside the clip's "
                                 f"{master.GetNumberOfDataNodes()} frames")
        vol = master.GetNthDataNode(f)
        seg_node = label_map_to_segmentation(scene, vol, frame_labels, label_names,
                                             segmentation_node=_temp_seg(scene), replace=True)
        seg_seq.SetDataNodeAtValue(seg_node, master.GetNthIndexValue(f))
        scene.RemoveNode(seg_node)
    browser_node.AddSynchronizedSequenceNode(seg_seq)
    return seg_seq


def _temp_seg(scene: Any) -> Any:
    """A scratch node: SetDataNodeAtValue stores a copy, so the original leaves the scene."""
    return _new(scene, "vtkMRMLSegmentationNode", "__umind_frame__")
