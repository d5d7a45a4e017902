"""The bundled demo model: it loads offline, is what a missing --model resolves to, and segments held-out images.

The held-out image comes from a generator seed never used in training (training used seeds 0..2999).
"""

from __future__ import annotations

import numpy as np
import pytest

from umind_core import demo

pytestmark = pytest.mark.skipif(not demo.has_demo_model(), reason="the demo model is not built")


@pytest.fixture(scope="module")
def demo_model():
    return demo.load_model(None)


def test_missing_model_resolves_to_the_demo_folder(demo_model):
    assert demo.demo_model_dir() == demo.DEMO_MODEL_DIR
    assert "demonstration" in demo_model.config.description
    size_mb = sum(p.stat().st_size for p in demo.DEMO_MODEL_DIR.rglob("*") if p.is_file()) / 2**20
    assert size_mb <= 25


def test_demo_model_segments_a_held_out_kidney(demo_model):
    from umind_core.data.synthetic import generate
    from umind_core.predictor import Predictor

    sample = generate(seed=1_000_003, site="kidney", size=256)
    (kidney,) = [o for o in sample.objects if o.label == "kidney"]
    pred = Predictor(demo_model, max_new_tokens=64)
    pred.set_image(np.repeat(sample.image[..., None], 3, axis=2))
    masks = [o.mask for o in pred.predict("segment", "kidney").objects if o.mask is not None]
    assert masks, "no mask in the answer"
    union = np.logical_or.reduce(masks)
    iou = (union & kidney.mask).sum() / (union | kidney.mask).sum()
    assert iou > 0.5, iou
