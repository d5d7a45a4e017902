"""What a person corrected besides the label map -> pixel annotations on the image's frames.

A submission from the UMind Slicer module stores, in the label's info, the corrected markups (a Slicer
.mrk.json dict in LPS: fiducials = landmarks, lines = measurements, ROIs = boxes), the finding
(normal/benign/malignant) and an optional report. Training needs them as pixels on a frame, the way the
manifest holds annotations, so that every task the model serves learns from corrections, not only
segmentation. A client that sends only a label map (the stock MONAILabel extension) has none of these
keys and nothing here changes for it.

Nothing a person saved is ever an error at training time: each markup is either used or listed with the
reason it was skipped (outside the image, zero length, unknown type), and the reasons go into the run
record.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from umind_core.answers.findings import normal_finding
from umind_core.imageio import MarkupsError, Study, frame_spacing, line_length, parse_markups, physical_to_pixel

from ..wire import FINDING, FINDINGS, LANDMARK_TARGET, MARKUPS, PARAMS, REPORT

__all__ = ["FINDINGS", "FrameCorrections", "Corrections", "read_corrections", "info_fields"]

#: how far (pixels) a point may lie outside the frame and still count as on its edge (Slicer places
#: control points on pixel centres; a point on the outer edge of the last pixel is half a pixel out)
_EDGE_SLACK = 1.0


@dataclass
class FrameCorrections:
    """Corrected annotations of one frame, in that frame's pixels (x = column, y = row)."""

    keypoints: list[tuple[str, tuple[float, float]]] = field(default_factory=list)
    lines: list[tuple[str, tuple[float, float, float, float], float | None]] = field(default_factory=list)
    boxes: list[tuple[str, tuple[float, float, float, float]]] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.keypoints or self.lines or self.boxes)


@dataclass
class Corrections:
    frames: dict[int, FrameCorrections] = field(default_factory=dict)
    finding: str | None = None
    report: str | None = None
    landmark_target: str | None = None
    skipped: list[str] = field(default_factory=list)

    def frame(self, index: int) -> FrameCorrections:
        return self.frames.setdefault(index, FrameCorrections())


def info_fields(info: dict | None) -> dict:
    """The label info's keys, whether the client put them at the top level or under "params"."""
    info = info if isinstance(info, dict) else {}
    params = info.get(PARAMS) if isinstance(info.get(PARAMS), dict) else {}
    return {**params, **{k: v for k, v in info.items() if k != PARAMS}}


def read_corrections(info: dict | None, study: Study) -> Corrections:
    """Markups, finding and report of one label's info, mapped onto `study`'s frames."""
    fields = info_fields(info)
    out = Corrections()
    target = fields.get(LANDMARK_TARGET)
    out.landmark_target = target.strip() if isinstance(target, str) and target.strip() else None
    _read_finding(fields, out)
    doc = fields.get(MARKUPS)
    if doc:
        try:
            markups = parse_markups(doc, "markups")
        except MarkupsError as exc:
            out.skipped.append(f"markups: {exc}")
            markups = []
        for k, m in enumerate(markups):
            reason = _add_markup(m, study, out)
            if reason:
                out.skipped.append(f"markup #{k} {m.get('type')} {m.get('name')!r}: {reason}")
    return out


def _read_finding(fields: dict, out: Corrections) -> None:
    finding = fields.get(FINDING)
    if isinstance(finding, str) and finding.strip():
        out.finding = normal_finding(finding)
        if out.finding is None:
            out.skipped.append(f"finding {finding!r} is not one of {', '.join(FINDINGS)}")
    elif finding not in (None, ""):
        out.skipped.append(f"finding must be a string, got {type(finding).__name__}")
    report = fields.get(REPORT)
    if isinstance(report, str) and report.strip():
        out.report = report.strip()
    elif report not in (None, ""):
        out.skipped.append(f"report must be a string, got {type(report).__name__}")


def _to_pixel(study: Study, p_lps) -> tuple[float, float, int] | str:
    """(x, y, frame) of an LPS point, or why it is not on the image."""
    g = study.geometry
    x, y, f = physical_to_pixel(g, None, p_lps)
    if not all(math.isfinite(v) for v in (x, y, f)):
        return "a point is not a finite position"
    h, w = g.frame_shape
    frame = int(round(f))
    if not 0 <= frame < g.n_frames:  # round() leaves at most half a frame: every in-range point lies on one
        return f"a point lies on no frame of the image (frame coordinate {f:.2f} of {g.n_frames})"
    if not (-_EDGE_SLACK <= x <= w - 1 + _EDGE_SLACK and -_EDGE_SLACK <= y <= h - 1 + _EDGE_SLACK):
        return f"a point ({x:.1f}, {y:.1f}) lies outside the {w}x{h} image"
    return min(max(x, 0.0), w - 1.0), min(max(y, 0.0), h - 1.0), frame


def _add_markup(m: dict, study: Study, out: Corrections) -> str | None:
    kind, name = m.get("type"), str(m.get("name") or "").strip()
    if not name:
        return "it has no name (the name says what it marks)"
    if kind == "ROI":
        return _add_roi(m, name, study, out)
    pts = [_to_pixel(study, p) for p in m.get("points_lps", [])]
    bad = next((p for p in pts if isinstance(p, str)), None)
    if bad:
        return bad
    if kind == "Fiducial":
        if not pts:
            return "it has no placed point"
        labels = m.get("point_labels") or []
        for i, (x, y, f) in enumerate(pts):
            # one fiducial node per landmark (the server's own markups): the node name is the landmark;
            # a node with several points names each by its control-point label
            point_name = name if len(pts) == 1 else (str(labels[i]).strip() if i < len(labels) else "") or name
            out.frame(f).keypoints.append((point_name, (x, y)))
        return None
    if kind == "Line":
        if len(pts) != 2:
            return f"a line needs 2 points, it has {len(pts)}"
        (x1, y1, f1), (x2, y2, f2) = pts
        if f1 != f2:
            return f"its ends lie on different frames ({f1} and {f2})"
        if line_length((x1, y1, x2, y2), None).value < 1.0:  # under a pixel
            return "it has zero length"
        # the one length rule (`imageio.line_length`): mm from the calibrated spacing, none without it
        spacing = frame_spacing(study.geometry) if study.geometry.spacing_known else None
        length = line_length((x1, y1, x2, y2), spacing).mm
        out.frame(f1).lines.append((name, (x1, y1, x2, y2), length))
        return None
    return f"type {kind!r} is not a Fiducial, Line or ROI"


def _add_roi(m: dict, name: str, study: Study, out: Corrections) -> str | None:
    if "center_lps" not in m:
        return "an ROI needs a center and a size"
    c = np.asarray(m["center_lps"], dtype=np.float64)
    size = np.asarray(m.get("size", [0, 0, 0]), dtype=np.float64)
    axes = np.asarray(m.get("orientation_lps", np.eye(3).ravel()), dtype=np.float64).reshape(3, 3)
    corners = [c + sa * size[0] / 2 * axes[:, 0] + sb * size[1] / 2 * axes[:, 1]
               for sa in (-1, 1) for sb in (-1, 1)]
    pts = [_to_pixel(study, p) for p in corners]
    bad = next((p for p in pts if isinstance(p, str)), None)
    if bad:
        return bad
    xs, ys = [p[0] for p in pts], [p[1] for p in pts]
    if max(xs) - min(xs) < 1.0 or max(ys) - min(ys) < 1.0:
        return "the box has zero width or height"
    out.frame(pts[0][2]).boxes.append((name, (min(xs), min(ys), max(xs), max(ys))))
    return None
