"""The views of one examination outside the model: which site each shows, whether they agree, and one view's share
of an examination's answer.

Why here: the server (`monailabel_app/lib/exam.py`) and `umind infer --exam` both read several images as one
examination, refuse views of different sites and write each view's objects onto that view; one module owns
those rules so that both say the same thing about the same files.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from .answers.results import Result
from .data.manifest import MAX_EXAM_VIEWS, MIN_EXAM_VIEWS, site_conflict
from .imageio import Frame, Study

__all__ = ["MAX_EXAM_VIEWS", "MIN_EXAM_VIEWS", "ExamViewError", "StudyView", "check_view_count", "check_view_sites",
           "study_site", "view_result"]

class ExamViewError(ValueError):
    """Views that cannot be read as one examination; the message names the view and the problem."""


@dataclass
class StudyView:
    """One view of an examination as a request reads it (`umind infer --exam`, the server's exam request): where it
    came from (a path, a datastore id), the study read from it, the frame that is the view, and what the reader is
    told about it (a clip read at one frame). A manifest's view is `data.manifest.View`, which holds a file and
    its annotations rather than pixels."""
    source: str
    study: Study
    frame: Frame
    notes: list[str] = field(default_factory=list)


def check_view_count(count: int, what: str, cap: int = MAX_EXAM_VIEWS,
                     cap_rule: str = "the model reads at once") -> None:
    """Refuse an examination of fewer than MIN_EXAM_VIEWS views or more than `cap` (`cap_rule` says whose cap: the
    model's, or a server's `max_exam_views`); `what` says what was counted, so the message names it."""
    if count < MIN_EXAM_VIEWS:
        raise ExamViewError(f"an examination needs at least {MIN_EXAM_VIEWS} views; it has {count} ({what})")
    if count > cap:
        raise ExamViewError(f"the examination has {count} views ({what}), more than the {cap} {cap_rule}; "
                            "choose fewer")


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
