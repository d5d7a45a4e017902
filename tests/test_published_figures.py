"""The cheap figures the documents and the demo model card publish, recomputed from the artefacts.

Parameter counts are counted here from the modules themselves (not through `parameter_counts`), the split from
the record ids `umind synth` writes, the size from the files on disk; each is then looked up, as printed, in the
document that states it. A figure that drifts from its artefact, or a document edited to another number, fails.

Where each figure is printed: the README (the demo model's size), docs/model.md (the size table), the demo model
card, benchmarks/README.md (one short row a figure: its headline values) and the NOTES.md beside each benchmark's
results (the run-by-run loop tables, and each figure's row as benchmarks/README.md printed it in full, moved there
when its table was cut to one line a figure; results/NOTES.md for the result files without a folder). A test
checks every figure of a full row against its result file, and the headline values of the short row too.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from umind_core import demo

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
MODEL_DOC = REPO / "docs" / "model.md"
BENCHMARKS = REPO / "benchmarks" / "README.md"
RESULTS = REPO / "benchmarks" / "results"
CARD = demo.DEMO_MODEL_DIR / "MODEL_CARD.md"


def _notes(folder: str) -> Path:
    """The run history of one benchmark result folder (its tables as the README used to print them)."""
    return RESULTS / folder / "NOTES.md"


MOVED = "## The full rows from benchmarks/README.md"  # the heading above them in a results folder's NOTES.md
LOOSE = RESULTS / "NOTES.md"  # the full rows of the result files without a folder of their own


def _full_row(source: Path, marker: str, start: bool = False) -> str:
    """The table row of `source` (a NOTES.md, or benchmarks/README.md) whose text holds `marker` (or starts with
    `| marker`): a figure's row as benchmarks/README.md printed it in full, or its short row there."""
    rows = [ln for ln in source.read_text(encoding="utf-8").splitlines() if ln.startswith("| ")]
    return next(ln for ln in rows if (ln.startswith(f"| {marker}") if start else marker in ln))


def _short_row(first_cell: str) -> str:
    """The row of benchmarks/README.md whose figure cell starts with `first_cell`."""
    return _full_row(BENCHMARKS, first_cell, start=True)


def _flat(path: Path) -> str:
    """The document with line breaks folded, so a figure split across lines is still found."""
    return re.sub(r"\s+", " ", path.read_text(encoding="utf-8"))


def _count(model) -> tuple[int, int]:
    """(total, trainable) over distinct tensors, counted directly from the module tree."""
    seen, total, trainable = set(), 0, 0
    for p in model.parameters():
        if id(p) not in seen:
            seen.add(id(p))
            total += p.numel()
            trainable += p.numel() if p.requires_grad else 0
    return total, trainable


def _fmt(n: int) -> str:
    return f"{n:,}"


@pytest.fixture(scope="module")
def demo_model():
    if not demo.has_demo_model():
        pytest.skip("the demo model is not built")
    return demo.load_model(None)


def test_demo_model_parameter_count_in_card_and_docs(demo_model):
    total, _ = _count(demo_model)
    assert demo_model.peft_model is None  # shipped without an adapter: every weight was trained
    assert f"{_fmt(total)} parameters" in _flat(CARD)
    largest = round(demo_model.processor.image_processor.size["longest_edge"] ** 0.5)  # the input a large scan keeps
    assert f"| demo model (`small`, 256 px, larger scans up to {largest} px, no adapter) | {_fmt(total)} |" in \
        MODEL_DOC.read_text(encoding="utf-8")
    assert f"up to {largest} px for larger scans" in _flat(README) and f"at most {largest}x{largest} pixels" in _flat(CARD)
    stated = re.findall(r"(\d+(?:\.\d+)?) M parameters", _flat(README))
    assert stated and set(stated) == {f"{total / 1e6:.1f}"}, stated  # every mention in the README


@pytest.mark.parametrize("size,image_size,label", [
    ("tiny", None, "`tiny` (tests)"),
    ("small", None, "`small` (512 px default)"),
])
def test_config_sizes_in_model_doc(size, image_size, label):
    from umind_core.modeling.tiny import build_model

    total, trainable = _count(build_model(size, image_size=image_size))
    assert f"| {label} | {_fmt(total)} | {_fmt(trainable)} |" in MODEL_DOC.read_text(encoding="utf-8")


def test_card_split_matches_split_records():
    """Every synthetic-only training set the card names (`umind synth --out train...`, seeds below the evaluation
    sets' 1,000,000) is split as it says. Demo model 4's synthetic part was split as one part of a mix with the real
    imports, which only ../shared/data can rebuild; the card states that split from the run itself."""
    from umind_core.training.trainer import split_records

    card = _flat(CARD)
    frac = float(re.search(r"--val-fraction ([0-9.]+)", card).group(1))
    sets = {(int(n), int(s)) for n, s in re.findall(r"--out train\S* -n (\d+) --seed0 (\d+) --size 256", card)
            if int(s) < 1_000_000}
    assert len(sets) >= 2, sets  # demo model 2's data and demo model 3's
    for n, seed0 in sorted(sets):
        ids = [f"syn-{seed:06d}" for seed in range(seed0, seed0 + n)]  # the ids `umind synth` gives those seeds
        train, val = split_records(ids, frac)
        assert f"the {_fmt(len(train))} training images" in card, (n, seed0)
        assert f"validation loss ({len(val)} images)" in card, (n, seed0)


def test_card_weight_size_matches_the_files(demo_model):
    files = sorted(demo.DEMO_MODEL_DIR.rglob("*.safetensors"))
    size = sum(p.stat().st_size for p in files)
    assert len(files) == 2  # base weights and the mask decoder
    assert f"({size / 1e6:.1f} MB, {_fmt(size)} bytes of safetensors)" in _flat(CARD)
    total, _ = _count(demo_model)
    assert 2 * total <= size < 2 * total + 200_000  # bfloat16: two bytes a parameter plus the headers


def test_annotation_loop_figures_in_notes_are_the_benchmarks():
    """The first loop run's table (its NOTES.md) row by row against benchmarks/results/annotation_loop/results.json."""
    import json

    results = json.loads((RESULTS / "annotation_loop" / "results.json").read_text())
    notes = _notes("annotation_loop")
    text = notes.read_text(encoding="utf-8").replace("**", "")  # bold marks the goal's columns
    rows = results["strategies"]["umind_uncertainty"]
    miou = " | ".join(f"{r['test']['segmentation_miou']:.3f}" for r in rows)
    assert f"| scanner_b segment mIoU | {miou} |" in text
    recall = " | ".join(f"{r['test']['detection_recall']:.3f}" for r in rows)
    assert f"| scanner_b detect recall | {recall} |" in text
    seconds = " | ".join(f"{round(r['run']['seconds'])} ({round(r['run']['seconds_training'])})" for r in rows[1:])
    assert f"| retrain s (training part) | | {seconds} |" in text
    random_rows = results["strategies"]["random"]
    for n in (20, 40):
        mine = next(r for r in rows if r["labels"] == n)["test"]["segmentation_miou"]
        theirs = next(r for r in random_rows if r["labels"] == n)["test"]["segmentation_miou"]
        assert f"{mine:.3f} against {theirs:.3f}" in _flat(notes)


