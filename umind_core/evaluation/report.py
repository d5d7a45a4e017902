"""Evaluation results as the report's tables (Markdown) and as machine-readable JSON.

`results` is {section: {model: {row: value}}}: a section is one table (e.g. "Segmentation mIoU (%)"),
its rows are metrics or sites, its columns are models - the layout of Tables 2-5 of the UMind-VL
report. Values are numbers, strings or None (shown as "–"). Metric functions return fractions; pass
`scale={section: 100}` to show a section in percent, since guessing the unit from a value would
turn a 0.9 px error into 90.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from numbers import Real
from pathlib import Path
from typing import Any

import numpy as np

from ..atomic import write_text

__all__ = ["ReportInputError", "ReportPaths", "render_markdown", "write_report", "to_jsonable"]

MISSING = "–"


class ReportInputError(ValueError):
    """`results` does not have the {section: {model: {row: value}}} shape; the message says where."""


@dataclass(frozen=True)
class ReportPaths:
    markdown: Path
    metrics: Path


def _check(results: Any) -> Mapping[str, Mapping[str, Mapping[str, Any]]]:
    if not isinstance(results, Mapping) or not results:
        raise ReportInputError("results: expected a non-empty {section: {model: {row: value}}} mapping")
    for section, models in results.items():
        if not isinstance(models, Mapping):
            raise ReportInputError(
                f"results[{section!r}]: expected {{model: {{row: value}}}}, got {type(models).__name__}")
        for model, rows in models.items():
            if not isinstance(rows, Mapping):
                raise ReportInputError(
                    f"results[{section!r}][{model!r}]: expected {{row: value}}, got {type(rows).__name__}")
            for row, value in rows.items():
                if value is not None and not isinstance(value, (str, Real, np.number)):
                    raise ReportInputError(
                        f"results[{section!r}][{model!r}][{row!r}]: expected a number, string or None, "
                        f"got {type(value).__name__}")
    return results


def _cell(value: Any, factor: float, digits: int) -> str:
    if value is None:
        return MISSING
    if isinstance(value, str):
        return _escape(value)
    if isinstance(value, (bool, np.bool_)):
        return str(bool(value))
    if isinstance(value, (int, np.integer)) and factor == 1:
        return str(int(value))
    v = float(value) * factor
    return MISSING if not math.isfinite(v) else f"{v:.{digits}f}"


def _escape(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def render_markdown(
    results: Mapping[str, Mapping[str, Mapping[str, Any]]],
    title: str = "UMind evaluation",
    digits: int = 2,
    scale: Mapping[str, float] | None = None,
) -> str:
    """One Markdown table per section: rows in order of first appearance, columns in model order."""
    _check(results)
    scale = dict(scale or {})
    unknown = sorted(set(scale) - set(results))
    if unknown:
        raise ReportInputError(f"scale: sections {unknown} are not in results")
    lines = [f"# {_escape(title)}", ""]
    for section, models in results.items():
        factor = float(scale.get(section, 1.0))
        model_names = list(models)
        rows: list[str] = []
        for model in model_names:
            for row in models[model]:
                if row not in rows:
                    rows.append(row)
        lines += [f"## {_escape(section)}", ""]
        lines.append("| " + " | ".join([""] + [_escape(m) for m in model_names]) + " |")
        lines.append("|" + "---|" + "---:|" * len(model_names))
        for row in rows:
            cells = [_cell(models[m].get(row), factor, digits) for m in model_names]
            lines.append("| " + " | ".join([_escape(row)] + cells) + " |")
        lines.append("")
    return "\n".join(lines)


def to_jsonable(value: Any) -> Any:
    """Plain JSON types: numpy scalars and arrays unwrapped, NaN / inf as null (strict JSON has no NaN)."""
    if isinstance(value, Mapping):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_jsonable(v) for v in value]
    if isinstance(value, np.ndarray):
        return to_jsonable(value.tolist())
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        v = float(value)
        return v if math.isfinite(v) else None
    return value


def write_report(
    results: Mapping[str, Mapping[str, Mapping[str, Any]]],
    out_dir: str | os.PathLike[str],
    title: str = "UMind evaluation",
    digits: int = 2,
    scale: Mapping[str, float] | None = None,
) -> ReportPaths:
    """Write report.md (the tables) and metrics.json (the unscaled values) into out_dir, each atomically."""
    markdown = render_markdown(results, title=title, digits=digits, scale=scale)
    payload = json.dumps(to_jsonable(results), indent=2, ensure_ascii=False, allow_nan=False) + "\n"
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = ReportPaths(markdown=out / "report.md", metrics=out / "metrics.json")
    write_text(paths.metrics, payload)
    write_text(paths.markdown, markdown)
    return paths
