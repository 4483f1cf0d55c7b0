"""The fitted-model MJCF (issue 25, ``--export-mjcf``): written from MjSpec, it compiles to the
plan's own compiled-model hash even where MuJoCo's writer rounds (a fitted damping, wheels
oriented by Euler angles) and with the components' additions (their sensors)."""

from __future__ import annotations

from pathlib import Path

import mujoco
import pytest

from fibril_sim_core.mjcf_export import MjcfExportError, export_mjcf
from fibril_sim_core.overlays import OverlayParameter, load_overlay_artifact
from fibril_sim_core.plan import SimulationBuilder
from fibril_sim_core.provenance import compiled_model_sha256

BENCH = Path(__file__).resolve().parents[2] / "config" / "examples" / "drivetrain" / "bench.yaml"


FITTED = """\
format: fibril_sim/parameter_overlay
schema_version: {major: 1, minor: 0}
id: fitted
parameters:
  - {id: wheel_damping, value: 0.05009246620100211, target: "mujoco:joint_damping:wheel_joint"}
  - {id: motor_resistance, value: 2.600655650875054, target: "mujoco:dcmotor_resistance:drive"}
"""


def _overlays(folder: Path) -> tuple[OverlayParameter, ...]:
    path = folder / "fitted-overlay.yaml"
    path.write_text(FITTED, encoding="utf-8")
    parameters = load_overlay_artifact(path).parameters
    path.unlink()
    return parameters


def test_export_compiles_to_the_plans_hash(tmp_path: Path) -> None:
    plan = SimulationBuilder().build(BENCH, overlays=_overlays(tmp_path))
    expected = plan.provenance["compiled_model_sha256"]
    path = tmp_path / "elsewhere" / "fitted.xml"
    path.parent.mkdir()
    assert export_mjcf(BENCH, _overlays(tmp_path), path, comment="from test",
                       expected_sha256=expected) == expected
    assert compiled_model_sha256(mujoco.MjModel.from_xml_path(str(path))) == expected
    text = path.read_text()
    assert text.startswith("<!-- from test -->")
    assert 'damping="0.05009246620100211"' in text  # MuJoCo alone writes 0.0500925
    assert "__fibril__wheel_encoder__jointpos" in text  # the encoder component's sensor


def test_a_hash_that_cannot_be_reproduced_writes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "fitted.xml"
    with pytest.raises(MjcfExportError, match="no file written"):
        export_mjcf(BENCH, _overlays(tmp_path), path, comment="x", expected_sha256="0" * 64)
    assert list(tmp_path.iterdir()) == []
