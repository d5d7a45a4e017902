"""Head circumference out to Slicer: `umind infer --task measure --prompt "head circumference"` and the server's
`umind_landmarks` measure task write the fetal head's ellipse as a ClosedCurve markup through points of that ellipse
(in the image's LPS), stating its perimeter (Ramanujan's, from the lengths' one owner) as the curve's length, in mm
with a calibrated spacing and in px, said so, without one; the answer and the reply's `measurements` state the same.

The model path is real (the untrained tiny model encodes the image and decodes) but its answer is forced: the fetal
head's mask group decodes to an ellipse drawn with known axes in mm, so every number below is checked against that
ellipse or against the curve's own points, never against the code that wrote it.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

import fixtures_imaging as fx
from forced_answer import force_answer
from umind_core import demo
from umind_core.answers import grounding
from umind_core.cli import main
from umind_core.imageio import read_markups_json, read_study
from umind_core.answers.landmarks import OUTLINE_POINTS, ellipse_axes, ellipse_outline, ramanujan_perimeter
from umind_core.answers.results import GroundedObject, Result

ROOT = Path(__file__).resolve().parents[1]
H, W = 160, 200
SPACING = (0.2, 0.3)  # (column, row) mm: non-square pixels, so a fit in pixels would be a different ellipse
ORIGIN = (10.0, -4.0)
ANGLE = 0.5  # the image's axes turned in LPS, so positions come from the geometry, not from x * spacing
DIRECTION = (math.cos(ANGLE), -math.sin(ANGLE), math.sin(ANGLE), math.cos(ANGLE))
# the drawn head: centre, semi-axes and tilt in mm of the image plane
CX, CY, A, B, TILT = 20.0, 24.0, 15.0, 11.0, 0.4


def _drawn(pts_mm: np.ndarray) -> np.ndarray:
    """Normalised radius of in-plane mm points against the drawn ellipse (1 on it)."""
    c, s = math.cos(TILT), math.sin(TILT)
    dx, dy = pts_mm[..., 0] - CX, pts_mm[..., 1] - CY
    u, v = dx * c + dy * s, -dx * s + dy * c
    return np.sqrt((u / A) ** 2 + (v / B) ** 2)


def _head_mask() -> np.ndarray:
    yy, xx = np.mgrid[0:H, 0:W].astype(float)
    return _drawn(np.stack([xx * SPACING[0], yy * SPACING[1]], -1)) <= 1.0


def _image(path: Path) -> Path:
    return fx.sitk_volume(path, fx.ramp(H, W), spacing=SPACING, origin=ORIGIN, direction=DIRECTION)


def _plane_mm(lps: np.ndarray) -> np.ndarray:
    """LPS points of the 2D image -> (x, y) in mm along its columns and rows (the inverse of its geometry)."""
    d = np.asarray(DIRECTION).reshape(2, 2)
    return np.linalg.solve(d, (lps[:, :2] - np.asarray(ORIGIN)).T).T


def _force_head(monkeypatch, mask: np.ndarray) -> None:
    """The model segments the fetal head with one mask group, which decodes to ``mask``."""
    from umind_core.inference.predictor import Predictor

    force_answer(monkeypatch, grounding.format_mask("fetal head"), mask_groups=1)
    monkeypatch.setattr(Predictor, "_masks", lambda self, features, queries, size: ([mask.copy()], [0.9], 0.1))
    monkeypatch.setattr(demo, "has_demo_model", lambda: False)  # the untrained tiny model, no --model


def _infer(capsys, image: Path, out: Path) -> Path:
    rc = main(["infer", str(image), "--out", str(out), "--task", "measure", "--prompt", "head circumference",
               "--max-new-tokens", "2", "--parallel", "1", "--quiet"])
    assert rc == 0, capsys.readouterr().err
    return out / image.name.split(".")[0]


def _curve(doc: dict) -> dict:
    (curve,) = [m for m in doc["markups"] if m["type"] == "ClosedCurve"]
    return curve


def _landmarks_task():
    """The server's measure task without a server: its writers need only the labels of the app's conf."""
    sys.path.insert(0, str(ROOT / "monailabel_app"))
    from lib.infers.landmarks import UMindLandmarks

    return UMindLandmarks(SimpleNamespace(conf=SimpleNamespace(labels=("fetal head",))))


def test_an_ellipses_outline_lies_on_it_and_ends_its_axes():
    """Point 0 and n/2 end the long axis, n/4 and 3n/4 the short one; every point is on the ellipse the axes span."""
    long_axis, short_axis = (10.0, 50.0, 90.0, 20.0), (45.5, 23.0, 54.5, 47.0)  # through (50, 35), perpendicular
    pts = np.asarray(ellipse_outline((*long_axis, *short_axis)))
    assert pts.shape == (OUTLINE_POINTS, 2)
    assert pts[32] == pytest.approx(long_axis[:2]) and pts[0] == pytest.approx(long_axis[2:])
    assert pts[48] == pytest.approx(short_axis[:2]) and pts[16] == pytest.approx(short_axis[2:])
    u = np.subtract(long_axis[2:], long_axis[:2]) / 2
    v = np.subtract(short_axis[2:], short_axis[:2]) / 2
    rel = pts - np.add(long_axis[:2], long_axis[2:]) / 2
    assert np.hypot(rel @ u / (u @ u), rel @ v / (v @ v)) == pytest.approx(np.ones(OUTLINE_POINTS))
    with pytest.raises(ValueError, match="8 numbers"):
        ellipse_outline(long_axis)
    with pytest.raises(ValueError, match="at least 3"):
        ellipse_outline((*long_axis, *short_axis), n=2)


def test_umind_infer_writes_the_head_circumference_as_a_closed_curve_on_the_ellipse(tmp_path, capsys, monkeypatch):
    mask = _head_mask()
    _force_head(monkeypatch, mask)
    out = _infer(capsys, _image(tmp_path / "head.nrrd"), tmp_path / "out")
    doc = json.loads((out / "results.json").read_text())
    (res,) = doc["results"]
    (obj,) = res["objects"]
    assert obj["label"] == "head circumference" and len(obj["ellipse"]) == 8
    assert obj["physical"]["perimeter_unit"] == "mm"

    raw = json.loads((out / doc["outputs"]["markups"]).read_text())
    curve = _curve(raw)
    assert curve["name"] == "head circumference" and curve["coordinateSystem"] == "LPS"
    (length,) = curve["measurements"]
    assert (length["name"], length["enabled"], length["units"]) == ("length", True, "mm")
    lps = np.array([cp["position"] for cp in curve["controlPoints"]])
    assert lps.shape == (OUTLINE_POINTS, 3) and not lps[:, 2].any()

    # every point is on the drawn head, within a pixel (measured along the ray from its centre, an upper bound)
    plane = _plane_mm(lps)
    radius = _drawn(plane)
    off_mm = np.hypot(plane[:, 0] - CX, plane[:, 1] - CY) * np.abs(1 - 1 / radius)
    assert off_mm.max() < min(SPACING), off_mm.max()
    # the stated length is the Ramanujan perimeter of the curve's own ellipse, in mm from its LPS points
    a, b = np.linalg.norm(lps[0] - lps[32]) / 2, np.linalg.norm(lps[16] - lps[48]) / 2
    assert length["value"] == pytest.approx(ramanujan_perimeter(a, b), abs=0.01)
    assert length["value"] == pytest.approx(ramanujan_perimeter(A, B), rel=0.005)  # and near the drawn head's
    # one number everywhere: the markup, results.json and the answer
    assert obj["physical"]["perimeter_mm"] == pytest.approx(length["value"], abs=1e-9)
    assert res["answer"] == f"head circumference Length: {length['value']:.2f} mm."
    (back,) = [m for m in read_markups_json(out / doc["outputs"]["markups"]) if m["type"] == "ClosedCurve"]
    assert back["length_mm"] == pytest.approx(length["value"]) and np.asarray(back["points_lps"]) == pytest.approx(lps)


def test_the_servers_measure_task_writes_the_clis_closed_curve_and_states_the_hc(tmp_path, capsys, monkeypatch):
    """The same answer through the server's `umind_landmarks` (called in-process, as its infer does after the
    Predictor): the reply's markups file holds the CLI's closed curve, and `measurements` the HC in mm."""
    mask = _head_mask()
    _force_head(monkeypatch, mask)
    image = _image(tmp_path / "head.nrrd")
    cli = _curve(json.loads((_infer(capsys, image, tmp_path / "out") / "markups.mrk.json").read_text()))

    study = read_study(image)
    axes = ellipse_axes(mask, SPACING)
    res = Result(task="measure", raw_answer=grounding.format_mask("fetal head"), image_size=(W, H),
                 objects=[GroundedObject(label="head circumference", ellipse=(*axes[0], *axes[1]), mask=mask)])
    res.attach_geometry(study.geometry)
    path, body = _landmarks_task()._write(study, {"task": "measure"}, [("measure", "head circumference", [res])])
    raw = json.loads(Path(path).read_text())
    Path(path).unlink()
    server = _curve(raw)
    cli_points = np.array([cp["position"] for cp in cli["controlPoints"]])
    assert np.array([cp["position"] for cp in server["controlPoints"]]) == pytest.approx(cli_points, abs=1e-9)
    assert server["measurements"] == cli["measurements"]
    assert np.asarray(_curve({"markups": body["markups"]})["points_lps"]) == pytest.approx(cli_points)  # the JSON too
    (hc,) = body["measurements"]
    assert hc["name"] == "head circumference" and hc["shape"] == "ellipse" and hc["unit"] == "mm"
    assert hc["length_mm"] == pytest.approx(cli["measurements"][0]["value"], abs=1e-9) == hc["length"]
    assert hc["length_px"] == pytest.approx(ramanujan_perimeter(
        math.dist(axes[0][:2], axes[0][2:]) / 2, math.dist(axes[1][:2], axes[1][2:]) / 2))


def test_without_spacing_the_closed_curve_and_the_measurement_are_in_pixels(tmp_path):
    """A PNG has no calibration: the curve's length, the reply's measurement and the answer say px, never mm."""
    png = fx.write_png(tmp_path / "head.png", fx.ramp(H, W))
    study = read_study(png)
    yy, xx = np.mgrid[0:H, 0:W].astype(float)
    mask = ((xx - 100) / 60) ** 2 + ((yy - 80) / 45) ** 2 <= 1.0
    axes = ellipse_axes(mask)
    res = Result(task="measure", raw_answer=grounding.format_mask("fetal head"), image_size=(W, H),
                 objects=[GroundedObject(label="head circumference", ellipse=(*axes[0], *axes[1]), mask=mask)])
    res.attach_geometry(study.geometry)
    assert res.answer.endswith(" px.") and "mm" not in res.answer
    path, body = _landmarks_task()._write(study, {"task": "measure"}, [("measure", "head circumference", [res])])
    raw = json.loads(Path(path).read_text())
    Path(path).unlink()
    (length,) = _curve(raw)["measurements"]
    assert length["units"] == "px" and length["value"] == pytest.approx(ramanujan_perimeter(60.0, 45.0), rel=0.005)
    (hc,) = body["measurements"]
    assert hc["unit"] == "px" and "length_mm" not in hc and hc["length"] == pytest.approx(length["value"])
    assert f"{length['value']:.2f} px" in res.answer
