"""umind_core.outputs: the label stack and frame markups that `umind infer` and the server's infer tasks share."""

from __future__ import annotations

import numpy as np
import pytest

from umind_core.imageio import Geometry, read_study
from umind_core.outputs import OutputError, box_mask, frame_markups, label_stack
from umind_core.answers.results import GroundedObject, Result

EYE = tuple(float(v) for v in np.eye(3).ravel())
CINE = Geometry("cine", (3, 8, 10), (1.0,) * 3, (0.0,) * 3, EYE, format="nrrd")
FLAT = Geometry("2d", (8, 10), (1.0, 1.0), (0.0, 0.0), (1.0, 0.0, 0.0, 1.0), format="png")


def _mask(y0, y1, x0, x1, shape=(8, 10)):
    m = np.zeros(shape, dtype=bool)
    m[y0:y1, x0:x1] = True
    return m


def _res(frame, *objects, task="segment"):
    return Result(task=task, objects=list(objects), frame_index=frame, source="clip", image_size=(10, 8))


def test_one_value_per_name_across_frames_later_objects_paint_over():
    results = [_res(0, GroundedObject(label="lesion", mask=_mask(0, 4, 0, 4))),
               _res(2, GroundedObject(label="cyst", mask=_mask(0, 8, 0, 10)),
                    GroundedObject(label="lesion", mask=_mask(2, 3, 2, 3)),
                    GroundedObject(mask=_mask(7, 8, 9, 10)))]
    stack = label_stack(results, CINE)
    assert stack.values == {"lesion": 1, "cyst": 2, "object 3": 3}
    assert stack.object_values == [{0: 1}, {0: 2, 1: 1, 2: 3}]
    vol = stack.volume()
    assert vol.shape == (3, 8, 10) and vol.dtype == np.uint8
    assert vol[0, 0, 0] == 1 and vol[0, 5, 5] == 0 and not vol[1].any()  # frame 1 had no answer
    assert vol[2, 2, 2] == 1 and vol[2, 0, 0] == 2 and vol[2, 7, 9] == 3


def test_names_override_labels_and_fallback_names_unlabelled_masks():
    results = [_res(0, GroundedObject(label="nodule", mask=_mask(0, 2, 0, 2))),
               _res(1, GroundedObject(mask=_mask(0, 2, 0, 2)))]
    assert label_stack(results, CINE, names=["thyroid", None]).values == {"thyroid": 1, "object 1": 2}
    assert label_stack(results, CINE, names=[None, None], fallback="lesion").values == {"nodule": 1, "lesion": 2}


def test_boxes_fill_only_when_asked_and_empty_answers_allocate_nothing():
    results = [_res(0, GroundedObject(label="lesion", box=(1.2, 2.0, 3.0, 4.6)), task="detect")]
    empty = label_stack(results, FLAT)
    assert empty.values == {} and empty.array is None
    assert empty.volume().shape == (8, 10) and not empty.volume().any()  # a 2D image's map is its one frame
    filled = label_stack(results, FLAT, fill_boxes=True).volume()
    assert filled.shape == (8, 10) and filled.sum() == 4 * 3 and filled[2:6, 1:4].all() and filled[4, 2] == 1
    assert box_mask((-5, -5, 100, 1), 8, 10).sum() == 2 * 10


def test_values_past_255_widen_to_uint16_and_masks_of_another_size_are_refused():
    objs = [GroundedObject(label=f"t{i}", mask=_mask(i % 8, i % 8 + 1, 0, 10)) for i in range(300)]
    stack = label_stack([_res(0, *objs)], CINE)
    assert stack.volume().dtype == np.uint16 and int(stack.volume().max()) == 300
    with pytest.raises(OutputError, match="clip: frame 1 has masks of shape \\(4, 4\\)"):
        label_stack([_res(1, GroundedObject(mask=np.ones((4, 4), dtype=bool)))], CINE)


def test_markups_carry_the_frame_only_on_multi_frame_inputs():
    res = [_res(1, GroundedObject(label="lesion", box=(1, 1, 4, 4)), task="detect")]
    (m,) = frame_markups(res, CINE)
    assert m["type"] == "ROI" and m["name"] == "lesion (frame 1)"
    (m,) = frame_markups([_res(0, GroundedObject(label="lesion", box=(1, 1, 4, 4)), task="detect")], FLAT)
    assert m["name"] == "lesion"


def test_written_stack_reads_back_in_place(tmp_path):
    results = [_res(2, GroundedObject(label="lesion", mask=_mask(1, 3, 4, 6)))]
    path = label_stack(results, CINE).write(tmp_path / "labels.nrrd")
    back = read_study(path)
    assert back.geometry.n_frames == 3
    assert back.frames[2].pixels[..., 0][1:3, 4:6].min() > 0 and back.frames[0].pixels.max() == 0


def test_the_256th_name_widens_the_map_to_16_bits():
    from umind_core.painter import LabelPainter

    painter = LabelPainter((4, 4))
    for k in range(256):
        mask = np.zeros((4, 4), bool)
        mask[k % 4, (k // 4) % 4] = True
        value = painter.paint(f"structure {k}", mask)
    assert value == 256 and painter.array.dtype == np.uint16
    assert painter.array.max() == 256 and painter.values["structure 255"] == 256
