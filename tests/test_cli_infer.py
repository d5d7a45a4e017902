"""`umind infer` end to end on the tiny model that memorised make_image(0): inputs of every kind, outputs in the
input's geometry, resuming, bad input failing alone, request errors, the no-model warning and accelerate sharding."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import fixtures_imaging as fx
from conftest import lesion_boxes, make_image
from umind_core import batch, demo
from umind_core.cli import main
from umind_core.testing.server import free_port

REPO = Path(__file__).resolve().parents[1]
(Y0, Y1, X0, X1), = lesion_boxes(256, 256, 1)
TRUTH = np.zeros((256, 256), bool)
TRUTH[Y0:Y1, X0:X1] = True


@pytest.fixture(scope="module")
def model_dir(trained_tiny, tmp_path_factory) -> Path:
    return trained_tiny.save_pretrained(tmp_path_factory.mktemp("model") / "umind")


def _png(path: Path, arr: np.ndarray | None = None) -> Path:
    Image.fromarray(make_image(0) if arr is None else arr).save(path)
    return path


def _infer(capsys, model_dir, *argv, quiet: bool = True) -> tuple[int, str, str]:
    rc = main(["infer", *map(str, argv), "--model", str(model_dir), *(["--quiet"] if quiet else [])])
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


def _doc(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def _iou(a: np.ndarray, b: np.ndarray) -> float:
    return float((a & b).sum() / max((a | b).sum(), 1))


def _sitk_array(path: Path):
    import SimpleITK as sitk

    img = sitk.ReadImage(str(path))
    return sitk.GetArrayFromImage(img), img.GetSpacing()


# ------------------------------------------------------------------ good inputs


def test_png_segment_writes_results_label_map_and_overlay(tmp_path, capsys, model_dir):
    img = _png(tmp_path / "scan.png")
    rc, out, err = _infer(capsys, model_dir, img, "--out", tmp_path / "out", "--task", "segment",
                          "--prompt", "lesion", "--overlay")
    assert rc == 0, err
    assert out.strip().startswith("umind infer: 1 inputs, 1 frames, 0 failed, 0 skipped, in ")
    folder = tmp_path / "out" / "scan"
    doc = _doc(folder / "results.json")
    assert doc["format"] == "umind-infer" and doc["task"] == "segment" and doc["model"] == str(model_dir)
    assert doc["geometry"]["kind"] == "2d" and doc["geometry"]["shape"] == [256, 256]
    assert doc["outputs"] == {"labels": "labels.png", "markups": None, "overlays": ["overlay-0000.png"], "image": None}
    (frame,) = doc["results"]
    (obj,) = frame["objects"]
    assert obj["label"] == "lesion" and obj["mask"]["file"] == "labels.png"
    assert doc["label_values"] == {"lesion": obj["mask"]["label_value"]}
    labels = np.asarray(Image.open(folder / "labels.png"))
    assert labels.shape == (256, 256) and _iou(labels == obj["mask"]["label_value"], TRUTH) > 0.6
    overlay = np.asarray(Image.open(folder / "overlay-0000.png"))
    assert overlay.shape == (256, 256, 3) and not np.array_equal(overlay, make_image(0))


def test_detect_writes_markups_in_pixel_units_of_a_png(tmp_path, capsys, model_dir):
    from umind_core.imageio import read_markups_json

    img = _png(tmp_path / "scan.png")
    rc, _, err = _infer(capsys, model_dir, img, "--out", tmp_path / "out", "--task", "detect", "--prompt", "lesion",
                        "--readout", "tokens")  # the box the model writes: the trained fixture's is the exact one
    assert rc == 0, err
    folder = tmp_path / "out" / "scan"
    doc = _doc(folder / "results.json")
    assert doc["outputs"]["labels"] is None and doc["outputs"]["markups"] == "markups.mrk.json"
    box = doc["results"][0]["objects"][0]["box"]
    assert box == pytest.approx([X0, Y0, X1 - 1, Y1 - 1], abs=3)
    (roi,) = read_markups_json(folder / "markups.mrk.json")
    assert roi["type"] == "ROI" and roi["name"] == "lesion"
    assert roi["center_lps"][:2] == pytest.approx([(box[0] + box[2]) / 2, (box[1] + box[3]) / 2], abs=1e-6)


def test_folders_and_globs_expand_to_image_files_with_distinct_names(tmp_path, capsys, model_dir):
    d = tmp_path / "data"
    (d / "sub").mkdir(parents=True)
    _png(d / "a.png")
    _png(d / "sub" / "a.png")
    (d / "notes.txt").write_text("not an image")
    out_dir = d / "results"  # inside the input folder: its overlays must never become inputs
    rc, out, err = _infer(capsys, model_dir, d, "--out", out_dir, "--task", "diagnose", "--overlay")
    assert rc == 0, err
    assert "2 inputs, 2 frames, 0 failed" in out
    assert sorted(p.name for p in out_dir.iterdir()) == ["a", "sub__a"]
    assert (out_dir / "a" / "overlay-0000.png").is_file()
    assert _doc(out_dir / "sub__a" / "results.json")["results"][0]["answer"] == "Benign."
    rc, out, _ = _infer(capsys, model_dir, d, "--out", out_dir, "--task", "diagnose", "--overlay")
    assert rc == 0 and "2 inputs, 0 frames, 0 failed, 2 skipped" in out

    rc, out, err = _infer(capsys, model_dir, str(d / "*.png"), "--out", tmp_path / "glob", "--task", "diagnose")
    assert rc == 0, err
    assert "1 inputs, 1 frames" in out and [p.name for p in (tmp_path / "glob").iterdir()] == ["a"]


def _dicom_cine(path: Path, n: int = 2) -> Path:
    ds = fx._dataset(path, fx.US_MULTIFRAME_STORAGE)
    fx._set_pixels(ds, np.stack([make_image(0)[..., 0]] * n), "MONOCHROME2", frames=n)
    ds.PixelSpacing = [0.3, 0.2]
    ds.save_as(str(path), write_like_original=False)
    return path


def test_cine_clip_processes_every_frame_in_batches_and_writes_one_label_map(tmp_path, capsys, model_dir):
    clip = _dicom_cine(tmp_path / "clip.dcm", n=3)
    rc, out, err = _infer(capsys, model_dir, clip, "--out", tmp_path / "out", "--task", "segment",
                          "--prompt", "lesion", "--batch-size", "2")
    assert rc == 0, err
    assert "1 inputs, 3 frames" in out
    doc = _doc(tmp_path / "out" / "clip" / "results.json")
    assert doc["geometry"]["kind"] == "cine" and doc["frames"] == [0, 1, 2]
    assert [r["frame_index"] for r in doc["results"]] == [0, 1, 2]
    labels, spacing = _sitk_array(tmp_path / "out" / "clip" / doc["outputs"]["labels"])
    assert doc["outputs"]["labels"] == "labels.nrrd" and labels.shape == (3, 256, 256)
    assert spacing[:2] == pytest.approx((0.2, 0.3))
    for k in range(3):
        assert _iou(labels[k] == doc["label_values"]["lesion"], TRUTH) > 0.6
    area = doc["results"][0]["objects"][0]["physical"]["area_mm2"]
    assert area == pytest.approx(doc["results"][0]["objects"][0]["mask"]["pixels"] * 0.2 * 0.3)


def test_frames_range_selects_and_clips_and_leaves_other_frames_empty(tmp_path, capsys, model_dir):
    clip = _dicom_cine(tmp_path / "clip.dcm", n=3)
    rc, _, err = _infer(capsys, model_dir, clip, "--out", tmp_path / "out", "--task", "segment",
                        "--prompt", "lesion", "--frames", "2-9")
    assert rc == 0, err
    doc = _doc(tmp_path / "out" / "clip" / "results.json")
    assert doc["frames"] == [2] and doc["request"]["frames"] == "2-9"
    labels, _ = _sitk_array(tmp_path / "out" / "clip" / "labels.nrrd")
    assert labels[:2].max() == 0 and labels[2].max() > 0


def test_volume_is_sliced_along_the_chosen_axis_and_labels_keep_its_geometry(tmp_path, capsys, model_dir):
    grey = make_image(0)[..., 0].astype(np.float32)
    vol = np.stack([grey, grey], axis=2)  # (z, y, x) = (256, 256, 2): slices along axis 2 are the image
    path = fx.sitk_volume(tmp_path / "vol.nii.gz", vol, spacing=(0.5, 0.7, 1.3))
    png = _png(tmp_path / "flat.png")  # --axis is for volumes: a 2D image in the same batch still works
    rc, out, err = _infer(capsys, model_dir, path, png, "--out", tmp_path / "out", "--task", "segment",
                          "--prompt", "lesion", "--axis", "2")
    assert rc == 0, err
    assert "2 inputs, 3 frames, 0 failed" in out
    doc = _doc(tmp_path / "out" / "vol" / "results.json")
    assert doc["geometry"]["kind"] == "volume" and doc["geometry"]["axis"] == 2 and doc["frames"] == [0, 1]
    labels, spacing = _sitk_array(tmp_path / "out" / "vol" / "labels.nii.gz")
    assert labels.shape == (256, 256, 2) and spacing == pytest.approx((0.5, 0.7, 1.3))
    value = doc["label_values"]["lesion"]
    for k in range(2):
        assert _iou(labels[:, :, k] == value, TRUTH) > 0.6
    rc, _, err = _infer(capsys, model_dir, path, "--out", tmp_path / "current", "--task", "segment",
                        "--prompt", "lesion", "--axis", "2", "--frames", "current")
    assert rc == 0, err
    assert _doc(tmp_path / "current" / "vol" / "results.json")["frames"] == [1]  # the middle slice


# ------------------------------------------------------------------ resuming


def test_second_run_skips_done_inputs_and_overwrite_redoes_them(tmp_path, capsys, model_dir):
    img = _png(tmp_path / "scan.png")
    args = [img, "--out", tmp_path / "out", "--task", "segment", "--prompt", "lesion"]
    assert _infer(capsys, model_dir, *args)[0] == 0
    files = [tmp_path / "out" / "scan" / n for n in ("results.json", "labels.png")]
    before = [f.stat().st_mtime_ns for f in files]
    rc, out, _ = _infer(capsys, model_dir, *args)
    assert rc == 0 and "1 inputs, 0 frames, 0 failed, 1 skipped" in out
    assert [f.stat().st_mtime_ns for f in files] == before
    rc, out, _ = _infer(capsys, model_dir, *args, "--task", "detect")  # another question is never "done"
    assert rc == 1 and "holds results of another request" in out
    rc, out, _ = _infer(capsys, model_dir, *args, "--overwrite")
    assert rc == 0 and "1 inputs, 1 frames, 0 failed, 0 skipped" in out
    assert all(f.stat().st_mtime_ns != b for f, b in zip(files, before))


# ------------------------------------------------------------------ bad input


def _png_header_only(path: Path, width: int, height: int) -> Path:
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\0" * 64))
                     + chunk(b"IEND", b""))
    return path


def _nifti(path: Path, data: np.ndarray) -> Path:
    import nibabel as nib

    nib.save(nib.Nifti1Image(data, np.eye(4)), str(path))
    return path


def test_bad_inputs_fail_alone_with_one_line_each(tmp_path, capsys, model_dir):
    good_a, good_b = _png(tmp_path / "good_a.png"), _png(tmp_path / "good_b.png")
    (tmp_path / "corrupt.png").write_bytes(b"\x89PNG not really" * 20)
    (tmp_path / "empty.png").write_bytes(b"")
    truncated = fx.sitk_volume(tmp_path / "truncated.nii", fx.volume_array(8, 16, 16))
    truncated.write_bytes(truncated.read_bytes()[:2000])
    (tmp_path / "notes.txt").write_text("hello")
    _png(tmp_path / "tiny.png", np.zeros((1, 1), np.uint8))
    _png_header_only(tmp_path / "huge.png", 20000, 20000)
    fx.sitk_volume(tmp_path / "nan.nrrd", np.full((4, 16, 16), np.nan, np.float32))  # ITK's NIfTI reader zeroes NaN
    _png(tmp_path / "constant.png", np.full((64, 64), 128, np.uint8))
    _nifti(tmp_path / "layout4d.nii.gz", np.ones((16, 16, 2, 3), np.float32))
    fx.dicom_without_pixels(tmp_path / "nopixels.dcm")
    _png(tmp_path / "small.png", make_image(0)[:64, :64])
    expected = {  # input -> words its failure line must contain
        "corrupt.png": "cannot read png", "empty.png": "empty", "truncated.nii": "truncated",
        "notes.txt": "unsupported file type", "tiny.png": "too small", "huge.png": "400000000 pixels",
        "nan.nrrd": "no finite values", "constant.png": "constant", "layout4d.nii.gz": "unknown frame layout",
        "nopixels.dcm": "no PixelData", "small.png": "outside the 64x64 image", "missing.png": "does not exist",
    }
    inputs = [good_a, *(tmp_path / name for name in expected), good_b]
    rc, out, err = _infer(capsys, model_dir, *inputs, "--out", tmp_path / "out", "--task", "detect",
                          "--prompt", "lesion", "--box", "100", "100", "200", "200", quiet=False)
    assert rc == 1
    assert "Traceback" not in err and "Traceback" not in out
    lines = out.strip().splitlines()
    assert lines[0].startswith(f"umind infer: {len(inputs)} inputs, 2 frames, {len(expected)} failed, 0 skipped")
    failed = {line.split(": ", 1)[0].removeprefix("  FAILED "): line for line in lines[1:]}
    assert set(failed) == {str(tmp_path / name) for name in expected}
    for name, words in expected.items():
        assert words in failed[str(tmp_path / name)], failed[str(tmp_path / name)]
    for good in ("good_a", "good_b"):
        (res,) = _doc(tmp_path / "out" / good / "results.json")["results"]
        assert res["task"] == "detect" and res["image_size"] == [256, 256]
    for name in expected:  # each failure is also reported once on stderr as it happens
        assert err.count(f"umind infer: {tmp_path / name}: ") == 1, name
    assert "umind infer: 100%" in err  # the progress bar, over the frames of the inputs that were read


@pytest.mark.parametrize("argv, words", [
    (["--task", "classify"], "unknown task 'classify'"),
    (["--task", "ask", "--prompt", ""], "--prompt is empty"),
    (["--task", "segment", "--prompt", "   "], "--prompt is empty"),
    (["--task", "ask", "--prompt", "x" * 10000], "too long"),
    (["--task", "ask"], "needs a non-empty prompt"),
    (["--task", "segment", "--points", "10", "20"], "no --labels"),
    (["--task", "segment", "--points", "10", "20", "--labels", "1", "0"], "1 point(s) but --labels gave 2"),
    (["--task", "segment", "--box", "1", "2", "1", "9"], "has no area"),
    (["--task", "segment", "--frames", "5-2"], "ends (2) before it starts (5)"),
    (["--task", "detect", "--decode", "fastest"], "--decode must be one of auto, static, compiled, tuned, eager"),
])
def test_bad_requests_exit_2_with_one_line_before_loading_a_model(tmp_path, capsys, argv, words):
    img = _png(tmp_path / "scan.png")
    rc = main(["infer", str(img), "--out", str(tmp_path / "out"), "--model", str(tmp_path / "no-model"), *argv])
    err = capsys.readouterr().err
    assert rc == 2
    assert err.count("\n") == 1 and err.startswith("umind infer: error: ") and words in err, err
    assert not (tmp_path / "out").exists()


def test_without_model_the_untrained_tiny_model_warns(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(demo, "has_demo_model", lambda: False)
    img = _png(tmp_path / "scan.png", make_image(0)[:64, :64])
    rc = main(["infer", str(img), "--out", str(tmp_path / "out"), "--task", "diagnose", "--max-new-tokens", "2",
               "--quiet"])
    err = capsys.readouterr().err
    assert rc == 0
    assert demo.UNTRAINED_WARNING in err
    assert _doc(tmp_path / "out" / "scan" / "results.json")["model"] == "untrained tiny model (random weights)"


# ------------------------------------------------------------------ accelerate


def _assert_same(one, two, where: str = "") -> None:
    """The same results.json content, except timings and float noise (thread counts change reduction order)."""
    if isinstance(one, dict):
        keys = set(one) - {"timings", "elapsed_s"}
        assert isinstance(two, dict) and keys == set(two) - {"timings", "elapsed_s"}, where
        for k in keys:
            _assert_same(one[k], two[k], f"{where}/{k}")
    elif isinstance(one, list):
        assert isinstance(two, list) and len(one) == len(two), where
        for i, (a, b) in enumerate(zip(one, two)):
            _assert_same(a, b, f"{where}[{i}]")
    elif isinstance(one, float) and isinstance(two, float):
        assert two == pytest.approx(one, rel=1e-5, abs=1e-7), where
    else:
        assert one == two, where


@pytest.mark.slow
def test_accelerate_two_cpu_processes_write_what_one_process_writes(tmp_path, capsys, model_dir):
    inputs = [_png(tmp_path / "a.png"), _png(tmp_path / "b.png"), _dicom_cine(tmp_path / "clip.dcm", n=2),
              tmp_path / "empty.png"]
    inputs[-1].write_bytes(b"")
    common = ["--task", "segment", "--prompt", "lesion", "--model", str(model_dir), "--quiet"]
    rc, one_out, _ = _infer(capsys, model_dir, *inputs, "--out", tmp_path / "one", *common[:4])
    assert rc == 1
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    # accelerate 1.16 starts several CPU processes only through torchrun (--multi_gpu; its --cpu launcher is
    # single-process without mpirun); --device cpu makes them join a gloo group, GPUs or not
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
           "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
           "--main_process_port", str(free_port()),
           "-m", "umind_core.cli", "infer", *map(str, inputs), "--out", str(tmp_path / "two"), *common,
           "--device", "cpu"]
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode != 0, proc.stdout + proc.stderr  # empty.png failed, on whichever process had it
    # the launcher reports the failed process with its own traceback; none may come from our code
    assert f'File "{REPO / "umind_core"}' not in proc.stderr, proc.stderr
    summary = [line for line in proc.stdout.splitlines() if line.startswith(("umind infer:", "  FAILED"))]
    assert summary[0].startswith("umind infer: 4 inputs, 4 frames, 1 failed, 0 skipped")
    assert summary[1:] == [f"  FAILED {inputs[-1]}: file is empty"]
    assert one_out.strip().splitlines()[1:] == summary[1:]
    names = sorted(p.name for p in (tmp_path / "one").iterdir())
    assert names == ["a", "b", "clip"] and sorted(p.name for p in (tmp_path / "two").iterdir()) == names
    for name in names:
        one = _doc(tmp_path / "one" / name / "results.json")
        two = _doc(tmp_path / "two" / name / "results.json")
        _assert_same(one, two, name)
        assert sorted(p.name for p in (tmp_path / "one" / name).iterdir()) == \
            sorted(p.name for p in (tmp_path / "two" / name).iterdir())


def test_parallel_inputs_share_batches_and_write_what_one_at_a_time_writes(tmp_path, capsys, model_dir):
    inputs = [_png(tmp_path / f"img{i}.png", make_image(i, height=h, width=w))
              for i, (h, w) in enumerate([(256, 256), (192, 256), (256, 224), (256, 256)])]
    inputs += [_dicom_cine(tmp_path / "clip.dcm", n=3), tmp_path / "empty.png"]
    inputs[-1].write_bytes(b"")
    common = ["--task", "detect", "--prompt", "lesion"]
    rc1, out1, _ = _infer(capsys, model_dir, *inputs, "--out", tmp_path / "one", *common, "--parallel", "1")
    rc4, out4, _ = _infer(capsys, model_dir, *inputs, "--out", tmp_path / "four", *common, "--parallel", "4")
    assert rc1 == rc4 == 1  # the empty file failed alone in both
    assert out1.splitlines()[1:] == out4.splitlines()[1:] == [f"  FAILED {inputs[-1]}: file is empty"]
    names = sorted(p.name for p in (tmp_path / "one").iterdir())
    assert names == ["clip", "img0", "img1", "img2", "img3"]
    for name in names:
        _assert_same(_doc(tmp_path / "one" / name / "results.json"), _doc(tmp_path / "four" / name / "results.json"),
                     name)
        assert sorted(p.name for p in (tmp_path / "one" / name).iterdir()) == \
            sorted(p.name for p in (tmp_path / "four" / name).iterdir())
    rc, _, _ = _infer(capsys, model_dir, *inputs[:1], "--out", tmp_path / "x", *common, "--parallel", "0")
    assert rc == 2


def test_parallel_inputs_run_the_model_on_one_thread(tmp_path, capsys, model_dir, monkeypatch):
    """With --parallel the model's batches run on one model thread (torch's OpenMP slows a second thread), not on
    the scheduler's worker or the input threads; alone, everything stays on the calling thread."""
    import threading

    from umind_core.inference.predictor import Predictor

    seen: list[str] = []
    for name in ("predict_many", "predict_batch"):
        original = getattr(Predictor, name)

        def spy(self, *a, _original=original, **k):
            seen.append(threading.current_thread().name)
            return _original(self, *a, **k)

        monkeypatch.setattr(Predictor, name, spy)
    inputs = [_png(tmp_path / f"img{i}.png", make_image(i)) for i in range(3)]
    common = ["--task", "detect", "--prompt", "lesion"]
    assert _infer(capsys, model_dir, *inputs, "--out", tmp_path / "par", *common, "--parallel", "3")[0] == 0
    assert seen and all(n.startswith("umind-model") for n in seen), seen
    seen.clear()
    assert _infer(capsys, model_dir, *inputs, "--out", tmp_path / "one", *common, "--parallel", "1")[0] == 0
    assert seen and set(seen) == {threading.current_thread().name}, seen


