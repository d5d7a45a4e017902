"""Readers, writers and coordinate conversions of umind_core.imageio, on files made here."""

from __future__ import annotations

import json

import numpy as np
import pytest
import SimpleITK as sitk
from PIL import Image

import fixtures_imaging as F
from umind_core import imageio
from umind_core.imageio import (
    Geometry, ImageReadError, ImageWriteError, MarkupsError, physical_to_pixel,
    pixel_to_physical, read_image, read_markups_json, read_study, write_label_map,
    write_markups_json, write_overlay_png,
)


def _valid_frame(frame, h=48, w=64):
    assert frame.pixels.shape == (h, w, 3)
    assert frame.pixels.dtype == np.uint8


# PNG / JPEG ---------------------------------------------------------------------------------


def test_png_grey_is_replicated_and_has_no_mm(tmp_path):
    g = F.ramp()
    p = F.write_png(tmp_path / "g.png", g)
    study = read_study(p)
    f = study.frames[0]
    _valid_frame(f)
    assert all(np.array_equal(f.pixels[..., c], g) for c in range(3))
    assert f.spacing is None and f.scan_mask is None and f.index == 0 and f.source == str(p)
    geo = study.geometry
    assert (geo.kind, geo.shape, geo.format, geo.spacing_known) == ("2d", (48, 64), "png", False)
    assert geo.spacing == (1.0, 1.0)


def test_png_rgb_and_rgba(tmp_path):
    rgb = F.colour()
    assert np.array_equal(read_image(F.write_png(tmp_path / "c.png", rgb)).pixels, rgb)
    rgba = np.concatenate([rgb, np.full(rgb.shape[:2] + (1,), 7, np.uint8)], -1)
    f = read_image(F.write_png(tmp_path / "a.png", rgba))
    assert np.array_equal(f.pixels, rgb)  # alpha is dropped, colour kept


def test_png_palette(tmp_path):
    idx = (F.ramp() % 4).astype(np.uint8)
    pal = [255, 0, 0, 0, 255, 0, 0, 0, 255, 9, 99, 199]
    im = Image.fromarray(idx, mode="P")
    im.putpalette(pal + [0] * (768 - len(pal)))
    im.save(tmp_path / "p.png")
    f = read_image(tmp_path / "p.png")
    expected = np.array(pal, np.uint8).reshape(4, 3)[idx]
    assert np.array_equal(f.pixels, expected)


def test_png_16bit_min_max(tmp_path):
    a = (np.arange(48 * 64).reshape(48, 64) * 7 + 1000).astype(np.uint16)
    Image.fromarray(a).save(tmp_path / "d.png")
    assert Image.open(tmp_path / "d.png").mode.startswith("I")
    f = read_image(tmp_path / "d.png")
    grey = f.pixels[..., 0]
    assert grey.min() == 0 and grey.max() == 255
    assert grey[0, 0] == 0 and grey[-1, -1] == 255
    assert np.all(np.diff(grey.ravel().astype(int)) >= 0)  # monotone like the input


def test_png_16bit_constant_is_valid(tmp_path):
    Image.fromarray(np.full((16, 16), 4000, np.uint16)).save(tmp_path / "k.png")
    f = read_image(tmp_path / "k.png")
    assert f.pixels.shape == (16, 16, 3) and not f.pixels.any()


def test_jpeg(tmp_path):
    rgb = F.smooth_colour()
    Image.fromarray(rgb).save(tmp_path / "j.jpg", quality=95)
    f = read_image(tmp_path / "j.jpg")
    _valid_frame(f)
    assert np.abs(f.pixels.astype(int) - rgb).mean() < 4
    assert read_study(tmp_path / "j.jpg").geometry.format == "jpeg"


# DICOM --------------------------------------------------------------------------------------


def test_dicom_mono_pixel_spacing_is_row_col(tmp_path):
    g = F.ramp()
    p = F.dicom_mono(tmp_path / "m.dcm", g, pixel_spacing=(0.2, 0.3))
    study = read_study(p)
    f = study.frames[0]
    assert np.array_equal(f.pixels[..., 1], g)
    assert f.spacing == pytest.approx((0.3, 0.2))  # (x = column, y = row)
    geo = study.geometry
    assert geo.kind == "2d" and geo.format == "dicom" and geo.spacing_known
    assert geo.origin == (0.0, 0.0)
    assert pixel_to_physical(geo, 0, 10, 5) == pytest.approx((3.0, 1.0, 0.0))
    assert study.meta["SOPClassUID"] == F.US_IMAGE_STORAGE
    assert study.meta["spacing_source"] == "PixelSpacing"


