"""The wall's rules one at a time, in-process and without a server: the body cap on every method that carries a
body and whatever length a client declares, request temp files kept in their folder whatever suffix a client
names, bytes after a gzip stream or a DICOM's pixel data counted, escaped quotes in JSON depth, the stored-value
caps on a saved label's params, task names' nested parameters checked, and 409 for a conflict."""

from __future__ import annotations

import asyncio
import gzip
import json
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "monailabel_app"))

from lib.wall.errors import Conflict, guard_params_json, to_http  # noqa: E402
from lib.wall.image_end import trailing_bytes  # noqa: E402
from lib.wall.json_limits import MAX_STORED_DEPTH, json_depth  # noqa: E402
from lib.wall.request_files import BodyCap, _ScopedTempfile, request_scratch  # noqa: E402
from lib.wall.task_requests import check_task_request  # noqa: E402

# ---- the body cap -----------------------------------------------------------------------------------------


async def _echo_length(scope, receive, send):
    """An app that reads the whole body and answers its length."""
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            break
        size += len(message.get("body", b""))
        if not message.get("more_body"):
            break
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": str(size).encode()})


def _status(method: str, chunks: list[bytes], declared: int | None, limit: int = 100) -> int:
    headers = [] if declared is None else [(b"content-length", str(declared).encode())]
    messages = iter([{"type": "http.request", "body": c, "more_body": i < len(chunks) - 1}
                     for i, c in enumerate(chunks)])
    sent: list[dict] = []

    async def receive():
        return next(messages, {"type": "http.disconnect"})

    async def send(message):
        sent.append(message)

    asyncio.run(BodyCap(_echo_length, limit)({"type": "http", "method": method, "headers": headers}, receive, send))
    return next(m["status"] for m in sent if m["type"] == "http.response.start")


@pytest.mark.parametrize("method", ["POST", "PUT", "PATCH"])
def test_every_method_with_a_body_is_capped(method):
    assert _status(method, [b"x" * 100], declared=100) == 200
    assert _status(method, [b"x" * 101], declared=101) == 413
    assert _status("GET", [b"x" * 101], declared=None) == 200  # no body method: not the cap's business


def test_the_cap_counts_what_arrives_not_what_the_client_declared():
    assert _status("PUT", [b"x" * 60, b"x" * 60], declared=None) == 413
    assert _status("PUT", [b"x" * 60, b"x" * 60], declared=50) == 413  # a declared length that lies


# ---- request temp files -------------------------------------------------------------------------------


def test_a_client_suffix_cannot_leave_the_request_folder():
    with request_scratch() as folder:
        with _ScopedTempfile.NamedTemporaryFile(suffix=".nii.gz") as kept:
            assert Path(kept.name).parent == folder and kept.name.endswith(".nii.gz")
        with _ScopedTempfile.NamedTemporaryFile(suffix=".png/../../escaped") as cut:
            assert Path(cut.name).parent == folder and not cut.name.endswith("escaped")


# ---- bytes after the image ------------------------------------------------------------------------------


def test_every_byte_after_a_gzip_stream_is_counted(tmp_path):
    import SimpleITK as sitk
    from test_datastore_writes import image_array

    path = tmp_path / "x.nii.gz"
    sitk.WriteImage(sitk.GetImageFromArray(image_array()), str(path), True)
    clean = path.read_bytes()
    assert trailing_bytes(path, "nifti-gz") == 0
    for extra in (10, 200_000):  # within the reader's first 64 KiB chunk, and well past it
        path.write_bytes(clean + b"X" * extra)
        assert trailing_bytes(path, "nifti-gz") == extra
    assert gzip.decompress(clean)  # the control: the stream itself is whole


def test_a_dicom_element_after_the_pixel_data_is_caught(tmp_path):
    import pydicom
    from fixtures_imaging import dicom_mono

    path = dicom_mono(tmp_path / "a.dcm")
    assert trailing_bytes(path, "dicom") == 0
    ds = pydicom.dcmread(str(path))
    ds.add_new(0x7FE10010, "LO", "after the pixels")
    ds.save_as(str(path), write_like_original=False)
    assert trailing_bytes(path, "dicom") > 0


# ---- JSON depth, stored params, task parameters, conflicts ---------------------------------------------


def test_an_escaped_quote_does_not_end_a_string_when_depth_is_measured():
    assert json_depth(r'{"k": "a\"[[[[[[", "n": [1]}') == 2
    assert json_depth(json.dumps({"k": 'say "[[[[{{{{"', "n": [[1]]})) == 3


def test_a_saved_labels_params_are_held_to_the_stored_value_caps(monkeypatch):
    from monailabel.endpoints import datastore

    calls = []

    def save_label(background_tasks, image, params="{}", tag="final", label=None, user=None):
        calls.append(image)

    monkeypatch.setattr(datastore, "save_label", save_label)
    guard_params_json()
    deep: dict = {"leaf": 1}
    for _ in range(MAX_STORED_DEPTH):
        deep = {"k": deep}
    with pytest.raises(Exception) as info:
        datastore.save_label(None, "img0", json.dumps(deep))
    assert info.value.status_code == 400 and f"nested {MAX_STORED_DEPTH + 1} levels" in info.value.detail
    datastore.save_label(None, "img1", "{}")
    assert calls == ["img1"]


def test_a_tasks_own_parameters_are_checked_by_name():
    app = SimpleNamespace(_trainers={}, _scoring_methods={"umind_uncertainty": object()})
    check_task_request("scoring", {"umind_uncertainty": {"targets": ["lesion"]}}, None, app)
    with pytest.raises(Exception) as info:
        check_task_request("scoring", {"umind_uncertainty": {"evil": 1}}, None, app)
    assert info.value.status_code == 400 and "'evil' is not accepted" in info.value.detail


def test_a_conflict_is_409():
    err = to_http(Conflict("image id 'a' exists"), "upload image")
    assert err.status_code == 409 and "image id 'a' exists" in err.detail


def test_params_must_be_an_object_and_too_deep_json_is_the_callers_400():
    from lib.wall.errors import check_params_json

    check_params_json('{"prompt": "lesion"}', "infer")
    for text in ("[1, 2]", '"lesion"', "3"):
        with pytest.raises(Exception) as info:
            check_params_json(text, "infer")
        assert info.value.status_code == 400 and "JSON object" in info.value.detail, text
    err = to_http(RecursionError("maximum recursion depth exceeded"), "infer")
    assert err.status_code == 400 and "nested too deep" in err.detail
