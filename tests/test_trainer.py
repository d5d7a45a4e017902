"""The trainer: settings, split, schedule, a short LoRA run that learns, full mode, exact resume, a 2-process
`accelerate launch` run and a run killed with SIGKILL and restarted."""

from __future__ import annotations

import argparse
import copy
import csv
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from umind_core.data.conversations import attach_conversations
from umind_core.data.manifest import write_synthetic_dataset
from umind_core.training.collate import ManifestDataset
from umind_core.training.schedule import cosine_with_warmup, lr_factor, warmup_steps_for
from umind_core.commands.train import add_train_arguments, run_train
from umind_core.testing.server import free_port
from umind_core.training.trainer import (
    METRIC_COLUMNS,
    TrainConfig,
    TrainingError,
    evaluate_loss,
    latest_checkpoint,
    split_records,
    train,
)

REPO = Path(__file__).resolve().parents[1]
TASKS = ("segment", "detect", "diagnose")
CLI_SCRIPT = """import argparse, sys
from umind_core.commands.train import add_train_arguments, run_train
parser = argparse.ArgumentParser()
add_train_arguments(parser)
sys.exit(run_train(parser.parse_args()))
"""


@pytest.fixture(scope="module")
def manifest(tmp_path_factory):
    raw = write_synthetic_dataset(tmp_path_factory.mktemp("syn"), n=6, size=64, progress=False)
    return attach_conversations(raw, raw.parent / "train.jsonl", seed=0, tasks=TASKS)


def _config(out, **kw) -> TrainConfig:
    base = dict(output_dir=str(out), batch_size=2, lr=3e-3, log_every=1, val_fraction=0.2, progress=False)
    base.update(kw)
    return TrainConfig(**base)


def _rows(out: Path) -> list[dict]:
    with (out / "metrics.csv").open(newline="") as fh:
        return list(csv.DictReader(fh))


def _trainable(model) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}


def _heldout_batch(model, manifest, val_fraction: float):
    """The validation records' first conversations as one fixed batch."""
    ds = ManifestDataset(manifest, model.processor, model.num_mask_tokens, tasks=TASKS)
    _train_ids, val_ids = split_records([r.id for r in ds.records], val_fraction)
    idx = [k for k, (r, _c) in enumerate(ds.items) if ds.records[r].id in set(val_ids)][:4]
    assert idx, "the split must hold out at least one record"
    return [ds.collate_fn([ds[k] for k in idx])]


# ------------------------------------------------------------------------------------------- settings

@pytest.mark.parametrize("field,value", [
    ("epochs", 0), ("batch_size", 0), ("grad_accum", 0), ("lr", -1e-4), ("lr", float("nan")),
    ("warmup_ratio", 1.0), ("val_fraction", 1.0), ("max_steps", 0), ("mixed_precision", "fp8"),
    ("eval_every", -1), ("log_every", 0), ("full", "yes"), ("batch_size", 1.5), ("mask_loss_weight", -1),
    ("decoder_lr", 0.0), ("decoder_lr", float("inf")),
])
def test_bad_settings_raise_a_training_error_naming_the_field(tmp_path, field, value):
    with pytest.raises(TrainingError, match=field):
        TrainConfig(output_dir=str(tmp_path), **{field: value})


def test_defaults_are_the_reports():
    c = TrainConfig(output_dir="x")
    assert (c.lr, c.warmup_ratio, c.epochs, c.full, c.mixed_precision) == (1e-4, 0.05, 5, False, "no")
    assert issubclass(TrainingError, ValueError)


def test_cli_flags_mirror_the_config(tmp_path):
    parser = argparse.ArgumentParser()
    add_train_arguments(parser)
    args = parser.parse_args(["--manifest", "m.jsonl", "--out", str(tmp_path)])
    defaults = TrainConfig(output_dir=str(tmp_path))
    for name in ("epochs", "batch_size", "grad_accum", "lr", "warmup_ratio", "weight_decay", "max_grad_norm",
                 "mask_loss_weight", "val_fraction", "eval_every", "save_every", "seed", "max_steps"):
        assert getattr(args, name) == getattr(defaults, name), name
    assert (args.size, args.full, args.model, args.no_pack) == ("small", False, None, False)
    assert defaults.pack is True
    args = parser.parse_args(["--manifest", "m", "--out", "o", "--epochs", "0.5", "--max-steps", "7", "--full",
                              "--no-pack"])
    assert (args.epochs, args.max_steps, args.full, args.no_pack) == (0.5, 7, True, True)
    missing = parser.parse_args(["--manifest", str(tmp_path / "nope.jsonl"), "--out", str(tmp_path / "o")])
    with pytest.raises(TrainingError, match="nope.jsonl"):
        run_train(missing)
    fresh = parser.parse_args(["--manifest", str(tmp_path / "nope.jsonl"), "--out", "o", "--max-image-size", "384"])
    with pytest.raises(TrainingError, match="continues a model"):  # before the manifest is looked at
        run_train(fresh)
    odd = parser.parse_args(["--manifest", "m", "--out", "o", "--model", "M", "--max-image-size", "300"])
    with pytest.raises(ValueError, match="multiple of 32"):
        run_train(odd)
    fresh = parser.parse_args(["--manifest", str(tmp_path / "nope.jsonl"), "--out", "o", "--min-image-size", "384"])
    with pytest.raises(TrainingError, match="--min-image-size continues a model"):
        run_train(fresh)


