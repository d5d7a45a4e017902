"""The studies-folder wall's rules without a server: names, content sniffing, infer image refs, caps, conf.

The corpus (test_security_corpus.py) replays them against a real server; these pin each rule's edges in
milliseconds so a change to one shows which rule moved.
"""

from __future__ import annotations

import gzip
import io
import sys
import threading
import types
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "monailabel_app"))

from lib.wall.caps import check_frame_count, check_image_size, check_request_counts, image_header_shape  # noqa: E402
from lib.conf import ConfError, parse_conf  # noqa: E402
from lib.wall.errors import BadRequest, NotFound  # noqa: E402
from lib.wall.image_ref import resolve_infer_image  # noqa: E402
from lib.wall.names import check_name, is_name  # noqa: E402
from lib.wall.uploads import UploadError, check_image_upload, sniff_format  # noqa: E402


@pytest.mark.parametrize("value", ["img0", "case 12", "scan-3_b", "a..b", "é", "x" * 200])
def test_names_that_pass(value):
    assert is_name(value) and check_name("image id", value) == value


@pytest.mark.parametrize("value,words", [
    ("../x", "separator"), ("a/b", "separator"), ("a\\b", "separator"), ("/etc/passwd", "separator"),
    ("..", "starts with '.'"), (".umind", "starts with '.'"), ("a\x00b", "U+0000"), ("a\nb", "U+000A"),
    ("", "is empty"), ("x" * 201, "characters long"), (" x", "white space"), (5, "must be a string"),
])
def test_names_that_fail_say_why(value, words):
    with pytest.raises(BadRequest) as err:
        check_name("label tag", value)
    assert words in str(err.value) and "label tag" in str(err.value)


def _png_bytes(h=32, w=32) -> bytes:
    buf = io.BytesIO()
    Image.fromarray((np.random.default_rng(0).random((h, w)) * 255).astype(np.uint8)).save(buf, format="PNG")
    return buf.getvalue()


@pytest.mark.parametrize("data,fmt", [
    (_png_bytes(), "png"), (b"\xff\xd8\xff\xe0" + b"\x00" * 20, "jpeg"), (b"\x00" * 128 + b"DICM" + b"\x00" * 8, "dicom"),
    (b"NRRD0004\n", "nrrd"), (b"\x00" * 344 + b"n+1\x00" + b"\x00" * 10, "nifti"),
    (gzip.compress(b"\x00" * 344 + b"n+1\x00" + b"\x00" * 200, mtime=0), "nifti-gz"), (gzip.compress(b"hello", mtime=0), None),
    (b"import os\n", None), (b"{}", None), (b"", None),
])
def test_format_is_sniffed_from_content(tmp_path, data, fmt):
    p = tmp_path / "upload.png"  # the name never matters
    p.write_bytes(data)
    assert sniff_format(p) == fmt


