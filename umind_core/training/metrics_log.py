"""The run's metrics: metrics.csv (one row per logged step, rewritten atomically), TensorBoard scalars and a
curves.png at the end. Only the main process writes them; a resumed run keeps the rows up to its checkpoint.
"""

from __future__ import annotations

import csv
import io
import shutil
from pathlib import Path

from ..atomic import atomic_path, write_text
from .config import METRIC_COLUMNS

__all__ = ["MetricsLog", "fmt"]


class MetricsLog:
    def __init__(self, out: Path, steps_per_epoch: int, main: bool, resumed_from: int | None):
        self.out, self.steps_per_epoch, self.main = Path(out), steps_per_epoch, main
        self.rows = _read_rows(self.out / "metrics.csv", upto=resumed_from) if (main and resumed_from is not None) \
            else {}
        self.writer = None
        if main:
            from torch.utils.tensorboard import SummaryWriter

            if resumed_from is None:  # events of a run killed before its first checkpoint would mix with this one
                shutil.rmtree(self.out / "tensorboard", ignore_errors=True)
            self.writer = SummaryWriter(log_dir=str(self.out / "tensorboard"),
                                        purge_step=None if resumed_from is None else resumed_from + 1)

    def record(self, at: int, values: dict, tags: dict) -> None:
        """One metrics.csv row (merged with what step `at` already has) and the TensorBoard scalars."""
        if not self.main:
            return
        row = self.rows.setdefault(at, {"step": at, "epoch": at / self.steps_per_epoch})
        row.update({k: v for k, v in values.items() if v is not None})
        for tag, v in tags.items():
            if v is not None:
                self.writer.add_scalar(tag, v, at)
        _write_rows(self.out / "metrics.csv", self.rows)

    def column(self, name: str) -> list[float]:
        return [self.rows[s][name] for s in sorted(self.rows) if self.rows[s].get(name) is not None]

    def close(self) -> None:
        if self.main:
            _plot_curves(self.out / "curves.png", self.rows)
            self.writer.flush()
            self.writer.close()


def fmt(v) -> str:
    return "" if v is None else (f"{v:.6g}" if isinstance(v, float) else str(v))


def _read_rows(path: Path, upto: int) -> dict[int, dict]:
    rows: dict[int, dict] = {}
    if not path.is_file():
        return rows
    with path.open(newline="") as fh:
        for raw in csv.DictReader(fh):
            try:
                step = int(raw["step"])
            except (KeyError, TypeError, ValueError):
                continue
            if step > upto:
                continue
            row = {"step": step}
            for col in METRIC_COLUMNS[1:]:
                val = raw.get(col)
                row[col] = float(val) if val not in (None, "") else None
            rows[step] = row
    return rows


def _write_rows(path: Path, rows: dict[int, dict]) -> None:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(METRIC_COLUMNS)
    for step in sorted(rows):
        writer.writerow([fmt(rows[step].get(c)) for c in METRIC_COLUMNS])
    write_text(path, buf.getvalue())


def _plot_curves(path: Path, rows: dict[int, dict]) -> None:
    import matplotlib

    matplotlib.use("Agg", force=True)
    from matplotlib.figure import Figure

    fig = Figure(figsize=(9, 6), dpi=100)
    ax_loss, ax_lr = fig.add_subplot(2, 1, 1), fig.add_subplot(2, 1, 2)
    styles = {"loss": "-", "lm_loss": "--", "mask_loss": ":", "val_loss": "-o"}
    for col, style in styles.items():
        pts = [(s, r[col]) for s, r in sorted(rows.items()) if r.get(col) is not None]
        if pts:
            ax_loss.plot(*zip(*pts), style, label=col, markersize=3)
    ax_loss.set_ylabel("loss")
    ax_loss.legend(loc="upper right")
    ax_loss.grid(alpha=0.3)
    pts = [(s, r["lr"]) for s, r in sorted(rows.items()) if r.get("lr") is not None]
    if pts:
        ax_lr.plot(*zip(*pts), "-")
    ax_lr.set_xlabel("optimizer step")
    ax_lr.set_ylabel("learning rate")
    ax_lr.grid(alpha=0.3)
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(str(tmp), format="png")
