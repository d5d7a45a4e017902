"""The finding classes: what a diagnosis may say, in one list.

A person's correction (the Slicer module's finding box, the label info's ``finding``), the trainer that turns it
into a diagnose answer, the server's ``class`` of a diagnose answer and the evaluation's diagnosis score all
speak of the same classes. They were spelled out in each of those places and could drift (a fourth class added
to the Slicer box would be skipped by the trainer without a word), so they live here and the others import them.

The Slicer module cannot import umind_core inside Slicer: its copy (``UMindLib/contract.py``) and the finding
box of ``UMind.ui`` are held to `FINDINGS` by tests/test_one_owner.py, as is the wire contract of the app
(``monailabel_app/lib/wire.py``), which re-exports this list.

The words datasets use for the classes (a COCO category "malignant", a folder "benign", "cancer") live here too
(`FINDING_WORDS`, read through `finding_word`): an importer that meets one makes it the record's diagnosis with a
lesion object, instead of an object called "benign" that teaches the word as a thing to draw.
"""

from __future__ import annotations

import re

__all__ = ["FINDINGS", "SCORED_FINDINGS", "FINDING_WORDS", "normal_finding", "answer_finding", "finding_word",
           "gravest"]

#: what the finding of an image may be, in the order the Slicer module offers them
FINDINGS: tuple[str, ...] = ("normal", "benign", "malignant")
#: the classes the evaluation scores: benign vs malignant images only, as the report's Table 5 does (an image
#: without a lesion has no benign/malignant truth to score)
SCORED_FINDINGS: tuple[str, ...] = ("benign", "malignant")
#: the order `answer_finding` looks for the classes in: the gravest first, so "malignant, not benign" is malignant
_BY_GRAVITY: tuple[str, ...] = ("malignant", "benign", "normal")


#: what datasets call the classes (a COCO category, a class folder): a word, or a word and a lesion noun, names the
#: finding and not an object to draw. "malignant nodule" is malignant; a plain "nodule" names no finding.
FINDING_WORDS: dict[str, str] = {
    "normal": "normal", "healthy": "normal", "no lesion": "normal", "no finding": "normal",
    "benign": "benign", "benignant": "benign", "non malignant": "benign", "nonmalignant": "benign",
    "malignant": "malignant", "malignancy": "malignant", "malign": "malignant", "cancer": "malignant",
    "cancerous": "malignant", "carcinoma": "malignant",
}
#: nouns that may follow a finding word in a class name ("benign lesion", "malignant tumour")
_LESION_NOUNS = ("lesion", "lesions", "tumor", "tumour", "tumors", "tumours", "nodule", "nodules", "mass", "masses",
                 "case", "cases", "image", "images")


def finding_word(name: object) -> str | None:
    """The finding a dataset's class name stands for ("Malignant", "benign_tumour", "healthy", "cancer"), in
    FINDINGS' spelling, or None when the name is an object ("thyroid nodule", "carotid artery")."""
    if not isinstance(name, str):
        return None
    words = name.replace("_", " ").replace("-", " ").lower().split()
    if len(words) > 1 and words[-1] in _LESION_NOUNS:
        words = words[:-1]
    return FINDING_WORDS.get(" ".join(words))


def gravest(findings) -> str | None:
    """The gravest of several findings (malignant, then benign, then normal): an image's finding from its lesions'
    (one malignant lesion makes a malignant image); None when none is a class."""
    spelt = {normal_finding(f) for f in findings}
    return next((c for c in _BY_GRAVITY if c in spelt), None)


def normal_finding(value: object) -> str | None:
    """A finding as sent ("Benign ") in its one spelling ("benign"), or None when it names no class."""
    if not isinstance(value, str):
        return None
    low = value.strip().lower()
    return low if low in FINDINGS else None


#: a class word as an answer writes it ("Malignant", "malignancy", "benign"); the word's class is its stem's
_ANSWER_WORD = re.compile(r"\b(malignan\w*|benign\w*|normal)\b", re.I)
#: words that negate the class word right after them ("not malignant", "no malignancy", "non-malignant")
_NEGATIONS = ("not", "no", "non", "without")


def answer_finding(text: str) -> str | None:
    """The class a diagnose answer names, the one reading of an answer (the server's ``class``, the evaluation's
    diagnosis): the first class word that is not negated by the word before it. "Benign, not malignant." is
    benign, "malignant, not benign" malignant, "Suspicious for malignancy." malignant; "Not malignant." names no
    class (it does not say which other one), nor does an answer without a class word. The model's own answers
    start with the class word ("Benign."), which is what training teaches."""
    for m in _ANSWER_WORD.finditer(text or ""):
        before = re.findall(r"[a-z]+", text[:m.start()].lower())
        if before and before[-1] in _NEGATIONS:
            continue
        word = m.group(1).lower()
        return "malignant" if word.startswith("malignan") else "benign" if word.startswith("benign") else word
    return None
