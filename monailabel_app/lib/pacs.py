"""Studies from a PACS over DICOMweb (`--studies http://host/dicom-web`), behind the same wall as a studies folder.

MONAI Label's own DICOMWebDatastore does not fit ultrasound: it converts every series to NIfTI with ITK (which
drops the US-region spacing and the cine frame time, and cannot place a colour or palette frame), downloads dcmqi
from GitHub when the server starts (no network here), writes a final label back as DICOM SEG with dcmqi (a
3D-volume tool that needs the positions and orientations a 2D ultrasound file does not have) and, before every
training run, deletes local labels that have no SEG in the PACS. It also joins ids onto paths unchecked.

Here the PACS is the list of studies and the source of pixels, and a guarded local cache is the datastore:
- `list_images` is the PACS's ultrasound series (QIDO-RS, Modality=US), cached for a few seconds, and `json` (the
  stock client's `datastore()`, `GET /datastore/?output=all`) lists them all, fetched or not;
- the first use of a series fetches its one instance (WADO-RS) into the cache as `<SeriesInstanceUID>.dcm`,
  through the same content check as an upload, so the infer tasks read the original DICOM (frames, spacing
  from the US regions, colour) exactly as they read a file;
- labels are saved in the cache, beside it (`labels/final/<SeriesInstanceUID>.png`), not in the PACS: the
  trainer exports them from there like any local label.
Ids are names (`GuardedDatastore`); a series that is not in the PACS is a 404, one that is not ultrasound, holds
several instances or no pixels a 400, and a PACS that is down or slow a 502/504 naming the series: every call has
a connect and a read timeout, so no request hangs on it.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable, TypeVar

import requests

from .datastore import GuardedDatastore
from .wall.errors import BadRequest, NotFound, UpstreamError, UpstreamTimeout
from .wall.names import check_name

__all__ = ["PacsDatastore", "pacs_cache_dir", "pacs_session", "PACS_MODALITY"]

logger = logging.getLogger(__name__)

PACS_MODALITY = "US"
CONNECT_TIMEOUT_S = 5.0
LIST_TTL_S = 5.0
T = TypeVar("T")


def timeouts() -> tuple[float, float]:
    """(connect, read) seconds for every call to the PACS; the read timeout is MONAI Label's
    `MONAI_LABEL_DICOMWEB_PROXY_TIMEOUT` (30 s unless set), so a slow PACS is a 504, never a hung request."""
    from monailabel.config import settings

    return CONNECT_TIMEOUT_S, float(settings.MONAI_LABEL_DICOMWEB_PROXY_TIMEOUT)


class _TimeoutSession(requests.Session):
    """dicomweb_client passes no timeout to requests; this session adds one to every call."""

    def request(self, *args, **kwargs):
        kwargs.setdefault("timeout", timeouts())
        return super().request(*args, **kwargs)


def pacs_session() -> requests.Session:
    """A session for the PACS: timeouts and, when MONAI Label's DICOMweb user and password are set, HTTP basic
    auth (the datastore and OHIF's proxy both use it)."""
    from monailabel.config import settings

    session = _TimeoutSession()
    user, password = settings.MONAI_LABEL_DICOMWEB_USERNAME, settings.MONAI_LABEL_DICOMWEB_PASSWORD
    if user and password:
        session.auth = (user, password)
    return session


def make_client(url: str):
    """A DICOMweb client for `url` on `pacs_session()`, with MONAI Label's QIDO/WADO/STOW prefixes."""
    from monailabel.config import settings
    from monailabel.datastore.dicom import DICOMwebClientX

    client = DICOMwebClientX(url=url, session=pacs_session(), qido_url_prefix=settings.MONAI_LABEL_QIDO_PREFIX,
                             wado_url_prefix=settings.MONAI_LABEL_WADO_PREFIX,
                             stow_url_prefix=settings.MONAI_LABEL_STOW_PREFIX)
    # its default retries a failed call 5 times with waits of 2-16 s: with a PACS that did not answer, one infer
    # request (two calls) took 101 s; now each call fails after its timeout and the client may retry itself
    client.set_http_retry_params(retry=False)
    return client


def pacs_cache_dir(url: str, workdir: Path) -> Path:
    """MONAI Label's cache setting when given, else `workdir/pacs-cache/<hash of the URL>`: the train and
    scoring subprocesses rebuild the app with the same conf and so find the same cache."""
    from monailabel.config import settings
    from monailabel.utils.others.generic import md5_digest

    configured = (settings.MONAI_LABEL_DICOMWEB_CACHE_PATH or settings.MONAI_LABEL_DATASTORE_CACHE_PATH).strip()
    return Path(configured or workdir / "pacs-cache") / md5_digest(url)


def pacs_call(what: str, fn: Callable[[], T]) -> T:
    """`fn()` with the PACS's failures as HTTP errors that name `what` (a series, the listing)."""
    try:
        return fn()
    except requests.Timeout:
        raise UpstreamTimeout(f"{what}: the PACS did not answer within {timeouts()[1]:.0f} s") from None
    except requests.ConnectionError:
        raise UpstreamError(f"{what}: the PACS cannot be reached (connection refused or no route)") from None
    except requests.HTTPError as exc:
        code = exc.response.status_code if exc.response is not None else "?"
        if code == 404:
            raise NotFound(f"{what}: not in the PACS") from None
        raise UpstreamError(f"{what}: the PACS answered HTTP {code}") from None


def _series_tag(ds: dict, tag: str) -> str:
    values = (ds.get(tag) or {}).get("Value") or [""]
    return str(values[0])


class PacsDatastore(GuardedDatastore):
    def __init__(self, url: str, cache: Path, client=None):
        self._url = url.rstrip("/")
        self._client = client or make_client(self._url)
        self._listing: tuple[float, list[str]] = (0.0, [])
        self._fetch_lock = threading.Lock()
        cache.mkdir(parents=True, exist_ok=True)
        super().__init__(str(cache), extensions=["*.dcm", "*.png", "*.nii.gz", "*.nrrd"], auto_reload=True)

    def name(self) -> str:
        return f"DICOMweb PACS {self._url}"

    # ------------------------------------------------------------------ the PACS's series
    def list_images(self) -> list[str]:
        at, series = self._listing
        if time.monotonic() - at > LIST_TTL_S:
            found = pacs_call("listing the PACS's ultrasound series", lambda: self._client.search_for_series(
                search_filters={"Modality": PACS_MODALITY}))
            series = sorted({_series_tag(ds, "0020000E") for ds in found} - {""})
            self._listing = (time.monotonic(), series)
        return list(series)

    def status(self) -> dict[str, Any]:
        """Counts for /info, which MONAI Label's /infer also builds on every request: a PACS that is down must not
        fail those, so its error is reported here (total unknown) and a request for a series names its own."""
        try:
            return super().status()
        except UpstreamError as exc:
            labeled = self.get_labeled_images()
            return {"total": None, "completed": len(labeled), "label_tags": {"final": len(labeled)},
                    "pacs_error": str(exc)}

    def json(self) -> dict[str, Any]:
        """The datastore as `GET /datastore/?output=all` gives it (the stock client's `datastore()`): every ultrasound
        series of the PACS. The parent lists its local index, which holds only the series fetched so far, so a
        client that had not yet opened one saw an empty datastore. A series not fetched yet has no labels, and its
        info says `cached: false`; a PACS that cannot be reached leaves the cached ones and a `pacs_error`."""
        out = super().json()
        objects = out.setdefault("objects", {})
        try:
            series = self.list_images()
        except UpstreamError as exc:
            out["pacs_error"] = str(exc)
            return out
        for uid in series:
            if uid not in objects:
                objects[uid] = {"image": {"ext": ".dcm", "info": {"SeriesInstanceUID": uid, "cached": False}},
                                "labels": {}}
        return out

    def get_unlabeled_images(self, label_tag=None, labels=None) -> list[str]:
        labeled = set(self.get_labeled_images())
        return [s for s in self.list_images() if s not in labeled]

    def _require_image(self, image_id: str) -> str:
        """The id once its series is in the cache (fetched from the PACS on first use)."""
        check_name("image id", image_id)
        if image_id not in self._datastore.objects:
            with self._fetch_lock:
                try:
                    if image_id not in self._datastore.objects:
                        self._fetch(image_id)
                except UpstreamError as exc:  # whatever call failed, the client asked for this series
                    raise type(exc)(exc.args[0] if image_id in str(exc) else f"series {image_id!r}: {exc}") from None
        return image_id

    def _fetch(self, series_uid: str) -> None:
        what = f"series {series_uid!r}"
        found = pacs_call(what, lambda: self._client.search_for_series(
            search_filters={"SeriesInstanceUID": series_uid}))
        found = [ds for ds in found if _series_tag(ds, "0020000E") == series_uid]
        if not found:
            raise NotFound(f"image {series_uid!r} is not a series in the PACS")
        modality = _series_tag(found[0], "00080060")
        if modality != PACS_MODALITY:
            raise BadRequest(f"{what} is {modality or 'of no modality'}, not ultrasound ({PACS_MODALITY}); UMind "
                             "serves ultrasound series only")
        study = _series_tag(found[0], "0020000D")
        tmp = tempfile.mkdtemp(prefix="umind_pacs_")
        try:
            instances = pacs_call(what, lambda: self._client.retrieve_series(study, series_uid))
            if len(instances) != 1:
                raise BadRequest(f"{what} holds {len(instances)} instances; UMind reads a series of one instance "
                                 "(a single frame or a cine clip)")
            path = str(Path(tmp) / "series.dcm")
            instances[0].save_as(path, write_like_original=False)
            info = {"SeriesInstanceUID": series_uid, "StudyInstanceUID": study, "Modality": modality}
            GuardedDatastore.add_image(self, series_uid, path, info)  # the upload check: decodes, has pixels
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        logger.info(f"umind: fetched {what} from the PACS into the cache")

    # ------------------------------------------------------------------ what a PACS-backed store refuses
    def add_image(self, image_id: str, image_filename: str, image_info: dict[str, Any]) -> str:
        raise BadRequest("this server reads its studies from a PACS: store images there (DICOMweb STOW-RS), "
                         "not through /datastore/image")

    def remove_image(self, image_id: str) -> None:
        raise BadRequest("this server reads its studies from a PACS: images are removed there, not through "
                         "/datastore/image")
