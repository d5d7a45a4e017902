"""The standing security corpus: hostile and malformed requests against one real server.

Every case is a row: the request, the status it must get and words its JSON message must contain. After
every row the test also checks that the server still answers /info, that the message carries no server
path, that a sentinel tree beside the studies folder is byte-identical (nothing outside the studies folder
was created, changed or deleted) and that the K-label retrain counter moved only for labels that were
accepted. One server serves every row, so the whole corpus costs one start-up plus a few inferences.

`python tests/test_security_corpus.py` prints the status table against a fresh server without asserting
(how the before/after table of the first security round was measured).
"""

from __future__ import annotations

import functools
import hashlib
import io
import json
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import pytest
import requests
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fixtures_imaging import dicom_mono_multiframe  # noqa: E402
from server_utils import start_server  # noqa: E402

pytestmark = [pytest.mark.server, pytest.mark.slow]

CAPS = {"max_frames": "2", "max_pixels": "150000", "max_clicks": "64", "max_targets": "8"}


# ------------------------------------------------------------------------------------------------ payloads
def png(h: int = 256, w: int = 256, seed: int = 0, mode: str = "L") -> bytes:
    arr = (np.random.default_rng(seed).random((h, w)) * 255).astype(np.uint8)
    img = Image.fromarray(arr)
    if mode != "L":
        img = img.convert(mode)
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return buf.getvalue()


def label_png(h: int = 256, w: int = 256, value: int = 1) -> bytes:
    arr = np.zeros((h, w), dtype=np.uint8)
    arr[h // 4:h // 2, w // 4:w // 2] = value
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, format="PNG")
    return buf.getvalue()


def nifti(arr: np.ndarray) -> bytes:
    import SimpleITK as sitk

    with tempfile.TemporaryDirectory() as d:
        p = os.path.join(d, "x.nii.gz")
        sitk.WriteImage(sitk.GetImageFromArray(arr), p, True)
        return Path(p).read_bytes()


RANDOM = np.random.default_rng(7).bytes(4096)
PNG = png()
TRUNCATED_PNG = PNG[:200]
LABEL = label_png()
PNG_SEED0 = png(seed=0)


@dataclass
class Case:
    name: str
    method: str
    path: str
    expect: int
    words: tuple[str, ...] = ()
    query: dict = field(default_factory=dict)
    params: object = None  # dict -> JSON form field "params"; str -> sent verbatim
    files: dict = field(default_factory=dict)  # form field -> (file name, bytes)
    form: dict = field(default_factory=dict)
    headers: dict = field(default_factory=dict)
    counted: bool = False  # an accepted final label: the retrain counter goes up by one
    check: Callable | None = None  # extra check on (response, server)
    json_body: object = None  # sent as the JSON body (the train, scoring and batch endpoints)


def _no_cors_echo(resp, server):
    assert "access-control-allow-origin" not in {k.lower() for k in resp.headers}, resp.headers


def _listing_has_no_hidden(resp, server):
    ids = set(resp.json().get("objects", {}))
    assert ids and not any(i.startswith(".") for i in ids), ids


def _train_list_has_no_hidden(resp, server):
    assert not any("/.hidden" in str(item.get("image", "")) for item in resp.json()), resp.json()


def _img0_unchanged(resp, server):
    assert (server.studies / "img0.png").read_bytes() == PNG_SEED0


def _is_img1(resp, server):
    assert resp.content == (server.studies / "img1.png").read_bytes()


def _stored_as_png(resp, server):
    assert (server.studies / "by_content.png").is_file()
    assert not (server.studies / "by_content.py").exists()


def _label_stored_as_png(resp, server):
    assert (server.studies / "labels" / "final" / "img1.png").is_file()
    assert not list((server.studies / "labels" / "final").glob("img1.py"))