@pytest.mark.parametrize("folder,prefix", [("annotation_loop_reg150", ""),
                                           ("annotation_loop_demo2", "demo model 2, "),
                                           ("annotation_loop_demo2_ci", "demo model 2, run 2, ")])
def test_annotation_loop_rerun_figures_in_notes_are_the_benchmarks(folder, prefix):
    """The rerun tables (the 150-image suite judged against the start; the loop from demo model 2), each in the
    NOTES.md beside its results.json, against that results.json."""
    import json

    results = json.loads((RESULTS / folder / "results.json").read_text())
    text = _notes(folder).read_text(encoding="utf-8").replace("**", "")
    for arm, rows in results["strategies"].items():
        cells = " | ".join(f"{r['test']['segmentation_miou']:.3f} / {r['test']['detection_recall']:.3f}" for r in rows)
        assert f"| {prefix}`{arm}` scanner_b mIoU / detect recall | {cells} |" in text
        seconds = " | ".join(f"{round(r['run']['seconds'])} ({round(r['run']['seconds_training'])})" for r in rows[1:])
        assert f"| {prefix}`{arm}` retrain s (training part) | | {seconds} |" in text
        verdicts = [r["run"]["status"] for r in rows[1:]]
        line = next(ln for ln in text.splitlines() if ln.startswith(f"| {prefix}`{arm}` verdict |"))
        assert [c.split(":")[0].split(" (")[0].strip() for c in line.split("|")[3:-1]] == verdicts


@pytest.mark.parametrize("folder,labels", [("random_seed0", "random (0)"), ("breast_seed0", "breast only (0)"),
                                           ("random_seed1", "random (1)"),
                                           ("rehearsal_look_seed0", "random (0), later")])
def test_loop_recipe_sweep_rows_in_notes_are_the_benchmark(folder, labels):
    """The recipe-sweep table (loop_recipe/NOTES.md), row by row, against benchmarks/results/loop_recipe/*/results.json."""
    import json

    def load(name: str) -> dict:
        return json.loads((RESULTS / "loop_recipe" / name / "results.json").read_text())

    results, first = load(folder), load("random_seed0")
    names = {"start": "start", "loop": "loop", "lr1e-4": "lr 1e-4", "vision_lora": "vision LoRA", "steps80": "80 steps",
             "rehearsal_varied": "rehearsal on the `varied` look", "no_rehearsal": "no rehearsal"}
    shown = dict(results["recipes"])
    if folder != "random_seed1":  # the same scored images from the same start: the table shows the start once
        assert results["start"]["tune"]["segmentation_miou"] == first["start"]["tune"]["segmentation_miou"]
    if folder == "rehearsal_look_seed0":  # its loop row repeats random_seed0's (shown once): within 0.001
        again = shown.pop("loop")["tune"]
        assert all(abs(again[k] - first["recipes"]["loop"]["tune"][k]) < 0.001
                   for k in ("segmentation_miou", "detection_recall"))
    rows = [("start", "-", results["start"])] if folder in ("random_seed0", "random_seed1") else []
    rows += [(name, f"{round(row['train_s'])}", row) for name, row in shown.items()]
    text = _notes("loop_recipe").read_text(encoding="utf-8")
    assert len(results["labels"]) == 20
    for name, seconds, row in rows:
        tune, default = row["tune"], row["default"]
        cells = [f"{tune['segmentation_miou']:.3f}", f"{tune['detection_recall']:.3f}",
                 f"{tune['segment_iou_by_target']['breast lesion']:.3f}",
                 " / ".join(f"{default[k]:.3f}" for k in ("segmentation_miou", "detection_f1",
                                                          "measurement_rel_error", "diagnosis_accuracy"))]
        assert f"| {labels} | {names[name]} | {seconds} | {' | '.join(cells)} |" in text


def _sites(results: dict) -> str:
    counts = results["picks"]["sites"]
    return "/".join(str(counts.get(k, 0)) for k in ("breast", "fetal_head", "kidney", "thyroid"))


def _seg_change(row: dict, start: dict) -> str:
    now = row["tune"]["segmentation_miou"]
    return f"{now:.3f} ({now - start['tune']['segmentation_miou']:+.3f})"


@pytest.mark.parametrize("draw", [0, 1])
def test_loop_picks_with_the_truth_rows_in_notes_are_the_benchmark(draw):
    """The oracle and per-site pick rows (loop_recipe_demo3/NOTES.md) against their results.json."""
    import json

    text = _notes("loop_recipe_demo3").read_text(encoding="utf-8")
    for rule in ("uncertainty_balanced", "oracle", "oracle_balanced"):
        results = json.loads((RESULTS / "loop_recipe_demo3" / f"picks_seed{draw}" / rule / "results.json").read_text())
        assert results["picks"]["rule"] == rule and len(results["labels"]) == 20
        row, start = results["recipes"]["server"], results["start"]
        iou = results["picks"].get("start_iou")
        picked = "-" if iou is None else \
            f"{sum(iou[i] for i in results['labels']) / 20:.3f} ({sum(iou.values()) / len(iou):.3f})"
        cells = [str(draw), rule, _sites(results), picked, _seg_change(row, start),
                 f"{row['default']['segmentation_miou']:.3f}", f"{row['default']['keypoint_error_rel_width']:.3f}",
                 f"{row['train_s']}"]
        assert f"| {' | '.join(cells)} |" in text, cells


def test_loop_label_count_rows_in_notes_are_the_benchmark():
    """The labels-and-steps rows (loop_recipe_demo3/NOTES.md) against their results.json."""
    import json

    text = _notes("loop_recipe_demo3").read_text(encoding="utf-8")
    folders = {20: "picks_seed0/random", 40: "labels_seed0/L40", 80: "labels_seed0/L80", 140: "labels_seed0/L140"}
    shown = 0
    for labels, folder in folders.items():
        results = json.loads((RESULTS / "loop_recipe_demo3" / folder / "results.json").read_text())
        assert len(results["labels"]) == labels and results["setup"]["seed"] == 0
        for name, row in results["recipes"].items():
            if name not in ("server", "server_steps120", "no_rehearsal_vision_lora_steps120",
                            "no_rehearsal_full_steps120"):
                continue
            cells = [str(labels), _sites(results), name, _seg_change(row, results["start"]),
                     f"{row['tune']['segment_iou_by_target']['breast lesion']:.3f}",
                     f"{row['default']['segmentation_miou']:.3f}", f"{row['default']['keypoint_error_rel_width']:.4f}",
                     f"{row['train_s']}"]
            assert f"| {' | '.join(cells)} |" in text, cells
            shown += 1
    assert shown == 10


