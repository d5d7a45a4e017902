"""`umind import`: a small fixture in each published layout (nnU-Net v2, COCO, UltraBench, CSV, Slicer exports),
imported and checked exactly: masks, boxes, label names, splits, spacing, skip reasons, exit status 2 on a broken
source, and an nnU-Net import that trains two steps."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from umind_core.cli import main as cli_main
from umind_core.data.manifest import read_manifest
from umind_core.importers import import_dataset
from umind_core.importers.coco import polygons_mask, rle_decode
from umind_core.importers.common import is_lesion_kind


# ------------------------------------------------------------------------------------------------ helpers

def _png(path: Path, arr: np.ndarray) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(arr).save(path)
    return path


def _speckle(h: int, w: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (h, w), dtype=np.uint8)


def _by_id(path: Path) -> dict:
    return {r.id: r for r in read_manifest(path)}


def _objects(rec) -> list[tuple[str, np.ndarray | None, tuple | None]]:
    return [(o.label, m, o.box) for o, m in zip(rec.annotations.objects, rec.load_masks())]


def _reasons(out: Path) -> dict[str, int]:
    return json.loads((out / "import_report.json").read_text())["skipped_by_reason"]


def _dropped(out: Path) -> dict[str, int]:
    return json.loads((out / "import_report.json").read_text())["dropped"]


def _rect(h: int, w: int, *boxes) -> np.ndarray:
    m = np.zeros((h, w), dtype=bool)
    for y0, y1, x0, x1 in boxes:
        m[y0:y1, x0:x1] = True
    return m


def _iou(a: np.ndarray, b: np.ndarray) -> float:
    return float((a & b).sum()) / float((a | b).sum())


def _run_cli(argv, capsys) -> tuple[int, str, str]:
    code = cli_main(argv)
    cap = capsys.readouterr()
    return code, cap.out, cap.err


# ------------------------------------------------------------------------------------------------ rules

def test_lesion_rule_is_by_whole_word():
    assert all(is_lesion_kind(n) for n in ("thyroid_nodule", "breast lesion", "Renal Cyst", "masses", "tumour",
                                           "tumors", "liver mass"))
    assert not any(is_lesion_kind(n) for n in ("thyroid", "kidney", "masseter muscle", "cystic duct wall"))


def test_import_is_registered_with_documented_layout_and_columns(capsys):
    with pytest.raises(SystemExit) as exc:
        cli_main(["import", "--help"])
    assert exc.value.code == 0
    text = capsys.readouterr().out
    for needle in ("nnunet", "coco", "ultrabench", "slicer", "--merge", "DIR/<split>.jsonl", "spacing_x",
                   "kidney_length_mm", "finding | diagnosis", "iscrowd"):
        assert needle in text, needle


# ------------------------------------------------------------------------------------------------ nnU-Net

def _nnunet_png(root: Path) -> Path:
    d = root / "Dataset001_Thyroid"
    (d / "dataset.json").parent.mkdir(parents=True)
    (d / "dataset.json").write_text(json.dumps({"labels": {"background": 0, "thyroid": 1, "thyroid_nodule": 2},
                                                "file_ending": ".png", "channel_names": {"0": "US"},
                                                "numTraining": 3}))
    lab_a = np.zeros((64, 64), np.uint8)
    lab_a[4:44, 4:60] = 1
    lab_a[10:15, 10:15] = 2  # two nodules: two objects
    lab_a[20:28, 30:40] = 2
    lab_a[50:52, 50:52] = 7  # a value dataset.json does not name
    lab_b = np.zeros((64, 64), np.uint8)
    lab_b[5:10, 5:10] = 1  # a thyroid in two pieces: one object
    lab_b[30:40, 30:40] = 1
    for i, (case, lab) in enumerate({"a": lab_a, "b": lab_b, "c": np.zeros((64, 64), np.uint8)}.items()):
        _png(d / "imagesTr" / f"{case}_0000.png", _speckle(64, 64, i))
        _png(d / "labelsTr" / f"{case}.png", lab)
    _png(d / "imagesTr" / "d_0000.png", _speckle(64, 64, 9))  # no label
    _png(d / "labelsTr" / "e.png", lab_b)  # no image
    _png(d / "imagesTs" / "t_0000.png", _speckle(64, 64, 5))
    return d


def test_nnunet_png_masks_components_splits_and_skips(tmp_path):
    src = _nnunet_png(tmp_path)
    out = tmp_path / "imp"
    summary = import_dataset("nnunet", src, out, progress=False)
    assert summary.per_split == {"train": 3, "test": 1} and summary.imported == 4
    assert _reasons(out) == {"no label file in labelsTr": 1, "label file without an image in imagesTr": 1}
    assert _dropped(out) == {"label value 7 has no name": 1}
    train, test = _by_id(out / "train.jsonl"), _by_id(out / "test.jsonl")
    assert sorted(train) == ["a", "b", "c"] and sorted(test) == ["t"]
    assert set(_by_id(out / "manifest.jsonl")) == {"a", "b", "c", "t"}

    a = _objects(train["a"])
    assert [lab for lab, _m, _b in a] == ["thyroid", "thyroid nodule", "thyroid nodule"]
    thyroid = _rect(64, 64, (4, 44, 4, 60)) & ~_rect(64, 64, (10, 15, 10, 15), (20, 28, 30, 40))
    assert np.array_equal(a[0][1], thyroid) and a[0][2] == (4, 4, 59, 43)
    assert np.array_equal(a[1][1], _rect(64, 64, (10, 15, 10, 15))) and a[1][2] == (10, 10, 14, 14)
    assert np.array_equal(a[2][1], _rect(64, 64, (20, 28, 30, 40))) and a[2][2] == (30, 20, 39, 27)
    (b,) = _objects(train["b"])
    assert b[0] == "thyroid" and np.array_equal(b[1], _rect(64, 64, (5, 10, 5, 10), (30, 40, 30, 40)))
    assert train["c"].annotations.objects == []  # an empty label map is a negative
    assert test["t"].annotations.objects == [] and test["t"].extra["labelled"] is False
    assert all(r.spacing is None for r in train.values())  # PNG carries no spacing
    assert np.array_equal(train["a"].load_image(), np.asarray(Image.open(src / "imagesTr" / "a_0000.png")))
    assert (out / train["a"].image).samefile(src / "imagesTr" / "a_0000.png")  # hard link, same file system
    tasks = [c.task for c in train["a"].conversations]
    assert "segment" in tasks and "detect" in tasks
    both = [c.mask_objects for c in train["a"].conversations if c.task == "segment" and len(c.mask_objects) == 2]
    assert both == [[1, 2]]  # one segment answer holds both nodules


@pytest.mark.parametrize("ending", [".nii.gz", ".nrrd"])
def test_nnunet_nifti_and_nrrd_carry_spacing_and_keep_orientation(tmp_path, ending):
    import SimpleITK as sitk

    d = tmp_path / "Dataset002_Kidney"
    (d / "imagesTr").mkdir(parents=True)
    (d / "labelsTr").mkdir()
    (d / "dataset.json").write_text(json.dumps({"labels": {"background": 0, "kidney": 1, "renal_mass": 2},
                                                "file_ending": ending, "channel_names": {"0": "US"}}))
    lab = np.zeros((1, 40, 56), np.uint8)  # (z, y, x): H 40, W 56, not symmetric
    lab[0, 5:15, 10:30] = 1
    lab[0, 20:24, 40:44] = 2
    lab[0, 30:33, 5:9] = 2

    def write(arr, path, spacing):
        img = sitk.GetImageFromArray(arr)
        img.SetSpacing(spacing)
        img.SetOrigin((3.0, -2.0, 1.0)[: img.GetDimension()])
        sitk.WriteImage(img, str(path))

    pixels = np.random.default_rng(0).normal(100, 30, (1, 40, 56)).astype(np.float32)
    write(pixels, d / "imagesTr" / f"q_0000{ending}", (0.3, 0.4, 1.0))
    write(lab, d / "labelsTr" / f"q{ending}", (0.3, 0.4, 1.0))
    write(pixels[0], d / "imagesTr" / f"p_0000{ending}", (0.5, 0.25))  # a 2D file
    write(lab[0], d / "labelsTr" / f"p{ending}", (0.5, 0.25))
    write(np.repeat(pixels, 4, axis=0), d / "imagesTr" / f"v_0000{ending}", (0.3, 0.4, 1.0))  # 3D: 4 slices
    write(np.repeat(lab, 4, axis=0), d / "labelsTr" / f"v{ending}", (0.3, 0.4, 1.0))
    out = tmp_path / "imp"
    import_dataset("nnunet", d, out, progress=False)
    assert _reasons(out) == {"multi-frame image (only single frames are imported)": 1}
    recs = _by_id(out / "train.jsonl")
    assert sorted(recs) == ["p", "q"]
    assert recs["q"].spacing == pytest.approx((0.3, 0.4)) and recs["p"].spacing == pytest.approx((0.5, 0.25))
    for rec in recs.values():
        assert rec.image.endswith(".png") and rec.load_image().shape == (40, 56)
        objs = _objects(rec)
        assert [o[0] for o in objs] == ["kidney", "renal mass", "renal mass"]
        assert np.array_equal(objs[0][1], lab[0] == 1) and objs[0][2] == (10, 5, 29, 14)
        assert np.array_equal(objs[1][1], _rect(40, 56, (20, 24, 40, 44)))
        assert np.array_equal(objs[2][1], _rect(40, 56, (30, 33, 5, 9)))


@pytest.mark.slow
def test_nnunet_manifest_trains_two_steps(tmp_path):
    from umind_core.modeling.tiny import build_model
    from umind_core.training.trainer import TrainConfig, train

    out = tmp_path / "imp"
    import_dataset("nnunet", _nnunet_png(tmp_path), out, tasks=["segment", "detect"], progress=False)
    config = TrainConfig(output_dir=str(tmp_path / "run"), max_steps=2, batch_size=1, lr=1e-3, log_every=1,
                         val_fraction=0.0, warmup_ratio=0.0, progress=False)
    summary = train(build_model("tiny"), out / "train.jsonl", config, tasks=("segment", "detect"))
    assert summary.steps == 2
    assert summary.train_loss_last is not None and math.isfinite(summary.train_loss_last)


# ------------------------------------------------------------------------------------------------ COCO

def _rle_string(counts: list[int]) -> str:
    """pycocotools' rleToString, the inverse of the decoder under test."""
    out = []
    for i, x in enumerate(counts):
        if i > 2:
            x -= counts[i - 2]
        more = True
        while more:
            c = x & 0x1F
            x >>= 5
            more = (x != -1) if (c & 0x10) else (x != 0)
            out.append(chr((c | (0x20 if more else 0)) + 48))
    return "".join(out)


