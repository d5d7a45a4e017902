"""The promotion gate: a new version serves only if no task got worse, on every set it is scored on.

A round of corrections on one domain can raise segmentation there while eroding detection, diagnosis or
refusals elsewhere; a gate on segmentation Dice alone let exactly that through. So every set (the held-out
labels of this and every earlier run, the seeded synthetic regression set) is scored
on every task it has data for, and each task is compared with a tolerance: absolute for scores (higher is
better), relative for errors (lower is better). The rule is the same on every set: "the tasks the new
labels cover improve or hold within tolerance" and "no regression task worse by more than the tolerance"
are one check applied to different sets.

The seeded synthetic regression set is judged against the start (the model the workdir began with), not
against the served version. A score on n samples moves by 1/n per answer: at the old default of 60 images (26
diagnosis samples, 0.038 each, more than the tolerance) a served version that got one diagnosis lucky
(0.615 -> 0.731) blocked six later runs in the loop benchmark that were still above the start. Judging each run
against the one before also lets skills drift by one tolerance per round, without bound; against the start the
total loss is bounded by one tolerance whatever the number of rounds. Held-out labels (new and earlier rounds)
are judged against the served version, which is the one that learned them.

The held-out labels (every run's held-out corrections, pooled: `umind_lora.SET_HELD_OUT`) are judged with a
quarter of the tolerance (at the defaults 0.005 for scores, 1.25% for errors) and the noise rule below
(`held_out_tolerance`): they are the domain the run trained for, where a version must not get worse, and a loss
small enough to hide inside a 0.02 tolerance is the loss that matters there. Measured on the loop benchmark from
demo model 3 (benchmarks/results/annotation_loop_demo3): 40 test images
of the new look showed the promoted versions losing 0.010 [-0.017, -0.003] mIoU, while the gate's "new labels"
(1-2 images a run) and "earlier labels" (1-4) never had the ten samples a task needed to gate there. Pooled, the
set grows by the held-out part of every run, and it gates from `held_out_min_samples` (3) scored samples, the
paired standard error keeping a single flipped answer from deciding, but never forgiving more than the full
score tolerance (`held_out_tolerance`: one collapsed mask among six passed the uncapped rule). A few images still see
only large losses: the recipe, not the gate, has to make the small ones rare.

The gate protects the team's data first. A version that is clearly better on the held-out labels (a task
improved beyond the tolerance and beyond `noise_z` paired standard errors, with `held_out_min_samples` scored
samples: `clear_gains`) has the synthetic regression suite judged within a stated budget (conf
`synthetic_budget_score`, `synthetic_budget_error`; `budget_tolerance`) instead of the tolerance, still against
the start, so the synthetic sites can lose at most one budget over any number of rounds. Once a version is
promoted so, the runs after it keep the budget (`umind_lora.gate_tables`): a served version that learned the team's
scans leaves the next little to gain there, and the tolerance against the start rejected it for the loss the served
version had already been allowed. Before any such promotion a version no better on the team's scans keeps the
tolerance everywhere, and any loss on the held-out labels always rejects. Measured
before this rule: 20 real fetal-head corrections lifted their held-out labels 0.43 -> 0.69 mIoU and detection F1
0.40 -> 1.00, and the version was rejected for the synthetic suite's -0.037 mIoU and keypoints 1.4% -> 2.0%.

A change is also weighed against the noise of the set it was measured on. Both versions answer the same
samples, so the paired standard error of the change is sd(after_i - before_i) / sqrt(n) (`paired_se`). On the
loop benchmark's 150-image suite it is 0.008 for caliper error (74 samples, start 0.094: the 5% tolerance is
0.0047) and about 0.05 for diagnosis accuracy (70 samples, tolerance 0.02): a retrain that changes nothing
systematic still moves 53 of 74 caliper answers, so the plain rule rejected runs on noise (the uncertainty arm
had every run rejected; offline, training on its 16 labels without any measurement line moved caliper error
0.094 -> 0.100 just as with them). A task is therefore worse only when it is beyond the tolerance *and* the
change exceeds `noise_z` paired standard errors (1.28: under a 10% chance that noise alone did it). Where a
summary carries no per-sample values (an older cache) the plain rule applies.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

__all__ = ["GATE_METRICS", "PER_SAMPLE", "Tolerance", "compare", "decide", "format_table", "held_out_tolerance",
           "paired_se", "per_sample_values", "clear_gains", "budget_tolerance"]

#: summary key of the per-sample values (task -> one value per sample, in the set's order; None = unscored)
PER_SAMPLE = "per_sample"

#: task -> (summary key of umind_core.evaluation.runner, "score" | "error")
GATE_METRICS: dict[str, tuple[str, str]] = {
    "segment": ("segmentation_miou", "score"),
    "detect": ("detection_f1", "score"),
    "keypoints": ("keypoint_error_rel_width", "error"),
    "measure": ("measurement_rel_error", "error"),
    "diagnose": ("diagnosis_accuracy", "score"),
    "refusal": ("refusal_accuracy", "score"),
}


@dataclass(frozen=True)
class Tolerance:
    score: float = 0.02  # absolute, for scores in [0, 1]
    error: float = 0.05  # relative, for errors
    #: a task scored on fewer samples than this on a set is shown but does not gate: one flipped answer
    #: among three held-out images is noise, not a regression
    min_samples: int = 10
    #: a change beyond the tolerance counts only when it also exceeds this many paired standard errors
    #: (0 = the tolerance alone decides)
    noise_z: float = 1.28
    #: the most the noise rule may forgive a score (absolute); None = no cap. Errors are never capped: their
    #: per-sample values (a keypoint, a caliper) move on every retrain even when nothing systematic changed
    score_noise_cap: float | None = None

    def worse(self, kind: str, before: float, after: float, se: float | None = None) -> bool:
        beyond = after < before - self.score if kind == "score" else after > before * (1.0 + self.error) + 1e-12
        if se is None:
            return beyond
        allowance = self.noise_z * se
        if kind == "score" and self.score_noise_cap is not None:
            allowance = min(allowance, self.score_noise_cap)
        return beyond and abs(after - before) > allowance


#: the held-out labels' tolerances as a share of the suite's (0.005 for scores, 1.25% for errors at the defaults).
#: Not zero: with zero, five held-out images that all moved by the same 0.0005 (paired standard error 0.000)
#: rejected a run (loop benchmark, 20 labels)
HELD_OUT_SHARE = 0.25


def held_out_tolerance(tol: Tolerance, min_samples: int) -> Tolerance:
    """How the held-out labels are judged: a quarter of the tolerance, the same noise rule with what it forgives a
    score capped at the full score tolerance, gating from `min_samples` samples.

    Why the cap: on 3-12 images the paired standard error grows with the loss when one image carries it (one mask
    of six collapsing from 0.6 to 0 IoU gives a change of -0.10 with SE 0.10), so the plain noise rule forgives any
    loss that a single corrected image carries. The loop benchmark served such a version (run 2, `random`, 20
    labels: held-out labels 0.679 -> 0.575, the test split -0.011 [-0.017, -0.005]). Capped, a held-out score is
    forgiven at most the 0.02 the regression suite grants at all, so a small loss on one image among four (-0.008)
    is still noise and a collapsed mask, a lost box or a flipped answer is not. Replayed on the recorded loop runs:
    `benchmarks/replay_gate.py`."""
    return replace(tol, score=tol.score * HELD_OUT_SHARE, error=tol.error * HELD_OUT_SHARE,
                   min_samples=int(min_samples), score_noise_cap=tol.score)


def _sample_value(task: str, sample: dict) -> float | None:
    """One sample's share of the task's gate metric, in the metric's units."""
    if task == "keypoints":
        px = -sample["score"] if sample.get("score") is not None else None
        return None if px is None or not sample.get("width") else px / float(sample["width"])
    if task == "measure":
        return sample.get("rel_error")
    return sample.get("score")