def cases(root: Path) -> list[Case]:
    victim, victim_png = str(root / "victim"), str(root / "victim.png")
    allowed_png = str(root / "allowed" / "ok.png")
    name_words = ("not a valid name",)
    C = Case
    up = {"file": ("x.png", PNG)}
    lab = {"label": ("label.png", LABEL)}
    fg = lambda n: [[10, 10, 0]] * n  # noqa: E731
    return [
        # ---- image ids on upload (PUT /datastore/image and the deprecated PUT /datastore/)
        C("upload ../victim", "PUT", "/datastore/image", 400, name_words + ("separator",), {"image": "../victim"}, files=up),
        C("upload ../../victim", "PUT", "/datastore/image", 400, name_words, {"image": "../../victim"}, files=up),
        C("upload absolute path", "PUT", "/datastore/image", 400, name_words, {"image": victim}, files=up),
        C("upload into workdir", "PUT", "/datastore/image", 400, name_words,
          {"image": ".umind/versions"}, files={"file": ("v.json", b'{"current": 0, "runs": []}')}),
        C("upload hidden id", "PUT", "/datastore/image", 400, ("starts with '.'",), {"image": ".hidden"}, files=up),
        C("upload id ..", "PUT", "/datastore/image", 400, name_words, {"image": ".."}, files=up),
        C("upload id with NUL", "PUT", "/datastore/image", 400, ("control character",), {"image": "a\x00b"}, files=up),
        C("upload id with backslash", "PUT", "/datastore/image", 400, ("separator",), {"image": "a\\..\\b"}, files=up),
        C("upload id too long", "PUT", "/datastore/image", 400, ("characters long",), {"image": "a" * 300}, files=up),
        C("legacy PUT / ../victim", "PUT", "/datastore/", 400, name_words, {"image": "../victim"}, files=up),
        C("upload hidden file name", "PUT", "/datastore/image", 400, name_words, files={"file": (".hidden.png", PNG)}),
        C("upload random bytes", "PUT", "/datastore/image", 400, ("not a png",), {"image": "rand"},
          files={"file": ("rand.png", RANDOM)}),
        C("upload python source", "PUT", "/datastore/image", 400, ("not a png",), {"image": "code"},
          files={"file": ("x.py", b"import os\nos.system('true')\n")}),
        C("upload empty file", "PUT", "/datastore/image", 400, ("not a png",), {"image": "empty"},
          files={"file": ("e.png", b"")}),
        C("upload truncated png", "PUT", "/datastore/image", 400, ("does not decode",), {"image": "trunc"},
          files={"file": ("t.png", TRUNCATED_PNG)}),
        C("upload json", "PUT", "/datastore/image", 400, ("not a png",), {"image": "js"},
          files={"file": ("j.json", b"{}")}),
        C("upload tiny image", "PUT", "/datastore/image", 400, ("too small",), {"image": "tiny"},
          files={"file": ("t.png", png(4, 4))}),
        C("upload malformed params", "PUT", "/datastore/image", 400, ("params", "json"), {"image": "mp"},
          params="{not json", files=up),
        C("upload params list", "PUT", "/datastore/image", 400, ("params", "object"), {"image": "pl"},
          params="[1, 2]", files=up),
        C("upload png named .py", "PUT", "/datastore/image", 200, (), {"image": "by_content"},
          files={"file": ("x.py", PNG)}, check=_stored_as_png),
        # ---- delete / download / info of images
        C("delete ../victim", "DELETE", "/datastore/image", 400, name_words, {"id": "../victim"}),
        C("delete absolute", "DELETE", "/datastore/image", 400, name_words, {"id": victim}),
        C("delete unknown", "DELETE", "/datastore/image", 404, ("not in the datastore", "nosuch"), {"id": "nosuch"}),
        C("legacy DELETE / ../x", "DELETE", "/datastore/", 400, name_words, {"id": "../x"}),
        C("delete workdir", "DELETE", "/datastore/image", 400, name_words, {"id": ".umind"}),
        C("download ../victim", "GET", "/datastore/image", 400, name_words, {"image": "../victim"}),
        C("download absolute", "GET", "/datastore/image", 400, name_words, {"image": victim_png}),
        C("download workdir file", "GET", "/datastore/image", 400, name_words, {"image": ".umind/versions"}),
        C("download unknown", "GET", "/datastore/image", 404, ("not in the datastore",), {"image": "nosuch"}),
        C("download img1", "GET", "/datastore/image", 200, (), {"image": "img1"}, check=_is_img1),
        C("head img1", "HEAD", "/datastore/image", 200, (), {"image": "img1"}),
        C("head ../victim", "HEAD", "/datastore/image", 400, (), {"image": "../victim"}),
        C("image info ../victim", "GET", "/datastore/image/info", 400, name_words, {"image": "../victim"}),
        C("image info unknown", "GET", "/datastore/image/info", 404, ("not in the datastore",), {"image": "nosuch"}),
        C("put image info ../x", "PUT", "/datastore/image/info", 400, name_words, {"image": "../x"},
          form={"info": "{}"}),
        C("put image info bad json", "PUT", "/datastore/image/info", 400, ("json",), {"image": "img0"},
          form={"info": "{oops"}),
        C("put image info unknown", "PUT", "/datastore/image/info", 404, ("not in the datastore",),
          {"image": "nosuch"}, form={"info": "{}"}),
        C("listing hides dot files", "GET", "/datastore/", 200, (), {"output": "all"}, check=_listing_has_no_hidden),
        # ---- labels
        C("label tag ../../x", "PUT", "/datastore/label", 400, name_words, {"image": "img0", "tag": "../../x"}, files=lab),
        C("label tag absolute", "PUT", "/datastore/label", 400, name_words, {"image": "img0", "tag": victim}, files=lab),
        C("label tag hidden", "PUT", "/datastore/label", 400, ("starts with '.'",), {"image": "img0", "tag": ".x"},
          files=lab),
        C("label tag a/b", "PUT", "/datastore/label", 400, ("separator",), {"image": "img0", "tag": "a/b"}, files=lab),
        C("label image ../victim", "PUT", "/datastore/label", 400, name_words, {"image": "../victim", "tag": "final"},
          files=lab),
        C("label unknown image", "PUT", "/datastore/label", 404, ("not in the datastore", "nosuch"),
          {"image": "nosuch", "tag": "final"}, files=lab),
        C("label 10x10 for 256x256", "PUT", "/datastore/label", 400, ("does not match",),
          {"image": "img0", "tag": "final"}, files={"label": ("l.png", label_png(10, 10))}),
        C("label random bytes", "PUT", "/datastore/label", 400, ("not a label map",), {"image": "img0", "tag": "final"},
          files={"label": ("l.png", RANDOM)}),
        C("label python source", "PUT", "/datastore/label", 400, ("not a label map",),
          {"image": "img0", "tag": "final"}, files={"label": ("l.py", b"print('hi')\n")}),
        C("label jpeg", "PUT", "/datastore/label", 400, ("not a label map",), {"image": "img0", "tag": "final"},
          files={"label": ("l.jpg", _jpeg())}),
        C("label rgb png", "PUT", "/datastore/label", 400, ("single-channel",), {"image": "img0", "tag": "final"},
          files={"label": ("l.png", png(mode="RGB"))}),
        C("label float values", "PUT", "/datastore/label", 400, ("integer",), {"image": "img0", "tag": "final"},
          files={"label": ("l.nii.gz", nifti(np.full((1, 256, 256), 0.5, np.float32)))}),
        C("label negative values", "PUT", "/datastore/label", 400, ("0..65535",), {"image": "img0", "tag": "final"},
          files={"label": ("l.nii.gz", nifti(np.full((256, 256), -3, np.int16)))}),
        C("label wrong frame count", "PUT", "/datastore/label", 400, ("does not match",),
          {"image": "cine", "tag": "final"}, files={"label": ("l.nii.gz", nifti(np.zeros((2, 48, 64), np.uint8)))}),
        C("label empty file", "PUT", "/datastore/label", 400, ("not a label map",), {"image": "img0", "tag": "final"},
          files={"label": ("l.png", b"")}),
        C("label malformed params", "PUT", "/datastore/label", 400, ("params", "json"),
          {"image": "img0", "tag": "final"}, params="{nope", files=lab),
        C("label png named .py", "PUT", "/datastore/label", 200, (), {"image": "img1", "tag": "final"},
          files={"label": ("l.py", LABEL)}, counted=True, check=_label_stored_as_png),
        C("label valid", "PUT", "/datastore/label", 200, (), {"image": "img0", "tag": "final"}, files=lab, counted=True),
        C("download the saved label", "GET", "/datastore/label", 200, (), {"label": "img0", "tag": "final"},
          check=lambda resp, server: resp.content == LABEL),
        C("delete label tag ../../x", "DELETE", "/datastore/label", 400, name_words, {"id": "img0", "tag": "../../x"}),
        C("delete label ../victim", "DELETE", "/datastore/label", 400, name_words, {"id": "../victim", "tag": "final"}),
        C("delete label unknown tag", "DELETE", "/datastore/label", 404, ("no label",), {"id": "img0", "tag": "nosuch"}),
        C("download label ../victim", "GET", "/datastore/label", 400, name_words, {"label": "../victim", "tag": "final"}),
        C("download label tag ../..", "GET", "/datastore/label", 400, name_words, {"label": "img0", "tag": "../../x"}),
        C("label info ..", "GET", "/datastore/label/info", 400, name_words, {"label": "..", "tag": "final"}),
        C("put label info tag ../x", "PUT", "/datastore/label/info", 400, name_words, {"label": "img0", "tag": "../x"},
          form={"info": "{}"}),
        C("updatelabelinfo ../x", "PUT", "/datastore/updatelabelinfo", 400, name_words,
          {"label": "../x", "tag": "final"}, form={"params": "{}"}),
        # ---- infer: what `image` may be
        C("infer absolute path beside studies", "POST", "/infer/umind_interpret", 400, ("datastore id", "image_dirs"),
          {"image": victim_png}, params={}),
        C("infer absolute missing path", "POST", "/infer/umind_interpret", 400, ("datastore id", "image_dirs"),
          {"image": str(root / "nothing.png")}, params={}),
        C("infer ../victim.png", "POST", "/infer/umind_segment", 400, ("not a datastore id",),
          {"image": "../victim.png"}, params={}),
        C("infer params.image path", "POST", "/infer/umind_interpret", 400, ("params", "image"), {"image": "img0"},
          params={"image": victim_png}),
        C("infer params.model", "POST", "/infer/umind_segment", 400, ("params", "model"), {"image": "img0"},
          params={"model": "umind_interpret"}),
        C("infer unknown id", "POST", "/infer/umind_segment", 404, ("nosuch", "not in the datastore"),
          {"image": "nosuch"}, params={}),
        C("infer neither image nor file", "POST", "/infer/umind_segment", 400, ("image",), params={}),
        C("infer unknown task", "POST", "/infer/nosuch", 404, ("unknown infer task",), {"image": "img0"}, params={}),
        C("infer session id", "POST", "/infer/umind_segment", 400, ("session",), {"session_id": "../x"}, params={}),
        C("infer label .bin beside studies", "POST", "/infer/umind_segment", 400, ("label", "not accepted"),
          {"image": "../victim"}, params={}, files={"label": ("l.bin", b"\x00\x01")}),
        C("infer upload random bytes", "POST", "/infer/umind_segment", 400, ("cannot",), params={},
          files={"file": ("r.png", RANDOM)}),
        C("infer malformed params", "POST", "/infer/umind_segment", 400, ("params", "json"), {"image": "img0"},
          params="{bad"),
        C("infer params list", "POST", "/infer/umind_segment", 400, ("params", "object"), {"image": "img0"},
          params="[]"),
        # ---- infer: save_label never reaches outside, never writes a final label
        C("infer save_label tag ../../x", "POST", "/infer/umind_segment", 400, name_words, {"image": "img0"},
          params={"save_label": True, "label_tag": "../../x"}),
        C("infer save_label final", "POST", "/infer/umind_segment", 400, ("final",), {"image": "img0"},
          params={"save_label": True, "label_tag": "final"}),
        # ---- infer: bounded work
        C("2000 clicks", "POST", "/infer/umind_interactive", 400, ("max_clicks",), {"image": "img0"},
          params={"foreground": fg(2000)}),
        C("10000 clicks", "POST", "/infer/umind_interactive", 400, ("max_clicks",), {"image": "img0"},
          params={"foreground": fg(5000), "background": fg(5000)}),
        C("too many targets", "POST", "/infer/umind_detect", 400, ("max_targets",), {"image": "img0"},
          params={"prompt": ",".join(f"t{i}" for i in range(50))}),
        C("too many frames", "POST", "/infer/umind_segment", 400, ("max_frames",), {"image": "cine"},
          params={"frames": "all"}),
        C("too many pixels", "POST", "/infer/umind_segment", 400, ("max_pixels",), {"image": "big"}, params={}),
        C("frames=5 on a 2D image", "POST", "/infer/umind_segment", 400, ("frames",), {"image": "img0"},
          params={"frames": 5}),
        C("NUL in prompt", "POST", "/infer/umind_segment", 400, ("control character",), {"image": "img0"},
          params={"prompt": "lesion\x00evil"}),
        C("infer valid id", "POST", "/infer/umind_segment", 200, (), {"image": "img0", "output": "json"},
          params={"prompt": "lesion"}),
        C("infer frames range far out", "POST", "/infer/umind_segment", 400, ("frames", "out of range"),
          {"image": "cine"}, params={"frames": "0-100000000"}),
        C("infer frames list of 100000", "POST", "/infer/umind_segment", 400, ("max_frames",), {"image": "cine"},
          params={"frames": list(range(100000))}),
        C("infer prompt list of 100", "POST", "/infer/umind_segment", 400, ("max_targets",), {"image": "img0"},
          params={"prompt": [f"t{i}" for i in range(100)]}),
        # ---- infer: server files only inside conf image_dirs (this server allows root/allowed)
        C("infer file in image_dirs", "POST", "/infer/umind_segment", 200, (), {"image": allowed_png,
          "output": "json"}, params={}),
        C("infer image_dirs/../victim.png", "POST", "/infer/umind_segment", 400, ("image_dirs",),
          {"image": str(root / "allowed" / ".." / "victim.png")}, params={}),
        C("infer symlink out of image_dirs", "POST", "/infer/umind_segment", 400, ("image_dirs",),
          {"image": str(root / "allowed" / "link.png")}, params={}),
        C("infer image_dirs folder itself", "POST", "/infer/umind_segment", 400, ("image_dirs",),
          {"image": str(root / "allowed")}, params={}),
        C("infer relative path into image_dirs", "POST", "/infer/umind_segment", 400, ("not a datastore id",),
          {"image": "../allowed/ok.png"}, params={}),
        C("wsi infer ../victim", "POST", "/infer/wsi/umind_segment", 404, ("whole-slide",), {"image": "../victim"}),
        C("wsi_v2 infer absolute", "POST", "/infer/wsi_v2/umind_segment", 404, ("whole-slide",),
          {"image": victim_png}, headers={"Content-Type": "application/json"}, form={}),
        # ---- other stock endpoints
        C("model upload", "PUT", "/model/umind_segment", 405, ("not supported",),
          files={"file": ("m.pt", b"\x00" * 16)}),
        C("model delete", "DELETE", "/model/umind_segment", 405, ("not supported",)),
        C("session delete", "DELETE", "/session/nosuch", 406, ("session",)),
        C("training list hides dot files", "GET", "/datastore/", 200, (), {"output": "train"},
          check=_train_list_has_no_hidden),
        C("overwrite img0 with random bytes", "PUT", "/datastore/image", 400, ("not a png",), {"image": "img0"},
          files={"file": ("img0.png", RANDOM)}, check=_img0_unchanged),
        C("head label ../x", "HEAD", "/datastore/label", 400, (), {"image": "../x", "tag": "final"}),
        C("label info unknown tag", "GET", "/datastore/label/info", 404, ("no label",),
          {"label": "img0", "tag": "nosuch"}),
        C("label tag with trailing space", "PUT", "/datastore/label", 400, ("white space",),
          {"image": "img0", "tag": "final "}, files=lab),
        C("session create", "PUT", "/session/", 406, ("session",), files={"files": ("s.png", PNG)}),
        C("session get", "GET", "/session/nosuch", 406, ("session",)),
        C("cors preflight from another origin", "OPTIONS", "/datastore/image", 400, (),
          headers={"Origin": "http://evil.example", "Access-Control-Request-Method": "PUT"}, check=_no_cors_echo),
        C("cors simple request from another origin", "GET", "/info/", 200, (),
          headers={"Origin": "http://evil.example"}, check=_no_cors_echo),
        *file_cases(root),
    ]


