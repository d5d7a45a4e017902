"""The served model's holder: one load per (model, version, settings), reused by every request, swapped once when a
request names another version (a promotion or a rollback)."""

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