def _assert_loop_row(row: str, arm: str, rows: list[dict]) -> str:
    """The README row of one loop arm states the 20-label change from start as the benchmark computes it;
    returns the segmentation change as formatted there."""
    from bench_annotation_loop import change_interval, fmt_change

    first, last = rows[0]["test"], rows[-1]["test"]
    seg = fmt_change(change_interval(first, last, "segment"))
    rec = fmt_change(change_interval(first, last, "detect"))
    assert rows[-1]["labels"] == 20
    assert (f"scanner_b segmentation {first['segmentation_miou']:.3f} -> {last['segmentation_miou']:.3f}, "
            f"change {seg}") in row, (arm, row)
    assert (f"detection recall {first['detection_recall']:.3f} -> {last['detection_recall']:.3f}, "
            f"change {rec}") in row, (arm, row)
    return seg


def test_annotation_loop_from_demo_model_3_rows_are_the_benchmark():
    """The loop rows of demo model 3 (in full in its NOTES.md, the change in benchmarks/README.md) and its NOTES.md
    table, recomputed from results.json."""
    import json
    import sys

    sys.path.insert(0, str(REPO / "benchmarks"))
    results = json.loads((RESULTS / "annotation_loop_demo3" / "results.json").read_text())
    notes = _notes("annotation_loop_demo3").read_text(encoding="utf-8")
    short = _short_row("Annotation loop from demo model 3, old recipe, 20 labels |")
    names = {"random": "annotation loop from demo model 3, 20 labels, one run, `random` picks |",
             "umind_uncertainty": "annotation loop from demo model 3, the same run, `umind_uncertainty` picks |"}
    assert set(results["strategies"]) == set(names)
    for arm, rows in results["strategies"].items():
        seg = _assert_loop_row(_full_row(_notes("annotation_loop_demo3"), names[arm], start=True), arm, rows)
        first, last = rows[0]["test"], rows[-1]["test"]
        assert f"| {first['segmentation_miou']:.3f} -> {last['segmentation_miou']:.3f} | {seg} |" in notes, arm
        assert f"`{arm}` {seg}" in short, (arm, short)


@pytest.mark.slow
def test_annotation_loop_intervals_in_notes_and_benchmarks_are_the_benchmark():
    """The second demo-model-2 run's change-from-start intervals, recomputed from its per-sample values: every
    round in its NOTES.md, the last round in the full rows there and (the segmentation change) in
    benchmarks/README.md's short row."""
    import json
    import sys

    sys.path.insert(0, str(REPO / "benchmarks"))
    from bench_annotation_loop import change_interval, fmt_change

    results = json.loads((RESULTS / "annotation_loop_demo2_ci" / "results.json").read_text())
    text = _notes("annotation_loop_demo2_ci").read_text(encoding="utf-8")
    short = _short_row("Annotation loop from demo model 2, 20 labels |")
    names = {"random": "annotation loop from demo model 2, 20 labels, `random` picks |",
             "umind_uncertainty": "the same run, `umind_uncertainty` picks |"}
    assert set(results["strategies"]) == set(names)
    for arm, rows in results["strategies"].items():
        cells = " | ".join(f"{fmt_change(change_interval(rows[0]['test'], r['test'], 'segment'))}; "
                           f"{fmt_change(change_interval(rows[0]['test'], r['test'], 'detect'))}" for r in rows[1:])
        assert f"| demo model 2, run 2, `{arm}` change from start, mIoU and recall [95%] | | {cells} |" in text
        row = _full_row(_notes("annotation_loop_demo2_ci"), names[arm], start=True)
        seg = _assert_loop_row(row, arm, rows)
        assert f"`{arm}` {seg}" in short, (arm, short)
        assert (f"retrain {round(rows[-1]['run']['seconds'])} s "
                f"({round(rows[-1]['run']['seconds_training'])} s training)") in row, (arm, row)


def test_loop_without_rehearsal_figures_in_readme_are_the_benchmark():
    """The no-rehearsal loop run: every run rejected, and its rejected candidates' test-split changes as quoted."""
    import json
    import sys

    sys.path.insert(0, str(REPO / "benchmarks"))
    from bench_annotation_loop import change_interval, fmt_change

    folder = RESULTS / "annotation_loop_demo2_norehearsal"
    rows = json.loads((folder / "results.json").read_text())["strategies"]["random"]
    assert [r["run"]["status"] for r in rows[1:]] == ["rejected"] * 4
    candidates = json.loads((folder / "rejected_candidates.json").read_text())
    text = _flat(_notes("annotation_loop_demo2_norehearsal"))
    for version, labels in (("1", 5), ("4", 20)):
        seg = fmt_change(change_interval(rows[0]["test"], candidates[version]["test"], "segment"))
        rec = fmt_change(change_interval(rows[0]["test"], candidates[version]["test"], "detect"))
        assert seg in text and rec in text, (labels, seg, rec)
    # the 20-label candidate in its full row (the NOTES.md) and in benchmarks/README.md's short row
    row = _full_row(_notes("annotation_loop_demo2_norehearsal"), "the loop from demo model 2 without rehearsal",
                    start=True)
    seg = fmt_change(change_interval(rows[0]["test"], candidates["4"]["test"], "segment"))
    rec = fmt_change(change_interval(rows[0]["test"], candidates["4"]["test"], "detect"))
    assert f"the gate rejected all {len(rows) - 1} runs" in row
    assert f"segmentation {seg}, detection recall {rec}" in row, (seg, rec, row)
    short = _short_row("Annotation loop from demo model 2, 20 labels |")
    assert f"without rehearsal {seg}, all {len(rows) - 1} runs rejected" in short, short


def test_decode_rows_in_benchmarks_are_the_benchmark():
    """Every decode row (in full in decode/NOTES.md, the ratios in benchmarks/README.md's short row), recomputed from
    the run bench_decode.py wrote (its ratios included)."""
    import json

    run = json.loads((RESULTS / "decode.json").read_text())
    figures, eager = run["figures"], run["figures"]["eager"]
    assert run["same_answer"] and not run["compile_error"]
    lines = _notes("decode").read_text(encoding="utf-8").splitlines()
    assert len([ln for ln in lines if ln.startswith("| decode step, `")]) == len(figures)
    short = _short_row("Decode step per mode |")
    for mode, f in figures.items():
        row = next(ln for ln in lines if ln.startswith(f"| decode step, `{mode}` mode"))
        figure = (f"{f['step_ms']:.2f} ms a step, {1e3 / f['step_ms']:.0f} tok/s; "
                  f"{eager['step_ms'] / f['step_ms']:.2f}x eager (wall), "
                  f"{eager['step_cpu_ms'] / f['step_cpu_ms']:.2f}x (CPU time); "
                  f"answers {f['answer_decode_tok_s']:.0f} tok/s; cold {f['cold_ms']:.0f} ms, "
                  f"cached {f['cached_ms']:.0f} ms, cold/cached {f['cold_ms'] / f['cached_ms']:.2f} |")
        assert figure in row, (figure, row)
        assert "`results/decode.json`" in row
        if mode != "eager":
            assert f"`{mode}` {eager['step_ms'] / f['step_ms']:.2f}x" in short, (mode, short)
    tuned = figures["tuned"]
    assert f"cold/cached {tuned['cold_ms'] / tuned['cached_ms']:.2f} `tuned`" in short, short


