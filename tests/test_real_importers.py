"""`umind import hc18` and `umind import busi`: the two real data sets' release layouts, and the split by subject.

HC18 is read from a few committed files of its release (tests/fixtures/hc18, CC BY 4.0, ATTRIBUTION.md beside them);
BUSI images may not be committed, so its layouts are built here from small numpy images with the release's file
names. The tests marked "real" read ../shared/data (the project's development copies) and skip in one line without
it; nothing else needs it.
"""

from __future__ import annotations

import csv
import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from umind_core.cli import main as cli_main
from umind_core.data.manifest import read_manifest
from umind_core.data.split import group_split, hash_split, record_groups
from umind_core.importers import import_dataset
from umind_core.importers.hc18 import filled_annotation
from umind_core.answers.landmarks import ellipse_axes, ellipse_perimeter, ramanujan_perimeter

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).resolve().parent / "fixtures" / "hc18"
SHARED = ROOT.parent / "shared" / "data"
HC18_CSV = "training_set_pixel_size_and_HC.csv"
HC18_HEADER = ["filename", "pixel size(mm)", "head circumference (mm)"]


def _png(path: Path, arr: np.ndarray) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(arr).save(path)
    return path


def _ellipse(h: int, w: int, cx: float, cy: float, a: float, b: float) -> np.ndarray:
    yy, xx = np.mgrid[0:h, 0:w].astype(float)
    return ((xx - cx) / a) ** 2 + ((yy - cy) / b) ** 2 <= 1.0


def _outline(mask: np.ndarray) -> np.ndarray:
    """The 1-pixel rim of a filled mask, as the HC18 release draws the head."""
    from scipy import ndimage

    return mask & ~ndimage.binary_erosion(mask)


def _reasons(out: Path) -> dict[str, int]:
    return json.loads((out / "import_report.json").read_text())["skipped_by_reason"]


def _hc_read(rec) -> float:
    """The record's head mask measured as the Predictor measures a head: its moment ellipse's perimeter in mm."""
    (mask,) = rec.load_masks()
    return ellipse_perimeter(sum(ellipse_axes(mask, rec.spacing), ()), rec.spacing).mm


def _csv(path: Path, rows: list[list]) -> None:
    with open(path, "w", newline="") as fh:
        csv.writer(fh).writerows([HC18_HEADER] + rows)


def _hc18_synthetic(root: Path, subjects: dict[str, int], size=(96, 72)) -> Path:
    """An HC18 layout of small images: subject NNN with n images (NNN_HC.png, NNN_2HC.png..), each head a drawn
    outline whose Ramanujan perimeter at 0.5 mm a pixel is its CSV row's HC."""
    w, h = size
    rng = np.random.default_rng(0)
    rows = []
    for subject, n in subjects.items():
        for k in range(1, n + 1):
            name = f"{subject}_{'' if k == 1 else k}HC"
            a, b = 30.0 + k, 20.0 + rng.integers(0, 5)
            _png(root / "training_set" / f"{name}.png", rng.integers(0, 255, (h, w), dtype=np.uint8))
            _png(root / "training_set" / f"{name}_Annotation.png",
                 _outline(_ellipse(h, w, w / 2, h / 2, a, b)).astype(np.uint8) * 255)
            rows.append([f"{name}.png", 0.5, round(ramanujan_perimeter(a * 0.5, b * 0.5), 2)])
    _csv(root / HC18_CSV, rows)
    return root


def test_both_formats_and_the_split_are_in_the_import_help(capsys):
    with pytest.raises(SystemExit) as exc:
        cli_main(["import", "--help"])
    text = capsys.readouterr().out
    assert exc.value.code == 0
    for needle in ("hc18", "busi", "NNN_HC_Annotation.png", "_mask_1.png", "--split NAME=FRACTION", "--split-seed",
                   "--lesion-masks", '"group"', "HC mm"):
        assert needle in text, needle