# ---- files that name other files, bombs, deep JSON, spacing, links, ids, logs, reply forms
VICTIM_WORDS = b"victim file beside the studies folder"


def _nrrd_naming(target: str, encoding: str = "raw", extra: str = "") -> bytes:
    return (f"NRRD0004\ntype: unsigned char\ndimension: 2\nsizes: 16 16\nencoding: {encoding}\n{extra}"
            f"data file: {target}\n\n").encode()


def _no_outside_bytes(resp, server):
    assert b"victim file" not in resp.content and b"sentinel" not in resp.content, resp.text[:300]


def _no_leftover_reply_files(resp, server):
    _no_outside_bytes(resp, server)
    leftovers = [p for p in Path(tempfile.gettempdir()).glob("umind-*") if p.is_file()
                 and p.stat().st_mtime > server.started]
    assert not leftovers, leftovers


def _finite_json(resp, server):
    json.loads(resp.text, parse_constant=lambda c: pytest.fail(f"non-finite number {c} in the reply"))


def _logs_clean(resp, server):
    text = resp.text
    assert not any(line.startswith("[FORGED]") for line in text.splitlines()), "a forged log line"
    assert "\x1b" not in text and "\u2028" not in text
    for path in (str(server.root), sys.prefix, str(Path(__file__).resolve().parents[1])):
        assert path not in text, path


