"""The views of one examination outside the model: which site each shows, whether they agree, and one view's share
of an examination's answer.

Why here: the server (`monailabel_app/lib/exam.py`) and `umind infer --exam` both read several images as one
examination, refuse views of different sites and write each view's objects onto that view; one module owns
those rules so that both say the same thing about the same files.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from .data.manifest import MAX_EXAM_VIEWS, site_conflict
from .imageio import Study
from .answers.results import Result

__all__ = ["MAX_EXAM_VIEWS", "ExamViewError", "check_view_sites", "study_site", "view_result"]


class ExamViewError(ValueError):
    """Views that cannot be read as one examination; the message names the view and the problem."""


def study_site(study: Study, recorded: str | None = None) -> str | None:
    """The site a view shows: what its record says, else a DICOM's BodyPartExamined (lower case), else None."""
    if recorded:
        return recorded
    part = str(study.meta.get("BodyPartExamined") or "").strip().lower()
    return part or None


def check_view_sites(names: Sequence[str], sites: Sequence[str | None]) -> None:
    """Refuse views of different sites (`manifest.site_conflict`, the rule `umind check` applies to manifests)."""
    conflict = site_conflict(list(sites))
    if conflict:
        i, shown, site = conflict
        raise ExamViewError(f"view {i + 1} ({names[i]!r}) shows {shown!r}, an earlier view {site!r}: the views of "
                            "one examination show one site")


def view_result(result: Result, k: int, frame_index: int, image_size: tuple[int, int] | None) -> Result:
    """View `k`'s objects of an examination's answer as a single-frame Result of that view (no ``view`` on its
    objects), which the single-image writers (markups, label maps) take as they are; an unreadable answer stays
    unreadable, so they write nothing for it, as for one image."""
    return Result(task=result.task, objects=[replace(o, view=None) for o in result.objects if o.view == k],
                  frame_index=frame_index, image_size=image_size, unparsable=result.unparsable)
