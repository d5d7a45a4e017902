"""The bundled demo model: it loads offline, is what a missing --model resolves to, and a sample of its card's
figures holds on held-out images.

Held-out images come from generator seeds never used in training (training used seeds 0..7999 and
100,000..107,999): the default look
at seeds 1,000,000+, and the appearance `scanner_b`, which the model never trained on, at seeds 3,000,000+ (the
card's two evaluation sets; these tests take their first 12 images).
"""

from __future__ import annotations

from pathlib import Path

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
    from umind_core.inference.predictor import Predictor

    sample = generate(seed=1_000_003, site="kidney", size=256)
    (kidney,) = [o for o in sample.objects if o.label == "kidney"]
    pred = Predictor(demo_model, max_new_tokens=64)
    pred.set_image(np.repeat(sample.image[..., None], 3, axis=2))
    masks = [o.mask for o in pred.predict("segment", "kidney").objects if o.mask is not None]
    assert masks, "no mask in the answer"
    union = np.logical_or.reduce(masks)
    iou = (union & kidney.mask).sum() / (union | kidney.mask).sum()
    assert iou > 0.8, iou  # demo model 2: 0.922, demo model 1: 0.897


def _held_out_summary(model, tmp_path, appearance: str, seed0: int, tasks: str) -> dict:
    from umind_core.data.conversations import attach_conversations
    from umind_core.data.manifest import write_synthetic_dataset
    from umind_core.evaluation.runner import evaluate

    raw = write_synthetic_dataset(tmp_path / appearance, 12, seed0=seed0, size=256, progress=False,
                                  appearance=appearance)
    manifest = attach_conversations(raw, raw)
    return evaluate(model, manifest, tasks=tasks, progress=False, max_new_tokens=128).metrics


@pytest.mark.slow
def test_umind_eval_on_held_out_images_agrees_with_the_card(demo_model, tmp_path):
    """The card's headline numbers come from `umind eval` on 200 held-out images; the first 12 of them (same
    seeds) must land near them: this fails for an untrained or wrongly packaged model."""
    metrics = _held_out_summary(demo_model, tmp_path, "default", 1_000_000, "segment,detect,measure,refusal")
    summary = metrics["summary"]
    # demo model 4 on these 12 images: mIoU 0.866, detection F1 0.933, refusals 1.000, calipers 0.178 (stage 5, shipped
    # before it: 0.854, 0.867, 1.000, 0.209); the margins leave room for another CPU's arithmetic, not for a regression
    # (the old 0.75 let a tenth of the mIoU go)
    assert summary["segmentation_miou"] > 0.84
    assert summary["detection_f1"] > 0.85
    assert summary["refusal_accuracy"] > 0.9
    calipers = metrics["measurement"]["by_kind"]["lesion calipers"]["mean_rel"]
    assert calipers < 0.22, calipers  # demo model 1, which never learned calipers: 0.726 here


@pytest.mark.slow
def test_umind_eval_on_the_appearance_it_never_trained_on(demo_model, tmp_path):
    """The card's `scanner_b` figures (another probe geometry, speckle, gain and lesion echogenicity): a model
    that keys on the texture of its own training images fails here (demo model 1 on these 12 images: segmentation
    0.576, in-scope questions answered 0.833)."""
    summary = _held_out_summary(demo_model, tmp_path, "scanner_b", 3_000_000, "segment,refusal")["summary"]
    assert summary["segmentation_miou"] > 0.78  # demo model 4 on these 12: 0.813
    assert summary["refusal_in_scope_accuracy"] >= 0.95  # demo model 4: 1.000 of in-scope questions answered


def test_demo_model_reads_the_committed_real_fetal_heads(demo_model, tmp_path):
    """Real ultrasound, not the generator's: the three committed HC18 images (tests/fixtures/hc18, CC BY 4.0). They
    are in demo model 4's training split, so this does not measure generalisation (benchmarks/real_heldout.py does,
    on held-out subjects); it catches a model that lost the real domain or was packaged wrong, or reads a real scan at
    another input size than it was trained at. Measured (demo model 4, stage 12): Dice 0.940, 0.962, 0.948 and HC
    295.7 / 288.4 / 286.1 mm against the sonographers' 283.5 / 288.2 / 296.8 (mean 7.7 mm off: three large heads,
    where single images swing by 10 mm between stages; stage 10: 2.8 mm, stage 5 at the 256 px input 9.8 mm, while
    on the 23 held-out heads over 260 mm stage 12 is 5.3 mm off against stage 10's 5.7); demo model 3, which never saw
    a real image, segmented held-out HC18 heads at Dice 0.22, 68 of 129 masks empty, 76.5 mm off on the heads it
    found."""
    from umind_core.cli import main as umind
    from umind_core.data.manifest import read_manifest
    from umind_core.imageio import Frame
    from umind_core.inference.predictor import Predictor

    fixtures = Path(__file__).resolve().parent / "fixtures" / "hc18"
    assert umind(["import", "hc18", str(fixtures), "--out", str(tmp_path / "hc18")]) == 0
    predictor = Predictor(demo_model)
    records = read_manifest(tmp_path / "hc18" / "manifest.jsonl")
    assert len(records) == 3
    hc_errors = []
    for rec in records:
        truth = rec.load_masks()[0]
        predictor.set_image(Frame(pixels=rec.load_image(), spacing=tuple(rec.spacing), index=0, source=rec.id))
        masks = [o.mask for o in predictor.predict("segment", "fetal head").objects if o.mask is not None]
        assert masks, f"{rec.id}: no fetal head mask"
        pred = np.logical_or.reduce(masks)
        dice = 2 * (pred & truth).sum() / (pred.sum() + truth.sum())
        assert dice > 0.92, (rec.id, dice)
        hc = [o.physical["perimeter"] for o in predictor.predict("measure", "head circumference").objects
              if o.physical and o.physical.get("perimeter")]
        assert hc, f"{rec.id}: no head circumference"
        hc_errors.append(abs(hc[0] - rec.annotations.measurements["HC mm"]))
    assert np.mean(hc_errors) < 12, hc_errors  # measured 7.7 mm on these three; lost the domain: tens of mm
    # the input the card states: an HC18 frame (800 x 540) reaches the model as 11 x 17 merged tokens
    frame = np.repeat(records[0].load_image()[..., None], 3, axis=-1)  # grey, as the Predictor passes it: RGB
    grid = demo_model.processor.image_processor(images=[frame], return_tensors="pt")["image_grid_thw"]
    assert [int(v) // 2 for v in grid[0, 1:]] == [11, 17], grid
