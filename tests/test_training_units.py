"""The trainer's small rules, without a training run: a bool is not an int setting, a subject's images stay on one
side of the split even when some records have no subject, biases and norms are not decayed, each epoch is shuffled
anew (and the same way again on a resume), and metrics.csv keeps the checkpoint's row, fractional epochs and the
values a later partial update does not repeat."""

from __future__ import annotations

import csv

import pytest
import torch

from umind_core.training.config import METRIC_COLUMNS
from umind_core.training.metrics_log import MetricsLog, _read_rows
from umind_core.training.trainer import TrainConfig, TrainingError, _EpochShuffle, _optimizer, split_records


def test_a_bool_is_not_an_int_setting(tmp_path):
    with pytest.raises(TrainingError, match="batch_size must be an int"):
        TrainConfig(output_dir=str(tmp_path), batch_size=True)


def test_subjects_stay_whole_when_some_records_have_none():
    ids = [f"r{i}" for i in range(12)]
    groups = [f"s{i // 2}" if i < 8 else None for i in range(12)]  # 4 subjects of 2 images, 4 loose images
    train, val = split_records(ids, 0.5, groups)
    assert sorted(train + val) == sorted(ids) and val
    for subject in {g for g in groups if g}:
        sides = {id_ in val for id_, g in zip(ids, groups) if g == subject}
        assert len(sides) == 1, f"subject {subject} on both sides"


def test_biases_and_norms_are_not_decayed(tmp_path):
    model = torch.nn.Module()
    model.lora_A = torch.nn.Linear(4, 4)
    model.mask_decoder = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.LayerNorm(4))
    names = [n for n, _ in model.named_parameters()]
    opt = _optimizer(model, names, TrainConfig(output_dir=str(tmp_path), weight_decay=0.1))
    seen = 0
    for group in opt.param_groups:
        dims = {p.ndim for p in group["params"]}
        assert group["weight_decay"] == (0.0 if dims == {1} else 0.1), (dims, group["weight_decay"])
        seen += len(group["params"])
    assert seen == len(names)


def test_each_epoch_has_its_own_order_and_a_resume_replays_it():
    sampler = _EpochShuffle(32, seed=3)
    first = list(sampler)
    sampler.set_epoch(1)
    second = list(sampler)
    assert sorted(first) == sorted(second) == list(range(32)) and first != second
    again = _EpochShuffle(32, seed=3)
    again.set_epoch(1)
    assert list(again) == second


def _csv(path, steps):
    with path.open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(METRIC_COLUMNS)
        for s in steps:
            writer.writerow([s, s / 4, 1e-4, 1.0 / s, "", "", ""])


def test_metrics_keep_the_checkpoints_row_fractional_epochs_and_earlier_values(tmp_path):
    _csv(tmp_path / "metrics.csv", [1, 2, 3])
    assert sorted(_read_rows(tmp_path / "metrics.csv", upto=2)) == [1, 2]  # a resume from step 2 keeps step 2
    log = MetricsLog(tmp_path / "run", steps_per_epoch=4, main=True, resumed_from=None)
    try:
        log.record(2, {"loss": 1.5, "lr": 1e-4}, {})
        log.record(2, {"loss": None, "val_loss": 2.5}, {})  # the evaluation's update of the same step
    finally:
        log.writer.close()
    row = log.rows[2]
    assert row["epoch"] == 0.5 and row["loss"] == 1.5 and row["val_loss"] == 2.5
