"""The views of one examination outside the model: which site each shows, whether they agree, and one view's share
of an examination's answer.

Why here: the server (`monailabel_app/lib/exam.py`) and `umind infer --exam` both read several images as one
examination, refuse views of different sites and write each view's objects onto that view; one module owns
those rules so that both say the same thing about the same files.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from .answers.results import Result
from .data.manifest import MAX_EXAM_VIEWS, MIN_EXAM_VIEWS, Record, View, site_conflict
from .frames import current_frame
from .imageio import Frame, Study

__all__ = ["MAX_EXAM_VIEWS", "MIN_EXAM_VIEWS", "ExamRead", "ExamViewError", "check_view_count", "check_view_sites",
           "read_views", "study_site", "view_frame", "view_result"]


class ExamViewError(ValueError):
    """Views that cannot be read as one examination; the message names the view and the problem."""


@dataclass
class ExamRead:
    """An examination as a request read it (`umind infer --exam`, the server's exam request): its `record`, whose
    views are the manifest's own `View` (where each came from, the frame that is the view, its spacing and site),
    and beside each view the study read for it and what the reader is told about it (a clip read at one frame).
    Why a record: a view means one thing wherever it is read, and the rules on views (count, one site) are the
    record's; the pixels stay beside it, as a manifest keeps them in files."""
    record: Record
    studies: list[Study]
    notes: list[list[str]]

    @property
    def views(self) -> list[View]:
        return self.record.views

    @property
    def frames(self) -> list[Frame]:
        return [study.frames[v.frame] for v, study in zip(self.record.views, self.studies)]


def view_frame(study: Study, current: int | None = None) -> tuple[int, list[str]]:
    """The frame of a study read as one view: `current` where it is a frame of the study (a client's current
    frame), else the frame a viewer opens on; a clip read as one view says so."""
    n = study.geometry.n_frames
    k = current_frame(study.geometry.kind, n, current if current is not None and 0 <= current < n else None)
    return k, [] if n == 1 else [f"a clip of {n} frames: frame {k} was read as the view"]


def read_views(sources: Sequence[str], studies: Sequence[Study], frames: Sequence[int],
               notes: Sequence[list[str]] | None = None, sites: Sequence[str | None] | None = None,
               what: str = "views", cap: int = MAX_EXAM_VIEWS,
               cap_rule: str = "the model reads at once") -> ExamRead:
    """The examination of view k = frame `frames[k]` of `studies[k]`, read from `sources[k]` (a path, a datastore
    id), checked: the view count (`check_view_count`, `what` names what was counted) and one site (`sites[k]`, what
    a record says, else the study's own; `check_view_sites`). ExamViewError names the problem."""
    sites = list(sites) if sites is not None else [None] * len(sources)
    notes = [list(n) for n in notes] if notes is not None else [[] for _ in sources]
    if not len(sources) == len(studies) == len(frames) == len(sites) == len(notes):  # zip would drop views
        raise ValueError(f"one study, frame, site and notes per view: {len(sources)} views, {len(studies)} studies, "
                         f"{len(frames)} frames, {len(sites)} sites, {len(notes)} notes")
    check_view_count(len(sources), what, cap, cap_rule)
    shown = [study_site(study, recorded) for study, recorded in zip(studies, sites)]
    check_view_sites(list(sources), shown)
    views = [View(image=str(src), frame=int(k), spacing=study.frames[k].spacing, site=site)
             for src, study, k, site in zip(sources, studies, frames, shown)]
    record = Record(id=str(sources[0]), views=views, site=next((s for s in shown if s), None))
    return ExamRead(record, list(studies), notes)


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