@pytest.mark.parametrize("run", ["run1", "run2", "run3"])
def test_annotation_loop_from_demo_model_3_new_recipe_rows_are_the_benchmark(run):
    """The 40-label loop runs with the new recipe and gate: every cell of their NOTES.md tables (20 and 40 labels,
    both arms), the changes in the full rows there and in benchmarks/README.md's short row, recomputed from
    results.json."""
    import json
    import sys

    sys.path.insert(0, str(REPO / "benchmarks"))
    from bench_annotation_loop import change_interval, fmt_change

    results = json.loads((RESULTS / "annotation_loop_demo3_v2" / run / "results.json").read_text())
    notes = _notes("annotation_loop_demo3_v2").read_text(encoding="utf-8")
    full = notes.split(f"\n{MOVED}\n")[1]  # the rows benchmarks/README.md printed in full
    short = _short_row("Annotation loop from demo model 3, `scanner_b`, 40-step recipe |")
    for arm, rows in results["strategies"].items():
        start = rows[0]["test"]
        for labels in (20, 40):
            now = next(r for r in rows if r["labels"] == labels)["test"]
            seg = fmt_change(change_interval(start, now, "segment"))
            rec = fmt_change(change_interval(start, now, "detect"))
            if now == start:  # nothing promoted: the table says so instead of a degenerate interval
                seg = "+0.000 (nothing promoted)"
            cells = (f"| `{arm}` | {labels} | {start['segmentation_miou']:.3f} -> {now['segmentation_miou']:.3f} | "
                     f"{seg} | {start['detection_recall']:.3f} -> {now['detection_recall']:.3f} |")
            assert cells in notes, cells
            if labels == 40:
                assert seg in full and rec in full, (arm, seg, rec)
                shown = short.split(f"`{arm}` ")[1].split(";")[0].split(" |")[0].split(", ")
                assert shown[int(run[-1]) - 1] == seg.split()[0], (arm, shown, seg)
        status = {r["run"]["version"]: r["run"]["status"] for r in rows[1:]}  # a round that started no run repeats
        promoted, runs = sum(v == "promoted" for v in status.values()), len(status)
        assert f"{promoted} of {runs} runs promoted" in full, (arm, promoted, runs)


def test_gate_replay_row_is_todays_gate_on_the_recorded_runs():
    """benchmarks/replay_gate.py rerun here with today's gate on the two recorded runs gives the stored replay, and
    its full row (annotation_loop_demo3_v2/NOTES.md) names each decision that changed with its held-out
    segmentation; benchmarks/README.md's short row counts them."""
    import json
    import sys

    sys.path.insert(0, str(REPO / "benchmarks"))
    from replay_gate import replay

    stored = json.loads((RESULTS / "annotation_loop_demo3_v2" / "gate_replay.json").read_text())
    row = _full_row(_notes("annotation_loop_demo3_v2"), "replayed on the stored gate")
    changed = 0
    for rel, rows in stored.items():
        assert replay(REPO / rel) == rows, rel
        for r in rows:
            if r["changed"]:
                changed += 1
                assert r["recorded"] == "promoted" and f"at {r['labels']}" in row, r
    assert f"{changed} decisions change" in row
    assert f"{changed} decisions change" in _short_row("Gate with the held-out allowance capped")


def test_loop_ceiling_row_is_the_benchmark():
    """The in-domain ceiling row (in full in results/NOTES.md, short in benchmarks/README.md) against
    results/loop_ceiling.json."""
    import json

    d = json.loads((RESULTS / "loop_ceiling.json").read_text())
    row = _full_row(LOOSE, "in-domain ceiling from demo model 3")
    s, c = d["start"], d["ceiling"]
    assert (f"`scanner_b` segmentation {s['test']['segmentation_miou']:.3f} -> {c['test']['segmentation_miou']:.3f} "
            f"on 2,000 of its images") in _short_row("Loop ceilings from demo model 3 |")
    assert (f"segmentation {s['test']['segmentation_miou']:.3f} -> {c['test']['segmentation_miou']:.3f}, detection "
            f"recall {s['test']['detection_recall']:.3f} -> {c['test']['detection_recall']:.3f}") in row
    assert f"{s['default_test']['segmentation_miou']:.3f} -> {c['default_test']['segmentation_miou']:.3f}" in row
    assert f"{d['train_s'] / 60:.1f} min" in row


@pytest.mark.parametrize("name,marker,setup", [
    ("loop_ceiling_joint", "can demo model 3 hold both looks", {"n_train": 1000, "mix_varied": 1000, "steps": 600}),
    ("loop_ceiling_20labels", "what 20 labels give a retrain",
     {"n_train": 20, "mix_varied": 1000, "steps": 300, "copies": 25}),
    ("loop_ceiling_200labels", "how many labels it takes: 200",
     {"n_train": 200, "mix_varied": 1000, "steps": 300, "copies": 5}),
    ("loop_ceiling_500labels", "the same with 500 `scanner_b` images",
     {"n_train": 500, "mix_varied": 1000, "steps": 300, "copies": 2}),
])
def test_mixed_ceiling_rows_are_the_benchmark(name, marker, setup):
    """The rows that train on scanner_b beside the model's own look (in full in results/NOTES.md; the segmentation
    each reaches in benchmarks/README.md's short row) against their result files (segmentation, breast site,
    keypoints, minutes)."""
    import json

    d = json.loads((RESULTS / f"{name}.json").read_text())
    row = _full_row(LOOSE, marker)
    s, c = d["start"], d["ceiling"]
    short = _short_row("Loop ceilings from demo model 3 |").split("beside 1,000 own-look images: ")[1]
    assert f"{setup['n_train']:,} labels {c['test']['segmentation_miou']:.3f}" in short, short

    def breast(split: dict) -> float:
        ious = [v for sample in split["samples"]["segment"] if sample["site"] == "breast" for v in sample["ious"]]
        return sum(ious) / len(ious)

    assert {k: d["setup"][k] for k in setup} == setup
    assert (f"segmentation {s['test']['segmentation_miou']:.3f} -> {c['test']['segmentation_miou']:.3f} (breast "
            f"{breast(s['test']):.3f} -> {breast(c['test']):.3f}), default look (48 images) "
            f"{s['default_test']['segmentation_miou']:.3f} -> {c['default_test']['segmentation_miou']:.3f}, keypoints "
            f"{100 * s['default_test']['keypoint_error_rel_width']:.2f}% -> "
            f"{100 * c['default_test']['keypoint_error_rel_width']:.2f}%") in row
    assert f"{d['train_s'] / 60:.1f} min" in row


