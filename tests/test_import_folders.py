"""BUSI as released, images/ + masks/ pairs and CAMUS (NIfTI and MetaImage) in one `umind import` command
each, read from the numpy-made replicas (tests/fixtures/replicas/make_replicas.py; BUSI's layout is built in the
test's own folder, so no file named like a BUSI image is tracked). Each test counts the images, objects and masks
that go in against what comes out, and the lines that name what was left out."""

from __future__ import annotations

import json
import re
import shutil
import sys
from pathlib import Path

import pytest

from umind_core.cli import main as cli_main
from umind_core.data.manifest import read_manifest
from umind_core.importers import import_dataset

REPLICAS = Path(__file__).resolve().parent / "fixtures" / "replicas"
sys.path.insert(0, str(REPLICAS))

import make_replicas  # noqa: E402


def _report(out: Path) -> dict:
    return json.loads((out / "import_report.json").read_text())


def _records(out: Path, name: str = "manifest.jsonl") -> dict:
    return {r.id: r for r in read_manifest(out / name)}


@pytest.mark.parametrize("fmt", ["folders", "busi"])
def test_busi_as_released_in_one_command(tmp_path, capsys, fmt):
    """4 images, 4 lesion masks with pixels (benign (2) two files), an empty normal mask -> 4 records, 4 lesion
    objects with the masks' pixel counts, 4 diagnoses, and the one empty file counted; busi and folders agree."""
    out, release = tmp_path / "out", tmp_path / "busi_release"
    make_replicas.busi_release(release)
    extra = ["--site", "breast"] if fmt == "folders" else []
    assert cli_main(["import", fmt, str(release), "--out", str(out), "--no-progress", *extra]) == 0
    recs = _records(out)
    assert sorted(recs) == ["benign-1", "benign-2", "malignant-1", "normal-1"]
    assert {k: r.annotations.diagnosis for k, r in recs.items()} == {
        "benign-1": "benign", "benign-2": "benign", "malignant-1": "malignant", "normal-1": "normal"}
    objects = {k: [(o.label, o.diagnosis) for o in r.annotations.objects] for k, r in recs.items()}
    assert objects["benign-2"] == [("breast lesion", "benign")] * 2 and objects["normal-1"] == []
    assert {k: [int(m.sum()) for m in r.load_masks()] for k, r in recs.items()} == {
        "benign-1": [48], "benign-2": [60, 24], "malignant-1": [192], "normal-1": []}
    assert sum(len(r.annotations.objects) for r in recs.values()) == 4
    assert recs["benign-2"].extra["source"]["masks"] == ["benign/benign (2)_mask.png", "benign/benign (2)_mask_1.png"]
    assert _report(out)["skipped"] == [] and _report(out)["dropped"] == {}
    assert not any("mask" in r.image for r in recs.values())
    assert sum(c.task == "diagnose" for r in recs.values() for c in r.conversations) == 4


def test_image_mask_pairs_are_one_label_named_by_the_flag(tmp_path, capsys):
    """3 images, masks 0/255 (two nodules) and 0/1 (one), one image without a mask, one orphan mask -> 2 records with
    3 'thyroid nodule' objects, and 2 lines naming the image and the orphan."""
    out = tmp_path / "out"
    assert cli_main(["import", "folders", str(REPLICAS / "image_mask_pairs"), "--out", str(out), "--no-progress",
                     "--label", "thyroid nodule", "--site", "thyroid"]) == 0
    text = capsys.readouterr().out
    recs = _records(out)
    assert sorted(recs) == ["case1", "case2"]
    assert [[o.label for o in r.annotations.objects] for r in recs.values()] == [["thyroid nodule"] * 2,
                                                                                ["thyroid nodule"]]
    assert [[int(m.sum()) for m in r.load_masks()] for r in recs.values()] == [[36, 60], [100]]
    assert all(r.annotations.diagnosis is None for r in recs.values())
    skipped = {s["item"]: s["reason"] for s in _report(out)["skipped"]}
    assert skipped == {"thyroid_set/images/case3.png": "image without a mask file (in a folder that is no finding)",
                       "thyroid_set/masks/orphan.png": "mask file without its image"}
    assert "images/case3.png" in text and "masks/orphan.png" in text


