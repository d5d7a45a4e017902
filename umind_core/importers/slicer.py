"""A folder of 3D Slicer exports -> manifest records.

Images (NRRD, NIfTI, PNG/JPEG, DICOM; one frame each) with, beside them, ``.seg.nrrd`` segmentations and
``.mrk.json`` markups. A segmentation or markups file belongs to the image whose file stem its own stem equals,
or starts with followed by ``_``, ``-``, ``.`` or a space (``case1.seg.nrrd``, ``case1_landmarks.mrk.json`` ->
``case1.nrrd``); the longest such stem wins. Files that match no image, and label map volumes
(``*-label.nrrd``, which Slicer exports beside segmentations), are skipped with a reason.

- Segments: names from the header keys ``Segment{i}_Name``, pixels where layer ``Segment{i}_Layer`` holds
  ``Segment{i}_LabelValue`` (older files without them: one layer per segment, value 1). The segmentation is
  resampled onto the image's grid (nearest neighbour, by physical position), because Slicer may save it with
  another extent. An empty segment is a negative; lesion kinds give one object per blob (`common.is_lesion_kind`).
- Markups (LPS when ``coordinateSystem`` says so, else RAS with x and y flipped; `imageio.read_markups_json`):
  fiducials -> keypoints (control-point labels as names), lines -> `Line` with their two points and a length from
  the image's spacing (none without one), ROIs -> boxes (the pixels whose centres lie inside). Points go to pixels
  with SimpleITK's ``TransformPhysicalPointToContinuousIndex`` on the image as Slicer loads it. They join the object
  whose label is the markup's name, else a new object of that name. A markup with a point off the image (outside
  it, or more than half a slice away from its plane) is left out and counted; other markup types (angles,
  curves, planes) too. A markup's label is its ``name`` when the file has one; Slicer itself writes none (it
  names a loaded node after its file), so else the file name after the image's stem and separator
  (``case1_kidney length.mrk.json`` -> "kidney length"), else "landmarks", "line" or "region".

Slicer's default names (`is_default_name`: ``Segmentation``, and the markups nodes ``F``, ``L``, ``R``, ``A``,
``OC``, ``CC``, ``P``, each also with ``_1``, ``_2``..) name no image and no structure, decided here:
- Matching: a default-named export (``Segmentation.seg.nrrd``, ``L.mrk.json``) that matches no image by stem belongs
  to the folder's only image, since saving one image's scene writes exactly that; in a folder of several images it
  is skipped with a reason naming it (it cannot say whose it is).
- Labels: a default name is never a label, so a line called "L" never becomes the prompt "Measure the L". A
  default-named (or unnamed) markup is labelled by the markup's ``description``; else, where the image's
  segmentation holds one structure, a fiducial list joins that structure and a line is its measurement (the
  organ's own line of `landmarks.ORGANS`, "kidney" -> "kidney length", else "<structure> length"); else a line is
  the site's measurement (``--site kidney`` -> "kidney length", ``fetal_head`` -> "BPD"); else "landmarks", "line"
  or "region".
"""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import numpy as np

from ..data.manifest import Annotations, Keypoint, Line, ManifestObject, Record
from ..imageio import line_length
from .common import ImportContext, RowSkipped, SourceError, label_name, mask_pieces

DESCRIPTION = "folder of Slicer exports: images with <stem>.seg.nrrd and <stem>*.mrk.json beside them"

_IMAGE_SUFFIXES = (".nrrd", ".nhdr", ".nii.gz", ".nii", ".png", ".jpg", ".jpeg", ".dcm")
_SEP = ("_", "-", ".", " ")
#: Labels of unnamed markups whose file name adds nothing to the image's (Slicer names nodes after files)
_DEFAULT_NAMES = {"Fiducial": "landmarks", "Line": "line", "ROI": "region"}
#: the names Slicer gives a new segmentation and new markups nodes (then "_1", "_2".. for the next ones)
_SLICER_DEFAULT = re.compile(r"^(segmentation|f|l|r|a|oc|cc|p|markupsfiducial|markupsline|markupsroi)(_\d+)?$",
                             re.IGNORECASE)


