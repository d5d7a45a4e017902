"""The bundled demo model: it loads offline, is what a missing --model resolves to, and segments held-out images.

The held-out image comes from a generator seed never used in training (training used seeds 0..7999).
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
    assert iou > 0.8, iou  # 0.897 with the shipped model


def test_umind_eval_on_held_out_images_agrees_with_the_card(demo_model, tmp_path):
    """The card's headline numbers come from `umind eval` on 200 held-out images; the first 12 of them (same
    seeds) must land near them: this fails for an untrained or wrongly packaged model."""
    from umind_core.data.conversations import attach_conversations
    from umind_core.data.manifest import write_synthetic_dataset
    from umind_core.evaluation.runner import evaluate

    raw = write_synthetic_dataset(tmp_path / "test", 12, seed0=1_000_000, size=256, progress=False)
    manifest = attach_conversations(raw, raw)
    summary = evaluate(demo_model, manifest, tasks="segment,detect,refusal", progress=False,
                       max_new_tokens=128).metrics["summary"]
    assert summary["segmentation_miou"] > 0.65  # card: 0.800 on 200 images
    assert summary["detection_f1"] > 0.5  # card: 0.710
    assert summary["refusal_accuracy"] > 0.85  # card: 0.995
