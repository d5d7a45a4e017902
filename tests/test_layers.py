"""The layers import downwards only: umind_core (the model, data, CLI) knows neither the MONAI Label app nor the
Slicer module; the app does not know the Slicer module; the Slicer module runs inside Slicer's own Python, where
neither umind_core nor the app is installed, so it imports neither (its copies of shared rules are pinned by
test_one_owner.py). Read from the source with ast, so a lazy import inside a function counts too."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FORBIDDEN = {
    "umind_core": ("monailabel_app", "slicer_module", "lib", "UMindLib", "monailabel"),
    "monailabel_app": ("slicer_module", "UMindLib"),
    "slicer_module": ("umind_core", "monailabel_app", "lib"),
}


def _imports(path: Path) -> list[tuple[int, str]]:
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.append((node.lineno, node.module))
    return out


@pytest.mark.parametrize("layer", sorted(FORBIDDEN))
def test_no_upward_import(layer):
    bad = []
    for path in sorted((ROOT / layer).rglob("*.py")):
        for line, module in _imports(path):
            if module.split(".")[0] in FORBIDDEN[layer]:
                bad.append(f"{path.relative_to(ROOT)}:{line}: imports {module}")
    assert not bad, "\n".join(bad)
