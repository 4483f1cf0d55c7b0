"""Regressions of issue 10's "input people write" and "bad input never crashes" items, each
through the real entry a user hits (``fibril_sim`` in-process, or the loader it calls)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import mujoco
import numpy as np
import pytest
import yaml

from fibril_calibration.errors import CalibrationRequestError
from fibril_calibration.request import load_calibration_request
from fibril_sim_core.cli import main
from fibril_sim_core.errors import ManifestError
from fibril_sim_core.experiments import ExperimentError, load_experiment, run_experiment
from fibril_sim_core.manifest import load_manifest
from fibril_sim_core.plan import SimulationBuilder
from fibril_sim_core.timebase import Timebase

EXAMPLE = Path(__file__).resolve().parents[2] / "config" / "examples" / "drivetrain"


@pytest.fixture()
def example(tmp_path: Path) -> Path:
    folder = tmp_path / "example"
    shutil.copytree(EXAMPLE, folder)
    return folder


def _edit(path: Path, old: str, new: str, count: int = 1) -> Path:
    text = path.read_text(encoding="utf-8")
    assert old in text, old
    path.write_text(text.replace(old, new, count), encoding="utf-8")
    return path


def _error(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    assert main(argv) == 2
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("fibril_sim: error: "), captured.err
    return lines[0].removeprefix("fibril_sim: error: ")


# ------------------------------------------------------------------ YAML 1.2 numbers
def test_exponent_numbers_are_numbers_in_a_calibration_request(example: Path) -> None:
    request = example / "calibration.yaml"
    _edit(request, "residual_scale: 0.05", "residual_scale: 5e-2", 2)
    _edit(request, "lower: 0.001", "lower: 1e-3")
    loaded = load_calibration_request(request)
    assert loaded.parameters[0].lower == 0.001
    assert loaded.training[0].signals[0].residual_scales.tolist() == [0.05]
    _edit(request, "lower: 1e-3", "lower: '1e-3'")
    with pytest.raises(CalibrationRequestError,
                       match=r"parameters\[0\]\.lower: expected a number, got str '1e-3'"):
        load_calibration_request(request)


def test_exponent_value_in_an_experiment_variant(example: Path) -> None:
    study = _edit(example / "wheel-damping-study.yaml", "{wheel_damping: 0.01}",
                  "{wheel_damping: 1e-2}")
    variant = load_experiment(study).variants[0]
    assert variant.parameter_values == {"wheel_damping": 0.01}


# ------------------------------------------------------------------ calibration request
@pytest.mark.parametrize("section, text, key", [
    ("optimizer", "optimizer: {max_iterations: .inf}", "optimizer.max_iterations"),
    ("optimizer", "optimizer: {function_tolerance: .nan}", "optimizer.function_tolerance"),
    ("execution", "execution: {max_parallelism: .inf}", "execution.max_parallelism"),
    ("analysis", "analysis: {profile_likelihood: {samples_per_parameter: -.inf}}",
     "analysis.profile_likelihood.samples_per_parameter"),
    ("context", "context: {note: .nan}", "context.note"),
])
def test_non_finite_settings_are_request_errors(example: Path, section: str, text: str,
                                                key: str) -> None:
    request = example / "calibration.yaml"
    # The setting replaces the example's own section (a key given twice is an error).
    lines = request.read_text().splitlines(keepends=True)
    start = next(n for n, line in enumerate(lines) if line.startswith(f"{section}:"))
    end = next((n for n in range(start + 1, len(lines))
                if lines[n][:1].isalpha()), len(lines))
    request.write_text("".join(lines[:start] + [f"{text}\n"] + lines[end:]))
    with pytest.raises(CalibrationRequestError) as caught:
        load_calibration_request(request)
    message = str(caught.value)
    assert message.startswith(f"{request}: {key}: "), message
    assert "JSON compliant" not in message


# ------------------------------------------------------------------ huge times
def test_timebase_refuses_non_finite_and_huge_times() -> None:
    timebase = Timebase(1_000_000)
    for seconds in (1.0e300, -1e300, float("inf"), float("nan")):
        with pytest.raises(ValueError, match="not a finite number|longer than the longest"):
            timebase.ticks(seconds)
        with pytest.raises(ValueError, match="not a finite number|longer than the longest"):
            timebase.ticks_ceil(seconds)
    assert timebase.ticks_ceil(timebase.max_ticks * timebase.timestep_s) == timebase.max_ticks
    assert timebase.ticks(0.25) == 250
    for timestep in (float("inf"), 1e300, float("nan"), 0.0):
        with pytest.raises(ValueError, match="timestep"):
            Timebase.from_seconds(timestep)


def test_huge_input_time_names_file_and_key(example: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    inputs = _edit(example / "inputs.yaml", "time: 1.0,", "time: 1.0e+300,")
    line = _error(capsys, ["run", str(example / "simulation.yaml"), "--steps", "5",
                           "--inputs", str(inputs)])
    assert line.startswith(f"{inputs}: inputs[1].time: 1e+300 s is longer than"), line


def test_huge_period_names_file_and_key(example: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    manifest = _edit(example / "simulation.yaml", "period: 0.005", "period: 1.0e+300")
    line = _error(capsys, ["inspect", str(manifest)])
    assert line.startswith(f"{manifest}: components[2].config.period: 1e+300 s is longer"), line
    _edit(manifest, "period: 1.0e+300", "period: 0.005")
    _edit(manifest, "real_time_factor: 1.0", "real_time_factor: 1.0\n  frame_duration: 1e300")
    line = _error(capsys, ["inspect", str(manifest)])
    assert line.startswith(f"{manifest}: runtime.frame_duration: expected a number <= 3600"), line


@pytest.mark.parametrize("duration, expected", [
    ("inf", "--duration: inf s is not a finite number of seconds"),
    ("1e300", "--duration: 1e+300 s is longer than the longest time"),
    ("-1", "--duration must be a number of seconds >= 0, got -1"),
    ("nan", "--duration must be a number of seconds >= 0, got nan")])
def test_run_duration_bounds(capsys: pytest.CaptureFixture[str], duration: str,
                             expected: str) -> None:
    line = _error(capsys, ["run", str(EXAMPLE / "simulation.yaml"), "--duration", duration])
    assert line.startswith(expected), line


# ------------------------------------------------------------------ inputs files
@pytest.mark.parametrize("old, new, key, message", [
    ("{mode: duty, value: -0.5}", "{mode: warp, value: -0.5}", "inputs[2].payload.mode",
     "payload 'mode' must be one of"),
    ("{mode: duty, value: -0.5}", "{mode: duty, value: .nan}", "inputs[2].payload.value",
     "payload 'value' must be a finite number, got nan"),
    ("{mode: duty, value: -0.5}", "{mode: duty, value: -0.5, extra: 1}", "inputs[2].payload",
     "unknown payload key(s) extra; expected mode, value"),
    ("source_sequence: 3", "source_sequence: 1", "inputs[2].source_sequence",
     "1 does not increase for source 'motor/command' in commit order (inputs[1] has 2)"),
    ("payload_type: fibril_sim/motor_command/v1, payload: {mode: voltage",
     "payload_type: x/v9, payload: {mode: voltage", "inputs[1].payload_type",
     "'x/v9' is not accepted by 'motor/command'"),
])
def test_inputs_file_errors_name_file_and_key_path(example: Path,
                                                   capsys: pytest.CaptureFixture[str],
                                                   old: str, new: str, key: str,
                                                   message: str) -> None:
    inputs = _edit(example / "inputs.yaml", old, new)
    line = _error(capsys, ["run", str(example / "simulation.yaml"), "--steps", "5",
                           "--inputs", str(inputs)])
    assert line.startswith(f"{inputs}: {key}: "), line
    assert message in line


def test_calibration_run_format_inputs_file_names_file_and_key(example: Path) -> None:
    inputs = example / "calibration_data" / "run-01_inputs.yaml"
    inputs.write_text((EXAMPLE / "inputs.yaml").read_text().replace("mode: voltage",
                                                                    "mode: current"))
    with pytest.raises(CalibrationRequestError) as caught:
        load_calibration_request(example / "calibration.yaml")
    assert str(caught.value).startswith(f"{inputs}: inputs[1].payload.mode: "), caught.value


# ------------------------------------------------------------------ inspect
def test_inspect_shows_overlay_parameters(example: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    manifest = _edit(example / "simulation.yaml", "\ntrace:",
                     "\nparameter_overlays: [damping-baseline.yaml]\ntrace:")
    assert main(["inspect", str(manifest)]) == 0
    text = capsys.readouterr().out
    assert "parameters 1 from 1 overlay file(s)" in text
    line = next(line for line in text.splitlines() if "wheel_damping" in line)
    assert "0.02 N_m_s_per_rad" in line
    assert "mujoco:joint_damping:wheel_joint:0" in line and "damping-baseline.yaml" in line
    assert main(["inspect", str(manifest), "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["parameters"] == [{
        "id": "wheel_damping", "value": 0.02, "unit": "N_m_s_per_rad",
        "targets": ["mujoco:joint_damping:wheel_joint:0"],
        "typed_targets": [{"type": "mujoco", "kind": "joint_damping", "object": "wheel_joint",
                           "component_index": 0}],
        "source": str(example / "damping-baseline.yaml")}]
    assert main(["inspect", str(EXAMPLE / "simulation.yaml")]) == 0
    assert "parameters 0 from 0 overlay file(s)" in capsys.readouterr().out


# ------------------------------------------------------------------ manifest schema minors
def test_manifest_3_0_refuses_parameter_overlays(example: Path) -> None:
    manifest = _edit(example / "simulation.yaml", "\ntrace:",
                     "\nparameter_overlays: [damping-baseline.yaml]\ntrace:")
    assert load_manifest(manifest).parameter_overlays == (example / "damping-baseline.yaml",)
    _edit(manifest, "{major: 3, minor: 1}", "{major: 3, minor: 0}")
    with pytest.raises(ManifestError, match=r"simulation.yaml: parameter_overlays: needs "
                                            r"schema_version 3.1 or later; this manifest "
                                            r"declares 3.0"):
        load_manifest(manifest)
    _edit(manifest, "parameter_overlays: [damping-baseline.yaml]\n", "")
    loaded = load_manifest(manifest)  # every other key is a 3.0 key
    assert {"profiles", "components", "trace", "runtime", "scenario"} <= set(loaded.document)
    _edit(manifest, "\ntrace:", "\nbogus: 1\ntrace:")
    with pytest.raises(ManifestError, match=r"bogus: unknown key; expected one of: components, "
                                            r"extensions, model, profiles, runtime, scenario, "
                                            r"schema_version, trace$"):
        load_manifest(manifest)


# ------------------------------------------------------------------ joint_range on limited="auto"
AUTO_XML = """\
<mujoco>
  <compiler autolimits="{autolimits}" angle="radian"/>
  <worldbody>
    <body name="arm">
      <joint name="limited_hinge" type="hinge" range="-1 1"/>
      <geom size="0.1" mass="1"/>
      <body name="forearm" pos="0.3 0 0">
        <joint name="free_hinge" type="hinge"/>
        <geom size="0.1" mass="1"/>
      </body>
    </body>
  </worldbody>