def is_default_name(name: object) -> bool:
    """Whether `name` is one Slicer gives a node by default ("L", "F_1", "Segmentation"): it names nothing."""
    return isinstance(name, str) and bool(_SLICER_DEFAULT.match(name.strip()))


def _line_word(structure: str | None, site: str | None) -> str | None:
    """What a default-named line measures: the structure's own line (`landmarks.ORGANS`) or "<structure> length";
    without a structure, the site's organ's line; None when neither says."""
    from ..answers.landmarks import ORGANS

    if structure:
        organ = ORGANS.get(structure.lower())
        return organ.line if organ else f"{structure} length"
    organ = ORGANS.get(label_name(site or "").lower())
    return organ.line if organ else None


class _OffImage(Exception):
    """A markup point that does not lie on the image."""


def _stem(path: Path, suffixes) -> str | None:
    low = path.name.lower()
    for s in suffixes:
        if low.endswith(s):
            return path.name[: -len(s)]
    return None


def _reference(image: Path):
    """The image's grid as a 3D SimpleITK image (a 2D file gets a unit-thick third axis), as Slicer places it."""
    import SimpleITK as sitk

    reader = sitk.ImageFileReader()
    reader.SetFileName(str(image))
    try:
        reader.ReadImageInformation()
    except RuntimeError as exc:
        raise RowSkipped("unreadable file", f"{image}: {str(exc).strip().splitlines()[-1]}") from None
    size, sp, org = list(reader.GetSize()), list(reader.GetSpacing()), list(reader.GetOrigin())
    d = np.asarray(reader.GetDirection(), dtype=np.float64).reshape(len(size), len(size))
    if len(size) == 2:
        size, sp, org = size + [1], sp + [1.0], org + [0.0]
        d3 = np.eye(3)
        d3[:2, :2] = d
        d = d3
    ref = sitk.Image([int(v) for v in size[:3]], sitk.sitkUInt8)
    ref.SetSpacing([float(v) for v in sp[:3]])
    ref.SetOrigin([float(v) for v in org[:3]])
    ref.SetDirection([float(v) for v in d[:3, :3].ravel()])
    return ref


def _segment_table(img, n_layers: int) -> list[tuple[str, int, int]]:
    """(name, layer, value) per segment from the Segment{i}_* header keys."""
    keys = set(img.GetMetaDataKeys())
    out, i = [], 0
    while f"Segment{i}_Name" in keys or f"Segment{i}_ID" in keys:
        name = img.GetMetaData(f"Segment{i}_Name") if f"Segment{i}_Name" in keys else img.GetMetaData(f"Segment{i}_ID")
        if f"Segment{i}_LabelValue" in keys:
            value = int(img.GetMetaData(f"Segment{i}_LabelValue"))
            layer = int(img.GetMetaData(f"Segment{i}_Layer")) if f"Segment{i}_Layer" in keys else 0
        else:
            layer, value = (i, 1) if n_layers > 1 else (0, i + 1)
        out.append((label_name(name), layer, value))
        i += 1
    return out


def _segments(seg_path: Path, ref) -> list[tuple[str, np.ndarray]]:
    """(label, mask) per object of a .seg.nrrd, on the reference image's (H, W) grid."""
    import SimpleITK as sitk

    try:
        img = sitk.ReadImage(str(seg_path))
    except RuntimeError as exc:
        raise RowSkipped("unreadable segmentation", f"{seg_path}: {str(exc).strip().splitlines()[-1]}") from None
    n_layers = img.GetNumberOfComponentsPerPixel()
    table = _segment_table(img, n_layers)
    if not table:
        raise RowSkipped("segmentation without Segment0_Name in its header", str(seg_path))
    layers = []
    for k in range(n_layers):
        layer = sitk.VectorIndexSelectionCast(img, k) if n_layers > 1 else img
        if layer.GetDimension() == 2:
            layer = sitk.JoinSeries(layer)
        res = sitk.Resample(layer, ref, sitk.Transform(), sitk.sitkNearestNeighbor, 0, layer.GetPixelID())
        layers.append(sitk.GetArrayFromImage(res)[0])
    out = []
    for name, layer, value in table:
        if layer >= n_layers:
            raise RowSkipped("segment names a layer the file does not have", f"{seg_path}: {name} layer {layer}")
        out += [(name, m) for m in mask_pieces(layers[layer] == value, name)]
    return out


