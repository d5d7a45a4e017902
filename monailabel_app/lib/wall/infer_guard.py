"""An infer request's image and label-saving options, checked before MONAI Label acts on them.

`UMindApp.infer` calls `check_infer_request` first: `image` goes through `image_ref` (a datastore id, this
request's own upload, or an opt-in server folder) and leaves as a path MONAI Label can only take as a file: a
datastore id becomes its file in the studies folder (`IMAGE_ID` keeps the id). MONAI Label tests
`os.path.exists(image)` on what it gets, relative to the server's working directory, so an id such as
`README.md` read the checkout's own README and `docs` answered a 500: an oracle outside the wall. Because it then
saves no label for a path, the app saves the model's output itself (`save_label` is kept under `SAVE_LABEL`).
`save_label` may store the model's output only under
a tag that is a name and is not the final tag: final labels are what people corrected and what retraining
learns from, so the model's own output must never land there.
"""

from __future__ import annotations

from monailabel.interfaces.datastore import DefaultLabelTag

from ..conf import AppConfig
from .errors import BadRequest
from .exam_ref import check_exam_images
from .image_ref import resolve_infer_image
from .names import check_name
from ..params import parse_bool

__all__ = ["check_infer_request", "IMAGE_ID", "SAVE_LABEL"]

FINAL = DefaultLabelTag.FINAL.value
#: keys of the checked request that MONAI Label does not read: the datastore id and whether to save a label
IMAGE_ID = "umind_image_id"
SAVE_LABEL = "umind_save_label"


def _nothing_after_the_image(path: str) -> None:
    """The upload rule of the datastore door (lib/wall/image_end.py) for an image uploaded to /infer as well."""
    from umind_core.imageio import sniff_format

    from .image_end import trailing_problem

    problem = trailing_problem(path, sniff_format(path))
    if problem:
        raise BadRequest(problem)


def check_infer_request(request: dict, datastore, conf: AppConfig, uploaded: bool) -> dict:
    """A copy of `request` with `image` (and an examination's `images`, `exam_ref`) resolved and
    `save_label`/`label_tag` checked (BadRequest/NotFound)."""
    out = dict(request)
    out["image"], is_id = resolve_infer_image(request.get("image"), datastore, conf.image_dirs, uploaded)
    if not is_id and uploaded:
        _nothing_after_the_image(out["image"])
    check_exam_images(request, out, datastore, conf.max_exam_views, is_id)
    if is_id:
        out[IMAGE_ID], out["image"] = out["image"], datastore.get_image_uri(out["image"])
    save = parse_bool("save_label", request.get("save_label", False))
    out["save_label"] = False  # MONAI Label saves only for an id, which it no longer gets
    out[SAVE_LABEL] = save and is_id
    if save:
        tag = check_name("label_tag", request.get("label_tag", DefaultLabelTag.ORIGINAL.value))
        if tag == FINAL:
            raise BadRequest(f"save_label cannot write the {FINAL!r} label: final labels are corrections that "
                             "retraining learns from; save the model's output under another tag (default "
                             f"{DefaultLabelTag.ORIGINAL.value!r}) and PUT the corrected label to /datastore/label")
        out["label_tag"] = tag
    return out
