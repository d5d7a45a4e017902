"""Does the 8x8 token grid cap lesion masks and calipers? A cheap test before demo model 3 is trained.

Three arms continue demo model 2 (every weight, as it was trained) for the same CPU time on lesion sites
(breast, thyroid) with the tasks that need position (segment, detect, measure):

- `grid8`: 256 px input, the 8x8 merged token grid demo model 2 was trained at; the `varied` look;
- `grid16`: the same weights read at 512 px, a 16x16 grid (Qwen3-VL interpolates its 16x16 table of
  position embeddings to any patch grid, so nothing is re-initialised); the `varied` look; fewer steps, as
  many as fit in grid8's time (the step-time ratio is measured first, in one process pair);
- `ceiling8`: 256 px trained on `scanner_b` itself: how high this architecture goes on that look at all.

All images are made at 256 px: grid16 sees them upsampled, so the only thing that differs is the grid the
language model and the mask decoder work on. Held out: default look (seeds 1,000,000+) and `scanner_b`
(seeds 3,000,000+), breast and thyroid only, never trained on by any arm or by demo model 2.

`python benchmarks/grid_experiment.py --work /tmp/grid` writes benchmarks/results/grid_experiment.json;
a stopped run resumes (finished arms and evaluations are kept, training resumes from its checkpoints).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "umind_core" / "demo_model"
OUT = ROOT / "benchmarks" / "results" / "grid_experiment.json"
TASKS = "segment,detect,measure"
SITES = "breast,thyroid"
SETS = {"train_varied": (20_000_000, "varied"), "train_b": (21_000_000, "scanner_b"),
        "test_default": (1_000_000, "default"), "test_scanner_b": (3_000_000, "scanner_b")}


def sh(*cmd: str, log: Path | None = None) -> float:
    """Run a `umind` command (progress to `log`); its wall time in seconds."""
    t0 = time.perf_counter()
    with open(log or "/dev/null", "a") as fh:
        subprocess.run([sys.executable, "-m", "umind_core.cli", *cmd], check=True, stdout=fh, stderr=fh)
    return time.perf_counter() - t0


def make_sets(work: Path, n_train: int, n_test: int) -> None:
    for name, (seed0, look) in SETS.items():
        if not (work / name / "manifest.jsonl").is_file():
            n = n_train if name.startswith("train") else n_test
            sh("synth", "--out", str(work / name), "-n", str(n), "--seed0", str(seed0), "--sites", SITES,
               "--size", "256", "--appearance", look, "--refusal-rate", "0")


def model_at(work: Path, size: int, start: Path = DEMO) -> Path:
    """Demo model 2's folder with the processor resizing to size x size pixels."""
    out = work / f"demo2_{size}"
    if not out.is_dir():
        shutil.copytree(start, out)
        cfg_path = out / "processor" / "processor_config.json"
        cfg = json.loads(cfg_path.read_text())
        for key in ("image_processor", "video_processor"):
            if isinstance(cfg.get(key), dict) and "size" in cfg[key]:
                cfg[key]["size"] = {"shortest_edge": size * size, "longest_edge": size * size}
        cfg_path.write_text(json.dumps(cfg, indent=2))
    return out


def train(model: Path, manifest: Path, out: Path, steps: int, log: Path) -> tuple[Path, float]:
    final = out / "final"
    if (final / "umind_config.json").is_file():
        return final, json.loads((out / "wall.json").read_text())["seconds"]
    seconds = sh("train", "--manifest", str(manifest), "--out", str(out), "--model", str(model), "--full",
                 "--tasks", TASKS, "--lr", "2e-4", "--warmup-ratio", "0.03", "--batch-size", "8",
                 "--val-fraction", "0.02", "--max-steps", str(steps), "--save-every", "100",
                 "--no-progress", log=log)
    (out / "wall.json").write_text(json.dumps({"seconds": seconds, "steps": steps}))
    return final, seconds


