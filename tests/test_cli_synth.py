"""`umind synth`: a synthetic dataset with its conversations in one command, and a one-line summary."""

from __future__ import annotations

import re

import pytest

from umind_core.cli import main
from umind_core.data.manifest import read_manifest


def test_synth_writes_records_with_conversations_and_a_summary_line(tmp_path, capsys):
    out = tmp_path / "ds"
    assert main(["synth", "--out", str(out), "-n", "4", "--seed0", "7", "--size", "96",
                 "--sites", "breast,kidney"]) == 0
    records = read_manifest(out / "manifest.jsonl")
    assert [r.id for r in records] == ["syn-000007", "syn-000008", "syn-000009", "syn-000010"]
    assert [r.site for r in records] == ["breast", "kidney", "breast", "kidney"]
    for rec in records:
        assert rec.image_path.is_file()
        assert rec.load_image().shape == (96, 96)
        assert rec.conversations, f"{rec.id} has no conversations"
        tasks = {c.task for c in rec.conversations}
        assert "report" in tasks and "diagnose" in tasks
        for obj in rec.annotations.objects:
            assert rec.resolve(obj.mask).is_file()
    kidney = records[1]
    assert {"keypoints", "measure"} <= {c.task for c in kidney.conversations}
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 1
    m = re.fullmatch(r"umind synth: 4 images with conversations \(breast,kidney, 96 px\) -> (\S+) in ([\d.]+) s "
                     r"\((\d+) images/minute\)", lines[0])
    assert m, lines[0]
    assert m.group(1).endswith("manifest.jsonl") and int(m.group(3)) > 0


def test_no_conversations_leaves_them_empty(tmp_path, capsys):
    out = tmp_path / "ds"
    assert main(["synth", "--out", str(out), "-n", "2", "--size", "64", "--no-conversations"]) == 0
    records = read_manifest(out / "manifest.jsonl")
    assert len(records) == 2 and all(r.conversations == [] for r in records)
    line = capsys.readouterr().out.strip()
    assert "with conversations" not in line and line.startswith("umind synth: 2 images (")
    assert "breast,thyroid,kidney,fetal_head" in line


@pytest.mark.parametrize("argv, needle", [
    (["--sites", "breast,liver"], "liver"),
    (["--sites", ","], "names no site"),
    (["--size", "20"], "size"),
    (["--seed0", "-1"], "--seed0"),
])
def test_bad_arguments_end_in_one_line_and_status_2(tmp_path, capsys, argv, needle):
    assert main(["synth", "--out", str(tmp_path / "ds"), "-n", "2", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("umind synth: error:") and needle in err[-1]
    assert not (tmp_path / "ds" / "manifest.jsonl").exists()


def test_n_must_be_positive(tmp_path):
    with pytest.raises(SystemExit) as exc:
        main(["synth", "--out", str(tmp_path / "ds"), "-n", "0"])
    assert exc.value.code == 2


def test_refusal_rate_sets_how_many_images_get_a_refusal(tmp_path):
    from umind_core.evaluation.metrics import is_refusal

    def refusals(rate: str) -> int:
        out = tmp_path / rate
        assert main(["synth", "--out", str(out), "-n", "8", "--size", "64", "--refusal-rate", rate]) == 0
        return sum(any(is_refusal(c.messages[1]["content"]) for c in r.conversations)
                   for r in read_manifest(out / "manifest.jsonl"))

    assert refusals("0") == 0 and refusals("1") == 8
    with pytest.raises(SystemExit) as exc:
        main(["synth", "--out", str(tmp_path / "bad"), "-n", "2", "--refusal-rate", "1.5"])
    assert exc.value.code == 2