def _rle_counts(mask: np.ndarray) -> list[int]:
    flat = mask.T.ravel().astype(np.int8)  # column-major
    change = np.flatnonzero(np.diff(np.concatenate([[0], flat, [1 - flat[-1]]])))
    return np.diff(np.concatenate([[0], change])).tolist()[: len(change)]


def _ellipse(h, w, cy, cx, ry, rx) -> np.ndarray:
    y, x = np.mgrid[0:h, 0:w]
    return ((y - cy) / ry) ** 2 + ((x - cx) / rx) ** 2 <= 1


def _reference_polygon(poly, h, w) -> np.ndarray:
    """The polygon as COCO rasterises it (pycocotools), or pixel centres inside it (scikit-image)."""
    try:
        from pycocotools import mask as mu

        return mu.decode(mu.frPyObjects([poly], h, w))[:, :, 0].astype(bool)
    except ImportError:
        from skimage.draw import polygon2mask

        return polygon2mask((h, w), np.asarray(poly, float).reshape(-1, 2)[:, ::-1] - 0.5)


def _coco(tmp_path: Path):
    imgs = tmp_path / "imgs"
    for i, name in enumerate(["a.png", "b.png", "c.png", "d.png"]):
        _png(imgs / name, _speckle(64, 64, i))
    poly = [12.3, 5.7, 40.2, 12.1, 35.8, 40.5, 8.1, 30.2]
    e1, e2 = _ellipse(64, 64, 30, 20, 9, 14), _ellipse(64, 64, 45, 48, 8, 6)
    xs, ys = poly[0::2], poly[1::2]
    doc = {
        "images": [{"id": 1, "file_name": "a.png", "width": 64, "height": 64},
                   {"id": 2, "file_name": "b.png", "width": 64, "height": 64},
                   {"id": 3, "file_name": "c.png", "width": 64, "height": 64},
                   {"id": 4, "file_name": "missing.png", "width": 64, "height": 64},
                   {"id": 5, "file_name": "d.png", "width": 100, "height": 64}],
        "categories": [{"id": 1, "name": "thyroid_nodule"}, {"id": 2, "name": "carotid artery"}],
        "annotations": [
            {"id": 10, "image_id": 1, "category_id": 1, "iscrowd": 0, "segmentation": [poly],
             "bbox": [min(xs), min(ys), max(xs) - min(xs), max(ys) - min(ys)]},
            {"id": 11, "image_id": 1, "category_id": 2, "iscrowd": 0, "segmentation": [], "bbox": [40, 40, 15.5, 10]},
            {"id": 12, "image_id": 2, "category_id": 1, "iscrowd": 0, "bbox": [6, 21, 29, 19],
             "segmentation": {"size": [64, 64], "counts": _rle_string(_rle_counts(e1))}},
            {"id": 13, "image_id": 2, "category_id": 2, "iscrowd": 0, "bbox": [42, 37, 13, 17],
             "segmentation": {"size": [64, 64], "counts": _rle_counts(e2)}},
            {"id": 14, "image_id": 2, "category_id": 1, "iscrowd": 1, "bbox": [0, 0, 64, 6],
             "segmentation": [[0, 0, 64, 0, 64, 6, 0, 6]]},  # a crowd drawn as polygons: left out
            {"id": 15, "image_id": 1, "category_id": 99, "iscrowd": 0, "bbox": [1, 1, 3, 3]},
            {"id": 16, "image_id": 77, "category_id": 1, "iscrowd": 0, "bbox": [1, 1, 3, 3]},
        ]}
    path = tmp_path / "ann" / "instances.json"
    path.parent.mkdir()
    path.write_text(json.dumps(doc))
    return path, imgs, doc, poly, e1, e2


