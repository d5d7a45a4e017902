"""How high can the served model go on the loop's new look at all? The in-domain ceiling the loop is judged by.

The annotation loop's goal is +0.05 `scanner_b` segmentation after 20 labels, or half of the gap
between the start and this ceiling closed. The ceiling: the bundled demo model trained further on plenty of
`scanner_b` images (every weight, as the demo model was trained; all sites and tasks; seeds 8,000,000+, which no
other set uses), then scored exactly as the loop benchmark scores a served version
(`bench_annotation_loop.evaluate_version`'s evaluation) on the loop's own test split (`scanner_b`, seeds
7,000,000+) and its default-look set (seeds 1,000,000+). The start model is scored in the same run.

`python benchmarks/loop_ceiling.py --work DIR` writes benchmarks/results/loop_ceiling.json; training resumes
from its checkpoints when stopped.

`--mix-varied N` trains on N images of the look the demo model was trained on (`varied`, augmented, lesion-heavy, as
its card's data; seeds 8,500,000+) beside the `scanner_b` ones: can this model hold the new look and the old at
once? If it gains the new look as far without losing the old, its size is not what caps the loop; if it gains
less or loses the old look anyway, a model this size trades one look for the other. `--copies K` repeats each
`scanner_b` image K times in that mix (`--n-train 20 --copies 25`: what 20 labels can give when a retrain may
take as long as this one).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from bench_annotation_loop import evaluate_model, make_data  # a sibling script: benchmarks/ is sys.path[0]

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "loop_ceiling.json"
TRAIN_SEED0 = 8_000_000
MIX_SEED0 = 8_500_000
#: the demo model's own training data's options (its card), for the images `--mix-varied` adds
VARIED_DATA = ("--appearance", "varied", "--augment", "0.3",
               "--sites", "breast,breast,thyroid,thyroid,kidney,fetal_head")


def umind(*args: str, log: Path) -> float:
    t0 = time.perf_counter()
    with open(log, "a") as fh:
        subprocess.run([str(ROOT / ".venv" / "bin" / "umind"), *args], check=True, stdout=fh, stderr=fh)
    return time.perf_counter() - t0


def score(model_dir: Path | None, manifests: dict[str, Path]) -> dict:
    """The loop benchmark's own scoring of a served version (`evaluate_model`), its numeric summary kept."""
    from umind_core import demo
    from umind_core.modeling.umind import UMindVL

    model = demo.load_model(None) if model_dir is None else UMindVL.from_pretrained(model_dir)
    return {name: {k: v for k, v in split.items() if k == "samples" or isinstance(v, (int, float))}
            for name, split in evaluate_model(model, manifests).items()}


def mixed_manifest(work: Path, train_b: Path, n_varied: int, log: Path, copies: int = 1) -> Path:
    """One training manifest of the `scanner_b` images (`copies` times each, ids suffixed) and `n_varied` of the
    varied look, in `work`."""
    import copy

    from umind_core.data.manifest import read_manifest, rebase, write_manifest

    varied = work / "train_varied" / "manifest.jsonl"
    if not varied.is_file():
        umind("synth", "--out", str(varied.parent), "-n", str(n_varied), "--seed0", str(MIX_SEED0), "--size", "256",
              "--refusal-rate", "0.5", *VARIED_DATA, log=log)
    mixed = work / "train_mixed.jsonl"
    if not mixed.is_file():
        records = read_manifest(varied)
        for rec in read_manifest(train_b):
            for k in range(copies):
                again = copy.deepcopy(rec)
                again.id = rec.id if copies == 1 else f"{rec.id}-copy{k}"
                records.append(again)
        for rec in records:
            rebase(rec, work)
        write_manifest(records, mixed)
    return mixed


def main(argv=None) -> int:
    from umind_core.atomic import write_text

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", required=True, type=Path)
    ap.add_argument("--n-train", type=int, default=2000)
    ap.add_argument("--steps", type=int, default=600)
    ap.add_argument("--lr", type=float, default=2e-4)
    ap.add_argument("--mix-varied", type=int, default=0, help="this many images of the model's own training look too")
    ap.add_argument("--copies", type=int, default=1, help="with --mix-varied: each scanner_b image this many times")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    if args.copies != 1 and not args.mix_varied:
        ap.error("--copies repeats the scanner_b images within a --mix-varied mix")
    work = args.work
    work.mkdir(parents=True, exist_ok=True)
    log = work / "log.txt"
    manifests = make_data(work / "data", 200, 40, 48)  # the loop benchmark's sets (same seeds and sizes)
    results = json.loads(args.out.read_text()) if args.out.is_file() else {}
    setup = {"n_train": args.n_train, "steps": args.steps, "lr": args.lr, "train_seed0": TRAIN_SEED0}
    if args.mix_varied:
        setup.update(mix_varied=args.mix_varied, mix_seed0=MIX_SEED0)
    if args.copies != 1:
        setup["copies"] = args.copies
    if results.get("setup") != setup:
        results = {"setup": setup}
    if "start" not in results:
        results["start"] = score(None, manifests)
        write_text(args.out, json.dumps(results, indent=2))
    train = work / "train_b" / "manifest.jsonl"
    if not train.is_file():
        umind("synth", "--out", str(train.parent), "-n", str(args.n_train), "--seed0", str(TRAIN_SEED0),
              "--size", "256", "--appearance", "scanner_b", "--refusal-rate", "0.5", log=log)
    if args.mix_varied:
        train = mixed_manifest(work, train, args.mix_varied, log, args.copies)
    final = work / "ceiling" / "final"
    if not final.is_dir():
        results["train_s"] = round(umind(
            "train", "--manifest", str(train), "--out", str(work / "ceiling"), "--model",
            str(ROOT / "umind_core" / "demo_model"), "--full", "--batch-size", "8", "--val-fraction", "0.02",
            "--lr", str(args.lr), "--warmup-ratio", "0.03", "--epochs", "3", "--max-steps", str(args.steps),
            "--save-every", "100", "--keep-checkpoints", "1", "--log-every", "20", "--no-progress", log=log), 1)
    results["ceiling"] = score(final, manifests)
    write_text(args.out, json.dumps(results, indent=2))
    for name in ("test", "default_test"):
        s, c = results["start"][name], results["ceiling"][name]
        print(f"{name}: segmentation {s['segmentation_miou']:.3f} -> {c['segmentation_miou']:.3f}, detection recall "
              f"{s['detection_recall']:.3f} -> {c['detection_recall']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
