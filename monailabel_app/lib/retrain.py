"""Start `umind_lora` after every K new labels, one run at a time, never delaying the label save.

`on_save_label` runs on the server's event loop right after the datastore stored the label, so the trigger
only counts and, when due, submits the train job to MONAI Label's background executor (which returns at
once). "New" means labeled images beyond those the last *completed* run (promoted or rejected) used, read
from the datastore and the version store rather than kept as a counter: the labels of a run that failed or
was killed count again for the next one, labels saved while a run trains count for the next one, and a
server restart forgets nothing. While a run is queued or running, due labels wait: the next save after it
ends starts the next run.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable

__all__ = ["RetrainTrigger", "train_busy"]

logger = logging.getLogger(__name__)
#: how long a saved label counts even when the datastore's index does not list it (its file watcher's re-add lag)
RECENT_S = 10.0


def train_busy() -> bool:
    """True while MONAI Label has a train job submitted or running in this server."""
    from monailabel.utils.async_tasks.utils import tasks

    return any(t.get("status") in ("SUBMITTED", "RUNNING") for t in tasks("train") or [])


class RetrainTrigger:
    def __init__(self, every: int, start: Callable[[], object], labeled: Callable[[], Iterable[str]],
                 consumed: Callable[[], int], busy: Callable[[], bool] = train_busy):
        """`labeled`: the ids of the images with a final label; `consumed`: how many the last completed run saw."""
        self.every = int(every)
        self._start, self._busy = start, busy
        self._labeled, self._consumed = labeled, consumed
        self._lock = threading.Lock()
        self._runs_started = 0
        self._recent: dict[str, float] = {}  # image id -> when its label was saved (monotonic seconds)

    def state(self) -> dict:
        try:
            since = self._since()
        except Exception as exc:  # /info must answer even when the version state is unreadable
            return {"since_last_run": None, "runs_started": self._runs_started, "error": str(exc)}
        return {"since_last_run": since, "runs_started": self._runs_started}

    def _since(self, saved: str | None = None) -> int:
        """Labels since the last completed run. A label saved in the last `RECENT_S` seconds counts whatever the
        datastore lists at this instant: MONAI Label's file watcher drops a label it sees rewritten ("Removing non
        existing Label Id") and adds it back some 0.15 s later, and a count taken in between missed it (measured on
        the loop benchmark, saves 50 ms apart: the fifth save counted 4, no run started, and the round's scores
        were the previous model's; counting only the label just saved still missed the one before it)."""
        now = time.monotonic()
        if saved:
            self._recent[saved] = now
        self._recent = {k: t for k, t in self._recent.items() if now - t <= RECENT_S}
        ids = set(self._labeled()) | set(self._recent)
        return max(0, len(ids) - int(self._consumed()))

    def on_label(self, image_id: str) -> dict:
        """Count one saved label; start a run when K are due. Never raises: the save already succeeded."""
        return self._maybe_start(f"label of {image_id}", image_id)

    def after_killed_runs(self, killed: list[dict]) -> dict | None:
        """At server start: a run the last server's stop (or a crash) killed is started again when its labels
        are still due, instead of waiting for the next label save. Failed runs are not retried here (a run that
        fails on its data would fail on every start)."""
        if not killed:
            return None
        return self._maybe_start(f"start: run {', '.join(str(r.get('version')) for r in killed)} was killed")

    def _maybe_start(self, why: str, saved: str | None = None) -> dict:
        if self.every <= 0:
            return {"retrain": "disabled"}
        with self._lock:
            try:
                since = self._since(saved)
                status = "counting"
                if since >= self.every and self._busy():
                    status = "deferred: a training run is in progress"
                elif since >= self.every:
                    self._start()
                    self._runs_started += 1
                    status = "started"
                logger.info(f"umind retrain trigger after {why}: {status} ({since} new labels)")
                return {"retrain": status, "labels_since_last_run": since, "retrain_every": self.every}
            except Exception as exc:
                logger.exception("umind retrain trigger failed")
                return {"retrain": f"error: {type(exc).__name__}: {exc}"}