def test_rle_decoder_reads_both_encodings():
    m = np.random.default_rng(3).random((17, 23)) > 0.6
    counts = _rle_counts(m)
    assert np.array_equal(rle_decode({"size": [17, 23], "counts": counts}, 17, 23), m)
    assert np.array_equal(rle_decode({"size": [17, 23], "counts": _rle_string(counts)}, 17, 23), m)
    try:
        from pycocotools import mask as mu
    except ImportError:
        return
    enc = mu.encode(np.asfortranarray(m.astype(np.uint8)))
    assert np.array_equal(rle_decode({"size": [17, 23], "counts": enc["counts"].decode()}, 17, 23), m)


def test_polygon_rasterisation_matches_coco():
    rng = np.random.default_rng(4)
    for _ in range(20):
        cx, cy, r = *rng.uniform(20, 44, 2), rng.uniform(9, 16)
        t = np.sort(rng.uniform(0, 2 * np.pi, 9))
        rr = r * rng.uniform(0.7, 1.0, 9)
        poly = np.ravel(np.stack([cx + rr * np.cos(t), cy + rr * np.sin(t)], 1)).tolist()
        assert _iou(polygons_mask([poly], 64, 64), _reference_polygon(poly, 64, 64)) >= 0.95


def test_coco_boxes_polygons_rle_crowd_and_skips(tmp_path):
    path, imgs, doc, poly, e1, e2 = _coco(tmp_path)
    out = tmp_path / "imp"
    summary = import_dataset("coco", path, out, images=imgs, progress=False)
    assert summary.imported == 3 and summary.split_manifests == {}
    assert _reasons(out) == {"image file missing": 1, "image size differs from the COCO entry": 1,
                             "annotation with an unknown category id": 1, "annotation for an unknown image id": 1}
    assert _dropped(out) == {"crowd region without an RLE mask (iscrowd 1 with polygons or no segmentation: not one "
                             "object)": 1}
    recs = _by_id(out / "manifest.jsonl")
    assert sorted(recs) == ["a", "b", "c"]
    assert recs["c"].annotations.objects == []
    anns = {a["id"]: a for a in doc["annotations"]}
    (l1, m1, b1), (l2, m2, b2) = _objects(recs["a"])
    assert (l1, l2) == ("thyroid nodule", "carotid artery") and m2 is None
    assert _iou(m1, _reference_polygon(poly, 64, 64)) >= 0.95
    (l3, m3, b3), (l4, m4, b4) = _objects(recs["b"])
    assert (l3, l4) == ("thyroid nodule", "carotid artery")
    assert np.array_equal(m3, e1) and np.array_equal(m4, e2)  # RLE: exact
    for box, ann_id in ((b1, 10), (b2, 11), (b3, 12), (b4, 13)):
        x, y, w, h = anns[ann_id]["bbox"]
        assert np.allclose(box, [x, y, x + w, y + h], atol=1.0), (ann_id, box)
    rows, cols = np.nonzero(e1)  # bbox [6, 21, 29, 19] is e1's pixel extent: the box is exactly its pixels
    assert b3 == (cols.min(), rows.min(), cols.max(), rows.max())


def test_coco_keypoints_named_by_category_unlabelled_left_out_and_bad_ones_skipped(tmp_path):
    imgs = tmp_path / "imgs"
    for name in ("f.png", "g.png", "h.png"):
        _png(imgs / name, _speckle(64, 80, 3))
    doc = {
        "images": [{"id": 1, "file_name": "f.png", "width": 80, "height": 64},
                   {"id": 2, "file_name": "g.png", "width": 80, "height": 64},
                   {"id": 3, "file_name": "h.png", "width": 80, "height": 64}],
        "categories": [{"id": 1, "name": "fetal_head", "keypoints": ["bpd_near", "bpd_far", "ofd_front"]}],
        "annotations": [
            {"id": 1, "image_id": 1, "category_id": 1, "iscrowd": 0, "bbox": [10, 8, 50, 40],
             "keypoints": [12, 30, 2, 58.5, 31, 1, 0, 0, 0]},
            {"id": 2, "image_id": 2, "category_id": 1, "iscrowd": 0, "keypoints": [20, 20, 2, 40, 22, 2, 30, 5, 2]},
            {"id": 3, "image_id": 3, "category_id": 1, "iscrowd": 0, "keypoints": [20, 20, 2, 40, 22, 2]},
            {"id": 4, "image_id": 3, "category_id": 1, "iscrowd": 0, "keypoints": [20, 20, 2, 99, 22, 2, 1, 1, 2]},
        ]}
    path = tmp_path / "kp.json"
    path.write_text(json.dumps(doc))
    out = tmp_path / "imp"
    import_dataset("coco", path, out, images=imgs, progress=False)
    recs = _by_id(out / "manifest.jsonl")
    (f,) = recs["f"].annotations.objects
    assert f.label == "fetal head" and f.box == (10.0, 8.0, 59.0, 47.0)
    assert [(k.name, k.xy) for k in f.keypoints] == [("bpd near", (12.0, 30.0)), ("bpd far", (58.5, 31.0))]
    (g,) = recs["g"].annotations.objects  # keypoints alone make an object, without a box
    assert g.box is None and [k.name for k in g.keypoints] == ["bpd near", "bpd far", "ofd front"]
    assert recs["h"].annotations.objects == []
    assert _reasons(out) == {"keypoints do not match the category's names": 1, "keypoint outside the image": 1}
    assert "keypoints" in {c.task for c in recs["f"].conversations}


# ------------------------------------------------------------------------------------------------ UltraBench