def test_pairs_label_defaults_to_the_folder_and_suffix_option(tmp_path):
    src = tmp_path / "thyroid_nodule"
    shutil.copytree(REPLICAS / "image_mask_pairs" / "thyroid_set", src)
    summary = import_dataset("folders", src, tmp_path / "a", progress=False)
    labels = {o.label for r in read_manifest(summary.manifest) for o in r.annotations.objects}
    assert labels == {"thyroid nodule"}  # the folder's name, underscores as spaces
    # suffix layout with another suffix: NAME.png + NAME_seg.png in one folder
    flat = tmp_path / "kidney"
    flat.mkdir()
    shutil.copy(src / "images" / "case2.png", flat / "k1.png")
    shutil.copy(src / "masks" / "case2.png", flat / "k1_seg.png")
    summary = import_dataset("folders", flat, tmp_path / "b", progress=False, mask_suffix="_seg")
    (rec,) = read_manifest(summary.manifest)
    assert [o.label for o in rec.annotations.objects] == ["kidney"] and summary.log.skipped == []
    with pytest.raises(ValueError, match="nothing imported .*image without a mask file"):  # default _mask
        import_dataset("folders", flat, tmp_path / "c", progress=False)
    with pytest.raises(ValueError, match="folders format only"):
        import_dataset("busi", flat, tmp_path / "d", label="x")



def test_a_normal_image_whose_mask_holds_pixels_stays_normal_and_is_counted(tmp_path):
    """BUSI's normal means no lesion: a normal image's mask with pixels (an export mistake) adds no object and the
    report counts it, so the mistake is seen instead of silently trusted or silently dropped."""
    import numpy as np
    from PIL import Image

    release = tmp_path / "busi_release"
    make_replicas.busi_release(release)
    mask = release / "Dataset_BUSI_with_GT" / "normal" / "normal (1)_mask.png"
    drawn = np.zeros(np.asarray(Image.open(mask)).shape[:2], np.uint8)
    drawn[4:8, 4:8] = 255
    Image.fromarray(drawn).save(mask)
    summary = import_dataset("busi", release, tmp_path / "out", progress=False)
    recs = _records(tmp_path / "out")
    assert recs["normal-1"].annotations.objects == [] and recs["normal-1"].annotations.diagnosis == "normal"
    assert summary.log.dropped == {"mask of a normal image holds pixels (normal = no lesion)": 1}

def test_folders_refuses_a_mask_holding_several_values_naming_it(tmp_path):
    import numpy as np
    from PIL import Image

    d = tmp_path / "set"
    shutil.copytree(REPLICAS / "image_mask_pairs" / "thyroid_set", d)
    lm = np.zeros((24, 32), np.uint8)
    lm[2:6, 2:6], lm[10:14, 10:14] = 1, 2
    Image.fromarray(lm).save(d / "masks" / "case2.png")
    summary = import_dataset("folders", d, tmp_path / "out", progress=False)
    reasons = {s["item"]: (s["reason"], s["detail"]) for s in summary.log.skipped}
    reason, detail = reasons["images/case2.png"]
    assert reason == "mask file with several values (a label map, not one object)" and "values 1, 2" in detail


