"""CAMUS (Leclerc et al. 2019, IEEE TMI 38(9): 2198-2210; echocardiography, 500 patients) -> manifest records.

Layout read, SOURCE being any folder above the patient folders (the release's ``database_nifti/``, or
``training/`` and ``testing/``): ``patientNNNN/patientNNNN_{2CH,4CH}_{ED,ES}<ending>`` with the label map
``patientNNNN_{2CH,4CH}_{ED,ES}_gt<ending>`` beside it, ``<ending>`` being ``.nii.gz`` (the 2023 NIfTI release),
``.nii``, ``.mha`` or ``.mhd``, and ``Info_{2CH,4CH}.cfg`` (``ImageQuality: Good``...).

What a record holds, decided here:
- site "heart"; the label values 1, 2, 3 are "left ventricle" (the LV endocardium's inside), "myocardium" (the ring
  between the LV endocardium and epicardium) and "left atrium", named by the one table the UltraBench import of
  CAMUS uses too (`ultrabench.VALUE_NAMES`), one object per value; any other value is unnamed and counted;
- the patient is the record's group (``patientNNNN``), so ``--split test=0.2`` keeps a patient's four images on
  one side; the view (``2CH``/``4CH``), the phase (``ED``/``ES``) and the cfg's ``ImageQuality`` go to the
  record's "labels";
- an image under a folder named ``testing`` or ``test`` is of split "test" (`umind train` never reads it); one
  there without its ``_gt`` is an unlabelled test record; one elsewhere without its ``_gt`` is skipped with a reason;
- the cine sequences (``_half_sequence``, ``_sequence``) are not imported: the model reads single frames, and the
  ED and ES frames of the sequence are the annotated images already. They are counted as left out.
- MetaImage follows `imageio.opening`'s rule: a ``.mhd`` whose ``ElementDataFile`` names a ``.raw`` (as the 2019
  release ships) is refused with a reason naming it, never read through; convert such a copy to ``.mha`` or
  ``.nii.gz`` first (SimpleITK: ``sitk.WriteImage(sitk.ReadImage(p), p.replace('.mhd', '.mha'))``).
"""

from __future__ import annotations

import re
from pathlib import Path

from ..data.manifest import Annotations, Record
from ..data.split import GROUP_KEY
from .common import ImportContext, RowSkipped, SourceError, label_map_at, split_label_map
from .ultrabench import SITES, VALUE_NAMES

DESCRIPTION = "CAMUS folder (patientNNNN/patientNNNN_{2CH,4CH}_{ED,ES}.nii.gz with _gt label maps; .mha/.mhd too)"

SITE = SITES["camus"]
LABELS = VALUE_NAMES[("camus", "mask")]
ENDINGS = (".nii.gz", ".nii", ".mha", ".mhd")
TEST_FOLDERS = ("testing", "test")
_PATIENT = re.compile(r"^patient\d+$", re.IGNORECASE)
_FILE = re.compile(r"^(?P<patient>patient\d+)_(?P<view>[24]CH)_(?P<rest>.+?)(?P<ending>\.nii\.gz|\.nii|\.mha|\.mhd)$",
                   re.IGNORECASE)


def _patients(source: Path) -> list[Path]:
    if not source.is_dir():
        raise SourceError(f"{source}: not a folder (expected CAMUS's patientNNNN/ folders)")
    found = sorted((p for p in [source, *source.rglob("patient*")] if p.is_dir() and _PATIENT.match(p.name)),
                   key=lambda p: p.as_posix())
    if not found:
        raise SourceError(f"{source}: no patientNNNN/ folder here or below")
    return found


def _quality(folder: Path, view: str) -> str | None:
    """``ImageQuality`` of Info_<view>.cfg (``key: value`` lines), where the file is there."""
    cfg = folder / f"Info_{view}.cfg"
    try:
        lines = cfg.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return None
    for line in lines:
        key, sep, value = line.partition(":")
        if sep and key.strip().lower() == "imagequality" and value.strip():
            return value.strip()
    return None


def _record(ctx: ImportContext, image: Path, gt: Path | None, rel: str, patient: str, view: str, phase: str,
            split: str | None, quality: str | None) -> Record:
    rid = ctx.new_id(image.name[: -len(_FILE.match(image.name).group("ending"))])
    placed = ctx.place_image(image, rid)
    objects = [] if gt is None else ctx.mask_objects(split_label_map(label_map_at(gt, placed), LABELS, ctx.log), rid)
    labels = {"view": view, "phase": phase}
    if quality:
        labels["quality"] = quality
    extra = {GROUP_KEY: patient, "labels": labels, "labelled": gt is not None,
             "source": {"format": "camus", "path": rel, **({"label": rel.replace(image.name, gt.name)} if gt else {})}}
    if split:
        extra["split"] = split
    return Record(id=rid, image=placed.rel, spacing=placed.spacing, site=ctx.site or SITE,
                          annotations=Annotations(objects=objects), extra=extra, root=ctx.out)


def read(source: Path, ctx: ImportContext) -> list[Record]:
    """Every ED and ES image of every patient folder (in path order) as a record."""
    jobs, sequences = [], 0
    for folder in _patients(source):
        above = folder.resolve().relative_to(source.resolve().parent).parts[:-1]  # SOURCE's name included
        split = "test" if any(name.lower() in TEST_FOLDERS for name in above) else None
        files = {p.name: p for p in folder.iterdir() if p.is_file()}
        for name, path in sorted(files.items()):
            m = _FILE.match(name)
            rel = path.relative_to(source.parent if folder == source else source).as_posix()
            if m is None:
                if not (name.lower().startswith("info_") or name.lower().endswith(".raw")):
                    ctx.log.skip(rel, "not a CAMUS image or label file")
                continue
            rest = m.group("rest").upper()
            if rest in ("ED_GT", "ES_GT"):
                if name.replace("_gt", "").replace("_GT", "") not in files:
                    ctx.log.skip(rel, "label map without its image")
                continue
            if "SEQUENCE" in rest:
                sequences += 1
                continue
            if rest not in ("ED", "ES"):
                ctx.log.skip(rel, "not a CAMUS image or label file")
                continue
            stem = name[: -len(m.group("ending"))]
            gt = files.get(f"{stem}_gt{m.group('ending')}")
            if gt is None and split is None:
                ctx.log.skip(rel, "no _gt label map beside the image")
                continue
            view = m.group("view").upper()
            jobs.append((path, gt, rel, m.group("patient"), view, rest, split, _quality(folder, view)))
    if sequences:
        ctx.log.drop("cine sequence (the ED and ES frames are imported as single images)", sequences)
    records = []
    for job in ctx.bar(jobs, "camus"):
        rec = ctx.attempt(job[2], _record, ctx, *job)
        if rec is not None:
            records.append(rec)
    return records