# ------------------------------------------------------------------------------------------------ the split rule

def test_a_group_split_keeps_every_group_on_one_side_and_records_without_one_split_as_before():
    ids = [f"{s:03d}_{k}HC" for s in range(60) for k in range(1, 1 + s % 4)]
    groups = [i[:3] for i in ids]
    train, held = group_split(ids, groups, 0.25, min_val=1, salt="t")
    assert {i[:3] for i in train}.isdisjoint({i[:3] for i in held}) and sorted(train + held) == sorted(ids)
    assert 5 <= len({i[:3] for i in held}) <= 25  # a quarter of 45 subjects, give or take the hash
    assert group_split(ids, groups, 0.25, min_val=1, salt="t") == (train, held)  # the same seed, the same split
    assert group_split(ids, groups, 0.25, min_val=1, salt="u") != (train, held)
    assert group_split(ids, [None] * len(ids), 0.3, salt="t") == hash_split(ids, 0.3, salt="t")
    with pytest.raises(ValueError, match="groups for"):
        group_split(ids, groups[:-1], 0.2)


# ------------------------------------------------------------------------------------------------ HC18

def test_hc18_fixtures_import_heads_spacing_hc_and_subjects(tmp_path):
    """The committed release files: three images of two subjects, each a filled "fetal head" whose moment ellipse
    is the sonographer's head circumference to a few mm."""
    summary = import_dataset("hc18", FIXTURES, tmp_path / "out", progress=False)
    assert summary.imported == 3 and summary.log.skipped == []
    records = {r.id: r for r in read_manifest(tmp_path / "out" / "manifest.jsonl")}
    assert sorted(records) == ["701_HC", "779_2HC", "779_HC"]
    assert {i: r.extra["group"] for i, r in records.items()} == {"701_HC": "701", "779_2HC": "779", "779_HC": "779"}
    with open(FIXTURES / HC18_CSV, newline="") as fh:
        truth = {row["filename"][:-4]: row for row in csv.DictReader(fh)}
    for rid, rec in records.items():
        assert rec.site == "fetal_head" and [o.label for o in rec.annotations.objects] == ["fetal head"]
        size = float(truth[rid]["pixel size(mm)"])
        assert rec.spacing == (size, size)
        hc = float(truth[rid]["head circumference (mm)"])
        assert rec.annotations.measurements == {"HC mm": hc}
        (mask,) = rec.load_masks()
        assert mask.shape == (540, 800) and 0.05 < mask.mean() < 0.6  # a solid head, not a ring
        assert _hc_read(rec) == pytest.approx(hc, abs=4.0), rid
        assert rec.extra["source"]["annotation"] == f"training_set/{rid}_Annotation.png"
        assert any(c.task == "segment" for c in rec.conversations)  # the one conversation builder ran


def test_a_thin_outline_is_filled_and_an_open_one_is_refused():
    head = _ellipse(300, 400, 200.0, 150.0, 120.0, 90.0)
    ring = _outline(head)
    assert ring.sum() < 0.05 * head.sum()
    gapped = ring.copy()
    gapped[140:143, :] = False  # two small gaps where the rim crosses these rows
    for drawn in (ring, gapped, head):  # a filled copy of the release reads the same
        filled = filled_annotation(drawn.astype(np.uint8) * 255)
        assert (filled & head).sum() / (filled | head).sum() > 0.99
    from umind_core.importers.common import RowSkipped

    open_arc = ring.copy()
    open_arc[:150, :] = False  # half the outline gone: nothing to fill
    with pytest.raises(RowSkipped, match="could not be filled"):
        filled_annotation(open_arc)
    with pytest.raises(RowSkipped, match="empty annotation"):
        filled_annotation(np.zeros((8, 8), np.uint8))


