"""A study is one self-contained file, and decoding is bounded: the readers' side of the wall.

Each test plants an outside file with a marker and checks that no reader follows a path written inside a study
(NRRD `data file`, a detached `.nhdr`, a NIfTI pair, a MetaImage posing as NRRD), that the refusal quotes none
of the outside bytes, and that deflated DICOM and oversized JPEG frames are refused before they are inflated.
"""

from __future__ import annotations

import sys
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fixtures_imaging import (dicom_deflated, dicom_jpeg_frame_larger_than_declared, dicom_mono,  # noqa: E402
                              ramp)

from umind_core.imageio import ImageReadError, read_header, read_label_map, read_study  # noqa: E402
from umind_core.imageio.geometry import Geometry, line_length  # noqa: E402

SECRET = b"TOPSECRET-0123456789 outside the studies folder\n" * 4


@pytest.fixture
def outside(tmp_path):
    path = tmp_path / "outside" / "secret.txt"
    path.parent.mkdir()
    path.write_bytes(SECRET)
    return path


def _refused(path: Path, *words: str) -> str:
    for read in (read_study, read_header):
        with pytest.raises(ImageReadError) as info:
            read(path)
        text = str(info.value)
        assert "TOPSECRET" not in text and "0123456789" not in text, text
        for word in words:
            assert word.lower() in text.lower(), text
    return text


def _refused_as_study_and_label(path: Path, *words: str) -> None:
    """`_refused`, and refused as a label map too (the label door opens files through the same checks)."""
    _refused(path, *words)
    g = Geometry(kind="2d", shape=(8, 8), spacing=(1.0, 1.0), origin=(0.0, 0.0), direction=(1, 0, 0, 1))
    with pytest.raises(ImageReadError):
        read_label_map(path, g)


@pytest.mark.parametrize("encoding, extra", [("raw", ""), ("ascii", "byte skip: 3\n"), ("text", "line skip: 0\n")])
def test_nrrd_naming_an_outside_data_file_is_refused_without_quoting_it(tmp_path, outside, encoding, extra):
    for key in ("data file", "datafile"):
        p = tmp_path / f"study_{encoding}_{key.replace(' ', '')}.nrrd"
        p.write_text(f"NRRD0004\ntype: unsigned char\ndimension: 2\nsizes: 8 8\nencoding: {encoding}\n{extra}"
                     f"{key}: {outside}\n\n")
        _refused_as_study_and_label(p, "separate data file")


def test_nrrd_data_file_list_and_detached_headers_are_refused(tmp_path, outside):
    p = tmp_path / "list.nrrd"
    p.write_text(f"NRRD0004\ntype: unsigned char\ndimension: 3\nsizes: 8 8 1\nencoding: raw\n"
                 f"data file: LIST\n{outside}\n\n")
    _refused(p, "separate data file")
    nhdr = tmp_path / "x.nhdr"
    nhdr.write_text(f"NRRD0004\ntype: unsigned char\ndimension: 2\nsizes: 8 8\nencoding: raw\n"
                    f"data file: {outside.name}\n\n")
    _refused(nhdr, "detached")


def test_a_nifti_pair_header_and_a_metaimage_posing_as_nrrd_are_refused(tmp_path, outside):
    import nibabel as nib

    img = nib.Nifti1Pair(np.zeros((8, 8), np.uint8), np.eye(4))
    nib.save(img, str(tmp_path / "pair.img"))  # writes pair.hdr + pair.img ("ni1" magic)
    posing = tmp_path / "pair.nii"
    posing.write_bytes((tmp_path / "pair.hdr").read_bytes())
    _refused(posing, "separate file")
    meta = tmp_path / "meta.nrrd"
    meta.write_text(f"ObjectType = Image\nNDims = 2\nDimSize = 8 8\nElementType = MET_UCHAR\n"
                    f"ElementDataFile = {outside}\n")
    _refused(meta, "content")


def test_self_contained_nrrd_and_nifti_still_read(tmp_path):
    import SimpleITK as sitk

    arr = ramp()
    for name in ("ok.nrrd", "ok.nii", "ok.nii.gz"):
        sitk.WriteImage(sitk.GetImageFromArray(arr), str(tmp_path / name), name.endswith(".gz"))
        assert np.array_equal(read_study(tmp_path / name).frames[0].pixels[..., 0] > 0, arr > 0)
        assert read_header(tmp_path / name)[0] == arr.shape


# ---- DICOM: deflate and JPEG frames bounded by the header --------------------------------------------------


def test_a_deflated_dicom_reads_like_the_plain_one(tmp_path):
    arr = ramp()
    study = read_study(dicom_deflated(tmp_path / "d.dcm", arr))
    assert np.array_equal(study.frames[0].pixels[..., 0], arr)
    assert read_header(tmp_path / "d.dcm")[0] == (1,) + arr.shape



