"""BUSI (Breast Ultrasound Images, Al-Dhabyani et al. 2020, Data in Brief 28: 104863) -> manifest records.

Layout read: class folders ``benign/``, ``malignant/`` and ``normal/`` (SOURCE, or the one folder inside it that
holds them, as the release's ``Dataset_BUSI_with_GT/``), each holding ``benign (N).png`` and, in the original
release, the lesion's masks beside it: ``benign (N)_mask.png`` and, where the image shows more than one lesion,
``benign (N)_mask_1.png``, ``_mask_2.png``... A copy without masks (images only) reads as the finding alone.

This is `folders` (the general folder-pattern reader, which owns the pairing, mask and finding rules) with BUSI's
three class folders and site fixed, so ``umind import busi`` and ``umind import folders --site breast`` read the
release alike. What a record holds:
- site "breast"; the folder is the finding (``annotations.diagnosis``, in `findings.FINDINGS`' spelling), as the
  synthetic breast site stores it, and each lesion object carries it too;
- benign and malignant: one "breast lesion" object per mask file (the release draws one lesion per file, so a
  lesion drawn in two pieces stays one lesion), or with ``lesion_masks="merged"`` one object for the union of an
  image's masks. An empty mask file makes no object (counted as left out);
- normal: no lesion and no object; a normal image's mask that holds pixels is left out and counted;
- no group key: BUSI names no patient, so each image is its own group when `umind import --split` splits (the
  release holds a few near-duplicate images that a split by image cannot keep together).
A mask file is recognised by its name before anything is read and is never imported as an image; a mask without its
image, a mask of another size than its image and an unreadable file are skipped with a reason.
"""

from __future__ import annotations

from pathlib import Path

from ..data.manifest import Record
from .common import ImportContext, lesion_label
from .folders import LESION_MASKS, read_units

DESCRIPTION = "BUSI folder (benign/, malignant/, normal/ with 'benign (N).png' and optional '_mask.png' files)"

SITE = "breast"
LABEL = lesion_label(SITE)
CLASSES = ("benign", "malignant", "normal")
__all__ = ["DESCRIPTION", "SITE", "LABEL", "CLASSES", "LESION_MASKS", "read"]


def read(source: Path, ctx: ImportContext) -> list[Record]:
    """Every image of every class folder, class by class."""
    records, with_masks = read_units(source, ctx, "busi", site=ctx.site or SITE, classes=CLASSES)
    if records and not with_masks:
        ctx.log.drop("lesion masks: none in this copy (mask-less layout: the finding only)", len(records))
    return records