def _open_kidney(root: Path) -> Path:
    d = root / "open_kidney_v1.0.0"
    regions_full = np.zeros((48, 64), np.uint8)
    regions_full[10:40, 10:50] = 3
    regions_full[15:35, 15:45] = 2
    regions_full[20:30, 25:35] = 1
    regions_cortex = np.zeros((48, 64), np.uint8)
    regions_cortex[5:20, 5:20] = 3
    capsule = _rect(48, 64, (8, 42, 8, 52)).astype(np.uint8)
    scan = _rect(48, 64, (0, 48, 4, 60)).astype(np.uint8)
    rows = {}
    for i, (regions, caps) in enumerate([(regions_full, capsule), (regions_cortex, np.zeros_like(capsule)),
                                         (regions_full, capsule), (regions_cortex, capsule), (regions_full, capsule)]):
        name = f"k{i}.png"
        _png(d / "images" / name, _speckle(48, 64, i))
        _png(d / "masks" / "scan" / name, scan)
        _png(d / "masks" / "regions" / name, regions)
        if i != 4:
            _png(d / "masks" / "capsule" / name, caps)
        rows[i] = {"image": f"images/{name}", "scan_mask": f"masks/scan/{name}",
                   "capsule_mask": f"masks/capsule/{name}", "regions_mask": f"masks/regions/{name}",
                   "transplant": i == 1, "view": ["longitudinal", "transverse"][i % 2], "quality": "good"}
    (d / "train.json").write_text(json.dumps([rows[0], rows[1]]))
    (d / "validation.json").write_text(json.dumps([rows[2], rows[4]]))  # k4: capsule mask file missing
    (d / "test.json").write_text(json.dumps([rows[3], {"view": "other"}]))  # a record without an image
    (d / "version.txt").write_text("UltraBench Version: 1.0.0\n")
    return d


def test_ultrabench_open_kidney_masks_scan_fields_and_splits(tmp_path):
    src = _open_kidney(tmp_path)
    out = tmp_path / "imp"
    summary = import_dataset("ultrabench", src, out, progress=False)
    assert summary.per_split == {"train": 2, "validation": 1, "test": 1}
    assert set(summary.split_manifests) == {"train", "validation", "test"}
    assert _reasons(out) == {"mask or label file missing": 1, "record without an image path": 1}
    recs = _by_id(out / "manifest.jsonl")
    assert {k: r.extra["split"] for k, r in recs.items()} == {"k0": "train", "k1": "train", "k2": "validation",
                                                              "k3": "test"}
    k0 = _objects(recs["k0"])
    assert [o[0] for o in k0] == ["capsule", "central echo complex", "medulla", "cortex"]
    assert np.array_equal(k0[0][1], _rect(48, 64, (8, 42, 8, 52))) and k0[0][2] == (8, 8, 51, 41)
    assert np.array_equal(k0[1][1], _rect(48, 64, (20, 30, 25, 35)))
    assert np.array_equal(k0[2][1], _rect(48, 64, (15, 35, 15, 45)) & ~_rect(48, 64, (20, 30, 25, 35)))
    assert np.array_equal(k0[3][1], _rect(48, 64, (10, 40, 10, 50)) & ~_rect(48, 64, (15, 35, 15, 45)))
    k1 = _objects(recs["k1"])  # empty capsule mask: no capsule; only cortex in the regions map, still "cortex"
    assert [o[0] for o in k1] == ["cortex"] and np.array_equal(k1[0][1], _rect(48, 64, (5, 20, 5, 20)))
    assert np.array_equal(recs["k0"].load_scan_mask(), _rect(48, 64, (0, 48, 4, 60)))
    assert recs["k1"].extra["labels"] == {"transplant": True, "view": "transverse", "quality": "good"}
    assert recs["k0"].site == "kidney" and recs["k0"].annotations.diagnosis is None
    assert sorted(_by_id(out / "validation.jsonl")) == ["k2"]


def test_ultrabench_2x_layout_pathology_lesion_blobs_and_boxes(tmp_path):
    d = tmp_path / "prepared" / "stanford_thyroid_v2.0.0"
    tumor = _rect(48, 48, (5, 12, 5, 12), (30, 40, 28, 44)).astype(np.uint8)
    _png(d / "images" / "p0.png", _speckle(48, 48, 0))
    _png(d / "masks" / "tumor" / "p0.png", tumor)
    _png(d / "images" / "p1.png", _speckle(48, 48, 1))
    _png(d / "masks" / "tumor" / "p1.png", np.zeros((48, 48), np.uint8))
    (d / "train_val.json").write_text(json.dumps([
        {"image": "images/p0.png", "tumor_mask": "masks/tumor/p0.png", "pathology": "malignant", "label": 1,
         "lesion_size_x": 1.2, "age": float("nan"), "bboxes": [[1, 2, 10, 20]], "bbox_labels": ["abn"]}]))
    (d / "test.json").write_text(json.dumps([{"image": "images/p1.png", "tumor_mask": "masks/tumor/p1.png",
                                              "pathology": "benign"}]))
    out = tmp_path / "imp"
    summary = import_dataset("ultrabench", tmp_path / "prepared", out, progress=False)  # the folder above
    assert summary.per_split == {"train_val": 1, "test": 1}
    recs = _by_id(out / "manifest.jsonl")
    objs = _objects(recs["p0"])
    assert [o[0] for o in objs] == ["tumor", "tumor", "abn"]  # a lesion kind: one object per blob
    assert np.array_equal(objs[0][1], _rect(48, 48, (5, 12, 5, 12)))
    assert np.array_equal(objs[1][1], _rect(48, 48, (30, 40, 28, 44)))
    assert objs[2][1] is None and objs[2][2] == (1, 2, 10, 20)
    assert recs["p0"].annotations.diagnosis == "malignant" and recs["p1"].annotations.diagnosis == "benign"
    assert recs["p1"].annotations.objects == []
    assert recs["p0"].extra["labels"] == {"pathology": "malignant", "label": 1, "lesion_size_x": 1.2, "age": None}
    assert recs["p0"].site == "thyroid"
    assert any(c.task == "diagnose" for c in recs["p0"].conversations)


# ------------------------------------------------------------------------------------------------ CSV

def test_csv_standalone_fields_measurements_spacing_and_skips(tmp_path):
    for i in range(4):
        _png(tmp_path / "csvimg" / f"x{i}.png", _speckle(32, 40, i))
    (tmp_path / "csvimg" / "labels.csv").write_text(
        "Image,Finding,View,kidney_length_mm,Cortex thickness (mm),spacing,split,operator\n"
        "x0.png,benign,longitudinal,102.5,8,0.2,train,A\n"
        "x1.png,malignant,,abc,,,train,B\n"
        "x2.png,benign,,,,,,\n"
        "x3.png,benign,,,,-1,,\n"
        "x3.png,benign,,,,,../manifest,\n"
        "nothere.png,benign,,,,,,\n"
        ",benign,,,,,,\n")
    out = tmp_path / "imp"
    summary = import_dataset("csv", tmp_path / "csvimg" / "labels.csv", out, progress=False)
    assert summary.imported == 2
    assert _reasons(out) == {"not a number": 1, "spacing must be positive": 1, "image file missing": 1,
                             "no image path": 1,
                             "split must be a plain name (letters, digits, - and _; not 'manifest')": 1}
    recs = _by_id(out / "manifest.jsonl")
    x0, x2 = recs["x0"], recs["x2"]
    assert x0.annotations.diagnosis == "benign" and x0.spacing == (0.2, 0.2)
    assert x0.annotations.measurements == {"kidney length mm": 102.5, "cortex thickness mm": 8.0}
    assert x0.extra["labels"] == {"view": "longitudinal", "operator": "A"} and x0.extra["split"] == "train"
    assert x2.spacing is None and "split" not in x2.extra and x2.annotations.measurements == {}
    assert sorted(_by_id(out / "train.jsonl")) == ["x0"]
    tasks = {c.task for c in x0.conversations}
    assert {"diagnose", "ask"} <= tasks
    ask = next(c for c in x0.conversations if c.task == "ask")
    assert "mm" in ask.messages[1]["content"]


