"""The app's conf: every value arrives from `monailabel start_server --conf KEY VALUE` as a string.

Parsing happens once, at app start, so that a typo fails the start with a message naming the key instead of
failing the first request (or, worse, the first training run an hour later).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields, replace
from pathlib import Path

from umind_core.data.manifest import MAX_EXAM_VIEWS
from umind_core.inference.fast_decode import DECODE_MODES
from umind_core.inference.scheduler import DEFAULT_REGROUP_MS, DEFAULT_WINDOW_MS
from umind_core.training.config import TrainConfig, TrainingError, check_settings, read_setting, setting

from umind_core.booleans import as_bool

__all__ = ["AppConfig", "ConfError", "TrainParams", "parse_conf", "parse_train_params", "WORKDIR_NAME",
           "SERVER_RECIPE", "TRAINER_KEYS", "TRAIN_ALIASES", "server_recipe", "train_keys"]

WORKDIR_NAME = ".umind"
_DTYPES = ("float32", "float16", "bfloat16")
#: what umind_uncertainty can rank by (lib/activelearning/signals.py computes them)
SIGNALS = ("confidence", "flip", "task", "combined")


class ConfError(ValueError):
    """A conf key or train parameter has a value that cannot be used; the message names key and value."""


#: Where the server's retraining differs from `umind train`'s defaults (TrainConfig's fields), applied with
#: dataclasses.replace (`server_recipe`); every other trainer setting is TrainConfig's default.
SERVER_RECIPE = {
    # measured on the loop benchmark (benchmarks/results/loop_recipe/NOTES.md): lr 1e-4 barely moved new-domain
    # segmentation, 1e-3 broke calipers within two steps. 40 steps were enough for a synthetic scanner; from demo
    # model 3, 20 real fetal-head corrections reached held-out Dice 0.83 in 120 steps (0.82 at lr 5e-4, 0.82 at 160
    # steps; at 40 steps under 0.55 even after 40 labels), a retrain of about four minutes on 2 cores, scoring
    # included (benchmarks/results/annotation_loop_hc18/NOTES.md)
    "lr": 3e-4,
    "batch_size": 4,
    "max_steps": 120,
    # fixed by the loop, not settable: its own held-out split replaces the trainer's, always LoRA, a job's log
    # lines instead of a bar, and one checkpoint (the version folder keeps the model, umind_lora)
    "val_fraction": 0.0,
    "full": False,
    "progress": False,
    "keep_checkpoints": 1,
}
#: the TrainConfig fields a conf key or a train request may set (by the field's name); the rest stay the recipe's
#: `augment` (the share of images read zoomed, shifted and toned; `umind train --augment`) stays 0 in the recipe:
#: the loop's published runs trained without it, and a default that moves them is rerun with them
TRAINER_KEYS = ("epochs", "max_steps", "lr", "batch_size", "warmup_ratio", "seed", "augment")
#: the recipe's output folder until a run names its own (`TrainParams.trainer_config`)
_NO_OUTPUT_YET = "(the run's)"


def server_recipe() -> TrainConfig:
    """TrainConfig's defaults with `SERVER_RECIPE` applied: the trainer settings of the server's retraining."""
    return replace(TrainConfig(output_dir=_NO_OUTPUT_YET), **SERVER_RECIPE)


@dataclass(frozen=True)
class TrainParams:
    """The settings of one `umind_lora` run (conf keys of the same names set the defaults, a request overrides).

    `trainer` is the trainer's settings (`server_recipe`, with the conf's and the request's `TRAINER_KEYS`);
    TrainConfig owns their names, types, ranges and defaults. The fields here are the loop's own: the held-out
    split, the gate, rehearsal and the regression suite, declared with the same `setting` and checked by the
    same validator (`umind_core.training.config.check_settings`). `val_fraction` is the loop's held-out split,
    not the trainer's (the recipe sets that to 0).
    """

    trainer: TrainConfig = field(default_factory=server_recipe)
    val_fraction: float = setting(0.2, 0.0, 0.9)
    min_val: int = setting(1, 1)
    score_tolerance: float = setting(0.02, 0.0, 1.0)  # gate: a score (mIoU, F1, accuracy) may drop this much
    error_tolerance: float = setting(0.05, 0.0)  # gate: an error (keypoint, caliper) may grow this much (relative)
    gate_min_samples: int = setting(10, 1)  # gate: a task with fewer scored samples on a set does not gate there
    #: gate: the same for the held-out labels, judged with a quarter of the tolerance (trainers/gate.py held_out_tolerance)
    held_out_min_samples: int = setting(3, 1)
    #: gate: a change beyond the tolerance must also exceed this many paired standard errors (0 = tolerance only);
    #: at 150 suite images caliper error's is 0.008 against a 0.0047 tolerance (gate.py)
    gate_noise_z: float = setting(1.28, 0.0, 10.0)
    #: gate: when the team's held-out labels are clearly better (a task past the tolerance and the noise rule), the
    #: synthetic regression suite may lose up to this much (absolute, scores) against the start instead of the
    #: tolerance: it guards the synthetic sites, it does not veto what the team's scans show (trainers/gate.py).
    #: 20 real fetal-head corrections gave +0.26 mIoU on their held-out labels at a suite cost of -0.037 mIoU
    synthetic_budget_score: float = setting(0.05, 0.0, 1.0)
    #: the same for errors (relative): that run's suite keypoints went 1.4% -> 2.0% of the width (+43%)
    synthetic_budget_error: float = setting(0.5, 0.0)
    refusal_rate: float = setting(0.15, 0.0, 1.0)
    #: rehearsal samples per new training sample (0 = none). From demo model 3 less rehearsal moves the new look a
    #: little more (20 labels, two draws, offline: +0.010/+0.007 at 0.5, +0.007/+0.000 at 2.0) and the gate's suite
    #: past its tolerance (at 0.5: keypoint error +5-10%, calipers +9-12%; at 2.0: +2-3% and -1 to +5%); in the loop
    #: 0.5 on the varied look had every run rejected (benchmarks/results/loop_recipe_demo3, suite_seed*)
    rehearsal: float = setting(2.0, 0.0, 20.0)
    #: the rehearsal pool's look (`umind_core.data.synthetic.APPEARANCES`): "default", the look the gate's
    #: regression suite is drawn from, or "varied" (a scanner drawn per image)
    rehearsal_look: str = setting("default", choices=("default", "varied"))
    #: a fresh adapter also adapts the vision blocks (`modeling.config.VISION_LORA_TARGETS`): a new scanner is a new
    #: look, which the vision tower sees first
    lora_vision: bool = setting(True)
    #: what a run trains from: "start", the model the workdir began with, on all labels so far (every run is one
    #: training of the same recipe, so drift cannot pile up round after round), or "served", the served version's
    #: adapter continued. From demo model 3 with the served adapter continued, the first promoted version's
    #: keypoint drift on the regression suite (0.044 -> 0.046) left every later candidate above the gate's 5%
    #: (0.047-0.050): three runs in a row rejected, the loop stuck at 5 labels
    retrain_from: str = setting("start", choices=("start", "served"))
    #: at least this many distinct rehearsal images; the new ones repeat to keep the ratio
    rehearsal_min: int = setting(96, 0)
    #: each new label at least this many times in a run's training set (rehearsal may ask for more)
    label_copies: int = setting(1, 1, 16)
    #: copies of a new label after the first are photometrically augmented with this probability per transform
    #: (`umind_core.data.augment`; 0 = plain copies)
    label_augment: float = setting(0.0, 0.0, 1.0)
    rehearsal_pool: int = setting(200, 0)  # seeded synthetic images the rehearsal draws from (once per workdir)
    #: seeded synthetic images of the regression suite (made once per workdir). 150 gives ~65 diagnosis and ~75
    #: caliper samples, so that one answer moves a score by less than the 0.02 tolerance; at 60 (26 diagnosis
    #: samples, 0.038 each) one flipped answer rejected runs in the loop benchmark
    regression_size: int = setting(150, 0)

    def __post_init__(self) -> None:
        if not isinstance(self.trainer, TrainConfig):
            raise ConfError(f"trainer must be a TrainConfig, got {type(self.trainer).__name__}")
        try:
            check_settings(self)
        except TrainingError as exc:
            raise ConfError(str(exc)) from None

    @property
    def seed(self) -> int:
        """The run's seed: the trainer's, which also draws the held-out split, conversations and rehearsal."""
        return self.trainer.seed

    def trainer_config(self, output_dir, **fixed) -> TrainConfig:
        """The trainer's config for one run of these settings in `output_dir` (`fixed`: what the caller changes)."""
        return replace(self.trainer, output_dir=str(output_dir), **fixed)

    def record(self) -> dict:
        """The settings by the names a conf key or a request uses (the run record, the task's /info config)."""
        return {**{k: getattr(self.trainer, k) for k in TRAINER_KEYS},
                **{f.name: getattr(self, f.name) for f in fields(self) if f.name != "trainer"}}


