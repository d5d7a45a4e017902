"""What reading answers off masks costs on refusals: the refusal questions of the model card's held-out sets asked
with `readout="mask"` (the default) and `readout="tokens"`, same model, same images, one run.

Why: with the mask readout a detection is asked as "segment the target", so a detection of anatomy the image does
not show (a refusal case) becomes a segment question, which the model may answer with a mask where it would have
refused the detection. The evaluation's refusal accuracy moved when the default changed, and nothing measured the
cost; this prints both readings and lists the cases whose verdict differs.

    .venv/bin/python benchmarks/refusal_readout.py --work /tmp/readout \\
        --out benchmarks/results/refusal_readout.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from readout_from_masks import HELD_OUT, READOUTS, held_out_set  # noqa: E402


def _refusals(model, manifest: Path, readout: str) -> tuple[dict, dict]:
    """(the refusal metrics, {case: whether its answer was right}) of one reading."""
    from umind_core.evaluation.runner import evaluate

    report = evaluate(model, manifest, tasks=["refusal"], progress=False, readout=readout)
    cases = {}
    for s in report.samples:
        if s.get("task") == "refusal":
            scope = "out of scope" if s["should_refuse"] else "in scope"
            cases[f"{s['id']} {s['predict_task']} {scope} ({s['target']})"] = s["correct"]
    return report.metrics["refusal"], cases


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", required=True, type=Path, help="folder for the held-out sets (made once)")
    ap.add_argument("--model", help="a UMind folder (default: the bundled demo model)")
    ap.add_argument("--n", type=int, default=200, help="images per set (the card's 200)")
    ap.add_argument("--out", required=True, type=Path)
    args = ap.parse_args(argv)
    from umind_core.atomic import write_text
    from umind_core.demo import load_model

    model = load_model(args.model)
    t0 = time.perf_counter()
    result = {"model": args.model or "demo", "sets": {}}
    for name in HELD_OUT:
        manifest = held_out_set(args.work, name, args.n)
        readings = {r: _refusals(model, manifest, r) for r in READOUTS}
        mask, tokens = readings["mask"][1], readings["tokens"][1]
        result["sets"][name] = {
            **{r: readings[r][0] for r in READOUTS},
            "right_with_tokens_only": sorted(c for c in mask if tokens.get(c) and not mask[c]),
            "right_with_mask_only": sorted(c for c in mask if mask[c] and tokens.get(c) is False)}
        print(name, {r: readings[r][0]["accuracy"] for r in READOUTS}, flush=True)
    result["seconds"] = round(time.perf_counter() - t0, 1)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_text(args.out, json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