def test_run_train_builds_conversations_for_a_raw_manifest(manifest, tmp_path, capsys):
    raw = manifest.parent / "manifest.jsonl"  # the generator's output, before attach_conversations
    parser = argparse.ArgumentParser()
    add_train_arguments(parser)
    out = tmp_path / "cli"
    args = parser.parse_args(["--manifest", str(raw), "--out", str(out), "--size", "tiny", "--tasks", "diagnose",
                              "--max-steps", "2", "--val-fraction", "0", "--no-progress", "--mixed-precision", "no"])
    assert run_train(args) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["steps"] == 2 and printed["final_dir"] == str(out / "final")
    from umind_core.data.manifest import read_manifest

    records = read_manifest(out / "train_manifest.jsonl")
    assert records and all(c.task == "diagnose" for r in records for c in r.conversations)


# ------------------------------------------------------------------------------------------- split, schedule

def test_split_is_by_id_hash_and_stable_when_records_are_added():
    ids = [f"syn-{i:06d}" for i in range(400)]
    train_ids, val_ids = split_records(ids, 0.1)
    assert set(train_ids).isdisjoint(val_ids) and set(train_ids) | set(val_ids) == set(ids)
    assert 20 <= len(val_ids) <= 60
    more_train, more_val = split_records(list(reversed(ids)) + [f"new-{i}" for i in range(100)], 0.1)
    assert set(val_ids) <= set(more_val) and set(train_ids) <= set(more_train)
    assert split_records(ids[:3], 0.1)[1], "a small dataset still validates on one record"
    assert split_records(ids, 0.0)[1] == []
    with pytest.raises(TrainingError, match="unique"):
        split_records(["a", "a"], 0.1)


def test_validation_holds_out_whole_groups_where_records_name_them():
    """An HC18 subject's images (its records' "group") are validated or trained on together."""
    ids = [f"{s:03d}_{k}HC" for s in range(80) for k in range(1, 1 + s % 4)]
    train_ids, val_ids = split_records(ids, 0.2, [i[:3] for i in ids])
    assert {i[:3] for i in train_ids}.isdisjoint({i[:3] for i in val_ids}) and val_ids
    assert split_records(ids, 0.2, [None] * len(ids)) == split_records(ids, 0.2)


def test_schedule_warms_up_linearly_to_the_peak_then_decays_to_zero():
    total = 100
    warm = warmup_steps_for(total, 0.05)
    assert warm == 5
    factors = [lr_factor(s, total, warm) for s in range(total)]
    assert 0 < factors[0] < factors[1] < factors[4] < 1.0
    assert factors[warm] == pytest.approx(1.0)
    assert all(a >= b for a, b in zip(factors[warm:], factors[warm + 1:]))
    assert factors[-1] < 0.01
    opt = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))], lr=1e-4)
    sched = cosine_with_warmup(opt, total, 0.05)
    lrs = []
    for _ in range(total):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    assert max(lrs) == pytest.approx(1e-4) and lrs.index(max(lrs)) == warm


def test_warm_up_rounds_up_and_the_rate_stays_at_zero_past_the_last_step():
    assert warmup_steps_for(30, 0.05) == 2 and warmup_steps_for(10, 0.01) == 1  # 1.5 steps -> 2; 0.1 -> 1
    assert lr_factor(100, 100, 5) == pytest.approx(0.0)
    assert lr_factor(150, 100, 5) == pytest.approx(0.0)  # a resumed run past its length does not climb again


# ------------------------------------------------------------------------------------------- training runs

