"""`umind check` and the check `umind train` runs first: a fixture manifest with one defect per line (a diagnosis
outside the finding list, a misplaced or misspelt annotations key, an empty mask, label maps with and without
names, missing files...) is checked line by line, and training takes only what passes."""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from umind_core import cli
from umind_core.data.check import CHECKED_NAME, check_manifest, training_manifest
from umind_core.data.conversations import build_conversations
from umind_core.data.manifest import read_manifest

SIZE = 64
GOOD_IDS = {"good-1", "normal-1", "map-1"}
#: (line, field, reason) of every defect the fixture holds; lines 1, 8 and 10 are good (8: an empty mask, a note)
DEFECTS = {
    (2, "id", "invalid field"),
    (3, "image", "missing file"),
    (4, "annotations.objects[0].mask", "missing file"),
    (5, "scan_mask", "missing file"),
    (6, "annotations.diagnosis", "unknown finding"),
    (7, "annotations.objects[0].mask", "label map"),  # a value the label_names do not declare
    (9, "annotations.objects[0].mask", "label map"),  # several values and no names
    (11, "annotations.object", "annotations shape"),  # misspelt key: would train nothing
    (12, "annotations", "invalid field"),  # a list instead of an object (read_manifest's own rule)
    (13, "objects", "annotations shape"),  # objects at the top level
    (14, "", "unreadable line"),
    (15, "id", "duplicate id"),
    (16, "annotations.objects[0].mask", "mask size"),
    (17, "conversations[0].messages[1].content", "unknown finding"),
}


def _png(path: Path, arr: np.ndarray) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(arr.astype(np.uint8)).save(path)


def _label_map() -> np.ndarray:
    arr = np.zeros((SIZE, SIZE), np.uint8)
    arr[8:40, 8:56] = 1
    arr[20:30, 24:40] = 2
    return arr


def _line(rid, objects=(), **kw) -> dict:
    rec = {"id": rid, "image": "images/a.png", "site": "breast",
           "annotations": {"objects": list(objects), "diagnosis": "benign"}}
    rec.update(kw)
    return rec


def _obj(mask, **kw) -> dict:
    return {"label": "breast lesion", "mask": mask, **kw}