def step_seconds(model: Path, manifest: Path, work: Path, name: str, steps: int) -> float:
    """Seconds per optimizer step past the first few (load and warm-up excluded by differencing two runs)."""
    times = []
    for n in (4, 4 + steps):
        out = work / f"calib_{name}_{n}"
        shutil.rmtree(out, ignore_errors=True)
        times.append(sh("train", "--manifest", str(manifest), "--out", str(out), "--model", str(model), "--full",
                        "--tasks", TASKS, "--batch-size", "8", "--val-fraction", "0.02", "--max-steps", str(n),
                        "--save-every", "100000", "--no-progress"))
        shutil.rmtree(out, ignore_errors=True)
    return (times[1] - times[0]) / steps


def evaluate(model: Path, work: Path, name: str) -> dict:
    out = {}
    for test in ("test_default", "test_scanner_b"):
        folder = work / "eval" / name / test
        if not (folder / "metrics.json").is_file():
            sh("eval", "--model", str(model), "--manifest", str(work / test / "manifest.jsonl"), "--out",
               str(folder), "--tasks", TASKS, "--overlays", "0")
        out[test] = compact(json.loads((folder / "metrics.json").read_text()))
    return out


#: per-sample fields kept in the result file: enough for paired intervals over the same lesions and calipers
_SAMPLE_KEYS = ("task", "id", "site", "prompt", "label", "iou", "rel_error")


def compact(metrics: dict) -> dict:
    """`umind eval`'s metrics.json without answer texts and geometry: the summary and each sample's score."""
    return {"metrics": metrics["metrics"],
            "samples": [{k: x[k] for k in _SAMPLE_KEYS if k in x} for x in metrics.get("samples", [])]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", required=True, type=Path)
    ap.add_argument("--minutes", type=float, default=20.0, help="training CPU time of each arm")
    ap.add_argument("--n-train", type=int, default=1600)
    ap.add_argument("--n-test", type=int, default=80)
    ap.add_argument("--model", type=Path, default=DEMO, help="UMind folder both arms start from (default: the bundled "
                    "demo model)")
    args = ap.parse_args()
    work = args.work
    work.mkdir(parents=True, exist_ok=True)
    log = work / "train.log"
    make_sets(work, args.n_train, args.n_test)
    m8, m16 = model_at(work, 256, args.model), model_at(work, 512, args.model)
    calib = work / "calibration.json"
    if OUT.is_file() and not calib.is_file():  # the committed run's calibration, so that arms stay comparable
        calib.write_text(json.dumps(json.loads(OUT.read_text())["calibration"]))
    if not calib.is_file():
        s8 = step_seconds(m8, work / "train_varied" / "manifest.jsonl", work, "grid8", 12)
        s16 = step_seconds(m16, work / "train_varied" / "manifest.jsonl", work, "grid16", 12)
        calib.write_text(json.dumps({"grid8_s_per_step": s8, "grid16_s_per_step": s16}))
    c = json.loads(calib.read_text())
    steps8 = max(10, int(args.minutes * 60 / c["grid8_s_per_step"]))
    steps16 = max(10, int(steps8 * c["grid8_s_per_step"] / c["grid16_s_per_step"]))
    result = {"calibration": c, "minutes": args.minutes, "tasks": TASKS, "sites": SITES,
              "n_train": args.n_train, "n_test": args.n_test, "arms": {}}
    if OUT.is_file():  # arms a stopped session finished and committed are kept (a session's work dir is not)
        done = json.loads(OUT.read_text())
        if all(done.get(k) == result[k] for k in ("minutes", "tasks", "sites", "n_train", "n_test")):
            result["arms"] = done["arms"]
    for name, model in (("demo2_256", m8), ("demo2_512", m16)):
        if name not in result["arms"]:
            result["arms"][name] = {"steps": 0, "eval": evaluate(model, work, name)}
    arms = {"grid8": (m8, "train_varied", steps8), "grid16": (m16, "train_varied", steps16),
            "ceiling8": (m8, "train_b", steps8)}
    for name, (model, data, steps) in arms.items():
        if name in result["arms"]:
            continue
        final, seconds = train(model, work / data / "manifest.jsonl", work / name, steps, log)
        result["arms"][name] = {"steps": steps, "train_seconds": round(seconds, 1), "data": data,
                                "eval": evaluate(final, work, name)}
        OUT.write_text(json.dumps(result, indent=2))
    OUT.write_text(json.dumps(result, indent=2))
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