def test_lora_run_learns_and_writes_every_artifact(tiny_model_factory, manifest, tmp_path):
    from PIL import Image

    from umind_core.modeling.umind import UMindVL

    model = tiny_model_factory()
    untrained = copy.deepcopy(model)
    before = _trainable(model)
    base_name = next(n for n, _ in model.named_parameters() if n.endswith("q_proj.base_layer.weight"))
    base_before = dict(model.named_parameters())[base_name].detach().clone()
    config = _config(tmp_path / "run", max_steps=16, save_every=8)
    heldout = _heldout_batch(model, manifest, config.val_fraction)

    summary = train(model, manifest, config, tasks=TASKS)

    assert summary.steps == 16 and summary.resumed_from is None and summary.num_processes == 1
    assert summary.train_loss_last < summary.train_loss_first
    assert summary.val_loss_last < summary.val_loss_first
    # the adapter learned; the frozen base did not move
    after = _trainable(model)
    assert any(not torch.equal(before[n], after[n]) for n in before if "lora_B" in n)
    assert any(not torch.equal(before[n], after[n]) for n in before if n.startswith("mask_decoder."))
    assert torch.equal(dict(model.named_parameters())[base_name].detach(), base_before)
    # the saved adapter beats the untrained one on a fixed held-out batch
    trained = UMindVL.from_pretrained(summary.final_dir)
    assert evaluate_loss(trained, heldout)["loss"] < evaluate_loss(untrained, heldout)["loss"]

    out = Path(config.output_dir)
    rows = _rows(out)
    assert tuple(rows[0]) == METRIC_COLUMNS
    steps = [int(r["step"]) for r in rows]
    assert steps == sorted(set(steps)) and steps[0] == 0 and steps[-1] == 16
    lrs = [float(r["lr"]) for r in rows if r["lr"]]
    assert max(lrs) == pytest.approx(config.lr) and lrs[0] < config.lr  # warm-up, then the peak
    assert float(rows[-1]["val_loss"]) == pytest.approx(summary.val_loss_last, rel=1e-4)
    assert [p.name for p in (out / "checkpoints").iterdir()] and latest_checkpoint(out).name == "step-16"
    with Image.open(out / "curves.png") as im:
        assert im.format == "PNG" and im.size[0] > 100
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(out / "tensorboard"))
    events.Reload()
    assert {"train/loss", "train/lr", "val/loss"} <= set(events.Tags()["scalars"])
    assert len(events.Scalars("train/loss")) == 16
    assert json.loads((out / "summary.json").read_text())["steps"] == 16
    assert not [p for p in out.rglob(".*")], "no temporary files may remain"


def test_decoder_lr_moves_the_decoder_at_its_own_rate(tiny_model_factory, manifest, tmp_path):
    """The same two steps at a near-zero adapter rate: the decoder moves only when it has its own rate."""
    def moved(decoder_lr):
        model = tiny_model_factory()
        before = _trainable(model)
        train(model, manifest, _config(tmp_path / f"run-{decoder_lr}", lr=1e-12, decoder_lr=decoder_lr,
                                       max_steps=2, warmup_ratio=0.0, val_fraction=0.0), tasks=TASKS)
        after = _trainable(model)
        delta = lambda keep: max(float((after[n] - before[n]).abs().max()) for n in before if keep(n))  # noqa: E731
        return delta(lambda n: n.startswith("mask_decoder.")), delta(lambda n: "lora_" in n)

    decoder_own, lora_own = moved(1e-2)
    decoder_same, lora_same = moved(None)
    assert decoder_own > 1e-4 > decoder_same
    assert lora_own < 1e-6 and lora_same < 1e-6


def test_full_mode_trains_the_base_and_mask_loss_weight_applies(tiny_model_factory, manifest, tmp_path, caplog):
    lora_model = tiny_model_factory()
    with pytest.raises(TrainingError, match="LoRA"):
        train(lora_model, manifest, _config(tmp_path / "bad", full=True, max_steps=1), tasks=TASKS)
    model = tiny_model_factory(lora=None)
    with pytest.raises(TrainingError, match="full=True"):
        train(model, manifest, _config(tmp_path / "bad2", max_steps=1), tasks=TASKS)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    with caplog.at_level(logging.INFO, logger="umind_core.training.trainer"):
        summary = train(model, manifest, _config(tmp_path / "full", full=True, max_steps=3, mask_loss_weight=0.0,
                                                  val_fraction=0.0), tasks=TASKS)
    # no progress bar: each logged step is a line a server's train job shows (the Slicer panel parses it)
    assert [m for m in caplog.messages if m.startswith("umind train: step")][-1].startswith("umind train: step 3/3")
    after = dict(model.named_parameters())
    assert not torch.equal(before["qwen.model.language_model.layers.0.self_attn.q_proj.weight"],
                           after["qwen.model.language_model.layers.0.self_attn.q_proj.weight"].detach())
    assert summary.val_loss_first is None and summary.steps == 3
    rows = [r for r in _rows(tmp_path / "full") if r["loss"]]
    assert len(rows) == 3 and any(r["mask_loss"] and float(r["mask_loss"]) > 0 for r in rows)  # measured...
    for row in rows:  # ...but weighted 0 in the loss
        assert float(row["loss"]) == pytest.approx(float(row["lm_loss"]), rel=1e-5)


