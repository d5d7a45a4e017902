"""What an infer request's `image` may point at: a datastore id, the request's own upload, or (opt-in) a server file.

MONAI Label treats any `image` that exists on the server's disk as a file to read, so a client could have
the model read (and describe) any image the server can see, and tell existing from missing paths by the
status code. Here `image` is a datastore id (checked as a name by `names`); a path is accepted only when the
conf key `image_dirs` lists folders and the resolved file lies inside one of them. A refused path gets the
same 400 whether or not it exists, and the message quotes only what the client sent.
"""

from __future__ import annotations

import os
from pathlib import Path

from .errors import BadRequest
from .request_files import current_scratch
from .names import is_name, name_problem

__all__ = ["resolve_infer_image", "is_upload_path"]


def is_upload_path(path: object) -> bool:
    """True for the temp file MONAI Label's /infer wrote this request's uploaded `file` to: a file in the
    request's own folder (lib/wall/request_files.py), which no other request and no client-given path can name."""
    if not isinstance(path, str) or not os.path.isabs(path):
        return False
    scratch = current_scratch()
    return scratch is not None and Path(path).parent.resolve() == scratch.resolve() and os.path.isfile(path)


def _inside(path: Path, folders: tuple[Path, ...]) -> bool:
    return any(path == d or d in path.parents for d in folders)


def resolve_infer_image(image: object, datastore, image_dirs: tuple[Path, ...], uploaded: bool) -> tuple[str, bool]:
    """(value to hand to MONAI Label, is it a datastore id) for a request's `image`, or BadRequest/NotFound."""
    if uploaded and is_upload_path(image):
        return str(image), False
    if not isinstance(image, str) or not image:
        raise BadRequest(f"image must be a datastore id (or upload a file), got {image!r}")
    if is_name(image):
        datastore.get_image_uri(image)  # NotFound (404) naming the id when it is not in the datastore
        return image, True
    if image_dirs and os.path.isabs(image):
        real = Path(os.path.realpath(image))
        if _inside(real, image_dirs) and real.is_file():
            return str(real), False
        raise BadRequest(f"image {image!r} is neither a datastore id nor a file inside the folders allowed by "
                         "conf image_dirs")
    raise BadRequest(f"image {image!r} is not a datastore id: it {name_problem(image)} (server paths are not "
                     "accepted unless conf image_dirs allows their folder)")
