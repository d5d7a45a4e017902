"""`umind_uncertainty` scoring and the strategy that serves the most uncertain unlabeled image first.

For every target (the request's `targets` or `prompt`, or the app's conf labels) the model segments the image's middle
frame and its mirror image, and detects the target: signals.py turns these into the model's own
confidence (token probability, mask entropy), flip disagreement and task disagreement. The score is the
conf key `uncertainty_signal` (default "combined": the mean of the flip and task disagreements, because the
model's confidence stays high on images from a scanner it never saw). Targets the model finds on neither
image nor task say nothing and are left out; an image on which it finds none of the targets scores 1.
All signals are stored, so they can be compared against the truth later.

Scores are kept per image with the model version that produced them, so a later scoring run only scores
new images or images scored by an older version; `scoring_sample` caps how many one run scores (a random
sample), for large pools. Scoring runs in MONAI Label's scoring subprocess, the strategy in the server: the
scores travel through workdir/uncertainty.json (also copied into the datastore's image info for people to
see), since the server's in-memory datastore only catches up with the subprocess's writes when its file
watcher fires.
"""

from __future__ import annotations

import json
import logging
import random
import threading
import time
from pathlib import Path

from umind_core.atomic import write_text

from monailabel.interfaces.datastore import Datastore, DefaultLabelTag
from monailabel.interfaces.tasks.scoring import ScoringMethod
from monailabel.interfaces.tasks.strategy import Strategy

from umind_core.imageio import ImageReadError, read_study
from umind_core.answers.results import Result

from ..wall.caps import check_image_budget
from ..wall.errors import BadRequest
from ..runtime import Runtime
from ..trainers.corrections import info_fields
from ..wire import LABEL_NAMES
from .signals import confidence_score, flip_disagreement, task_disagreement, union_mask

__all__ = ["UMindUncertainty", "MostUncertain", "UncertaintyStore", "uncertainty_score", "image_signals",
           "labeled_groups", "pick_balanced", "SCORE_KEY", "NO_TARGET"]

logger = logging.getLogger(__name__)
SCORE_KEY = "umind_uncertainty"
NO_TARGET = ""  # the group of images on which the model found none of the targets


def uncertainty_score(result: Result) -> float:
    """The model's own confidence signal of one answer (kept for callers of the first version)."""
    return confidence_score(result)


def image_signals(predictor, frame, targets: list[str]) -> dict[str, float]:
    """Every signal of one frame over `targets` (see the module docstring)."""
    import numpy as np

    from umind_core.imageio import Frame

    mirror = Frame(pixels=np.ascontiguousarray(frame.pixels[:, ::-1]), spacing=frame.spacing, index=frame.index,
                   source=frame.source)
    shape = frame.pixels.shape[:2]
    conf, flip, task, area = [], [], [], {}
    for target in targets:
        seg, seg_mirror = predictor.predict_batch([frame, mirror], "segment", target)
        # the box the model writes: a box read off the mask (the default readout) would agree with it by rule
        det = predictor.predict_batch([frame], "detect", target, readout="tokens")[0]
        m, mm = union_mask(seg, shape), union_mask(seg_mirror, shape)
        conf.append(confidence_score(seg))
        if m.any() or mm.any() or any(o.box is not None for o in det.objects):
            flip.append(flip_disagreement(m, mm))
            task.append(task_disagreement(m, det))
            area[target] = int(m.sum()) + int(mm.sum())
    out = {"confidence": float(sum(conf) / len(conf)),
           "flip": float(sum(flip) / len(flip)) if flip else 1.0,
           "task": float(sum(task) / len(task)) if task else 1.0}
    out["combined"] = (out["flip"] + out["task"]) / 2
    out["target"] = max(area, key=area.get) if area else NO_TARGET
    return out


class UncertaintyStore:
    """image id -> {"score", "version", "ts"} in one JSON file, written atomically."""

    def __init__(self, workdir: Path):
        self.path = Path(workdir) / "uncertainty.json"
        self._lock = threading.Lock()

    def load(self) -> dict[str, dict]:
        with self._lock:
            try:
                data = json.loads(self.path.read_text(encoding="utf-8"))
            except FileNotFoundError:
                return {}
            except ValueError:
                logger.warning(f"{self.path}: unreadable, scores start again")
                return {}
            return data if isinstance(data, dict) else {}

    def save(self, scores: dict[str, dict]) -> None:
        with self._lock:
            write_text(self.path, json.dumps(scores, indent=2))


