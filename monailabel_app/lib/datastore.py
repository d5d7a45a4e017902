"""The studies folder is a wall: MONAI Label's LocalDatastore with ids and tags checked as names and uploads checked.

Every method that takes an id or a tag from a request checks it with `names.check_name` before the parent
joins it onto a path, so nothing outside the studies folder (nor the workdir `.umind` inside it) can be read,
written or deleted through the datastore API. Files on disk whose ids are not names (e.g. `.hidden.png`) are
left out of the index, so no listing offers an id that a request could not use. Uploads go through
`uploads`: the stored extension follows the content, and a label must fit its image, so bad uploads are a
400 before anything is stored (and before `on_save_label` counts them for retraining). Unknown ids are a
`NotFound` (404) naming the id, where the parent raised its own exceptions (bare 500s at the endpoint).
"""

from __future__ import annotations

import logging
import shutil
from typing import Any

from monailabel.datastore.local import LocalDatastore

from .errors import NotFound
from .names import check_name, is_name
from .stock_extension import label_names_from_list
from .uploads import check_image_upload, check_label_upload, scratch_dir

__all__ = ["GuardedDatastore"]

logger = logging.getLogger(__name__)


class GuardedDatastore(LocalDatastore):
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
        out = super()._reconcile_datastore()
        self._hide_non_names()
        return out

    def _init_from_datastore_file(self, throw_exception=False):
        out = super()._init_from_datastore_file(throw_exception=throw_exception)
        self._hide_non_names()
        return out

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
        check_name("image id", image_id)
        tmp = scratch_dir()
        try:
            checked = check_image_upload(image_filename, image_id, tmp)
            return super().add_image(image_id, checked, image_info)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def save_label(self, image_id: str, label_filename: str, label_tag: Any, label_info: dict[str, Any]) -> str:
        self._require_image(image_id)
        label_tag = check_name("label tag", label_tag)
        tmp = scratch_dir()
        try:
            checked = check_label_upload(label_filename, super().get_image_uri(image_id), image_id, tmp)
            return super().save_label(image_id, checked, label_tag, _with_label_names(label_info))
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def remove_image(self, image_id: str) -> None:
        return super().remove_image(self._require_image(image_id))

    def remove_label(self, label_id: str, label_tag: Any) -> None:
        return super().remove_label(label_id, self._require_label(label_id, label_tag))

    def update_image_info(self, image_id: str, info: dict[str, Any]) -> None:
        return super().update_image_info(self._require_image(image_id), info)

    def update_label_info(self, label_id: str, label_tag: Any, info: dict[str, Any]) -> None:
        return super().update_label_info(label_id, self._require_label(label_id, label_tag), info)

    # ------------------------------------------------------------------ reads
    def get_image_uri(self, image_id: str) -> str:
        return super().get_image_uri(self._require_image(image_id))

    def get_image_info(self, image_id: str) -> dict[str, Any]:
        return super().get_image_info(self._require_image(image_id))

    def get_label_uri(self, label_id: str, label_tag: Any) -> str:
        return super().get_label_uri(label_id, self._require_label(label_id, label_tag))

    def get_label_info(self, label_id: str, label_tag: Any) -> dict[str, Any]:
        return super().get_label_info(label_id, self._require_label(label_id, label_tag))

    def get_labels_by_image_id(self, image_id: str) -> dict[str, str]:
        return super().get_labels_by_image_id(self._require_image(image_id))

    def get_label_by_image_id(self, image_id: str, tag: Any) -> str:
        return super().get_label_by_image_id(self._require_image(image_id), check_name("label tag", tag))


def _with_label_names(info: Any) -> Any:
    """The stock MONAILabel extension names its label values in a `label_info` list; training reads the
    `label_names` dict, so the list is turned into one at the door (a `label_names` the client sent wins)."""
    if not isinstance(info, dict) or isinstance(info.get("label_names"), dict):
        return info
    names = label_names_from_list(info.get("label_info"))
    return info if names is None else {**info, "label_names": names}
