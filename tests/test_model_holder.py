"""The served model's holder and runtime: one load per (model, version folder, settings), reused by every request and
swapped once when another version is served; a version that cannot load falls back to the newest promoted one
before it; the batch scheduler follows the served model."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "monailabel_app"))

from lib import model_holder  # noqa: E402
from lib.model_holder import ModelHolder, ModelSpec  # noqa: E402


def test_a_new_version_swaps_the_model_once_and_the_same_one_is_reused(monkeypatch):
    loaded = []
    monkeypatch.setattr(model_holder, "_load", lambda spec: loaded.append(spec.version) or f"model v{spec.version}")
    holder = ModelHolder()
    v1, v2 = ModelSpec(None, 1, "/w/v1"), ModelSpec(None, 2, "/w/v2")
    assert holder.predictor(v1) == holder.predictor(v1) == "model v1"
    assert holder.predictor(v2) == "model v2" and holder.predictor(v2) == "model v2"
    assert holder.predictor(v1) == "model v1"  # a rollback swaps back
    assert loaded == [1, 2, 1] and holder.loads == 3 and holder.loaded_key() == v1.key
    same = ModelSpec(None, 1, "/w/v1", compile_cache="/elsewhere")  # not part of the key: no reload
    assert holder.predictor(same) == "model v1" and holder.loads == 3


def test_a_version_folder_that_changed_is_loaded_again(monkeypatch):
    monkeypatch.setattr(model_holder, "_load", lambda spec: f"model at {spec.version_dir}")
    holder = ModelHolder()
    assert holder.predictor(ModelSpec(None, 1, "/w/v1")) == "model at /w/v1"
    assert holder.predictor(ModelSpec(None, 1, "/moved/v1")) == "model at /moved/v1" and holder.loads == 2


class _Versions:
    """Runs 1, 2, 4, 5 promoted and 3 rejected; the served version is `current`."""

    def __init__(self, current: int):
        self.now = current

    def current(self):
        return self.now

    def state(self):
        return {"runs": [{"version": v, "status": "rejected" if v == 3 else "promoted"} for v in (1, 2, 3, 4, 5)]}

    def model_dir(self, v):
        return None if v == 0 else f"/w/v{v}"


def _runtime(monkeypatch, current: int, broken: set[int]):
    from types import SimpleNamespace

    from lib import runtime

    class Holder:
        loaded: dict = {}

        def predictor(self, spec):
            if spec.version in broken:
                raise OSError(f"version {spec.version}: weights missing")
            return self.loaded.setdefault(spec.version, SimpleNamespace(version=spec.version, batch_size=8))

    monkeypatch.setattr(runtime, "holder", Holder())
    monkeypatch.setattr(runtime, "_BROKEN", {})
    monkeypatch.setattr(runtime, "_FALLBACK", {})
    monkeypatch.setattr(runtime, "_SCHEDULER", [])
    conf = SimpleNamespace(model=None, device="cpu", dtype="float32", max_new_tokens=8, decode="",
                           workdir=Path("/w"), batch_window_ms=0.0, batch_regroup_ms=0.0)
    return runtime.Runtime(conf, _Versions(current))


def test_a_broken_version_falls_back_to_the_newest_promoted_one_before_it(monkeypatch):
    rt = _runtime(monkeypatch, current=4, broken={4})
    predictor, version = rt.predictor()
    assert (predictor.version, version) == (2, 2)  # not 5 (newer than the broken one), not 1 (older than 2), not 3 (rejected)
    assert rt.warnings() == ["version 4 cannot be loaded (OSError: version 4: weights missing); serving version 2 "
                             "instead: roll back or retrain"]


def test_the_scheduler_follows_the_served_model(monkeypatch):
    rt = _runtime(monkeypatch, current=1, broken=set())
    first, v1 = rt.scheduler()
    assert v1 == 1 and first.predictor.version == 1 and rt.scheduler()[0] is first
    rt.versions.now = 2  # a promotion
    second, v2 = rt.scheduler()
    assert v2 == 2 and second is not first and second.predictor.version == 2
    for s in (first, second):
        s.close()
