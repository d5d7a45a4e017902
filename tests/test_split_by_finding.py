"""scripts/split_by_finding.py: BUSI_BALANCE's parts, each finding weighted to about the commonest one's count."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from umind_core.data.manifest import Annotations, Record, read_manifest, write_manifest

ROOT = Path(__file__).resolve().parents[1]


def _script():
    spec = importlib.util.spec_from_file_location("split_by_finding", ROOT / "scripts" / "split_by_finding.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_parts_weight_each_finding_to_the_commonest_and_keep_every_record(tmp_path):
    findings = ["benign"] * 6 + ["malignant"] * 3 + ["normal"] * 2 + [None]
    records = [Record(id=f"r{i}", image=f"images/{i}.png", annotations=Annotations(diagnosis=d))
               for i, d in enumerate(findings)]
    manifest = write_manifest(records, tmp_path / "busi" / "train.jsonl")
    parts = _script().parts(manifest, copies=2)
    assert [p.split("=")[0] for p in parts] == ["busi-benign", "busi-malignant", "busi-none", "busi-normal"]
    assert [p.rsplit("*", 1)[1] for p in parts] == ["2", "4", "12", "6"]  # 2 x round(6 / n)
    kept = [r for p in parts for r in read_manifest(p.split("=")[1].rsplit("*", 1)[0])]
    assert sorted(r.id for r in kept) == sorted(r.id for r in records)
    assert all((r.annotations.diagnosis or "none") in p for p in parts for r in
               read_manifest(p.split("=")[1].rsplit("*", 1)[0]))


def test_a_bad_manifest_is_one_line_and_exit_1(tmp_path, capsys):
    bad = tmp_path / "train.jsonl"
    bad.write_text("{not json\n")
    assert _script().main([str(bad)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("split_by_finding: ") and len(err.strip().splitlines()) == 1
