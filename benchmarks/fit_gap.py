"""Does the demo model underfit or overfit? Its scores on images it trained on against unseen images of the same
distribution.

Why: the card's default-look goals (segmentation 0.88, breast lesions 0.75, benign/malignant 0.90) are out of demo
model 3's reach, and the next step depends on why. If the model scored well on its own training images and worse on
new ones, more data would be the lever; if it scores no better on the images it trained on, the model (its size, its
training) is the bound and more images of the same kind will not move it. The training images are regenerated from
the seeds and flags of `scripts/train_demo_model3.sh` (read from that script, the one owner of its recipe), leaving
out those its trainer held back for validation (`data.split.unit_hash` under `--val-fraction`); the unseen ones are
the same flags at seeds no training used (5,200,000+).

    .venv/bin/python benchmarks/fit_gap.py --work /tmp/fit --out benchmarks/results/fit_gap.json
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RECIPE = ROOT / "scripts" / "train_demo_model3.sh"
UNSEEN_SEED0 = "5200000"
TASKS = ["segment", "diagnose"]


def recipe() -> tuple[list[str], str, float]:
    """(the `umind synth` flags of the training set without its output, size and first seed; the first seed; the
    validation fraction) as the training script has them."""
    text = RECIPE.read_text(encoding="utf-8").replace("\\\n", " ")
    synth = shlex.split(re.search(r'"\$umind" synth (.*)', text).group(1))
    flags, seed0, k = [], None, 0
    while k < len(synth):
        if synth[k] in ("--out", "-n", "--seed0"):
            seed0 = synth[k + 1] if synth[k] == "--seed0" else seed0
            k += 2
            continue
        flags.append(synth[k])
        k += 1
    fraction = float(re.search(r"--val-fraction (\S+)", text).group(1))
    return flags, seed0, fraction


def make_set(work: Path, name: str, seed0: str, n: int, flags: list[str]) -> Path:
    out = work / name
    if not (out / "manifest.jsonl").is_file():
        subprocess.run([sys.executable, "-m", "umind_core.cli", "synth", "--out", str(out), "-n", str(n),
                        "--seed0", seed0, *flags], check=True)
    return out / "manifest.jsonl"


def trained_only(manifest: Path, fraction: float) -> Path:
    """The manifest without the records the trainer held back for validation (their hash under the fraction)."""
    from umind_core.data.manifest import read_manifest, write_manifest
    from umind_core.data.split import unit_hash

    kept = [r for r in read_manifest(manifest) if unit_hash(r.id) >= fraction]
    out = manifest.with_name("trained.jsonl")
    write_manifest(kept, out)
    return out


def scores(model, manifest: Path) -> dict:
    from umind_core.data.manifest import read_manifest
    from umind_core.evaluation.runner import evaluate

    m = evaluate(model, manifest, tasks=TASKS, progress=False).metrics
    seg = m["segmentation"]
    return {"images": len(read_manifest(manifest)), "masks": seg["n"], "segmentation_miou": seg["mean"],
            "per_site": seg["per_site"], "diagnosis_accuracy": m["summary"]["diagnosis_accuracy"]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("-n", type=int, default=400, help="images of each set before the validation ones are left out")
    ap.add_argument("--model", default=None, help="UMind folder (default: the bundled demo model)")
    args = ap.parse_args(argv)
    from umind_core import demo

    flags, seed0, fraction = recipe()
    work = Path(args.work)
    seen = trained_only(make_set(work, "seen", seed0, args.n, flags), fraction)
    unseen = make_set(work, "unseen", UNSEEN_SEED0, args.n, flags)
    model = demo.load_model(args.model)
    out = {"command": " ".join(["benchmarks/fit_gap.py", *(argv or sys.argv[1:])]), "flags": flags,
           "trained_seed0": seed0, "unseen_seed0": UNSEEN_SEED0, "val_fraction": fraction,
           "trained": scores(model, seen), "unseen": scores(model, unseen)}
    print(json.dumps(out, indent=1), flush=True)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