@functools.lru_cache(maxsize=None)  # cases() is rebuilt for every row
def _deflate_bomb() -> bytes:
    from fixtures_imaging import dicom_deflated

    with tempfile.TemporaryDirectory() as d:
        return dicom_deflated(Path(d) / "b.dcm", np.zeros((64, 64), np.uint8), bytes(200 * 1024 * 1024)).read_bytes()


@functools.lru_cache(maxsize=None)
def _oversized_jpeg_frame() -> bytes:
    from fixtures_imaging import dicom_jpeg_frame_larger_than_declared

    with tempfile.TemporaryDirectory() as d:
        return dicom_jpeg_frame_larger_than_declared(Path(d) / "j.dcm").read_bytes()


def _with_zip(data: bytes) -> bytes:
    import zipfile

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("evil/__init__.py", "import os\n")
    return data + buf.getvalue()


def _nested(depth: int) -> str:
    return '{"a":' * depth + "1" + "}" * depth


def file_cases(root: Path) -> list[Case]:
    C = Case
    victim = str(root / "victim")
    seg = "/infer/umind_segment"
    return [
        C("nrrd data file outside (upload)", "PUT", "/datastore/image", 400, ("separate data file",),
          {"image": "nrrd1"}, files={"file": ("x.nrrd", _nrrd_naming(victim))}, check=_no_outside_bytes),
        C("nrrd ascii byte skip outside (infer)", "POST", seg, 400, ("separate data file",),
          files={"file": ("x.nrrd", _nrrd_naming(victim, "ascii", "byte skip: 5\n"))}, check=_no_outside_bytes),
        C("nrrd data file LIST (infer)", "POST", seg, 400, ("separate data file",),
          files={"file": ("x.nrrd", _nrrd_naming("LIST\n" + victim))}, check=_no_outside_bytes),
        C("nrrd relative data file as label", "PUT", "/datastore/label", 400, ("separate data file",),
          {"image": "img0", "tag": "final"}, files={"label": ("l.nrrd", _nrrd_naming("../victim"))},
          check=_no_outside_bytes),
        C("nhdr named upload", "PUT", "/datastore/image", 400, ("separate data file",), {"image": "nhdr"},
          files={"file": ("x.nhdr", _nrrd_naming("../victim"))}, check=_no_outside_bytes),
        C("metaimage posing as nrrd", "PUT", "/datastore/image", 400, ("not a png",), {"image": "mha"},
          files={"file": ("x.nrrd", f"ObjectType = Image\nNDims = 2\nDimSize = 16 16\nElementType = MET_UCHAR"
                                     f"\nElementDataFile = {victim}\n".encode())}),
        C("deflated dicom bomb", "PUT", "/datastore/image", 400, ("inflates past",), {"image": "bomb"},
          files={"file": ("b.dcm", _deflate_bomb())}),
        C("jpeg frame larger than declared", "POST", seg, 400, ("3000 x 3000",),
          files={"file": ("j.dcm", _oversized_jpeg_frame())}),
        C("nifti with a zip after its data", "PUT", "/datastore/image", 400, ("after the end",), {"image": "nz"},
          files={"file": ("x.nii", _with_zip(plain_volume(".nii")))}),
        C("nrrd with a zip after its data", "PUT", "/datastore/image", 400, ("after the end",), {"image": "rz"},
          files={"file": ("x.nrrd", _with_zip(plain_volume(".nrrd")))}),
        C("label info 500 deep", "PUT", "/datastore/label", 400, ("nested",), {"image": "img0", "tag": "final"},
          params=_nested(500), files={"label": ("label.png", LABEL)}),
        C("label info 30 deep", "PUT", "/datastore/label", 400, ("nested 29",), {"image": "img0", "tag": "final"},
          params=_nested(29), files={"label": ("label.png", LABEL)}),
        C("label info of 100 KB", "PUT", "/datastore/label", 400, ("bytes",), {"image": "img0", "tag": "final"},
          params={"note": "x" * 100_000}, files={"label": ("label.png", LABEL)}),
        C("image info 100,000 deep", "PUT", "/datastore/image", 400, ("nested",), {"image": "deep"},
          params="[" * 100_000 + "]" * 100_000, files={"file": ("x.png", PNG)}),
        C("infer params 100,000 deep", "POST", seg, 400, ("nested",), {"image": "img0"},
          params='{"a":' + "[" * 100_000 + "]" * 100_000 + "}"),
        C("train params 30 deep", "POST", "/train/umind_lora", 400, ("nested",),
          json_body={"umind_lora": json.loads(_nested(29))}),
        C("infer NaN pixel spacing", "POST", seg, 200, (), {"image": "nan_spacing", "output": "json"},
          check=_finite_json),
        C("landmarks at 1e308 spacing", "POST", "/infer/umind_landmarks", 200, (),
          {"image": "huge_spacing", "output": "json"}, check=_finite_json),
        C("image served through a link", "GET", "/datastore/image", 404, (), {"image": "outlink"},
          check=_no_outside_bytes),
        C("infer through a link", "POST", seg, 404, (), {"image": "outlink"}, check=_no_outside_bytes),
        C("delete through a link", "DELETE", "/datastore/image", 404, (), {"id": "outlink"}),
        C("id naming a file in the working dir", "POST", seg, 200, (), {"image": "README.md", "output": "json"}),
        C("id naming a folder in the working dir", "POST", seg, 200, (), {"image": "docs", "output": "json"}),
        C("id with U+2028", "PUT", "/datastore/image", 400, ("format character",), {"image": "a\u2028b"}, files=up_png()),
        C("id with U+0085", "PUT", "/datastore/image", 400, ("control character",), {"image": "a\u0085b"},
          files=up_png()),
        C("id with U+009B", "PUT", "/datastore/image", 400, ("control character",), {"image": "a\u009bb"},
          files=up_png()),
        C("id with U+202E", "PUT", "/datastore/image", 400, ("format character",), {"image": "a\u202egnp"},
          files=up_png()),
        C("id with HTML", "PUT", "/datastore/image", 400, ("markup",), {"image": "<img src=x>"}, files=up_png()),
        C("id forging a log line", "PUT", "/datastore/image", 400, ("control character",),
          {"image": "x\n[FORGED] admin logged in\x1b[2J"}, files=up_png()),
        C("logs: no forged line, escape or path", "GET", "/logs/", 200, (), {"lines": "5000"}, check=_logs_clean),
        C("output dicom_seg on a studies folder", "POST", seg, 400, ("dicomweb",),
          {"image": "img0", "output": "dicom_seg"}, check=_no_leftover_reply_files),
        C("interpret as an image", "POST", "/infer/umind_interpret", 400, ("json",),
          {"image": "img0", "output": "image"}, check=_no_leftover_reply_files),
    ]