# ------------------------------------------------------------------ naming and frame selection


def test_output_names_are_stems_made_longer_only_where_they_collide(tmp_path):
    paths = [tmp_path / "a" / "img.png", tmp_path / "b" / "img.png", tmp_path / "a" / "img.nii.gz",
             tmp_path / "c" / "scan.nii.gz", tmp_path / "c" / "IM0001"]
    assert batch.output_names(paths) == ["a__img_png", "b__img", "a__img_nii_gz", "scan", "IM0001"]
    assert batch.output_names([Path("x/a b.png"), Path("x/a_b.png")]) == ["a_b_png", "a_b_png-2"]


def test_frame_specs_select_per_input():
    from umind_core.imageio import Geometry

    eye = tuple(float(v) for v in np.eye(3).ravel())
    vol = Geometry("volume", (7, 20, 20), (1.0,) * 3, (0.0,) * 3, eye, format="nifti")
    cine = Geometry("cine", (7, 20, 20), (1.0,) * 3, (0.0,) * 3, eye, format="dicom")
    assert batch.parse_frames("all").select(vol, "v") == list(range(7))
    assert batch.parse_frames("current").select(vol, "v") == [3]
    assert batch.parse_frames("current").select(cine, "c") == [0]
    assert batch.parse_frames("2-4").select(cine, "c") == [2, 3, 4]
    assert batch.parse_frames("5-").select(cine, "c") == [5, 6]
    assert batch.parse_frames("6").select(cine, "c") == [6]
    with pytest.raises(batch.FrameSpecError, match="c: --frames 9 starts past the last frame"):
        batch.parse_frames("9").select(cine, "c")
    for bad in ("x", "-3", "1.5", "4-2"):
        with pytest.raises(batch.FrameSpecError, match="--frames"):
            batch.parse_frames(bad)
