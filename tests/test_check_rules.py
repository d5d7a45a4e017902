"""`umind check`'s rules at their edges: a mask's size is width x height (a non-square image tells them apart), an
empty mask drops only the mask of an object that holds other truth, and a manifest whose skipped lines are the
only change is still rewritten without them (training must never read a line the check refused)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from PIL import Image

from umind_core.data.check import CHECKED_NAME, check_manifest, training_manifest
from umind_core.data.manifest import read_manifest

WIDTH, HEIGHT = 40, 24  # not square: a transposed mask is the wrong size


def _png(path: Path, arr: np.ndarray) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(arr.astype(np.uint8)).save(path)
    return path.name


def _manifest(root: Path, lines: list[dict]) -> Path:
    _png(root / "images/a.png", np.full((HEIGHT, WIDTH), 120))
    path = root / "manifest.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def _line(rid: str, objects=(), image: str = "images/a.png") -> dict:
    return {"id": rid, "image": image, "site": "breast",
            "annotations": {"objects": list(objects), "diagnosis": "benign"}}


def test_a_mask_is_checked_as_width_by_height(tmp_path):
    lesion = np.zeros((HEIGHT, WIDTH), np.uint8)
    lesion[4:12, 8:30] = 255
    _png(tmp_path / "masks/right.png", lesion)
    _png(tmp_path / "masks/transposed.png", lesion.T.copy())
    path = _manifest(tmp_path, [_line("right", [{"label": "breast lesion", "mask": "masks/right.png"}]),
                                _line("transposed", [{"label": "breast lesion", "mask": "masks/transposed.png"}])])
    result = check_manifest(path)
    assert [(p.line, p.reason) for p in result.errors] == [(2, "mask size")]
    assert "masks/transposed.png is 24x40 pixels, the image 40x24" in result.errors[0].message
    assert [k.record.id for k in result.kept] == ["right"]


def test_an_empty_mask_keeps_its_objects_box_and_drops_a_bare_object(tmp_path):
    _png(tmp_path / "masks/empty.png", np.zeros((HEIGHT, WIDTH)))
    boxed = {"label": "breast lesion", "mask": "masks/empty.png", "box": [2, 3, 20, 15]}
    bare = {"label": "breast lesion", "mask": "masks/empty.png"}
    path = _manifest(tmp_path, [_line("boxed", [boxed]), _line("bare", [bare])])
    records = {r.id: r for r in read_manifest(training_manifest(check_manifest(path), tmp_path / "out"))}
    (kept,) = records["boxed"].annotations.objects
    assert kept.mask is None and tuple(kept.box) == (2, 3, 20, 15)
    assert records["bare"].annotations.objects == []


def test_skipped_lines_alone_still_give_a_checked_manifest_without_them(tmp_path):
    path = _manifest(tmp_path, [_line("good"), _line("gone", image="images/nope.png")])
    result = check_manifest(path)
    assert [k.record.id for k in result.kept] == ["good"] and result.checked == 2
    out = training_manifest(result, tmp_path / "out")
    assert out == tmp_path / "out" / CHECKED_NAME
    assert [r.id for r in read_manifest(out)] == ["good"]
    only_good = _manifest(tmp_path / "clean", [_line("good")])
    assert training_manifest(check_manifest(only_good), tmp_path / "out2") == only_good  # nothing to change
