"""What the stock MONAILabel Slicer extension sends and can show, so UMind's replies land where it looks.

Read from its code (Project-MONAI/MONAILabel 0.8.5, plugins/slicer/MONAILabel/MONAILabel.py and
MONAILabelLib/client.py); tests/test_stock_extension_replay.py replays its requests against the real server:
- Every infer request carries `result_extension` (".nrrd") and `client_id`; the UMind Slicer module sends
  `umind_client` instead. A request with `result_extension` and without `umind_client` is the extension's.
- It creates one segment per /info label (the conf `labels`) when an image loads and imports a reply's label
  map by `label_names`, segment ids = names: a name it has no segment for is dropped without a word. So its
  targets must be those labels; any other is refused (400) with the fix, rather than answered into nothing.
  (Declaring a larger vocabulary in /info was the other way; a free-text model has no finite vocabulary, and
  every declared name would be an empty segment on every image.)
- Its interactive (deepgrow) request names the segment being edited in `label`; the reply is imported into
  that segment, so the label map holds that one value.
- With an ROI and no clicks, `slice` is `round(abs(Red view offset in mm))`, not a frame index.
- "Submit Label" sends `label_info` as a list of {"name", "idx"} in the order of the exported segments.
"""

from __future__ import annotations

from collections.abc import Sequence

from umind_core.imageio import Geometry, pixel_to_physical

from .wall.errors import BadRequest
from .wire import CLIENT_KEY

__all__ = ["UMIND_CLIENT_KEY", "is_stock_extension", "map_targets", "view_offset_frame", "frame_of_view",
           "label_names_from_list"]

#: params key the UMind Slicer module sets on every infer request (the wire contract's, `wire.CLIENT_KEY`)
UMIND_CLIENT_KEY = CLIENT_KEY


def is_stock_extension(request: dict) -> bool:
    return UMIND_CLIENT_KEY not in request and "result_extension" in request


def map_targets(targets: Sequence[str | None], segments: Sequence[str], task: str) -> list[str | None]:
    """Each target as the extension's segment of the same name (case and spaces aside); 400 for any other."""
    by_key = {" ".join(s.lower().split()): s for s in segments}
    out: list[str | None] = []
    for t in targets:
        if t is None:
            out.append(None)
            continue
        seg = by_key.get(" ".join(t.lower().split()))
        if seg is None:
            raise BadRequest(
                f"{task}: {t!r} has no segment in the MONAILabel extension, which makes one per /info label "
                f"({', '.join(segments)}) and drops other names. Prompt one of those, start the server with "
                f"--conf labels {','.join(list(segments) + [t.replace(' ', '')])} (names without spaces), or "
                "use the UMind Slicer module, which takes any target.")
        out.append(seg)
    return out


def view_offset_frame(slice_mm: object, roi: object, geometry: Geometry) -> int:
    """The frame whose plane lies at the extension's `slice` (round(abs(Red view offset)) in mm).

    A 2D image has one frame. Otherwise the frames whose centre's S coordinate rounds to that offset, kept to
    the ROI's k range when that narrows them; none or several is a 400 naming the fix (a click sends an index).
    """
    if geometry.n_frames == 1:
        return 0
    if isinstance(slice_mm, bool) or not isinstance(slice_mm, (int, float)):
        raise BadRequest(f"slice must be a number, got {slice_mm!r}")
    h, w = geometry.frame_shape
    z = [pixel_to_physical(geometry, k, (w - 1) / 2, (h - 1) / 2)[2] for k in range(geometry.n_frames)]
    hits = [k for k, zk in enumerate(z) if round(abs(zk)) == round(float(slice_mm))]
    if isinstance(roi, list) and len(roi) == 6 and len(hits) > 1:
        lo, hi = sorted((roi[4], roi[5]))
        inside = [k for k in hits if lo <= k <= hi]
        hits = inside or hits
    fix = "place a foreground click on the frame (the extension then sends its index), or use the UMind module"
    if not hits:
        raise BadRequest(f"slice {slice_mm} from the MONAILabel extension is the view's offset in mm, and no frame "
                         f"of this image lies there (frames at {min(z):.4g}..{max(z):.4g} mm): {fix}")
    if len(hits) > 1:
        raise BadRequest(f"slice {slice_mm} from the MONAILabel extension is the view's offset in mm, which "
                         f"frames {hits} all round to: {fix}")
    return hits[0]


def frame_of_view(request: dict, viewer_geometry: Geometry) -> dict:
    """The request with its `slice` as the frame index it means: the extension's ROI-without-clicks `slice` is a
    view offset in mm (`view_offset_frame`); every other request's `slice` already is an index (unchanged)."""
    if not (is_stock_extension(request) and request.get("slice") is not None and request.get("roi")
            and not request.get("foreground") and not request.get("background")):
        return request
    return dict(request, slice=view_offset_frame(request["slice"], request["roi"], viewer_geometry))


def label_names_from_list(label_info: object) -> dict[str, int] | None:
    """The extension's `label_info` list -> {name: label value}; None when it is not such a list.

    The value is the entry's position + 1, not its `idx`: the extension exports the listed segments in list
    order (values 1..N), but counts `idx` over all segments, skipped ones (background, scribbles) included."""
    if not isinstance(label_info, list) or not label_info:
        return None
    names: dict[str, int] = {}
    for value, entry in enumerate(label_info, start=1):
        name = entry.get("name") if isinstance(entry, dict) else None
        if not isinstance(name, str) or not name.strip():
            raise BadRequest(f"label_info entry {value} has no name: {entry!r}")
        names.setdefault(name.strip(), value)
    return names