def _fixture(root: Path) -> Path:
    """images/, masks/ and manifest.jsonl: line n holds the defect DEFECTS names for line n."""
    rng = np.random.default_rng(0)
    _png(root / "images/a.png", 60 + rng.random((SIZE, SIZE)) * 150)
    lesion = np.zeros((SIZE, SIZE), np.uint8)
    lesion[20:36, 16:40] = 255
    _png(root / "masks/lesion.png", lesion)
    _png(root / "masks/scan.png", np.full((SIZE, SIZE), 255))
    _png(root / "masks/empty.png", np.zeros((SIZE, SIZE)))
    _png(root / "masks/map.png", _label_map())
    _png(root / "masks/small.png", np.full((SIZE // 2, SIZE // 2), 255))
    kidney = {"site": "kidney", "annotations": {"objects": [
        _obj("masks/map.png", label="kidney", label_names={"1": "kidney", "2": "renal sinus"})]}}
    lines = [
        _line("good-1", [_obj("masks/lesion.png", box=[16, 20, 39, 35])], scan_mask="masks/scan.png"),
        {"image": "images/a.png", "site": "breast"},
        _line("bad-image", image="images/nope.png"),
        _line("bad-mask", [_obj("masks/nope.png")]),
        _line("bad-scan", scan_mask="masks/nope_scan.png"),
        _line("suspicious", annotations={"diagnosis": "suspicious"}),
        _line("undeclared", [_obj("masks/map.png", label="kidney", label_names={"1": "kidney"})]),
        _line("normal-1", annotations={"objects": [_obj("masks/empty.png")], "diagnosis": "normal"}),
        _line("unnamed-map", [_obj("masks/map.png", label="kidney")]),
        {"id": "map-1", "image": "images/a.png", **kidney},
        _line("misspelt", annotations={"object": [_obj("masks/lesion.png")]}),
        _line("listed", annotations=[_obj("masks/lesion.png")]),
        {"id": "top-level", "image": "images/a.png", "site": "breast", "objects": [_obj("masks/lesion.png")]},
        None,  # invalid JSON
        _line("good-1"),
        _line("small-mask", [_obj("masks/small.png")]),
        _line("said-suspicious", conversations=[{"task": "diagnose", "messages": [
            {"role": "user", "content": "What is the diagnosis?"},
            {"role": "assistant", "content": "Suspicious."}]}]),
    ]
    text = "\n".join('{"id": "broken", ' if rec is None else json.dumps(rec) for rec in lines)
    path = root / "manifest.jsonl"
    path.write_text(text + "\n\n")  # a trailing blank line is not a record
    return path


@pytest.fixture
def fixture(tmp_path) -> Path:
    return _fixture(tmp_path / "data")


def test_every_defect_is_caught_with_its_line_and_field(fixture):
    result = check_manifest(fixture)
    found = {(p.line, p.field, p.reason) for p in result.errors}
    assert DEFECTS <= found, sorted(DEFECTS - found)
    assert {p.line for p in result.errors} == {line for line, _f, _r in DEFECTS}  # nothing on the good lines
    assert result.checked == 17
    assert {k.record.id for k in result.kept} == GOOD_IDS
    assert [(p.line, p.field, p.reason) for p in result.notes] == [(8, "annotations.objects[0].mask", "empty mask")]
    texts = [p.text("manifest.jsonl") for p in result.problems]
    assert "manifest.jsonl:4: annotations.objects[0].mask: file masks/nope.png does not exist" in texts
    assert any(t.startswith("manifest.jsonl:6: annotations.diagnosis: unknown finding 'suspicious'") for t in texts)


def test_strict_exits_1_default_exits_0_and_lists_the_skips(fixture, capsys):
    assert cli.main(["check", str(fixture), "--strict"]) == 1
    capsys.readouterr()
    assert cli.main(["check", str(fixture)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert f"{fixture}:3: image: file images/nope.png does not exist" in out
    assert f"{fixture}: 17 records checked, 3 kept, 14 skipped, 1 note" in out
    assert "  skipped, missing file: 3" in out and "  skipped, label map: 2" in out
    assert cli.main(["check", str(fixture), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert (report["kept"], report["skipped"], sum(report["skipped_by_reason"].values())) == (3, 14, 14)
    good = fixture.parent / "good.jsonl"
    good.write_text(fixture.read_text().splitlines()[0] + "\n")
    assert cli.main(["check", str(good), "--strict"]) == 0


def test_an_unreadable_manifest_is_one_line_and_exit_2(tmp_path, capsys):
    binary = tmp_path / "scan.png"
    _png(binary, np.zeros((8, 8)))
    for path in (tmp_path / "nope.jsonl", tmp_path, binary):
        assert cli.main(["check", str(path)]) == 2
        captured = capsys.readouterr()
        assert captured.out == ""
        lines = captured.err.splitlines()
        assert len(lines) == 1 and str(path) in lines[0] and lines[0].startswith("umind check: error:"), lines


def test_an_empty_mask_does_not_become_a_segmentation_target(fixture, tmp_path):
    out = tmp_path / "out"
    path = training_manifest(check_manifest(fixture), out)
    assert path == out / CHECKED_NAME
    records = {r.id: r for r in read_manifest(path)}
    assert set(records) == GOOD_IDS
    rng = random.Random(0)
    normal = build_conversations(records["normal-1"], SIZE, SIZE, rng, tasks=["segment"])
    assert not records["normal-1"].annotations.objects and not any(c.mask_objects for c in normal)
    good = build_conversations(records["good-1"], SIZE, SIZE, rng, tasks=["segment"])
    assert any(c.mask_objects == [0] for c in good)  # the control: a real mask is drawn

    # a ready-made conversation drawing the empty mask is dropped, the other one renumbered
    seg = lambda k: {"task": "segment", "mask_objects": [k], "messages": [  # noqa: E731
        {"role": "user", "content": "Segment."}, {"role": "assistant", "content": "<|seg_mask|>"}]}
    line = _line("made", [_obj("masks/empty.png"), _obj("masks/lesion.png")], conversations=[seg(0), seg(1)])
    made = fixture.parent / "made.jsonl"
    made.write_text(json.dumps(line) + "\n")
    (rec,) = read_manifest(training_manifest(check_manifest(made), tmp_path / "made"))
    assert [o.mask for o in rec.annotations.objects] == ["../data/masks/lesion.png"]
    assert [c.mask_objects for c in rec.conversations] == [[0]]


def test_a_named_label_map_splits_by_value(fixture, tmp_path):
    out = tmp_path / "out"
    records = {r.id: r for r in read_manifest(training_manifest(check_manifest(fixture), out))}
    objects = records["map-1"].annotations.objects
    assert [o.label for o in objects] == ["kidney", "renal sinus"]
    masks = records["map-1"].load_masks()
    label_map = _label_map()
    assert np.array_equal(masks[0], label_map == 1) and np.array_equal(masks[1], label_map == 2)
    assert objects[1].box == (24, 20, 39, 29)


def test_train_checks_first_attaches_an_adapter_and_trains_on_the_good_records(fixture, tmp_path, capsys):
    from umind_core.commands.train import add_train_arguments, run_train
    from umind_core.modeling.tiny import build_model
    from umind_core.modeling.umind import UMindVL

    model_dir = tmp_path / "full-model"
    build_model("tiny", lora=None).save_pretrained(model_dir)
    parser = argparse.ArgumentParser()
    add_train_arguments(parser)
    common = ["--manifest", str(fixture), "--model", str(model_dir), "--max-steps", "1", "--val-fraction", "0",
              "--no-progress", "--mixed-precision", "no", "--tasks", "segment,diagnose"]
    assert run_train(parser.parse_args([*common, "--out", str(tmp_path / "strict"), "--strict"])) == 1
    assert not (tmp_path / "strict" / "final").exists()
    capsys.readouterr()

    out = tmp_path / "run"
    assert run_train(parser.parse_args([*common, "--out", str(out)])) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["steps"] == 1
    assert "has no LoRA adapter; attaching a fresh one" in captured.err
    assert f"{fixture}:6: annotations.diagnosis: unknown finding 'suspicious'" in captured.err
    assert {r.id for r in read_manifest(out / "train_manifest.jsonl")} == GOOD_IDS
    trained = UMindVL.from_pretrained(out / "final")
    assert trained.config.lora is not None