def test_csv_of_dicom_files_carries_their_spacing_and_skips_cine(tmp_path):
    from fixtures_imaging import dicom_mono, dicom_mono_multiframe, dicom_multiframe_rgb, ramp, region

    d = tmp_path / "dcm"
    d.mkdir()
    dicom_mono(d / "mono.dcm", ramp(48, 64), pixel_spacing=(0.2, 0.3))  # DICOM order: row 0.2, column 0.3
    _, rgb = dicom_multiframe_rgb(d / "rgb.dcm", n=1, regions=[region(0, 0, 63, 47, 0.015, 0.02)])
    dicom_mono_multiframe(d / "cine.dcm", n=3)
    (d / "labels.csv").write_text("image,finding\nmono.dcm,benign\nrgb.dcm,malignant\ncine.dcm,benign\n")
    out = tmp_path / "imp"
    summary = import_dataset("csv", d / "labels.csv", out, progress=False)
    assert summary.imported == 2
    assert _reasons(out) == {"multi-frame image (only single frames are imported)": 1}
    recs = _by_id(out / "manifest.jsonl")
    mono, colour = recs["mono"], recs["rgb"]
    assert mono.spacing == pytest.approx((0.3, 0.2))  # manifest order (x, y): the row spacing is y
    assert colour.spacing == pytest.approx((0.15, 0.2))  # the ultrasound region, cm -> mm
    assert mono.image.endswith(".png") and np.array_equal(mono.load_image(), ramp(48, 64))
    assert np.array_equal(np.asarray(Image.open(colour.image_path)), rgb[0])
    assert mono.annotations.diagnosis == "benign" and colour.annotations.diagnosis == "malignant"


def test_csv_merge_into_an_import_in_place_and_elsewhere(tmp_path):
    src = _nnunet_png(tmp_path)
    out = tmp_path / "imp"
    import_dataset("nnunet", src, out, progress=False)
    before = _by_id(out / "manifest.jsonl")
    csv_path = tmp_path / "labels.csv"
    csv_path.write_text("image,finding,nodule_width_mm,spacing_x,spacing_y\n"
                        "a_0000.png,malignant,7.5,0.1,0.2\n"  # the source file name
                        "b,benign,,,\n"                        # the case id
                        "zzz.png,benign,,,\n")
    other = tmp_path / "merged"
    import_dataset("csv", csv_path, other, merge=out, progress=False)  # a new folder pointing back
    merged = _by_id(other / "manifest.jsonl")
    assert merged["a"].image == "../imp/images/a.png" and merged["a"].annotations.diagnosis == "malignant"
    assert np.array_equal(merged["a"].load_masks()[1], before["a"].load_masks()[1])
    summary = import_dataset("csv", csv_path, out, merge=out, progress=False)  # in place
    assert summary.per_split == {"train": 3, "test": 1}
    assert _reasons(out) == {"no record with this image name in the merged import": 1}
    after = _by_id(out / "train.jsonl")
    assert after["a"].annotations.diagnosis == "malignant" and after["b"].annotations.diagnosis == "benign"
    assert after["a"].spacing == (0.1, 0.2) and after["a"].annotations.measurements == {"nodule width mm": 7.5}
    assert after["c"].annotations.diagnosis is None and after["c"].spacing is None
    assert [o.to_json() for o in after["a"].annotations.objects] == \
        [o.to_json() for o in before["a"].annotations.objects]
    assert any(c.task == "diagnose" for c in after["a"].conversations)
    assert not any(c.task == "diagnose" for c in before["a"].conversations)


# ------------------------------------------------------------------------------------------------ Slicer

_SPACING, _ORIGIN = (0.5, 0.25, 2.0), (10.0, -5.0, 3.0)


def _lps(i: float, j: float) -> list[float]:
    return [_ORIGIN[0] + i * _SPACING[0], _ORIGIN[1] + j * _SPACING[1], _ORIGIN[2]]


def _markups(path: Path, system: str, markups: list[dict]) -> None:
    flip = (lambda p: [-p[0], -p[1], p[2]]) if system == "RAS" else (lambda p: p)
    doc = {"@schema": "https://raw.githubusercontent.com/slicer/slicer/main/Modules/Loadable/Markups/Resources/"
                      "Schema/markups-schema-v1.0.3.json#", "markups": []}
    for m in markups:
        item = {"type": m["type"], "name": m["name"], "coordinateSystem": system,
                "controlPoints": [{"label": lab, "position": flip(_lps(*ij)), "positionStatus": "defined"}
                                  for lab, ij in m.get("points", [])]}
        if m["type"] == "ROI":
            item.update(center=flip(_lps(*m["center"])), size=m["size"],
                        orientation=[1.0, 0, 0, 0, 1.0, 0, 0, 0, 1.0] if system == "LPS"
                        else [-1.0, 0, 0, 0, -1.0, 0, 0, 0, 1.0])
        doc["markups"].append(item)
    path.write_text(json.dumps(doc))