def test_camus_nifti_in_one_command(tmp_path, capsys):
    """patient0001: 2 views x ED/ES with _gt, 2 half sequences; patient0002: 4CH, ES without _gt, 1 half sequence.
    In: 6 images, 5 label maps of 3 values each -> 5 records, 15 objects (LV, myocardium, LA), 1 skip naming the
    image without _gt, 3 sequences counted; the patient is the group."""
    out = tmp_path / "out"
    assert cli_main(["import", "camus", str(REPLICAS / "camus_nifti"), "--out", str(out), "--no-progress"]) == 0
    text = capsys.readouterr().out
    recs = _records(out)
    assert sorted(recs) == ["patient0001_2CH_ED", "patient0001_2CH_ES", "patient0001_4CH_ED",
                            "patient0001_4CH_ES", "patient0002_4CH_ED"]
    assert all([o.label for o in r.annotations.objects] == ["left ventricle", "myocardium", "left atrium"]
               for r in recs.values())
    assert [int(m.sum()) for m in recs["patient0001_2CH_ED"].load_masks()] == [48, 72, 70]
    assert {r.site for r in recs.values()} == {"heart"}
    assert recs["patient0001_2CH_ED"].spacing == pytest.approx((0.308, 0.154))
    assert {k: r.extra["group"] for k, r in recs.items()}["patient0002_4CH_ED"] == "patient0002"
    assert recs["patient0001_4CH_ES"].extra["labels"] == {"view": "4CH", "phase": "ES", "quality": "Medium"}
    rep = _report(out)
    assert [(s["item"], s["reason"]) for s in rep["skipped"]] == [
        ("database_nifti/patient0002/patient0002_4CH_ES.nii.gz", "no _gt label map beside the image")]
    assert rep["dropped"] == {"cine sequence (the ED and ES frames are imported as single images)": 3}
    assert "patient0002_4CH_ES.nii.gz" in text
    # --split keeps a patient's images on one side
    out2 = tmp_path / "split"
    summary = import_dataset("camus", REPLICAS / "camus_nifti", out2, progress=False, split="test=0.5")
    assert summary.groups_per_split == {"train": 1, "test": 1}


def test_camus_metaimage_testing_folder_is_the_test_split(tmp_path):
    """training/patient0003 (.mha with _gt) and testing/patient0101 (no _gt): 2 labelled train records with 3
    objects each, 2 unlabelled test records; test.jsonl holds only the testing folder's."""
    summary = import_dataset("camus", REPLICAS / "camus_mha", tmp_path / "out", progress=False)
    assert summary.per_split == {"test": 2} and summary.imported == 4
    recs = _records(tmp_path / "out")
    test = [r for r in recs.values() if r.extra.get("split") == "test"]
    assert sorted(r.id for r in test) == ["patient0101_2CH_ED", "patient0101_2CH_ES"]
    assert all(not r.annotations.objects and r.extra["labelled"] is False for r in test)
    labelled = [r for r in recs.values() if r.extra.get("split") != "test"]
    assert [len(r.annotations.objects) for r in labelled] == [3, 3]
    assert summary.log.skipped == []


def test_camus_mhd_with_a_raw_file_is_refused_naming_it(tmp_path):
    d = tmp_path / "patient0009"
    d.mkdir()
    for name in ("patient0009_2CH_ED.mhd", "patient0009_2CH_ED_gt.mhd"):
        (d / name).write_text("ObjectType = Image\nNDims = 2\nDimSize = 4 4\nElementType = MET_UCHAR\n"
                              f"ElementDataFile = {name[:-4]}.raw\n")
        (d / f"{name[:-4]}.raw").write_bytes(bytes(16))
    out = tmp_path / "out"
    with pytest.raises(ValueError, match="nothing imported .*unreadable file: patient0009/patient0009_2CH_ED.mhd"):
        import_dataset("camus", d, out, progress=False)
    assert _report(out)["skipped"][0]["item"] == "patient0009/patient0009_2CH_ED.mhd"


# ------------------------------------------------------------------------------------ Slicer's default names

