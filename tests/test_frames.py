"""umind_core.frames: one frame-spec grammar and one "current" for the CLI and the server (the Slicer module's
copy of "current" is held to it in tests/test_one_owner.py; the module sends no other spec than current or all)."""

from __future__ import annotations

import numpy as np
import pytest

from umind_core.frames import FrameSpecError, current_frame, parse_frames
from umind_core.imageio import Geometry

EYE = tuple(float(v) for v in np.eye(3).ravel())


def _geo(kind: str, n: int) -> Geometry:
    if kind == "2d":
        return Geometry("2d", (20, 20), (1.0, 1.0), (0.0, 0.0), (1.0, 0.0, 0.0, 1.0))
    return Geometry(kind, (n, 20, 20), (1.0,) * 3, (0.0,) * 3, EYE, format="nrrd")


def test_current_is_the_clients_frame_else_the_one_slicer_opens_on():
    vol, cine, flat = _geo("volume", 7), _geo("cine", 7), _geo("2d", 1)
    assert current_frame("volume", 7) == 3 and current_frame("cine", 7) == 0 and current_frame("volume", 7, 5) == 5
    spec = parse_frames("current")
    assert spec.select(vol) == [3] and spec.select(cine) == [0] and spec.select(flat) == [0]
    assert spec.select(vol, current=6) == [6] and spec.select(cine, current=2) == [2]
    with pytest.raises(FrameSpecError, match="current frame 7 is out of range"):
        spec.select(cine, current=7)


def test_grammar_strings_integers_and_lists():
    cine = _geo("cine", 7)
    assert parse_frames(None).select(cine) == list(range(7))
    assert parse_frames(" ALL ").select(cine) == list(range(7))
    assert parse_frames("2 : 4").select(cine) == parse_frames("2-4").select(cine) == [2, 3, 4]
    assert parse_frames(3).select(cine) == [3] and str(parse_frames(3)) == "3"
    assert parse_frames([5, 1, 5]).select(cine) == [1, 5] and str(parse_frames([5, 1])) == "1,5"
    for bad in ("x", "-3", "1.5", "4-2", "", True, [], [1, True], 2.0, -1, [0, -2]):
        with pytest.raises(FrameSpecError, match="frames"):
            parse_frames(bad)
    with pytest.raises(FrameSpecError, match="--frames 'x'"):
        parse_frames("x", option="--frames")


def test_past_the_end_is_clipped_or_refused_as_the_caller_says():
    cine = _geo("cine", 7)
    assert parse_frames("5-99").select(cine) == [5, 6]
    assert parse_frames("5-").select(cine, past_end="refuse") == [5, 6]  # an open end never runs past
    with pytest.raises(FrameSpecError, match="frames 0-100000000 ends past the last frame.*out of range"):
        parse_frames("0-100000000").select(cine, past_end="refuse")
    for past_end in ("clip", "refuse"):
        with pytest.raises(FrameSpecError, match="c: frames 9 starts past the last frame.*out of range"):
            parse_frames("9").select(cine, "c", past_end=past_end)
    with pytest.raises(FrameSpecError, match="frame 8 is out of range"):
        parse_frames([1, 8]).select(cine)


def test_a_refused_range_may_end_on_the_last_frame_but_not_one_past_it():
    cine = _geo("cine", 7)  # frames 0..6; a range's stop is inclusive
    assert parse_frames("4-6").select(cine, past_end="refuse") == [4, 5, 6]
    with pytest.raises(FrameSpecError, match="frame 7 is out of range"):
        parse_frames("4-7").select(cine, past_end="refuse")