def _slicer(root: Path) -> Path:
    import nrrd
    import SimpleITK as sitk

    d = root / "slicer"
    d.mkdir()
    img = sitk.GetImageFromArray(_speckle(48, 64, 0)[None])  # W 64, H 48, one slice
    img.SetSpacing(_SPACING)
    img.SetOrigin(_ORIGIN)
    sitk.WriteImage(img, str(d / "case1.nrrd"))
    # the segmentation as Slicer saves it: cropped to its extent (offset 4, 2 pixels), two layers, here in RAS
    layers = np.zeros((2, 40, 32, 1), np.uint8)  # (layer, x, y, z): pynrrd's Fortran order
    layers[0, 2:20, 3:15, 0] = 1       # kidney: image x 6..23, y 5..16
    layers[0, 25:28, 20:23, 0] = 2     # renal cyst blob 1: x 29..31, y 22..24
    layers[0, 30:35, 26:30, 0] = 2     # renal cyst blob 2: x 34..38, y 28..31
    layers[1, 5:10, 5:10, 0] = 1       # cortex (overlaps the kidney): x 9..13, y 7..11
    ras_origin = [-(_ORIGIN[0] + 4 * _SPACING[0]), -(_ORIGIN[1] + 2 * _SPACING[1]), _ORIGIN[2]]
    header = {"type": "unsigned char", "dimension": 4, "space": "right-anterior-superior",
              "kinds": ["list", "domain", "domain", "domain"],
              "space directions": np.array([[np.nan] * 3, [-0.5, 0, 0], [0, -0.25, 0], [0, 0, 2.0]]),
              "space origin": np.array(ras_origin),
              "Segment0_Name": "kidney", "Segment0_LabelValue": "1", "Segment0_Layer": "0",
              "Segment1_Name": "renal_cyst", "Segment1_LabelValue": "2", "Segment1_Layer": "0",
              "Segment2_Name": "cortex", "Segment2_LabelValue": "1", "Segment2_Layer": "1",
              "Segment3_Name": "hilum", "Segment3_LabelValue": "3", "Segment3_Layer": "0"}  # empty: a negative
    nrrd.write(str(d / "case1.seg.nrrd"), layers, header)
    _markups(d / "case1.mrk.json", "LPS", [
        {"type": "Fiducial", "name": "kidney", "points": [("upper pole", (10.0, 20.0)), ("lower pole", (30.5, 12.25))]},
        {"type": "Fiducial", "name": "stray", "points": [("out", (80.0, 10.0))]},  # off the image
        {"type": "ROI", "name": "lesion", "center": (20.0, 24.0), "size": [5.25, 2.25, 2.0]},
        {"type": "Angle", "name": "angle", "points": [("a", (1, 1)), ("b", (2, 2)), ("c", (3, 1))]}])
    _markups(d / "case1_lines.mrk.json", "RAS", [
        {"type": "Line", "name": "kidney length", "points": [("1", (5.0, 10.0)), ("2", (45.0, 30.0))]}])
    _png(d / "case2.png", _speckle(30, 40, 1))
    (d / "case2.mrk.json").write_text(json.dumps({"markups": [{
        "type": "Line", "name": "diameter", "coordinateSystem": "LPS", "controlPoints": [
            {"label": "1", "position": [3.0, 4.0, 0.0]}, {"label": "2", "position": [13.0, 4.0, 0.0]}]}]}))
    _markups(d / "other.mrk.json", "LPS", [{"type": "Fiducial", "name": "x", "points": [("p", (1.0, 1.0))]}])
    return d


def test_slicer_segments_markups_geometry_and_skips(tmp_path):
    out = tmp_path / "imp"
    summary = import_dataset("slicer", _slicer(tmp_path), out, progress=False)
    assert summary.imported == 2
    assert _reasons(out) == {"no image with a matching name": 1}
    assert _dropped(out) == {"markup point off the image": 1, "markup type Angle not imported": 1}
    recs = _by_id(out / "manifest.jsonl")
    c1, c2 = recs["case1"], recs["case2"]
    assert c1.spacing == pytest.approx((0.5, 0.25)) and c2.spacing is None
    objs = _objects(c1)
    assert [o[0] for o in objs] == ["kidney", "renal cyst", "renal cyst", "cortex", "lesion", "kidney length"]
    assert np.array_equal(objs[0][1], _rect(48, 64, (5, 17, 6, 24)))
    assert np.array_equal(objs[1][1], _rect(48, 64, (22, 25, 29, 32)))
    assert np.array_equal(objs[2][1], _rect(48, 64, (28, 32, 34, 39)))
    assert np.array_equal(objs[3][1], _rect(48, 64, (7, 12, 9, 14)))
    kidney = c1.annotations.objects[0]
    assert [k.name for k in kidney.keypoints] == ["upper pole", "lower pole"]
    assert np.allclose([k.xy for k in kidney.keypoints], [(10.0, 20.0), (30.5, 12.25)], atol=1e-6)
    (line,) = c1.annotations.objects[5].lines
    assert line.name == "kidney length" and np.allclose(line.xy, (5, 10, 45, 30), atol=1e-6)
    assert line.length_mm == pytest.approx(math.hypot(40 * 0.5, 20 * 0.25))
    assert c1.annotations.objects[4].box == (15, 20, 25, 28) and c1.annotations.objects[4].mask is None
    (diam,) = c2.annotations.objects
    assert np.allclose(diam.lines[0].xy, (3, 4, 13, 4)) and diam.lines[0].length_mm is None  # PNG: no spacing
    assert {"segment", "keypoints", "measure", "detect"} <= {c.task for c in c1.conversations}


def test_slicer_files_written_by_slicer_itself(tmp_path):
    """The same reader on files Slicer's own storage nodes wrote (slicer-core, headless MRML)."""
    import sys

    slicer = pytest.importorskip("slicer")
    vtk = pytest.importorskip("vtk")
    if not hasattr(slicer, "vtkMRMLScene"):
        pytest.skip("slicer-core (headless MRML) is not installed")
    import SimpleITK as sitk

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "slicer_module" / "UMind"))
    from UMindLib import mrml

    d = tmp_path / "exports"
    d.mkdir()
    img = sitk.GetImageFromArray(_speckle(48, 64, 0)[None])
    img.SetSpacing(_SPACING)
    img.SetOrigin(_ORIGIN)
    sitk.WriteImage(img, str(d / "scan.nrrd"))
    scene = slicer.vtkMRMLScene()
    mrml.ensure_node_classes(scene)
    scene.AddNewNodeByClass("vtkMRMLSelectionNode")
    vol = scene.AddNewNodeByClass("vtkMRMLScalarVolumeNode", "scan")
    storage = vol.CreateDefaultStorageNode()
    storage.SetFileName(str(d / "scan.nrrd"))
    assert storage.ReadData(vol)
    lab = np.zeros((48, 64), np.uint8)
    lab[5:10, 5:20] = 1
    lab[20:30, 30:50] = 2
    lab[35:40, 2:6] = 2
    seg = mrml.label_map_to_segmentation(scene, vol, lab, {"kidney": 1, "renal cyst": 2})
    seg_storage = scene.AddNewNodeByClass("vtkMRMLSegmentationStorageNode")
    seg_storage.SetFileName(str(d / "scan.seg.nrrd"))
    assert seg_storage.WriteData(seg)
    def ras(i, j):
        return [-p for p in _lps(i, j)[:2]] + [_ORIGIN[2]]

    fid = scene.AddNewNodeByClass("vtkMRMLMarkupsFiducialNode", "kidney")
    fid.AddControlPoint(vtk.vtkVector3d(*ras(12, 7)), "upper pole")
    line = scene.AddNewNodeByClass("vtkMRMLMarkupsLineNode", "kidney length")
    line.AddControlPoint(vtk.vtkVector3d(*ras(5, 6)), "1")
    line.AddControlPoint(vtk.vtkVector3d(*ras(20, 9)), "2")
    for node, name in ((fid, "scan_kidney.mrk.json"), (line, "scan_kidney length.mrk.json")):
        st = node.CreateDefaultStorageNode()
        st.SetFileName(str(d / name))
        assert st.WriteData(node)
    out = tmp_path / "imp"
    import_dataset("slicer", d, out, progress=False)
    assert "name" not in json.loads((d / "scan_kidney.mrk.json").read_text())["markups"][0]  # named by file
    (rec,) = read_manifest(out / "manifest.jsonl")
    objs = _objects(rec)
    assert [o[0] for o in objs] == ["kidney", "renal cyst", "renal cyst", "kidney length"]
    assert np.array_equal(objs[0][1], lab == 1)
    assert np.array_equal(objs[1][1] | objs[2][1], lab == 2)
    assert np.allclose(rec.annotations.objects[0].keypoints[0].xy, (12, 7), atol=1e-6)
    assert np.allclose(rec.annotations.objects[3].lines[0].xy, (5, 6, 20, 9), atol=1e-6)
    assert rec.annotations.objects[3].lines[0].length_mm == pytest.approx(line.GetLineLengthWorld())


