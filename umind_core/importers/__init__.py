"""Importers: published dataset layouts -> our manifest (`umind import FORMAT SOURCE --out DIR`).

One module per source layout, each with ``DESCRIPTION`` and ``read(source, ctx) -> list[Record]``;
`FORMATS` maps the command's FORMAT to it. What all of them share (ids, image and mask files, the label-map and
lesion-components rules, the skip log, the split by group, the manifest write and its check) is in `common`, so a
rule changes in one place. Readers never build conversations: `import_dataset` hands the written manifest to the one
conversation builder (`data.conversations.attach_conversations`).
"""

from __future__ import annotations

import importlib
from pathlib import Path
from types import ModuleType
from typing import Sequence

from .common import ImportContext, ImportFailure, ImportLog, ImportSummary, RowSkipped, SourceError

__all__ = ["FORMATS", "reader", "import_dataset", "ImportSummary", "ImportLog", "SourceError", "ImportFailure",
           "RowSkipped"]

#: FORMAT -> module (imported when used, so `umind --help` stays fast)
FORMATS: dict[str, str] = {
    "nnunet": "umind_core.importers.nnunet",
    "coco": "umind_core.importers.coco",
    "ultrabench": "umind_core.importers.ultrabench",
    "csv": "umind_core.importers.csv_labels",
    "slicer": "umind_core.importers.slicer",
    "hc18": "umind_core.importers.hc18",
    "busi": "umind_core.importers.busi",
    "folders": "umind_core.importers.folders",
    "camus": "umind_core.importers.camus",
}


def reader(fmt: str) -> ModuleType:
    """The module that reads FORMAT; ValueError naming the known formats otherwise."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown import format {fmt!r}; choose one of {', '.join(FORMATS)}")
    return importlib.import_module(FORMATS[fmt])


def _check_out(out: Path, merge: Path | None) -> None:
    """An import never writes over another one (a stale image would be read as this import's), except a CSV
    merged back into the import it came from."""
    if merge is not None and out.resolve() == merge.resolve():
        return
    if out.exists() and not out.is_dir():
        raise ImportFailure(f"--out {out} is a file, not a folder")
    if (out / "manifest.jsonl").exists():
        raise ImportFailure(f"--out {out} already holds an import (manifest.jsonl); choose a new folder")


def import_dataset(fmt: str, source: str | Path, out: str | Path, *, images: str | Path | None = None,
                   merge: str | Path | None = None, site: str | None = None, conversations: bool = True,
                   tasks: Sequence[str] | None = None, seed: int = 0, progress: bool = True,
                   split: str | None = None, split_seed: int = 0,
                   lesion_masks: str | None = None, label: str | None = None,
                   mask_suffix: str | None = None) -> ImportSummary:
    """Read SOURCE in FORMAT and write the import into OUT (layout: `common.finish`).

    `split` ``NAME=FRACTION`` puts that fraction of the groups the source leaves unsplit into split NAME and the
    rest into "train" (`common.assign_split`, seeded by `split_seed`); `lesion_masks` is the busi reader's
    "apart" (default) or "merged"; `label` and `mask_suffix` are the folders reader's (the masks' label, the text
    between an image's name and its mask's). SourceError for a source that cannot be read at all, ImportFailure
    when nothing can be written; bad rows are skipped and listed in the summary's log instead.
    """
    from .common import assign_split, finish, parse_split

    mod = reader(fmt)
    source, out = Path(source), Path(out)
    merge_dir = None if merge is None else Path(merge)
    if merge_dir is not None and fmt != "csv":
        raise ValueError("--merge applies to the csv format only")
    if lesion_masks is not None and fmt != "busi":
        raise ValueError("--lesion-masks applies to the busi format only")
    if (label is not None or mask_suffix is not None) and fmt != "folders":
        raise ValueError("--label and --mask-suffix apply to the folders format only")
    held_out = None if split is None else parse_split(split)
    if not source.exists():
        raise SourceError(f"{source}: no such file or folder")
    _check_out(out, merge_dir)
    ctx = ImportContext(out=out, progress=progress, site=site,
                        options={"images": images, "merge": merge_dir, "lesion_masks": lesion_masks,
                                 "label": label, "mask_suffix": mask_suffix})
    records = mod.read(source, ctx)
    if held_out is not None and records:
        assign_split(records, *held_out, seed=split_seed)
    return finish(ctx, records, conversations=conversations, seed=seed, tasks=tasks)