def test_exam_continuation_row_is_the_benchmark():
    """The exam continuation's figures (its full row and tables in its NOTES.md, the headline in
    benchmarks/README.md) against its results.json."""
    import json

    d = json.loads((RESULTS / "exam_continuation" / "results.json").read_text())
    row = _full_row(_notes("exam_continuation"), "exam-reading continuation", start=True)
    notes = _notes("exam_continuation").read_text(encoding="utf-8")
    c, b = d["continuation_exams"], d["demo3_exams"]
    for shown in (row, _short_row("Exam-reading continuation")):
        assert (f"benign/malignant {c['exam_diagnosis_accuracy']:.3f} reading the exam against "
                f"{c['exam_best_view_diagnosis_accuracy']:.3f} for the single best view") in shown
    assert (f"report size error {c['exam_report_size_rel_error']:.3f} against "
            f"{c['exam_best_view_report_size_rel_error']:.3f}") in row
    assert f"BLEU-4 {c['exam_report_bleu4']:.3f} against {c['exam_best_view_report_bleu4']:.3f}" in row
    assert (f"| {c['exam_diagnosis_accuracy']:.3f} | {c['exam_best_view_diagnosis_accuracy']:.3f} | "
            f"{b['exam_diagnosis_accuracy']:.3f} | {b['exam_best_view_diagnosis_accuracy']:.3f} |") in notes
    for key, label in (("segmentation_miou", "segmentation mIoU"), ("detection_f1", "detection F1")):
        cells = " | ".join(f"{d[k][key]:.3f}" for k in ("continuation_default", "demo3_default",
                                                         "continuation_scanner_b", "demo3_scanner_b"))
        assert f"| {label} | {cells} |" in notes


def test_default_decode_row_is_the_benchmark():
    """The default-decode row (in full in decode/NOTES.md, its segment figures in benchmarks/README.md) against
    results/default_decode.json, recomputed from the samples (auto and static of this tree, static of the code
    before the speed work)."""
    import json
    import statistics

    d = json.loads((RESULTS / "default_decode.json").read_text())
    row = _full_row(_notes("decode"), "the default decode against the old default", start=True)
    first = {c: 1000 * statistics.median(v) for c, v in d["first_request_s"].items()}
    assert (f"first request after start: `auto` {first['auto']:.1f} ms, `static` {first['static']:.1f} ms, before "
            f"{first['before_static']:.1f} ms ({first['auto'] / first['before_static']:.2f}x") in row
    med = {k: {c: statistics.median(v) for c, v in d[k].items()}
           for k in ("segment_s", "cold_s", "cached_s", "cold_segment_s", "cached_segment_s")}
    seg = med["segment_s"]
    for shown in (row, _short_row("Default decode (`auto`) against the old default |")):
        assert (f"segment p50 {1000 * seg['before_static']:.1f} ms before, {1000 * seg['static']:.1f} static, "
                f"{1000 * seg['auto']:.1f} auto ({seg['before_static'] / seg['auto']:.2f}x lower with `auto`") in shown
    for task, cold, cached in (("detect", "cold_s", "cached_s"), ("segment", "cold_segment_s", "cached_segment_s")):
        ratios = [med[cold][c] / med[cached][c] for c in ("before_static", "static", "auto")]
        assert f"{task} {ratios[0]:.2f} before, {ratios[1]:.2f} static, {ratios[2]:.2f} auto" in row, task

def test_drafts_row_is_the_benchmark():
    """The drafted-answers row (in full in decode/NOTES.md, short in benchmarks/README.md) against
    results/decode/drafts.json."""
    import json

    d = json.loads((RESULTS / "decode" / "drafts.json").read_text())
    row = _full_row(_notes("decode"), "drafted answers against step-by-step ones", start=True)
    short = _short_row("Drafted answers |")
    differ = f"{d['answers']} answers: {d['text_differences']} texts and {d['mask_differences']} masks differ"
    assert differ in row and differ in short
    assert (f"{d['seconds_drafts_on']:.1f} s against {d['seconds_drafts_off']:.1f} s "
            f"({d['seconds_drafts_off'] / d['seconds_drafts_on']:.2f}x)") in short
    assert f"{d['draft_tokens_kept']:,} of {d['draft_tokens']:,} draft tokens kept" in row
    assert (f"{d['seconds_drafts_on']:.1f} s with drafts against {d['seconds_drafts_off']:.1f} s without "
            f"({d['seconds_drafts_off'] / d['seconds_drafts_on']:.2f}x)") in row


def test_readout_from_masks_row_is_the_benchmark():
    """The mask-readout row (in full in results/NOTES.md, its headline in benchmarks/README.md) and the card against
    results/readout_from_masks.json."""
    import json

    d = json.loads((RESULTS / "readout_from_masks.json").read_text())
    row = _full_row(LOOSE, "boxes, lesion calipers, organ landmarks and lengths read off the model's masks")

    def pct(v):
        return f"{100 * v:.1f}%"

    m, t = d["looks"]["default"]["mask"], d["looks"]["default"]["tokens"]
    assert (f"detection F1 {m['detection']['f1']:.3f} against {t['detection']['f1']:.3f}, lesion calipers "
            f"{pct(m['lesion_calipers']['mean_rel'])} against {pct(t['lesion_calipers']['mean_rel'])}, landmarks "
            f"{pct(m['keypoints']['mean_rel_width'])} against {pct(t['keypoints']['mean_rel_width'])} of the width; "
            f"detect {d['latency']['ratios']['detect']:.2f}x the latency") in _short_row("Mask readout against")

    for look in ("default", "scanner_b"):
        m, t = d["looks"][look]["mask"], d["looks"][look]["tokens"]
        assert f"detection F1 {m['detection']['f1']:.3f}" in row and f"against {t['detection']['f1']:.3f}" in row
        assert f"(lesions {m['lesion_detection_f1']:.3f} against {t['lesion_detection_f1']:.3f})" in row
        assert (f"lesion calipers {pct(m['lesion_calipers']['mean_rel'])}" in row
                and f"against {pct(t['lesion_calipers']['mean_rel'])}" in row)
        assert f"all lines {pct(m['measurement']['mean_rel'])} against {pct(t['measurement']['mean_rel'])}" in row
        assert (f"{pct(m['keypoints']['mean_rel_width'])} against {pct(t['keypoints']['mean_rel_width'])} of the width "
                f"({m['keypoints']['mean_px']:.1f} against {t['keypoints']['mean_px']:.1f} px)") in row
        for kind in ("kidney length", "BPD"):
            assert (f"{kind} {pct(m['organ_lines'][kind]['mean_rel'])} against "
                    f"{pct(t['organ_lines'][kind]['mean_rel'])}") in row
    (am, aw), (tm, tw) = ((d["exams"][r]["view_alone"], d["exams"][r]["exam"]) for r in ("mask", "tokens"))
    assert f"detection F1 {am['detection_f1']:.3f} against {tm['detection_f1']:.3f}" in row
    assert (f"calipers {pct(am['measurement']['mean_rel'])} against {pct(tm['measurement']['mean_rel'])}, landmarks "
            f"{pct(am['keypoints']['mean_rel_width'])} against {pct(tm['keypoints']['mean_rel_width'])} of the width "
            f"({am['keypoints']['n_missing']} of {am['keypoints']['n']} points missing either way), but "
            f"{am['measurement']['n_missing']} of {am['measurement']['n']} calipers missing") in row
    assert am["keypoints"]["n_missing"] == tm["keypoints"]["n_missing"]
    assert (f"the exam read whole: detection F1 {aw['detection_f1']:.3f} against {tw['detection_f1']:.3f}, calipers "
            f"{pct(aw['measurement']['mean_rel'])} ({aw['measurement']['n_missing']} of {aw['measurement']['n']} "
            f"missing) against {pct(tw['measurement']['mean_rel'])} ({tw['measurement']['n_missing']} missing), "
            f"landmarks {pct(aw['keypoints']['mean_rel_width'])} ({aw['keypoints']['n_missing']} of "
            f"{aw['keypoints']['n']} points missing) against none written") in row
    assert tw["keypoints"]["mean_rel_width"] is None and tw["keypoints"]["n_missing"] == tw["keypoints"]["n"]
    shares = d["tuning"]
    for look, name in (("tune_default", "default"), ("tune_scanner_b", "scanner_b")):
        assert ", ".join(f"{shares[k][look]:.3f}" for k in ("0.0", "0.25", "0.5")) + \
            f", {shares['1.0'][look]:.3f} ({name})" in row
    place = {look: {r: d["looks"][look][r]["lesion_caliper_placement"] for r in ("mask", "tokens")}
             for look in ("default", "scanner_b")}
    m, t = place["default"]["mask"], place["default"]["tokens"]
    assert (f"endpoints {m['endpoint_px_mean']:.1f} px from the truth's read off the mask against "
            f"{t['endpoint_px_mean']:.1f} px drawn (median {m['endpoint_px_median']:.1f} against "
            f"{t['endpoint_px_median']:.1f}), lines {m['angle_deg_mean']:.1f} degrees off against "
            f"{t['angle_deg_mean']:.1f}") in row
    m, t = place["scanner_b"]["mask"], place["scanner_b"]["tokens"]
    assert (f"scanner_b {m['endpoint_px_mean']:.1f} against {t['endpoint_px_mean']:.1f} px (median "
            f"{m['endpoint_px_median']:.1f} against {t['endpoint_px_median']:.1f}), {m['angle_deg_mean']:.1f} against "
            f"{t['angle_deg_mean']:.1f} degrees") in row
    lat = d["latency"]["p50_ms"]
    assert (f"detect {lat['detect mask']:.1f} ms read off the mask against {lat['detect tokens']:.1f} ms written "
            f"({d['latency']['ratios']['detect']:.2f}x), a lesion caliper {lat['measure mask']:.1f} against "
            f"{lat['measure tokens']:.1f} ms ({d['latency']['ratios']['measure']:.2f}x), a kidney's landmarks "
            f"{lat['keypoints mask']:.1f} against {lat['keypoints tokens']:.1f} ms "
            f"({d['latency']['ratios']['keypoints']:.2f}x)") in row
    dm, bm = d["looks"]["default"]["mask"], d["looks"]["scanner_b"]["mask"]
    # demo model 3's figures with their goals: its section of the card (docs/model.md links to it)
    card = _flat(CARD)
    assert (f"| - boxes read off the model's masks (the Predictor's default) | **{dm['detection']['f1']:.3f}** | "
            f">= 0.88 | | **{bm['detection']['f1']:.3f}** | >= 0.75 | |") in card
    assert (f"| - points read off the model's masks (the Predictor's default) | "
            f"**{pct(dm['keypoints']['mean_rel_width'])}** | <= 4% | | **{pct(bm['keypoints']['mean_rel_width'])}** "
            f"| | |") in card