def test_deflated_dicom_is_bounded_by_every_frame_and_sample_it_declares(tmp_path):
    """The inflate limit is all the pixel bytes the header declares: a 4-frame clip and an RGB image (each over the
    slack a limit of one grey frame would leave) read whole, and the pixel cap counts every frame."""
    from umind_core.imageio.dicom_bounds import read_dicom

    clip = np.random.default_rng(0).integers(0, 255, (4, 256, 256)).astype(np.uint8)
    study = read_study(dicom_deflated(tmp_path / "clip.dcm", clip, frames=4))
    assert len(study.frames) == 4 and np.array_equal(study.frames[3].pixels[..., 0], clip[3])
    rgb = np.random.default_rng(1).integers(0, 255, (200, 200, 3)).astype(np.uint8)
    assert np.array_equal(read_study(dicom_deflated(tmp_path / "rgb.dcm", rgb)).frames[0].pixels, rgb)
    with pytest.raises(ImageReadError, match="262,144 pixels declared; at most 100,000"):
        read_dicom(tmp_path / "clip.dcm", max_pixels=100_000)


def test_a_deflated_header_that_inflates_without_end_is_refused(tmp_path):
    """Before the pixel data, a deflated data set may inflate at most HEADER_INFLATE_MAX bytes of header."""
    from umind_core.imageio.dicom_bounds import HEADER_INFLATE_MAX

    path = dicom_deflated(tmp_path / "h.dcm", ramp(), header_bytes=HEADER_INFLATE_MAX + 1024)
    assert path.stat().st_size < 100_000
    with pytest.raises(ImageReadError, match="header is over"):
        read_study(path)

def test_a_deflate_bomb_is_refused_while_it_inflates(tmp_path):
    bomb = dicom_deflated(tmp_path / "bomb.dcm", np.zeros((64, 64), np.uint8), pixel_bytes=bytes(200 * 1024 * 1024))
    assert bomb.stat().st_size < 1_000_000  # 200 MB of pixels in a file this small
    tracemalloc.start()
    try:
        with pytest.raises(ImageReadError, match="inflates past"):
            read_study(bomb)
        assert read_header(bomb)[0] == (1, 64, 64)  # the header alone: nothing past it is inflated
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 16 * 1024 * 1024, peak


def test_a_jpeg_frame_larger_than_the_data_set_declares_is_refused_before_decoding(tmp_path):
    path = dicom_jpeg_frame_larger_than_declared(tmp_path / "big_frame.dcm")
    tracemalloc.start()
    try:
        with pytest.raises(ImageReadError, match="3000 x 3000"):
            read_study(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 4 * 1024 * 1024, peak


# ---- spacing that is not a positive finite length is unknown --------------------------------------------


@pytest.mark.parametrize("spacing", [(0.0, 0.0), (-0.2, 0.3), (float("nan"), 0.3), (1e308, 1e308),
                                     (float("inf"), 0.2)])
def test_pixel_spacing_that_is_not_a_usable_length_is_unknown(tmp_path, spacing):
    study = read_study(dicom_mono(tmp_path / "s.dcm", pixel_spacing=spacing))
    assert study.geometry.spacing_known is False
    assert study.frames[0].spacing is None
    assert all(np.isfinite(study.geometry.spacing))
    assert line_length((0, 0, 3, 4), study.frames[0].spacing).unit == "px"
    assert line_length((0, 0, 3, 4), (1e308, 1e308)).unit == "px"  # no inf reaches a reply


def test_a_good_spacing_is_still_read(tmp_path):
    study = read_study(dicom_mono(tmp_path / "s.dcm", pixel_spacing=(0.2, 0.3)))
    assert study.geometry.spacing_known and study.frames[0].spacing == (0.3, 0.2)


# ---- MetaImage: read where NIfTI is, only with its data in the same file ------------------------------------


@pytest.mark.parametrize("value", ["{outside}", "LIST\n{outside}", "secret%01d.txt 1 2 1", "../outside/secret.txt"])
def test_a_metaimage_naming_its_data_elsewhere_is_refused_without_quoting_it(tmp_path, outside, value):
    for suffix in (".mha", ".mhd"):
        p = tmp_path / f"study{suffix}"
        p.write_text("ObjectType = Image\nNDims = 2\nDimSize = 8 8\nElementType = MET_UCHAR\n"
                     f"ElementDataFile = {value.format(outside=outside)}\n")
        _refused_as_study_and_label(p, "separate data file")


def test_a_metaimage_without_its_data_line_or_posing_is_refused(tmp_path, outside):
    p = tmp_path / "nodata.mha"
    p.write_text("ObjectType = Image\nNDims = 2\nDimSize = 8 8\n")
    _refused(p, "no ElementDataFile")
    png = tmp_path / "png.mha"
    from PIL import Image

    Image.fromarray(ramp()).save(png, format="PNG")
    _refused(png, "content is png")


def test_self_contained_metaimage_reads_with_its_spacing(tmp_path):
    import SimpleITK as sitk

    arr = ramp()
    for name in ("ok.mha", "ok_local.mhd"):
        img = sitk.GetImageFromArray(arr)
        img.SetSpacing((0.3, 0.45))
        if name.endswith(".mhd"):  # ITK writes a .mhd with a .raw beside it; one file with LOCAL is the same image
            sitk.WriteImage(img, str(tmp_path / "tmp.mha"))
            (tmp_path / name).write_bytes((tmp_path / "tmp.mha").read_bytes())
        else:
            sitk.WriteImage(img, str(tmp_path / name), True)  # compressed data, still LOCAL
        study = read_study(tmp_path / name)
        assert np.array_equal(study.frames[0].pixels[..., 0] > 0, arr > 0)
        assert study.frames[0].spacing == pytest.approx((0.3, 0.45))
        assert read_header(tmp_path / name)[0] == arr.shape
