"""Inference and upload checks off the event loop, so `/info`, `/datastore` and `/train` answer meanwhile.

MONAI Label 0.8.5's POST /infer/{model} is `async def` and calls the synchronous inference directly: one
long request (24 s for 2,000 clicks) stalled every other request, `/info` included. `install_infer_route`
swaps that route for one with the same path, parameters and auth dependency whose body runs the stock
`run_inference` (as wrapped by `edge`) in the thread pool. Requests therefore overlap on the server, and
the infer task serialises the model itself (`runtime.PREDICT_LOCK`), so the one Predictor is never used by
two threads at once.

The route also checks what only it can see, before anything is read: the request names an image or
uploads one (not a session: UMind serves no sessions), and `params` does not carry the keys the server
sets itself (`image`, `model`, `label`, ...), which MONAI Label would otherwise let params overwrite.
`UPLOADED` tells `UMindApp.infer` that the temp file it is handed is this request's own upload. Requests
that do more than their route's role allows are checked here (lib/wall/roles.py): `save_label` in infer params
needs the annotator, `replace` on an image upload the admin. Every upload's temp copy lives in the request's
own folder (lib/wall/request_files.py), removed on every path.

The datastore's image and label uploads decode the upload (and, for a label, its image) at the door
(lib/wall/uploads.py): `install_upload_routes` runs those endpoints' stock helpers in the thread pool too.
"""

from __future__ import annotations

import contextvars
import json
import logging
import shutil

from fastapi import HTTPException
from starlette.concurrency import run_in_threadpool

from umind_core.booleans import as_bool
from .wall.errors import check_params_json
from .wall.names import name_problem
from .wall.request_files import request_scratch
from .wall.roles import ADMIN, ANNOTATOR, require_role
from .wall.routes import replace_route, same_signature

__all__ = ["install_infer_route", "install_upload_routes", "UPLOADED", "RESERVED_PARAMS"]

logger = logging.getLogger(__name__)

UPLOADED: contextvars.ContextVar[bool] = contextvars.ContextVar("umind_infer_uploaded", default=False)
#: request keys the server sets; a client's params may not overwrite them
RESERVED_PARAMS = ("image", "model", "label", "file", "session", "session_id")


def _check_output(model: str, output) -> None:
    """Refuse, before the model runs, a reply form the task cannot give: MONAI Label ran the whole inference and
    then answered 500 for `output=dicom_seg` on a studies folder (it needs a DICOMweb datastore) and for
    `output=image` on the interpret task (its answer is JSON only)."""
    from monailabel.datastore.dicom import DICOMWebDatastore
    from monailabel.interfaces.utils.app import app_instance

    kind = getattr(output, "value", output)
    if kind not in ("dicom_seg", "image"):
        return
    app = app_instance()
    if kind == "dicom_seg" and not isinstance(app.datastore(), DICOMWebDatastore):
        raise HTTPException(400, "infer: output=dicom_seg needs a DICOMweb (PACS) datastore; this server reads a "
                                 "studies folder: ask output=image, json or all")
    task = getattr(app, "_infers", {}).get(model)
    if kind == "image" and getattr(task, "output", None) == "answer":
        raise HTTPException(400, f"infer: {model} answers in JSON only; ask output=json (or all)")


def _check_request(image: str, session_id: str, params: object, file, label) -> None:
    if session_id:
        raise HTTPException(400, "infer: session_id is not supported by UMind (sessions are off); "
                                 "give a datastore id as ?image= or upload the image as `file`")
    if label is not None:
        raise HTTPException(400, "infer: a `label` upload is not accepted by UMind infer tasks")
    if not image and file is None:
        raise HTTPException(400, "infer: image is required: a datastore id as ?image=ID, or upload the image "
                                 "as the form field `file`")
    check_params_json(params, "infer")  # malformed or too deep: a 400 before anything parses it again
    values = json.loads(params) if isinstance(params, str) and params else {}
    if isinstance(values, dict):
        # the stock MONAILabel extension names the segment it edits in `label`: a name, never a file
        reserved = sorted(k for k in values if k in RESERVED_PARAMS
                          and not (k == "label" and isinstance(values[k], str) and name_problem(values[k]) is None))
        if reserved:
            raise HTTPException(400, f"infer: params may not set {', '.join(reserved)}: the server sets them "
                                     "(give the image as ?image=ID or as an uploaded file)")