def up_png() -> dict:
    return {"file": ("x.png", PNG)}


@functools.lru_cache(maxsize=None)
def plain_volume(suffix: str) -> bytes:
    """A small image written by SimpleITK under `suffix` (".nii", ".nrrd"): nothing after its data."""
    import SimpleITK as sitk

    with tempfile.TemporaryDirectory() as d:
        p = os.path.join(d, "x" + suffix)
        sitk.WriteImage(sitk.GetImageFromArray(np.zeros((32, 32), np.uint8)), p)
        return Path(p).read_bytes()


def _jpeg() -> bytes:
    buf = io.BytesIO()
    Image.open(io.BytesIO(PNG)).convert("RGB").save(buf, format="JPEG")
    return buf.getvalue()


# ------------------------------------------------------------------------------------------------ the server
def build_tree(root: Path, model_dir: Path) -> tuple[Path, Path]:
    """root/studies (served) beside root/victim, root/victim.png and root/sentinel/ (must never change)."""
    from umind_core.modeling.tiny import build_model

    studies = root / "studies"
    studies.mkdir(parents=True)
    (studies / "img0.png").write_bytes(PNG_SEED0)
    (studies / "img1.png").write_bytes(png(seed=1))
    (studies / "big.png").write_bytes(png(400, 400))
    dicom_mono_multiframe(studies / "cine.dcm", n=3)
    (studies / ".hidden.png").write_bytes(png(seed=9))
    (root / "victim").write_bytes(b"victim file beside the studies folder\n")
    (root / "victim.png").write_bytes(png(seed=3))
    (root / "sentinel" / "x").mkdir(parents=True)
    (root / "sentinel" / "x" / "secret.txt").write_text("sentinel\n")
    (root / "allowed").mkdir()
    (root / "allowed" / "ok.png").write_bytes(png(seed=4))
    (root / "allowed" / "link.png").symlink_to(root / "victim.png")
    from fixtures_imaging import dicom_mono

    (studies / "outlink.png").symlink_to(root / "victim.png")  # an admin's mistake: never served nor followed
    dicom_mono(studies / "nan_spacing.dcm", pixel_spacing=(float("nan"), float("nan")))
    dicom_mono(studies / "huge_spacing.dcm", pixel_spacing=(1e308, 1e308))
    (studies / "README.md").write_text("# not an image: the server's working directory holds it\n")
    (studies / "README.md.png").write_bytes(png(seed=5))  # id README.md
    (studies / "docs").mkdir()
    (studies / "docs.png").write_bytes(png(seed=6))  # id docs
    build_model("tiny", lora=None).save_pretrained(model_dir)
    return studies, model_dir