def test_bf16_autocast_on_the_cpu_and_the_model_comes_back_unpatched(tiny_model_factory, manifest, tmp_path):
    model = tiny_model_factory()
    if not torch.cuda.is_available():
        with pytest.raises(TrainingError, match="fp16"):
            train(model, manifest, _config(tmp_path / "fp16", max_steps=1, mixed_precision="fp16"), tasks=TASKS)
    batch = _heldout_batch(model, manifest, 0.2)[0]
    summary = train(model, manifest, _config(tmp_path / "bf16", max_steps=2, mixed_precision="bf16"), tasks=TASKS)
    assert summary.steps == 2 and summary.val_loss_last is not None
    model.to("cpu")
    with torch.no_grad():  # accelerate's autocast wrapper is removed again: a plain fp32 forward
        assert model(**batch).logits.dtype == torch.float32


def test_resume_from_a_checkpoint_reproduces_the_uninterrupted_run(tiny_model_factory, manifest, tmp_path):
    """Optimizer, schedule, RNG (LoRA dropout) and the position inside the epoch all come back exactly."""
    from safetensors.torch import load_file

    config = dict(max_steps=10, save_every=4, grad_accum=2, batch_size=1, val_fraction=0.2)
    full = train(tiny_model_factory(), manifest, _config(tmp_path / "a", **config), tasks=TASKS)
    assert full.resumed_from is None
    (tmp_path / "b" / "checkpoints").mkdir(parents=True)
    shutil.copytree(tmp_path / "a" / "checkpoints" / "step-4", tmp_path / "b" / "checkpoints" / "step-4")
    # a checkpoint a kill interrupted: hidden, without trainer_state.json; it must be ignored and removed
    shutil.copytree(tmp_path / "a" / "checkpoints" / "step-8", tmp_path / "b" / "checkpoints" / ".step-8.tmp")
    os.remove(tmp_path / "b" / "checkpoints" / ".step-8.tmp" / "trainer_state.json")
    resumed = train(tiny_model_factory(), manifest, _config(tmp_path / "b", **config), tasks=TASKS)
    assert resumed.resumed_from == 4 and resumed.steps == 10
    a = load_file(str(tmp_path / "a" / "checkpoints" / "step-10" / "trainable.safetensors"))
    b = load_file(str(tmp_path / "b" / "checkpoints" / "step-10" / "trainable.safetensors"))
    assert a.keys() == b.keys()
    assert max((a[k] - b[k]).abs().max().item() for k in a) < 1e-6
    assert resumed.val_loss_last == pytest.approx(full.val_loss_last, rel=1e-6)
    assert not list((tmp_path / "b" / "checkpoints").glob(".*"))
    # the checkpoint holds the trainable tensors only: resuming on another frozen base is refused
    with pytest.raises(TrainingError, match="another base"):
        train(tiny_model_factory(seed=1), manifest, _config(tmp_path / "b", **config), tasks=TASKS)


def test_a_checkpoint_of_another_model_is_refused(tiny_model_factory, manifest, tmp_path):
    train(tiny_model_factory(), manifest, _config(tmp_path / "run", max_steps=1, val_fraction=0.0), tasks=TASKS)
    with pytest.raises(TrainingError, match="checkpoint"):
        train(tiny_model_factory(lora=None), manifest,
              _config(tmp_path / "run", max_steps=2, full=True, val_fraction=0.0), tasks=TASKS)


# ------------------------------------------------------------------------------------------- processes

