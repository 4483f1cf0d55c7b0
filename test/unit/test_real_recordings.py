"""Recordings as robots write them (issue 24): each test makes the input that stalled a new
user and checks the outcome end to end."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import _recording_rig as rig
import numpy as np
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


def _export(path: Path, data: dict[str, Any], *, delimiter: str, header: list[str] | None,
            epoch: int = 1763146355421617551) -> Path:
    """The arm's CSV log as a robot exports it: 19-digit ns stamps, ``delimiter``, and a
    header row only when given."""
    import csv

    rows = list(csv.reader(rig.write_csv(path.with_suffix(".plain"), data).open()))[1:]
    with path.open("w", newline="") as out:
        writer = csv.writer(out, delimiter=delimiter, lineterminator="\n")
        if header is not None:
            writer.writerow(header)
        for row in rows:
            writer.writerow([epoch + round(float(row[0]) * 1e9), *row[1:]])
    return path


def test_csv_as_exported(arm: dict[str, Any], tmp_path: Path) -> None:
    """Item 3: headerless files named by columns (a list or {index: name}), the time column
    found by its name, 19-digit ns stamps, ';' and tab delimiters, and a header row that is
    data told apart in the error; each loads the same episode as the plain log."""
    names = ["t_s", "tau1", "tau2", "q1", "q2", "dq1", "dq2"]
    plain = rig.load_request(tmp_path, rig.request(
        arm["manifest"], {"path": str(arm["csv"]), "time_column": "t_s"}, csv_log=True))
    reference = plain.training[0].signal("q").values

    def loads(source: dict[str, Any], name: str) -> None:
        request = rig.load_request(tmp_path, rig.request(arm["manifest"], source,
                                                         csv_log=True), name)
        np.testing.assert_array_equal(request.training[0].signal("q").values, reference)

    ns = ["time_ns", *names[1:]]
    headerless = _export(tmp_path / "state.csv", arm, delimiter=";", header=None)
    loads({"path": str(headerless), "header": False, "columns": ns}, "list.yaml")
    loads({"path": str(headerless), "header": False,
           "columns": {0: "time_ns", 1: "tau1", 2: "tau2", 3: "q1", 4: "q2", 5: "dq1",
                       6: "dq2"}}, "map.yaml")
    tabbed = _export(tmp_path / "state.tsv", arm, delimiter="\t",
                     header=["timestamp", *names[1:]])
    loads({"path": str(tabbed)}, "implicit.yaml")  # timestamp: found, 19 digits: ns
    rig.request_fails(tmp_path, rig.request(arm["manifest"], {"path": str(headerless)},
                                                   csv_log=True),
                             "the first row looks like data: 1763146355421617551, ",
                             "set header: false")
    # a headerless file's bad cell: its line is the file's own (row 1 is line 1)
    lines = headerless.read_text().splitlines()
    lines[4] = lines[4].replace(";", ";x", 1)
    bad = tmp_path / "bad.csv"
    bad.write_text("\n".join(lines) + "\n")
    rig.request_fails(tmp_path, rig.request(arm["manifest"], {
        "path": str(bad), "header": False, "columns": ns}, csv_log=True),
        "column 'tau1' line 5: 'x")
