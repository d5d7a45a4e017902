"""Start `umind_lora` after every K new final labels, one run at a time, never delaying the label save.

`on_save_label` runs on the server's event loop right after the datastore stored the label, so the trigger
only counts and, when due, submits the train job to MONAI Label's background executor (which returns at
once). While a run is queued or running, due labels wait: the next save after it ends starts the next run.
The count lives in workdir/trigger.json so that a server restart does not forget labels already saved.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import uuid
from collections.abc import Callable
from pathlib import Path

__all__ = ["RetrainTrigger", "train_busy"]

logger = logging.getLogger(__name__)


def train_busy() -> bool:
    """True while MONAI Label has a train job submitted or running in this server."""
    from monailabel.utils.async_tasks.utils import tasks

    return any(t.get("status") in ("SUBMITTED", "RUNNING") for t in tasks("train") or [])


class RetrainTrigger:
    def __init__(self, workdir: Path, every: int, start: Callable[[], object],
                 busy: Callable[[], bool] = train_busy):
        self.path = Path(workdir) / "trigger.json"
        self.every = int(every)
        self._start, self._busy = start, busy
        self._lock = threading.Lock()

    def state(self) -> dict:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
            if isinstance(data, dict):
                return {"since_last_run": int(data.get("since_last_run", 0)), "runs_started": int(data.get("runs_started", 0))}
        except (FileNotFoundError, ValueError, TypeError):
            pass
        return {"since_last_run": 0, "runs_started": 0}

    def _save(self, state: dict) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.parent / f".tmp-{uuid.uuid4().hex[:8]}-{self.path.name}"
        tmp.write_text(json.dumps(state), encoding="utf-8")
        os.replace(tmp, self.path)

    def on_label(self, image_id: str) -> dict:
        """Count one saved label; start a run when K are due. Never raises: the save already succeeded."""
        if self.every <= 0:
            return {"retrain": "disabled"}
        with self._lock:
            try:
                state = self.state()
                state["since_last_run"] += 1
                due = state["since_last_run"] >= self.every
                status = "counting"
                if due and self._busy():
                    status = "deferred: a training run is in progress"
                elif due:
                    self._start()
                    state["since_last_run"] = 0
                    state["runs_started"] += 1
                    status = "started"
                self._save(state)
                logger.info(f"umind retrain trigger after label of {image_id}: {status} {state}")
                return {"retrain": status, "labels_since_last_run": state["since_last_run"], "retrain_every": self.every}
            except Exception as exc:
                logger.exception("umind retrain trigger failed")
                return {"retrain": f"error: {type(exc).__name__}: {exc}"}