def test_threshold_scan_row_is_the_benchmark():
    """The mask-threshold row (in full in results/NOTES.md, short in benchmarks/README.md) against
    results/mask_threshold_scan.json."""
    import json

    d = json.loads((RESULTS / "mask_threshold_scan.json").read_text())
    row = _full_row(LOOSE, "mask threshold")
    ious, used = d["looks"]["scanner_b"]["mean_iou"], d["thresholds"].index(0)
    assert (f"`scanner_b` mean IoU {ious[used]:.3f} at 0, {max(ious):.3f} at best"
            in _short_row("Mask threshold, demo model 3 |"))
    for look in ("default", "scanner_b"):
        assert f"{look} " + ", ".join(f"{v:.3f}" for v in d["looks"][look]["mean_iou"]) in row
    for fitted in d["fitted_on_half_of_scanner_b"]:
        b, o = fitted["scanner_b_other_half"], fitted["default_look"]
        assert f"{b[0]:.3f} -> {b[1]:.3f}" in row and f"{o[0]:.3f} -> {o[1]:.3f}" in row


def test_fit_gap_row_is_the_benchmark():
    """The underfit/overfit row (in full in results/NOTES.md, short in benchmarks/README.md) against
    results/fit_gap.json."""
    import json
    import sys

    d = json.loads((RESULTS / "fit_gap.json").read_text())
    row = _full_row(LOOSE, "does demo model 3 underfit")
    t, u = d["trained"], d["unseen"]
    assert (f"mIoU {t['segmentation_miou']:.3f} on its training images, {u['segmentation_miou']:.3f} unseen"
            in _short_row("Fit gap, demo model 3 |"))
    assert f"{t['images']} images, {t['masks']} masks) against {u['images']} unseen images" in row
    assert (f"segmentation mIoU {t['segmentation_miou']:.3f} on images it trained on against "
            f"{u['segmentation_miou']:.3f} unseen") in row
    for site, name in (("breast", "breast lesions"), ("thyroid", "thyroid"), ("kidney", "kidney"),
                       ("fetal_head", "fetal head")):
        assert f"{name} {t['per_site'][site]:.3f} against {u['per_site'][site]:.3f}" in row
    assert f"benign/malignant {t['diagnosis_accuracy']:.3f} against {u['diagnosis_accuracy']:.3f}" in row
    shipped = json.loads((RESULTS / "demo3_shipped.json").read_text())["evals"]
    before, after = (shipped[k]["summary"]["segmentation_miou"] for k in ("stage1_default", "shipped_default"))
    assert f"added {after - before:.4f} to the default look's mIoU ({before:.3f} -> {after:.3f}" in row
    sys.path.insert(0, str(REPO / "benchmarks"))
    import fit_gap

    flags, seed0, fraction = fit_gap.recipe()  # the training script's recipe, read again: the file is still its own
    assert (d["flags"], d["trained_seed0"], d["val_fraction"]) == (flags, seed0, fraction)
    assert "--augment" in flags and "--out" not in flags and seed0 == "100000"


