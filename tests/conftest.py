"""Shared fixtures: the tiny model is built once per session (a few seconds), every test copies what it changes."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
# The default decode ("auto") builds tuned step graphs in a background thread after the first step of each batch
# size, some tens of seconds of CPU each: every Predictor, `umind infer` run and server a test starts would build its
# own. Tests decode with the static step unless they name a mode; the tests of the default unset this.
os.environ.setdefault("UMIND_DECODE", "static")

import pytest
import torch

# the synthetic lesion image and teacher-forced sample live in umind_core.testing (benchmarks import them too);
# tests keep taking them from here: `from conftest import make_image, mask_sample`
from umind_core.testing.samples import CHAT, lesion_boxes, make_image, mask_sample  # noqa: F401


@pytest.fixture(scope="session")
def tiny_model_factory():
    from umind_core.modeling.tiny import build_model

    cache = {}

    def factory(**kwargs):
        key = repr(sorted(kwargs.items()))
        if key not in cache:
            cache[key] = build_model("tiny", **kwargs)
        import copy

        return copy.deepcopy(cache[key])

    return factory


def task_answers(width: int = 256, height: int = 256) -> dict[str, tuple[str | None, str]]:
    """One (prompt, answer) per task for the single-lesion image of make_image: what the trained fixture learns."""
    from umind_core.answers import grounding as g

    (y0, y1, x0, x1), = lesion_boxes(height, width, 1)
    box = g.box_to_grid(x0, y0, x1 - 1, y1 - 1, width, height)
    centre = g.point_to_grid((x0 + x1) / 2, (y0 + y1) / 2, width, height)
    line = g.line_to_grid(x0, (y0 + y1) / 2, x1 - 1, (y0 + y1) / 2, width, height)
    return {
        "segment": ("lesion", g.format_mask("lesion")),
        "detect": ("lesion", g.format_box(box, "lesion")),
        "keypoints": ("lesion centre", g.format_point(centre, "centre")),
        "measure": ("lesion width", g.format_line(line, "width") + " Length: 85 px."),
        "diagnose": (None, "Benign."),
        "report": (None, "Site: breast. Finding: oval lesion."),
        "ask": ("Is there a lesion?", "Yes, one lesion."),
    }


def train_on_tasks(model, steps: int = 120, lr: float = 5e-3, seed: int = 0):
    """Teach the model the answers of task_answers on make_image(0): a few seconds on the tiny config."""
    from umind_core import prompts

    img = make_image(0)
    (y0, y1, x0, x1), = lesion_boxes(256, 256, 1)
    target = torch.zeros(1, 256, 256)
    target[0, y0:y1, x0:x1] = 1
    batches = []
    for task, (prompt, answer) in task_answers().items():
        text = prompts.chat_prompt(prompts.build_user_text(task, prompt))
        full = text + answer + prompts.ASSISTANT_END
        enc = dict(model.processor(images=[img], text=[full], return_tensors="pt"))
        n_prompt = len(model.processor(images=[img], text=[text], return_tensors="pt")["input_ids"][0])
        labels = enc["input_ids"].clone()
        labels[:, :n_prompt] = -100
        batches.append((enc, labels, [target] if task == "segment" else None))
    torch.manual_seed(seed)
    model.train()
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=lr)
    # a fixed thread count: what 210 steps memorise depends on the order of its sums, and with one OpenMP thread
    # the landmark answer came out at the image's edge (x 256 for 84.5)
    threads = torch.get_num_threads()
    torch.set_num_threads(TRAIN_THREADS)
    try:
        for step in range(steps):
            enc, labels, targets = batches[step % len(batches)]
            loss = model(**enc, labels=labels, mask_targets=targets).loss
            opt.zero_grad()
            loss.backward()
            opt.step()
    finally:
        torch.set_num_threads(threads)
    return _for_reading(model)


def _for_reading(model):
    """The state a trained fixture is shared in: evaluation mode, no gradients."""
    model.eval()
    model.requires_grad_(False)
    return model


#: the threads `train_on_tasks` trains with, whatever the machine or OMP_NUM_THREADS says (the 2 cores it was tuned on)
TRAIN_THREADS = 2


@pytest.fixture(scope="session")
def trained_tiny(tmp_path_factory):
    """A tiny model that has memorised one answer per task on make_image(0). Shared: do not modify it.

    Under pytest-xdist the first worker to need it trains it and leaves its weights in the run's temporary folder;
    the other worker waits for them and loads them (about a minute of training saved on 2 cores, same weights)."""
    from umind_core.modeling.tiny import build_model

    def trained():
        # all weights train (as the demo model does): LoRA on a random tiny base memorises too slowly for a fixture
        return train_on_tasks(build_model("tiny", lora=None), steps=210, lr=2e-3)

    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return trained()
    from filelock import FileLock  # a dependency of transformers' hub client

    from umind_core.atomic import atomic_path

    weights = tmp_path_factory.getbasetemp().parent / "trained_tiny.pt"  # the run's folder, beside each worker's
    with FileLock(f"{weights}.lock"):
        if weights.is_file():
            model = build_model("tiny", lora=None)
            model.load_state_dict(torch.load(weights, weights_only=True))
            return _for_reading(model)
        model = trained()
        with atomic_path(weights) as tmp:
            torch.save(model.state_dict(), tmp)
        return model


#: fixtures that build or train a model: a test that asks for one is left out of the quick subset
MODEL_FIXTURES = frozenset({"trained_tiny", "tiny_model_factory"})


def pytest_configure(config):
    # registered here rather than in pyproject.toml, whose hash decides when scripts/env.sh rebuilds .venv
    config.addinivalue_line("markers", "model: builds, trains or loads a model (the model fixtures' users)")


def pytest_collection_modifyitems(config, items):
    """Mark `model` every test that asks for a model fixture, so that `scripts/test.sh --quick` (which deselects
    `slow`, `server` and `model`) leaves out what builds, trains or serves a model, without each file saying so."""
    for item in items:
        if MODEL_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.model)


def pytest_terminal_summary(terminalreporter):
    """The PACS/OHIF modules skip when system packages are missing: say so in one line, whatever `-r` asks."""
    from system_packages import SKIP_PREFIX

    reasons = {str(r.longrepr[2]) for r in terminalreporter.stats.get("skipped", [])
               if isinstance(getattr(r, "longrepr", None), tuple) and SKIP_PREFIX in str(r.longrepr[2])}
    for reason in sorted(reasons)[:1]:
        terminalreporter.write_line(reason.removeprefix("Skipped: "))


def pytest_unconfigure(config):
    """Let a tuned Predictor's background builder finish before Python exits: one still inside torch.compile is
    killed mid-C++ and the process aborts ("terminate called without an active exception", exit 134) after every
    test passed, as `umind` commands avoid with the same call (`step_builder.stop_all_builders`)."""
    import sys

    builders = sys.modules.get("umind_core.inference.step_builder")
    if builders is not None:  # nothing to stop where no test loaded the decoder
        builders.stop_all_builders()
