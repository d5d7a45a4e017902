"""The server's settings at their edges (`lib/conf.py`) and a train request's values (`lib/wall/task_requests.py`):
each refused with its name before the server starts or before a task is queued."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "monailabel_app"))

from lib.conf import ConfError, TrainParams, check_command_line, parse_conf  # noqa: E402
from lib.wall.task_requests import check_task_request  # noqa: E402


@pytest.fixture
def studies(tmp_path) -> str:
    (tmp_path / "studies").mkdir()
    return str(tmp_path / "studies")


def test_a_workdir_anywhere_inside_the_source_tree_is_refused(studies):
    for inside in (ROOT, ROOT / "runs" / "work"):
        with pytest.raises(ConfError, match="inside the source tree"):
            parse_conf({"workdir": str(inside)}, studies)


def test_max_exam_views_is_capped_by_what_the_model_reads():
    from umind_core.data.manifest import MAX_EXAM_VIEWS

    assert parse_conf({"max_exam_views": str(MAX_EXAM_VIEWS)}, "/nonexistent/studies").max_exam_views == MAX_EXAM_VIEWS
    with pytest.raises(ConfError, match=f"max_exam_views must be at most {MAX_EXAM_VIEWS}"):
        parse_conf({"max_exam_views": str(MAX_EXAM_VIEWS + 1)}, "/nonexistent/studies")


@pytest.mark.parametrize("value", ["nan", "inf", "-inf"])
def test_a_number_setting_must_be_finite(value):
    with pytest.raises(ConfError, match=f"batch_window_ms must be finite, got '{value}'"):
        parse_conf({"batch_window_ms": value}, "/nonexistent/studies")


def test_image_dirs_must_be_absolute(tmp_path, monkeypatch):
    (tmp_path / "rel").mkdir()
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfError, match="image_dirs must list existing absolute folders, 'rel' is not one"):
        parse_conf({"image_dirs": "rel"}, "/nonexistent/studies")
    assert parse_conf({"image_dirs": str(tmp_path / "rel")}, "/nonexistent/studies").image_dirs == (
        (tmp_path / "rel").resolve(),)


def test_the_last_conf_pair_of_a_command_line_is_checked(studies):
    assert check_command_line(["--conf", "max_exam_views", "2"], studies) is None
    error = check_command_line(["--app", "x", "--conf", "max_exam_views", "9"], studies)
    assert error is not None and "max_exam_views" in error


class _Versions:
    """Two versions; the gate rejected version 2."""

    def available(self):
        return [1, 2]

    def run_of(self, v):
        return {"status": "rejected", "reason": "mIoU fell"} if v == 2 else {"status": "promoted"}


def _app():
    return SimpleNamespace(_trainers={"umind_lora": object()}, _scoring_methods={},
                           umind_conf=SimpleNamespace(train=TrainParams()),
                           runtime=SimpleNamespace(versions=_Versions()))


def test_a_train_tasks_own_values_are_parsed_as_the_top_levels():
    check_task_request("train", {"umind_lora": {"max_steps": "5"}}, None, _app())
    for request in ({"max_steps": "-1"}, {"umind_lora": {"max_steps": "-1"}}):
        with pytest.raises(Exception) as info:
            check_task_request("train", request, None, _app())
        assert info.value.status_code == 400 and "max_steps" in info.value.detail


def test_rolling_back_to_a_rejected_version_needs_force():
    check_task_request("train", {"rollback": 1}, None, _app())
    check_task_request("train", {"rollback": 2, "force": True}, None, _app())
    with pytest.raises(Exception) as info:
        check_task_request("train", {"rollback": 2}, None, _app())
    assert info.value.status_code == 400 and "rejected by the gate (mIoU fell)" in info.value.detail
