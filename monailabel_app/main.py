"""UMind as a MONAI Label app: `monailabel start_server --app monailabel_app --studies DIR [--conf KEY VALUE]...`

Conf keys (all strings): model (UMind or Qwen3-VL folder; default the bundled demo model), device, dtype,
labels (comma-separated default targets), retrain_every (K new labels; 0 = off), workdir (versions, scores;
default DIR/.umind), version (roll back to it at start), max_new_tokens, auto_retrain, and the training
hyper-parameters of lib/conf.py TrainParams (epochs, max_steps, lr, batch_size, warmup_ratio, val_fraction,
min_val, score_tolerance, error_tolerance, gate_min_samples, gate_noise_z, seed, refusal_rate, rehearsal,
rehearsal_min, rehearsal_pool, regression_size), uncertainty_signal, scoring_sample, uncertainty_balance, and
the request caps and server-file access of the security section (max_clicks, max_targets, max_frames,
max_pixels, max_upload_mb, image_dirs; every key: docs/configuration.md).

The studies folder is a wall (lib/datastore.py, lib/wall/names.py, lib/wall/image_ref.py), uploads are checked at the
door (lib/wall/uploads.py), stock endpoints answer 4xx JSON (lib/wall/edge.py), inference runs off the event loop
(lib/offloop.py) and CORS allows no other origin unless configured (lib/wall/cors.py). Task requests carry only
declared keys (lib/wall/task_requests.py) and reach their subprocess through a file (lib/wall/task_process.py); a
request's temp files go with it and bodies are capped (lib/wall/request_files.py); replies name no server path
(lib/wall/reply_paths.py, lib/wall/server_log.py).

MONAI Label builds this class again in every train/scoring subprocess, so nothing here loads the model:
lib/model_holder.py does that on the first request that needs it. Stopping the server (SIGTERM, SIGINT, SIGHUP)
stops those subprocesses first and records a training run it stopped as killed (lib/wall/task_process.py); /info
shows the running train's last progress line, whether the served version was a forced rollback and, once the model
is loaded, which decode is live (`umind.decode`).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from fastapi import HTTPException
from monailabel.config import settings
from monailabel.interfaces.app import MONAILabelApp
from monailabel.interfaces.datastore import Datastore, DefaultLabelTag
from monailabel.tasks.activelearning.first import First
from umind_core.model_identity import model_name, model_version
from umind_core.inference.step_builder import hold_builds_while

from lib.activelearning import MostUncertain, RandomUnlabeled, UMindUncertainty
from lib.conf import parse_conf
from lib.wall.auth import install_auth_fixes
from lib.wall.cors import restrict_cors
from lib.datastore import GuardedDatastore
from lib.dicomweb_proxy import install_dicomweb_proxy
from lib.viewer import install_viewer
from lib.wall.edge import install_edge, set_roots
from lib.wall.infer_guard import IMAGE_ID, SAVE_LABEL, check_infer_request
from lib.infers import UMindDetect, UMindInteractive, UMindInterpret, UMindLandmarks, UMindSegment
from lib.wall.login import install_login_route
from lib.model_holder import holder
from lib.pacs import PacsDatastore, pacs_cache_dir
from lib.offloop import UPLOADED, install_infer_route, install_upload_routes
from lib.wall.reply_paths import install_reply_paths
from lib.wall.request_files import install_body_cap, install_dataset_export, install_scoped_tempfile
from lib.retrain import RetrainTrigger
from lib.runtime import PREDICT_LOCK, Runtime
from lib.wall.server_log import install_server_log
from lib.wall.task_process import install_shutdown, install_task_process
from lib.wall.task_requests import install_task_request_check
from lib.trainers import UMindLoRATrain
from lib.wire import (DETECT_MODEL, INTERACTIVE_MODEL, INTERPRET_MODEL, LANDMARKS_MODEL, SEGMENT_MODEL,
                      TRAINER)

logger = logging.getLogger(__name__)

#: DICOM files (cine clips, single frames) are studies too; MONAI Label's default list has no *.dcm
EXTRA_EXTENSIONS = ["*.dcm"]


def base_search_paths(model: str | None) -> list[Path]:
    """Where a version looks for its base when it is not where it was saved (umind_core/base_ref.py): the conf model
    (a UMind folder's base, or a plain Qwen3-VL folder) and the bundled demo model, in the current checkout."""
    from umind_core.demo import DEMO_MODEL_DIR

    return ([Path(model)] if model else []) + [DEMO_MODEL_DIR]


class UMindApp(MONAILabelApp):
    def __init__(self, app_dir: str, studies: str, conf: dict):
        self.umind_conf = parse_conf(conf or {}, studies)
        self.runtime = Runtime.create(self.umind_conf)
        self.runtime.versions.search_paths = base_search_paths(self.umind_conf.model)
        super().__init__(
            app_dir=app_dir,
            studies=studies,
            conf=conf,
            name="UMind",
            description="UMind ultrasound vision-language model: segment, detect, landmarks, interpret",
            version="0.1.0",
        )
        self.trigger = RetrainTrigger(self.umind_conf.retrain_every if self.umind_conf.auto_retrain else 0,
                                      start=lambda: self.async_training(TRAINER, enqueue=True),
                                      labeled=lambda: self.datastore().get_labeled_images(),
                                      consumed=self.runtime.versions.labels_consumed)

    # ------------------------------------------------------------------ tasks
    def init_datastore(self) -> Datastore:
        if self.studies.startswith(("http://", "https://")):  # a PACS over DICOMweb: lib/pacs.py says why not stock
            url = self.studies.rstrip("/")
            return PacsDatastore(url, pacs_cache_dir(url, self.umind_conf.workdir))
        extensions = list(settings.MONAI_LABEL_DATASTORE_FILE_EXT) + [
            e for e in EXTRA_EXTENSIONS if e not in settings.MONAI_LABEL_DATASTORE_FILE_EXT]
        store = GuardedDatastore(self.studies, extensions=extensions,
                                 auto_reload=settings.MONAI_LABEL_DATASTORE_AUTO_RELOAD,
                                 read_only=settings.MONAI_LABEL_DATASTORE_READ_ONLY)
        store.caps = self.umind_conf  # uploads meet the infer caps, from the header, before decoding
        return store

    def init_infers(self):
        rt = self.runtime
        return {
            SEGMENT_MODEL: UMindSegment(rt),
            INTERACTIVE_MODEL: UMindInteractive(rt),
            DETECT_MODEL: UMindDetect(rt),
            LANDMARKS_MODEL: UMindLandmarks(rt),
            INTERPRET_MODEL: UMindInterpret(rt),
        }

    def init_trainers(self):
        return {TRAINER: UMindLoRATrain(self.runtime)}

    def init_strategies(self):
        return {"umind_uncertainty": MostUncertain(self.runtime), "random": RandomUnlabeled(),
                "first": First()}

    def init_scoring_methods(self):
        return {"umind_uncertainty": UMindUncertainty(self.runtime)}

    # ------------------------------------------------------------------ server hooks
    def _load_sessions(self, load=False):
        """No sessions: UMind does not use them, and they store uploads outside the studies folder."""
        return None

    def on_init_complete(self):
        self._install_request_edge()
        versions = self.runtime.versions
        for run in versions.settle_killed("the training process ended without finishing (killed, crashed, or "
                                          "stopped with the server)"):
            logger.warning(f"umind: training run {run.get('version')} was killed before it finished: {run['error']}")
        install_shutdown(self._on_shutdown)
        # the decode's background builds wait while a retraining runs: they cost its scoring ten times its time
        hold_builds_while(versions.training)
        if self.umind_conf.version is not None and self.umind_conf.version != versions.current():
            # the conf names the version on purpose: a rejected one is served (as a forced rollback, which /info shows)
            logger.info(f"umind: conf version {self.umind_conf.version}: rolling back")
            versions.rollback(self.umind_conf.version, force=True)
        super().on_init_complete()
        # the newest run was killed (by the last server's stop, settled then, or found dead now): its labels are
        # still due, so train again now rather than at the next label save
        self.trigger.after_killed_runs([r for r in versions.runs()[-1:] if r.get("status") == "killed"])

    def _on_shutdown(self, why: str, pids: list[int]) -> None:
        """Record a training run the shutdown killed as killed (its labels count again for the next run)."""
        for run in self.runtime.versions.settle_killed(why):
            logger.warning(f"umind: training run {run.get('version')} killed: {why}")

    def _install_request_edge(self):
        """Error translation, threaded /infer, closed CORS, declared task keys, subprocesses without client
        input, request temp files, a body cap and the browser viewer on the running server (absent in
        subprocesses)."""
        import sys

        set_roots(None if self.studies.startswith(("http://", "https://")) else self.studies,
                  str(self.umind_conf.workdir))
        install_edge()
        install_reply_paths()
        install_auth_fixes()
        install_task_request_check()
        install_task_process(self.umind_conf.workdir)
        install_scoped_tempfile()
        install_dataset_export()
        server = sys.modules.get("monailabel.app")
        install_server_log(self.umind_conf.workdir, server.app if server is not None else None)
        if server is not None:
            install_body_cap(server.app, self.umind_conf.max_upload_mb * 1024 * 1024)
            install_infer_route(server.app)
            install_upload_routes(server.app)
            if settings.MONAI_LABEL_AUTH_ENABLE:
                install_login_route(server.app)
            restrict_cors(server.app, self.umind_conf.cors_origins)
            install_dicomweb_proxy(server.app, self.studies.rstrip("/") if self.studies.startswith(
                ("http://", "https://")) else None)
            install_viewer(server.app)

    def infer(self, request, datastore=None):
        """Unknown task -> 404; the image and save_label are checked by lib/infer_guard before anything is read."""
        model = request.get("model")
        if model not in self._infers:
            raise HTTPException(status_code=404, detail=f"unknown infer task {model!r}; available: "
                                                        f"{', '.join(sorted(self._infers))}")
        store = datastore or self.datastore()
        checked = check_infer_request(request, store, self.umind_conf, UPLOADED.get())
        result = super().infer(checked, store)
        out = result.get("file")
        if checked.get(SAVE_LABEL) and out and os.path.exists(out):  # what MONAI Label does for an id
            tag = checked.get("label_tag", DefaultLabelTag.ORIGINAL.value)
            result["label"] = store.save_label(checked[IMAGE_ID], out, tag,
                                               {"model": model, "params": result.get("params")})
        return result

    def scoring(self, request, datastore=None):
        """Scoring run in this process (`run_sync=true`) uses the served Predictor, as /infer threads do."""
        with PREDICT_LOCK:
            return super().scoring(request, datastore)

    def on_save_label(self, image_id, label_id):
        super().on_save_label(image_id, label_id)
        return self.trigger.on_label(image_id)

    def info(self):
        meta = super().info()
        meta["umind"] = {
            **self.runtime.versions.summary(),
            # names, never server paths: a client learns which model, not where the server keeps it
            "model": model_name(self.umind_conf.model),  # "thyroid/final", never just "final"
            "model_version": model_version(self.umind_conf.model),
            "device": self.umind_conf.device,
            "retrain_every": self.umind_conf.retrain_every if self.umind_conf.auto_retrain else 0,
            "trigger": self.trigger.state(),
            "loaded": holder.loaded_key() is not None,
            "batching": self.runtime.batching(),
        }
        decode = holder.decode_status()  # None until a request loaded the model (/info never loads it)
        if decode is not None:
            meta["umind"]["decode"] = decode
        meta["umind"]["warnings"] = meta["umind"].get("warnings", []) + self.runtime.warnings()
        return meta
