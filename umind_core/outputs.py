"""Viewer outputs from Results: one label stack across the frames of an input, and markups named by frame.

`umind infer` (`batch.write_outputs`) and the server's infer tasks (`monailabel_app/lib/infers/base.py`) both
turn per-frame Results into the files Slicer loads. The rules those files obey live here, once, so the CLI and
the server cannot drift apart:

* The label stack covers every frame of the input (frames without an answer stay 0). A label name keeps one
  value across all frames, so a cine clip's "lesion" is the same value in every frame; values are given in
  order of first appearance and where objects overlap the smaller keeps its pixels (a nodule inside its gland):
  `painter.LabelPainter`'s rule, which `Result.label_map` paints one frame with.
* A 2D image's label map is its one frame; a clip's or a volume's is the whole stack.
* Markups of a multi-frame input carry "(frame N)" in their names, since Slicer shows them all at once.
* The files lie in `Study.output_geometry`: where the viewer shows the image, with the calibrated spacing, so a
  line's length from its markup coordinates is the length the results state (`imageio.line_length`).
* Nothing found writes the same empty, loadable files from the CLI and the server (`write_viewer_files`): a
  label map of zeros in the image's geometry and a markups file with one empty point list named
  "umind: nothing found (<targets>)" (Slicer cannot load an empty markups list).
* Answers that are not answers (`Result.unparsable`) are not results: an input whose every answer is one gets
  no label map and no markups, only the warning.

Who names a mask is the caller's choice (the server names it after the requested target, the CLI after the
object's label or the requested target); everything else is decided here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np

from .imageio import Geometry, Study, frame_spacing, write_label_map, write_markups_json
from .painter import LabelPainter
from .answers.results import Result

__all__ = ["OutputError", "TooManyLabels", "LabelStack", "label_stack", "box_mask", "frame_markups", "ViewerFiles",
           "write_viewer_files", "nothing_found_name", "all_unparsable", "geometry_info"]


class OutputError(ValueError):
    """Results that do not fit the input they answer (a mask of another size than the frames)."""


class TooManyLabels(OutputError):
    """More distinct labels than a caller's label map may hold (`write_viewer_files`' ``max_labels``)."""


@dataclass
class LabelStack:
    """Label values of every frame of one input, the name of each value, and which object got which value."""

    geometry: Geometry
    #: (n_frames, H, W); None while no object has a mask (nothing allocated for an empty answer)
    array: np.ndarray | None = None
    #: label name -> value, in order of first appearance
    values: dict[str, int] = field(default_factory=dict)
    #: per result: object index -> the value its mask was painted with
    object_values: list[dict[int, int]] = field(default_factory=list)

    def volume(self) -> np.ndarray:
        """What a label-map file holds: uint8 while the values fit, the one frame of a 2D image."""
        if self.array is None:
            h, w = self.geometry.frame_shape
            self.array = np.zeros((self.geometry.n_frames, h, w), dtype=np.uint8)
        return self.array[0] if self.geometry.kind == "2d" else self.array

    def write(self, path: str | Path, viewer: Geometry | None = None) -> Path:
        """Write the label map where the viewer shows the image (`Study.viewer_geometry`), atomically."""
        return write_label_map(self.volume(), viewer or self.geometry, path)


def box_mask(box: Sequence[float], h: int, w: int) -> np.ndarray:
    """The pixels a box covers, both edges included, clipped to the frame."""
    x1, y1, x2, y2 = box
    m = np.zeros((h, w), dtype=bool)
    m[max(int(np.floor(y1)), 0):min(int(np.ceil(y2)) + 1, h),
      max(int(np.floor(x1)), 0):min(int(np.ceil(x2)) + 1, w)] = True
    return m


def label_stack(results: Sequence[Result], geometry: Geometry, names: Sequence[str | None] | None = None,
                fallback: str | None = None, fill_boxes: bool = False) -> LabelStack:
    """Paint every result's masks into one stack over the input's frames.

    A mask is named ``names[k]`` for the k-th result when given (the server's requested target), else by the
    object's label, else ``fallback`` or "object N" (its 1-based index in the result). ``fill_boxes`` paints a
    box where an object has no mask (a label map from a detection). Values past 255 widen the stack to uint16
    (`painter.LabelPainter` paints it).
    """
    out = LabelStack(geometry)
    h, w = geometry.frame_shape
    painter = LabelPainter((geometry.n_frames, h, w))
    for k, res in enumerate(results):
        override = names[k] if names is not None else None
        painted: dict[int, int] = {}
        for i, obj in enumerate(res.objects):
            mask = obj.mask
            if mask is None and fill_boxes and obj.box is not None:
                mask = box_mask(obj.box, h, w)
            if mask is None:
                continue
            if mask.shape != (h, w):
                raise OutputError(f"{res.source}: frame {res.frame_index} has masks of shape {mask.shape}, "
                                  f"the input's frames are {(h, w)}")
            painted[i] = painter.paint(override or obj.label or fallback or f"object {i + 1}", mask, res.frame_index)
        out.object_values.append(painted)
    out.array, out.values = painter.array, painter.values
    return out


def frame_markups(results: Sequence[Result], geometry: Geometry) -> list[dict]:
    """Every result's markups in ``geometry`` (the viewer's), named "<name> (frame N)" on multi-frame inputs."""
    out = []
    for res in results:
        for m in res.to_markups(geometry):
            if geometry.n_frames > 1:
                m["name"] = f"{m['name']} (frame {res.frame_index})"
            out.append(m)
    return out


def nothing_found_name(targets: Sequence[str | None]) -> str:
    """The name of the empty point list a markups file holds when nothing was found, naming what was asked."""
    asked = ", ".join(sorted({t for t in targets if t})) or "nothing asked"
    return f"umind: nothing found ({asked})"


def all_unparsable(results: Sequence[Result]) -> bool:
    """True when there are answers and none of them is a result (`Result.unparsable`): then no file is written."""
    return bool(results) and all(r.unparsable for r in results)


@dataclass
class ViewerFiles:
    """What `write_viewer_files` wrote: the label stack (its values name the segments) and the two paths."""

    stack: LabelStack
    labels: Path | None = None
    markups: Path | None = None


def write_viewer_files(results: Sequence[Result], study: Study, geometry: Geometry, *,
                       labels_to: str | Path | None = None, markups_to: str | Path | None = None,
                       markups: list[dict] | None = None, targets: Sequence[str | None] = (),
                       names: Sequence[str | None] | None = None, fallback: str | None = None,
                       fill_boxes: bool = False, max_labels: int | None = None) -> ViewerFiles:
    """Write an input's label map (to ``labels_to``) and markups (to ``markups_to``) in ``geometry`` (the
    study's `output_geometry`), the one writer `umind infer` and the server's infer tasks share.

    Why one writer: the CLI wrote no file when nothing was found while the server wrote empty ones, and a
    degenerate answer still became a label map. Here a path given means that file is written, found or not
    (zeros; one empty point list named by `nothing_found_name` of ``targets``), unless every answer is
    unparsable (`all_unparsable`), when neither is. ``markups`` defaults to `frame_markups` in ``geometry``;
    ``names``, ``fallback`` and ``fill_boxes`` go to `label_stack`; more than ``max_labels`` distinct labels
    raise `TooManyLabels` before anything is written.
    """
    stack = label_stack(results, study.geometry, names=names, fallback=fallback, fill_boxes=fill_boxes)
    if max_labels is not None and len(stack.values) > max_labels:
        raise TooManyLabels(f"{len(stack.values)} distinct labels do not fit one label map (at most {max_labels})")
    out = ViewerFiles(stack)
    if all_unparsable(results):
        return out
    if labels_to is not None:
        out.labels = stack.write(labels_to, geometry)
    if markups_to is not None:
        items = frame_markups(results, geometry) if markups is None else markups
        out.markups = write_markups_json(items, markups_to, empty_name=nothing_found_name(targets))
    return out


def geometry_info(study: Study, geometry: Geometry) -> dict:
    """What a reply or results.json says about the geometry its files are in, so a client can place them.

    ``calibrated`` says whether the files carry the calibrated spacing; ``spacing_source`` where it comes from:
    "ultrasound_regions" (a DICOM's ultrasound regions, which a viewer reading the file itself does not see:
    give its volume ``frame_spacing``), "header" (the file's own header), or None when the files are not
    calibrated (an image without spacing, or a client that shows the file as ITK reads it): their units are
    pixels. ``calibration`` is the study's calibrated spacing and its source, whatever the files use."""
    in_plane = frame_spacing(geometry)
    calibrated = study.geometry.spacing_known and geometry.spacing_known and \
        all(abs(a - b) <= 1e-9 + 1e-6 * abs(b) for a, b in zip(in_plane, frame_spacing(study.geometry)))
    source = study.spacing_source if calibrated else None
    return {"kind": geometry.kind, "spacing": list(geometry.spacing), "origin": list(geometry.origin),
            "direction": list(geometry.direction), "frame_spacing": list(in_plane), "calibrated": calibrated,
            "spacing_source": source,
            "calibration": {"frame_spacing": list(frame_spacing(study.geometry)) if study.spacing_source else None,
                            "source": study.spacing_source}}
