"""The stock MONAILabel extension's request quirks, as pure functions (the replay test covers them end to end)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "monailabel_app"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "slicer_module" / "UMind"))

from lib.wall.errors import BadRequest  # noqa: E402
from lib.stock_extension import (UMIND_CLIENT_KEY, is_stock_extension, label_names_from_list,  # noqa: E402
                                 map_targets, view_offset_frame)
from umind_core.imageio import Geometry, label_map_suffix  # noqa: E402


def clip(origin_z: float = 30.0, spacing_z: float = 2.5, n: int = 4) -> Geometry:
    return Geometry(kind="cine", shape=(n, 32, 40), spacing=(0.3, 0.3, spacing_z), origin=(5.0, 6.0, origin_z),
                    direction=tuple(float(v) for v in (1, 0, 0, 0, 1, 0, 0, 0, 1)), format="nrrd")


def test_our_module_marks_its_requests_with_the_key_the_server_reads():
    from UMindLib.requests import CLIENT_MARKER

    assert CLIENT_MARKER[0] == UMIND_CLIENT_KEY
    assert is_stock_extension({"result_extension": ".nrrd", "client_id": "user-xyz"})
    assert not is_stock_extension({"result_extension": ".nrrd", UMIND_CLIENT_KEY: "slicer-module"})
    assert not is_stock_extension({"client_id": "user-xyz"})  # the plain Python client keeps free text


def test_view_offset_in_mm_is_the_frame_at_that_offset():
    g = clip()  # frames at z = 30, 32.5, 35, 37.5 mm
    assert view_offset_frame(35, [0, 10, 0, 10, 2, 2], g) == 2
    assert view_offset_frame(30, None, g) == 0
    assert view_offset_frame(3, None, Geometry(kind="2d", shape=(32, 40), spacing=(1, 1), origin=(0, 0),
                                                direction=(1.0, 0.0, 0.0, 1.0))) == 0
    with pytest.raises(BadRequest, match="no frame of this image lies there .*place a foreground click"):
        view_offset_frame(2, None, g)  # the index the user meant is not an offset any frame has
    dense = clip(origin_z=0.0, spacing_z=0.2, n=10)  # frames 0..4 round to 0 or 1 mm
    with pytest.raises(BadRequest, match="all round to"):
        view_offset_frame(1, None, dense)
    assert view_offset_frame(1, [0, 9, 0, 9, 4, 4], dense) == 4  # the ROI's k range settles it


def test_targets_map_onto_the_extensions_segments_or_are_refused_with_the_fix():
    assert map_targets(["Lesion ", None], ["lesion"], "UMindSegment") == ["lesion", None]
    with pytest.raises(BadRequest, match=r"'thyroid nodule' has no segment .*--conf labels lesion,thyroidnodule"):
        map_targets(["thyroid nodule"], ["lesion"], "UMindSegment")


def test_label_info_list_names_values_by_position():
    assert label_names_from_list([{"name": "lesion", "idx": 2}, {"name": "cyst", "idx": 3}]) == {"lesion": 1, "cyst": 2}
    assert label_names_from_list([]) is None and label_names_from_list({"lesion": 1}) is None
    with pytest.raises(BadRequest, match="entry 1 has no name"):
        label_names_from_list([{"idx": 1}])


@pytest.mark.parametrize("fmt,kind,requested,suffix", [
    ("png", "2d", None, ".png"), ("png", "2d", ".nrrd", ".nrrd"), ("dicom", "2d", None, ".nrrd"),
    ("nrrd", "2d", None, ".nrrd"), ("nifti", "2d", None, ".nii.gz"), ("dicom", "cine", ".png", ".nrrd"),
    ("png", "2d", "exe", ".png"), ("nifti", "volume", "nii", ".nii")])
def test_label_map_suffix_keeps_spacing_and_honours_result_extension(fmt, kind, requested, suffix):
    shape = (32, 40) if kind == "2d" else (3, 32, 40)
    g = Geometry(kind=kind, shape=shape, spacing=(1.0,) * len(shape), origin=(0.0,) * len(shape),
                 direction=(1.0, 0.0, 0.0, 1.0) if kind == "2d" else tuple(float(v) for v in (1, 0, 0, 0, 1, 0, 0, 0, 1)),
                 format=fmt)
    assert label_map_suffix(g, requested) == suffix


def test_a_target_names_its_segment_whatever_its_case_and_spacing():
    from lib.stock_extension import map_targets

    assert map_targets(["thyroid  nodule", None], ["Thyroid Nodule", "thyroid"], "segment") == ["Thyroid Nodule", None]


def test_a_segment_listed_twice_keeps_the_value_of_its_first_place():
    from lib.stock_extension import label_names_from_list

    names = label_names_from_list([{"name": "lesion"}, {"name": "gland"}, {"name": " lesion "}])
    assert names == {"lesion": 1, "gland": 2}
