"""Copy a trained UMind folder into the package as the bundled demo model, stored in bfloat16.

bfloat16 halves the folder (the small config is about 25 MB in float32) and loads back as float32 by default;
the model card's scores are measured on this stored copy, not on the training run's float32 weights.
The model folder is replaced whole (atomically), so the card is carried over and the run's curves.png (beside
its final/ folder) becomes training_curves.png.

    .venv/bin/python scripts/package_demo_model.py runs/demo/final
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

from umind_core.atomic import write_text
from umind_core.demo import DEMO_MODEL_DIR
from umind_core.modeling.umind import UMindVL

LIMIT_MB = 25
CARD = "MODEL_CARD.md"


def main(source: str) -> None:
    model = UMindVL.from_pretrained(source, dtype=torch.bfloat16)
    model.config.description = (
        "UMind demo model: the small Qwen3-VL config trained on synthetic ultrasound and two public research "
        "data sets (HC18, BUSI). "
        "A demonstration, not a clinical model. See MODEL_CARD.md."
    )
    card = (DEMO_MODEL_DIR / CARD).read_text() if (DEMO_MODEL_DIR / CARD).is_file() else None
    model.save_pretrained(DEMO_MODEL_DIR)
    if card is not None:
        write_text(DEMO_MODEL_DIR / CARD, card)
    curves = Path(source).resolve().parent / "curves.png"
    if curves.is_file():
        (DEMO_MODEL_DIR / "training_curves.png").write_bytes(curves.read_bytes())
    size_mb = sum(p.stat().st_size for p in DEMO_MODEL_DIR.rglob("*") if p.is_file()) / 2**20
    if size_mb > LIMIT_MB:
        raise SystemExit(f"demo model is {size_mb:.1f} MB, over the {LIMIT_MB} MB limit")
    print(f"demo model written to {DEMO_MODEL_DIR} ({size_mb:.1f} MB)")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    main(sys.argv[1])
