"""Would more capacity lift demo model 3? The same CPU time spent continuing it, and continuing a deeper copy of it.

Why: demo model 3 underfits (`fit_gap.py`: 0.826 mIoU on its own training images), and the default-look goals are
0.03-0.04 above it. Two ways to spend the next stage: more steps of the same 5.8 M parameters, or a model with more
layers. The deeper copy appends text layers and vision blocks after the existing ones with their residual outputs
(o_proj, down_proj, attn.proj, linear_fc2) zero, so it starts computing exactly what demo model 3 computes and only
training makes use of the new layers (deepstack taps the first vision blocks and feeds the first text layers, which
keep their places). Both arms train every weight on the same 6,000 images of demo model 3's recipe at seeds it never
used (108,000+), at stage 2's learning rate, for about the same minutes on this machine (550 and 330 steps), then are
scored with demo model 3 on the card's two held-out sets and the 400 unseen images of `fit_gap.py`.

    .venv/bin/python benchmarks/capacity_probe.py --work /tmp/grow --out benchmarks/results/capacity_probe
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fit_gap import UNSEEN_SEED0, make_set, recipe
from readout_from_masks import held_out_set

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "umind_core" / "demo_model"
ARMS = (("base", None, 550), ("deep", (4, 4), 330))  # (name, (text layers, vision blocks) added, steps)
TRAIN_SEED0, TRAIN_N = "108000", 6000
#: residual output projections: zero, so a new layer or block adds nothing until it is trained
ZERO = ("o_proj", "down_proj", "attn.proj", "linear_fc2")


def deepen(src: Path, dst: Path, text_add: int, vision_add: int) -> int:
    """A copy of the UMind folder `src` at `dst` with layers appended that leave its function unchanged; returns
    the base's parameter count."""
    from safetensors.torch import load_file, save_file

    if dst.exists():
        shutil.rmtree(dst)
    shutil.copytree(src, dst)
    cfg_path = dst / "base" / "config.json"
    cfg = json.loads(cfg_path.read_text())
    n_text, n_vis = cfg["text_config"]["num_hidden_layers"], cfg["vision_config"]["depth"]
    cfg["text_config"]["num_hidden_layers"] = n_text + text_add
    cfg["vision_config"]["depth"] = n_vis + vision_add
    cfg_path.write_text(json.dumps(cfg, indent=2))
    weights = load_file(str(src / "base" / "model.safetensors"))
    gen = torch.Generator().manual_seed(0)

    def fresh(name: str, like: torch.Tensor) -> torch.Tensor:
        if any(z in name for z in ZERO) or name.endswith("bias"):
            return torch.zeros_like(like)
        if "norm" in name:
            return torch.ones_like(like)
        return (torch.randn(like.shape, generator=gen) * 0.02).to(like.dtype)

    for prefix, n_old, add in (("language_model.layers", n_text, text_add), ("visual.blocks", n_vis, vision_add)):
        last = f"{prefix}.{n_old - 1}."
        template = {k: v for k, v in weights.items() if last in k}
        for i in range(n_old, n_old + add):
            for name, tensor in template.items():
                new = name.replace(last, f"{prefix}.{i}.")
                weights[new] = fresh(new, tensor)
    save_file(weights, str(dst / "base" / "model.safetensors"), metadata={"format": "pt"})
    return sum(v.numel() for v in weights.values())


def train(work: Path, name: str, model: Path, steps: int) -> Path:
    out = work / name
    manifest = work / "train" / "manifest.jsonl"
    subprocess.run([sys.executable, "-m", "umind_core.cli", "train", "--manifest", str(manifest), "--out", str(out),
                    "--model", str(model), "--full", "--batch-size", "8", "--val-fraction", "0.02",
                    "--lr", "2e-4", "--warmup-ratio", "0.03", "--max-steps", str(steps), "--log-every", "10",
                    "--eval-every", "110", "--save-every", "110", "--keep-checkpoints", "1", "--no-progress"],
                   check=True)
    return out


def scores(folder: Path, sets: dict[str, Path]) -> dict:
    from umind_core.evaluation.runner import evaluate
    from umind_core.modeling.umind import UMindVL

    model = UMindVL.from_pretrained(folder)
    out = {}
    for name, manifest in sets.items():
        m = evaluate(model, manifest, tasks=["segment", "diagnose"], progress=False).metrics
        out[name] = {"miou": m["segmentation"]["mean"], "per_site": m["segmentation"]["per_site"],
                     "diagnosis": m["summary"]["diagnosis_accuracy"]}
        print(folder.name, name, json.dumps(out[name]), flush=True)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", required=True)
    ap.add_argument("--out", required=True, help="folder for eval.json and each arm's metrics and summary")
    ap.add_argument("--model", default=str(DEMO), help="the model both arms continue (default: the bundled demo "
                    "model; the published run continued demo model 3)")
    args = ap.parse_args(argv)
    start_model = Path(args.model)
    work, out = Path(args.work), Path(args.out)
    flags, _, _ = recipe()
    make_set(work, "train", TRAIN_SEED0, TRAIN_N, flags)
    sets = {"default": held_out_set(work, "default", 200),  # the card's held-out sets, and fit_gap's unseen ones
            "unseen_varied": make_set(work, "unseen", UNSEEN_SEED0, 400, flags),
            "scanner_b": held_out_set(work, "scanner_b", 200)}
    folders = {"demo3": start_model}
    out.mkdir(parents=True, exist_ok=True)
    for name, grow, steps in ARMS:
        start = start_model
        if grow is not None:
            start = work / f"{name}_start"
            print(f"{name}: {deepen(start_model, start, *grow)} parameters in the base", flush=True)
        folders[name] = train(work, name, start, steps) / "final"
        shutil.copy(work / name / "metrics.csv", out / f"{name}_metrics.csv")
        shutil.copy(work / name / "summary.json", out / f"{name}_summary.json")
    result = {name: scores(folder, sets) for name, folder in folders.items()}
    (out / "eval.json").write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