@dataclass(frozen=True)
class AppConfig:
    model: str | None
    device: str
    dtype: str
    retrain_every: int
    workdir: Path
    labels: tuple[str, ...]
    max_new_tokens: int
    version: int | None  # roll back to this version when the server starts; None = keep the promoted one
    auto_retrain: bool
    train: TrainParams = field(default_factory=TrainParams)
    uncertainty_signal: str = "combined"  # umind_uncertainty's score: confidence | flip | task | combined
    scoring_sample: int = 0  # images one umind_uncertainty run scores (a random sample); 0 = all
    uncertainty_balance: bool = True  # umind_uncertainty picks balance the targets found (see MostUncertain)
    # per-request caps (lib/wall/caps.py), checked before any allocation; a request over one is a 400 naming it
    max_clicks: int = 64  # foreground + background clicks of one interactive request
    max_targets: int = 32  # comma-separated prompt targets (one label each)
    max_frames: int = 128  # frames one request runs the model on
    #: views of one examination (interpret with `images`, or `exam: "frames"`); at most MAX_EXAM_VIEWS, what the
    #: model is trained to read together
    max_exam_views: int = MAX_EXAM_VIEWS
    max_pixels: int = 50_000_000  # pixels of the whole study (it is decoded whole)
    #: the largest request body (an upload) in MiB, checked from Content-Length and while it streams
    max_upload_mb: int = 1024
    #: folders whose files an infer `image` may name by absolute path; empty = datastore ids only
    image_dirs: tuple[Path, ...] = ()
    #: web origins (scheme://host[:port]) allowed to call the server from a browser; empty = none (lib/wall/cors.py)
    cors_origins: tuple[str, ...] = ()
    #: how long concurrent infer requests are gathered into one batch (umind_core.inference.scheduler); 0 = what is queued
    batch_window_ms: float = DEFAULT_WINDOW_MS
    #: how long a batch may wait for the callers answered lately to come back (umind_core.inference.scheduler, which says
    #: why its default); 0 = off
    batch_regroup_ms: float = DEFAULT_REGROUP_MS
    #: how the served Predictor decodes (umind_core.inference.fast_decode): "" = UMIND_DECODE or "auto"
    decode: str = ""


