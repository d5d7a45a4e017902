"""The finding classes: what a diagnosis may say, in one list.

A person's correction (the Slicer module's finding box, the label info's ``finding``), the trainer that turns it
into a diagnose answer, the server's ``class`` of a diagnose answer and the evaluation's diagnosis score all
speak of the same classes. They were spelled out in each of those places and could drift (a fourth class added
to the Slicer box would be skipped by the trainer without a word), so they live here and the others import them.

The Slicer module cannot import umind_core inside Slicer: its copy (``UMindLib/contract.py``) and the finding
box of ``UMind.ui`` are held to `FINDINGS` by tests/test_one_owner.py, as is the wire contract of the app
(``monailabel_app/lib/wire.py``), which re-exports this list.
"""

from __future__ import annotations

__all__ = ["FINDINGS", "SCORED_FINDINGS", "normal_finding", "answer_finding"]

#: what the finding of an image may be, in the order the Slicer module offers them
FINDINGS: tuple[str, ...] = ("normal", "benign", "malignant")
#: the classes the evaluation scores: benign vs malignant images only, as the report's Table 5 does (an image
#: without a lesion has no benign/malignant truth to score)
SCORED_FINDINGS: tuple[str, ...] = ("benign", "malignant")
#: the order `answer_finding` looks for the classes in: the gravest first, so "malignant, not benign" is malignant
_BY_GRAVITY: tuple[str, ...] = ("malignant", "benign", "normal")


def normal_finding(value: object) -> str | None:
    """A finding as sent ("Benign ") in its one spelling ("benign"), or None when it names no class."""
    if not isinstance(value, str):
        return None
    low = value.strip().lower()
    return low if low in FINDINGS else None


def answer_finding(text: str) -> str | None:
    """The class a diagnose answer names (the server's ``class`` of an answer): the gravest class whose word
    occurs in it, so a hedged "malignant, not benign" is not read as benign; None when it names none."""
    low = (text or "").lower()
    return next((c for c in _BY_GRAVITY if c in low), None)