def _to_pixel(ref, p_lps, w: int, h: int) -> tuple[float, float]:
    i, j, k = ref.TransformPhysicalPointToContinuousIndex([float(v) for v in p_lps])
    if abs(k) > 0.5 or not (-0.5 <= i <= w - 0.5 and -0.5 <= j <= h - 0.5):
        raise _OffImage
    return float(i), float(j)


def _roi_box(ref, m: dict, w: int, h: int) -> tuple[int, int, int, int]:
    """The in-plane pixels whose centres lie inside the ROI (its 8 corners projected, axis-aligned)."""
    c, half = np.asarray(m["center_lps"]), np.asarray(m["size"], dtype=np.float64) / 2
    axes = np.asarray(m["orientation_lps"], dtype=np.float64).reshape(3, 3)
    corners = [c + axes @ (half * np.array(s)) for s in itertools.product((-1, 1), repeat=3)]
    ij = np.array([ref.TransformPhysicalPointToContinuousIndex([float(v) for v in p]) for p in corners])
    if ij[:, 2].min() > 0.5 or ij[:, 2].max() < -0.5:
        raise _OffImage
    x1, y1 = max(int(np.ceil(ij[:, 0].min())), 0), max(int(np.ceil(ij[:, 1].min())), 0)
    x2, y2 = min(int(np.floor(ij[:, 0].max())), w - 1), min(int(np.floor(ij[:, 1].max())), h - 1)
    if x1 > x2 or y1 > y2:
        raise _OffImage
    return x1, y1, x2, y2


def _target(objects: list[ManifestObject], label: str) -> ManifestObject:
    obj = next((o for o in objects if o.label == label), None)
    if obj is None:
        obj = ManifestObject(label=label)
        objects.append(obj)
    return obj


def _labels(m: dict, file_label: str, structure: str | None, site: str | None) -> tuple[str, str]:
    """(the object a markup joins, the markup's own name) by the rules of the module docstring."""
    kind = m.get("type")
    named = next((n for n in (m.get("name"), file_label) if n and not is_default_name(n)), None)
    if named or m.get("description"):
        label = label_name(named or m["description"])
        return label, label
    if kind == "Fiducial" and structure:
        return structure, structure
    if kind == "Line":
        word = _line_word(structure, site)
        if word:
            return structure or word, word
    label = _DEFAULT_NAMES.get(kind, "markup")
    return label, label


def _add_markup(objects: list[ManifestObject], m: dict, ref, w: int, h: int, spacing, file_label: str,
                site: str | None = None) -> None:
    kind = m.get("type")
    structures = list(dict.fromkeys(o.label for o in objects if o.mask is not None))
    target, label = _labels(m, file_label, structures[0] if len(structures) == 1 else None, site)
    if kind == "Fiducial":
        pts = [_to_pixel(ref, p, w, h) for p in m["points_lps"]]
        names = [str(n) or f"{label}-{i + 1}" for i, n in enumerate(m["point_labels"])]
        _target(objects, target).keypoints += [Keypoint(n, p) for n, p in zip(names, pts)]
    elif kind == "Line":
        if len(m["points_lps"]) != 2:
            raise RowSkipped("line markup without two points")
        (x1, y1), (x2, y2) = (_to_pixel(ref, p, w, h) for p in m["points_lps"])
        xy = (x1, y1, x2, y2)
        _target(objects, target).lines.append(Line(label, xy, line_length(xy, spacing).mm))
    elif kind == "ROI" and "center_lps" in m:
        box = _roi_box(ref, m, w, h)
        obj = next((o for o in objects if o.label == label and o.box is None), None)
        if obj is None:
            objects.append(ManifestObject(label=label, box=box))
        else:
            obj.box = box
    else:
        raise RowSkipped(f"markup type {kind} not imported")


