"""The import graph of a package, read from its source (nothing is imported).

Every ``import`` counts, wherever it is: at the top, inside a function (a deferred import is
still a dependency) or under ``if TYPE_CHECKING`` (a type is one too). A package ``__init__``
only re-exports, so an import of a name through a package counts as an import of the module
that defines it; the ``__init__`` files themselves are left out.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path


def modules(root: Path, package: str) -> dict[str, Path]:
    """Dotted module name → file, for every module of ``package`` under ``root``."""
    out = {}
    for path in sorted((root / package).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _imports(name: str, path: Path) -> Iterator[tuple[str, str | None]]:
    """``(module, imported name or None)`` for every import statement of one module."""
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, None
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[:len(package) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for alias in node.names:
                yield target, alias.name


def import_graph(root: Path, package: str) -> dict[str, set[str]]:
    """Module → the modules of the same package it imports (package ``__init__`` files are
    resolved to the module that defines the imported name)."""
    mods = modules(root, package)
    packages = {m for m, p in mods.items() if p.name == "__init__.py"}
    reexports = {(m, imported): target for m in packages
                 for target, imported in _imports(m, mods[m]) if imported and target in mods}

    def resolve(target: str, imported: str | None) -> str | None:
        for _ in range(len(mods)):
            if imported and f"{target}.{imported}" in mods:
                return f"{target}.{imported}"
            if target in packages and (target, imported) in reexports:
                target = reexports[(target, imported)]
                continue
            break
        return target if target in mods and target not in packages else None

    graph: dict[str, set[str]] = {}
    for name, path in mods.items():
        if name in packages:
            continue
        edges = {resolve(t, i) for t, i in _imports(name, path)}
        graph[name] = {e for e in edges if e is not None and e != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found
