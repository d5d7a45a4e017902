"""Writing files and folders so that a reader never sees half of one: write beside the target, then rename.

Every writer in the project (model folders, checkpoints, manifests, results, label maps, reports) goes through
this module, so the rule "never a half-written file" lives in one place.
"""

from __future__ import annotations

import os
import re
import shutil
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["atomic_path", "write_text", "write_bytes", "new_temp_dir", "replace_dir", "remove_dir", "write_into",
           "copy_into", "copy_file", "is_temp_name", "move_aside", "remove_stale_temps"]

#: the names `atomic_path` and `move_aside` give their files: `.tmp-<12 hex>-<name>`
_TEMP_NAME = re.compile(r"^\.tmp-[0-9a-f]{12}-")


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
    tmp = path.parent / f"{_temp_prefix()}{path.name[: len(path.name) - len(suffix)]}{suffix}"
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
        write_into(tmp, data)
    return path


def write_into(tmp: str | os.PathLike, data: bytes) -> None:
    """Fill the temporary `tmp` (from `atomic_path`) with `data`, flushed to disk before it is renamed."""
    with open(tmp, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())


def copy_into(src: str | os.PathLike, tmp: str | os.PathLike) -> None:
    """Fill the temporary `tmp` (from `atomic_path`) with a copy of the file `src`, flushed to disk."""
    with open(src, "rb") as fin, open(tmp, "wb") as fout:
        shutil.copyfileobj(fin, fout, 1 << 20)
        fout.flush()
        os.fsync(fout.fileno())


def copy_file(src: str | os.PathLike, dst: str | os.PathLike) -> Path:
    """Copy the file `src` onto `dst` atomically (temp beside `dst`, flushed, renamed)."""
    dst = Path(dst)
    with atomic_path(dst) as tmp:
        copy_into(src, tmp)
    return dst


def _temp_prefix() -> str:
    return f".tmp-{uuid.uuid4().hex[:12]}-"


def is_temp_name(name: str) -> bool:
    """Whether a file name is one `atomic_path` or `move_aside` gave (a write in progress or left by a kill)."""
    return bool(_TEMP_NAME.match(name))


def move_aside(path: str | os.PathLike) -> Path:
    """Rename a file to a hidden temporary name in its folder (to be deleted, or renamed back on failure).

    A kill leaves it under that name, which `remove_stale_temps` removes."""
    path = Path(path)
    hidden = path.with_name(f"{_temp_prefix()}old-{path.name}")
    os.replace(path, hidden)
    return hidden


def remove_stale_temps(folder: str | os.PathLike) -> list[str]:
    """Delete the temporaries a killed writer left in `folder` (not recursive); the names deleted.

    Only for folders whose writers all hold a lock the caller holds too: a temporary of a write still in
    progress looks the same."""
    folder = Path(folder)
    removed = []
    try:
        entries = list(os.scandir(folder))
    except FileNotFoundError:
        return removed
    for entry in entries:
        if is_temp_name(entry.name) and entry.is_file(follow_symlinks=False):
            try:
                os.unlink(entry.path)
                removed.append(entry.name)
            except FileNotFoundError:
                pass
    return removed


def new_temp_dir(path: str | os.PathLike) -> Path:
    """An empty folder beside `path`, to be filled and then swapped in with `replace_dir`.

    Made with the process's umask like any folder (`os.mkdir`), not `tempfile.mkdtemp`'s 0700: the folder is
    renamed into place, and a model version saved by one user must stay readable by a server run as another."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    for _ in range(100):
        tmp = path.parent / f".{path.name}.tmp-{uuid.uuid4().hex[:8]}"
        try:
            tmp.mkdir()
            return tmp
        except FileExistsError:
            continue
    raise FileExistsError(f"no free temporary folder name beside {path}")


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
