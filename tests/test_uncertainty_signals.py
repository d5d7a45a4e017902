"""The active-learning signals (`lib/activelearning/signals.py`) and how `umind_uncertainty` combines them: each
rule on hand-made masks and answers, so a flipped axis, a changed mix or a wrong frame shows."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "monailabel_app"))

from lib.activelearning import uncertainty  # noqa: E402
from lib.activelearning.signals import confidence_score, flip_disagreement, task_disagreement  # noqa: E402
from umind_core.answers.results import GroundedObject, Result  # noqa: E402
from umind_core.imageio import Frame  # noqa: E402
from umind_core.masks import mask_box  # noqa: E402


def _left_block(shape=(32, 48)) -> np.ndarray:
    m = np.zeros(shape, bool)
    m[4:12, 2:10] = True  # top-left: a flip on either axis moves it
    return m


def test_an_answer_without_confidence_counts_as_unsure_and_both_parts_average():
    assert confidence_score(Result("segment")) == 1.0
    both = Result("segment", confidence={"token_prob_mean": 0.9, "mask_entropy": 0.3})
    assert confidence_score(both) == pytest.approx((0.1 + 0.3) / 2)


def test_the_mirror_images_mask_is_flipped_back_left_to_right():
    m = _left_block()
    assert flip_disagreement(m, m[:, ::-1]) == pytest.approx(0.0)  # the model saw the same lesion mirrored
    assert flip_disagreement(m, m) == pytest.approx(1.0)  # it drew it on the same side of the mirror: no overlap


def test_task_disagreement_is_zero_only_when_mask_and_boxes_agree_or_both_are_empty():
    empty, m = np.zeros((32, 48), bool), _left_block()
    none, box = Result("detect"), Result("detect", objects=[GroundedObject("x", box=mask_box(m))])
    assert task_disagreement(empty, none) == 0.0 and task_disagreement(empty, box) == 1.0
    assert task_disagreement(m, none) == 1.0 and task_disagreement(m, box) == pytest.approx(0.0)


class _Fake:
    """A Predictor whose segment of the frame is a top-left block, of the mirror the same block (so the mirror
    disagrees), and whose detection boxes the block (so the tasks agree)."""

    def predict_batch(self, frames, task, target, readout=None):
        m = _left_block(frames[0].pixels.shape[:2])
        if task == "segment":
            return [Result("segment", objects=[GroundedObject(target, mask=m.copy())]) for _ in frames]
        return [Result("detect", objects=[GroundedObject(target, box=mask_box(m))]) for _ in frames]


def test_combined_is_the_mean_of_the_flip_and_task_disagreements_not_the_confidence():
    frame = Frame(pixels=np.zeros((32, 48, 3), np.uint8), spacing=None, index=0, source="x")
    signals = uncertainty.image_signals(_Fake(), frame, ["lesion"])
    assert (signals["flip"], signals["task"], signals["confidence"]) == (pytest.approx(1.0), 0.0, 1.0)
    assert signals["combined"] == pytest.approx(0.5) and signals["target"] == "lesion"


def test_a_clip_is_scored_on_its_middle_frame(tmp_path, monkeypatch):
    from types import SimpleNamespace

    from fixtures_imaging import nrrd_cine

    path, _ = nrrd_cine(tmp_path / "clip.nrrd", t=5)
    seen = []
    monkeypatch.setattr(uncertainty, "image_signals", lambda predictor, frame, targets: seen.append(frame.index)
                        or {"confidence": 0.5, "flip": 0.5, "task": 0.5, "combined": 0.5, "target": "lesion"})
    conf = SimpleNamespace(workdir=tmp_path, labels=("lesion",), uncertainty_signal="combined", scoring_sample=0,
                           max_pixels=10**8, max_decoded_bytes=10**9)
    runtime = SimpleNamespace(conf=conf, predictor=lambda: (object(), 1))
    store = SimpleNamespace(get_unlabeled_images=lambda: ["clip"], get_image_uri=lambda i: str(path),
                            update_image_info=lambda i, info: None)
    monkeypatch.setattr(uncertainty, "check_image_budget", lambda uri, conf: None)
    out = uncertainty.UMindUncertainty(runtime)({}, store)
    assert out["scored"] == 1 and seen == [2]  # frames 0..4: the middle one