def test_image_upload_must_decode(tmp_path):
    good, bad = tmp_path / "a.py", tmp_path / "b.png"
    good.write_bytes(_png_bytes())
    bad.write_bytes(_png_bytes()[:len(_png_bytes()) // 2])  # cut inside the pixel data
    assert check_image_upload(good, "a", str(tmp_path)).endswith(".png")
    with pytest.raises(UploadError) as err:
        check_image_upload(bad, "b", str(tmp_path))
    assert "does not decode" in str(err.value) and str(tmp_path) not in str(err.value)


class _Store:
    def __init__(self, ids):
        self.ids = ids

    def get_image_uri(self, image_id):
        if image_id not in self.ids:
            raise NotFound(f"image {image_id!r} is not in the datastore")
        return f"/studies/{image_id}.png"


def test_infer_image_is_a_datastore_id_unless_image_dirs_allow_the_file(tmp_path):
    store = _Store({"img0"})
    assert resolve_infer_image("img0", store, (), uploaded=False) == ("img0", True)
    with pytest.raises(NotFound):
        resolve_infer_image("nosuch", store, (), uploaded=False)
    allowed = tmp_path / "allowed"
    allowed.mkdir()
    (allowed / "ok.png").write_bytes(_png_bytes())
    (tmp_path / "secret.png").write_bytes(_png_bytes())
    (allowed / "link.png").symlink_to(tmp_path / "secret.png")
    for path in (str(allowed / "ok.png"), str(tmp_path / "secret.png")):
        with pytest.raises(BadRequest) as err:  # off by default: same answer whether the file exists or not
            resolve_infer_image(path, store, (), uploaded=False)
        assert "not a datastore id" in str(err.value)
    dirs = (allowed.resolve(),)
    assert resolve_infer_image(str(allowed / "ok.png"), store, dirs, uploaded=False)[1] is False
    sibling = tmp_path / "allowed-not"  # shares the allowed folder's name as a prefix: a sibling, not inside it
    sibling.mkdir()
    (sibling / "x.png").write_bytes(_png_bytes())
    for path in (str(allowed / ".." / "secret.png"), str(allowed / "link.png"), str(allowed), "../allowed/ok.png",
                 str(sibling / "x.png")):
        with pytest.raises(BadRequest):
            resolve_infer_image(path, store, dirs, uploaded=False)
    with pytest.raises(BadRequest):  # only this request's own upload (a temp file) is accepted as a path
        resolve_infer_image(str(tmp_path / "secret.png"), store, (), uploaded=True)


def test_decode_conf_reaches_the_served_predictor(tmp_path):
    from lib.model_holder import ModelSpec, _load
    from lib.runtime import Runtime

    default = parse_conf({}, str(tmp_path))
    assert default.decode == ""  # the Predictor's own default (UMIND_DECODE or auto)
    # inductor's caches outlive the process in the workdir (not part of the key: it changes no answer)
    assert Runtime.create(default).spec().compile_cache == str(default.workdir / "compile_cache")
    conf = parse_conf({"decode": "Eager"}, str(tmp_path))
    spec = Runtime.create(conf).spec()
    assert spec.decode == "eager" and spec.key != ModelSpec(*spec.key[:-1]).key
    assert _load(spec)._engine.fast is None  # eager: transformers' own forward, no fast decoder
    assert parse_conf({"decode": "auto"}, str(tmp_path)).decode == "auto"


def test_info_decode_status_comes_from_the_loaded_predictor_only(tiny_model_factory):
    """/info's `umind.decode` (main.info): the loaded Predictor's decode status; absent, and nothing loaded for
    it, before a request loaded the model."""
    from lib.model_holder import ModelHolder

    from umind_core.inference.predictor import Predictor

    holder = ModelHolder()
    assert holder.decode_status() is None and holder.loads == 0
    model = tiny_model_factory()
    holder._predictor = Predictor(model, decode="auto")
    assert holder.decode_status() == {"mode": "auto", "steps": []}
    holder._predictor = Predictor(model, decode="eager")
    assert holder.decode_status() == {"mode": "eager", "steps": []}


def test_caps_name_their_conf_key(tmp_path):
    conf = parse_conf({"max_clicks": "3", "max_frames": "2", "max_pixels": "1000"}, str(tmp_path))
    check_request_counts({"foreground": [[1, 1, 0]] * 2, "background": [[2, 2, 0]]}, conf)
    with pytest.raises(BadRequest, match="max_clicks = 3"):
        check_request_counts({"foreground": [[1, 1, 0]] * 2, "background": [[2, 2, 0]] * 2}, conf)
    with pytest.raises(BadRequest, match="max_frames = 2"):
        check_frame_count(3, conf)
    with pytest.raises(BadRequest, match="max_frames = 2"):  # a frames list is counted before it is parsed
        check_request_counts({"frames": [0, 1, 2]}, conf)
    p = tmp_path / "big.png"
    p.write_bytes(_png_bytes(40, 30))
    assert image_header_shape(str(p)) == (40, 30)
    with pytest.raises(BadRequest, match="max_pixels = 1,000"):
        check_image_size(image_header_shape(str(p)), conf)


@pytest.mark.parametrize("conf,words", [
    ({"max_clicks": "0"}, "max_clicks must be at least 1"), ({"max_pixels": "many"}, "max_pixels must be an integer"),
    ({"image_dirs": "relative/dir"}, "image_dirs must list existing absolute folders"),
    ({"image_dirs": "/no/such/folder"}, "image_dirs must list existing absolute folders"),
    ({"cors_origins": "*"}, "cors_origins must list origins"), ({"cors_origins": "ftp://x"}, "cors_origins"),
    ({"cors_origins": "https://a.example/app"}, "cors_origins"),
    ({"decode": "fastest"}, "decode must be one of auto, static, compiled, tuned, eager"),
])
def test_bad_cap_or_image_dirs_stop_the_start(tmp_path, conf, words):
    with pytest.raises(ConfError, match=words):
        parse_conf(conf, str(tmp_path))


def test_defaults_are_on_and_server_paths_off(tmp_path):
    conf = parse_conf({}, str(tmp_path))
    assert (conf.max_clicks, conf.max_targets, conf.max_frames, conf.max_pixels) == (64, 32, 128, 50_000_000)
    assert conf.image_dirs == () and conf.cors_origins == ()
    assert parse_conf({"cors_origins": "https://a.example/, http://b:3000"}, str(tmp_path)).cors_origins == (
        "https://a.example", "http://b:3000")


def test_the_served_model_loads_and_answers_on_the_model_thread(tmp_path, monkeypatch):
    """The model is loaded on MODEL_THREAD whatever thread asks first, and the infer scheduler runs batches there."""
    import lib.model_holder as model_holder
    from lib.runtime import Runtime

    loaded_on = []

    def fake_load(spec):
        loaded_on.append(threading.current_thread().name)
        return types.SimpleNamespace(batch_size=8)

    monkeypatch.setattr(model_holder, "_load", fake_load)
    model_holder.holder.clear()
    try:
        scheduler, _ = Runtime.create(parse_conf({}, str(tmp_path))).scheduler()
    finally:
        model_holder.holder.clear()
    assert len(loaded_on) == 1 and loaded_on[0].startswith("umind-model"), loaded_on
    assert scheduler.executor is model_holder.MODEL_THREAD


def test_every_frame_of_a_study_counts_against_max_pixels(tmp_path):
    """A clip is decoded whole: 10 frames of 200 x 200 are 400,000 pixels, over a 150,000 cap that one frame
    (40,000) would pass."""
    import SimpleITK as sitk

    from lib.wall.caps import check_image_budget

    clip = tmp_path / "clip.nii.gz"
    sitk.WriteImage(sitk.GetImageFromArray(np.zeros((10, 200, 200), np.uint8)), str(clip))
    assert image_header_shape(str(clip)) == (10, 200, 200)
    conf = parse_conf({"max_pixels": "150000"}, str(tmp_path))
    with pytest.raises(BadRequest, match=r"400,000 pixels \(10 x 200 x 200\).*max_pixels = 150,000"):
        check_image_budget(str(clip), conf)
    one = tmp_path / "one.nii.gz"
    sitk.WriteImage(sitk.GetImageFromArray(np.zeros((200, 200), np.uint8)), str(one))
    assert check_image_budget(str(one), conf) == (200, 200)


def test_the_decode_budget_counts_bytes_not_only_pixels(tmp_path):
    """max_pixels x 4 bytes is the most one decoded study may take: a float64 image (8 bytes a pixel) of 100,000
    pixels is refused under a 150,000-pixel cap that its pixel count passes; the same image as float32 (4 bytes)
    fits, and so does a uint8 RGB one (3)."""
    import SimpleITK as sitk

    from lib.wall.caps import check_image_budget

    conf = parse_conf({"max_pixels": "150000"}, str(tmp_path))
    wide = tmp_path / "f64.nii.gz"
    sitk.WriteImage(sitk.GetImageFromArray(np.zeros((250, 400), np.float64)), str(wide))
    with pytest.raises(BadRequest, match=r"decode to 1 MB \(8 bytes a pixel\), over the budget of 1 MB"):
        check_image_budget(str(wide), conf)
    narrow = tmp_path / "f32.nii.gz"
    sitk.WriteImage(sitk.GetImageFromArray(np.zeros((250, 400), np.float32)), str(narrow))
    assert check_image_budget(str(narrow), conf) == (250, 400)
    rgb = tmp_path / "rgb.png"
    Image.fromarray(np.zeros((250, 400, 3), np.uint8)).save(rgb)
    assert check_image_budget(str(rgb), conf) == (250, 400)