def test_hc18_bad_rows_and_files_are_skipped_with_their_reason(tmp_path):
    src = _hc18_synthetic(tmp_path / "src", {"001": 1, "002": 1, "003": 1, "004": 1, "005": 1})
    ts = src / "training_set"
    with open(src / HC18_CSV, newline="") as fh:
        rows = list(csv.reader(fh))[1:]
    rows[1][1] = "n/a"  # 002: no pixel size
    rows[2][2] = str(float(rows[2][2]) * 2)  # 003: the CSV's HC is not this head's
    (ts / "004_HC_Annotation.png").unlink()  # 004: no annotation
    rows = [r for r in rows if not r[0].startswith("005")]  # 005: an image the CSV does not list
    rows.append(["099_HC.png", "0.5", "100"])  # a row without its image
    _csv(src / HC18_CSV, rows)
    _png(ts / "098_HC_Annotation.png", np.zeros((72, 96), np.uint8))  # an annotation without its image
    (ts / "notes.txt").write_text("not an image")
    summary = import_dataset("hc18", src, tmp_path / "out", progress=False)
    assert [r.id for r in read_manifest(summary.manifest)] == ["001_HC"]
    assert _reasons(tmp_path / "out") == {
        "'pixel size(mm)' is not a positive number": 1,
        "annotation's ellipse disagrees with the CSV's head circumference": 1,
        "no annotation (NNN_kHC_Annotation.png) beside the image": 1,
        f"image not listed in {HC18_CSV}": 1,
        "CSV row names no image in training_set/": 1,
        "annotation without its image": 1,
        "not an HC18 file name (NNN_HC.png, NNN_kHC_Annotation.png)": 1,
    }
    assert not any("Annotation" in r.image for r in read_manifest(summary.manifest))


def test_hc18_test_set_images_are_unlabelled_records_of_their_own_split(tmp_path):
    src = tmp_path / "src"
    shutil.copytree(FIXTURES, src)
    (src / "test_set").mkdir()
    shutil.copy(FIXTURES / "training_set" / "701_HC.png", src / "test_set" / "000_HC.png")
    (src / "test_set_pixel_size.csv").write_text("filename,pixel size(mm)\n000_HC.png,0.25\n")
    summary = import_dataset("hc18", src, tmp_path / "out", progress=False, split="test=0.5")
    records = {r.id: r for r in read_manifest(summary.manifest)}
    test_image = records["000_HC"]
    assert test_image.annotations.objects == [] and test_image.annotations.measurements == {}
    assert test_image.extra["split"] == "test_set" and test_image.extra["labelled"] is False
    assert test_image.spacing == (0.25, 0.25) and test_image.extra["group"] == "test_set/000"
    assert set(summary.per_split) >= {"test_set"} and summary.per_split["test_set"] == 1
    assert {r.extra["split"] for i, r in records.items() if i != "000_HC"} <= {"train", "test"}


def test_hc18_split_by_subject_never_puts_one_subject_on_both_sides(tmp_path, capsys):
    subjects = {f"{s:03d}": 1 + s % 4 for s in range(24)}
    src = _hc18_synthetic(tmp_path / "src", subjects)
    code = cli_main(["import", "hc18", str(src), "--out", str(tmp_path / "a"), "--split", "test=0.3",
                     "--split-seed", "7", "--no-conversations", "--no-progress"])
    out = capsys.readouterr().out
    assert code == 0 and "groups (subjects) per split: " in out
    sides = {name: read_manifest(tmp_path / "a" / f"{name}.jsonl") for name in ("train", "test")}
    groups = {name: set(record_groups(recs)) for name, recs in sides.items()}
    assert groups["train"].isdisjoint(groups["test"]) and groups["train"] | groups["test"] == set(subjects)
    assert sum(len(r) for r in sides.values()) == sum(subjects.values())
    report = json.loads((tmp_path / "a" / "import_report.json").read_text())
    assert report["groups_per_split"] == {k: len(v) for k, v in groups.items()}
    again = import_dataset("hc18", src, tmp_path / "b", progress=False, conversations=False, split="test=0.3",
                           split_seed=7)
    assert {r.id: r.extra["split"] for r in read_manifest(again.manifest)} == {
        r.id: r.extra["split"] for r in read_manifest(tmp_path / "a" / "manifest.jsonl")}  # the seed decides


