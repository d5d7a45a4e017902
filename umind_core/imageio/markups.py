"""Slicer markups (.mrk.json, LPS): points, lines and closed curves (with their length: mm, or px on an uncalibrated
image; a closed curve is the ellipse of a head circumference, its length the perimeter) and ROIs out, and back in."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import numpy as np

from ..atomic import write_text
from .errors import MarkupsError
from .geometry import ras_to_lps

__all__ = ["MARKUPS_SCHEMA", "write_markups_json", "read_markups_json", "parse_markups"]

MARKUPS_SCHEMA = (
    "https://raw.githubusercontent.com/slicer/slicer/main/Modules/Loadable/Markups/"
    "Resources/Schema/markups-schema-v1.0.3.json#"
)


def _vec3(v: Any, what: str) -> list[float]:
    try:
        out = [float(c) for c in v]
    except (TypeError, ValueError) as exc:
        raise MarkupsError(f"{what}: expected 3 numbers, got {v!r}") from exc
    if len(out) != 3 or not all(math.isfinite(c) for c in out):
        raise MarkupsError(f"{what}: expected 3 finite numbers, got {v!r}")
    return out


def _control_point(i: int, label: str, pos: list[float]) -> dict:
    return {"id": str(i + 1), "label": label, "description": "", "associatedNodeID": "",
            "position": pos, "orientation": [-1.0, -0.0, -0.0, -0.0, -1.0, -0.0, 0.0, 0.0, 1.0],
            "selected": True, "locked": False, "visibility": True, "positionStatus": "defined"}


#: the markup types written, with the prefix of their control points' default labels (Slicer's own)
_PREFIX = {"Fiducial": "F", "Line": "L", "ClosedCurve": "CC", "ROI": "R"}


def _polyline_mm(points: list[list[float]], closed: bool) -> float:
    """The length of the polyline through ``points`` (LPS mm), back to the first point when ``closed``."""
    pts = np.asarray(points, dtype=np.float64)
    if closed:
        pts = np.vstack([pts, pts[:1]])
    return float(np.linalg.norm(np.diff(pts, axis=0), axis=1).sum())


def _length_measurement(m: dict, points: list[list[float]]) -> dict:
    """A Line's or ClosedCurve's length measurement: the ``length`` (and ``length_unit``) UMind computed for it
    (`imageio.line_length` for a line, `landmarks.ellipse_perimeter` for an ellipse, from the spacing of the geometry
    the points are in), else, for one drawn by someone else, the length of its points' polyline in mm (closed for a
    ClosedCurve), as near as the points allow to what Slicer measures."""
    if m.get("length") is not None:
        unit = str(m.get("length_unit") or "mm")
        if unit not in ("mm", "px"):
            raise MarkupsError(f"markup {m.get('name')!r}: length_unit must be mm or px, got {unit!r}")
        return {"value": float(m["length"]), "units": unit}
    return {"value": _polyline_mm(points, m.get("type") == "ClosedCurve"), "units": "mm"}


def _roi_fields(m: dict, name: str, system: str, conv) -> dict:
    """An ROI's center (in LPS), size and orientation (row-major, columns = the box's axes, in LPS)."""
    center_raw = m.get(f"center_{system.lower()}", m.get("center"))
    if center_raw is None or m.get("size") is None:
        raise MarkupsError(f"markup {name!r}: an ROI needs 'center' and 'size'")
    center = conv(_vec3(center_raw, f"markup {name!r} center"))
    size = _vec3(m["size"], f"markup {name!r} size")
    if any(s < 0 for s in size):
        raise MarkupsError(f"markup {name!r}: ROI size must not be negative, got {size}")
    orient = np.asarray(m.get("orientation", np.eye(3).ravel()), dtype=np.float64)
    if orient.size != 9:
        raise MarkupsError(f"markup {name!r}: orientation must be 9 numbers (row-major)")
    orient = orient.reshape(3, 3)
    if system == "RAS":
        orient = np.diag([-1.0, -1.0, 1.0]) @ orient
    return {"roiType": "Box", "center": center, "orientation": [float(v) for v in orient.ravel()], "size": size,
            "insideOut": False}


def _measurements(m: dict, mtype: str, name: str, points: list[list[float]]) -> list[dict]:
    """The markup's measurements after checking its points: a Line's and a ClosedCurve's length (enabled, so that
    Slicer shows it beside the markup), none for points and ROIs."""
    if mtype == "Fiducial" and not points:
        raise MarkupsError(f"markup {name!r}: a Fiducial needs at least one point")
    if mtype == "Line" and len(points) != 2:
        raise MarkupsError(f"markup {name!r}: a Line needs exactly 2 points, got {len(points)}")
    if mtype == "ClosedCurve" and len(points) < 3:
        raise MarkupsError(f"markup {name!r}: a ClosedCurve needs at least 3 points, got {len(points)}")
    if mtype not in ("Line", "ClosedCurve"):
        return []
    return [{"name": "length", "enabled": True, **_length_measurement(m, points), "printFormat": "%-#4.4g%s"}]


def _markup_to_slicer(m: dict, k: int) -> dict:
    if not isinstance(m, dict):
        raise MarkupsError(f"markup #{k}: expected a dict, got {type(m).__name__}")
    mtype = m.get("type")
    if mtype not in _PREFIX:
        raise MarkupsError(f"markup #{k}: type must be Fiducial, Line, ClosedCurve or ROI, got {mtype!r}")
    name = str(m.get("name") or mtype)
    system = str(m.get("coordinate_system") or ("RAS" if "points_ras" in m else "LPS")).upper()
    if system not in ("LPS", "RAS"):
        raise MarkupsError(f"markup {name!r}: coordinate_system must be LPS or RAS")
    conv = ras_to_lps if system == "RAS" else (lambda v: [float(c) for c in v])
    raw = m.get("points_ras" if system == "RAS" else "points_lps", m.get("points", []))
    points = [conv(_vec3(v, f"markup {name!r} point {i}")) for i, v in enumerate(raw or [])]
    labels = list(m.get("point_labels") or [])
    out: dict[str, Any] = {
        "type": mtype, "name": name, "coordinateSystem": "LPS", "coordinateUnits": "mm",
        "locked": False, "fixedNumberOfControlPoints": mtype in ("Line", "ROI"),
        "labelFormat": "%N-%d",
    }
    measurements = _measurements(m, mtype, name, points)
    if mtype == "ROI":
        out.update(_roi_fields(m, name, system, conv))
        points = [out["center"]]
    out["lastUsedControlPointNumber"] = len(points)
    out["controlPoints"] = [
        _control_point(i, str(labels[i]) if i < len(labels) else f"{_PREFIX[mtype]}-{i + 1}", pos)
        for i, pos in enumerate(points)]
    out["measurements"] = measurements
    if m.get("description"):
        out["description"] = str(m["description"])
    if m.get("color") is not None:
        color = [float(c) for c in m["color"]]
        out["display"] = {"color": color, "selectedColor": color}
    return out


def write_markups_json(markups: list[dict], path: str | os.PathLike, empty_name: str = "no results") -> Path:
    """Write Slicer markups (.mrk.json, LPS); see `_markup_to_slicer` for the dict keys:
    type (Fiducial, Line, ClosedCurve, ROI), name, points_lps | points_ras (or coordinate_system +
    points), length and length_unit (a Line's or ClosedCurve's), ROI center/size and optional
    orientation (row-major, columns = box axes), point_labels, description, color.

    Nothing to write becomes one point list without points named ``empty_name``: Slicer cannot load a
    file whose markups list is empty (measured with slicer-core: "Failed to get markup 0"), and a client
    that loads the reply (the stock MONAILabel extension) would report "nothing found" as a failure."""
    path = Path(path)
    items = [_markup_to_slicer(m, k) for k, m in enumerate(markups)] or [_empty_point_list(empty_name)]
    doc = {"@schema": MARKUPS_SCHEMA, "markups": items}
    return write_text(path, json.dumps(doc, indent=2))


def _empty_point_list(name: str) -> dict:
    return {"type": "Fiducial", "name": str(name), "coordinateSystem": "LPS", "coordinateUnits": "mm",
            "locked": False, "fixedNumberOfControlPoints": False, "labelFormat": "%N-%d",
            "lastUsedControlPointNumber": 0, "controlPoints": [], "measurements": []}


def read_markups_json(path: str | os.PathLike) -> list[dict]:
    """Read a Slicer .mrk.json (LPS or RAS) into dicts with both points_lps and points_ras."""
    path = Path(path)
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise MarkupsError(f"{path}: cannot read markups JSON: {exc}") from exc
    return parse_markups(doc, str(path))


def _stated_length(m: dict, lps: list[list[float]]) -> dict:
    """A read Line's or ClosedCurve's length: ``length_px`` where the file states UMind's length on an uncalibrated
    image, else ``length_mm``, the stated value or, without one, its points' polyline (closed for a curve)."""
    stated = next((ms for ms in m.get("measurements", [])
                   if isinstance(ms, dict) and ms.get("name") == "length" and "value" in ms), None)
    if stated is not None and stated.get("units") == "px":
        return {"length_px": float(stated["value"])}
    return {"length_mm": float(stated["value"]) if stated is not None else
            _polyline_mm(lps, m.get("type") == "ClosedCurve")}


