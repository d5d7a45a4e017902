"""List functions longer than a limit (default 80 lines) outside tests: a function a reader cannot see whole on
one screen is one to split.

    python scripts/long_functions.py [LIMIT] [PATHS...]

Counts a function from its `def` line (decorators excluded) to its last line, nested functions included in
their parent; prints `lines path:line qualified.name`, longest first, and exits 1 when any is found.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

DEFAULT_ROOTS = ("umind_core", "monailabel_app", "slicer_module", "scripts", "benchmarks")


def long_functions(paths: list[Path], limit: int) -> list[tuple[int, str, int, str]]:
    found = []
    for path in paths:
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        stack: list[tuple[ast.AST, str]] = [(tree, "")]
        while stack:
            node, prefix = stack.pop()
            for child in ast.iter_child_nodes(node):
                if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    name = f"{prefix}{child.name}"
                    if not isinstance(child, ast.ClassDef):
                        n = child.end_lineno - child.lineno + 1
                        if n > limit:
                            found.append((n, str(path), child.lineno, name))
                    stack.append((child, name + "."))
                else:
                    stack.append((child, prefix))
    return sorted(found, reverse=True)


def main(argv: list[str]) -> int:
    limit = int(argv[0]) if argv and argv[0].isdigit() else 80
    roots = [Path(a) for a in argv[1 if argv and argv[0].isdigit() else 0:]] or [Path(r) for r in DEFAULT_ROOTS]
    files = sorted(p for r in roots for p in ([r] if r.is_file() else r.rglob("*.py")) if "tests" not in p.parts)
    found = long_functions(files, limit)
    for n, path, line, name in found:
        print(f"{n:4d} {path}:{line} {name}")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