def test_slicer_default_named_exports_belong_to_the_folders_only_image(tmp_path, capsys):
    """kidney/: Segmentation.seg.nrrd (one segment) + L.mrk.json + F.mrk.json beside scan.nrrd; cyst/: L.mrk.json
    with a description; pair/: L.mrk.json beside two images. In: 4 images, 1 segment, 4 markups files -> 4 records,
    the segment as a mask, the line as "kidney length" (8 mm) on the kidney, the points on the kidney, the cyst's line
    "cyst diameter"; the pair's L skipped naming it. No prompt says "the L"."""
    out = tmp_path / "out"
    assert cli_main(["import", "slicer", str(REPLICAS / "slicer_default"), "--out", str(out), "--no-progress"]) == 0
    text = capsys.readouterr().out
    recs = _records(out)
    assert sorted(recs) == ["a", "b", "scan", "scan-2"]
    by_path = {r.extra["source"]["path"]: r for r in recs.values()}
    kidney = by_path["kidney/scan.nrrd"]
    assert sorted(kidney.extra["source"]["files"]) == ["kidney/F.mrk.json", "kidney/L.mrk.json",
                                                        "kidney/Segmentation.seg.nrrd"]
    (obj,) = kidney.annotations.objects
    assert obj.label == "kidney" and int(kidney.load_masks()[0].sum()) == 200
    (line,) = obj.lines
    assert line.name == "kidney length" and line.length_mm == pytest.approx(8.0)
    assert [k.name for k in obj.keypoints] == ["F-1", "F-2"]
    (cyst,) = by_path["cyst/scan.nrrd"].annotations.objects
    assert [ln.name for ln in cyst.lines] == ["cyst diameter"] and cyst.lines[0].length_mm == pytest.approx(5.0)
    assert by_path["pair/a.nrrd"].annotations.objects == [] == by_path["pair/b.nrrd"].annotations.objects
    (skip,) = _report(out)["skipped"]
    assert skip["item"] == "pair/L.mrk.json" and skip["reason"].startswith("Slicer default name in a folder of 2")
    assert "pair/L.mrk.json" in text
    prompts = [m["content"] for r in recs.values() for c in r.conversations for m in c.messages if m["role"] == "user"]
    assert any("kidney length" in p for p in prompts) and not any(re.search(r"\bL\b", p) for p in prompts)


@pytest.mark.parametrize("name,default", [("L", True), ("F_1", True), ("Segmentation", True), ("CC_2", True),
                                          ("kidney length", False), ("Length", False), ("LA", False)])
def test_slicer_default_names(name, default):
    from umind_core.importers.slicer import is_default_name

    assert is_default_name(name) is default


@pytest.mark.parametrize("site,word", [("kidney", "kidney length"), ("fetal_head", "BPD"), ("thyroid", "line"),
                                       (None, "line")])
def test_slicer_default_line_without_a_structure_is_the_sites_measurement(site, word):
    from umind_core.importers.slicer import _labels

    assert _labels({"type": "Line", "name": ""}, "L", None, site) == (word, word)
    assert _labels({"type": "Line", "name": "L"}, "", "thyroid nodule", site) == ("thyroid nodule",
                                                                                   "thyroid nodule length")


def test_folders_reads_a_units_own_images_and_its_class_folders_beside_them(tmp_path):
    """An image at DIR's top beside class folders is read with them, never silently left out."""
    make_replicas.busi_release(tmp_path / "release")
    src = tmp_path / "set"
    shutil.copytree(tmp_path / "release" / "Dataset_BUSI_with_GT", src)
    shutil.copy(src / "benign" / "benign (1).png", src / "loose.png")
    shutil.copy(src / "benign" / "benign (1)_mask.png", src / "loose_mask.png")
    summary = import_dataset("folders", src, tmp_path / "out", progress=False, site="breast")
    recs = _records(tmp_path / "out")
    assert summary.imported == 5 and "loose" in recs
    assert [o.label for o in recs["loose"].annotations.objects] == ["set"]  # DIR's name: not a finding
    assert recs["benign-2"].annotations.diagnosis == "benign"


def test_camus_testing_folder_in_any_case_is_the_test_split(tmp_path):
    src = tmp_path / "camus_mha"
    shutil.copytree(REPLICAS / "camus_mha", src)
    (src / "testing").rename(src / "Testing")
    summary = import_dataset("camus", src, tmp_path / "out", progress=False)
    assert summary.per_split == {"test": 2} and summary.imported == 4