# ------------------------------------------------------------------------------------------------ broken sources

def _broken(tmp_path: Path, kind: str) -> list[str]:
    bad = tmp_path / "bad"
    bad.mkdir()
    if kind == "missing":
        return ["nnunet", str(tmp_path / "nope")]
    if kind == "nnunet-json":
        (bad / "dataset.json").write_text('{"labels": {"a": 1}, "file_ending": ')
        return ["nnunet", str(bad)]
    if kind == "nnunet-labels":
        (bad / "dataset.json").write_text('{"labels": {"a": "one"}, "file_ending": ".png"}')
        (bad / "imagesTr").mkdir()
        return ["nnunet", str(bad)]
    if kind == "coco-json":
        (bad / "a.json").write_text("[{]")
        return ["coco", str(bad / "a.json")]
    if kind == "coco-shape":
        (bad / "a.json").write_text('{"annotations": []}')
        return ["coco", str(bad / "a.json")]
    if kind == "ultrabench-json":
        (bad / "train.json").write_text('[{"image": "x.png",}]')
        return ["ultrabench", str(bad)]
    if kind == "ultrabench-empty":
        return ["ultrabench", str(bad)]
    if kind == "csv-columns":
        (bad / "a.csv").write_text("path,finding\nx.png,benign\n")
        return ["csv", str(bad / "a.csv")]
    if kind == "csv-merge":
        (bad / "a.csv").write_text("image,finding\nx.png,benign\n")
        return ["csv", str(bad / "a.csv"), "--merge", str(tmp_path / "nowhere")]
    if kind == "slicer-empty":
        return ["slicer", str(bad)]
    raise AssertionError(kind)


@pytest.mark.parametrize("kind", ["missing", "nnunet-json", "nnunet-labels", "coco-json", "coco-shape",
                                  "ultrabench-json", "ultrabench-empty", "csv-columns", "csv-merge", "slicer-empty"])
def test_broken_source_is_one_line_and_exit_2(tmp_path, capsys, kind):
    argv = ["import", *_broken(tmp_path, kind), "--out", str(tmp_path / "out"), "--no-progress"]
    code, _out, err = _run_cli(argv, capsys)
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("umind import: error: ") and "Traceback" not in err, err
    assert not (tmp_path / "out" / "manifest.jsonl").exists()


def test_cli_prints_summary_and_refuses_an_existing_import(tmp_path, capsys):
    src = _nnunet_png(tmp_path)
    argv = ["import", "nnunet", str(src), "--out", str(tmp_path / "out"), "--no-progress", "--tasks", "segment"]
    code, out, err = _run_cli(argv, capsys)
    assert code == 0, err
    assert "imported 4 record(s) (train 3, test 1)" in out
    assert "skipped 2:" in out and "no label file in labelsTr" in out and "label value 7 has no name" in out
    recs = read_manifest(tmp_path / "out" / "manifest.jsonl")
    assert {c.task for r in recs for c in r.conversations} == {"segment"}
    code, out, err = _run_cli(argv, capsys)
    assert code == 2 and "already holds an import" in err
    shutil.rmtree(tmp_path / "out")


def test_a_colour_label_map_is_skipped_not_read_by_one_channel(tmp_path):
    """Label maps are grey levels; a colour one (red lesion, green gland) read through its first channel would merge
    or drop objects without a word, so the row is skipped naming the file. Grey stored as equal RGB channels reads."""
    from umind_core.importers.common import RowSkipped, read_label_png

    colour = np.zeros((8, 10, 3), np.uint8)
    colour[2:4, 2:4] = (255, 0, 0)
    colour[5:7, 5:8] = (0, 255, 0)
    Image.fromarray(colour).save(tmp_path / "colour.png")
    with pytest.raises(RowSkipped) as err:
        read_label_png(tmp_path / "colour.png", (8, 10))
    assert err.value.reason.startswith("colour label map") and "colour.png" in err.value.detail
    grey = np.zeros((8, 10, 3), np.uint8)
    grey[2:4, 2:4] = 2
    Image.fromarray(grey).save(tmp_path / "grey.png")
    assert np.array_equal(read_label_png(tmp_path / "grey.png", (8, 10)), grey[..., 0])


def test_a_small_split_fraction_still_holds_out_one_whole_group():
    """`--split test=0.01` on a small source: the hash alone may hold out nothing, which would leave an evaluation
    with no test case; at least one group is held out, whole."""
    from types import SimpleNamespace

    from umind_core.importers.common import assign_split

    recs = [SimpleNamespace(id=f"r{i}", extra={"group": f"s{i // 2}"}) for i in range(10)]
    assert assign_split(recs, "test", 0.01, seed=0) == 10
    held = [r for r in recs if r.extra["split"] == "test"]
    assert held and len({r.extra["group"] for r in held}) == 1
    assert all(r.extra["split"] == "test" for r in recs if r.extra["group"] == held[0].extra["group"])


# ------------------------------------------------------------------------------------------------ edges

def _nnunet_one(root: Path, labels: dict, label_map: np.ndarray) -> Path:
    d = root / "Dataset002_Edge"
    d.mkdir(parents=True)
    (d / "dataset.json").write_text(json.dumps({"labels": labels, "file_ending": ".png",
                                                "channel_names": {"0": "US"}, "numTraining": 1}))
    _png(d / "imagesTr" / "a_0000.png", _speckle(32, 32, 0))
    _png(d / "labelsTr" / "a.png", label_map)
    return d


def test_nnunet_ignore_label_is_no_object(tmp_path):
    lab = np.zeros((32, 32), np.uint8)
    lab[4:12, 4:12] = 1
    lab[20:28, 20:28] = 3  # the "ignore" value: unlabelled pixels, never an object
    src = _nnunet_one(tmp_path, {"background": 0, "thyroid": 1, "ignore": 3}, lab)
    import_dataset("nnunet", src, tmp_path / "imp", progress=False)
    (a,) = _by_id(tmp_path / "imp" / "manifest.jsonl").values()
    assert [(lab_, box) for lab_, _m, box in _objects(a)] == [("thyroid", (4, 4, 11, 11))]


