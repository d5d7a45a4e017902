"""JSONL manifest: round trips, the synthetic dataset writer, and errors that name the line."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
from PIL import Image

from umind_core.data.manifest import (
    Annotations,
    Conversation,
    Keypoint,
    Line,
    ManifestError,
    ManifestObject,
    Record,
    read_manifest,
    write_manifest,
    write_synthetic_dataset,
)
from umind_core.data.synthetic import SITES, generate


def _record(rid: str = "case-1", **kw) -> Record:
    base = dict(
        id=rid, image="img/a.png", frame=0, spacing=(0.2, 0.25), site="breast",
        annotations=Annotations(
            objects=[ManifestObject("breast lesion", mask="img/a_0.png", box=(3, 4, 10, 12),
                                    keypoints=[Keypoint("tip", (5.5, 6.0))],
                                    lines=[Line("width", (3.0, 8.0, 10.0, 8.0), 1.4)],
                                    diagnosis="benign"),
                     ManifestObject("marker", keypoints=[Keypoint("click", (1.0, 2.0))])],
            diagnosis="benign", report="Site: breast. Impression: benign.",
            measurements={"lesion width mm": 1.4}),
        conversations=[Conversation("segment", [
            {"role": "user", "content": "Segment the lesion."},
            {"role": "assistant", "content": [{"type": "text", "text": "<|seg_mask|>"}]}])],
        extra={"source": {"note": "kept"}})
    base.update(kw)
    return Record(**base)


def test_write_read_round_trip(tmp_path):
    records = [_record("a"), _record("b", frame=3, spacing=None, site=None, conversations=[])]
    path = write_manifest(records, tmp_path / "sub" / "m.jsonl")
    assert path == tmp_path / "sub" / "m.jsonl"
    back = read_manifest(path)
    assert back == records
    assert all(r.root == path.parent for r in back)
    assert back[0].image_path == path.parent / "img" / "a.png"
    first = json.loads(path.read_text().splitlines()[0])
    assert list(first)[:7] == ["id", "image", "frame", "spacing", "site", "annotations", "conversations"]
    assert first["source"] == {"note": "kept"}
    assert not [p for p in os.listdir(path.parent) if p.endswith(".tmp")]


def test_numpy_values_serialise(tmp_path):
    rec = _record(spacing=(np.float64(0.3), np.float32(0.3)))
    rec.annotations.objects[0].box = tuple(np.int64(v) for v in (1, 2, 3, 4))
    rec.annotations.measurements = {"x mm": np.float32(2.5)}
    back = read_manifest(write_manifest([rec], tmp_path / "m.jsonl"))[0]
    assert back.annotations.objects[0].box == (1, 2, 3, 4)
    assert back.annotations.measurements == {"x mm": 2.5}


def test_lazy_masks_and_images(tmp_path):
    (tmp_path / "img").mkdir()
    img = (np.arange(20 * 16) % 251).astype(np.uint8).reshape(20, 16)
    mask = np.zeros((20, 16), bool)
    mask[4:13, 3:11] = True
    Image.fromarray(img).save(tmp_path / "img" / "a.png")
    Image.fromarray(mask.astype(np.uint8) * 255).save(tmp_path / "img" / "a_0.png")
    rec = read_manifest(write_manifest([_record()], tmp_path / "m.jsonl"))[0]
    assert np.array_equal(rec.load_image(), img)
    masks = rec.load_masks()
    assert len(masks) == 2 and masks[1] is None
    assert masks[0].dtype == bool and np.array_equal(masks[0], mask)
    rec.frame = 2
    with pytest.raises(ManifestError, match="frame 2"):
        rec.load_image()


def test_synthetic_dataset_round_trip(tmp_path):
    path = write_synthetic_dataset(tmp_path / "ds", 4, seed0=10, size=96, progress=False)
    assert path == tmp_path / "ds" / "manifest.jsonl"
    records = read_manifest(path)
    assert [r.id for r in records] == ["syn-000010", "syn-000011", "syn-000012", "syn-000013"]
    assert [r.site for r in records] == list(SITES)
    for rec in records:
        seed = rec.extra["source"]["seed"]
        s = generate(seed, site=rec.site, size=96)
        assert rec.image == f"images/{rec.id}.png" and rec.frame == 0
        assert np.array_equal(rec.load_image(), s.image)
        assert np.array_equal(rec.load_scan_mask(), s.scan_mask)
        assert rec.spacing == s.spacing and rec.conversations == []
        ann = rec.annotations
        assert (ann.diagnosis, ann.report, ann.measurements) == (s.diagnosis, s.report, s.measurements)
        assert len(ann.objects) == len(s.objects)
        for j, (o, so, m) in enumerate(zip(ann.objects, s.objects, rec.load_masks())):
            assert o.mask == f"masks/{rec.id}_{j}.png"
            assert o.label == so.label and o.box == so.box and o.diagnosis == so.diagnosis
            assert np.array_equal(m, so.mask)
            assert [(k.name, k.xy) for k in o.keypoints] == so.keypoints
            assert [(ln.name, ln.xy, ln.length_mm) for ln in o.lines] == so.lines


GOOD = json.dumps({"id": "ok", "image": "a.png"})


@pytest.mark.parametrize("bad, words", [
    ("{not json", "invalid JSON"),
    ('["a list"]', "must be an object"),
    ('{"image": "a.png"}', "id must be a non-empty string"),
    ('{"id": "x", "image": "/abs/a.png"}', "relative"),
    ('{"id": "x", "image": "a.png", "frame": -1}', "frame"),
    ('{"id": "x", "image": "a.png", "spacing": [0.2, 0]}', "spacing must be positive"),
    ('{"id": "x", "image": "a.png", "annotations": {"objects": [{"label": "l", "box": [5, 0, 1, 3]}]}}',
     r"annotations.objects\[0\].box"),
    ('{"id": "x", "image": "a.png", "annotations": {"objects": [{"label": "l", '
     '"keypoints": [{"name": "k", "xy": [1, 2, 3]}]}]}}', r"keypoints\[0\].xy"),
    ('{"id": "x", "image": "a.png", "annotations": {"measurements": {"HC mm": "big"}}}', "HC mm"),
    ('{"id": "x", "image": "a.png", "conversations": [{"task": "ask", '
     '"messages": [{"role": "robot", "content": "hi"}]}]}', "role"),
    ('{"id": "ok", "image": "b.png"}', "duplicate id 'ok' \\(first on line 1\\)"),
])
def test_errors_name_the_line(tmp_path, bad, words):
    path = tmp_path / "m.jsonl"
    path.write_text(GOOD + "\n\n" + bad + "\n" + GOOD.replace('"ok"', '"later"') + "\n")
    with pytest.raises(ManifestError, match=words) as info:
        read_manifest(path)
    assert info.value.line == 3
    assert "line 3" in str(info.value) and str(path) in str(info.value)
    assert isinstance(info.value, ValueError)


def test_non_utf8_line_is_named(tmp_path):
    path = tmp_path / "m.jsonl"
    path.write_bytes(GOOD.encode() + b"\n" + b'{"id": "\xff"}\n')
    with pytest.raises(ManifestError, match="line 2.*UTF-8"):
        read_manifest(path)


def test_invalid_record_is_not_written(tmp_path):
    path = write_manifest([_record("a")], tmp_path / "m.jsonl")
    before = path.read_text()
    bad = _record("b")
    bad.annotations.objects[0].box = (9, 9, 1, 1)
    with pytest.raises(ManifestError, match=r"record 1 \(id 'b'\).*box"):
        write_manifest([_record("a"), bad], path)
    with pytest.raises(ManifestError, match="duplicate id 'a'"):
        write_manifest([_record("a"), _record("a")], path)
    assert path.read_text() == before
    assert sorted(os.listdir(tmp_path)) == ["m.jsonl"]