def _markups(ctx: ImportContext, path: Path, objects, ref, w: int, h: int, spacing, file_label: str) -> None:
    from ..imageio import MarkupsError, read_markups_json

    try:
        markups = read_markups_json(path)
    except MarkupsError as exc:
        raise RowSkipped("unreadable markups", str(exc)) from None
    for m in markups:
        try:
            _add_markup(objects, m, ref, w, h, spacing, file_label, ctx.site)
        except _OffImage:
            ctx.log.drop("markup point off the image")
        except RowSkipped as exc:
            ctx.log.drop(exc.reason)


def _record(ctx: ImportContext, image: Path, segs: list[Path], marks: list[Path], source: Path) -> Record:
    rid = ctx.new_id(_stem(image, _IMAGE_SUFFIXES))
    placed = ctx.place_image(image, rid)
    ref = _reference(image)
    w, h = placed.width, placed.height
    if tuple(ref.GetSize()[:2]) != (w, h):
        raise RowSkipped("image grid differs from its frame", f"{image}: {ref.GetSize()} vs {(w, h)}")
    pieces = [piece for seg in segs for piece in _segments(seg, ref)]  # one unreadable file skips the image:
    objects = ctx.mask_objects(pieces, rid)                             # its segments would read as negatives
    stem = _stem(image, _IMAGE_SUFFIXES) or ""
    for mk in marks:
        mk_stem = _stem(mk, (".mrk.json",)) or ""
        file_label = mk_stem[len(stem) + 1:] if mk_stem.startswith(stem) else mk_stem  # a default name: "L"
        _markups(ctx, mk, objects, ref, w, h, placed.spacing, file_label)
    files = [p.relative_to(source).as_posix() for p in [image, *segs, *marks]]
    return Record(id=rid, image=placed.rel, spacing=placed.spacing, site=ctx.site,
                          annotations=Annotations(objects=objects),
                          extra={"source": {"format": "slicer", "path": files[0], "files": files[1:]}}, root=ctx.out)


def _pair(ctx: ImportContext, source: Path) -> dict[Path, tuple[list[Path], list[Path]]]:
    """image -> (segmentations, markups) by file stem."""
    files = sorted(p for p in source.rglob("*") if p.is_file())
    segs = [p for p in files if p.name.lower().endswith(".seg.nrrd")]
    marks = [p for p in files if p.name.lower().endswith(".mrk.json")]
    images = {p: _stem(p, _IMAGE_SUFFIXES) for p in files if p not in segs and _stem(p, _IMAGE_SUFFIXES)}
    for p in [p for p, s in images.items() if s.lower().endswith(("-label", "_label"))]:
        del images[p]  # Slicer's label map volumes: not images, and not read as segmentations either
        ctx.log.skip(p.relative_to(source).as_posix(), "label map volume (export segmentations as .seg.nrrd)")
    out = {p: ([], []) for p in images}
    for kind, group, suffix in ((0, segs, (".seg.nrrd",)), (1, marks, (".mrk.json",))):
        for f in group:
            stem = _stem(f, suffix)
            beside = [im for im in images if im.parent == f.parent]
            hits = [im for im in beside if stem == images[im]
                    or (stem.startswith(images[im]) and stem[len(images[im])] in _SEP)]
            if not hits and is_default_name(stem) and len(beside) == 1:
                hits = beside  # one image's scene saved with Slicer's default names
            if not hits:
                why = (f"Slicer default name in a folder of {len(beside)} images (name it after its image)"
                       if is_default_name(stem) and beside else "no image with a matching name")
                ctx.log.skip(f.relative_to(source).as_posix(), why)
                continue
            out[max(hits, key=lambda im: len(images[im]))][kind].append(f)
    return out


def read(source: Path, ctx: ImportContext) -> list[Record]:
    """One record per image of the folder (and its subfolders)."""
    if not source.is_dir():
        raise SourceError(f"{source}: not a folder (expected a folder of Slicer exports)")
    pairs = _pair(ctx, source)
    if not pairs:
        raise SourceError(f"{source}: no images ({', '.join(_IMAGE_SUFFIXES)}) in the folder")
    records = []
    for image, (segs, marks) in ctx.bar(pairs.items(), "slicer", total=len(pairs)):
        rec = ctx.attempt(image.relative_to(source).as_posix(), _record, ctx, image, segs, marks, source)
        if rec is not None:
            records.append(rec)
    return records
