"""The way back: what the user corrected in Slicer -> what PUT /datastore/label stores.

Segments become one label map on the image's own grid (value = position in the list + 1, a smaller segment
keeping its pixels where two overlap: `painter.LabelPainter`, the module's copy of the server's rule),
markups become one Slicer mrk.json dict in LPS (written by Slicer's own storage nodes, so it reads back
in Slicer and in umind_core.imageio alike), and the corrected answer travels in the label info under the
keys of `contract`, the module's copy of the server's wire contract.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from .client import MultipartFile
from .contract import ANSWER, FINDING, FINDINGS, LABEL_NAMES, LANDMARK_TARGET, MARKUPS, REPORT
from .labelfiles import encode_nrrd, encode_png
from .mrml import (MRMLBuildError, ensure_node_classes, segment_array, volume_geometry)
from .painter import LabelPainter

__all__ = ["SubmitError", "LabelSubmission", "FINDINGS", "segmentation_to_label_map", "markups_to_json",
           "label_info", "label_file", "prepare_submission"]


class SubmitError(ValueError):
    """Nothing (valid) to submit; the message says what is missing."""


def segmentation_to_label_map(scene: Any, segmentation_node: Any, volume_node: Any,
                              segment_ids: Sequence[str] | None = None
                              ) -> tuple[np.ndarray, dict[str, int]]:
    """Segments -> ((K, J, I) label map on the volume's grid, {segment name: value})."""
    if segmentation_node is None:
        raise SubmitError("there is no segmentation to submit")
    seg = segmentation_node.GetSegmentation()
    ids = list(segment_ids) if segment_ids is not None else [
        seg.GetNthSegmentID(i) for i in range(seg.GetNumberOfSegments())]
    if len(ids) > 65535:
        raise SubmitError(f"{len(ids)} segments do not fit a 16-bit label map")
    painter = LabelPainter(volume_geometry(volume_node).dims[::-1])
    for sid in ids:
        segment = seg.GetSegment(sid)
        if segment is None:
            raise SubmitError(f"segment id {sid!r} is not in {segmentation_node.GetName()!r}")
        name = segment.GetName()
        if name in painter.values:
            raise SubmitError(f"two segments are named {name!r}; rename one before submitting")
        try:
            mask = segment_array(scene, segmentation_node, sid, volume_node)
        except MRMLBuildError as exc:
            raise SubmitError(str(exc)) from exc
        painter.paint(name, mask)
    return painter.labels(), dict(painter.values)


def markups_to_json(scene: Any, nodes: Sequence[Any]) -> dict | None:
    """Markups nodes -> one mrk.json dict (LPS, Slicer schema); None when there are none."""
    nodes = [n for n in nodes if n is not None]
    if not nodes:
        return None
    ensure_node_classes(scene)
    merged: dict | None = None
    with tempfile.TemporaryDirectory(prefix="umind-submit-") as tmp:
        for i, node in enumerate(nodes):
            storage = node.CreateDefaultStorageNode()
            if storage is None:
                raise SubmitError(f"{node.GetName()!r} cannot be written as markups JSON")
            path = os.path.join(tmp, f"n{i}.mrk.json")
            storage.SetFileName(path)
            if hasattr(storage, "SetCoordinateSystem"):
                storage.SetCoordinateSystem(1)  # LPS, Slicer's file convention (1 = LPS)
            if not storage.WriteData(node):
                raise SubmitError(f"Slicer could not write markups {node.GetName()!r}")
            with open(path, encoding="utf-8") as fh:
                d = json.load(fh)
            for m in d.get("markups", []):
                m.setdefault("name", node.GetName())
            if merged is None:
                merged = d
            else:
                merged["markups"] += d.get("markups", [])
    return merged


def label_info(label_names: dict[str, int], answer: str = "", markups: dict | None = None,
               finding: str = "", report: str = "", landmark_target: str = "", **extra: Any) -> dict:
    """The params of PUT /datastore/label: names, the (corrected) answer, markups, the finding, the report,
    the structure the landmarks belong to, extras. Empty values are left out."""
    info: dict[str, Any] = {LABEL_NAMES: {str(k): int(v) for k, v in label_names.items()}}
    if finding and finding.strip().lower() not in FINDINGS:
        raise SubmitError(f"finding must be one of {', '.join(FINDINGS)}, got {finding!r}")
    for key, value in ((ANSWER, answer), (FINDING, finding.strip().lower()), (REPORT, report),
                       (LANDMARK_TARGET, landmark_target)):
        if value and value.strip():
            info[key] = value.strip()
    if markups:
        info[MARKUPS] = markups
    info.update(extra)
    return info


def label_file(labels: np.ndarray, volume_node: Any, image_id: str) -> MultipartFile:
    """A label map as the upload file: PNG for a single frame with few labels (the server's
    own 2D form), gzip NRRD in the volume's geometry otherwise."""
    a = np.asarray(labels)
    stem = (image_id or "label").replace("/", "_")
    if a.ndim == 3 and a.shape[0] == 1 and (not a.size or a.max() <= 255):
        return MultipartFile(f"{stem}.png", encode_png(a[0]), "image/png")
    g = volume_geometry(volume_node)
    return MultipartFile(f"{stem}.nrrd", encode_nrrd(a, g.ijk_to_ras),
                         "application/octet-stream")


@dataclass
class LabelSubmission:
    image_id: str
    file: MultipartFile
    info: dict


def prepare_submission(scene: Any, volume_node: Any, image_id: str, segmentation_node: Any = None,
                       markup_nodes: Sequence[Any] = (), answer: str = "", finding: str = "",
                       report: str = "", landmark_target: str = "") -> LabelSubmission:
    """Everything the user corrected -> one submission; at least one of them must be there.

    Segments, landmarks, measurement lines, boxes and the finding travel together, so that every task the
    model serves learns from one correction, not only segmentation."""
    if not image_id:
        raise SubmitError("the image has no server id: run inference or fetch a sample first")
    if segmentation_node is not None:
        labels, names = segmentation_to_label_map(scene, segmentation_node, volume_node)
    else:
        labels, names = np.zeros(volume_geometry(volume_node).dims[::-1], np.uint8), {}
    markups = markups_to_json(scene, markup_nodes)
    if not names and markups is None and not answer.strip() and not finding.strip() and not report.strip():
        raise SubmitError("nothing to submit: no segments, markups, finding or answer")
    return LabelSubmission(image_id, label_file(labels, volume_node, image_id),
                           label_info(names, answer.strip(), markups, finding, report, landmark_target))
