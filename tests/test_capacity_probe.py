"""The capacity probe's deeper copy of the demo model (`benchmarks/capacity_probe.py`) starts as the same function:
otherwise the probe would compare a damaged model with the original, not more layers with fewer."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import capacity_probe

from umind_core.data import synthetic
from umind_core.imageio import Frame
from umind_core.modeling.umind import UMindVL
from umind_core.inference.predictor import Predictor


@pytest.mark.slow
def test_a_deepened_demo_model_answers_as_the_original_until_it_trains(tmp_path):
    n = capacity_probe.deepen(capacity_probe.DEMO, tmp_path / "deep", 2, 1)
    cfg = json.loads((tmp_path / "deep" / "base" / "config.json").read_text())
    assert (cfg["text_config"]["num_hidden_layers"], cfg["vision_config"]["depth"]) == (6, 5)
    original, deep = UMindVL.from_pretrained(capacity_probe.DEMO), UMindVL.from_pretrained(tmp_path / "deep")
    assert sum(p.numel() for p in deep.parameters()) > sum(p.numel() for p in original.parameters())
    assert n == sum(p.numel() for p in deep.qwen.parameters())
    sample = synthetic.generate(1_000_001, site="kidney")
    frame = Frame(pixels=sample.image, spacing=sample.spacing, index=0, source="kidney.png")
    answers = []
    for model in (original, deep):
        pred = Predictor(model)
        pred.set_image(frame)
        answers.append((pred.predict("segment", "kidney"), pred.predict("report")))
    (seg_a, rep_a), (seg_b, rep_b) = answers
    assert seg_a.text == seg_b.text and rep_a.text == rep_b.text and rep_a.text
    assert np.array_equal(seg_a.objects[0].mask, seg_b.objects[0].mask)
    layer = dict(deep.qwen.named_parameters())
    assert not layer["model.language_model.layers.5.self_attn.o_proj.weight"].any()  # a new layer: zero output
    assert layer["model.language_model.layers.5.self_attn.q_proj.weight"].any()
