"""Scores of one model on the gate's sets, through the project's one evaluation (umind_core.evaluation).

The app does not score on its own: `runner.evaluate` asks the same prompts the server answers and scores
them the way `umind eval` and the model card do, so a number in a run record means what it means there.
"""

from __future__ import annotations

import logging

from umind_core.evaluation.runner import EVAL_TASKS, EvalError, evaluate

from .gate import PER_SAMPLE, per_sample_values

__all__ = ["score_sets", "summary"]

logger = logging.getLogger(__name__)


def summary(predictor, records: list) -> dict:
    """The evaluation summary of `records` (every task they have data for) with its per-sample values; {} when
    none is scorable."""
    if not records:
        return {}
    try:
        report = evaluate(predictor, records, tasks=EVAL_TASKS, progress=False)
    except EvalError as exc:
        logger.info(f"umind gate: nothing to score: {exc}")
        return {}
    out = dict(report.metrics["summary"])
    out["n_samples"] = report.metrics["n_samples"]
    out[PER_SAMPLE] = per_sample_values(report.samples)  # the gate pairs them to know a change from noise
    return out


def score_sets(model, sets: dict[str, list], max_new_tokens: int = 256) -> dict[str, dict]:
    """{set name: summary} for a UMindVL (or a ready Predictor)."""
    from umind_core.inference.predictor import Predictor

    predictor = model if isinstance(model, Predictor) else Predictor(model, max_new_tokens=max_new_tokens)
    return {name: summary(predictor, records) for name, records in sets.items()}
