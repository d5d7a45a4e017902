"""What a client may send to the train, scoring and batch-infer tasks: declared keys only, checked before a task starts.

MONAI Label 0.8.5 merges a request's JSON into the request of a task it runs in a subprocess and reads some
keys there itself: `bundle_path` (when it exists on disk) went onto the subprocess's PYTHONPATH, ahead of
site-packages, so an uploaded PNG with a ZIP appended was imported as `monailabel` and ran as the server's
user; `gpus` became CUDA_VISIBLE_DEVICES; and the whole request went on the command line, where 200 KB failed
to start the process and left the train task SUBMITTED for good. Here every key of a task request must be one
the app declares for that task (400 naming the others), the request has a size cap, and train parameters are
parsed with the app's own parser before anything starts (a malformed one is a 400 now, not a failed run
later). `task_process` then passes what remains to the subprocess through a file, never argv or env.

`AsyncTask.run` is the one door every task request passes (the stock endpoints, `/train/`'s per-model dicts
and the app's own `async_training`), so the check wraps it.
"""

from __future__ import annotations

import functools
import json
import logging

from fastapi import HTTPException

__all__ = ["DECLARED", "MAX_TASK_REQUEST_BYTES", "check_task_request", "install_task_request_check"]

logger = logging.getLogger(__name__)

#: the largest task request (JSON) a client may send; a train run's own parameters take a few hundred bytes
MAX_TASK_REQUEST_BYTES = 64 * 1024

#: keys the server itself puts into a task request (the endpoint's path and query, MONAI Label's runner)
_SERVER_KEYS = {"train": {"model", "local_rank"}, "scoring": {"method"}, "batch_infer": {"model", "images"}}


def _train_keys() -> set[str]:
    from ..conf import train_keys

    return set(train_keys()) | {"rollback", "force"}


#: infer options a batch run may pass to every image's inference (lib/params.py and lib/wall/infer_guard.py read them)
_INFER_KEYS = {"prompt", "targets", "question", "task", "frames", "slice", "axis", "roi", "foreground",
               "background", "label", "label_names", "result_extension", "save_label", "label_tag"}
#: MONAI Label's own batch options (the defaults endpoints/batch_infer.py sends when the body is empty); `gpus`
#: is accepted so that a bodiless request works, but task_process never turns it into CUDA_VISIBLE_DEVICES
_BATCH_KEYS = {"device", "multi_gpu", "gpus", "logging", "max_workers", "max_batch_size"}


def _declared() -> dict[str, set[str]]:
    return {"train": _train_keys(), "scoring": {"targets", "prompt", "force"},
            "batch_infer": _INFER_KEYS | _BATCH_KEYS}


DECLARED = _declared()


def _refuse(method: str, message: str) -> HTTPException:
    return HTTPException(400, f"{method.replace('_', ' ')}: {message}")


def _check_keys(method: str, values: dict, task_names: set[str]) -> None:
    allowed = DECLARED[method] | _SERVER_KEYS[method]
    for key, value in values.items():
        if key in task_names and isinstance(value, dict):  # POST /train/ and /scoring/: {"<task>": {...}}
            _check_keys(method, value, set())
            continue
        if key not in allowed:
            accepted = ", ".join(sorted(DECLARED[method]))
            raise _refuse(method, f"the parameter {key!r} is not accepted (accepted: {accepted})")


def _check_train_values(values: dict, app) -> None:
    """The app's own parsers decide: train parameters (conf.parse_train_params) and rollbacks
    (versions.check_rollback: the version exists, and a gate-rejected one only with "force")."""
    from ..conf import ConfError, parse_train_params
    from umind_core.versions import check_rollback

    try:
        parse_train_params(values, base=app.umind_conf.train)
        check_rollback(app.runtime.versions, values.get("rollback"), values.get("force"))
    except (ConfError, TypeError, ValueError) as exc:
        raise _refuse("train", str(exc)) from None


def check_task_request(method: str, request: dict | None, params: dict | None, app) -> None:
    """400 unless every key of `request` and `params` is declared for `method` and the whole is small enough."""
    if method not in DECLARED:
        return
    for part in (request, params):
        if part is not None and not isinstance(part, dict):
            raise _refuse(method, f"the request body must be a JSON object, got {type(part).__name__}")
    merged = {**(request or {}), **(params or {})}
    from .json_limits import MAX_STORED_DEPTH, value_depth

    depth = value_depth(merged)
    if depth > MAX_STORED_DEPTH:  # a train request's params are kept in the version's record
        raise _refuse(method, f"the request is nested {depth} levels deep (at most {MAX_STORED_DEPTH})")
    size = len(json.dumps(merged, separators=(",", ":"), default=str).encode())
    if size > MAX_TASK_REQUEST_BYTES:
        raise _refuse(method, f"the request is {size:,} bytes of JSON, over the cap of {MAX_TASK_REQUEST_BYTES:,}")
    names = set(getattr(app, "_trainers", {}) or {}) | set(getattr(app, "_scoring_methods", {}) or {})
    _check_keys(method, merged, names)
    if method == "train" and app is not None and hasattr(app, "umind_conf"):
        for values in [merged, *(v for k, v in merged.items() if k in names and isinstance(v, dict))]:
            _check_train_values(values, app)


def install_task_request_check() -> None:
    """Wrap MONAI Label's AsyncTask.run (idempotent; a no-op where MONAI Label is not installed)."""
    try:
        from monailabel.interfaces.utils.app import app_instance
        from monailabel.utils.async_tasks.task import AsyncTask
    except ImportError:
        return
    original = AsyncTask.__dict__["run"].__func__
    if getattr(original, "_umind_checked", False):
        return

    @functools.wraps(original)
    def run(method, request=None, params=None, force_sync=False, enqueue=False):
        check_task_request(method, request, params, app_instance())
        return original(method, request=request, params=params, force_sync=force_sync, enqueue=enqueue)

    run._umind_checked = True  # type: ignore[attr-defined]
    AsyncTask.run = staticmethod(run)