</mujoco>
"""


@pytest.mark.parametrize("autolimits", ["true", "false"])
def test_joint_range_keeps_an_auto_joint_limited_state(tmp_path: Path, autolimits: str) -> None:
    from fibril_sim_core.overlays import MujocoTarget, OverlayParameter

    xml = AUTO_XML.format(autolimits=autolimits)
    if autolimits == "false":  # a range needs limited="..." when autolimits is off
        xml = xml.replace('range="-1 1"', 'range="-1 1" limited="true"')
    (tmp_path / "arm.xml").write_text(xml)
    (tmp_path / "m.yaml").write_text("schema_version: {major: 3, minor: 1}\nmodel: arm.xml\n")
    authored = SimulationBuilder().build(tmp_path / "m.yaml").model
    names = ("limited_hinge", "free_hinge")
    ids = [mujoco.mj_name2id(authored, mujoco.mjtObj.mjOBJ_JOINT, n) for n in names]
    assert [bool(authored.jnt_limited[i]) for i in ids] == [True, False]
    overlays = [OverlayParameter(f"{n}_range", (-0.5, 0.25), (MujocoTarget("joint_range", n),))
                for n in names]
    model = SimulationBuilder().build(tmp_path / "m.yaml", overlays).model
    assert [bool(model.jnt_limited[i]) for i in ids] == [True, False]  # as authored
    for i in ids:
        np.testing.assert_allclose(model.jnt_range[i], [-0.5, 0.25])


# ------------------------------------------------------------------ experiments
def _study(example: Path, **changes: Any) -> Path:
    path = example / "wheel-damping-study.yaml"
    doc = yaml.safe_load(path.read_text())
    doc["execution"]["steps"] = 50
    doc.update(changes)
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def test_experiment_requires_mujoco_internal_threads(example: Path) -> None:
    path = example / "wheel-damping-study.yaml"
    _edit(path, "  mujoco_internal_threads: 1\n", "")
    with pytest.raises(ExperimentError,
                       match=r"execution.mujoco_internal_threads: missing required key"):
        load_experiment(path)


def test_event_never_reached_makes_its_assertion_unavailable(example: Path) -> None:
    path = _study(example, variants=[], metrics=[
        {"id": "reached_1000", "kind": "event_reached", "signal": "joint:wheel_joint.velocity",
         "op": "gt", "value": 1000.0},
        {"id": "speed", "kind": "signal", "signal": "joint:wheel_joint.velocity",
         "reduce": "final"}], assertions=[
        {"metric": "reached_1000", "op": "lt", "value": 1.0},
        {"metric": "speed", "op": "gt", "value": 0.0}])
    run = run_experiment(path, traces=example / "t")["runs"][0]
    assert run["status"] == "unavailable_metric"
    assert run["metrics"]["reached_1000"] is None
    assert [a["status"] for a in run["assertions"]] == ["unavailable_metric", "passed"]
    assert run["error_reason"] == ("metric 'reached_1000': no value to assert on (an event "
                                   "that never happened)")


def test_run_failing_before_its_plan_writes_null_plan_keys(example: Path) -> None:
    path = _study(example, variants=[{"id": "bad", "parameter_values": {"wheel_damping": -1}}])
    runs = {r["id"]: r for r in run_experiment(path, traces=example / "t")["runs"]}
    bad = runs["bad"]
    assert bad["status"] == "compile_failure" or bad["status"] == "invalid_parameter"
    assert (bad["parameter_set_hash"], bad["targets"], bad["plan"]) == (None, None, None)
    assert runs["baseline"]["plan"] is not None


def test_experiment_run_overwrite(example: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _study(example, variants=[])
    traces = example / "traces"
    argv = ["experiment", "run", str(path), "--output", str(example / "r.json"),
            "--traces", str(traces)]
    assert main(argv) == 0
    capsys.readouterr()
    shutil.copytree(traces / "baseline", traces / "stale-run")
    line = _error(capsys, argv)
    assert line == (f"{traces}: the trace folder already exists; pass --overwrite to replace "
                    f"it, or choose another with --traces")
    assert (traces / "stale-run").exists()
    assert main([*argv, "--overwrite"]) == 0
    assert not (traces / "stale-run").exists() and (traces / "baseline").is_dir()
    capsys.readouterr()
    (example / "file").write_text("x")
    (example / "data").mkdir()
    (example / "data" / "keep.txt").write_text("precious")
    for other in ("file", "data"):  # never removes what an experiment run did not make
        line = _error(capsys, [*argv[:-1], str(example / other), "--overwrite"])
        assert "exists and is not the trace folder of an experiment run" in line, line
    assert (example / "data" / "keep.txt").read_text() == "precious"
    (traces / "notes.txt").write_text("mine")  # a run folder plus a user's file: kept
    assert "not replaced" in _error(capsys, [*argv, "--overwrite"])
    assert (traces / "notes.txt").exists()
    (example / "empty").mkdir()
    assert main([*argv[:-1], str(example / "empty"), "--overwrite"]) == 0


# ------------------------------------------------------------------ files a request names
@pytest.mark.parametrize("payload, problem", [
    ("[" * 5000 + "]" * 5000, "nested too deeply"),
    ('{"mode": "duty", "value": 1' + "0" * 5000 + "}", "Exceeds the limit (4300 digits)")])
def test_bad_payload_json_is_a_request_error(example: Path, payload: str, problem: str) -> None:
    inputs = example / "calibration_data" / "run-01_inputs.yaml"
    _edit(inputs, """payload_json: '{"mode": "duty", "value": 0.4}'""",
          f"payload_json: '{payload}'")
    with pytest.raises(CalibrationRequestError) as caught:
        load_calibration_request(example / "calibration.yaml")
    assert str(caught.value).startswith(
        f"{inputs}: recorded_inputs[0].payload_json: not accepted as JSON: {problem}")


@pytest.mark.parametrize("content, message", [
    (b"time_ns,current\n0,1.0\n\xff\n", "not valid UTF-8 at byte 22 (line 3)"),
    (b"time_ns,current\n0," + b"1" * 200_000 + b"\n", "not a readable CSV file: field larger"),
    (b"time_ns,current\n" + b"9" * 30 + b",1.0\n", "line 2: time_ns 999999999999999999999999999999"
                                                    " is beyond int64 nanoseconds"),
])
def test_bad_samples_csv_is_one_line_naming_it(example: Path, content: bytes,
                                               message: str) -> None:
    samples = example / "calibration_data" / "run-01_motor_current.csv"
    samples.write_bytes(content)
    with pytest.raises(CalibrationRequestError) as caught:
        load_calibration_request(example / "calibration.yaml")
    assert str(caught.value).startswith(f"{samples}: "), caught.value
    assert message in str(caught.value)


def test_unusable_recorded_inputs_file_name_names_the_request_key(example: Path) -> None:
    request = _edit(example / "calibration.yaml", "calibration_data/run-01_inputs.yaml",
                    "x" * 5000)
    with pytest.raises(CalibrationRequestError) as caught:
        load_calibration_request(request)
    message = str(caught.value)
    assert message.startswith(f"{request}: training[0].recorded_inputs_file: recorded inputs "
                              f"file "), message
    assert message.endswith("does not exist") and len(message) < 400


def test_tendon_range_keeps_an_auto_tendon_limited_state(tmp_path: Path) -> None:
    from fibril_sim_core.overlays import MujocoTarget, OverlayParameter

    tendons = ('  <tendon>\n    <fixed name="limited_t" range="-1 1"><joint joint="limited_hinge" '
               'coef="1"/></fixed>\n    <fixed name="free_t"><joint joint="free_hinge" coef="1"/>'
               '</fixed>\n  </tendon>\n</mujoco>\n')
    xml = AUTO_XML.format(autolimits="true").replace("</mujoco>\n", tendons)
    (tmp_path / "arm.xml").write_text(xml)
    (tmp_path / "m.yaml").write_text("schema_version: {major: 3, minor: 1}\nmodel: arm.xml\n")
    names = ("limited_t", "free_t")
    authored = SimulationBuilder().build(tmp_path / "m.yaml").model
    ids = [mujoco.mj_name2id(authored, mujoco.mjtObj.mjOBJ_TENDON, n) for n in names]
    assert [bool(authored.tendon_limited[i]) for i in ids] == [True, False]
    overlays = [OverlayParameter(f"{n}_range", (-0.5, 0.25), (MujocoTarget("tendon_range", n),))
                for n in names]
    model = SimulationBuilder().build(tmp_path / "m.yaml", overlays).model
    assert [bool(model.tendon_limited[i]) for i in ids] == [True, False]  # as authored
    for i in ids:
        np.testing.assert_allclose(model.tendon_range[i], [-0.5, 0.25])
