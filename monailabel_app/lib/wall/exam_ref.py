"""An infer request's examination: which datastore images it may read as the other views of one exam.

`images` in an interpret request names the views of one examination by datastore id, the request's own image
first (listing it again first is allowed, anywhere else it is a duplicate); the request's image may be an
upload, the others are ids. Only datastore ids: an exam must
not become a way round `image_ref`'s rule that a client never names a server path. The ids are resolved here,
at the door, into `EXAM_PATHS`, the one key the task reads; a client that sends that key itself has it
dropped. Counted against the conf key `max_exam_views` before any image is read.
"""

from __future__ import annotations

from umind_core.exam_views import ExamViewError, check_view_count

from .errors import BadRequest
from .names import is_name, name_problem

__all__ = ["EXAM_PATHS", "EXAM_IDS", "EXAM_SITES", "check_exam_count", "check_exam_images"]

#: request key the wall fills with the views' server paths (the request's image first); never a client's
EXAM_PATHS = "_umind_exam_paths"
#: request key with the views' datastore ids ("upload" for an uploaded image), in the same order, for the reply
EXAM_IDS = "_umind_exam_ids"
#: request key with each view's site as its datastore image info names it (`site`), or None
EXAM_SITES = "_umind_exam_sites"
_KEYS = (EXAM_PATHS, EXAM_IDS, EXAM_SITES)


def check_exam_images(request: dict, out: dict, datastore, max_views: int, image_is_id: bool) -> None:
    """Fill out[EXAM_PATHS] and out[EXAM_IDS] from request["images"] (BadRequest / NotFound), or leave them out
    when the request names no examination. `out["image"]` is the request's own image, already resolved."""
    for key in _KEYS:
        out.pop(key, None)
    images = request.get("images")
    own = request.get("image")
    if images is None:
        if request.get("exam") not in (None, "", False):  # the request's own frames: the reply names its image
            out[EXAM_IDS] = [own if image_is_id else "upload"]
        return
    if not isinstance(images, list) or not all(isinstance(i, str) for i in images):
        raise BadRequest(f"images must be a list of datastore ids (the views of one examination), got {images!r}")
    if not images:
        raise BadRequest("images is empty: an examination needs the datastore ids of its views")
    if image_is_id and images[0] == own:
        images = images[1:]
    check_exam_count(1 + len(images), f"the request's image and {len(images)} in images", max_views)
    seen = {own} if image_is_id else set()
    for i in images:
        if not is_name(i):
            raise BadRequest(f"images: {i!r} is not a datastore id: it {name_problem(i)}")
        if i in seen:
            raise BadRequest(f"images: {i!r} is listed twice: each view of an examination is a different image")
        seen.add(i)
    paths = [datastore.get_image_uri(i) for i in images]  # NotFound (404) naming the id when it is not there
    out[EXAM_PATHS] = [datastore.get_image_uri(own) if image_is_id else out["image"], *paths]
    ids = [own if image_is_id else "upload", *images]
    out[EXAM_IDS] = ids
    out[EXAM_SITES] = [_site(datastore, own) if image_is_id else None, *(_site(datastore, i) for i in images)]


def _site(datastore, image_id: str) -> str | None:
    """The site a client recorded with the image (its info's `site`: `PUT /datastore/image` params or
    `PUT /datastore/image/info`), if any."""
    site = (datastore.get_image_info(image_id) or {}).get("site")
    return site.strip().lower() if isinstance(site, str) and site.strip() else None


def check_exam_count(count: int, what: str, cap: int) -> None:
    """`exam_views.check_view_count` (the one rule) under the server's cap `max_exam_views`, as a 400."""
    try:
        check_view_count(count, what, cap, f"allowed by max_exam_views = {cap}")
    except ExamViewError as exc:
        raise BadRequest(str(exc)) from None
