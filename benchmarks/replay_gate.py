"""Would today's gate have decided the recorded loop runs differently? Replayed from their stored gate rows.

Each run record of `bench_annotation_loop.py` keeps the gate's per-set rows (start, served, candidate, paired
standard error, samples). This re-decides every recorded run with the current rules (`gate.Tolerance`,
`held_out_tolerance`) from those rows alone, at the server's default tolerances, and lists the runs whose decision
changes beside what the benchmark's test split saw for that version. Only the first changed decision of an arm is
a clean counterfactual: after it the real server would have served another version and trained on from there.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "monailabel_app"))

SET_HELD_OUT = "held-out labels"


def redecide(gate: dict, params) -> tuple[bool, list[str]]:
    """(promote, the rows now worse) for one run's stored gate rows under today's rules."""
    from lib.trainers.gate import Tolerance, held_out_tolerance

    tol = Tolerance(params.score_tolerance, params.error_tolerance, params.gate_min_samples, params.gate_noise_z)
    worse = []
    for name, rows in gate.items():
        t = held_out_tolerance(tol, params.held_out_min_samples) if name == SET_HELD_OUT else tol
        for row in rows:
            anchor = row.get("start", row["before"])
            if row.get("n", 0) >= t.min_samples and t.worse(row["kind"], anchor, row["after"], row.get("se")):
                worse.append(f"{row['task']} on {name} {anchor:.3f} -> {row['after']:.3f} (se {row.get('se')})")
    return not worse, worse


def replay(path: Path) -> list[dict]:
    from lib.conf import TrainParams

    params = TrainParams()
    data = json.loads(path.read_text())
    out = []
    for strategy, rounds in data["strategies"].items():
        for rnd in rounds:
            run = rnd.get("run") or {}
            if not run.get("gate"):
                continue
            was = run.get("status") == "promoted"
            now, worse = redecide(run["gate"], params)
            out.append({"strategy": strategy, "labels": rnd.get("labels"), "version": run.get("version"),
                        "recorded": "promoted" if was else "rejected", "today": "promoted" if now else "rejected",
                        "changed": was != now, "worse_today": worse,
                        "test_segmentation": (rnd.get("test") or {}).get("segmentation_miou")})
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", type=Path, nargs="+", help="bench_annotation_loop results.json files")
    ap.add_argument("--out", type=Path, default=None, help="write the replay as JSON here")
    args = ap.parse_args(argv)
    report = {}
    for path in args.results:
        rows = replay(path)
        report[str(path.relative_to(ROOT) if path.is_absolute() and ROOT in path.parents else path)] = rows
        changed = [r for r in rows if r["changed"]]
        print(f"{path}: {len(rows)} runs, {len(changed)} decided differently today")
        for r in changed:
            seg = r["test_segmentation"]
            print(f"  {r['strategy']} at {r['labels']} labels (version {r['version']}): {r['recorded']} -> "
                  f"{r['today']}; test split segmentation of that version {seg if seg is None else round(seg, 3)}; "
                  f"{'; '.join(r['worse_today']) or 'nothing worse now'}")
    if args.out:
        from umind_core.atomic import write_text

        write_text(args.out, json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