def test_dicom_monochrome1_inverted_and_16bit_windowed(tmp_path):
    g = F.ramp()
    f = read_image(F.dicom_mono(tmp_path / "m1.dcm", g, photometric="MONOCHROME1"))
    assert np.array_equal(f.pixels[..., 0], 255 - g)
    g16 = (F.ramp().astype(np.uint16) * 40 + 500)
    f16 = read_image(F.dicom_mono(tmp_path / "m16.dcm", g16, pixel_spacing=None))
    assert f16.pixels[..., 0].min() == 0 and f16.pixels[..., 0].max() == 255
    assert f16.spacing is None
    order = np.argsort(g16.ravel(), kind="stable")
    assert np.all(np.diff(f16.pixels[..., 0].ravel()[order].astype(int)) >= 0)


def test_dicom_multiframe_rgb_regions_in_cm(tmp_path):
    p, arr = F.dicom_multiframe_rgb(tmp_path / "mf.dcm", n=3)
    study = read_study(p)
    assert len(study.frames) == 3
    for i, f in enumerate(study.frames):
        assert f.index == i and np.array_equal(f.pixels, arr[i])
        assert f.spacing == pytest.approx((0.15, 0.2))  # 0.015 cm, 0.02 cm -> mm
    m = study.frames[0].scan_mask
    assert m.shape == (48, 64) and m.dtype == bool
    assert m[6:42, 4:60].all() and m.sum() == 36 * 56  # inclusive bounds 4..59, 6..41
    geo = study.geometry
    assert (geo.kind, geo.shape) == ("cine", (3, 48, 64))
    assert geo.spacing == pytest.approx((0.15, 0.2, 1.0))
    assert study.meta["spacing_source"] == "SequenceOfUltrasoundRegions"
    assert study.meta["FrameTime"] == pytest.approx(33.3)
    sub = read_study(p, frames=[2, 0])
    assert [f.index for f in sub.frames] == [2, 0]
    assert np.array_equal(sub.frames[0].pixels, arr[2])


@pytest.mark.parametrize("units", [0, 1, 2, 4, 5, 7])  # none, percent, dB, seconds, hertz, cm/s: not lengths
def test_dicom_region_units_other_than_cm_give_no_spacing(tmp_path, units):
    p, _ = F.dicom_multiframe_rgb(tmp_path / "db.dcm", n=2,
                                  regions=[F.region(0, 0, 63, 47, 0.5, 0.5, units=units)])
    study = read_study(p)
    assert study.frames[0].spacing is None and not study.geometry.spacing_known
    assert study.frames[0].scan_mask.all()  # the region still marks the scan area



def test_dicom_spacing_comes_from_the_tissue_region_and_ignores_the_deltas_sign(tmp_path):
    """A Doppler strip (spatial format 3) listed first is calibrated too; the 2D tissue region's spacing is the
    image's. A region whose axes run the other way (negative PhysicalDeltaX/Y) has the same spacing."""
    doppler = F.region(0, 30, 63, 47, 0.05, 0.05, spatial_format=3)
    tissue = F.region(4, 6, 59, 29, -0.015, -0.02)
    p, _ = F.dicom_multiframe_rgb(tmp_path / "two.dcm", n=2, regions=[doppler, tissue])
    study = read_study(p)
    assert study.frames[0].spacing == pytest.approx((0.15, 0.2))
    assert study.meta["spacing_source"] == "SequenceOfUltrasoundRegions"


def test_the_pixel_cap_counts_every_frame_before_decoding(tmp_path, monkeypatch):
    """A clip is checked as a whole: 3 frames of 64 x 48 (9,216 pixels) are refused under a 7,000-pixel cap that
    one frame (3,072) and two (6,144) pass."""
    from umind_core.imageio import readers

    monkeypatch.setattr(readers, "MAX_PIXELS", 7_000)
    two, _ = F.dicom_multiframe_rgb(tmp_path / "two.dcm", n=2)
    assert len(read_study(two).frames) == 2
    three, _ = F.dicom_multiframe_rgb(tmp_path / "three.dcm", n=3)
    with pytest.raises(ImageReadError, match="9216 pixels; at most 7000"):
        read_study(three)

def test_dicom_ybr_full_422(tmp_path):
    p, rgb = F.dicom_ybr422(tmp_path / "y.dcm")
    f = read_image(p)
    assert np.abs(f.pixels.astype(int) - rgb).max() <= 2


