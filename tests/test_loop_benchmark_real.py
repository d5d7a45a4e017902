"""The real-scan arm of the annotation-loop benchmark (benchmarks/bench_annotation_loop.py --real): its sets keep
held-out subjects out of every pool, and the table's Dice and head-circumference figures are what the per-sample
values give."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

import bench_annotation_loop as loop  # noqa: E402


def _records(prefix: str, subjects: int, per: int) -> list[str]:
    return [json.dumps({"id": f"{prefix}{s:03d}_{k}", "image": f"images/{prefix}{s:03d}_{k}.png",
                        "group": f"{prefix}{s:03d}"}) for s in range(subjects) for k in range(per)]


def test_real_sets_draw_the_pool_from_training_and_the_test_set_from_held_out(tmp_path):
    imp = tmp_path / "data" / "hc18"
    imp.mkdir(parents=True)
    (imp / "train.jsonl").write_text("\n".join(_records("tr", 30, 2)) + "\n")
    (imp / "test.jsonl").write_text("\n".join(_records("te", 10, 3)) + "\n")
    sets = loop.make_real_data(tmp_path / "data", "hc18", pool=12, test=8, default_test=1, pool_seed=3)
    pool = [json.loads(x) for x in sets["pool"].read_text().splitlines()]
    test = [json.loads(x) for x in sets["test"].read_text().splitlines()]
    assert len(pool) == 12 and len(test) == 8
    assert all(r["group"].startswith("tr") for r in pool) and all(r["group"].startswith("te") for r in test)
    assert len({r["id"] for r in pool}) == 12
    assert sets["pool"].parent == imp  # beside the import, so the records' relative paths hold
    # the test set does not depend on the pool's seed; another seed draws another pool
    other = loop.make_real_data(tmp_path / "data", "hc18", pool=12, test=8, default_test=1, pool_seed=4)
    assert other["test"].read_text() == sets["test"].read_text()
    assert other["pool"].read_text() != sets["pool"].read_text()


def _row(ious, errs):
    return {"samples": {"segment": [{"site": "fetal_head", "ious": [v]} for v in ious],
                        "detect": [], "measure": [{"abs_error_mm": e} for e in errs]},
            "head_circumference_mad_mm": float(np.mean([e for e in errs if e is not None]))}


def test_dice_and_hc_changes_come_from_the_per_sample_values():
    start = _row([0.0, 0.2, 0.5, 0.6], [None, 80.0, 40.0, 20.0])
    now = _row([0.8, 0.9, 0.9, 0.95], [12.0, 6.0, 4.0, 2.0])
    assert loop._dice(now["samples"]["segment"], range(4)) == pytest.approx(
        np.mean([2 * v / (1 + v) for v in (0.8, 0.9, 0.9, 0.95)]))
    assert loop._mad_mm(start["samples"]["measure"], range(4)) == pytest.approx(140 / 3)  # None: nothing measured
    change, lo, hi = loop.change_interval(start, now, "dice")
    assert change > 0.5 and lo <= change <= hi
    hc, lo, hi = loop.change_interval(start, now, "hc_mm")
    assert hc == pytest.approx(6.0 - 140 / 3) and lo <= hc <= hi < 0
    rows = [{"test": start}, {"test": now}]
    cells = loop.real_cells(rows, rows[1])
    assert cells[0] == f"{loop._dice(now['samples']['segment'], range(4)):.3f}"
    assert cells[1].startswith(f"{change:+.3f} [") and cells[2] == "6.0"
    assert loop.real_cells(rows, rows[0])[1] == "-"