def _env() -> dict:
    env = dict(os.environ, OMP_NUM_THREADS="1", ACCELERATE_USE_CPU="1", HF_HUB_OFFLINE="1",
               TRANSFORMERS_OFFLINE="1", PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop("CUDA_VISIBLE_DEVICES", None)
    return env


def _cli_args(manifest, out, *extra) -> list[str]:
    return ["--manifest", str(manifest), "--out", str(out), "--size", "tiny", "--tasks", ",".join(TASKS),
            "--batch-size", "1", "--lr", "3e-3", "--log-every", "1", "--val-fraction", "0.2", "--no-progress",
            "--mixed-precision", "no", *extra]


@pytest.mark.slow
def test_two_processes_under_accelerate_launch(manifest, tmp_path):
    script = tmp_path / "train_cli.py"
    script.write_text(CLI_SCRIPT)
    out = tmp_path / "mp"
    # `--cpu --num_processes 2` starts a single process unless MPI is set up; `--multi_gpu` starts torchrun's
    # two workers and ACCELERATE_USE_CPU keeps them on the CPU with gloo
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
           "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
           "--main_process_port", str(free_port()), str(script),
           *_cli_args(manifest, out, "--max-steps", "4", "--save-every", "2")]
    proc = subprocess.run(cmd, env=_env(), capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-4000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["num_processes"] == 2 and summary["steps"] == 4
    assert summary["val_loss_last"] < summary["val_loss_first"]
    state = out / "checkpoints" / "step-4" / "state"
    assert (state / "random_states_0.pkl").is_file() and (state / "random_states_1.pkl").is_file()
    steps = [int(r["step"]) for r in _rows(out)]
    assert steps == [0, 1, 2, 3, 4]  # one writer: no duplicated rows
    assert proc.stdout.count('"num_processes": 2') == 1  # only the main process prints the summary
    from umind_core.modeling.umind import UMindVL

    assert UMindVL.from_pretrained(out / "final").config.lora is not None


KILL_SCRIPT = """import os, signal
from pathlib import Path
import umind_core.training.run as run
real_replace = run.replace_dir  # the step that makes a checkpoint complete

def replace_then_die(src, dst):
    if Path(dst).name == "step-8":  # step-8 is written but never completed: a kill mid-save
        os.kill(os.getpid(), signal.SIGKILL)
    real_replace(src, dst)

run.replace_dir = replace_then_die
""" + CLI_SCRIPT


@pytest.mark.slow
def test_killed_run_resumes_from_the_last_complete_checkpoint(manifest, tmp_path):
    """The first run kills itself while saving step 8 (no race with a clock); the rerun must resume from
    step 6, the last complete checkpoint, and clean the partial one. Timeouts only guard against hangs."""
    (tmp_path / "train_kill.py").write_text(KILL_SCRIPT)
    (tmp_path / "train_cli.py").write_text(CLI_SCRIPT)
    out = tmp_path / "killed"
    args = _cli_args(manifest, out, "--max-steps", "14", "--save-every", "2")
    first = subprocess.run([sys.executable, str(tmp_path / "train_kill.py"), *args], env=_env(),
                           capture_output=True, text=True, timeout=600)
    assert first.returncode == -signal.SIGKILL, first.stderr[-4000:]
    assert (out / "checkpoints" / ".step-8.tmp").is_dir(), "the kill must land while step 8 is being saved"
    last_step = int(latest_checkpoint(out).name.split("-")[1])
    assert last_step == 6

    cmd = [sys.executable, str(tmp_path / "train_cli.py"), *args]
    done = subprocess.run(cmd, env=_env(), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["resumed_from"] == last_step and summary["steps"] == 14
    assert not [p for p in out.rglob(".*")], "partial checkpoints and temporary files must be gone"
    assert latest_checkpoint(out).name == "step-14"
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["step-10", "step-12", "step-14"]  # keep 3
    steps = [int(r["step"]) for r in _rows(out)]
    assert steps == sorted(set(steps)) and steps[-1] == 14
    assert (out / "final" / "umind_config.json").is_file()


def test_resume_takes_the_newest_complete_checkpoint_only(tmp_path):
    """A step folder without its state file (written last) is not a checkpoint: a copy interrupted by hand or a
    disk that filled mid-write must not be resumed from."""
    from umind_core.training.checkpoints import STATE_FILE, latest_checkpoint

    assert latest_checkpoint(tmp_path) is None
    for step, complete in ((100, True), (200, True), (300, False)):
        folder = tmp_path / "checkpoints" / f"step-{step}"
        folder.mkdir(parents=True)
        if complete:
            (folder / STATE_FILE).write_text("{}")
    (tmp_path / "checkpoints" / ".step-400.tmp").mkdir()
    assert latest_checkpoint(tmp_path) == tmp_path / "checkpoints" / "step-200"
