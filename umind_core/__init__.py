"""UMind core: the UMind-VL model and everything that needs no server.

Heavy names (torch, transformers) load on first use, so `umind_core.answers.grounding` and the CLI's argument parsing
stay fast and importable where torch is absent.
"""

from __future__ import annotations

__version__ = "0.1.0"

_LAZY = {
    "UMindVL": ("umind_core.modeling.umind", "UMindVL"),
    "UMindModelError": ("umind_core.modeling.umind", "UMindModelError"),
    "UMindConfig": ("umind_core.modeling.config", "UMindConfig"),
    "LoraSettings": ("umind_core.modeling.config", "LoraSettings"),
    "Predictor": ("umind_core.inference.predictor", "Predictor"),
    "Result": ("umind_core.answers.results", "Result"),
    "GroundedObject": ("umind_core.answers.results", "GroundedObject"),
    "demo_model_dir": ("umind_core.demo", "demo_model_dir"),
    "load_model": ("umind_core.demo", "load_model"),
}

__all__ = ["__version__", *_LAZY]


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        module, attr = _LAZY[name]
        value = getattr(importlib.import_module(module), attr)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'umind_core' has no attribute {name!r}")