def test_dicom_palette_colour(tmp_path):
    p, idx, lut = F.dicom_palette(tmp_path / "pal.dcm")
    f = read_image(p)
    assert np.array_equal(f.pixels, (lut[idx] // 257).astype(np.uint8))


def test_dicom_rle_lossless_multiframe(tmp_path):
    p, arr = F.dicom_mono_multiframe(tmp_path / "rle.dcm", n=4, rle=True)
    study = read_study(p)
    assert study.meta["TransferSyntaxUID"] == "1.2.840.10008.1.2.5"
    assert np.array_equal(np.stack([f.pixels[..., 2] for f in study.frames]), arr)


def test_dicom_jpeg_baseline_ybr(tmp_path):
    p, rgb = F.dicom_jpeg_ybr(tmp_path / "jpg.dcm")
    f = read_image(p)
    assert np.abs(f.pixels.astype(int) - rgb).mean() < 4  # lossy, but colours right


def test_dicom_without_suffix_is_sniffed(tmp_path):
    p = F.dicom_mono(tmp_path / "IM0001")
    assert read_study(p).geometry.format == "dicom"


# NIfTI / NRRD -------------------------------------------------------------------------------


def test_nifti_volume_non_identity_direction(tmp_path):
    vol = F.volume_array()
    d = F.rotation()
    p = F.sitk_volume(tmp_path / "v.nii.gz", vol, direction=d)
    study = read_study(p)
    geo = study.geometry
    assert (geo.kind, geo.shape, geo.axis, geo.format) == ("volume", (10, 20, 24), 0, "nifti")
    assert geo.spacing == pytest.approx((0.5, 0.7, 1.3), abs=1e-5)
    assert geo.origin == pytest.approx((10.0, -4.0, 2.5), abs=1e-4)
    assert geo.direction == pytest.approx(d, abs=1e-5)
    assert len(study.frames) == 10
    stack = np.stack([f.pixels[..., 0] for f in study.frames]).astype(int)
    assert stack.min() == 0 and stack.max() == 255  # windowed over the volume...
    assert study.frames[0].pixels.max() < 40  # ... not per slice
    assert np.all(np.diff(stack.ravel()) >= 0)
    assert study.frames[0].spacing == pytest.approx((0.5, 0.7), abs=1e-5)


@pytest.mark.parametrize("axis,n,hw,spacing", [(1, 20, (10, 24), (0.5, 1.3)),
                                               (2, 24, (10, 20), (0.7, 1.3))])
def test_volume_other_axes(tmp_path, axis, n, hw, spacing):
    vol = F.volume_array()
    p = F.sitk_volume(tmp_path / "v.nrrd", vol, direction=F.rotation())
    study = read_study(p, axis=axis)
    assert len(study.frames) == n and study.geometry.axis == axis
    assert study.frames[0].pixels.shape[:2] == hw
    assert study.frames[0].spacing == pytest.approx(spacing, abs=1e-6)
    full = read_study(p).frames
    # the same voxel seen through both slicings has the same value
    k, x, y = 3, 5, 7  # frame k of `axis`, pixel (x, y)
    if axis == 1:
        z, yy, xx = y, k, x
    else:
        z, yy, xx = y, x, k
    assert study.frames[k].pixels[y, x, 0] == full[z].pixels[yy, xx, 0]


def test_nrrd_2d_keeps_geometry(tmp_path):
    g = F.ramp().astype(np.int16) - 50
    p = F.sitk_volume(tmp_path / "two.nrrd", g, spacing=(0.25, 0.4), origin=(3.0, 4.0),
                      direction=(0.0, 1.0, 1.0, 0.0))
    study = read_study(p)
    geo = study.geometry
    assert (geo.kind, geo.shape) == ("2d", (48, 64))
    assert geo.spacing == (0.25, 0.4) and geo.origin == (3.0, 4.0)
    assert geo.direction == (0.0, 1.0, 1.0, 0.0)
    assert study.frames[0].spacing == (0.25, 0.4)
    assert pixel_to_physical(geo, 0, 2, 1) == pytest.approx((3.4, 4.5, 0.0))


def test_nrrd_3d_volume(tmp_path):
    vol = (F.volume_array() + 200).astype(np.uint16)
    p = F.sitk_volume(tmp_path / "v.nrrd", vol)
    study = read_study(p, frames=[4])
    assert study.geometry.kind == "volume" and study.geometry.format == "nrrd"
    assert [f.index for f in study.frames] == [4]
    # windowing still uses the whole volume when only one slice is asked for
    assert study.frames[0].pixels.max() < 255 and study.frames[0].pixels.min() > 0


def test_nifti_4d_single_slice_is_cine(tmp_path):
    p, data = F.nifti_cine_4d(tmp_path / "c.nii.gz", t=5)
    study = read_study(p)
    geo = study.geometry
    assert (geo.kind, geo.shape) == ("cine", (5, 16, 20))
    assert geo.spacing == pytest.approx((0.3, 0.4, 0.05), abs=1e-6)
    assert len(geo.direction) == 9 and len(geo.origin) == 3
    expected = imageio.window_uint8(data, "x")
    assert np.array_equal(np.stack([f.pixels[..., 0] for f in study.frames]), expected)
    with pytest.raises(ImageReadError, match="cine"):
        read_study(p, axis=1)


def test_nrrd_time_kind_is_cine(tmp_path):
    p, data = F.nrrd_cine(tmp_path / "c.nrrd")
    study = read_study(p)
    assert study.geometry.kind == "cine" and study.geometry.shape == data.shape
    assert study.geometry.origin == (1.0, 2.0, 3.0)
    assert study.frames[0].spacing == (0.25, 0.35)


def test_nifti_descrip_cine_and_plain_3d_volume(tmp_path):
    import nibabel as nib

    vol = F.volume_array()
    img = nib.Nifti1Image(np.transpose(vol, (2, 1, 0)), np.diag([0.3, 0.4, 1.0, 1.0]))
    img.header["descrip"] = b"US cine clip"
    nib.save(img, str(tmp_path / "c.nii"))
    cine = tmp_path / "c.nii"
    plain = F.sitk_volume(tmp_path / "v.nii", vol)
    assert read_study(cine).geometry.kind == "cine"
    assert read_study(plain).geometry.kind == "volume"


@pytest.mark.parametrize("suffix", [".nrrd", ".nii.gz"])  # ITK reads a NIfTI's NaN as 0; nibabel puts it back
def test_nan_replaced_by_min(tmp_path, suffix):
    vol = F.volume_array()
    vol[2, 3, 4] = np.nan
    assert np.nanmin(vol) < 0  # so a NaN read as 0 would window above 0
    study = read_study(F.sitk_volume(tmp_path / f"n{suffix}", vol))
    assert study.frames[2].pixels[3, 4, 0] == 0
    assert study.frames[-1].pixels.max() == 255
    lowest = np.unravel_index(np.nanargmin(vol), vol.shape)
    assert study.frames[lowest[0]].pixels[lowest[1], lowest[2], 0] == 0


def test_constant_volume_is_zero(tmp_path):
    study = read_study(F.sitk_volume(tmp_path / "k.nii.gz", np.full((3, 9, 9), 5.0, np.float32)))
    assert len(study.frames) == 3 and not any(f.pixels.any() for f in study.frames)


# bad input ----------------------------------------------------------------------------------


def _truncate(p, keep=0.5):
    data = p.read_bytes()
    p.write_bytes(data[: int(len(data) * keep)])
    return p


def _write(p, data):
    p.write_bytes(data if isinstance(data, bytes) else data.encode())
    return p


def _huge_nrrd(p):
    """A header that declares 125 M pixels and holds none: refused from the header, before any is read."""
    p.write_text("NRRD0004\ntype: unsigned char\ndimension: 3\nsizes: 5000 5000 5\n"
                 "encoding: raw\n\n")
    return p


def _bad_inputs():
    def nifti_4d(t):
        import nibabel as nib

        p = t / "four.nii.gz"
        nib.save(nib.Nifti1Image(np.zeros((10, 10, 3, 4), np.float32), np.eye(4)), str(p))
        return p

    def all_nan(t):
        return F.sitk_volume(t / "nan.nrrd", np.full((3, 10, 10), np.nan, np.float32))

    def all_nan_nifti(t):  # ITK alone reads it as a blank volume
        return F.sitk_volume(t / "nan.nii.gz", np.full((3, 10, 10), np.nan, np.float32))

    def trunc_png(t):
        rng = np.random.default_rng(0)
        return _truncate(F.write_png(t / "t.png", rng.integers(0, 255, (64, 64), np.uint8)))

    def trunc_dicom(t):
        return _truncate(F.dicom_mono(t / "t.dcm"), 0.8)

    def trunc_nifti(t):
        rng = np.random.default_rng(0)
        return _truncate(F.sitk_volume(t / "t.nii.gz", rng.random((6, 30, 30)).astype(
            np.float32)))

    return {
        "missing": (lambda t: t / "nope.png", "does not exist"),
        "empty": (lambda t: _write(t / "e.dcm", b""), "empty"),
        "suffix": (lambda t: _write(t / "x.txt", "hello"), "unsupported"),
        "no suffix, not DICOM": (lambda t: _write(t / "blob", b"x" * 300), "unsupported"),
        "1x1": (lambda t: F.write_png(t / "one.png", np.zeros((1, 1), np.uint8)), "too small"),
        "tiny": (lambda t: F.write_png(t / "tiny.png", np.zeros((7, 40), np.uint8)),
                 "too small"),
        "tiny dicom": (lambda t: F.dicom_mono(t / "tiny.dcm", np.zeros((6, 6), np.uint8)),
                       "too small"),
        "huge side": (lambda t: F.write_png(t / "wide.png", np.zeros((8, 16385), np.uint8)),
                      "too large"),
        "huge pixels": (lambda t: _huge_nrrd(t / "huge.nrrd"), "too large"),
        "all nan": (all_nan, "NaN"),
        "all nan nifti": (all_nan_nifti, "NaN"),
        "4d": (nifti_4d, "unknown frame layout"),
        "no pixel data": (lambda t: F.dicom_without_pixels(t / "np.dcm"), "no PixelData"),
        "truncated png": (trunc_png, "cannot read png data"),
        "truncated dicom": (trunc_dicom, "cannot decode DICOM pixel data"),
        "truncated nifti": (trunc_nifti, "truncated"),
        "truncated nii": (lambda t: _truncate(F.sitk_volume(t / "t.nii", np.ones(
            (6, 30, 30), np.float32))), "truncated"),
        "not really dicom": (lambda t: _write(t / "fake.dcm", b"\0" * 400), "not a readable DICOM file"),
        "directory": (lambda t: (t / "d.nrrd").mkdir() or t / "d.nrrd", "directory"),
    }


@pytest.mark.parametrize("case", list(_bad_inputs()))
def test_bad_input_raises_naming_file(tmp_path, case):
    make, fragment = _bad_inputs()[case]
    path = make(tmp_path)
    with pytest.raises(ImageReadError) as info:
        read_study(path)
    assert fragment, "every case names the words its message must contain"
    assert str(path) in str(info.value)
    assert fragment.lower() in str(info.value).lower()
    assert isinstance(info.value, ValueError)


def test_bad_frame_index_and_axis(tmp_path):
    p, _ = F.dicom_multiframe_rgb(tmp_path / "mf.dcm", n=2)
    with pytest.raises(ImageReadError, match="out of range"):
        read_study(p, frames=[2])
    with pytest.raises(ImageReadError, match="axis"):
        read_study(p, axis=3)


# label maps ---------------------------------------------------------------------------------


@pytest.mark.parametrize("suffix", [".nii.gz", ".nrrd"])
def test_label_map_keeps_volume_geometry(tmp_path, suffix):
    d = F.rotation()
    p = F.sitk_volume(tmp_path / ("v" + suffix), F.volume_array(), direction=d)
    geo = read_study(p).geometry
    labels = np.zeros((10, 20, 24), np.uint8)
    labels[3, 5:9, 6:12] = 2
    out = write_label_map(labels, geo, tmp_path / ("lab" + suffix))
    img = sitk.ReadImage(str(out))
    assert img.GetSpacing() == pytest.approx(geo.spacing, abs=1e-5)
    assert img.GetOrigin() == pytest.approx(geo.origin, abs=1e-4)
    assert img.GetDirection() == pytest.approx(geo.direction, abs=1e-5)
    assert np.array_equal(sitk.GetArrayFromImage(img), labels)
    assert not list(tmp_path.glob(".tmp-*"))


def test_label_map_other_axis_lands_on_same_voxel(tmp_path):
    p = F.sitk_volume(tmp_path / "v.nrrd", F.volume_array(), direction=F.rotation())
    geo = read_study(p, axis=2).geometry
    stack = np.zeros((24, 10, 20), np.uint8)  # N x H x W for axis 2
    k, x, y = 17, 13, 4
    stack[k, y, x] = 9
    img = sitk.ReadImage(str(write_label_map(stack, geo, tmp_path / "lab.nrrd")))
    arr = sitk.GetArrayFromImage(img)
    assert arr.shape == (10, 20, 24) and arr.sum() == 9
    idx = img.TransformPhysicalPointToIndex(pixel_to_physical(geo, k, x, y))
    assert arr[idx[2], idx[1], idx[0]] == 9


def test_label_map_cine_uint16_and_2d_png(tmp_path):
    p, arr = F.dicom_multiframe_rgb(tmp_path / "mf.dcm", n=3)
    geo = read_study(p).geometry
    labels = np.zeros((3, 48, 64), np.uint16)
    labels[1, 2, 3] = 300
    img = sitk.ReadImage(str(write_label_map(labels, geo, tmp_path / "l.nrrd")))
    assert img.GetSpacing() == pytest.approx((0.15, 0.2, 1.0))
    assert sitk.GetArrayFromImage(img)[1, 2, 3] == 300
    geo2 = read_study(F.write_png(tmp_path / "g.png", F.ramp())).geometry
    lab2 = (F.ramp() > 100).astype(np.uint8) * 3
    out = write_label_map(lab2, geo2, tmp_path / "l.png")
    with Image.open(out) as im:
        assert im.mode == "L" and np.array_equal(np.asarray(im), lab2)


def test_label_map_rejects_mismatch(tmp_path):
    geo = read_study(F.write_png(tmp_path / "g.png", F.ramp())).geometry
    with pytest.raises(ImageWriteError, match="shape"):
        write_label_map(np.zeros((10, 10), np.uint8), geo, tmp_path / "l.png")
    with pytest.raises(ImageWriteError, match="integers"):
        write_label_map(np.zeros((48, 64), np.float32), geo, tmp_path / "l.png")
    with pytest.raises(ImageWriteError, match="written as"):
        write_label_map(np.zeros((48, 64), np.uint8), geo, tmp_path / "l.bmp")
    vgeo = read_study(F.sitk_volume(tmp_path / "v.nrrd", F.volume_array())).geometry
    with pytest.raises(ImageWriteError, match="PNG"):
        write_label_map(np.zeros((10, 20, 24), np.uint8), vgeo, tmp_path / "v.png")


# geometry -----------------------------------------------------------------------------------


@pytest.mark.parametrize("axis", [0, 1, 2])
def test_pixel_physical_inverse_and_matches_sitk(tmp_path, axis):
    p = F.sitk_volume(tmp_path / "v.nii.gz", F.volume_array(), direction=F.rotation())
    geo = read_study(p, axis=axis).geometry
    img = sitk.ReadImage(str(p))
    rng = np.random.default_rng(axis)
    col, row = {0: (0, 1), 1: (0, 2), 2: (1, 2)}[axis]
    for _ in range(20):
        k, x, y = rng.uniform(0, 9), rng.uniform(0, 10), rng.uniform(0, 9)
        lps = pixel_to_physical(geo, k, x, y)
        idx = [0.0, 0.0, 0.0]
        idx[col], idx[row] = x, y
        idx[3 - col - row] = k
        assert lps == pytest.approx(img.TransformContinuousIndexToPhysicalPoint(idx), abs=1e-6)
        assert physical_to_pixel(geo, None, lps) == pytest.approx((x, y, k), abs=1e-9)
        bx, by, bk = physical_to_pixel(geo, 2, lps)
        assert (bx, by, bk) == pytest.approx((x, y, 2))


def test_pixel_physical_2d_without_spacing_is_pixels(tmp_path):
    geo = read_study(F.write_png(tmp_path / "g.png", F.ramp())).geometry
    assert pixel_to_physical(geo, None, 12.5, 3.0) == (12.5, 3.0, 0.0)
    assert physical_to_pixel(geo, None, (12.5, 3.0, 0.0)) == (12.5, 3.0, 0.0)
    assert imageio.frame_spacing(geo) == (1.0, 1.0)


def test_geometry_dict_round_trip():
    g = Geometry(kind="volume", shape=(3, 4, 5), spacing=(1.0, 2.0, 3.0), origin=(1, 2, 3),
                 direction=tuple(np.eye(3).ravel()), axis=1, format="nrrd")
    assert Geometry.from_dict(json.loads(json.dumps(g.to_dict()))) == g


# markups ------------------------------------------------------------------------------------


def _markups():
    return [
        {"type": "Fiducial", "name": "apex", "points_ras": [[1.0, 2.0, 3.0], [-4.0, 5.0, 6.0]]},
        {"type": "Line", "name": "depth", "points_lps": [[0.0, 0.0, 0.0], [3.0, 4.0, 12.0]]},
        {"type": "ROI", "name": "nodule", "points_ras": [], "center": [10.0, 20.0, 30.0],
         "size": [4.0, 5.0, 1.0]},
    ]


def test_markups_json_round_trip(tmp_path):
    path = write_markups_json(_markups(), tmp_path / "m.mrk.json")
    doc = json.loads(path.read_text())
    assert doc["@schema"] == imageio.MARKUPS_SCHEMA
    assert all(m["coordinateSystem"] == "LPS" for m in doc["markups"])
    assert doc["markups"][0]["controlPoints"][0]["position"] == [-1.0, -2.0, 3.0]
    meas = doc["markups"][1]["measurements"][0]
    assert meas == {"name": "length", "enabled": True, "value": 13.0, "units": "mm",
                    "printFormat": "%-#4.4g%s"}
    back = read_markups_json(path)
    assert [m["type"] for m in back] == ["Fiducial", "Line", "ROI"]
    assert [m["name"] for m in back] == ["apex", "depth", "nodule"]
    assert back[0]["points_ras"] == [[1.0, 2.0, 3.0], [-4.0, 5.0, 6.0]]
    assert back[0]["points_lps"] == [[-1.0, -2.0, 3.0], [4.0, -5.0, 6.0]]
    assert back[1]["length_mm"] == pytest.approx(13.0)
    assert back[2]["center_ras"] == [10.0, 20.0, 30.0]
    assert back[2]["center_lps"] == [-10.0, -20.0, 30.0]
    assert back[2]["size"] == [4.0, 5.0, 1.0]


def test_markups_loaded_by_slicer(tmp_path):
    """Slicer's own storage nodes (slicer-core) read what we write, in the right place."""
    slicer = pytest.importorskip("slicer")
    scene = slicer.vtkMRMLScene()

    def load(node_cls, storage_cls, markup):
        node, sn = getattr(slicer, node_cls)(), getattr(slicer, storage_cls)()
        scene.AddNode(node)
        scene.AddNode(sn)
        node.SetAndObserveStorageNodeID(sn.GetID())
        path = write_markups_json([markup], tmp_path / f"{markup['name']}.mrk.json")
        sn.SetFileName(str(path))
        assert sn.ReadData(node) == 1
        assert node.GetName() == markup["name"]
        return node

    fid_m, line_m, roi_m = _markups()
    fid = load("vtkMRMLMarkupsFiducialNode", "vtkMRMLMarkupsJsonStorageNode", fid_m)
    assert fid.GetNumberOfControlPoints() == 2
    assert fid.GetNthControlPointPositionWorld(1) == pytest.approx((-4.0, 5.0, 6.0))  # RAS
    line = load("vtkMRMLMarkupsLineNode", "vtkMRMLMarkupsJsonStorageNode", line_m)
    assert line.GetLineLengthWorld() == pytest.approx(13.0)
    assert line.GetNthControlPointPositionWorld(1) == pytest.approx((-3.0, -4.0, 12.0))
    r = F.rotation()
    rot = dict(roi_m, name="tilted", orientation=list(r))
    for markup in (roi_m, rot):
        roi = load("vtkMRMLMarkupsROINode", "vtkMRMLMarkupsROIJsonStorageNode", markup)
        center = [0.0, 0.0, 0.0]
        roi.GetCenterWorld(center)
        assert center == pytest.approx([10.0, 20.0, 30.0])
        assert list(roi.GetSize()) == pytest.approx([4.0, 5.0, 1.0])
    x_axis = [0.0, 0.0, 0.0]
    roi.GetXAxisWorld(x_axis)  # the box's first axis is the orientation's first column
    assert x_axis == pytest.approx(np.array(r).reshape(3, 3)[:, 0], abs=1e-6)


def test_markups_reject_bad(tmp_path):
    with pytest.raises(MarkupsError, match="exactly 2"):
        write_markups_json([{"type": "Line", "name": "x", "points_lps": [[0, 0, 0]]}],
                           tmp_path / "a.mrk.json")
    with pytest.raises(MarkupsError, match="type"):
        write_markups_json([{"type": "Curve", "name": "x"}], tmp_path / "a.mrk.json")
    with pytest.raises(MarkupsError, match="3 finite numbers"):
        write_markups_json([{"type": "Fiducial", "points_lps": [[0, 0]]}], tmp_path / "a.json")
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(MarkupsError, match="bad.json"):
        read_markups_json(tmp_path / "bad.json")
    assert not (tmp_path / "a.mrk.json").exists()


# overlay ------------------------------------------------------------------------------------


def test_overlay_png(tmp_path):
    frame = read_image(F.write_png(tmp_path / "g.png", np.zeros((48, 64), np.uint8)))
    mask = np.zeros((48, 64), bool)
    mask[10:20, 10:20] = True
    out = write_overlay_png(frame, [mask], tmp_path / "o.png", boxes=[(30, 5, 60, 40)],
                            points=[(5, 40)], lines=[(0, 0, 20, 0)])
    with Image.open(out) as im:
        a = np.asarray(im)
    assert a.shape == (48, 64, 3)
    assert a[15, 15].any() and not a[25, 25].any()  # mask tinted, background untouched
    assert a[5, 45].any() and a[40, 5].any()
    with pytest.raises(ImageWriteError, match="mask 0"):
        write_overlay_png(frame, [np.zeros((4, 4), bool)], tmp_path / "o2.png")


def test_read_label_map_is_write_label_maps_reverse_in_frame_order(tmp_path):
    from umind_core.imageio import ImageReadError, read_label_map

    eye = tuple(float(v) for v in np.eye(3).ravel())
    vol = Geometry("volume", (4, 5, 6), (1.0, 2.0, 3.0), (0.0, 0.0, 0.0), eye, axis=2, format="nrrd")
    stack = np.zeros((vol.n_frames,) + vol.frame_shape, dtype=np.uint16)  # 6 frames of 4 x 5
    stack[1, 0, 0], stack[5, 3, 4] = 3, 300
    back = read_label_map(write_label_map(stack, vol, tmp_path / "v.nrrd"), vol)
    assert back.dtype == np.int64 and back.shape == (6, 4, 5) and np.array_equal(back, stack)
    flat = Geometry("2d", (4, 5), (1.0, 1.0), (0.0, 0.0), (1.0, 0.0, 0.0, 1.0))
    plane = np.arange(20, dtype=np.uint8).reshape(4, 5)
    assert np.array_equal(read_label_map(write_label_map(plane, flat, tmp_path / "p.png"), flat), plane[None])
    other = Geometry("2d", (5, 4), (1.0, 1.0), (0.0, 0.0), (1.0, 0.0, 0.0, 1.0))
    with pytest.raises(ImageReadError, match=r"p.png: label of shape \(1, 4, 5\) does not match the image "
                                             r"\(1 frames of 5x4\)"):
        read_label_map(tmp_path / "p.png", other)


def test_a_zero_spacing_is_no_calibration():
    from umind_core.imageio.geometry import usable_spacing

    assert usable_spacing((0.2, 0.3)) and not usable_spacing((0.0, 0.3)) and not usable_spacing((0.2, -0.1))


def test_a_closed_curve_drawn_elsewhere_measures_back_to_its_first_point(tmp_path):
    from umind_core.imageio import read_markups_json, write_markups_json
    from umind_core.imageio.markups import parse_markups

    square = [[0.0, 0.0, 0.0], [10.0, 0.0, 0.0], [10.0, 10.0, 0.0], [0.0, 10.0, 0.0]]
    path = write_markups_json([{"type": "ClosedCurve", "name": "c", "points_lps": square},
                               {"type": "Line", "name": "l", "points_lps": square[:2]}], tmp_path / "m.mrk.json")
    doc = json.loads(path.read_text())
    lengths = [m["measurements"][0]["value"] for m in doc["markups"]]
    assert lengths == pytest.approx([40.0, 10.0])
    for m in doc["markups"]:
        m["measurements"] = []  # a file from another tool states no length: the points are measured on reading
    assert [m["length_mm"] for m in parse_markups(doc)] == pytest.approx([40.0, 10.0])
    assert [m["length_mm"] for m in read_markups_json(path)] == pytest.approx([40.0, 10.0])


def test_windowing_rounds_so_the_brightest_value_is_255():
    out = imageio.window_uint8(np.linspace(100.0, 200.0, 1001), "x")
    assert out.min() == 0 and out.max() == 255 and out[2] == 1  # 100.2 -> 0.51 rounds to 1


def test_label_map_edges_suffix_values_and_frame_count(tmp_path):
    from umind_core.imageio import ImageReadError, label_map_suffix, read_label_map

    eye = tuple(float(v) for v in np.eye(3).ravel())
    vol = Geometry("volume", (4, 5, 6), (1.0, 2.0, 3.0), (0.0, 0.0, 0.0), eye, axis=0, format="nifti")
    flat = Geometry("2d", (4, 5), (1.0, 1.0), (0.0, 0.0), (1.0, 0.0, 0.0, 1.0), format="png")
    assert label_map_suffix(vol, ".png") == ".nii.gz"  # a PNG cannot hold a volume: the input's family instead
    assert label_map_suffix(flat, "png") == ".png" and label_map_suffix(vol, ".nrrd") == ".nrrd"
    with pytest.raises(ImageWriteError, match=r"0..65535, got -1..2"):
        write_label_map(np.array([[-1, 2, 0, 0, 0]] * 4, np.int16), flat, tmp_path / "neg.png")
    full = np.full((4, 5), 255, np.int32)
    with Image.open(write_label_map(full, flat, tmp_path / "full.png")) as im:  # 255 still fits 8 bits
        assert im.mode == "L" and np.asarray(im).max() == 255
    stack = np.zeros((4, 4, 5), np.uint8)  # 4 frames of a 6-frame volume
    short = Geometry("volume", (4, 4, 5), (1.0, 1.0, 1.0), (0.0, 0.0, 0.0), eye, axis=0, format="nrrd")
    path = write_label_map(stack, short, tmp_path / "short.nrrd")
    with pytest.raises(ImageReadError, match=r"does not match the image \(6 frames of 4x5\)"):
        read_label_map(path, Geometry("volume", (6, 4, 5), (1.0, 1.0, 1.0), (0.0, 0.0, 0.0), eye, axis=0,
                                      format="nrrd"))