def parse_markups(doc: Any, path: str = "markups") -> list[dict]:
    """A Slicer .mrk.json document (already parsed) -> the dicts `read_markups_json` returns;
    `path` names the source in error messages."""
    if not isinstance(doc, dict) or not isinstance(doc.get("markups"), list):
        raise MarkupsError(f"{path}: no 'markups' list; not a Slicer markups file")
    out = []
    for k, m in enumerate(doc["markups"]):
        if not isinstance(m, dict):
            raise MarkupsError(f"{path}: markup #{k} is a {type(m).__name__}, not a markup object")
        system = str(m.get("coordinateSystem", "LPS")).upper()
        if system not in ("LPS", "RAS"):
            raise MarkupsError(f"{path}: markup #{k} has coordinateSystem {system!r}")
        to_lps = ras_to_lps if system == "RAS" else (lambda v: [float(c) for c in v])
        try:
            cps = [cp for cp in m.get("controlPoints", [])
                   if cp.get("positionStatus", "defined") == "defined"]
            lps = [to_lps(_vec3(cp["position"], f"{path}: markup #{k}")) for cp in cps]
        except (KeyError, TypeError) as exc:
            raise MarkupsError(f"{path}: markup #{k} has a control point without position") \
                from exc
        item: dict[str, Any] = {
            "type": m.get("type"), "name": m.get("name", ""),
            "points_lps": lps, "points_ras": [ras_to_lps(p) for p in lps],
            "point_labels": [cp.get("label", "") for cp in cps],
        }
        if m.get("description"):
            item["description"] = m["description"]
        if (item["type"] == "Line" and len(lps) == 2) or (item["type"] == "ClosedCurve" and len(lps) >= 3):
            item.update(_stated_length(m, lps))
        if item["type"] == "ROI" and "center" in m:
            c = to_lps(_vec3(m["center"], f"{path}: markup #{k} center"))
            try:
                orient = np.asarray(m.get("orientation", np.eye(3).ravel()), dtype=np.float64).reshape(3, 3)
            except (TypeError, ValueError) as exc:
                raise MarkupsError(f"{path}: markup #{k} orientation is not 9 numbers") from exc
            if system == "RAS":
                orient = np.diag([-1.0, -1.0, 1.0]) @ orient
            item.update({"center_lps": c, "center_ras": ras_to_lps(c),
                         "size": _vec3(m.get("size", [0, 0, 0]), f"{path}: markup #{k} size"),
                         "orientation_lps": [float(v) for v in orient.ravel()]})
        out.append(item)
    return out
