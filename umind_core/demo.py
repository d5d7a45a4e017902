"""Where the bundled demo model lives, and the one rule for "no model given".

The CLI, the server and the evaluation all resolve a missing --model / conf the same way: the demo model shipped
inside the package when it is there, otherwise a freshly built tiny model with a loud warning that its output is
meaningless (random weights), so that nothing silently serves noise as if it were a trained model.
"""

from __future__ import annotations

import sys
from pathlib import Path

from .modeling.config import CONFIG_NAME

__all__ = ["DEMO_MODEL_DIR", "demo_model_dir", "has_demo_model", "load_model"]

DEMO_MODEL_DIR = Path(__file__).resolve().parent / "demo_model"
UNTRAINED_WARNING = (
    "no model given and the bundled demo model is not built yet: using a freshly built tiny model with random "
    "weights - its output is meaningless"
)


def has_demo_model() -> bool:
    return (DEMO_MODEL_DIR / CONFIG_NAME).is_file()


def demo_model_dir() -> Path:
    """The bundled demo model's folder, loadable with UMindVL.from_pretrained."""
    if not has_demo_model():
        from .modeling.umind import UMindModelError

        raise UMindModelError(f"the bundled demo model is missing: {DEMO_MODEL_DIR / CONFIG_NAME} does not exist")
    return DEMO_MODEL_DIR


def load_model(path: str | Path | None = None, device: str = "cpu", dtype: str = "float32", trainable: bool = False,
               warn=None):
    """Load `path`, or the demo model, or (with a warning) a fresh tiny model."""
    from .modeling.umind import UMindVL

    if path:
        return UMindVL.from_pretrained(path, device=device, dtype=dtype, trainable=trainable)
    if has_demo_model():
        return UMindVL.from_pretrained(DEMO_MODEL_DIR, device=device, dtype=dtype, trainable=trainable)
    (warn or (lambda msg: print(f"umind: warning: {msg}", file=sys.stderr)))(UNTRAINED_WARNING)
    from .modeling.tiny import build_model

    model = build_model("tiny")
    model.to(device)
    model.train(trainable)
    if not trainable:
        model.requires_grad_(False)
    return model
