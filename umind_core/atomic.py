"""Writing files and folders so that a reader never sees half of one: write beside the target, then rename.

Every writer in the project (model folders, checkpoints, manifests, results, label maps, reports) goes through
this module, so the rule "never a half-written file" lives in one place.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["atomic_path", "write_text", "write_bytes", "new_temp_dir", "replace_dir", "remove_dir"]


@contextmanager
def atomic_path(path: str | os.PathLike, suffix: str | None = None) -> Iterator[Path]:
    """Yield a temporary path beside `path`, renamed onto it when the block succeeds and removed otherwise.

    The temporary name keeps `suffix` (default: the target's own, e.g. ".nii.gz" or ".png") because writers
    such as SimpleITK and Pillow choose the format from the file name.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if suffix is None:
        suffix = "".join(path.suffixes[-2:]) if path.name.lower().endswith(".gz") else path.suffix
    tmp = path.parent / f".tmp-{uuid.uuid4().hex[:12]}-{path.name[: len(path.name) - len(suffix)]}{suffix}"
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def write_text(path: str | os.PathLike, text: str) -> Path:
    """Write `text` (UTF-8) atomically and flushed to disk."""
    return write_bytes(path, text.encode("utf-8"))


def write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    path = Path(path)
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
    return path


def new_temp_dir(path: str | os.PathLike) -> Path:
    """An empty folder beside `path`, to be filled and then swapped in with `replace_dir`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(dir=path.parent, prefix=f".{path.name}.tmp-"))


def replace_dir(src: str | os.PathLike, dst: str | os.PathLike) -> None:
    """Swap a finished folder into place; the old one survives until the new one is there."""
    src, dst = Path(src), Path(dst)
    if dst.exists():
        old = dst.with_name(f".{dst.name}.old-{uuid.uuid4().hex[:8]}")
        os.replace(dst, old)
        os.replace(src, dst)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(src, dst)


def remove_dir(path: str | os.PathLike, hidden_name: str | None = None) -> None:
    """Delete a folder so that it is never seen half-deleted under its own name: renamed away first, then removed.

    ``hidden_name`` is the name it is renamed to (default `.<name>.old-<random>`), for callers whose clean-up of
    a killed process looks for a known pattern.
    """
    path = Path(path)
    doomed = path.with_name(hidden_name or f".{path.name}.old-{uuid.uuid4().hex[:8]}")
    os.replace(path, doomed)
    shutil.rmtree(doomed, ignore_errors=True)
