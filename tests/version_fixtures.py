"""Versions made offline for tests: a model folder with a copied base (what conf `model` names) and LoRA versions
on it, recorded in a workdir as the train task records them, without running a training."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "monailabel_app"))

from umind_core.base_ref import write_ref  # noqa: E402
from umind_core.versions import VersionStore  # noqa: E402

GATE_TABLE = "set | task | before | after\nnew labels | segment | 0.50 | 0.10"


def save_conf_model(factory, folder: Path) -> Path:
    """A fully trained-style tiny model (no adapter, base copied inside) saved at `folder`."""
    factory(lora=None).save_pretrained(folder)
    return folder


def make_version(store: VersionStore, conf_model: Path, version: int, status: str) -> Path:
    """Version `version` as the train task leaves it: a fresh adapter on `conf_model`'s base, referred to by
    absolute path and base_ref.json, and a run record (`status`: promoted or rejected)."""
    from umind_core.modeling.umind import UMindVL

    model = UMindVL.from_pretrained(conf_model)
    model.attach_lora()
    folder = store.version_dir(version) / "model"
    model.save_pretrained(folder)
    write_ref(folder, store.workdir, store.hashes)
    run = {"version": version, "base_version": 0, "status": status, "labels_seen": 0, "seconds": 1.0,
           "reason": "segment got worse on new labels" if status == "rejected" else "no task got worse",
           "gate_table": GATE_TABLE}
    store.record_run(run, promote=status == "promoted")
    return folder
