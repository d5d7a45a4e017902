"""How a version folder refers to the Qwen3-VL base it was trained on, so that moving or upgrading the checkout
does not break it.

A version holds only what changed (adapter, decoder, processor); its umind_config.json names the base by the
absolute path it had when the run saved it, which is what `UMindVL.from_pretrained` reads. That path usually lies
inside the checkout (the bundled demo model) or in the conf `model` folder, so moving either broke every version.
Beside the config, `base_ref.json` records what survives a move:

- the SHA-256 of the base's weight files (`*.safetensors`, names and contents), which says whether a folder *is*
  that base (an upgraded checkout whose demo weights changed is not, even at the same path);
- the base's path relative to the workdir, when it lies there (the workdir moves with its versions);
- the path it had when saved.

Resolving (on every load, cheaply: file hashes are cached by path, size and mtime) tries the workdir-relative
path, the path in the config, the saved path, then a search path (the conf `model`, the bundled demo model),
and takes the first folder whose weights hash to the recorded value. When that is not the config's path, the
config is rewritten to point at it (atomically), so the loader, which reads only absolute paths, finds it.
A version without base_ref.json (saved before this existed) is read as before: its absolute path as is.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
from pathlib import Path

from .atomic import write_text

__all__ = ["BaseRefError", "HashCache", "REF_FILE", "base_candidates", "read_ref", "relink", "resolve_base",
           "weights_signature", "write_ref"]

logger = logging.getLogger(__name__)

REF_FILE = "base_ref.json"
CONFIG_FILE = "umind_config.json"  # umind_core.modeling.config.CONFIG_NAME, read here without the model code
_CHUNK = 8 * 1024 * 1024


class BaseRefError(ValueError):
    """A version's base weights cannot be found; the message says what was looked for and where."""


def weight_files(folder: Path) -> list[Path]:
    return sorted(p for p in Path(folder).glob("*.safetensors") if p.is_file())


def weights_signature(folder: Path) -> tuple:
    """(name, size, mtime) of each weight file: what must stay the same for a cached hash to hold."""
    out = []
    for p in weight_files(folder):
        st = p.stat()
        out.append((p.name, st.st_size, st.st_mtime_ns))
    return tuple(out)


class HashCache:
    """SHA-256 of each weight file, kept in a JSON file keyed by absolute path, size and mtime.

    A real base is about 9 GB: hashing it takes seconds, so it happens once per file change, not per load."""

    def __init__(self, path: Path | None):
        self.path = Path(path) if path else None
        self._lock = threading.Lock()
        self._entries: dict | None = None

    def _load(self) -> dict:
        if self._entries is None:
            try:
                data = json.loads(self.path.read_text(encoding="utf-8")) if self.path else {}
                self._entries = data if isinstance(data, dict) else {}
            except (OSError, ValueError):
                self._entries = {}
        return self._entries

    def file_sha(self, path: Path) -> str:
        st = path.stat()
        key = str(path.resolve())
        with self._lock:
            for fresh in (False, True):  # on a miss, read the file again: another process (a run) may have hashed it
                if fresh:
                    self._entries = None
                hit = self._load().get(key)
                if isinstance(hit, list) and hit[:2] == [st.st_size, st.st_mtime_ns]:
                    return hit[2]
        digest = hashlib.sha256()
        with open(path, "rb") as fh:
            for chunk in iter(lambda: fh.read(_CHUNK), b""):
                digest.update(chunk)
        sha = digest.hexdigest()
        with self._lock:
            self._load()[key] = [st.st_size, st.st_mtime_ns, sha]
            if self.path:
                try:
                    write_text(self.path, json.dumps(self._entries, indent=1))
                except OSError as exc:  # a read-only workdir only costs hashing again next time
                    logger.warning(f"umind: cannot write the base hash cache {self.path}: {exc}")
        return sha

    def folder_sha(self, folder: Path) -> tuple[str, int]:
        """(SHA-256 over the weight files' names and hashes, their total bytes) of a base folder."""
        files = weight_files(folder)
        if not files:
            raise BaseRefError(f"{folder} holds no *.safetensors weights")
        digest = hashlib.sha256()
        for p in files:
            digest.update(f"{p.name}\0{self.file_sha(p)}\n".encode())
        return digest.hexdigest(), sum(p.stat().st_size for p in files)


