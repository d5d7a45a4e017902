"""Datasets in as their tools export them, nothing lost and no test case trained on.

Each test builds (or reads, tests/fixtures/replicas) a small replica of a real export layout and counts what goes in
and what comes out: records, objects, masks, findings and the lines that name what was left out. Images are numpy
noise, a few KB; no real dataset file is committed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from umind_core.cli import main as cli_main
from umind_core.data.manifest import read_manifest
from umind_core.data.split import is_test_split
from umind_core.importers import import_dataset

REPLICAS = Path(__file__).resolve().parent / "fixtures" / "replicas"


def _png(path: Path, arr: np.ndarray) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(arr).save(path)
    return path


def _speckle(h: int, w: int, seed: int, channels: int = 0) -> np.ndarray:
    shape = (h, w, channels) if channels else (h, w)
    return np.random.default_rng(seed).integers(0, 256, shape, dtype=np.uint8)


def _report(out: Path) -> dict:
    return json.loads((out / "import_report.json").read_text())


# ------------------------------------------------------------------------------------ test split never trained

def _nnunet_with_test_labels(root: Path) -> Path:
    """nnU-Net v2 raw, PNG: 3 training cases, 2 test cases with labelsTs (a nodule each), 1 test case without."""
    d = root / "Dataset010_Nodule"
    (d / "imagesTr").mkdir(parents=True)
    (d / "dataset.json").write_text(json.dumps({"labels": {"background": 0, "thyroid_nodule": 1},
                                                "file_ending": ".png", "channel_names": {"0": "US"},
                                                "numTraining": 3}))
    lab = np.zeros((32, 32), np.uint8)
    lab[8:16, 10:20] = 1
    for i, case in enumerate(["tr1", "tr2", "tr3"]):
        _png(d / "imagesTr" / f"{case}_0000.png", _speckle(32, 32, i))
        _png(d / "labelsTr" / f"{case}.png", lab)
    for i, case in enumerate(["ts1", "ts2", "ts3"]):
        _png(d / "imagesTs" / f"{case}_0000.png", _speckle(32, 32, 10 + i))
        if case != "ts3":
            _png(d / "labelsTs" / f"{case}.png", lab)
    return d


@dataclass
class _Summary:
    steps: int = 0


def test_train_leaves_test_split_records_out_of_any_manifest(tmp_path, capsys, monkeypatch):
    out = tmp_path / "imp"
    summary = import_dataset("nnunet", _nnunet_with_test_labels(tmp_path), out, progress=False)
    assert summary.per_split == {"train": 3, "test": 3}
    every = read_manifest(out / "manifest.jsonl")
    assert sum(is_test_split(r) for r in every) == 3 and sum(bool(r.annotations.objects) for r in every) == 5

    seen: list[Path] = []

    def fake_train(model, manifest, config, tasks=None):  # what the trainer would read, without training
        seen.append(Path(manifest))
        return _Summary()

    import umind_core.training.trainer as trainer

    monkeypatch.setattr(trainer, "train", fake_train)
    code = cli_main(["train", "--manifest", str(out / "manifest.jsonl"), "--out", str(tmp_path / "run"),
                     "--size", "tiny", "--no-progress"])
    err = capsys.readouterr().err
    assert code == 0
    (trained,) = seen
    records = read_manifest(trained)
    assert sorted(r.id for r in records) == ["tr1", "tr2", "tr3"]
    left = [line for line in err.splitlines() if "left out" in line]
    # ts3 has no label: the check skips it (nothing to learn); ts1 and ts2 are labelled test cases
    assert len(left) == 1 and "left out 2 test record(s)" in left[0] and "2 of split 'test'" in left[0], err
    assert "never trained on" in left[0]

    # the training split alone: nothing to leave out, no line
    seen.clear()
    assert cli_main(["train", "--manifest", str(out / "train.jsonl"), "--out", str(tmp_path / "run2"),
                     "--size", "tiny", "--no-progress"]) == 0
    assert "left out" not in capsys.readouterr().err
    assert sorted(r.id for r in read_manifest(seen[0])) == ["tr1", "tr2", "tr3"]

    # a manifest of test cases only is one line and exit 2, never a run on them
    assert cli_main(["train", "--manifest", str(out / "test.jsonl"), "--out", str(tmp_path / "run3"),
                     "--size", "tiny", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "2 of them are test cases" in err and "Traceback" not in err and len(seen) == 1


@pytest.mark.parametrize("split,test", [("test", True), ("test_set", True), ("Test", True), ("testing", True),
                                        ("train", False), ("validation", False), ("train_val", False), (None, False)])
def test_test_split_names(split, test):
    rec = type("R", (), {"extra": {} if split is None else {"split": split}})()
    assert is_test_split(rec) is test


# ------------------------------------------------------------------------------------ CVAT brush masks

def test_cvat_brush_masks_are_objects(tmp_path):
    src = REPLICAS / "cvat_coco"
    doc = json.loads((src / "annotations" / "instances_default.json").read_text())
    brush = [a for a in doc["annotations"] if a["iscrowd"] == 1 and isinstance(a["segmentation"], dict)]
    assert len(brush) == 4  # the replica: four nodules drawn with CVAT's brush
    out = tmp_path / "imp"
    summary = import_dataset("coco", src / "annotations" / "instances_default.json", out,
                             images=src / "images" / "default", progress=False)
    assert summary.imported == 3
    report = _report(out)
    assert report["dropped"] == {} and report["skipped"] == []
    recs = {r.id: r for r in read_manifest(out / "manifest.jsonl")}
    labels = {rid: sorted(o.label for o in r.annotations.objects) for rid, r in recs.items()}
    assert labels == {"nodule_001": ["thyroid nodule"] * 2, "nodule_002": ["thyroid", "thyroid nodule",
                                                                            "thyroid nodule"], "normal_003": []}
    nodules = [(o, m) for r in recs.values() for o, m in zip(r.annotations.objects, r.load_masks())
               if o.label == "thyroid nodule"]
    assert len(nodules) == 4 and all(m is not None for _o, m in nodules)
    assert sorted(int(m.sum()) for _o, m in nodules) == sorted(int(a["area"]) for a in brush)  # every pixel in
    segment = [c for r in recs.values() for c in r.conversations if c.task == "segment"]
    assert sum(len(c.mask_objects) for c in segment) >= 4


def test_coco_crowd_drawn_as_polygons_is_still_left_out_with_a_line(tmp_path):
    src = REPLICAS / "cvat_coco"
    doc = json.loads((src / "annotations" / "instances_default.json").read_text())
    doc["annotations"].append({"id": 99, "image_id": 3, "category_id": 1, "iscrowd": 1, "bbox": [0, 0, 10, 10],
                               "segmentation": [[0, 0, 10, 0, 10, 10, 0, 10]]})
    path = tmp_path / "instances.json"
    path.write_text(json.dumps(doc))
    out = tmp_path / "imp"
    summary = import_dataset("coco", path, out, images=src / "images" / "default", progress=False)
    assert sum(summary.log.dropped.values()) == 1
    assert any("crowd" in line for line in summary.lines("coco"))
    recs = {r.id: r for r in read_manifest(out / "manifest.jsonl")}
    assert recs["normal_003"].annotations.objects == []
    assert sum(len(r.annotations.objects) for r in recs.values()) == 5


# ------------------------------------------------------------------------------------ CSV mask columns

def _csv_replica(root: Path, header: str, rows: list[str]) -> Path:
    """A CSV beside 3 images and their 0/255 masks (one nodule each; img2's mask holds two blobs)."""
    for i in range(3):
        _png(root / "img" / f"img{i}.png", _speckle(32, 40, i))
        m = np.zeros((32, 40), np.uint8)
        m[5:12, 6:14] = 255
        if i == 2:
            m[20:26, 25:33] = 255
        _png(root / "mask" / f"img{i}_mask.png", m)
    (root / "labels.csv").write_text("\n".join([header, *rows]) + "\n")
    return root / "labels.csv"


def test_csv_mask_columns_become_objects_with_their_masks(tmp_path, capsys):
    csv = _csv_replica(tmp_path / "src", "image,finding,mask,mask_label,cyst_mask,scan_mask",
                       ["img/img0.png,benign,mask/img0_mask.png,thyroid nodule,,mask/img1_mask.png",
                        "img/img1.png,benign,mask/img1_mask.png,thyroid nodule,mask/img0_mask.png",
                        "img/img2.png,malignant,mask/img2_mask.png,thyroid nodule,",
                        "img/img2.png,malignant,mask/nothere.png,thyroid nodule,"])
    out = tmp_path / "imp"
    summary = import_dataset("csv", csv, out, progress=False)
    assert summary.imported == 3
    assert _report(out)["skipped_by_reason"] == {"image listed twice": 1}
    recs = {r.id: r for r in read_manifest(out / "manifest.jsonl")}
    labels = {rid: [o.label for o in r.annotations.objects] for rid, r in recs.items()}
    # 4 mask cells in (img2's mask holds two nodules: a lesion kind, one object per blob) -> 5 objects, 5 masks
    assert labels == {"img0": ["thyroid nodule"], "img1": ["thyroid nodule", "cyst"],
                      "img2": ["thyroid nodule", "thyroid nodule"]}
    masks = [m for r in recs.values() for m in r.load_masks()]
    assert len(masks) == 5 and all(m is not None and m.any() for m in masks)
    assert all(not r.extra.get("labels") for r in recs.values())  # no mask path left in labels
    assert recs["img0"].scan_mask is not None and int(recs["img0"].load_scan_mask().sum()) == 7 * 8
    assert cli_main(["check", str(out / "manifest.jsonl")]) == 0
    assert "3 kept, 0 skipped" in capsys.readouterr().out

    # a mask file missing: its row is skipped naming the file, never a record without its mask
    csv.write_text("image,mask,mask_label\nimg/img0.png,mask/nothere.png,thyroid nodule\n"
                   "img/img1.png,mask/img1_mask.png,thyroid nodule\n")
    summary = import_dataset("csv", csv, tmp_path / "imp2", progress=False)
    (skip,) = summary.log.skipped
    assert summary.imported == 1 and skip["reason"] == "mask or label file missing" and "nothere.png" in skip["detail"]


def test_csv_mask_without_its_name_is_refused_in_one_line(tmp_path, capsys):
    csv = _csv_replica(tmp_path / "src", "image,finding,mask", ["img/img0.png,benign,mask/img0_mask.png"])
    code = cli_main(["import", "csv", str(csv), "--out", str(tmp_path / "imp"), "--no-progress"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "'mask' needs the object's name" in err[0] and "mask_label" in err[0]
    assert not (tmp_path / "imp" / "manifest.jsonl").exists()


def test_check_counts_a_mask_kept_as_a_label(tmp_path, capsys):
    """An import made before the mask columns were read kept the path in labels: check says it is not trained on."""
    _png(tmp_path / "a.png", _speckle(16, 16, 0))
    line = {"id": "a", "image": "a.png", "annotations": {"diagnosis": "benign"}, "labels": {"mask": "m/a.png"}}
    (tmp_path / "m.jsonl").write_text(json.dumps(line) + "\n")
    assert cli_main(["check", str(tmp_path / "m.jsonl")]) == 0
    out = capsys.readouterr().out
    assert "labels.mask: note: mask file 'm/a.png' kept as a label is never trained on" in out
    assert "kept, but not trained on (mask as a label): 1" in out


def test_csv_merge_adds_mask_objects_to_the_import(tmp_path):
    src = tmp_path / "src"
    csv = _csv_replica(src, "image,finding", ["img/img0.png,benign"])
    first = tmp_path / "first"
    import_dataset("csv", csv, first, progress=False)
    csv.write_text("image,nodule_mask\nimg0.png,mask/img0_mask.png\n")
    out = tmp_path / "merged"
    import_dataset("csv", csv, out, merge=first, progress=False)
    (rec,) = read_manifest(out / "manifest.jsonl")
    (obj,) = rec.annotations.objects
    assert obj.label == "nodule" and rec.annotations.diagnosis == "benign"
    (mask,) = rec.load_masks()
    assert int(mask.sum()) == 7 * 8


# ------------------------------------------------------------------------------------ 0/255 masks

def _nnunet_255(root: Path, labels: dict, rgb_masks: bool) -> Path:
    """nnU-Net v2 PNG as BUSI-derived sets ship it: RGB images (channel_names R, G, B, one file per case) and 0/255
    masks (grey, or RGB with equal channels); case c3's mask is empty (a normal image)."""
    d = root / "Dataset020_BreastUS"
    (d / "imagesTr").mkdir(parents=True)
    (d / "dataset.json").write_text(json.dumps({"labels": labels, "file_ending": ".png",
                                                "channel_names": {"0": "R", "1": "G", "2": "B"}, "numTraining": 4}))
    for i in range(4):
        _png(d / "imagesTr" / f"c{i}_0000.png", _speckle(24, 32, i, channels=3))
        m = np.zeros((24, 32), np.uint8)
        if i != 3:
            m[4:10, 5:12 + i] = 255
        _png(d / "labelsTr" / f"c{i}.png", np.repeat(m[..., None], 3, axis=2) if rgb_masks else m)
    return d


@pytest.mark.parametrize("rgb_masks", [False, True])
def test_nnunet_0_255_masks_read_as_the_one_named_label(tmp_path, capsys, rgb_masks):
    src = _nnunet_255(tmp_path, {"background": 0, "breast_lesion": 1}, rgb_masks)
    out = tmp_path / "imp"
    summary = import_dataset("nnunet", src, out, site="breast", progress=False)
    assert summary.imported == 4
    report = _report(out)
    assert report["dropped"] == {} and report["skipped"] == []  # no "255 has no name", no phantom channels
    recs = {r.id: r for r in read_manifest(out / "train.jsonl")}
    objects = {rid: [(o.label, int(m.sum())) for o, m in zip(r.annotations.objects, r.load_masks())]
               for rid, r in recs.items()}
    assert objects == {"c0": [("breast lesion", 42)], "c1": [("breast lesion", 48)], "c2": [("breast lesion", 54)],
                       "c3": []}
    assert cli_main(["check", str(out / "train.jsonl")]) == 0
    assert "4 records checked, 4 kept, 0 skipped" in capsys.readouterr().out


def test_nnunet_255_with_several_labels_stays_unnamed_and_counted(tmp_path):
    src = _nnunet_255(tmp_path, {"background": 0, "benign": 1, "malignant": 2}, False)
    (src / "imagesTr" / "c0_0001.png").write_bytes((src / "imagesTr" / "c0_0000.png").read_bytes())
    summary = import_dataset("nnunet", src, tmp_path / "imp", progress=False)
    assert dict(summary.log.dropped) == {"label value 255 has no name": 3,
                                         "image channel other than 0000 (the model reads one image)": 1}


# ------------------------------------------------------------------------------------ findings as categories

def _roboflow_findings(root: Path) -> Path:
    """A Roboflow COCO export of a breast set (train/_annotations.coco.json beside the images): the dataset's own
    category 0 and the classes benign, Malignant, normal; 4 images, 5 annotations."""
    folder = root / "train"
    names = ["b1_jpg.rf.1.png", "m1_jpg.rf.2.png", "n1_jpg.rf.3.png", "bm_jpg.rf.4.png"]
    for i, n in enumerate(names):
        _png(folder / n, _speckle(32, 32, 40 + i, channels=3))
    cats = [{"id": 0, "name": "breast-tumors", "supercategory": "none"},
            {"id": 1, "name": "benign", "supercategory": "breast-tumors"},
            {"id": 2, "name": "Malignant", "supercategory": "breast-tumors"},
            {"id": 3, "name": "normal", "supercategory": "breast-tumors"}]
    poly = [[6.0, 6.0, 20.0, 6.0, 20.0, 18.0, 6.0, 18.0]]
    anns = [{"id": 0, "image_id": 0, "category_id": 1, "bbox": [6, 6, 14, 12], "area": 168, "segmentation": poly,
             "iscrowd": 0},
            {"id": 1, "image_id": 1, "category_id": 2, "bbox": [6, 6, 14, 12], "area": 168, "segmentation": poly,
             "iscrowd": 0},
            {"id": 2, "image_id": 2, "category_id": 3, "bbox": [0, 0, 32, 32], "area": 1024, "segmentation": [],
             "iscrowd": 0},
            {"id": 3, "image_id": 3, "category_id": 1, "bbox": [2, 2, 6, 6], "area": 36, "segmentation": [],
             "iscrowd": 0},
            {"id": 4, "image_id": 3, "category_id": 2, "bbox": [20, 20, 8, 8], "area": 64, "segmentation": [],
             "iscrowd": 0}]
    doc = {"info": {"description": "Exported from roboflow.com"}, "categories": cats, "annotations": anns,
           "images": [{"id": i, "license": 1, "file_name": n, "height": 32, "width": 32} for i, n in enumerate(names)]}
    path = folder / "_annotations.coco.json"
    path.write_text(json.dumps(doc))
    return path


def test_coco_finding_categories_become_diagnoses_with_lesion_objects(tmp_path):
    out = tmp_path / "imp"
    summary = import_dataset("coco", _roboflow_findings(tmp_path), out, site="breast", progress=False)
    assert summary.imported == 4 and summary.log.skipped == []
    assert dict(summary.log.dropped) == {
        "box or mask of a 'normal' category (kept as the image's finding: no lesion to draw)": 1}
    recs = {r.id.split("_")[0]: r for r in read_manifest(out / "manifest.jsonl")}
    got = {k: (r.annotations.diagnosis, [(o.label, o.diagnosis) for o in r.annotations.objects])
           for k, r in recs.items()}
    assert got == {"b1": ("benign", [("breast lesion", "benign")]),
                   "m1": ("malignant", [("breast lesion", "malignant")]),
                   "n1": ("normal", []),
                   "bm": ("malignant", [("breast lesion", "benign"), ("breast lesion", "malignant")])}
    diagnose = {k: [c for c in r.conversations if c.task == "diagnose"] for k, r in recs.items()}
    assert all(len(v) == 1 for v in diagnose.values())  # four diagnoses to train and score
    labels = {o.label for r in recs.values() for o in r.annotations.objects}
    assert labels == {"breast lesion"}  # no object called "benign" or "malignant"


@pytest.mark.parametrize("name,finding", [("benign", "benign"), ("Malignant", "malignant"), ("benign_tumour", "benign"),
                                          ("malignant lesion", "malignant"), ("cancer", "malignant"),
                                          ("healthy", "normal"), ("thyroid nodule", None), ("nodule", None),
                                          ("carotid artery", None), ("lesion", None)])
def test_finding_words(name, finding):
    from umind_core.answers.findings import finding_word

    assert finding_word(name) == finding


# ------------------------------------------------------------------------------------ MetaImage, skip paths, report

def test_nnunet_metaimage_cases_import_with_spacing_and_an_external_data_file_is_named(tmp_path):
    """nnU-Net v2 with file_ending .mha (CAMUS-like: LV 1, myocardium 2, LA 3), one case whose .mhd names a .raw."""
    import SimpleITK as sitk

    d = tmp_path / "Dataset030_Camus"
    (d / "imagesTr").mkdir(parents=True)
    (d / "labelsTr").mkdir()
    (d / "dataset.json").write_text(json.dumps({"labels": {"background": 0, "LV": 1, "MYO": 2, "LA": 3},
                                                "file_ending": ".mha", "channel_names": {"0": "US"}}))
    lab = np.zeros((36, 28), np.uint8)
    lab[4:14, 8:20], lab[14:18, 8:20], lab[20:30, 10:18] = 1, 2, 3
    for case in ("p1", "p2"):
        img = sitk.GetImageFromArray(_speckle(36, 28, 3))
        img.SetSpacing((0.31, 0.154))
        sitk.WriteImage(img, str(d / "imagesTr" / f"{case}_0000.mha"))
        lm = sitk.GetImageFromArray(lab)
        lm.SetSpacing((0.31, 0.154))
        sitk.WriteImage(lm, str(d / "labelsTr" / f"{case}.mha"))
    detached = d / "imagesTr" / "p3_0000.mha"
    detached.write_text("ObjectType = Image\nNDims = 2\nDimSize = 28 36\nElementType = MET_UCHAR\n"
                        "ElementDataFile = p3_0000.raw\n")
    (d / "imagesTr" / "p3_0000.raw").write_bytes(bytes(28 * 36))
    (d / "labelsTr" / "p3.mha").write_bytes((d / "labelsTr" / "p1.mha").read_bytes())
    out = tmp_path / "imp"
    summary = import_dataset("nnunet", d, out, progress=False)
    assert summary.imported == 2
    (skip,) = summary.log.skipped
    assert skip["item"] == "imagesTr/p3_0000.mha" and skip["reason"] == "unreadable file"
    assert "separate data file" in skip["detail"]
    line = next(x for x in summary.lines("nnunet") if "unreadable file" in x)
    assert "imagesTr/p3_0000.mha" in line  # the count names its path
    recs = read_manifest(out / "train.jsonl")
    assert [r.spacing for r in recs] == [pytest.approx((0.31, 0.154))] * 2
    assert [[o.label for o in r.annotations.objects] for r in recs] == [["LV", "MYO", "LA"]] * 2


def test_every_skip_reason_names_its_first_paths_and_a_failed_import_writes_its_report(tmp_path, capsys):
    imgs = tmp_path / "imgs"
    _png(imgs / "present.png", _speckle(16, 16, 0))
    missing = [f"scan_{i}.png" for i in range(8)]
    doc = {"categories": [{"id": 1, "name": "nodule"}], "annotations": [],
           "images": [{"id": i, "file_name": n, "width": 16, "height": 16} for i, n in enumerate(missing)]
           + [{"id": 99, "file_name": "present.png", "width": 16, "height": 16}]}
    (tmp_path / "a.json").write_text(json.dumps(doc))
    out = tmp_path / "imp"
    assert cli_main(["import", "coco", str(tmp_path / "a.json"), "--images", str(imgs), "--out", str(out),
                     "--no-progress"]) == 0
    text = capsys.readouterr().out
    line = next(x for x in text.splitlines() if "image file missing" in x)
    assert "8  image file missing (e.g. scan_0.png, scan_1.png, scan_2.png, ...)" in line
    assert str(out / "import_report.json") in text
    assert len(_report(out)["skipped"]) == 8

    doc["images"] = doc["images"][:8]  # nothing comes in: one line, exit 2, and the report is written
    (tmp_path / "b.json").write_text(json.dumps(doc))
    out2 = tmp_path / "imp2"
    assert cli_main(["import", "coco", str(tmp_path / "b.json"), "--images", str(imgs), "--out", str(out2),
                     "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "nothing imported (8 image file missing: scan_0.png, scan_1.png, scan_2.png, ...)" in \
        err[0] and "import_report.json" in err[0]
    report = _report(out2)
    assert report["imported"] == 0 and [s["item"] for s in report["skipped"]] == missing
    assert not (out2 / "manifest.jsonl").exists()
