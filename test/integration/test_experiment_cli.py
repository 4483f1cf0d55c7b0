"""``fibril_sim experiment run``: the result JSON, progress on stderr, exit codes 0 / 1 / 2 and
one-line user errors. Every command is a real child process working in a private copy of the
drivetrain example (its working directory, so relative paths and MuJoCo's log stay there)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from fibril_sim_core.trace.query import query

REPO = Path(__file__).resolve().parents[2]
CORE = REPO / "fibril_sim_core"
EXAMPLE = REPO / "config" / "examples" / "drivetrain"
PROGRESS = re.compile(r"\[(\d+)/(\d+)\] (\S+) (\S+) \((\d+\.\d\d) s\)(: .+)?")


def _fibril_sim(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(CORE), env.get("PYTHONPATH")) if p)
    return subprocess.run([sys.executable, "-m", "fibril_sim_core.cli", *args], cwd=cwd,
                          env=env, capture_output=True, text=True, timeout=120,
                          check=False)


def _example(folder: Path) -> Path:
    shutil.copytree(EXAMPLE, folder)
    return folder


def _dump(path: Path, doc: Any) -> Path:
    path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    return path


def _strict_json(text: str) -> Any:
    def refuse(constant: str) -> Any:
        raise ValueError(f"not strict JSON: {constant}")

    return json.loads(text, parse_constant=refuse)


def _experiment(variants: list[dict[str, Any]], *, assertions: list[dict[str, Any]] | None = None,
                steps: int = 200) -> dict[str, Any]:
    return {
        "schema_version": {"major": 1, "minor": 0}, "id": "cli-study",
        "model": {"manifest": "simulation.yaml"}, "scenario": "drive-start.yaml",
        "parameters": {"baseline_overlay": "damping-baseline.yaml"},
        "variants": variants,
        "metrics": [
            {"id": "final_wheel_speed", "kind": "signal", "signal": "joint:wheel_joint.velocity",
             "reduce": "final"},
            {"id": "chassis_displacement", "kind": "signal", "signal": "body:chassis.position",
             "reduce": "delta_norm"},
            {"id": "realtime_factor", "kind": "rtf"}],
        "assertions": assertions or [],
        "execution": {"steps": steps, "timeout_seconds": 60.0, "workers": 1, "cpu_budget": 1,
                      "mujoco_internal_threads": 1},
    }


def _one_line_error(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 2, result.stderr
    assert result.stdout == ""
    assert "Traceback" not in result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("fibril_sim: error: ")
    return lines[0]


# ------------------------------------------------------------------ exit 0
@pytest.fixture(scope="module")
def success(tmp_path_factory: pytest.TempPathFactory
            ) -> tuple[Path, subprocess.CompletedProcess[str]]:
    folder = _example(tmp_path_factory.mktemp("cli") / "example")
    _dump(folder / "study.yaml", _experiment([
        {"id": "damping-001", "parameter_values": {"wheel_damping": 0.01}},
        {"id": "damping-010", "parameter_values": {"wheel_damping": 0.10}}]))
    return folder, _fibril_sim(folder, "experiment", "run", "study.yaml",
                               "--output", "out/results.json")


def test_success_exit_code_and_output(success: tuple[Path, subprocess.CompletedProcess[str]]
                                      ) -> None:
    _, result = success
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "3/3 run(s) succeeded: 3 succeeded"
    assert [line.split()[:2] for line in lines[1:4]] == [
        ["baseline", "succeeded"], ["damping-001", "succeeded"], ["damping-010", "succeeded"]]
    assert "final_wheel_speed=" in lines[1]
    assert lines[4:] == ["results: out/results.json", "traces:  out/results.traces"]


def test_success_progress_lines_on_stderr(success: tuple[Path, subprocess.CompletedProcess[str]]
                                          ) -> None:
    _, result = success
    lines = result.stderr.splitlines()
    assert len(lines) == 3, result.stderr
    matches = [PROGRESS.fullmatch(line) for line in lines]
    assert all(matches), lines
    assert [(m.group(1), m.group(2), m.group(3), m.group(4), m.group(6)) for m in matches] == [
        ("1", "3", "baseline", "succeeded", None), ("2", "3", "damping-001", "succeeded", None),
        ("3", "3", "damping-010", "succeeded", None)]


def test_success_result_document(success: tuple[Path, subprocess.CompletedProcess[str]]
                                 ) -> None:
    folder, _ = success
    output = folder / "out" / "results.json"
    document = _strict_json(output.read_text())
    assert document["format"] == "fibril_sim/experiment_result"
    assert document["schema_version"] == {"major": 1, "minor": 1}
    assert document["experiment"]["id"] == "cli-study"
    assert document["summary"] == {"runs": 3, "succeeded": 3, "by_status": {"succeeded": 3}}
    assert [r["id"] for r in document["runs"]] == ["baseline", "damping-001", "damping-010"]
    assert sorted(p.name for p in output.parent.iterdir()) == ["results.json", "results.traces"]
    traces = folder / "out" / "results.traces"  # default: next to the output
    assert sorted(p.name for p in traces.iterdir()) == ["baseline", "damping-001", "damping-010"]
    speeds = []
    for run in document["runs"]:
        trace = folder / run["trace"]  # relative paths stay relative to the working directory
        assert trace.parent == traces
        assert query(trace, "joint:wheel_joint.velocity").rows[-1][2] == run["metrics"][
            "final_wheel_speed"]
        speeds.append(run["metrics"]["final_wheel_speed"])
    assert speeds[1] > speeds[2]  # less damping, faster wheel
    variant = document["comparison"]["variants"][1]
    assert variant["id"] == "damping-010"
    assert variant["parameter_diff"]["wheel_damping"]["value"] == 0.10
    assert variant["metric_diff"]["final_wheel_speed"]["delta"] == pytest.approx(
        speeds[2] - speeds[0])


# ------------------------------------------------------------------ exit 1
def test_some_runs_failing_exit_1_and_the_result_is_written(tmp_path: Path) -> None:
    folder = _example(tmp_path / "example")
    _dump(folder / "mixed.yaml", _experiment([
        {"id": "unknown-id", "parameter_values": {"no_such_parameter": 1.0}},
        {"id": "heavy", "parameter_values": {"wheel_damping": 1.0}}],
        assertions=[{"metric": "final_wheel_speed", "op": "gt", "value": 5.0}]))
    result = _fibril_sim(folder, "experiment", "run", "mixed.yaml", "--output", "r.json",
                         "--traces", "runs")
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    assert result.stdout.splitlines()[0] == (
        "1/3 run(s) succeeded: 1 assertion_failure, 1 invalid_parameter, 1 succeeded")
    progress = [PROGRESS.fullmatch(line) for line in result.stderr.splitlines()]
    assert all(progress), result.stderr
    assert [(m.group(3), m.group(4)) for m in progress] == [
        ("baseline", "succeeded"), ("unknown-id", "invalid_parameter"),
        ("heavy", "assertion_failure")]
    assert "'no_such_parameter' not declared" in progress[1].group(6)
    assert progress[2].group(6).startswith(": final_wheel_speed = ")
    document = _strict_json((folder / "r.json").read_text())
    assert [r["status"] for r in document["runs"]] == [
        "succeeded", "invalid_parameter", "assertion_failure"]
    assert sorted(p.name for p in (folder / "runs").iterdir()) == ["baseline", "heavy"]
    assert not (folder / "r.traces").exists()


# ------------------------------------------------------------------ exit 2
def test_bad_experiment_file_is_a_one_line_error_and_writes_nothing(tmp_path: Path) -> None:
    folder = _example(tmp_path / "example")
    doc = _experiment([])
    doc["variant_matrix"] = {"wheel_damping": [0.01, 0.1]}
    _dump(folder / "bad.yaml", doc)
    line = _one_line_error(_fibril_sim(folder, "experiment", "run", "bad.yaml",
                                       "--output", "r.json"))
    assert line.startswith("fibril_sim: error: bad.yaml: variant_matrix: unknown key; ")
    assert not (folder / "r.json").exists()
    assert not (folder / "r.traces").exists()


def test_missing_experiment_file(tmp_path: Path) -> None:
    line = _one_line_error(_fibril_sim(tmp_path, "experiment", "run", "absent.yaml",
                                       "--output", "r.json"))
    assert line == "fibril_sim: error: absent.yaml: file not found"
    assert list(tmp_path.iterdir()) == []


def test_bad_baseline_overlay_is_a_one_line_error(tmp_path: Path) -> None:
    folder = _example(tmp_path / "example")
    _dump(folder / "damping-baseline.yaml", {
        "schema_version": {"major": 1, "minor": 0},
        "parameters": [{"id": "wheel_damping", "value": 0.02,
                        "target": "mujoco:joint_viscosity:wheel_joint:0"}]})
    _dump(folder / "study.yaml", _experiment([]))
    line = _one_line_error(_fibril_sim(folder, "experiment", "run", "study.yaml",
                                       "--output", "r.json"))
    assert line.startswith("fibril_sim: error: ")
    assert "damping-baseline.yaml: parameters[0].target: unknown MuJoCo target kind" in line
    assert not (folder / "r.json").exists()
    assert not (folder / "r.traces").exists()


def test_existing_traces_folder_is_refused(tmp_path: Path) -> None:
    folder = _example(tmp_path / "example")
    _dump(folder / "study.yaml", _experiment([]))
    (folder / "r.traces").mkdir()
    (folder / "r.traces" / "keep.txt").write_text("earlier run")
    line = _one_line_error(_fibril_sim(folder, "experiment", "run", "study.yaml",
                                       "--output", "r.json"))
    assert "r.traces: the trace folder already exists" in line
    assert not (folder / "r.json").exists()
    assert [p.name for p in (folder / "r.traces").iterdir()] == ["keep.txt"]


def test_output_is_required(tmp_path: Path) -> None:
    result = _fibril_sim(tmp_path, "experiment", "run", "study.yaml")
    assert result.returncode == 2
    assert "--output" in result.stderr and "Traceback" not in result.stderr


# ------------------------------------------------------------------ fixed bugs (regressions)
def test_bad_scenario_fails_the_start_without_leaving_a_traces_folder(tmp_path: Path) -> None:
    folder = _example(tmp_path / "example")
    _dump(folder / "drive-start.yaml", {"keyframe": "rest", "initial_input": []})
    _dump(folder / "study.yaml", _experiment([]))
    line = _one_line_error(_fibril_sim(folder, "experiment", "run", "study.yaml",
                                       "--output", "r.json"))
    assert "drive-start.yaml: initial_input: unknown key" in line
    assert not (folder / "r.json").exists()
    assert not (folder / "r.traces").exists()


def test_non_finite_variant_value_exits_1_with_a_result(tmp_path: Path) -> None:
    folder = _example(tmp_path / "example")
    _dump(folder / "study.yaml", _experiment(
        [{"id": "infinite", "parameter_values": {"wheel_damping": float("inf")}}], steps=20))
    result = _fibril_sim(folder, "experiment", "run", "study.yaml", "--output", "r.json")
    assert "Traceback" not in result.stderr
    assert result.returncode == 1
    document = _strict_json((folder / "r.json").read_text())
    assert [r["status"] for r in document["runs"]] == ["succeeded", "invalid_parameter"]