def _read_json(path: Path) -> dict:
    data = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(data, dict):
        raise ValueError(f"{path} does not hold a JSON object")
    return data


def read_ref(model_dir: Path) -> dict | None:
    """The version's base reference, or None for a version saved before references existed (or a copied base)."""
    path = Path(model_dir) / REF_FILE
    return _read_json(path) if path.is_file() else None


def write_ref(model_dir: Path, workdir: Path, hashes: HashCache) -> dict | None:
    """Write base_ref.json for a saved model folder whose config names its base by absolute path (a LoRA version);
    None when the base is copied inside the folder (nothing to refer to)."""
    model_dir = Path(model_dir)
    base_model = _read_json(model_dir / CONFIG_FILE).get("base_model", "")
    if not os.path.isabs(base_model):
        return None
    base = Path(base_model).resolve()
    sha, size = hashes.folder_sha(base)
    workdir = Path(workdir).resolve()
    ref = {"format": 1, "weights_sha256": sha, "weights_bytes": size, "name": base.name,
           "relative_to_workdir": str(base.relative_to(workdir)) if workdir in base.parents else None,
           "saved_path": str(base)}
    write_text(model_dir / REF_FILE, json.dumps(ref, indent=2) + "\n")
    return ref


def base_candidates(folder: Path) -> list[Path]:
    """The base folders a search-path entry stands for: a plain Qwen3-VL folder itself; a UMind folder's copied
    base (`base/`) or the base its config names; and any direct subfolder that is a Qwen3-VL folder."""
    folder = Path(folder)
    out: list[Path] = []
    if (folder / CONFIG_FILE).is_file():
        try:
            named = _read_json(folder / CONFIG_FILE).get("base_model", "base")
            out.append(Path(named) if os.path.isabs(named) else folder / named)
        except (OSError, ValueError):
            pass
    if (folder / "config.json").is_file():
        out.append(folder)
    if folder.is_dir():
        out += sorted(p for p in folder.iterdir() if p.is_dir() and (p / "config.json").is_file())
    return out


def resolve_base(model_dir: Path, ref: dict, workdir: Path, search: list[Path], hashes: HashCache) -> Path:
    """The first folder whose weights hash to the reference's value (order: module docstring)."""
    config_base = _read_json(Path(model_dir) / CONFIG_FILE).get("base_model", "")
    tries: list[Path] = []
    if ref.get("relative_to_workdir"):
        tries.append(Path(workdir) / ref["relative_to_workdir"])
    tries += [Path(p) for p in (config_base, ref.get("saved_path")) if p and os.path.isabs(p)]
    for entry in search:
        tries += base_candidates(Path(entry))
    seen: list[Path] = []
    for cand in tries:
        cand = cand.resolve()
        if cand in seen:
            continue
        seen.append(cand)
        if not cand.is_dir():
            continue
        files = weight_files(cand)
        if not files or sum(p.stat().st_size for p in files) != ref.get("weights_bytes"):
            continue  # a different size cannot hash the same: skip reading it
        if hashes.folder_sha(cand)[0] == ref.get("weights_sha256"):
            return cand
    raise BaseRefError(f"the base model of {model_dir} ({ref.get('name')!r}, weights sha256 "
                       f"{str(ref.get('weights_sha256'))[:12]}..., saved at {ref.get('saved_path')}) is not found: "
                       f"no folder with those weights among {', '.join(str(p) for p in seen) or 'none'}; "
                       "put the base back or pass its folder as conf `model`")


def relink(model_dir: Path, workdir: Path, search: list[Path], hashes: HashCache) -> Path | None:
    """Point the version's config at its base wherever that now is; the base folder, or None for a version without
    a reference (read as saved). Raises BaseRefError when the base is nowhere to be found."""
    ref = read_ref(model_dir)
    if ref is None:
        return None
    base = resolve_base(model_dir, ref, workdir, search, hashes)
    config_path = Path(model_dir) / CONFIG_FILE
    config = _read_json(config_path)
    if config.get("base_model") != str(base):
        logger.info(f"umind: {model_dir}: base moved from {config.get('base_model')} to {base}; config updated")
        config["base_model"] = str(base)
        write_text(config_path, json.dumps(config, indent=2, sort_keys=True) + "\n")
    return base
