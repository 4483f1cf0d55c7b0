"""fibril_calibration's modules import only their own layer or the ones below it, and neither
package has an import circle: checked on the import graph read from the source."""

from __future__ import annotations

from pathlib import Path

import pytest
from _import_graph import cycles, import_graph, modules

REPO = Path(__file__).resolve().parents[2]
CALIBRATION = REPO / "fibril_calibration"
CORE = REPO / "fibril_sim_core"

# Bottom to top: data flows request → episodes → problem → solve → analysis → result.
BASE = {"errors", "_json", "parameters", "losses", "alignment", "evaluation"}
LAYERS = ("base", "recordings", "model", "request", "solve", "analysis", "top")


def layer(module: str) -> str:
    """A module's layer: its subpackage, ``base`` for the shared vocabulary at the top of the
    package, ``top`` for what runs a calibration and writes its results."""
    parts = module.split(".")[1:]
    if len(parts) > 1:
        return parts[0]
    return "base" if parts[0] in BASE else "top"


def test_every_module_has_a_known_layer() -> None:
    names = [m for m, p in modules(CALIBRATION, "fibril_calibration").items()
             if p.name != "__init__.py"]
    assert {layer(m) for m in names} <= set(LAYERS)
    # the subpackages are the layers: a new folder needs a place in LAYERS
    folders = {p.name for p in (CALIBRATION / "fibril_calibration").iterdir()
               if (p / "__init__.py").exists()}
    assert folders == set(LAYERS) - {"base", "top"}


def test_no_module_imports_a_layer_above_its_own() -> None:
    graph = import_graph(CALIBRATION, "fibril_calibration")
    upward = sorted(f"{m} ({layer(m)}) imports {t} ({layer(t)})"
                    for m, targets in graph.items() for t in targets
                    if LAYERS.index(layer(t)) > LAYERS.index(layer(m)))
    assert upward == []


def test_recordings_and_model_do_not_know_each_other() -> None:
    graph = import_graph(CALIBRATION, "fibril_calibration")
    across = sorted(f"{m} imports {t}" for m, targets in graph.items() for t in targets
                    if {layer(m), layer(t)} == {"recordings", "model"})
    assert across == []


@pytest.mark.parametrize("root, package", [(CALIBRATION, "fibril_calibration"),
                                           (CORE, "fibril_sim_core")])
def test_no_import_circles(root: Path, package: str) -> None:
    assert cycles(import_graph(root, package)) == []


def test_the_graph_sees_deferred_and_type_only_imports(tmp_path: Path) -> None:
    """The check would be blind if a function-level or TYPE_CHECKING import went unseen."""
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "sub" / "__init__.py").write_text("from .b import B\n")
    (package / "a.py").write_text("def f():\n    from .sub import B\n")
    (package / "sub" / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..a import f\nB = 1\n")
    graph = import_graph(tmp_path, "pkg")
    assert graph == {"pkg.a": {"pkg.sub.b"}, "pkg.sub.b": {"pkg.a"}}
    assert cycles(graph) == [["pkg.a", "pkg.sub.b"]]