def test_capacity_probe_row_is_the_benchmark():
    """The capacity row (in full in capacity_probe/NOTES.md, short in benchmarks/README.md) against
    results/capacity_probe/."""
    import json

    folder = RESULTS / "capacity_probe"
    e = json.loads((folder / "eval.json").read_text())
    runs = {a: json.loads((folder / f"{a}_summary.json").read_text()) for a in ("base", "deep")}
    row = _full_row(_notes("capacity_probe"), "would more capacity lift")
    assert (f"default look mIoU {e['base']['default']['miou']:.3f} continued, {e['deep']['default']['miou']:.3f} "
            f"deeper, against {e['demo3']['default']['miou']:.3f}") in _short_row("Capacity probe")
    for arm in ("base", "deep"):
        assert f"{runs[arm]['steps']} steps, {runs[arm]['seconds'] / 60:.1f} min" in row
    for arm, name in (("demo3", "demo model 3: "), ("base", "Continued: "), ("deep", "Deeper: ")):
        d = e[arm]
        assert (f"{name}default {d['default']['miou']:.3f} (breast lesions {d['default']['per_site']['breast']:.3f}, "
                f"benign/malignant {d['default']['diagnosis']:.3f}), unseen varied {d['unseen_varied']['miou']:.3f}, "
                f"scanner_b {d['scanner_b']['miou']:.3f} (breast lesions "
                f"{d['scanner_b']['per_site']['breast']:.3f})") in row
    moved = [abs(e[a][s]["miou"] - e["demo3"][s]["miou"]) for a in ("base", "deep") for s in e["demo3"]]
    assert max(moved) <= 0.0105
    assert (f"validation loss {runs['base']['val_loss_first']:.4f} -> {runs['base']['val_loss_last']:.4f}" in row
            and f"validation loss -> {runs['deep']['val_loss_last']:.4f}" in row)



def test_real_heldout_and_wall_cost_rows_are_their_result_files():
    """The real held-out row and the security corpus cost row (in full in results/NOTES.md, short in
    benchmarks/README.md) against their result files."""
    import json

    real = json.loads((RESULTS / "real_heldout_demo3.json").read_text())
    row = _full_row(LOOSE, "demo model 3 on the held-out part of the real data")
    h, b = real["hc18"], real["busi"]
    assert (f"HC18 Dice {h['dice_mean']:.3f}, {h['empty_masks']} of {h['images']} masks empty; BUSI three classes "
            f"{b['three_class_accuracy']:.3f}") in _short_row("Demo model 3, real held-out split |")
    assert f"Dice {h['dice_mean']:.3f} [{h['dice_ci95'][0]:.3f}, {h['dice_ci95'][1]:.3f}]" in row
    assert f"{h['empty_masks']} of {h['images']} masks empty" in row
    assert f"{h['hc_mad_mm']:.1f} mm" in row and f"three classes {b['three_class_accuracy']:.3f}" in row
    assert f"benign vs malignant {b['benign_vs_malignant']:.3f}" in row and f"{b['majority_baseline']:.3f}" in row
    cost = json.loads((RESULTS / "wall_cost.json").read_text())
    row = _full_row(LOOSE, "what each row of the security corpus")
    assert f"({len(cost['rows'])} requests" in row
    for shown in (row, _short_row("Security corpus, cost per request |")):
        assert f"at most {cost['max_peak_above_before_mb']:.0f} MB above" in shown
        assert f"median {cost['info_ms_median']:.1f} ms, slowest {cost['info_ms_max']:.1f} ms" in shown


def test_demo_model_4_card_and_row_are_their_result_files():
    """Demo model 4's real held-out and synthetic figures in its card, in its full row (demo_model4/NOTES.md) and in
    benchmarks/README.md's two short rows."""
    import json

    real = json.loads((RESULTS / "real_heldout_demo4.json").read_text())
    syn = json.loads((RESULTS / "demo_model4" / "synthetic_first100.json").read_text())
    card = _flat(CARD)
    h, b = real["hc18"], real["busi"]
    assert f"| **{h['dice_mean']:.3f}** [{h['dice_ci95'][0]:.3f}, {h['dice_ci95'][1]:.3f}]" in card
    assert f"| **{h['hc_mad_mm']:.2f}** [{h['hc_mad_ci95'][0]:.2f}, {h['hc_mad_ci95'][1]:.2f}]" in card
    assert f"| **{b['three_class_accuracy']:.3f}** |" in card and f"| **{b['benign_vs_malignant']:.3f}** |" in card
    cs, cs3 = b["class_scores"], json.loads((RESULTS / "real_heldout_demo3.json").read_text())["busi"]["class_scores"]
    for key in ("forced_three_class_accuracy", "auc_benign_vs_malignant", "auc_lesion_vs_normal"):
        assert f"| **{cs[key]:.3f}** | | {cs3[key]:.3f} |" in card, key
    for key in ("segmentation_miou", "detection_f1", "diagnosis_accuracy"):
        assert (f"| **{syn['demo4_default'][key]:.3f}** | {syn['demo3_default'][key]:.3f} | "
                f"**{syn['demo4_scanner_b'][key]:.3f}** | {syn['demo3_scanner_b'][key]:.3f} |") in card, key
    full = _full_row(_notes("demo_model4"), "demo model 4 (bundled", start=True)
    short = _short_row("Demo model 4, real held-out split |") + _short_row("Demo model 4, synthetic")
    for row in (full, short):
        assert f"Dice {h['dice_mean']:.3f}" in row and f"{h['hc_mad_mm']:.2f} mm" in row
        assert f"three classes {b['three_class_accuracy']:.3f}" in row
        assert f"AUC benign vs malignant {b['class_scores']['auc_benign_vs_malignant']:.3f}" in row
        assert (f"default look mIoU {syn['demo4_default']['segmentation_miou']:.3f} against "
                f"{syn['demo3_default']['segmentation_miou']:.3f}") in row


def test_viewer_row_is_its_result_file():
    """The browser viewer's short row and its NOTES.md table against viewer_timing.json."""
    import json

    res = json.loads((RESULTS / "viewer" / "viewer_timing.json").read_text())
    t, build = res["tasks"], res["build"]
    short = _short_row("Browser viewer, 800x600 study |")
    assert (f"answered and drawn in {t['segment']['viewer_median_s']:.3f} s segment, {t['detect']['viewer_median_s']:.3f}"
            f" s detect, {t['measure']['viewer_median_s']:.3f} s measure") in short
    assert f"fresh build {build['fresh_s']:.1f} s, reused {build['reused_s']:.3f} s" in short
    notes = (RESULTS / "viewer" / "NOTES.md").read_text()
    for task in ("segment", "detect", "measure"):
        r = t[task]
        assert (f"| {r['viewer_median_s']:.3f} | {r['server_median_s']:.3f} | {r['viewer_share_median_s']:.3f} | "
                f"{r['goal_ratio']:.2f} |") in notes, task


def test_refusal_readout_row_is_its_result_file():
    """Refusals with both readouts: benchmarks/README.md's short row and results/NOTES.md against refusal_readout.json,
    and the differing cases it names are the file's."""
    import json

    res = json.loads((RESULTS / "refusal_readout.json").read_text())
    d, b = res["sets"]["default"], res["sets"]["scanner_b"]
    assert d["mask"]["n"] == d["tokens"]["n"] == 400 and b["mask"]["n"] == 400
    short = _short_row("Refusals read off masks against written coordinates |")
    assert (f"default look {d['mask']['accuracy']:.3f} read off masks against {d['tokens']['accuracy']:.3f} written "
            f"({len(d['right_with_tokens_only'])} right only as written, {len(d['right_with_mask_only'])} only "
            "off masks)") in short
    assert (f"`scanner_b` {b['mask']['accuracy']:.3f} against {b['tokens']['accuracy']:.3f} "
            f"({len(b['right_with_tokens_only'])}, {len(b['right_with_mask_only'])})") in short
    lost = sum(round((s["tokens"]["accuracy"] - s["mask"]["accuracy"]) * s["mask"]["n"]) for s in (d, b))
    assert f"costs {lost} refusals in {d['mask']['n'] + b['mask']['n']}" in short
    notes = _flat(RESULTS / "NOTES.md")
    assert (f"default look: {d['mask']['accuracy']:.4f} read off masks against {d['tokens']['accuracy']:.4f} "
            "written") in notes
    assert f"`scanner_b`: {b['mask']['accuracy']:.4f} read off masks against {b['tokens']['accuracy']:.4f} written" in notes
    for case in d["right_with_tokens_only"] + d["right_with_mask_only"] + b["right_with_mask_only"] + \
            b["right_with_tokens_only"]:
        assert f"`{case}`" in notes