def _flag(params: object, key: str) -> bool:
    """True when the `params` form field sets `key` true (`save_label`, `replace`); the value's own check and a
    malformed field's 400 happen further in."""
    try:
        values = json.loads(params) if isinstance(params, str) and params else {}
    except (ValueError, RecursionError):
        return False
    return isinstance(values, dict) and as_bool(values.get(key, False)) is True


def _run(kwargs: dict, user):
    from monailabel.endpoints import infer as infer_module

    _check_request(kwargs["image"], kwargs["session_id"], kwargs["params"], kwargs["file"], kwargs["label"])
    _check_output(kwargs["model"], kwargs["output"])
    if _flag(kwargs["params"], "save_label"):
        require_role(user, ANNOTATOR, "save an inference result as a label (save_label)")
    UPLOADED.set(kwargs["file"] is not None)
    # the upload's copy and the reply's files live here: removed when the request fails, however it fails, and
    # after the reply is sent when it succeeds (a file reply is streamed after this returns)
    with request_scratch(keep=True) as folder:
        out = infer_module.run_inference(kwargs["background_tasks"], kwargs["model"], kwargs["image"],
                                         kwargs["session_id"], kwargs["params"], kwargs["file"], kwargs["label"],
                                         kwargs["output"])
    kwargs["background_tasks"].add_task(shutil.rmtree, folder, ignore_errors=True)
    return out


def _endpoint_like(original):
    async def api_run_inference(**kwargs):
        user = kwargs.pop("user", None)  # the auth dependency already ran (it is part of the copied signature)
        return await run_in_threadpool(_run, kwargs, user)

    return same_signature(api_run_inference, original)


def _send_response_like(original):
    def send_response(datastore, result, output, background_tasks):
        """The stock reply, except `output=image` for an answer without a file (no target found, or an answer the
        parser could not read), which the stock built as a FileResponse of None: a bare 500."""
        kind = getattr(output, "value", output)
        if kind == "image" and not (result.get("file") or result.get("label")):
            raise HTTPException(422, "infer: the answer has no image (the model found nothing to draw, or its "
                                     "answer could not be read); ask output=json or all to see why")
        return original(datastore, result, output, background_tasks)

    send_response._umind_reply = True  # type: ignore[attr-defined]
    return send_response


def install_infer_route(app) -> bool:
    """Replace POST .../infer/{model} on the FastAPI `app` (idempotent); False when the route is not there."""
    from monailabel.endpoints import infer as infer_module

    if not getattr(infer_module.send_response, "_umind_reply", False):
        infer_module.send_response = _send_response_like(infer_module.send_response)
    done = replace_route(app, "/infer/{model}", "POST", _endpoint_like)
    if done:
        logger.info("umind: /infer/{model} runs inference in the thread pool")
    return done


def _call_upload(helper: str, kwargs: dict, user):
    from monailabel.endpoints import datastore as datastore_module

    if helper == "add_image" and _flag(kwargs.get("params"), "replace"):
        require_role(user, ADMIN, "replace an image and remove its labels (replace)")
    with request_scratch():  # the stock helper's copy of the upload lives here and goes with the request
        return getattr(datastore_module, helper)(**kwargs, user=getattr(user, "username", None))


def _upload_like(helper: str):
    """A route body that calls monailabel.endpoints.datastore.<helper> (as wrapped by `edge`) in a thread."""
    def make(original):
        async def endpoint(**kwargs):
            user = kwargs.pop("user", None)
            return await run_in_threadpool(_call_upload, helper, kwargs, user)

        return same_signature(endpoint, original)

    return make


def install_upload_routes(app) -> bool:
    """PUT /datastore/image (and the deprecated PUT /datastore/) and PUT /datastore/label in the thread pool."""
    done = [replace_route(app, "/datastore/image", "PUT", _upload_like("add_image")),
            replace_route(app, "/datastore/", "PUT", _upload_like("add_image")),
            replace_route(app, "/datastore/label", "PUT", _upload_like("save_label"))]
    return all(done)
