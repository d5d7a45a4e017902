"""Result / GroundedObject: physical measurements, JSON round trip, markups and label maps."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import SimpleITK as sitk

import fixtures_imaging as F
from umind_core.imageio import (
    Geometry, physical_to_pixel, read_markups_json, read_study, write_label_map,
    write_markups_json,
)
from umind_core.answers.results import GroundedObject, Result, ResultFormatError


def _mask(h=48, w=64, box=(10, 5, 30, 20)):
    m = np.zeros((h, w), bool)
    x1, y1, x2, y2 = box
    m[y1:y2, x1:x2] = True
    return m


def _result() -> Result:
    return Result(
        task="segment", prompt="segment the nodule", text="<|object_ref_start|>nodule...",
        answer="one nodule",
        objects=[
            GroundedObject(label="nodule", box=(10, 5, 30, 20), mask=_mask(), score=0.875),
            GroundedObject(label="caliper", line=(0, 0, 3, 4), points=[(1.5, 2.5), (7, 8)]),
            GroundedObject(label=None, mask=_mask(box=(40, 30, 50, 44)), score=float("nan")),
            GroundedObject(label="nodule", mask=_mask(box=(50, 1, 60, 6))),
        ],
        warnings=["truncated span at 120"], timings={"generate": 0.25, "decode": 0.01},
        frame_index=0, source="/data/x.dcm", image_size=(64, 48),
    )


def test_normalises_types():
    o = GroundedObject(box=[1, 2, 3, 4], points=[[1, 2]], line=np.array([0, 0, 1, 1]),
                       mask=np.ones((8, 8), np.uint8), score=np.float32(0.5))
    assert o.box == (1.0, 2.0, 3.0, 4.0) and isinstance(o.box, tuple)
    assert o.points == [(1.0, 2.0)] and o.line == (0.0, 0.0, 1.0, 1.0)
    assert o.mask.dtype == bool and type(o.score) is float
    with pytest.raises(ResultFormatError, match="box"):
        GroundedObject(box=(1, 2, 3))
    with pytest.raises(ResultFormatError, match="H x W"):
        GroundedObject(mask=np.zeros((2, 8, 8)))


@pytest.mark.parametrize("mask_format", ["png", "nrrd"])
def test_json_round_trip_is_lossless(tmp_path, mask_format):
    r = _result()
    r.attach_geometry((0.3, 0.2))
    path = r.to_json(tmp_path / "out" / "res.json", mask_format=mask_format)
    names = sorted(p.name for p in path.parent.iterdir())
    assert names == sorted(["res.json"] + [f"res.mask{i}.{mask_format}" for i in (0, 2, 3)])
    d = json.loads(path.read_text())
    assert d["objects"][0]["mask"] == {"shape": [48, 64], "file": f"res.mask0.{mask_format}",
                                       "pixels": 300}
    assert d["objects"][1]["mask"] is None
    back = Result.from_json(path)
    assert back == r
    assert np.array_equal(back.objects[2].mask, r.objects[2].mask)
    assert math.isnan(back.objects[2].score)
    assert back.image_size == (64, 48) and back.objects[1].points == [(1.5, 2.5), (7.0, 8.0)]
    # a changed mask is noticed by equality
    back.objects[0].mask[0, 0] = True
    assert back != r


def test_to_dict_omits_masks():
    d = _result().to_dict()
    json.dumps(d)  # JSON-ready
    assert d["objects"][0]["mask"] == {"shape": [48, 64], "file": None, "pixels": 300}
    assert "nodule" == d["objects"][0]["label"] and d["task"] == "segment"


def test_from_json_errors_name_the_file(tmp_path):
    r = _result()
    path = r.to_json(tmp_path / "r.json")
    (tmp_path / "r.mask0.png").unlink()
    with pytest.raises(ResultFormatError, match="r.mask0.png"):
        Result.from_json(path)
    (tmp_path / "other.json").write_text('{"format": "something"}')
    with pytest.raises(ResultFormatError, match="other.json"):
        Result.from_json(tmp_path / "other.json")
    with pytest.raises(ResultFormatError, match="mask_format"):
        r.to_json(tmp_path / "x.json", mask_format="tiff")


def test_attach_spacing_gives_mm():
    r = _result()
    r.attach_geometry((0.3, 0.2))
    nod, cal = r.objects[0].physical, r.objects[1].physical
    assert nod["box_mm"] == pytest.approx([3.0, 1.0, 9.0, 4.0])
    assert nod["box_size_mm"] == pytest.approx([6.0, 3.0])
    assert nod["area_mm2"] == pytest.approx(300 * 0.06)
    assert cal["length_mm"] == pytest.approx(math.hypot(0.9, 0.8))
    assert cal["line_mm"] == pytest.approx([0, 0, 0.9, 0.8])
    assert np.allclose(cal["points_mm"], [[0.45, 0.5], [2.1, 1.6]])
    assert "points_lps" not in cal


def test_attach_unknown_spacing_clears_mm_and_keeps_lengths_in_px(tmp_path):
    r = _result()
    r.attach_geometry((1.0, 1.0))
    assert r.objects[0].physical
    png = read_study(F.write_png(tmp_path / "g.png", F.ramp()))
    r.attach_geometry(png.geometry)
    unmeasured = [o.physical for o in r.objects if o.line is None]
    assert all(p == {} for p in unmeasured)
    assert r.objects[1].physical == {"length": 5.0, "length_unit": "px"}  # the 3-4-5 caliper, in pixels
    r.attach_geometry((1.0, 1.0))
    r.attach_geometry(png.frames[0])  # a Frame without spacing: the same
    assert r.objects[1].physical == {"length": 5.0, "length_unit": "px"}
    assert "mm" not in r.answer and r.answer == "one nodule Length: 5.00 px."


def test_attach_volume_geometry_lps(tmp_path):
    p = F.sitk_volume(tmp_path / "v.nrrd", F.volume_array(), direction=F.rotation())
    geo = read_study(p, axis=1).geometry
    r = Result(task="measure", frame_index=7,
               objects=[GroundedObject(label="d", line=(2, 1, 8, 9), points=[(4, 4)])])
    r.attach_geometry(geo)
    ph = r.objects[0].physical
    sx, sy = 0.5, 1.3  # axis 1 frames: x spacing, z spacing
    assert ph["length_mm"] == pytest.approx(math.hypot(6 * sx, 8 * sy))
    a, b = np.array(ph["line_lps"])
    assert np.linalg.norm(b - a) == pytest.approx(ph["length_mm"])  # direction is a rotation
    img = sitk.ReadImage(str(p))
    assert ph["points_lps"][0] == pytest.approx(
        img.TransformContinuousIndexToPhysicalPoint((4.0, 7.0, 4.0)))


def test_to_markups_round_trip_through_file(tmp_path):
    p = F.sitk_volume(tmp_path / "v.nii.gz", F.volume_array(), direction=F.rotation())
    geo = read_study(p).geometry
    r = Result(task="detect", frame_index=3, objects=[
        GroundedObject(label="nodule", box=(4, 2, 12, 10), points=[(5, 6)]),
        GroundedObject(label="depth", line=(1, 1, 1, 11)),
    ])
    marks = r.to_markups(geo)
    assert [m["type"] for m in marks] == ["Fiducial", "ROI", "Line"]
    path = write_markups_json(marks, tmp_path / "m.mrk.json")
    back = read_markups_json(path)
    fid, roi, line = back
    assert fid["name"] == "nodule"
    assert physical_to_pixel(geo, None, fid["points_lps"][0]) == pytest.approx((5, 6, 3),
                                                                               abs=1e-4)
    assert physical_to_pixel(geo, None, roi["center_lps"]) == pytest.approx((8, 6, 3), abs=1e-4)
    assert roi["size"] == pytest.approx([8 * 0.5, 8 * 0.7, 1.3], abs=1e-5)
    o = np.array(roi["orientation_lps"]).reshape(3, 3)
    assert o @ o.T == pytest.approx(np.eye(3), abs=1e-6)  # a rotation, from the direction
    assert line["length_mm"] == pytest.approx(10 * 0.7, abs=1e-5)


def test_to_markups_2d_dicom(tmp_path):
    geo = read_study(F.dicom_mono(tmp_path / "m.dcm", pixel_spacing=(0.2, 0.3))).geometry
    r = Result(task="keypoints", objects=[GroundedObject(label="apex", points=[(10, 5)])])
    (m,) = r.to_markups(geo)
    assert m["points_lps"] == [[3.0, pytest.approx(1.0), 0.0]]


def test_label_map_groups_labels():
    r = _result()
    lab, names = r.label_map()
    assert lab.shape == (48, 64) and lab.dtype == np.uint8
    assert names == {1: "nodule", 2: "object 3"}
    assert (lab == 1).sum() == 300 + 50 and (lab == 2).sum() == 140
    assert lab[10, 15] == 1 and lab[35, 45] == 2 and lab[3, 55] == 1 and lab[0, 0] == 0


def test_label_map_empty_uses_image_size_and_writes(tmp_path):
    r = Result(task="segment", image_size=(64, 48))
    lab, names = r.label_map()
    assert lab.shape == (48, 64) and not lab.any() and names == {}
    geo = Geometry(kind="2d", shape=(48, 64), spacing=(1.0, 1.0), origin=(0.0, 0.0),
                   direction=(1.0, 0.0, 0.0, 1.0))
    lab2, _ = _result().label_map()
    out = write_label_map(lab2, geo, tmp_path / "lab.nrrd")
    assert np.array_equal(sitk.GetArrayFromImage(sitk.ReadImage(str(out))), lab2)
    with pytest.raises(ResultFormatError, match="image_size"):
        Result(task="segment").label_map()


def test_a_mask_file_of_another_shape_than_its_json_is_refused(tmp_path):
    path = _result().to_json(tmp_path / "r.json")
    d = json.loads(path.read_text())
    d["objects"][0]["mask"]["shape"] = [64, 48]  # the file holds 48 x 64: swapped, as a hand edit might
    path.write_text(json.dumps(d))
    with pytest.raises(ResultFormatError, match=r"r.mask0.png has shape \(48, 64\), the JSON says \(64, 48\)"):
        Result.from_json(path)


def test_attach_views_refuses_a_view_one_past_the_last():
    r = Result(task="measure", prompt="kidney length", text="", answer="", objects=[
        GroundedObject(label="kidney length", line=(0, 0, 3, 4), view=1)])
    r.attach_views([(0.5, 0.5), (0.25, 0.25)])
    assert r.objects[0].physical["length_mm"] == pytest.approx(1.25)  # view 1's spacing, not view 0's
    r.objects[0].view = 2
    with pytest.raises(ResultFormatError, match="has view 2, but 2 view"):
        r.attach_views([(0.5, 0.5), (0.25, 0.25)])
