"""How loose the packages' seams are: the counts issue 31 tracks, before and after.

Counts, over the three Python packages' sources (tests excluded unless said):
``Any`` mentions, ``getattr``/``hasattr`` calls, imports inside functions, ``type: ignore``
comments, classes over 25 methods, modules over 600 lines, and test imports of private names
(a ``_name`` imported, or a module path with a ``_private`` part).

    python bench/typed_seams.py [--json]
"""

from __future__ import annotations

import argparse
import ast
import io
import json
import re
import tokenize
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("fibril_sim_core/fibril_sim_core", "fibril_sim_ros/fibril_sim_ros",
            "fibril_calibration/fibril_calibration")
PROJECT_MODULES = ("fibril_sim_core", "fibril_sim_ros", "fibril_calibration")
MAX_METHODS = 25
MAX_LINES = 600


@dataclass
class Counts:
    any_mentions: int = 0
    getattr_hasattr: int = 0
    function_imports: int = 0
    type_ignores: int = 0
    big_classes: list[str] = field(default_factory=list)
    big_modules: list[str] = field(default_factory=list)
    test_private_imports: int = 0


def _code_tokens(source: str) -> list[tokenize.TokenInfo]:
    return list(tokenize.generate_tokens(io.StringIO(source).readline))


def _count_source(path: Path, counts: Counts) -> None:
    source = path.read_text(encoding="utf-8")
    tokens = _code_tokens(source)
    counts.any_mentions += sum(1 for t in tokens if t.type == tokenize.NAME and t.string == "Any")
    counts.type_ignores += sum(1 for t in tokens if t.type == tokenize.COMMENT
                               and re.search(r"type:\s*ignore", t.string))
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                and node.func.id in ("getattr", "hasattr")):
            counts.getattr_hasattr += 1
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            counts.function_imports += sum(
                1 for inner in ast.walk(node) if isinstance(inner, (ast.Import, ast.ImportFrom)))
        if isinstance(node, ast.ClassDef):
            methods = [n for n in node.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
            if len(methods) > MAX_METHODS:
                counts.big_classes.append(f"{node.name} ({len(methods)})")
    lines = source.count("\n")
    if lines > MAX_LINES:
        counts.big_modules.append(f"{path.relative_to(ROOT)} ({lines})")


def _private(name: str) -> bool:
    return any(part.startswith("_") and not part.startswith("__") for part in name.split("."))


def _count_test(path: Path, counts: Counts) -> None:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and \
                node.module.split(".")[0] in PROJECT_MODULES:
            if _private(node.module):
                counts.test_private_imports += len(node.names)
            else:
                counts.test_private_imports += sum(1 for a in node.names if _private(a.name))
        elif isinstance(node, ast.Import):
            counts.test_private_imports += sum(
                1 for a in node.names
                if a.name.split(".")[0] in PROJECT_MODULES and _private(a.name))


def measure() -> Counts:
    counts = Counts()
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            _count_source(path, counts)
    for path in sorted((ROOT / "test").rglob("*.py")):
        _count_test(path, counts)
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print the counts as JSON")
    counts = measure()
    if parser.parse_args().json:
        print(json.dumps(asdict(counts), indent=2))
        return
    print(f"Any mentions:                 {counts.any_mentions}")
    print(f"getattr/hasattr calls:        {counts.getattr_hasattr}")
    print(f"imports inside functions:     {counts.function_imports}")
    print(f"type: ignore comments:        {counts.type_ignores}")
    print(f"classes over {MAX_METHODS} methods:     {len(counts.big_classes)}  "
          f"{', '.join(counts.big_classes)}")
    print(f"modules over {MAX_LINES} lines:      {len(counts.big_modules)}")
    for module in counts.big_modules:
        print(f"  {module}")
    print(f"test imports of private names: {counts.test_private_imports}")


if __name__ == "__main__":
    main()