def per_sample_values(samples: list[dict]) -> dict[str, list]:
    """task -> the per-sample values of its gate metric, in evaluation order (what `paired_se` pairs)."""
    out: dict[str, list] = {}
    for s in samples:
        if s.get("task") in GATE_METRICS:
            v = _sample_value(s["task"], s)
            out.setdefault(s["task"], []).append(None if v is None else round(float(v), 5))
    return out


def paired_se(before: dict, after: dict, task: str) -> float | None:
    """Standard error of the mean per-sample change of `task` between two summaries of the same set; None when
    either lacks per-sample values, their samples do not line up, or fewer than two pairs are scored."""
    b, a = (before.get(PER_SAMPLE) or {}).get(task), (after.get(PER_SAMPLE) or {}).get(task)
    if not a or not b or len(a) != len(b):
        return None
    d = [y - x for x, y in zip(b, a) if x is not None and y is not None]
    if len(d) < 2:
        return None
    m = sum(d) / len(d)
    return math.sqrt(sum((x - m) ** 2 for x in d) / (len(d) - 1) / len(d))


def compare(before: dict, after: dict, tol: Tolerance, start: dict | None = None) -> list[dict]:
    """One row per task both summaries have a value for: before, after, change, and whether it got worse.

    With ``start`` (the first version's scores on the same set) a row is judged against the start, and
    ``before`` (the served version) is shown beside it."""
    rows = []
    for task, (key, kind) in GATE_METRICS.items():
        b, a = before.get(key), after.get(key)
        anchor = b if start is None else start.get(key)
        if b is None or a is None or anchor is None:
            continue
        summaries = (before, after) if start is None else (before, after, start)
        n = min(int((s.get("n_samples") or {}).get(task, 0)) for s in summaries)
        gates = n >= tol.min_samples
        se = paired_se(before if start is None else start, after, task)
        row = {"task": task, "metric": key, "kind": kind, "before": round(float(b), 4),
               "after": round(float(a), 4), "change": round(float(a) - float(b), 4), "n": n,
               "se": None if se is None else round(se, 4),
               "gates": gates, "worse": gates and tol.worse(kind, float(anchor), float(a), se),
               # what this row was allowed (the suite's budget when the held-out labels are clearly better)
               "allowed": tol.score if kind == "score" else tol.error}
        if start is not None:
            row["start"] = round(float(anchor), 4)
        rows.append(row)
    return rows


