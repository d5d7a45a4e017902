"""The studies folder is a wall: MONAI Label's LocalDatastore with ids and tags checked as names and uploads checked.

Every method that takes an id or a tag from a request checks it with `names.check_name` before the parent
joins it onto a path, so nothing outside the studies folder (nor the workdir `.umind` inside it) can be read,
written or deleted through the datastore API. Files on disk whose ids are not names (e.g. `.hidden.png`) are
left out of the index, so no listing offers an id that a request could not use. Uploads go through
`uploads`: the stored extension follows the content, and a label must fit its image, so bad uploads are a
400 before anything is stored (and before `on_save_label` counts them for retraining). Unknown ids are a
`NotFound` (404) naming the id, where the parent raised its own exceptions (bare 500s at the endpoint).

Every write is atomic (`umind_core.atomic`): the parent copied images and labels onto their names and rewrote
`datastore_v2.json` in place, so a full disk or a kill left a truncated or 0-byte file that the index still
listed. Here an image or label is copied to a temporary beside its target and flushed, the new index likewise,
and only then are both renamed (the file first, the index second); a failure removes the temporaries and
leaves the old file, the old index and the in-memory index as they were. A full disk (ENOSPC, EDQUOT) is an
`InsufficientStorage` (507) naming the image id or label tag. Temporaries a kill left behind are hidden names
(`.tmp-...`) that no listing indexes, and are removed when the datastore starts.

Only regular files are indexed, read, replaced or deleted, and only through paths with no symlink below the
studies folder: the parent took every destination through `realpath`, so a link an admin left in the folder
was served to /infer, overwritten by a `replace` and, on delete, had its outside target deleted. Stored info
(image and label info) is bounded by `wall.json_limits`, and an index that holds an over-deep or oversized value
from before is repaired at start (`index_repair`) instead of stopping the server.

Images are replaced only on purpose: storing an id that exists is a `Conflict` (409) naming its labels unless
the image info says `"replace": true`; a replacement removes the old image in whatever format it was stored
and all its labels (files and index entries).
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from filelock import FileLock
from monailabel.datastore.local import DataModel, ImageLabelModel, LocalDatastore
from monailabel.interfaces.datastore import DefaultLabelTag

from umind_core import atomic

from umind_core.booleans import as_bool
from .index_repair import repair_index
from .wall.errors import BadRequest, Conflict, InsufficientStorage, NotFound
from .wall.json_limits import check_stored
from .wall.names import check_name, is_name
from .stock_extension import label_names_from_list
from .wall.uploads import check_image_upload, check_label_upload, scratch_dir
from .wire import LABEL_NAMES

__all__ = ["GuardedDatastore"]

logger = logging.getLogger(__name__)

#: errors that mean the disk (or the user's quota) is full
_FULL = frozenset({errno.ENOSPC, errno.EDQUOT})


class GuardedDatastore(LocalDatastore):
    #: the app's AppConfig (main.py sets it): uploads meet the infer caps, checked from the header first
    caps: Any = None

    def __init__(self, datastore_path: str, images_dir: str = ".", labels_dir: str = "labels",
                 datastore_config: str = "datastore_v2.json", extensions=("*.nii.gz", "*.nii"), auto_reload=False,
                 read_only=False):
        # before the parent starts its file watcher, which reconciles from another thread
        self._writing_lock = threading.RLock()
        if not read_only:
            repair_index(os.path.join(datastore_path, datastore_config))
        super().__init__(datastore_path, images_dir=images_dir, labels_dir=labels_dir,
                         datastore_config=datastore_config, extensions=extensions, auto_reload=auto_reload,
                         read_only=read_only)
        if not read_only:
            self._remove_stale_temps()

    # ------------------------------------------------------------------ index
    def _hide_non_names(self) -> None:
        objects = self._datastore.objects
        warned = self.__dict__.setdefault("_umind_hidden", set())
        for image_id in [k for k in objects if not is_name(k)]:
            if image_id not in warned:  # every refresh finds the file again; say it once
                warned.add(image_id)
                logger.warning(f"umind: datastore file with id {image_id!r} is not a valid name; it is not served")
            del objects[image_id]
        for obj in objects.values():
            for tag in [t for t in obj.labels if not is_name(t)]:
                del obj.labels[tag]

    def _reconcile_datastore(self):
        """The parent's reconcile (the file watcher's, on any event in the folders), never in the middle of one of
        this process's writes: a write sets the new label in the index, then renames its file into place, and a
        reconcile between the two found the index naming a file that was not there yet and dropped the label
        ("Removing non existing Label Id"), re-adding it on the next event some 0.15 s later. Meanwhile the label
        was missing: the retrain trigger counted 4 of 5 labels and a strategy served the just-labeled image again
        (loop benchmark, saves 50 ms apart)."""
        with self._writing_lock:
            out = super()._reconcile_datastore()
            self._hide_non_names()
            return out

    @contextlib.contextmanager
    def _writing(self) -> Iterator[None]:
        """This process's writers and the watcher's reconcile in turn (`_writing_lock`), and other processes'
        writers through the datastore's file lock."""
        with self._writing_lock, FileLock(self._lock_file):
            yield

    def _init_from_datastore_file(self, throw_exception=False):
        out = super()._init_from_datastore_file(throw_exception=throw_exception)
        self._hide_non_names()
        return out

    def _list_files(self, path, patterns):
        """The parent's listing without the temporaries of writes in progress (or left by a kill), and without
        anything that is not a regular file (a symlink, a folder, a FIFO)."""
        return {k: v for k, v in super()._list_files(path, patterns).items()
                if not atomic.is_temp_name(k) and _regular(os.path.join(path, v))}

    def _plain(self, path: str) -> str:
        """`path` (inside the studies folder, not resolved) when no component below the folder is a symlink and
        it names a regular file; NotFound otherwise, which names no path."""
        path = os.path.abspath(path)
        linked = self._linked_folder(path)
        if linked is not None or os.path.islink(path):
            raise NotFound(f"{os.path.basename(path)!r} is a link or lies in a linked folder; the datastore serves "
                           "regular files only")
        if not _regular(path):
            raise NotFound(f"{os.path.basename(path)!r} is not a regular file in the studies folder")
        return path

    def _linked_folder(self, path: str) -> str | None:
        """The first folder between the studies folder and `path` that is a symlink (relative, as `labels/final`),
        None where there is none. NotFound for a path outside the studies folder.

        Why every folder and not only the file: a label folder swapped for a link to an outside folder holding a
        file of the same name would serve, overwrite or delete that outside file through an ordinary-looking
        path, as a file link would."""
        root = os.path.abspath(self._datastore_path)
        rel = os.path.relpath(os.path.abspath(path), root)
        if rel.startswith(os.pardir) or os.path.isabs(rel):
            raise NotFound("the file is not inside the studies folder")
        here = root
        for part in rel.split(os.sep)[:-1]:
            here = os.path.join(here, part)
            if os.path.islink(here):
                return os.path.relpath(here, root)
        return None

    def _own(self, paths: list[str]) -> list[str]:
        """The paths that lie in the studies folder's own folders (no linked folder on the way): the only ones a
        write may move aside or delete; the others are logged and left alone."""
        out = []
        for path in paths:
            linked = self._linked_folder(path)
            if linked is None:
                out.append(path)
            else:
                logger.warning(f"umind: {os.path.basename(path)!r} was left alone: the folder {linked!r} in the "
                               "studies folder is a link")
        return out

    def _image_file(self, image_id: str) -> str:
        obj = self._datastore.objects[image_id]
        return os.path.join(self._datastore.image_path(), self._filename(image_id, obj.image.ext))

    def _label_file(self, label_id: str, tag: str) -> str:
        label = self._datastore.label(label_id, tag)
        return os.path.join(self._datastore.label_path(tag), self._filename(label_id, label.ext))

    def _index_bytes(self) -> bytes:
        """The index file's contents, as the parent wrote them."""
        return json.dumps(self._datastore.model_dump(exclude={"base_path"}), indent=2, default=str).encode("utf-8")

    def _update_datastore_file(self, lock=True):
        """The parent's index write, made atomic: a failed write leaves the old index file whole.

        The parent also set `_ignore_event_config` to skip the file watcher's modify event for its own write; a
        rename raises no modify event on the index, so the flag would swallow the next outside edit instead."""
        def write():
            atomic.write_bytes(self._datastore_config_path, self._index_bytes())
            self._config_ts = os.stat(self._datastore_config_path).st_mtime

        if lock:
            with FileLock(self._lock_file):
                write()
        else:
            write()

    def _remove_stale_temps(self) -> None:
        """Delete the temporaries a killed write left in the studies and label folders (under the lock every
        datastore write holds, so none of them is a write in progress)."""
        labels_root = self._datastore.label_path(None)
        folders = {self._datastore_path, self._datastore.image_path(), labels_root}
        with contextlib.suppress(OSError):
            folders.update(e.path for e in os.scandir(labels_root) if e.is_dir(follow_symlinks=False))
        folders = {f for f in folders if self._linked_folder(os.path.join(f, "-")) is None}  # never through a link
        with FileLock(self._lock_file):
            removed = [name for folder in sorted(folders) for name in atomic.remove_stale_temps(folder)]
        if removed:
            logger.warning(f"umind: removed {len(removed)} temporary file(s) an interrupted datastore write left")

    @contextlib.contextmanager
    def _index_change(self, what: str) -> Iterator[None]:
        """Restore the in-memory index when the block fails; a full disk becomes InsufficientStorage(`what`)."""
        before = self._datastore.model_copy(deep=True)
        try:
            yield
        except BaseException as exc:
            self._datastore = before
            if _is_full(exc):
                raise _full(what) from exc
            raise

    def _files_of(self, folder: str, image_id: str) -> list[str]:
        """The files in `folder` that the datastore would index as `image_id`, in any of its extensions."""
        if not os.path.isdir(folder):
            return []
        return sorted(os.path.join(folder, f) for f in self._list_files(folder, self._extensions)
                      if self._to_id(f)[0] == image_id)

    def _label_files(self, image_id: str) -> dict[str, list[str]]:
        """tag -> the label files of `image_id` on disk, in every tag folder (indexed or not)."""
        root = self._datastore.label_path(None)
        if not os.path.isdir(root):
            return {}
        tags = sorted(e.name for e in os.scandir(root) if e.is_dir(follow_symlinks=False))
        found = {tag: self._files_of(self._datastore.label_path(tag), image_id) for tag in tags}
        return {tag: files for tag, files in found.items() if files}

    def _commit(self, src: str, dest: str, set_aside: list[str], remove_after: list[str], what: str,
                before) -> None:
        """Copy `src` onto `dest` and write the (already changed) in-memory index, each temp-then-rename, with
        the datastore lock held. Both temporaries are complete and flushed before anything is renamed; then
        `set_aside` files are renamed to hidden names, `dest` is renamed into place, then the index. After that
        the set-aside files and `remove_after` are deleted. A failure before `dest` is in place restores the
        set-aside files and the in-memory index (`before`); one after it (the index rename) keeps the new
        state in memory, which the next index write or reconcile puts on disk."""
        set_aside, remove_after = self._own(set_aside), self._own(remove_after)
        aside: list[tuple[str, Path]] = []
        placed = False
        try:
            linked = self._linked_folder(dest)
            if linked is not None:  # refused like any failure before `dest` is in place: the index is restored
                raise Conflict(f"{what}: the folder {linked!r} in the studies folder is a link; the datastore "
                               "writes only into its own folders")
            with atomic.atomic_path(self._datastore_config_path) as tmp_index:
                with atomic.atomic_path(dest) as tmp_file:
                    atomic.copy_into(src, tmp_file)
                    atomic.write_into(tmp_index, self._index_bytes())
                    for path in set_aside:
                        aside.append((path, atomic.move_aside(path)))
                placed = True
        except BaseException as exc:
            if not placed:
                self._datastore = before
                for path, hidden in reversed(aside):
                    with contextlib.suppress(OSError):
                        os.replace(hidden, path)
            else:
                _remove_quietly([hidden for _, hidden in aside])
            if _is_full(exc):
                raise _full(what) from exc
            raise
        self._config_ts = os.stat(self._datastore_config_path).st_mtime
        _remove_quietly([hidden for _, hidden in aside] + [p for p in remove_after
                                                          if os.path.abspath(p) != os.path.abspath(dest)])

    def _require_image(self, image_id: str) -> str:
        check_name("image id", image_id)
        if image_id not in self._datastore.objects:
            raise NotFound(f"image {image_id!r} is not in the datastore")
        return image_id

    def _require_label(self, label_id: str, tag: Any) -> str:
        self._require_image(label_id)
        tag = check_name("label tag", tag)
        if self._datastore.label(label_id, tag) is None:
            raise NotFound(f"image {label_id!r} has no label with tag {tag!r}")
        return tag

    # ------------------------------------------------------------------ writes
    def add_image(self, image_id: str, image_filename: str, image_info: dict[str, Any]) -> str:
        """Store a checked upload as `image_id`; a new id, or a replacement when `image_info` says so.

        An id that is already stored (in the index, or as a file the index would take up) is a `Conflict`
        (409) naming its label tags, unless `image_info["replace"]` is true (true/false as `umind_core.booleans`
        reads them; anything else is a 400). A replacement removes the stored image whatever its format
        (extension) and every label of the id, in every tag folder (files and index entries), then stores the
        upload. The `replace` key is a request flag and is not kept in the image's info. Who may replace is
        the route's business (lib/offloop.py lets only the admin role send `replace`), not the datastore's.
        """
        check_name("image id", image_id)
        info = dict(check_stored(image_info, f"image {image_id!r}: its info")) if image_info else {}
        replace = as_bool(info.pop("replace", False))
        if replace is None:
            raise BadRequest(f"image {image_id!r}: \"replace\" must be true or false")
        tmp = scratch_dir()
        try:
            checked = check_image_upload(image_filename, image_id, tmp, self.caps)
            return self._store_image(image_id, checked, info, replace)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def _store_image(self, image_id: str, checked: str, info: dict[str, Any], replace: bool) -> str:
        _, image_ext = self._to_id(os.path.basename(checked))
        name = self._filename(image_id, image_ext)
        images_dir = self._datastore.image_path()
        dest = os.path.join(images_dir, name)  # never resolved: a link there is replaced, not written through
        logger.info(f"Adding Image: {image_id} => {name}{' (replacing)' if replace else ''}")
        with self._writing():
            old_images = self._files_of(images_dir, image_id)
            obj = self._datastore.objects.get(image_id)
            exists = obj is not None or bool(old_images)
            labels = self._label_files(image_id) if (exists or replace) else {}
            if exists and not replace and _same_bytes(checked, old_images):
                return image_id  # the same image again (a client re-sending what it has): nothing changes
            if exists and not replace:
                tags = sorted(set(obj.labels if obj is not None else ()) | set(labels))
                has = (f"with the label(s) {', '.join(repr(t) for t in tags)}" if tags else "without labels")
                raise Conflict(f"image {image_id!r} already exists {has}; to replace it"
                               f"{' and delete those labels' if tags else ''} send \"replace\": true in params")
            before = self._datastore.model_copy(deep=True)
            info["ts"] = int(time.time())
            info["name"] = name
            self._datastore.objects[image_id] = ImageLabelModel(image=DataModel(info=info, ext=image_ext))
            self._commit(checked, dest, [f for files in labels.values() for f in files], old_images,
                         f"image {image_id!r} was not stored", before)
        if labels:
            logger.info(f"umind: image {image_id!r} replaced; its labels {sorted(labels)} were removed")
        return image_id

    def save_label(self, image_id: str, label_filename: str, label_tag: Any, label_info: dict[str, Any]) -> str:
        self._require_image(image_id)
        label_tag = check_name("label tag", label_tag)
        tmp = scratch_dir()
        try:
            checked = check_label_upload(label_filename, super().get_image_uri(image_id), image_id, tmp,
                                         self.caps)
            info = check_stored(_with_label_names(label_info), f"label {label_tag!r} of {image_id!r}: its info")
            return self._store_label(image_id, checked, label_tag, info)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def _store_label(self, image_id: str, checked: str, label_tag: str, label_info: Any) -> str:
        _, label_ext = self._to_id(os.path.basename(checked))
        label_path = self._datastore.label_path(label_tag)
        name = self._filename(image_id, label_ext)
        dest = os.path.join(label_path, name)
        what = f"label {label_tag!r} of image {image_id!r} was not stored"
        logger.info(f"Adding Label: {image_id} => {label_tag} => {name}")
        with self._writing():
            obj = self._datastore.objects.get(image_id)
            if obj is None:  # removed since the check at the door
                raise NotFound(f"image {image_id!r} is not in the datastore")
            try:
                os.makedirs(label_path, exist_ok=True)
            except OSError as exc:
                if _is_full(exc):
                    raise _full(what) from exc
                raise
            old_labels = self._files_of(label_path, image_id)  # e.g. a .png one when this one is .nii.gz
            before = self._datastore.model_copy(deep=True)
            info = dict(label_info) if isinstance(label_info, dict) else {}
            info["ts"] = int(time.time())
            info["name"] = name
            self._datastore.objects[image_id].labels[label_tag] = DataModel(info=info, ext=label_ext)
            logger.info(f"Label Info: {info}")
            self._commit(checked, dest, [], old_labels, what, before)
        return image_id

    def remove_image(self, image_id: str) -> None:
        """The parent's removal, without `realpath`: the image's and its labels' own files are unlinked (a link
        is removed, never what it points to)."""
        self._require_image(image_id)
        logger.info(f"Removing Image: {image_id}")
        with self._writing():
            obj = self._datastore.objects.get(image_id)
            if obj is None:
                raise NotFound(f"image {image_id!r} is not in the datastore")
            files = [self._label_file(image_id, tag) for tag in obj.labels] + [self._image_file(image_id)]
            self._unlink(files, f"image {image_id!r} was removed but the index was not updated")
        self.refresh()

    def remove_label(self, label_id: str, label_tag: Any) -> None:
        label_tag = self._require_label(label_id, label_tag)
        logger.info(f"Removing label: {label_id} => {label_tag}")
        with self._writing():
            self._unlink([self._label_file(label_id, label_tag)],
                         f"label {label_tag!r} of image {label_id!r} was removed but the index was not updated")
        self.refresh()

    def _unlink(self, paths: list[str], what: str) -> None:
        try:
            _remove_quietly(self._own(paths))
        except OSError as exc:
            if _is_full(exc):
                raise _full(what, kept=False) from exc
            raise

    def update_image_info(self, image_id: str, info: dict[str, Any]) -> None:
        self._require_image(image_id)
        merged = {**self._datastore.objects[image_id].image.info, **(info or {})}
        check_stored(merged, f"image {image_id!r}: its info")
        with self._index_change(f"the info of image {image_id!r} was not updated"):
            return super().update_image_info(image_id, info)

    def update_label_info(self, label_id: str, label_tag: Any, info: dict[str, Any]) -> None:
        label_tag = self._require_label(label_id, label_tag)
        merged = {**self._datastore.label(label_id, label_tag).info, **(info or {})}
        check_stored(merged, f"label {label_tag!r} of {label_id!r}: its info")
        with self._index_change(f"the info of label {label_tag!r} of image {label_id!r} was not updated"):
            return super().update_label_info(label_id, label_tag, info)

    # ------------------------------------------------------------------ reads
    def get_image_uri(self, image_id: str) -> str:
        return self._plain(self._image_file(self._require_image(image_id)))

    def get_image_info(self, image_id: str) -> dict[str, Any]:
        info = super().get_image_info(self._require_image(image_id))
        info["path"] = self._image_file(image_id)  # the parent's was resolved through links
        return info

    def get_label_uri(self, label_id: str, label_tag: Any) -> str:
        return self._plain(self._label_file(label_id, self._require_label(label_id, label_tag)))

    def datalist(self, full_path=True) -> list[dict[str, Any]]:
        """The parent's (image, final label) pairs through `_plain` paths: pairs whose files are not regular files
        reached without a link are left out."""
        out = []
        for image_id, obj in self._datastore.filter_by_tag(DefaultLabelTag.FINAL).items():
            try:
                pair = {"image": self.get_image_uri(image_id),
                        "label": self.get_label_uri(image_id, DefaultLabelTag.FINAL.value)}
            except NotFound:
                continue
            if not full_path:
                pair = {k: os.path.relpath(v, self._datastore_path) for k, v in pair.items()}
            out.append(pair)
        return out

    def get_label_info(self, label_id: str, label_tag: Any) -> dict[str, Any]:
        return super().get_label_info(label_id, self._require_label(label_id, label_tag))

    def get_labels_by_image_id(self, image_id: str) -> dict[str, str]:
        return super().get_labels_by_image_id(self._require_image(image_id))

    def get_label_by_image_id(self, image_id: str, tag: Any) -> str:
        return super().get_label_by_image_id(self._require_image(image_id), check_name("label tag", tag))


def _regular(path: str) -> bool:
    """A regular file that is not a symlink."""
    import stat

    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def _is_full(exc: BaseException) -> bool:
    return isinstance(exc, OSError) and exc.errno in _FULL


def _full(what: str, kept: bool = True) -> InsufficientStorage:
    """The 507 for a full disk: what was not done (an image id, a label tag), never a path."""
    return InsufficientStorage(f"the server's disk is full: {what}"
                               + ("; what was stored before is unchanged" if kept else ""))


def _remove_quietly(paths) -> None:
    for path in paths:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


def _same_bytes(path: str, stored: list) -> bool:
    """True when the one stored file of an id holds exactly the bytes of `path`."""
    import filecmp

    return len(stored) == 1 and filecmp.cmp(path, stored[0], shallow=False)


def _with_label_names(info: Any) -> Any:
    """The stock MONAILabel extension names its label values in a `label_info` list; training reads the
    `label_names` dict, so the list is turned into one at the door (a `label_names` the client sent wins)."""
    if not isinstance(info, dict) or isinstance(info.get(LABEL_NAMES), dict):
        return info
    names = label_names_from_list(info.get("label_info"))
    return info if names is None else {**info, LABEL_NAMES: names}