def snapshot(root: Path) -> dict[str, str]:
    """Every path under root except the studies folder, with its content hash (folders as 'dir')."""
    out = {}
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root)
        if rel.parts[0] == "studies":
            continue
        if p.is_symlink():
            out[str(rel)] = f"link to {os.readlink(p)}"
        else:
            out[str(rel)] = "dir" if p.is_dir() else hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def start(tmp: Path):
    root, model_dir = tmp / "wall", tmp / "model"
    studies, _ = build_tree(root, model_dir)
    conf = {"model": str(model_dir), "max_new_tokens": "4", "retrain_every": "1000",
            "image_dirs": str(root / "allowed"), **CAPS}
    srv = start_server(studies, conf, tmp / "server.log", env={"MONAI_LABEL_AUTO_UPDATE_SCORING": "false"})
    srv.root, srv.studies = root, studies
    srv.started = time.time()
    return srv


def send(server, case: Case) -> requests.Response:
    data = dict(case.form)
    if case.params is not None:
        data["params"] = case.params if isinstance(case.params, str) else json.dumps(case.params)
    files = {k: v for k, v in case.files.items()} or None
    if files and data:  # requests sends form fields beside files only as (None, value) parts
        files.update({k: (None, v) for k, v in data.items()})
        data = None
    if case.json_body is not None:
        return requests.request(case.method, server.url + case.path, params=case.query, json=case.json_body,
                                headers=case.headers, timeout=120)
    return requests.request(case.method, server.url + case.path, params=case.query, data=data or None,
                            files=files, headers=case.headers, timeout=120)


