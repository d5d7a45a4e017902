"""Makers of small imaging files (PNG, JPEG, DICOM, NIfTI, NRRD) for tests.

No real ultrasound DICOM is available offline, so these build the variants clinics send:
single- and multi-frame, grey and colour, YBR 4:2:2, palette colour, RLE and JPEG compressed,
spacing in PixelSpacing or in SequenceOfUltrasoundRegions (cm).
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
from PIL import Image

US_IMAGE_STORAGE = "1.2.840.10008.5.1.4.1.1.6.1"
US_MULTIFRAME_STORAGE = "1.2.840.10008.5.1.4.1.1.3.1"


def ramp(h: int = 48, w: int = 64, seed: int = 0) -> np.ndarray:
    """A uint8 grey image with structure in both directions (so transposes show)."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w]
    img = (x * 3 + y * 2 + rng.integers(0, 20, size=(h, w))) % 256
    return img.astype(np.uint8)


def colour(h: int = 48, w: int = 64, seed: int = 0) -> np.ndarray:
    g = ramp(h, w, seed)
    return np.stack([g, 255 - g, (g.astype(int) * 7 % 256).astype(np.uint8)], axis=-1)


def write_png(path: Path, arr: np.ndarray, mode: str | None = None) -> Path:
    Image.fromarray(arr, mode=mode).save(path)
    return path


# DICOM -------------------------------------------------------------------------------------


def _dataset(path: Path, sop_class: str, transfer_syntax: str | None = None):
    from pydicom.dataset import FileDataset, FileMetaDataset
    from pydicom.uid import ExplicitVRLittleEndian, generate_uid

    meta = FileMetaDataset()
    meta.MediaStorageSOPClassUID = sop_class
    meta.MediaStorageSOPInstanceUID = generate_uid()
    meta.TransferSyntaxUID = transfer_syntax or ExplicitVRLittleEndian
    meta.ImplementationClassUID = generate_uid()
    ds = FileDataset(str(path), {}, file_meta=meta, preamble=b"\0" * 128)
    ds.is_little_endian = True
    ds.is_implicit_VR = False
    ds.SOPClassUID = sop_class
    ds.SOPInstanceUID = meta.MediaStorageSOPInstanceUID
    ds.StudyInstanceUID = generate_uid()
    ds.SeriesInstanceUID = generate_uid()
    ds.Modality = "US"
    ds.PatientName = "Test^Phantom"
    ds.PatientID = "0"
    ds.Manufacturer = "UMind tests"
    return ds


def _set_pixels(ds, arr: np.ndarray, photometric: str, frames: int = 1) -> None:
    colour_ = arr.ndim == (4 if frames > 1 else 3)
    ds.SamplesPerPixel = 3 if colour_ else 1
    ds.PhotometricInterpretation = photometric
    if colour_:
        ds.PlanarConfiguration = 0
    h, w = arr.shape[(1 if frames > 1 else 0):][:2]
    ds.Rows, ds.Columns = h, w
    bits = arr.dtype.itemsize * 8
    ds.BitsAllocated = bits
    ds.BitsStored = bits
    ds.HighBit = bits - 1
    ds.PixelRepresentation = 0
    if frames > 1:
        ds.NumberOfFrames = frames
        ds.FrameTime = 33.3
    ds.PixelData = np.ascontiguousarray(arr).tobytes()


def region(x0: int, y0: int, x1: int, y1: int, dx_cm: float, dy_cm: float, units: int = 3,
           spatial_format: int = 1):
    from pydicom.dataset import Dataset

    r = Dataset()
    r.RegionSpatialFormat = spatial_format
    r.RegionDataType = 1
    r.RegionFlags = 0
    r.RegionLocationMinX0 = x0
    r.RegionLocationMinY0 = y0
    r.RegionLocationMaxX1 = x1
    r.RegionLocationMaxY1 = y1
    r.PhysicalUnitsXDirection = units
    r.PhysicalUnitsYDirection = units
    r.PhysicalDeltaX = dx_cm
    r.PhysicalDeltaY = dy_cm
    return r