@pytest.mark.parametrize("value, words", [("test=1.5", "between 0 and 1"), ("train=0.2", "not 'manifest' or 'train'"),
                                          ("test", "NAME=FRACTION")])
def test_a_bad_split_is_one_line_and_exit_2(tmp_path, capsys, value, words):
    code = cli_main(["import", "hc18", str(FIXTURES), "--out", str(tmp_path / "o"), "--split", value])
    err = capsys.readouterr().err.strip()
    assert code == 2 and words in err and len(err.splitlines()) == 1 and "Traceback" not in err


def test_hc18_source_without_its_csv_or_sets_is_one_line(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    code = cli_main(["import", "hc18", str(tmp_path / "empty"), "--out", str(tmp_path / "o")])
    assert code == 2 and "no training_set/ or test_set/ folder" in capsys.readouterr().err
    shutil.copytree(FIXTURES / "training_set", tmp_path / "nocsv" / "training_set")
    code = cli_main(["import", "hc18", str(tmp_path / "nocsv"), "--out", str(tmp_path / "o2")])
    assert code == 2 and f"{HC18_CSV}: not found" in capsys.readouterr().err


# ------------------------------------------------------------------------------------------------ BUSI

def _busi(root: Path, masks: bool = True) -> Path:
    """The BUSI release's names on small images: benign (1) one lesion, benign (2) two lesion files (one drawn in
    two pieces), benign (3) an empty mask, malignant (1) one lesion, normal (1) an empty mask; with `masks` also a
    mask without its image and one of the wrong size."""
    rng = np.random.default_rng(1)

    def image(cls: str, n: int, shape=(40, 56, 3)) -> None:
        _png(root / cls / f"{cls} ({n}).png", rng.integers(0, 255, shape, dtype=np.uint8))

    def mask(cls: str, n: int, suffix: str, m: np.ndarray) -> None:
        if masks:
            _png(root / cls / f"{cls} ({n}){suffix}.png", m.astype(np.uint8) * 255)

    def rect(y0, y1, x0, x1, shape=(40, 56)) -> np.ndarray:
        m = np.zeros(shape, bool)
        m[y0:y1, x0:x1] = True
        return m

    for n in (1, 2, 3):
        image("benign", n)
    image("malignant", 1)
    image("normal", 1)
    mask("benign", 1, "_mask", rect(5, 15, 5, 20))
    mask("benign", 2, "_mask", rect(20, 30, 30, 40) | rect(20, 30, 44, 50))
    mask("benign", 2, "_mask_1", rect(2, 6, 2, 6))
    mask("benign", 3, "_mask", rect(0, 0, 0, 0))
    mask("malignant", 1, "_mask", rect(10, 30, 10, 40))
    mask("normal", 1, "_mask", rect(0, 0, 0, 0))
    if masks:
        image("malignant", 2)
        mask("malignant", 2, "_mask", rect(1, 5, 1, 5, shape=(20, 20)))  # another size than its image
        mask("benign", 9, "_mask", rect(1, 5, 1, 5))  # no benign (9).png
    return root


def test_busi_masks_kept_apart_findings_normal_and_skips(tmp_path):
    summary = import_dataset("busi", _busi(tmp_path / "busi"), tmp_path / "out", progress=False)
    records = {r.id: r for r in read_manifest(summary.manifest)}
    assert sorted(records) == ["benign-1", "benign-2", "benign-3", "malignant-1", "normal-1"]
    assert not any("mask" in r.image or "mask" in r.extra["source"]["path"] for r in records.values())
    assert {i: r.annotations.diagnosis for i, r in records.items()} == {
        "benign-1": "benign", "benign-2": "benign", "benign-3": "benign", "malignant-1": "malignant",
        "normal-1": "normal"}
    assert all(r.site == "breast" for r in records.values())
    two = records["benign-2"]
    assert [(o.label, o.diagnosis) for o in two.annotations.objects] == [("breast lesion", "benign")] * 2
    first, second = two.load_masks()
    assert first.sum() == 100 + 60 and second.sum() == 16  # a lesion drawn in two pieces stays one lesion
    assert records["benign-3"].annotations.objects == [] and records["normal-1"].annotations.objects == []
    assert [o.diagnosis for o in records["malignant-1"].annotations.objects] == ["malignant"]
    assert _reasons(tmp_path / "out") == {"mask file without its image": 1, "mask size differs from the image": 1}
    assert json.loads((tmp_path / "out" / "import_report.json").read_text())["dropped"] == {
        "empty lesion mask file": 1}


def test_busi_merged_masks_are_one_lesion_per_image(tmp_path):
    import_dataset("busi", _busi(tmp_path / "busi"), tmp_path / "out", progress=False, lesion_masks="merged")
    rec = next(r for r in read_manifest(tmp_path / "out" / "manifest.jsonl") if r.id == "benign-2")
    (merged,) = rec.load_masks()
    assert merged.sum() == 160 + 16


def test_busi_without_masks_is_the_finding_alone_and_splits_by_image(tmp_path):
    root = _busi(tmp_path / "Dataset_BUSI_with_GT", masks=False)  # the release's folder inside SOURCE
    summary = import_dataset("busi", tmp_path, tmp_path / "out", progress=False, split="test=0.4")
    records = read_manifest(summary.manifest)
    assert root.parent == tmp_path and len(records) == 5 and all(r.annotations.objects == [] for r in records)
    assert summary.log.dropped == {"lesion masks: none in this copy (mask-less layout: the finding only)": 5}
    assert summary.per_split["train"] + summary.per_split["test"] == 5 and summary.groups_per_split == {}
    with pytest.raises(ValueError, match="busi format only"):
        import_dataset("hc18", FIXTURES, tmp_path / "o", lesion_masks="merged")


# ------------------------------------------------------------------------------------------------ real data

def _shared(name: str) -> Path:
    path = SHARED / name
    if not path.is_dir():
        pytest.skip(f"{path} is absent (the development copies of ../shared/data)")
    return path


@pytest.mark.slow
def test_real_hc18_annotations_agree_with_the_sonographers_hc():
    """The filled annotation's moment ellipse against the CSV's head circumference, on every 8th row of the 704
    (the importer's own fill and measure): 1.2 mm apart on average over all 704, 3.5 mm at most."""
    root = _shared("hc18")
    with open(root / HC18_CSV, newline="") as fh:
        rows = list(csv.DictReader(fh))[::8]
    diffs = []
    for row in rows:
        with Image.open(root / "training_set" / row["filename"].replace(".png", "_Annotation.png")) as im:
            mask = filled_annotation(np.asarray(im.convert("L")))
        spacing = (float(row["pixel size(mm)"]),) * 2
        read = ellipse_perimeter(sum(ellipse_axes(mask, spacing), ()), spacing).mm
        diffs.append(abs(read - float(row["head circumference (mm)"])))
    assert len(diffs) == 88 and np.mean(diffs) < 2.0 and max(diffs) < 4.0


def test_real_busi_imports_every_image_with_its_finding(tmp_path):
    root = _shared("busi")
    summary = import_dataset("busi", root, tmp_path / "out", progress=False, conversations=False, split="test=0.2")
    records = read_manifest(summary.manifest)
    counts = {c: sum(r.annotations.diagnosis == c for r in records) for c in ("benign", "malignant", "normal")}
    assert counts == {"benign": 306, "malignant": 147, "normal": 93} and summary.log.skipped == []
    assert math.isclose(summary.per_split["test"] / len(records), 0.2, abs_tol=0.06)
