"""The app's conf: every value arrives from `monailabel start_server --conf KEY VALUE` as a string.

Parsing happens once, at app start, so that a typo fails the start with a message naming the key instead of
failing the first request (or, worse, the first training run an hour later).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from pathlib import Path

from umind_core.modeling.fast_decode import DECODE_MODES
from umind_core.scheduler import DEFAULT_REGROUP_MS, DEFAULT_WINDOW_MS
from umind_core.training.config import TrainConfig, TrainingError

from .booleans import as_bool

__all__ = ["AppConfig", "ConfError", "TrainParams", "parse_conf", "parse_train_params", "WORKDIR_NAME"]

WORKDIR_NAME = ".umind"
_DTYPES = ("float32", "float16", "bfloat16")
#: what umind_uncertainty can rank by (lib/activelearning/signals.py computes them)
SIGNALS = ("confidence", "flip", "task", "combined")


class ConfError(ValueError):
    """A conf key or train parameter has a value that cannot be used; the message names key and value."""


@dataclass(frozen=True)
class TrainParams:
    """Hyper-parameters of one `umind_lora` run (conf keys of the same name set the defaults).

    epochs, max_steps, lr, batch_size, warmup_ratio and seed are the trainer's own settings
    (`umind_core.training.config.TrainConfig` validates them: `trainer_config`); the values here are the app's
    defaults for them, stated here only. The rest belong to the loop: the held-out split, the gate, rehearsal
    and the regression suite.
    """

    # measured on the loop benchmark (README "Annotation loop"): lr 1e-4 barely moved new-domain segmentation,
    # 1e-3 broke calipers within two steps; 40 steps of 4 retrain 20 labels in about two minutes on 2 cores
    epochs: int = 5
    max_steps: int = 40  # 0 = no cap beyond epochs
    lr: float = 3e-4
    batch_size: int = 4
    warmup_ratio: float = 0.05
    val_fraction: float = 0.2
    min_val: int = 1
    score_tolerance: float = 0.02  # gate: a score (mIoU, F1, accuracy) may drop this much (absolute)
    error_tolerance: float = 0.05  # gate: an error (keypoint, caliper) may grow this much (relative)
    gate_min_samples: int = 10  # gate: a task with fewer scored samples on a set does not gate there
    #: gate: a change beyond the tolerance must also exceed this many paired standard errors (0 = tolerance only);
    #: at 150 suite images caliper error's is 0.008 against a 0.0047 tolerance (gate.py)
    gate_noise_z: float = 1.28
    seed: int = 0
    refusal_rate: float = 0.15
    rehearsal: float = 2.0  # rehearsal samples per new training sample (0 = none)
    rehearsal_min: int = 96  # at least this many distinct rehearsal images; the new ones repeat to keep the ratio
    rehearsal_pool: int = 200  # seeded synthetic images the rehearsal draws from (made once per workdir)
    #: seeded synthetic images of the regression suite (made once per workdir). 150 gives ~65 diagnosis and ~75
    #: caliper samples, so that one answer moves a score by less than the 0.02 tolerance; at 60 (26 diagnosis
    #: samples, 0.038 each) one flipped answer rejected runs in the loop benchmark
    regression_size: int = 150

    def trainer_config(self, output_dir, **fixed) -> TrainConfig:
        """The trainer's config for one run of these settings (`fixed`: what the run itself decides)."""
        return TrainConfig(output_dir=str(output_dir), epochs=float(self.epochs), batch_size=self.batch_size,
                           lr=self.lr, warmup_ratio=self.warmup_ratio, seed=self.seed,
                           max_steps=self.max_steps or None, **fixed)


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
    # per-request caps (lib/caps.py), checked before any allocation; a request over one is a 400 naming it
    max_clicks: int = 64  # foreground + background clicks of one interactive request
    max_targets: int = 32  # comma-separated prompt targets (one label each)
    max_frames: int = 128  # frames one request runs the model on
    max_pixels: int = 50_000_000  # pixels of the whole study (it is decoded whole)
    #: the largest request body (an upload) in MiB, checked from Content-Length and while it streams
    max_upload_mb: int = 1024
    #: folders whose files an infer `image` may name by absolute path; empty = datastore ids only
    image_dirs: tuple[Path, ...] = ()
    #: web origins (scheme://host[:port]) allowed to call the server from a browser; empty = none (lib/cors.py)
    cors_origins: tuple[str, ...] = ()
    #: how long concurrent infer requests are gathered into one batch (umind_core.scheduler); 0 = what is queued
    batch_window_ms: float = DEFAULT_WINDOW_MS
    #: how long a batch may wait for the callers answered lately to come back (umind_core.scheduler, which says
    #: why its default); 0 = off
    batch_regroup_ms: float = DEFAULT_REGROUP_MS
    #: how the served Predictor decodes (umind_core.modeling.fast_decode): "" = UMIND_DECODE or "static"
    decode: str = ""


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


_TRAIN_PARSERS = {
    "epochs": lambda k, v: _int(k, v, 1),
    "max_steps": lambda k, v: _int(k, v, 0),
    "lr": lambda k, v: _float(k, v, 0.0),
    "batch_size": lambda k, v: _int(k, v, 1),
    "warmup_ratio": lambda k, v: _float(k, v, 0.0, 1.0),
    "val_fraction": lambda k, v: _float(k, v, 0.0, 0.9),
    "min_val": lambda k, v: _int(k, v, 1),
    "score_tolerance": lambda k, v: _float(k, v, 0.0, 1.0),
    "error_tolerance": lambda k, v: _float(k, v, 0.0),
    "gate_min_samples": lambda k, v: _int(k, v, 1),
    "gate_noise_z": lambda k, v: _float(k, v, 0.0, 10.0),
    "seed": lambda k, v: _int(k, v),
    "refusal_rate": lambda k, v: _float(k, v, 0.0, 1.0),
    "rehearsal": lambda k, v: _float(k, v, 0.0, 20.0),
    "rehearsal_pool": lambda k, v: _int(k, v, 0),
    "rehearsal_min": lambda k, v: _int(k, v, 0),
    "regression_size": lambda k, v: _int(k, v, 0),
}
#: older names still accepted: key -> the parameter it sets
_TRAIN_ALIASES = {"promote_tolerance": "score_tolerance"}


def parse_train_params(values: dict, base: TrainParams | None = None) -> TrainParams:
    """Override `base` with the train keys present in `values` (conf strings or request JSON values)."""
    base = base or TrainParams()
    out = {f.name: getattr(base, f.name) for f in fields(TrainParams)}
    for alias, key in _TRAIN_ALIASES.items():
        if alias in values and values[alias] is not None and values[alias] != "":
            out[key] = _TRAIN_PARSERS[key](alias, values[alias])
    for key, parse in _TRAIN_PARSERS.items():
        if key in values and values[key] is not None and values[key] != "":
            out[key] = parse(key, values[key])
    params = TrainParams(**out)
    try:
        params.trainer_config("-")  # the trainer's own validators, one owner of its rules
    except TrainingError as exc:
        raise ConfError(str(exc)) from None
    return params


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
    """Turn the raw conf dict into an AppConfig; unknown keys are left for MONAI Label itself."""
    model = (conf.get("model") or "").strip() or None
    if model is not None and not Path(model).expanduser().is_dir():
        raise ConfError(f"model must be a UMind or Qwen3-VL folder, {model!r} is not a directory")
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