def dicom_mono(path: Path, arr: np.ndarray | None = None, pixel_spacing=(0.2, 0.3),
               photometric: str = "MONOCHROME2") -> Path:
    """Single-frame US image; pixel_spacing is DICOM order (row, col)."""
    arr = ramp() if arr is None else arr
    ds = _dataset(path, US_IMAGE_STORAGE)
    _set_pixels(ds, arr, photometric)
    if pixel_spacing is not None:
        ds.PixelSpacing = [float(pixel_spacing[0]), float(pixel_spacing[1])]
    ds.save_as(str(path), write_like_original=False)
    return path


def dicom_multiframe_rgb(path: Path, n: int = 3, regions=None) -> tuple[Path, np.ndarray]:
    arr = np.stack([colour(seed=i) for i in range(n)])
    ds = _dataset(path, US_MULTIFRAME_STORAGE)
    _set_pixels(ds, arr if n > 1 else arr[0], "RGB", frames=n)  # one frame: no frame axis in the data
    from pydicom.sequence import Sequence

    ds.SequenceOfUltrasoundRegions = Sequence(
        regions if regions is not None else [region(4, 6, 59, 41, 0.015, 0.02)])
    ds.save_as(str(path), write_like_original=False)
    return path, arr


def dicom_mono_multiframe(path: Path, n: int = 4, rle: bool = False) -> tuple[Path, np.ndarray]:
    arr = np.stack([ramp(seed=i) for i in range(n)])
    ds = _dataset(path, US_MULTIFRAME_STORAGE)
    _set_pixels(ds, arr, "MONOCHROME2", frames=n)
    if rle:
        from pydicom.uid import RLELossless

        ds.compress(RLELossless)
    ds.save_as(str(path), write_like_original=False)
    return path, arr


def smooth_colour(h: int = 48, w: int = 64) -> np.ndarray:
    """Colour constant over horizontal pixel pairs, so 4:2:2 chroma loses nothing."""
    y, x = np.mgrid[0:h, 0:w]
    xp = x // 2 * 2
    return np.stack([(xp * 4) % 256, (y * 5) % 256, np.full_like(x, 128)], -1).astype(np.uint8)