def _exam_views(value: object) -> int:
    n = _int("max_exam_views", value, 1)
    if n > MAX_EXAM_VIEWS:
        raise ConfError(f"max_exam_views must be at most {MAX_EXAM_VIEWS} (the most views the model reads as one "
                        f"examination, manifest.MAX_EXAM_VIEWS), got {n}")
    return n


def _int(key: str, value: object, minimum: int | None = None) -> int:
    try:
        out = int(str(value).strip())
    except ValueError:
        raise ConfError(f"{key} must be an integer, got {value!r}") from None
    if minimum is not None and out < minimum:
        raise ConfError(f"{key} must be at least {minimum}, got {out}")
    return out


def _float(key: str, value: object, lo: float | None = None, hi: float | None = None) -> float:
    try:
        out = float(str(value).strip())
    except ValueError:
        raise ConfError(f"{key} must be a number, got {value!r}") from None
    if not math.isfinite(out):
        raise ConfError(f"{key} must be finite, got {value!r}")
    if (lo is not None and out < lo) or (hi is not None and out > hi):
        raise ConfError(f"{key} must lie in [{lo}, {hi}], got {out}")
    return out


def _choice(key: str, value: object, options: tuple[str, ...]) -> str:
    v = str(value).strip().lower()
    if v not in options:
        raise ConfError(f"{key} must be one of {', '.join(options)}, got {value!r}")
    return v


