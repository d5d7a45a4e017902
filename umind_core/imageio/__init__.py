"""Ultrasound image I/O: files in, RGB frames with geometry out; label maps and markups back.

The model only ever sees H x W x 3 uint8 RGB frames, but everything it says must be written back
in the geometry of the file it came from (Slicer overlays label maps by physical position, not by
pixel index). So every reader returns a `Geometry` next to the frames, and every writer takes one.

Conventions (the single place where they are decided):

* Pixel coordinates ``(x, y)`` are continuous ITK index coordinates of a frame: x along columns,
  y along rows, integer values at pixel centres.
* Physical coordinates are LPS millimetres, as ITK (and therefore SimpleITK and Slicer files) use.
  ``p = origin + direction @ (spacing * (i, j, k))`` with ``(i, j, k)`` the ITK index (x, y, z).
* Cine clips and volumes are 3D images; numpy arrays are ``(z, y, x)`` = ``N x H x W``.
  A volume read with ``axis=a`` is sliced along numpy axis ``a``: axis 0 gives (y, x) frames,
  axis 1 gives (z, x) frames, axis 2 gives (z, y) frames; label maps passed to
  `write_label_map` are in that same frame-stack order and are transposed back.
* Cine vs volume for 3D NIfTI/NRRD (a 3D array cannot say which it is, so the rule is explicit):
  a 4D NIfTI with a single z slice (x, y, 1, t) is cine; a NRRD whose third axis has kind
  ``time`` is cine; a NIfTI whose ``intent_name`` or ``descrip`` contains the word "cine" is cine;
  every other 3D array is a volume. 4D data with more than one z slice and more than one time
  point has no frame layout we can honour and is rejected.
* Intensity: 8-bit PNG/JPEG and 8-bit DICOM keep their values (they are display-ready);
  everything else (16-bit PNG, 16-bit DICOM, any NIfTI/NRRD) is min-max windowed to uint8 over
  the whole study, never per frame, so that frames stay comparable. Non-finite values are
  replaced by the finite minimum; a constant image is valid and becomes all zeros.
* DICOM files without a suffix are accepted when they carry the ``DICM`` preamble marker,
  because clinics often export them that way.

The package's modules, each the one owner of its part: `formats` (which format a file is, by name as the readers
decode it or by content: `detect_format`, `sniff_format`), `opening` (a study is one self-contained file: the checks before any decoder opens one, the ITK
reader pinned to its format, decoder text kept out of messages), `headers` (a header's shape and pixel size
before decoding: `read_header`), `dicom_bounds` (DICOM read
with every inflation bounded by the declared size), `readers` (files -> frames + geometry), `geometry`
(`Frame`, `Geometry`, `Study`, pixel <-> LPS, frame axes, and `line_length`: the one owner of every length
UMind reports), `writers` (label maps and images out, and
`read_label_map` beside `write_label_map`), `markups` (.mrk.json out and in), `overlays` (quick-look PNGs),
`errors`. Import from the package: its names are the public ones.
"""

from __future__ import annotations

from .errors import ImageReadError, ImageWriteError, MarkupsError
from .formats import CONTENT_FORMATS, detect_format, sniff_format  # noqa: F401
from .geometry import (HEADER, ULTRASOUND_REGIONS, Frame, Geometry, Length, Study,  # noqa: F401
                       frame_axes_lps, frame_itk_axes, frame_normal_axis, frame_spacing, line_length,
                       physical_to_pixel, pixel_to_physical, ras_to_lps, stack_from_volume, with_frame_spacing)
from .opening import checked_format, decoder_failure, sitk_reader  # noqa: F401
from .headers import read_header  # noqa: F401
from .markups import MARKUPS_SCHEMA, parse_markups, read_markups_json, write_markups_json
from .overlays import write_overlay_png
from .readers import (MAX_PIXELS, MAX_SIDE, MIN_SIDE, SUPPORTED_SUFFIXES, read_image,  # noqa: F401
                      read_study, window_uint8)
from .writers import (LABEL_MAP_SUFFIXES, label_map_suffix, read_label_map, write_image,  # noqa: F401
                      write_label_map)

# Beyond __all__, the names callers reach as umind_core.imageio.X stay here too: frame_itk_axes,
# frame_normal_axis, stack_from_volume, the size caps, LABEL_MAP_SUFFIXES, CONTENT_FORMATS.

__all__ = [
    "window_uint8",
    "ImageReadError",
    "ImageWriteError",
    "MarkupsError",
    "Frame",
    "Geometry",
    "Study",
    "Length",
    "line_length",
    "with_frame_spacing",
    "SUPPORTED_SUFFIXES",
    "detect_format",
    "sniff_format",
    "read_header",
    "checked_format",
    "sitk_reader",
    "MARKUPS_SCHEMA",
    "read_study",
    "read_image",
    "frame_spacing",
    "write_label_map",
    "read_label_map",
    "write_image",
    "label_map_suffix",
    "write_markups_json",
    "read_markups_json",
    "parse_markups",
    "pixel_to_physical",
    "physical_to_pixel",
    "frame_axes_lps",
    "write_overlay_png",
    "ras_to_lps",
]
