"""`docs/api.md` shows a curl call per task and says the infer reply is multipart (as the server writes it);
U2-Bench and UltraBench each get a page naming the columns / keys the code reads; U2-Bench's headline U2-Score counts
only the tasks that were run; `umind eval --benchmark ultrabench` refuses a manifest that is not an UltraBench import.
"""

from __future__ import annotations

import inspect
import json
import re
from pathlib import Path

import pytest

from umind_core.cli import main as cli_main
from umind_core.data.manifest import Record, write_manifest
from umind_core.evaluation import u2bench as U
from umind_core.evaluation.benchmarks import require_benchmark
from umind_core.evaluation.u2bench_runner import headline, summarize

DOCS = Path(__file__).resolve().parents[1] / "docs"


def test_api_page_has_a_curl_call_per_task_and_says_multipart():
    text = (DOCS / "api.md").read_text()
    calls = [ln for ln in text.splitlines() if ln.startswith("curl ")]
    wanted = {"segment": "umind_segment", "detect": "umind_detect", "landmarks": '"task": "keypoints"',
              "measure": '"task": "measure"', "diagnose": '"task": "diagnose"', "report": '"task": "report"',
              "ask": '"task": "ask"'}
    for task, needle in wanted.items():
        assert any(needle in c for c in calls), f"no curl call for {task}"
    assert "**multipart**" in text and "`params`" in text and "`image`" in text
    # what the page says is what MONAI Label's infer endpoint writes: a params part and an image part
    from monailabel.endpoints import infer

    source = inspect.getsource(infer.send_response)
    assert 'res_fields["params"]' in source and 'res_fields["image"]' in source and "MultipartEncoder" in source


def test_reference_index_links_the_benchmark_pages():
    index = (DOCS / "README.md").read_text()
    assert "(u2bench.md)" in index and "(ultrabench.md)" in index
    assert (DOCS / "u2bench.md").is_file() and (DOCS / "ultrabench.md").is_file()


def test_u2bench_page_names_every_column_the_reader_reads():
    from umind_core.evaluation import u2bench_release as rel

    page = (DOCS / "u2bench.md").read_text()
    source = inspect.getsource(rel)
    columns = set(re.findall(r'"(classes|class|class_label|gt_bbox|keypoints|measurement|caption|gt_report|report|'
                             r'img_data|img_path|index|anatomy_location|hint|seg_channel_name)"', source))
    assert len(columns) >= 12
    for col in columns:
        assert f"`{col}`" in page, col
    assert "huggingface.co/datasets/DolphinAI/u2-bench" in page and "dolphin-sound/u2-bench-evalkit" in page
    for task, w in U.U2_WEIGHTS.items():  # the kit's formula, with its weights as the code holds them
        assert f"{task} {w:.2f}" in page


def test_ultrabench_page_names_every_key_the_importer_reads():
    from umind_core.importers import ultrabench as ub

    page = (DOCS / "ultrabench.md").read_text()
    for key in (*ub._PATH_KEYS, "mask", "pathology", "<name>_mask", "<name>_mask_binary", "<name>_mask_multiclass"):
        assert f"`{key}`" in page, key
    for split in ("train", "validation", "train_val", "test"):
        assert f"`{split}.json`" in page
    assert "github.com/adamtupper/ultrabench" in page and "usaugment-experiments" in page


def _row(task_type, dataset, value):
    return {"task_type": task_type, "dataset": dataset, "u2_task": __import__(
        "umind_core.evaluation.u2bench_release", fromlist=["u2_task"]).u2_task(task_type, dataset),
        "value": value, "metric": "accuracy", "n": 1, "n_scored": 1}


def test_headline_u2_score_counts_only_the_tasks_run():
    """A cla-only run (DD 0.6, VRA 0.4): the headline is (0.2 x 0.6 + 0.2 x 0.4) / 0.4 = 0.5; the kit's all-eight
    formula gives 0.2 + 0.07 (a CVE not run counts 1), which the headline must not be."""
    scores = summarize([_row("cla", "21", 0.6), _row("cla", "03", 0.4)], "m")
    assert scores["tasks_present"] == ["DD", "VRA"]
    assert scores["u2_score_present_tasks"] == pytest.approx(0.5)
    assert scores["u2_score"] == pytest.approx(0.2 * 0.6 + 0.2 * 0.4 + 0.07)
    line = headline(scores)
    assert line.startswith("U2-Score over the 2 tasks run (DD, VRA) 0.5000;") and "0.2700" in line
    from umind_core.evaluation.u2bench_runner import write_scores

    out = Path(__import__("tempfile").mkdtemp())
    report = write_scores(out, {**scores, "release": "R"})["report"].read_text()
    first = next(ln for ln in report.splitlines() if ln.startswith("- "))
    assert "tasks run (DD, VRA)" in first and "**0.5000**" in first and "not comparable" in report


def test_headline_with_all_eight_tasks_is_the_kits_score():
    rows = [_row("cla", "21", 0.5), _row("cla", "03", 0.5), _row("seg", "04", 0.5), _row("seg", "09", 0.5),
            _row("seg", "48", 0.5), {**_row("measurement", "18", 0.2), "metric": "rmse"},
            _row("report", "39", 0.1), _row("report", "10", 0.1)]
    scores = summarize(rows, "m")
    assert len(scores["tasks_present"]) == 8
    assert scores["u2_score_present_tasks"] == pytest.approx(scores["u2_score"])
    assert headline(scores) == f"U2-Score {scores['u2_score']:.4f} (all eight tasks)"


def test_u2bench_default_model_name_is_never_just_final(tmp_path):
    from umind_core.commands.u2bench import _default_name

    assert _default_name(str(tmp_path / "runs" / "thyroid" / "final")) == "thyroid-final"


def test_require_benchmark_names_the_unmarked_records():
    marked = Record(id="ub1", image="x.png", extra={"source": {"format": "ultrabench", "dataset": "camus"}})
    plain = [Record(id=f"p{i}", image="x.png") for i in range(4)]
    require_benchmark([marked], "ultrabench")
    with pytest.raises(ValueError, match=r"is not an import of ultrabench: 4 of 5 record\(s\) carry no ultrabench "
                                         r"mark \(e.g. p0, p1, p2, \.\.\.\)"):
        require_benchmark([marked, *plain], "ultrabench", "M")


def test_eval_benchmark_ultrabench_refuses_a_plain_manifest_in_one_line_before_loading(tmp_path, capsys,
                                                                                         monkeypatch):
    from PIL import Image

    import umind_core.demo as demo

    Image.new("L", (8, 8)).save(tmp_path / "a.png")
    manifest = write_manifest([Record(id="a", image="a.png", root=tmp_path)], tmp_path / "m.jsonl")

    def no_load(*a, **k):
        raise AssertionError("the model must not load for a refused manifest")

    monkeypatch.setattr(demo, "load_model", no_load)
    rc = cli_main(["eval", "--manifest", str(manifest), "--out", str(tmp_path / "e"), "--benchmark", "ultrabench"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "is not an import of ultrabench: 1 of 1 record(s)" in err[0]
    assert not (tmp_path / "e").exists()
    assert json.loads(manifest.read_text().splitlines()[0])["id"] == "a"