def _bool(key: str, value: object) -> bool:
    out = as_bool(value)
    if out is None:
        raise ConfError(f"{key} must be true or false, got {value!r}")
    return out


#: older names still accepted: key -> the parameter it sets
TRAIN_ALIASES = {"promote_tolerance": "score_tolerance"}


def train_keys() -> tuple[str, ...]:
    """Every key that sets a train parameter (conf keys and train requests alike), older names included."""
    loop = tuple(f.name for f in fields(TrainParams) if f.name != "trainer")
    return TRAINER_KEYS + loop + tuple(TRAIN_ALIASES)


def parse_train_params(values: dict, base: TrainParams | None = None) -> TrainParams:
    """Override `base` with the train keys present in `values` (conf strings or request JSON values).

    Each value is read and checked by TrainConfig's one validator (`read_setting`), for the trainer's keys
    against TrainConfig's fields and for the loop's against TrainParams'; a bad one is a ConfError naming the
    key as it was sent."""
    base = base or TrainParams()
    trainer, loop = {}, {}
    given = [*TRAIN_ALIASES.items(), *((key, key) for key in train_keys() if key not in TRAIN_ALIASES)]
    for sent, key in given:  # an older name first, so that the current one wins when both are sent
        if values.get(sent) is None or values[sent] == "":
            continue
        cls, out = (TrainConfig, trainer) if key in TRAINER_KEYS else (TrainParams, loop)
        try:
            out[key] = read_setting(cls, key, values[sent], shown=sent)
        except TrainingError as exc:
            raise ConfError(str(exc)) from None
    try:
        return replace(base, trainer=replace(base.trainer, **trainer), **loop)
    except TrainingError as exc:
        raise ConfError(str(exc)) from None


def _image_dirs(value: object) -> tuple[Path, ...]:
    """Comma-separated existing folders (resolved); reading server files by path is off when empty."""
    out = []
    for item in str(value or "").split(","):
        if not item.strip():
            continue
        p = Path(item.strip()).expanduser()
        if not p.is_absolute() or not p.is_dir():
            raise ConfError(f"image_dirs must list existing absolute folders, {item.strip()!r} is not one")
        out.append(p.resolve())
    return tuple(out)


def _origins(value: object) -> tuple[str, ...]:
    """Comma-separated web origins, each scheme://host[:port] with no path (what browsers send as Origin)."""
    out = []
    for item in str(value or "").split(","):
        origin = item.strip().rstrip("/")
        if not origin:
            continue
        scheme, _, rest = origin.partition("://")
        if scheme not in ("http", "https") or not rest or "/" in rest:
            raise ConfError(f"cors_origins must list origins like https://viewer.example:8443, got {item.strip()!r}")
        out.append(origin)
    return tuple(out)