def proc_kb(pid: int, key: str) -> int:
    """A /proc/PID/status value in kB (VmRSS, VmHWM)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise KeyError(key)


def reset_peak(pid: int) -> int:
    """Reset the process's high-water mark to its RSS now (Linux clear_refs 5); that RSS in kB."""
    Path(f"/proc/{pid}/clear_refs").write_text("5")
    return proc_kb(pid, "VmRSS")


def server_pid(srv) -> int:
    """The serving Python of the started process group (the largest one)."""
    import subprocess

    out = subprocess.run(["pgrep", "-g", str(os.getpgid(srv.proc.pid))], capture_output=True, text=True).stdout
    pids = [int(p) for p in out.split()]
    return max(pids, key=lambda p: proc_kb(p, "VmRSS")) if pids else srv.proc.pid


#: no request of at most 5 MB may cost the server more than this above its RSS at rest
MAX_PEAK_KB = 200 * 1024


def counter(server) -> int:
    return int(server.get_json("/info/")["umind"]["trigger"]["since_last_run"])


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    srv = start(tmp_path_factory.mktemp("corpus"))
    srv.before = snapshot(srv.root)
    srv.versions = (srv.studies / ".umind" / "versions.json")
    srv.pid = server_pid(srv)
    yield srv
    srv.stop()


