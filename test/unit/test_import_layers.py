"""fibril_calibration's modules import only their own layer or the ones below it, and neither
package has an import circle: checked on the import graph read from the source."""

from __future__ import annotations

from pathlib import Path

import pytest
from _import_graph import cycles, import_graph, modules

REPO = Path(__file__).resolve().parents[2]
CALIBRATION = REPO / "fibril_calibration"
CORE = REPO / "fibril_sim_core"

# Bottom to top: data flows request → episodes → problem → solve → analysis → report (drawing
# a result) → result.
BASE = {"errors", "_json", "_atomic", "parameters", "loss_spec", "alignment", "evaluation"}
LAYERS = ("base", "recordings", "model", "request", "solve", "analysis", "report", "top")
# The top layer in order, bottom to top: the solver and what it returns, the result document
# (and its typed reading), the parameter sets scored and the documents written from a result
# or its scores, the engine that runs a calibration, and the front doors (Python, the command
# lines, mujoco.sysid) that start one. Within the top, too, no module imports one above it.
TOP = (("outcome", "solver"),
       ("result", "fitted"),
       ("metrics_json", "parameter_sets", "sim_csv", "sysid_export", "sysid_import"),
       ("engine",),
       ("calibration", "cli", "recording_cli", "mujoco_sysid"))


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


def top_tier(module: str) -> int:
    """A top-layer module's place in ``TOP`` (a module of the package's top level)."""
    name = module.split(".")[-1]
    return next(i for i, tier in enumerate(TOP) if name in tier)


def test_every_top_module_has_a_place_in_the_top_order() -> None:
    top = {m.split(".")[-1] for m, p in modules(CALIBRATION, "fibril_calibration").items()
           if p.name != "__init__.py" and layer(m) == "top"}
    placed = [name for tier in TOP for name in tier]
    assert len(placed) == len(set(placed))
    assert set(placed) == top  # a new top module needs a tier; a moved one leaves TOP


def test_no_top_module_imports_one_above_it() -> None:
    graph = import_graph(CALIBRATION, "fibril_calibration")
    upward = sorted(f"{m} (top {top_tier(m)}) imports {t} (top {top_tier(t)})"
                    for m, targets in graph.items() if layer(m) == "top"
                    for t in targets if layer(t) == "top" and top_tier(t) > top_tier(m))
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