def parse_conf(conf: dict, studies: str) -> AppConfig:
    """Turn the raw conf dict into an AppConfig; unknown keys are left for MONAI Label itself. A relative model or
    workdir path is resolved against the working directory (scripts/serve.sh makes them absolute before it changes
    into the checkout, so they mean what they meant where the command was typed)."""
    model = (conf.get("model") or "").strip() or None
    if model is not None and not Path(model).expanduser().is_dir():  # relative: against the working directory
        where = "" if Path(model).expanduser().is_absolute() else f" (from {Path.cwd()})"
        raise ConfError(f"model must be a UMind or Qwen3-VL folder, {model!r}{where} is not a directory")
    dtype = str(conf.get("dtype", "float32")).strip()
    if dtype not in _DTYPES:
        raise ConfError(f"dtype must be one of {', '.join(_DTYPES)}, got {dtype!r}")
    device = str(conf.get("device", "cpu")).strip() or "cpu"
    if not (device in ("cpu", "cuda", "mps", "auto") or device.startswith("cuda:")):
        raise ConfError(f"device must be cpu, cuda, cuda:N, mps or auto, got {device!r}")
    if device == "auto":
        import torch

        device = "cuda" if torch.cuda.is_available() else "cpu"
    workdir = conf.get("workdir")
    if workdir:
        workdir_path = Path(workdir).expanduser().resolve()
    elif studies.startswith(("http://", "https://")):
        raise ConfError("workdir is required when the studies are a remote datastore (no local folder to use)")
    else:
        workdir_path = Path(studies).expanduser().resolve() / WORKDIR_NAME
    source_tree = Path(__file__).resolve().parents[2]
    if workdir_path == source_tree or source_tree in workdir_path.parents:
        raise ConfError(f"workdir {workdir_path} lies inside the source tree {source_tree}; choose another folder")
    labels = tuple(s.strip() for s in str(conf.get("labels", "lesion")).split(",") if s.strip())
    if not labels:
        raise ConfError("labels must name at least one structure, e.g. 'lesion,thyroid nodule'")
    version = conf.get("version")
    version_n = None if version in (None, "", "latest", "current") else _int("version", version, 0)
    return AppConfig(
        model=str(Path(model).expanduser().resolve()) if model else None,
        device=device,
        dtype=dtype,
        retrain_every=_int("retrain_every", conf.get("retrain_every", "10"), 0),
        workdir=workdir_path,
        labels=labels,
        max_new_tokens=_int("max_new_tokens", conf.get("max_new_tokens", "256"), 1),
        version=version_n,
        auto_retrain=_bool("auto_retrain", conf.get("auto_retrain", "true")),
        max_clicks=_int("max_clicks", conf.get("max_clicks", AppConfig.max_clicks), 1),
        max_targets=_int("max_targets", conf.get("max_targets", AppConfig.max_targets), 1),
        max_frames=_int("max_frames", conf.get("max_frames", AppConfig.max_frames), 1),
        max_exam_views=_exam_views(conf.get("max_exam_views", AppConfig.max_exam_views)),
        max_pixels=_int("max_pixels", conf.get("max_pixels", AppConfig.max_pixels), 64),
        max_upload_mb=_int("max_upload_mb", conf.get("max_upload_mb", AppConfig.max_upload_mb), 1),
        image_dirs=_image_dirs(conf.get("image_dirs", "")),
        cors_origins=_origins(conf.get("cors_origins", "")),
        train=parse_train_params(conf),
        uncertainty_signal=_choice("uncertainty_signal", conf.get("uncertainty_signal", "combined"), SIGNALS),
        scoring_sample=_int("scoring_sample", conf.get("scoring_sample", "0"), 0),
        uncertainty_balance=_bool("uncertainty_balance", conf.get("uncertainty_balance", "true")),
        batch_window_ms=_float("batch_window_ms", conf.get("batch_window_ms", AppConfig.batch_window_ms), 0.0, 1000.0),
        batch_regroup_ms=_float("batch_regroup_ms", conf.get("batch_regroup_ms", AppConfig.batch_regroup_ms), 0.0,
                                1000.0),
        decode=_choice("decode", conf["decode"], DECODE_MODES) if conf.get("decode") else "",
    )


def check_command_line(args: list[str], studies: str) -> str | None:
    """The one-line error of `monailabel start_server` arguments' ``--conf KEY VALUE`` pairs, None when they parse:
    scripts/serve.sh runs it (through `log_config`) before starting the server, whose own failure would be a
    traceback inside MONAI Label's app loader."""
    conf, k = {}, 0
    while k < len(args):
        if args[k] == "--conf" and k + 2 < len(args):
            conf[args[k + 1]] = args[k + 2]
            k += 3
        else:
            k += 1
    try:
        parse_conf(conf, studies)
    except ConfError as exc:
        return f"umind: --conf: {exc}"
    return None

