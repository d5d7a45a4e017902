"""The server's request parameters read without a server: targets, prompts, clicks and IJK indices."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "monailabel_app"))

from lib.params import ijk_to_frame, parse_prompt, parse_targets, visual_prompt  # noqa: E402
from lib.wall.errors import BadRequest  # noqa: E402


def test_targets_are_split_trimmed_and_named_once():
    assert parse_targets("prompt", "lesion, lesion; cyst\nlesion ") == ["lesion", "cyst"]
    assert parse_targets("prompt", ["cyst", " cyst", "lesion"]) == ["cyst", "lesion"]
    assert parse_targets("prompt", None) == [None] and parse_targets("prompt", " , ;") == [None]


def test_the_target_cap_counts_items_before_parsing_and_not_empty_ones():
    assert parse_targets("prompt", "a,,, ,b", limit=2) == ["a", "b"]  # blanks are not targets
    with pytest.raises(BadRequest, match="max_targets = 2"):
        parse_targets("prompt", "a,a,a", limit=2)  # repeats still cost the parse: counted before deduplication
    with pytest.raises(BadRequest, match="max_targets = 2"):
        parse_targets("prompt", ["a", "b", "c"], limit=2)


@pytest.mark.parametrize("char", ["\x00", "\x1b", "\x7f"])
def test_a_prompt_with_a_control_character_is_refused_naming_it(char):
    with pytest.raises(BadRequest, match=f"U\\+{ord(char):04X}"):
        parse_prompt("prompt", f"kidney{char}")
    assert parse_prompt("prompt", " kidney\tlength\n") == "kidney\tlength"


def test_clicks_are_numbers_not_booleans(tmp_path):
    from fixtures_imaging import sitk_volume
    from umind_core.imageio import read_study

    geometry = read_study(sitk_volume(tmp_path / "s.nrrd", np.zeros((60, 80), np.uint8))).geometry
    for bad in ([True, 3], [1, "2"], [1], [1, 2, 3, 4]):
        with pytest.raises(BadRequest, match=r"each click must be \[i, j\] or \[i, j, k\] numbers"):
            visual_prompt({"foreground": [bad]}, geometry)


def test_an_ijk_index_is_the_frame_along_the_normal_and_x_y_within_it(tmp_path):
    """i runs along columns (x), j along rows (y), k picks the frame of a volume read along k."""
    from fixtures_imaging import sitk_volume
    from umind_core.imageio import read_study

    volume = read_study(sitk_volume(tmp_path / "v.nrrd", np.zeros((3, 60, 80), np.uint8))).geometry
    assert ijk_to_frame(volume, (10.0, 20.0, 1.6)) == (2, 10.0, 20.0)
    flat = read_study(sitk_volume(tmp_path / "f.nrrd", np.zeros((60, 80), np.uint8))).geometry
    assert ijk_to_frame(flat, (10.0, 20.0, 0.0)) == (0, 10.0, 20.0)