_CASES = cases(Path("/ROOT"))  # names and order only; each test rebuilds its row with the real root


def test_corpus_has_at_least_60_cases():
    assert len(_CASES) >= 60
    assert len({c.name for c in _CASES}) == len(_CASES)


@pytest.mark.parametrize("index", range(len(_CASES)), ids=[c.name for c in _CASES])
def test_case(server, index):
    case = cases(server.root)[index]
    versions_before = server.versions.read_bytes() if server.versions.exists() else None
    count_before = counter(server)
    rest = reset_peak(server.pid)
    resp = send(server, case)
    peak = proc_kb(server.pid, "VmHWM") - rest
    assert peak < MAX_PEAK_KB, f"{case.name}: the server's peak memory rose {peak / 1024:.0f} MB"
    assert resp.status_code == case.expect, f"{case.name}: {resp.status_code} {resp.text[:300]}"
    if case.expect >= 400 and case.method not in ("HEAD", "OPTIONS"):
        detail = resp.json()["detail"]
        assert isinstance(detail, str), detail
        for word in case.words:
            assert word.lower() in detail.lower(), f"{case.name}: {word!r} not in {detail!r}"
        assert str(server.root) not in detail and tempfile.gettempdir() + "/" not in detail, detail
    assert "NaN" not in resp.text and "Infinity" not in resp.text, f"{case.name}: non-finite JSON"
    assert b"victim file" not in resp.content, f"{case.name}: bytes of a file outside the studies folder"
    if case.check:
        case.check(resp, server)
    assert server.get_json("/info/", timeout=30)["name"]  # the server still answers
    assert snapshot(server.root) == server.before, f"{case.name} changed files beside the studies folder"
    assert (server.versions.read_bytes() if server.versions.exists() else None) == versions_before
    assert counter(server) == count_before + (1 if case.counted else 0), case.name


if __name__ == "__main__":  # the status table against a fresh server (no assertions)
    with tempfile.TemporaryDirectory() as d:
        srv = start(Path(d))
        try:
            before = snapshot(srv.root)
            for c in cases(srv.root):
                try:
                    r = send(srv, c)
                    status, text = r.status_code, r.text[:90].replace("\n", " ")
                except requests.RequestException as exc:
                    status, text = "ERR", str(exc)[:90]
                changed = snapshot(srv.root) != before
                before = snapshot(srv.root)
                print(f"| {c.name} | {status} | {c.expect} | {'CHANGED' if changed else ''} | {text}")
        finally:
            srv.stop()