def test_benchmarks_page_stays_a_short_table():
    """benchmarks/README.md is read as one table: under 1,500 words and no cell over 400 characters (the story of
    each figure lives in its result's NOTES.md)."""
    text = BENCHMARKS.read_text()
    words = len(text.split())
    assert words < 1500, f"benchmarks/README.md has {words} words"
    long = [cell.strip()[:60] for line in text.splitlines() if line.startswith("|")
            for cell in line.strip().strip("|").split(" | ") if len(cell.strip()) > 400]
    assert not long, long


def test_rows_once_without_a_result_file_are_their_files():
    """Server overhead, the Predictor and packing gains, synthetic data and training times: each short row against
    the file its command writes."""
    import json
    import re

    srv = json.loads((RESULTS / "server_overhead.json").read_text())
    lo, hi = srv["overhead_median_ci95_ms"]
    assert srv["label_maps_equal"] and srv["repeats"] == 40
    assert f"{srv['overhead_median_ms']:.1f} ms (95% interval {lo:.1f}-{hi:.1f} ms)" in _short_row("Server overhead |")
    pred = json.loads((RESULTS / "predictor.json").read_text())
    pack = json.loads((RESULTS / "packing.json").read_text())
    assert (f"mask tokens in one forward {pred['mask_tokens_ms']['ratio']:.1f}x; cached prompt "
            f"{pred['cached_prompt_ms']['ratio']:.1f}x; clip batched {pred['clip']['ratio']:.2f}x; packed training "
            f"{pack['ratio']:.2f}x") in _short_row("Predictor and packing, small config |")
    line = next(l for l in (RESULTS / "synthetic_time.txt").read_text().splitlines() if l.startswith("umind synth:"))
    n, seconds = re.search(r"synth: (\d+) images .* in ([\d.]+) s", line).groups()
    assert f"{int(n):,} images in {float(seconds):.1f} s ({int(n) / float(seconds):.1f} images/s)" in _short_row(
        "Synthetic data |")
    minutes = [f"{json.loads((RESULTS / 'demo_model4' / f'stage{k}_summary.json').read_text())['seconds'] / 60:.1f}"
               for k in (1, 3, 4, 5, 8, 9, 10, 12)]
    assert f"demo model 4's shipped stages: {', '.join(minutes)} min" in _short_row(
        "Training time, every weight |")


def _loop_table(path: Path) -> dict[str, dict[int, list[str]]]:
    """A loop run's table.md as {arm: {labels: the row's cells}} (cells as the benchmark printed them)."""
    arms, arm = {}, None
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("### "):
            arm = arms.setdefault(line[4:].strip(), {})
        elif arm is not None and re.match(r"\| \d+ \|", line):
            cells = [c.strip() for c in line.strip("|").split("|")]
            arm[int(cells[0])] = cells
    return arms


def test_real_hc18_loop_row_and_augmented_retrains_are_the_benchmark():
    """The HC18 loop's short row (start, Dice and head circumference at 20 labels over both arms and runs, retrain
    times, 40 labels, the augmented retrains) and the augmented table in its NOTES, from each run's table.md
    (columns: 3 retrain s, 9 Dice, 11 head circumference MAD)."""
    runs = [_loop_table(RESULTS / "annotation_loop_hc18" / r / "table.md") for r in ("run0", "run1")]
    rows = [arm for run in runs for arm in run.values()]
    at = lambda n, col: sorted(float(arm[n][col]) for arm in rows)  # noqa: E731
    spread = lambda vals, f: f"{vals[0]:{f}}-{vals[-1]:{f}}"  # noqa: E731
    short = _short_row("Annotation loop, real HC18 scans, from demo model 3 |")
    starts = {(arm[0][9], arm[0][11]) for arm in rows}
    assert len(starts) == 1 and f"Dice {starts.pop()[0]} -> {spread(at(20, 9), '.3f')}" in short
    assert f"72.0 -> {spread(at(20, 11), '.1f')} mm off" in short
    times = sorted(float(arm[n][3]) for arm in rows for n in (20, 40))
    assert f"retrains {times[0]:.0f}-{times[-1]:.0f} s" in short
    assert f"40 labels {spread(at(40, 9), '.3f')}" in short
    augmented = _loop_table(RESULTS / "annotation_loop_hc18" / "augment" / "run0" / "table.md")
    dice = sorted(float(arm[20][9]) for arm in augmented.values())
    assert f"`augment=0.8` {spread(dice, '.3f')}, not adopted" in short
    notes = _notes("annotation_loop_hc18")
    for name, arm in augmented.items():
        row = _full_row(notes, f"`{name}` | {arm[20][2]} | {float(arm[20][3]):.0f} |", start=True)
        assert f"| {arm[20][9]} ({arm[20][10]}) | {arm[20][11]} |" in row
    moved = re.search(r"Dice moved ([-+]\d\.\d{3}) and ([-+]\d\.\d{3})", _flat(notes)).groups()
    for name, change in zip(("umind_uncertainty", "random"), moved):  # paired with run 0, the same pool and test
        assert round(float(augmented[name][20][9]) - float(runs[0][name][20][9]), 3) == float(change), name


#: benchmark scripts whose rows read no model of their own (a model-free ceiling, stored gate rows, two named models)
_NO_MODEL_FLAG = {"mask_resolution_ceiling.py", "replay_gate.py", "bench_model_latency.py"}


def test_rows_on_an_earlier_model_name_a_script_that_takes_it():
    """A row naming an earlier model (demo model 2 or 3, a stage of demo model 4) ran on that model, which the
    header tells a reader to pass as `--model`: every benchmark script in such a row's command must take the flag
    (without it the command reads the bundled model and prints another model's figures: three rows did)."""
    earlier = re.compile(r"demo model [23]\b|stage \d")
    rows = [ln for ln in BENCHMARKS.read_text(encoding="utf-8").splitlines() if ln.startswith("| ")][2:]
    checked = set()
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        if not earlier.search(cells[0]):
            continue
        for script in set(re.findall(r"`(\w+\.py)\b", cells[3])) - _NO_MODEL_FLAG:
            source = (REPO / "benchmarks" / script).read_text(encoding="utf-8")
            assert '"--model"' in source, f"{script} (row {cells[0]!r}) takes no --model"
            checked.add(script)
    assert {"readout_from_masks.py", "fit_gap.py", "bench_annotation_loop.py"} <= checked, checked
