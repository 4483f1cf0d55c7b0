"""The experiment report (issue 25): ``fibril_sim experiment run EXP --report DIR`` shows every
run's status, each metric per variant against the baseline with its assertion threshold, the
parameter differences and the chosen signals across runs; without matplotlib it refuses with
one line before any run."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

from fibril_sim_core.cli import main

EXAMPLE = Path(__file__).resolve().parents[2] / "config" / "examples" / "drivetrain"


def _experiment(tmp_path: Path) -> Path:
    """The wheel-damping study, 300 steps, one variant failing its assertion."""
    doc = yaml.safe_load((EXAMPLE / "wheel-damping-study.yaml").read_text())
    doc["model"]["manifest"] = str(EXAMPLE / "simulation.yaml")
    doc["scenario"] = str(EXAMPLE / "drive-start.yaml")
    doc["parameters"]["baseline_overlay"] = str(EXAMPLE / "damping-baseline.yaml")
    doc["variants"] = doc["variants"][:2]
    doc["metrics"] = [m for m in doc["metrics"] if m["kind"] in ("signal", "rtf")]
    doc["assertions"] = [{"metric": "final_wheel_speed", "op": "gt", "value": 9.5}]
    doc["execution"]["steps"] = 300
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    return path


def test_experiment_report(tmp_path: Path, capsys) -> None:
    pytest.importorskip("matplotlib")
    from _report_checks import check_figures, parse

    study = _experiment(tmp_path)
    code = main(["experiment", "run", str(study), "--output", str(tmp_path / "out.json"),
                 "--report", str(tmp_path / "report")])
    out = capsys.readouterr().out
    assert f"report:  {tmp_path / 'report'}" in out
    page = parse(tmp_path / "report")
    text = " ".join(page.text)
    doc = yaml.safe_load(study.read_text())
    for name in ["baseline", *(v["id"] for v in doc["variants"]),
                 *(m["id"] for m in doc["metrics"]), "wheel_damping", "gt 9.5",
                 "joint:wheel_joint.velocity", "body:chassis.position"]:
        assert name in text, name
    import json

    result = json.loads((tmp_path / "out.json").read_text())
    for run in result["runs"]:
        assert [run["id"], "baseline" if run["role"] == "baseline" else "variant",
                run["status"]] == [c for c in next(r for r in page.rows if r[:1] == [run["id"]])
                                   [:3]]
    assert code == (0 if result["summary"]["succeeded"] == result["summary"]["runs"] else 1)
    check_figures(tmp_path / "report", page)


def test_missing_matplotlib_stops_before_any_run(tmp_path: Path, monkeypatch, capsys) -> None:
    study = _experiment(tmp_path)
    for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    code = main(["experiment", "run", str(study), "--output", str(tmp_path / "out.json"),
                 "--report", str(tmp_path / "report")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert "--report needs the Python package matplotlib" in err[0]
    assert not (tmp_path / "out.traces").exists() and not (tmp_path / "report").exists()