def test_nnunet_255_is_the_one_label_only_in_a_0_255_map(tmp_path):
    both = np.zeros((32, 32), np.uint8)
    both[4:12, 4:12] = 1
    both[20:28, 20:28] = 255  # beside the label's own value, 255 is an unnamed value: dropped, not merged
    src = _nnunet_one(tmp_path / "both", {"background": 0, "lesion": 1}, both)
    import_dataset("nnunet", src, tmp_path / "both_imp", progress=False)
    (a,) = _by_id(tmp_path / "both_imp" / "manifest.jsonl").values()
    assert [(lab_, box) for lab_, _m, box in _objects(a)] == [("lesion", (4, 4, 11, 11))]
    assert _dropped(tmp_path / "both_imp") == {"label value 255 has no name": 1}
    only = np.where(both == 255, 255, 0).astype(np.uint8)  # a 0/255 export of the one label
    src = _nnunet_one(tmp_path / "only", {"background": 0, "lesion": 1}, only)
    import_dataset("nnunet", src, tmp_path / "only_imp", progress=False)
    (a,) = _by_id(tmp_path / "only_imp" / "manifest.jsonl").values()
    assert [(lab_, box) for lab_, _m, box in _objects(a)] == [("lesion", (20, 20, 27, 27))]


def test_ultrabench_site_flag_wins_and_a_multiclass_beside_its_binary_is_left_out(tmp_path):
    d = tmp_path / "stanford_thyroid_v1.0.0"
    tumor = _rect(32, 32, (4, 12, 4, 12)).astype(np.uint8)
    _png(d / "images" / "p0.png", _speckle(32, 32, 0))
    _png(d / "masks" / "binary" / "p0.png", tumor)
    _png(d / "masks" / "multi" / "p0.png", tumor * 2)  # the same pixels as a class map
    (d / "train.json").write_text(json.dumps([{"image": "images/p0.png", "tumor_mask_binary": "masks/binary/p0.png",
                                               "tumor_mask_multiclass": "masks/multi/p0.png"}]))
    import_dataset("ultrabench", d, tmp_path / "a", progress=False)
    (rec,) = _by_id(tmp_path / "a" / "manifest.jsonl").values()
    assert [(lab, box) for lab, _m, box in _objects(rec)] == [("tumor", (4, 4, 11, 11))]
    assert rec.site == "thyroid"  # the dataset's own site
    import_dataset("ultrabench", d, tmp_path / "b", progress=False, site="neck")
    (rec,) = _by_id(tmp_path / "b" / "manifest.jsonl").values()
    assert rec.site == "neck"  # the user's --site over the dataset's


def test_csv_zero_spacing_is_refused_and_a_merged_finding_replaces_the_old_one(tmp_path):
    for i in range(2):
        _png(tmp_path / "csvimg" / f"x{i}.png", _speckle(16, 16, i))
    (tmp_path / "csvimg" / "labels.csv").write_text("image,finding,spacing\nx0.png,benign,0\nx1.png,benign,0.3\n")
    import_dataset("csv", tmp_path / "csvimg" / "labels.csv", tmp_path / "imp", progress=False)
    assert _reasons(tmp_path / "imp") == {"spacing must be positive": 1}
    assert sorted(_by_id(tmp_path / "imp" / "manifest.jsonl")) == ["x1"]
    (tmp_path / "fix.csv").write_text("image,finding\nx1.png,malignant\n")
    import_dataset("csv", tmp_path / "fix.csv", tmp_path / "imp", merge=tmp_path / "imp", progress=False)
    assert _by_id(tmp_path / "imp" / "manifest.jsonl")["x1"].annotations.diagnosis == "malignant"


def test_slicer_label_volumes_longest_stem_and_the_plane_of_a_point(tmp_path):
    d = tmp_path / "scenes"
    _png(d / "scan.png", _speckle(30, 40, 0))
    _png(d / "scan_2.png", _speckle(30, 40, 1))
    _png(d / "scan_label.png", np.zeros((30, 40), np.uint8))  # Slicer's label map volume: not an image
    line = {"type": "Line", "name": "diameter", "coordinateSystem": "LPS", "controlPoints": [
        {"label": "1", "position": [3.0, 4.0, 0.0]}, {"label": "2", "position": [13.0, 4.0, 0.0]}]}
    (d / "scan_2.mrk.json").write_text(json.dumps({"markups": [line]}))  # scan_2's, though "scan" prefixes it
    def fiducial(name, z):
        return {"type": "Fiducial", "name": name, "coordinateSystem": "LPS",
                "controlPoints": [{"label": name, "position": [5.0, 6.0, z]}]}

    # within half a slice of the image's plane, and a whole slice off it
    (d / "scan.mrk.json").write_text(json.dumps({"markups": [fiducial("kidney", 0.4), fiducial("cyst", 1.0)]}))
    out = tmp_path / "imp"
    import_dataset("slicer", d, out, progress=False)
    recs = _by_id(out / "manifest.jsonl")
    assert sorted(recs) == ["scan", "scan_2"]
    assert _reasons(out) == {"label map volume (export segmentations as .seg.nrrd)": 1}
    assert [o.lines[0].name for o in recs["scan_2"].annotations.objects] == ["diameter"]
    (kidney,) = recs["scan"].annotations.objects
    assert kidney.label == "kidney" and [k.name for k in kidney.keypoints] == ["kidney"]
    assert _dropped(out) == {"markup point off the image": 1}


def test_cli_import_reads_spaced_task_lists_and_its_own_split_seed(tmp_path, capsys):
    for i in range(6):
        _png(tmp_path / "csvimg" / f"x{i}.png", _speckle(16, 16, i))
    src = tmp_path / "csvimg" / "labels.csv"
    src.write_text("image,finding\n" + "".join(f"x{i}.png,{['benign', 'malignant'][i % 2]}\n" for i in range(6)))

    def split_of(out: Path) -> dict:
        return {rid: r.extra.get("split") for rid, r in _by_id(out / "manifest.jsonl").items()}

    by_seed = {}
    for seed in range(8):
        import_dataset("csv", src, tmp_path / f"api{seed}", progress=False, split="val=0.5", split_seed=seed)
        by_seed[seed] = split_of(tmp_path / f"api{seed}")
    other = next(s for s in range(1, 8) if by_seed[s] != by_seed[0])
    code, _, err = _run_cli(["import", "csv", str(src), "--out", str(tmp_path / "cli"), "--split", "val=0.5",
                             "--split-seed", str(other), "--tasks", " diagnose , segment ", "--no-progress"], capsys)
    assert code == 0, err
    assert split_of(tmp_path / "cli") == by_seed[other]
    tasks = {c.task for r in _by_id(tmp_path / "cli" / "manifest.jsonl").values() for c in r.conversations}
    assert tasks == {"diagnose"}  # segment asked, but no record has a mask
