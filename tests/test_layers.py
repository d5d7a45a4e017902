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


# ------------------------------------------------------------------------------------------ inside umind_core

#: packages below the ones that read datasets in, answer commands and score models: they import none of those
LOWER = ("umind_core.data", "umind_core.imageio", "umind_core.modeling", "umind_core.training", "umind_core.masks")
UPPER = ("umind_core.importers", "umind_core.commands", "umind_core.cli", "umind_core.evaluation")


def _core_modules() -> dict[str, tuple[Path, bool]]:
    """Dotted name -> (file, is a package) for every module of umind_core."""
    out = {}
    for path in sorted((ROOT / "umind_core").rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        package = parts[-1] == "__init__"
        out[".".join(parts[:-1] if package else parts)] = (path, package)
    return out


def _core_graph() -> dict[str, dict[str, int]]:
    """Module -> {module it imports: line}, lazy imports inside functions included. `from P import x` is an edge to
    the module P.x when x is one, else to P; relative imports are resolved."""
    modules = _core_modules()

    def known(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, dict[str, int]] = {}
    for name, (path, package) in modules.items():
        here = name if package else name.rpartition(".")[0]
        edges: dict[str, int] = {}
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = here
                for _ in range(node.level - 1):
                    base = base.rpartition(".")[0]
                base = (base + "." + node.module if node.module else base) if node.level else node.module or ""
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
            else:
                continue
            for target in targets:
                found = known(target) if target.startswith("umind_core") else None
                if found and found != name:
                    edges.setdefault(found, node.lineno)
        graph[name] = edges
    return graph


def _cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each a set of modules that import each
    other round a loop."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_umind_core_has_no_import_cycle():
    """An import inside a function hides a cycle from Python until the day someone moves it to the top; read with
    ast, it counts. Each cycle is named with its edges (module -> module: line) so the shared piece can be found
    and moved down to the module that should own it."""
    graph = _core_graph()
    bad = []
    for component in _cycles(graph):
        edges = [f"{a} -> {b}: {graph[a][b]}" for a in component for b in sorted(graph[a]) if b in component]
        bad.append("cycle " + ", ".join(component) + "\n  " + "\n  ".join(edges))
    assert not bad, "\n".join(bad)


def test_the_cycle_check_sees_lazy_and_relative_imports():
    """The walk itself: a function-local relative import is an edge (the cycles it once missed were all such)."""
    graph = _core_graph()
    assert "umind_core.commands._infer_exam" in graph["umind_core.commands.infer"]  # lazy, relative
    assert "umind_core.evaluation.scoring" in graph["umind_core.evaluation.exams"]  # top level, relative
    assert _cycles({"a": {"b": 1}, "b": {"c": 2}, "c": {"a": 3}, "d": {"a": 4}}) == [["a", "b", "c"]]


def test_lower_packages_do_not_import_upper_ones():
    """The data, image, model and training code sits below the importers, the commands and the evaluation (the
    manifest check once borrowed the importers' label-map split: it is `masks.split_label_map` now)."""
    bad = [f"{a} -> {b}: {line}" for a, edges in _core_graph().items() if a.startswith(LOWER)
           for b, line in edges.items() if b.startswith(UPPER)]
    assert not bad, "\n".join(bad)


#: what each package that shows the architecture may import from the rest of umind_core (prefixes): the answer rules
#: sit on the image and mask utilities only, the network knows the grammar's tokens but not how it is served, and
#: inference is the one place the three meet
ALLOWED = {
    "umind_core.answers": ("umind_core.atomic", "umind_core.imageio", "umind_core.masks", "umind_core.painter"),
    "umind_core.modeling": ("umind_core.answers.grounding", "umind_core.atomic"),
    "umind_core.inference": ("umind_core.answers", "umind_core.data.manifest", "umind_core.imageio",
                             "umind_core.masks", "umind_core.modeling", "umind_core.prompts"),
}


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_architecture_packages_import_only_what_their_role_allows(package):
    bad = [f"{a} -> {b}: {line}" for a, edges in _core_graph().items() if a.startswith(package + ".") or a == package
           for b, line in edges.items() if not b.startswith(package) and not b.startswith(ALLOWED[package])]
    assert not bad, "\n".join(bad)


def test_the_answer_rules_load_without_torch():
    """The server's edge and the CLI's parsing read answers before any model loads: no module of answers/ imports
    torch, at the top or inside a function."""
    bad = [f"{path.relative_to(ROOT)}:{line}" for path in sorted((ROOT / "umind_core" / "answers").glob("*.py"))
           for line, module in _imports(path) if module.split(".")[0] == "torch"]
    assert not bad, "\n".join(bad)