def ybr422_bytes(rgb: np.ndarray) -> bytes:
    """Uncompressed YBR_FULL_422 pixel data (Y0 Y1 Cb Cr per pixel pair) of an RGB frame of even width."""
    from pydicom.pixel_data_handlers.util import convert_color_space

    ybr = convert_color_space(rgb, "RGB", "YBR_FULL").astype(np.float64)
    h, w = rgb.shape[:2]
    y = ybr[..., 0]
    cb = ybr[:, 0::2, 1] * 0.5 + ybr[:, 1::2, 1] * 0.5
    cr = ybr[:, 0::2, 2] * 0.5 + ybr[:, 1::2, 2] * 0.5
    packed = np.empty((h, w // 2, 4), dtype=np.float64)
    packed[..., 0], packed[..., 1] = y[:, 0::2], y[:, 1::2]
    packed[..., 2], packed[..., 3] = cb, cr
    return np.clip(np.rint(packed), 0, 255).astype(np.uint8).tobytes()


def dicom_ybr422(path: Path) -> tuple[Path, np.ndarray]:
    """Uncompressed YBR_FULL_422 (Y0 Y1 Cb Cr per pixel pair), built by hand from RGB."""
    rgb = smooth_colour()
    ds = _dataset(path, US_IMAGE_STORAGE)
    _set_pixels(ds, rgb, "YBR_FULL_422")
    ds.PixelData = ybr422_bytes(rgb)
    ds.save_as(str(path), write_like_original=False)
    return path, rgb


def dicom_jpeg_ybr(path: Path) -> tuple[Path, np.ndarray]:
    """JPEG Baseline (lossy, YBR_FULL_422) encoded by Pillow and encapsulated."""
    from pydicom.encaps import encapsulate
    from pydicom.uid import JPEGBaseline8Bit

    rgb = smooth_colour()
    buf = io.BytesIO()
    Image.fromarray(rgb).save(buf, format="JPEG", quality=95, subsampling=1)
    ds = _dataset(path, US_IMAGE_STORAGE, JPEGBaseline8Bit)
    _set_pixels(ds, rgb, "YBR_FULL_422")
    ds.PixelData = encapsulate([buf.getvalue()])
    ds["PixelData"].is_undefined_length = True
    ds["PixelData"].VR = "OB"
    ds.LossyImageCompression = "01"
    ds.save_as(str(path), write_like_original=False)
    return path, rgb


def dicom_jpeg2000(path: Path) -> tuple[Path, np.ndarray]:
    """JPEG 2000 lossless (grey) encoded by Pillow as a raw codestream and encapsulated."""
    from pydicom.encaps import encapsulate
    from pydicom.uid import JPEG2000Lossless

    grey = ramp()
    buf = io.BytesIO()
    Image.fromarray(grey).save(buf, format="JPEG2000", irreversible=False, no_jp2=True)
    ds = _dataset(path, US_IMAGE_STORAGE, JPEG2000Lossless)
    _set_pixels(ds, grey, "MONOCHROME2")
    ds.PixelData = encapsulate([buf.getvalue()])
    ds["PixelData"].is_undefined_length = True
    ds["PixelData"].VR = "OB"
    ds.save_as(str(path), write_like_original=False)
    return path, grey


def with_regions(path: Path, col_mm: float, row_mm: float) -> Path:
    """The file's only calibration becomes one ultrasound region over the whole image (mm given, cm stored)."""
    import pydicom
    from pydicom.sequence import Sequence

    ds = pydicom.dcmread(str(path))
    for key in ("PixelSpacing", "ImagerPixelSpacing"):
        if key in ds:
            delattr(ds, key)
    ds.SequenceOfUltrasoundRegions = Sequence([region(0, 0, int(ds.Columns) - 1, int(ds.Rows) - 1,
                                                      col_mm / 10, row_mm / 10)])
    ds.save_as(str(path), write_like_original=False)
    return path


def palette_lut() -> np.ndarray:
    """256 x 3 uint16 palette (16-bit entries, as most vendors write)."""
    i = np.arange(256)
    return np.stack([i * 257, (255 - i) * 257, (i * 3 % 256) * 257], -1).astype(np.uint16)


def dicom_palette(path: Path) -> tuple[Path, np.ndarray, np.ndarray]:
    idx = ramp()
    lut = palette_lut()
    ds = _dataset(path, US_IMAGE_STORAGE)
    _set_pixels(ds, idx, "PALETTE COLOR")
    for c, key in enumerate(("Red", "Green", "Blue")):
        setattr(ds, f"{key}PaletteColorLookupTableDescriptor", [256, 0, 16])
        setattr(ds, f"{key}PaletteColorLookupTableData", lut[:, c].astype("<u2").tobytes())
    ds.save_as(str(path), write_like_original=False)
    return path, idx, lut


def dicom_without_pixels(path: Path) -> Path:
    ds = _dataset(path, US_IMAGE_STORAGE)
    ds.Rows, ds.Columns = 48, 64
    ds.save_as(str(path), write_like_original=False)
    return path


# NIfTI / NRRD ------------------------------------------------------------------------------


def rotation(angle: float = 0.4) -> tuple[float, ...]:
    """A proper rotation about an oblique axis, row-major."""
    c, s = np.cos(angle), np.sin(angle)
    rz = np.array([[c, -s, 0], [s, c, 0], [0, 0, 1]])
    rx = np.array([[1, 0, 0], [0, c, -s], [0, s, c]])
    return tuple((rz @ rx).ravel())


def sitk_volume(path: Path, arr: np.ndarray, spacing=(0.5, 0.7, 1.3), origin=(10.0, -4.0, 2.5),
                direction: tuple[float, ...] | None = None, metadata: dict | None = None) -> Path:
    """Write a numpy (z, y, x) array with SimpleITK (LPS geometry, as read back)."""
    import SimpleITK as sitk

    img = sitk.GetImageFromArray(arr)
    n = img.GetDimension()
    img.SetSpacing(tuple(spacing[:n]))
    img.SetOrigin(tuple(origin[:n]))
    img.SetDirection(direction if direction is not None else tuple(np.eye(n).ravel()))
    for k, v in (metadata or {}).items():
        img.SetMetaData(k, v)
    sitk.WriteImage(img, str(path))
    return path


def volume_array(z: int = 10, y: int = 20, x: int = 24) -> np.ndarray:
    """float32 (z, y, x) with every voxel distinct, so slicing mistakes are visible."""
    return np.arange(z * y * x, dtype=np.float32).reshape(z, y, x) * 0.5 - 100.0


def nifti_cine_4d(path: Path, t: int = 5, y: int = 16, x: int = 20) -> tuple[Path, np.ndarray]:
    """(x, y, 1, t) NIfTI, the usual 2D+t layout."""
    import nibabel as nib

    rng = np.random.default_rng(3)
    data = rng.random((x, y, 1, t)).astype(np.float32)
    img = nib.Nifti1Image(data, np.diag([0.3, 0.4, 1.0, 1.0]))
    img.header.set_xyzt_units("mm", "sec")
    img.header["pixdim"][4] = 0.05
    nib.save(img, str(path))
    return path, np.transpose(data[:, :, 0, :], (2, 1, 0))  # (t, y, x)


def nrrd_cine(path: Path, t: int = 4, y: int = 16, x: int = 20) -> tuple[Path, np.ndarray]:
    import nrrd

    rng = np.random.default_rng(5)
    data = rng.integers(0, 1000, size=(t, y, x)).astype(np.uint16)
    nrrd.write(str(path), data, {"kinds": ["domain", "domain", "time"],
                                 "space": "left-posterior-superior",
                                 "space directions": np.array([[0.25, 0, 0], [0, 0.35, 0],
                                                               [np.nan] * 3]),
                                 "space origin": [1.0, 2.0, 3.0]}, index_order="C")
    return path, data


def dicom_deflated(path: Path, arr: np.ndarray, pixel_bytes: bytes | None = None, frames: int = 1,
                   header_bytes: int = 0) -> Path:
    """A Deflated Explicit VR Little Endian file, its data set deflated by hand (`pixel_bytes` may lie about the
    size Rows x Columns declare: a decompression bomb). `arr` (H, W), (H, W, 3) for RGB, or (frames, H, W[, 3]);
    `header_bytes` adds a private element that long before the pixel data (a header that inflates without end)."""
    import zlib

    from pydicom.filebase import DicomBytesIO
    from pydicom.filewriter import write_dataset, write_file_meta_info
    from pydicom.uid import DeflatedExplicitVRLittleEndian

    ds = _dataset(path, US_IMAGE_STORAGE, DeflatedExplicitVRLittleEndian)
    _set_pixels(ds, arr, "RGB" if arr.ndim == (4 if frames > 1 else 3) else "MONOCHROME2", frames)
    if pixel_bytes is not None:
        ds.PixelData = pixel_bytes
    if header_bytes:
        ds.add_new(0x00090010, "LO", "UMIND TEST")
        ds.add_new(0x00091010, "OB", bytes(header_bytes))
    body = DicomBytesIO()
    body.is_little_endian, body.is_implicit_VR = True, False
    write_dataset(body, ds)
    deflater = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
    packed = deflater.compress(body.getvalue()) + deflater.flush()
    meta = DicomBytesIO()
    meta.is_little_endian, meta.is_implicit_VR = True, False
    write_file_meta_info(meta, ds.file_meta)
    path.write_bytes(b"\0" * 128 + b"DICM" + meta.getvalue() + packed)
    return path


def dicom_jpeg_frame_larger_than_declared(path: Path, side: int = 3000, declared: int = 64) -> Path:
    """A JPEG Baseline DICOM whose one frame is side x side pixels while Rows x Columns say declared x declared."""
    from pydicom.encaps import encapsulate
    from pydicom.uid import JPEGBaseline8Bit

    buf = io.BytesIO()
    Image.fromarray(np.zeros((side, side), np.uint8)).save(buf, format="JPEG", quality=50)
    ds = _dataset(path, US_IMAGE_STORAGE, JPEGBaseline8Bit)
    _set_pixels(ds, np.zeros((declared, declared), np.uint8), "MONOCHROME2")
    ds.PixelData = encapsulate([buf.getvalue()])
    ds["PixelData"].is_undefined_length = True
    ds["PixelData"].VR = "OB"
    ds.save_as(str(path), write_like_original=False)
    return path
