"""Recordings as robots write them (issue 24): each test makes the input that stalled a new
user and checks the outcome end to end."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import _recording_rig as rig
import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def arm(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    folder = tmp_path_factory.mktemp("arm")
    data = rig.recording(folder)
    data["folder"] = folder
    data["csv"] = rig.write_csv(folder / "log.csv", data)
    return data


def _gravcomp_arm(folder: Path, gravcomp: bool) -> Path:
    """The rig's arm under gravity, link2 gravity-compensated or not."""
    xml = rig.ARM_XML.replace('gravity="0 0 0"', 'gravity="0 0 -9.81"')
    if gravcomp:
        xml = xml.replace('<body name="link2" pos="0.3 0 0">',
                          '<body name="link2" pos="0.3 0 0" gravcomp="1">')
    folder.mkdir(parents=True, exist_ok=True)
    manifest = rig.write_arm(folder)
    (folder / "arm.xml").write_text(xml)
    return manifest


def test_gravity_compensated_model_driven_by_recorded_torques_warns(arm: dict[str, Any],
                                                                    tmp_path: Path) -> None:
    """Item 8: torque inputs replayed on a model whose bodies compensate gravity: the request
    load names the bodies, joints and episodes (progress line and result warnings); a model
    without gravcomp gets no warning."""
    from fibril_calibration.engine import run_calibration
    from fibril_calibration.gravity_check import gravcomp_warnings

    for gravcomp in (True, False):
        folder = tmp_path / f"gravcomp-{gravcomp}"
        manifest = _gravcomp_arm(folder, gravcomp)
        doc = rig.request(manifest, {"path": str(arm["csv"]), "time_column": "t_s"},
                          csv_log=True, windows={"every": 0.5})
        request = rig.load_request(folder, doc)
        found = gravcomp_warnings(request)
        if not gravcomp:
            assert found == []
            continue
        (warning,) = found
        assert warning["bodies"] == ["link2"] and warning["joints"] == ["j1", "j2"]
        assert "counted twice" in warning["message"]
        doc["optimizer"] = {"max_iterations": 1}
        path = rig.write_request(folder, doc, "fit.yaml")
        lines: list[str] = []
        result = run_calibration(path, progress=lines.append)
        assert any(line.startswith("warning: the model compensates gravity") for line in lines)
        assert any(w.get("code") == "gravity_compensated_torque_inputs"
                   for w in result.document["warnings"])


def test_panda_example_names_its_gravity_compensation() -> None:
    """Item 8: the example's README and model file say what gravcomp assumes of a log."""
    readme = (REPO / "config/examples/panda/README.md").read_text()
    assert "gravcomp" in readme and "measured" in readme
    model = (REPO / "config/examples/panda/model/panda_torque.xml").read_text()
    assert "include gravity" in model.split("<worldbody>")[0]
    maker = (REPO / "config/examples/panda/make_model.py").read_text()
    assert "include gravity" in maker
    assert yaml.safe_load((REPO / "config/examples/panda/panda.yaml").read_text())