class UMindUncertainty(ScoringMethod):
    def __init__(self, runtime: Runtime):
        super().__init__("UMind uncertainty: disagreement of the model with itself (mirror image, segment vs "
                         "detect) and its own confidence")
        self.runtime = runtime
        self.store = UncertaintyStore(runtime.conf.workdir)

    def __call__(self, request, datastore: Datastore):
        predictor, version = self.runtime.predictor()
        targets = _targets(request, self.runtime.conf.labels)
        signal = self.runtime.conf.uncertainty_signal
        force = bool(request.get("force", False))
        scores = self.store.load()
        todo = [i for i in datastore.get_unlabeled_images()
                if force or (scores.get(i) or {}).get("version") != version]
        skipped = len(datastore.get_unlabeled_images()) - len(todo)
        if self.runtime.conf.scoring_sample and len(todo) > self.runtime.conf.scoring_sample:
            todo = random.Random(f"umind-scoring:{version}:{len(scores)}").sample(todo, self.runtime.conf.scoring_sample)
        scored, failed = [], {}
        for image_id in todo:
            uri = None
            try:
                uri = datastore.get_image_uri(image_id)
                check_image_budget(uri, self.runtime.conf)  # the caps of every door, from the header first
                study = read_study(uri)
            except (ImageReadError, BadRequest) as exc:  # named by id: the reply shows no server path
                failed[image_id] = str(exc).replace(uri, repr(image_id)) if uri else str(exc)
                continue
            signals = image_signals(predictor, study.frames[len(study.frames) // 2], targets)
            target = signals.pop("target")
            scores[image_id] = {"score": signals[signal], "signal": signal, "signals": signals, "target": target,
                                "version": version, "ts": int(time.time())}
            scored.append(image_id)
            try:
                datastore.update_image_info(image_id, {SCORE_KEY: signals[signal]})
            except Exception as exc:  # the datastore copy is informative only
                logger.warning(f"could not store the score of {image_id} in the datastore: {exc}")
        self.store.save(scores)
        return {"method": SCORE_KEY, "signal": signal, "version": version, "scored": len(scored),
                "skipped": skipped, "failed": failed}


def _targets(request: dict, default: tuple[str, ...]) -> list[str]:
    """The request's `targets` (a list) or `prompt` (one), else the conf labels."""
    given = request.get("targets")
    if isinstance(given, list) and given and all(isinstance(t, str) and t.strip() for t in given):
        return [t.strip() for t in given]
    if given is not None:
        raise ValueError("targets must be a non-empty list of structure names")
    prompt = request.get("prompt")
    return [prompt.strip()] if isinstance(prompt, str) and prompt.strip() else list(default)


class MostUncertain(Strategy):
    """Serve the most uncertain unlabeled image, balanced over the targets the model found (conf key
    `uncertainty_balance`, default on); unscored images come after scored ones.

    Pure top-uncertainty picking concentrated on what the model fails at most: on the loop benchmark its first
    20 picks were 10 breast, 5 thyroid, 5 fetal head and no kidney image, while random picks covered all four
    and trained a better model (benchmarks/results/annotation_loop/NOTES.md). Balancing first picks the target
    with the fewest labels (`labeled_groups`; an unlabelled image belongs to the target the model found most of
    when it was scored), then the most uncertain image of it.
    """

    def __init__(self, runtime: Runtime):
        super().__init__("UMind: the most uncertain unlabeled image first, balanced over targets "
                         "(run the umind_uncertainty scoring)")
        self.store = UncertaintyStore(runtime.conf.workdir)
        self.balance = runtime.conf.uncertainty_balance

    def __call__(self, request, datastore: Datastore):
        images = datastore.get_unlabeled_images()
        if not images:
            return None
        scores = self.store.load()
        if self.balance:
            best = pick_balanced(images, labeled_groups(datastore, scores), scores)
        else:
            best = max(images, key=lambda i: (i in scores, scores.get(i, {}).get("score", -1.0), i))
        return {"id": best, SCORE_KEY: scores.get(best, {}).get("score"),
                "target": scores.get(best, {}).get("target")}


def labeled_groups(datastore: Datastore, scores: dict[str, dict]) -> list[str]:
    """The targets the labelled images count for: the names their labels give (what a person said is there),
    else the target the model found when the image was scored.

    Counting labelled images by the model's guess alone failed on the loop benchmark: its most uncertain
    "kidney" images were breast and fetal images it mistook for kidney, so kidney looked covered and no
    kidney image was picked in 20."""
    out = []
    for image_id in datastore.get_labeled_images():
        try:
            info = datastore.get_label_info(image_id, DefaultLabelTag.FINAL) or {}
        except Exception:  # a label without info still counts, by the model's guess
            info = {}
        names = info_fields(info).get(LABEL_NAMES)
        if isinstance(names, dict) and names:
            out.extend(str(name).strip() for name in names)
        elif image_id in scores:
            out.append(scores[image_id].get("target", NO_TARGET))
    return out


def pick_balanced(unlabeled: list[str], groups_labeled: list[str], scores: dict[str, dict]) -> str:
    """The most uncertain scored image of the target with the fewest labels (ties: the higher score); the
    first unscored image when none is scored."""
    scored = [i for i in unlabeled if isinstance(scores.get(i), dict) and "score" in scores[i]]
    if not scored:
        return sorted(unlabeled)[0]
    counts: dict[str, int] = {}
    for name in groups_labeled:
        counts[name] = counts.get(name, 0) + 1
    group = lambda i: scores[i].get("target", NO_TARGET)  # noqa: E731
    return max(scored, key=lambda i: (-counts.get(group(i), 0), scores[i]["score"], i))