def clear_gains(rows: list[dict], tol: Tolerance) -> list[dict]:
    """The rows of a table (the held-out labels, compared with `tol`) whose task got clearly better: beyond the
    tolerance in the better direction and beyond `noise_z` paired standard errors, on enough samples to gate."""
    out = []
    for row in rows:
        if not row.get("gates", True):
            continue
        b, a, se = row["before"], row["after"], row.get("se")
        better = a - b if row["kind"] == "score" else b - a
        margin = tol.score if row["kind"] == "score" else abs(b) * tol.error
        if better > margin and (se is None or not tol.noise_z or better > tol.noise_z * se):
            out.append(row)
    return out


def budget_tolerance(tol: Tolerance, score_budget: float, error_budget: float) -> Tolerance:
    """`tol` with the synthetic suite's budget in place of its tolerance (the noise rule unchanged)."""
    return replace(tol, score=max(tol.score, score_budget), error=max(tol.error, error_budget))


def decide(tables: dict[str, list[dict]], tol: Tolerance) -> tuple[bool, str]:
    """(promote, reason) from the per-set tables; the reason names every task that regressed and where."""
    if not any(tables.values()):
        return False, "no held-out set had data to score the new version on"
    if not any(row.get("gates", True) for rows in tables.values() for row in rows):
        return False, (f"no task had {tol.min_samples} scored samples on any set: too little held-out data "
                       "to judge the new version (label more images, or lower gate_min_samples)")
    regressed = [(name, row) for name, rows in tables.items() for row in rows if row["worse"]]
    if not regressed:
        return True, "no task worse than the tolerance on any set"
    parts = [f"{row['task']} on {name}: {'start ' if 'start' in row else ''}{row.get('start', row['before']):.3f}"
             f" -> {row['after']:.3f} ({_allowed(row, tol)})" for name, row in regressed]
    noise = (f", each beyond {tol.noise_z:g} paired standard errors"
             if tol.noise_z and any(row.get("se") is not None for _, row in regressed) else "")
    return False, f"rejected: {'; '.join(parts)}{noise}"


def _allowed(row: dict, tol: Tolerance) -> str:
    """What the row was allowed, in words: the tolerance (or the suite's budget) it was judged with."""
    allowed = row.get("allowed", tol.score if row["kind"] == "score" else tol.error)
    return (f"allowed -{allowed:g} absolute" if row["kind"] == "score" else f"allowed +{allowed:.0%} relative")


def format_table(tables: dict[str, list[dict]]) -> str:
    """The per-task table as plain text (run record, logs, the Slicer panel): start (where a set is judged
    against it), before (the served version), after (the candidate), change (after - before), se (the paired
    standard error of the change against the row's anchor)."""
    lines = [f"{'set':<22} {'task':<10} {'n':>4} {'start':>8} {'before':>8} {'after':>8} {'change':>8} {'se':>7}"]
    for name, rows in tables.items():
        for row in rows:
            flag = "  WORSE" if row["worse"] else ("" if row.get("gates", True) else "  (too few to gate)")
            start = f"{row['start']:>8.3f}" if "start" in row else f"{'-':>8}"
            se = f"{row['se']:>7.3f}" if row.get("se") is not None else f"{'-':>7}"
            lines.append(f"{name:<22} {row['task']:<10} {row.get('n', 0):>4} {start} {row['before']:>8.3f} "
                         f"{row['after']:>8.3f} {row['change']:>+8.3f} {se}{flag}")
    return "\n".join(lines)
