"""``fibril_sim`` CLI: inspect, run (with traces and recorded inputs), trace query, user errors
and Ctrl-C. Commands run in-process through ``cli.main``; one run is a real child process."""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import mujoco
import pytest
from fibril_sim_core.cli import main
from fibril_sim_core.manifest import load_manifest
from fibril_sim_core.trace.reader import TraceReader

REPO = Path(__file__).resolve().parents[2]
CORE = REPO / "fibril_sim_core"
EXAMPLE = REPO / "config" / "examples" / "drivetrain"
MANIFEST = EXAMPLE / "simulation.yaml"
DEVICE_IDS = ["wheel_encoder", "chassis_imu", "front_range", "chassis_pose", "drive_feedback"]
MOTOR_PAYLOAD = "fibril_sim/motor_command/v1"


def _quiet_main(argv: list[str]) -> tuple[int, str, str]:
    """Run the CLI in-process outside a test's capsys (for module fixtures)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def trace_500(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    trace = tmp_path_factory.mktemp("cli") / "trace"
    code, out, err = _quiet_main(["run", str(MANIFEST), "--steps", "500", "--seed", "4",
                                  "--trace", str(trace)])
    assert (code, err) == (0, "")
    return trace, out


def _query(capsys: pytest.CaptureFixture[str], trace: Path, selector: str) -> dict:
    assert main(["trace", "query", str(trace), selector, "--format", "json"]) == 0
    captured = capsys.readouterr()
    assert captured.err == ""
    return json.loads(captured.out)


# ------------------------------------------------------------------ inspect
def test_inspect_text(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect", str(MANIFEST)]) == 0
    captured = capsys.readouterr()
    assert captured.err == ""
    lines = captured.out.splitlines()
    assert lines[0] == f"manifest  {MANIFEST}"
    assert lines[1].startswith(f"model     {EXAMPLE / 'drivetrain.xml'}  (timestep 1 ms, nq 8, "
                               f"nv 7, nu 1, bodies 3)")
    assert lines[2] == "scenario  keyframe rest, 1 initial input(s), episode seed 0"
    assert re.search(r"^  motor +fibril_sim/motor +endpoint motor/command -> drive  modes "
                     r"duty, voltage  latency 2 ms$", captured.out, re.MULTILINE)
    assert re.search(r"^  wheel_encoder +fibril_sim/encoder +fibril_sim/encoder_sample/v1  "
                     r"every 2 ms, latency 1 ms$", captured.out, re.MULTILINE)
    for device_id in DEVICE_IDS:
        assert re.search(rf"^  {device_id} ", captured.out, re.MULTILINE)
    manifest_hash = load_manifest(MANIFEST).sha256
    assert re.fullmatch(rf"provenance manifest {manifest_hash[:12]}  model [0-9a-f]{{12}}  "
                        rf"compiled [0-9a-f]{{12}}  parameters [0-9a-f]{{12}}  "
                        rf"mujoco {re.escape(mujoco.__version__)}", lines[-1])


def test_inspect_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect", str(MANIFEST), "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["manifest"] == str(MANIFEST)
    assert document["model"]["timestep_ns"] == 1_000_000
    components = {c["id"]: c for c in document["components"]}
    assert list(components) == ["motor", *DEVICE_IDS]
    assert components["motor"]["role"] == "actuator"
    assert components["motor"]["command_latency"] == {"ticks": 2, "seconds": 0.002}
    encoder = components["wheel_encoder"]
    assert encoder["config"]["counts_per_revolution"] == 1024.0  # from the profile
    assert encoder["period"]["ticks"] == 2 and encoder["latency"]["ticks"] == 1
    assert encoder["sample_type"] == "fibril_sim/encoder_sample/v1"
    provenance = document["provenance"]
    assert provenance["manifest_sha256"] == load_manifest(MANIFEST).sha256
    model_bytes = (EXAMPLE / "drivetrain.xml").read_bytes()
    assert provenance["model_sha256"] == hashlib.sha256(model_bytes).hexdigest()
    assert provenance["model_files"] == {"drivetrain.xml": provenance["model_sha256"]}
    for key in ("compiled_model_sha256", "parameter_set_hash"):
        assert re.fullmatch(r"[0-9a-f]{64}", provenance[key])
    assert provenance["build"]["mujoco"] == mujoco.__version__


# ------------------------------------------------------------------ run and query
def test_run_reports_record_counts(trace_500: tuple[Path, str]) -> None:
    trace, out = trace_500
    assert out.startswith("ran 500 ticks (0.5 s simulated) in ")
    counts = dict(re.findall(r"^  (\S+) +(\d+) record\(s\)$", out, re.MULTILINE))
    assert counts == {"ActuatorApplication": "1", "IngressRecord": "1", "chassis_imu": "100",
                      "chassis_pose": "50", "drive_feedback": "250", "front_range": "25",
                      "wheel_encoder": "250", "StateSnapshot": "50"}
    assert out.rstrip().endswith(f"trace: {trace}")


def test_run_counts_the_same_records_traced_or_not(trace_500: tuple[Path, str]) -> None:
    """Traced, the counts are the trace's (nothing else listens, so the instance takes the
    traced fast path); untraced, a subscriber's: the same records but the snapshots."""
    _, traced = trace_500
    code, out, _ = _quiet_main(["run", str(MANIFEST), "--steps", "500", "--seed", "4"])
    assert code == 0
    pattern = r"^  (\S+) +(\d+) record\(s\)$"
    counts = dict(re.findall(pattern, traced, re.MULTILINE))
    del counts["StateSnapshot"]
    assert dict(re.findall(pattern, out, re.MULTILINE)) == counts


@pytest.mark.parametrize("ticks", [0, 1, 2, 3, 7, 20, 21, 22, 501])
def test_untraced_run_counts_the_samples_a_subscriber_gets(ticks: int) -> None:
    """Untraced, nothing listens to the samples (they are not made): their counts come from
    the device schedules and are what a subscriber would have received."""
    from fibril_sim_core.cli import sample_counts as _sample_counts
    from fibril_sim_core.records import DeviceOutput

    from fibril_sim_core import SimulationBuilder

    plan = SimulationBuilder().build(MANIFEST)
    instance = plan.create_instance(4, collect=False)
    heard: list = []
    instance.subscribe(heard.append)
    instance.advance(ticks)
    want: dict[str, int] = {}
    for record in heard:
        if isinstance(record, DeviceOutput):
            want[record.device_id] = want.get(record.device_id, 0) + 1
    assert _sample_counts(plan, ticks) == want


def test_trace_query_body_position(capsys: pytest.CaptureFixture[str],
                                   trace_500: tuple[Path, str]) -> None:
    trace, _ = trace_500
    result = _query(capsys, trace, "body:chassis.position")
    assert result["selector"] == "body:chassis.position"
    assert result["columns"] == ["time_ns", "episode", "x", "y", "z"]
    rows = result["rows"]
    assert [row[0] for row in rows] == [tick * 1_000_000 for tick in range(0, 500, 10)]
    assert all(row[1] == 0 for row in rows)
    assert rows[0][2:] == [0.0, 0.0, 0.05]  # the "rest" keyframe
    assert rows[-1][2] > rows[0][2] + 0.01  # driven forward by the initial duty command


def test_trace_query_csv_and_device(capsys: pytest.CaptureFixture[str],
                                    trace_500: tuple[Path, str]) -> None:
    trace, _ = trace_500
    assert main(["trace", "query", str(trace), "device:wheel_encoder"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "time_ns,episode,acquisition_time_ns,position,velocity,counts"
    assert len(lines) == 1 + 250
    first = lines[1].split(",")
    assert (first[0], first[1], first[2]) == ("1000000", "0", "0")  # latency 1 ms


def test_run_replays_recorded_inputs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    inputs = tmp_path / "inputs.yaml"
    inputs.write_text(json.dumps({
        "schema_version": {"major": 1, "minor": 0},
        "inputs": [
            {"time": 0.1, "source_id": "motor/command", "source_sequence": 1,
             "payload_type": MOTOR_PAYLOAD, "payload": {"mode": "duty", "value": 0.25}},
            {"commit_tick": 300, "source_id": "motor/command", "source_sequence": 2,
             "payload_type": MOTOR_PAYLOAD, "payload_json": '{"mode":"voltage","value":-6}'},
        ]}), encoding="utf-8")
    trace = tmp_path / "trace"
    assert main(["run", str(MANIFEST), "--duration", "0.4", "--inputs", str(inputs),
                 "--trace", str(trace)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("ran 400 ticks (0.4 s simulated)")
    assert re.search(r"^  ActuatorApplication +3 record\(s\)$", out, re.MULTILINE)
    result = _query(capsys, trace, "actuator:motor/command.applied")
    assert result["columns"] == ["time_ns", "episode", "applied"]
    # Initial input (duty 0.5 × 12 V) at tick 0, then the recorded ones; latency 2 ticks.
    assert result["rows"] == [[2_000_000, 0, 6.0], [102_000_000, 0, 3.0],
                              [302_000_000, 0, -6.0]]
    with TraceReader(trace) as reader:
        commits = [(r.source_sequence, r.commit_tick) for r in reader.external_inputs()]
    assert commits == [(0, 0), (1, 100), (2, 300)]


# ------------------------------------------------------------------ user errors
def _user_error(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    assert main(argv) == 2
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith("fibril_sim: error: ")
    assert "Traceback" not in captured.err + captured.out
    return lines[0]


def test_error_missing_manifest(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "nope.yaml"
    for command in (["inspect", str(missing)], ["run", str(missing), "--steps", "10"]):
        line = _user_error(capsys, command)
        assert line == f"fibril_sim: error: {missing.resolve()}: file not found"


@pytest.mark.parametrize(("selector", "expected"), [
    ("chassis", "malformed selector 'chassis'"),
    ("bogus:chassis", "unknown selector kind 'bogus'"),
    ("body:chassis.velocity", "selector 'body:chassis.velocity' has field 'velocity'"),
    ("body:nope.position", ("unknown body 'nope' in selector 'body:nope.position'; valid: axle, "
                            "chassis, world")),
    ("device:lidar", "unknown device 'lidar'"),
])
def test_error_bad_selector(capsys: pytest.CaptureFixture[str], trace_500: tuple[Path, str],
                            selector: str, expected: str) -> None:
    trace, _ = trace_500
    line = _user_error(capsys, ["trace", "query", str(trace), selector])
    assert expected in line


def test_error_query_missing_trace(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    line = _user_error(capsys, ["trace", "query", str(tmp_path / "none"), "body:chassis.position"])
    assert line == f"fibril_sim: error: {tmp_path / 'none'}: trace does not exist"


def test_error_non_empty_trace_dir(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "keep.txt").write_text("precious", encoding="utf-8")
    line = _user_error(capsys, ["run", str(MANIFEST), "--steps", "10", "--trace", str(tmp_path)])
    assert line == (f"fibril_sim: error: {tmp_path}: directory is not empty; refusing to write "
                    f"a trace into it")
    assert [p.name for p in tmp_path.iterdir()] == ["keep.txt"]


@pytest.mark.parametrize(("document", "expected"), [
    ("schema_version: {major: 2, minor: 0}\ninputs: []\n",
     "schema_version: unsupported schema version 2.0; expected 1.0"),
    (("schema_version: {major: 1, minor: 0}\ninputs:\n  - {time: 0.0005, source_id: motor/command,"
      " source_sequence: 1, payload_type: fibril_sim/motor_command/v1, payload: {mode: duty, "
      "value: 0.1}}\n"),
     "inputs[0].time: 0.0005 s is not a whole number of physics steps"),
    (("schema_version: {major: 1, minor: 0}\ninputs:\n  - {commit_tick: 5, source_id: "
      "motor/command, source_sequence: 1, payload_type: fibril_sim/motor_command/v1}\n"),
     "inputs[0]: give exactly one of 'payload' (a mapping) or 'payload_json' (a string)"),
    (("schema_version: {major: 1, minor: 0}\ninputs:\n  - {commit_tick: 5, source_id: "
      "brake/command, source_sequence: 1, payload_type: fibril_sim/motor_command/v1, "
      "payload: {mode: duty, value: 0.1}}\n"),
     "unknown source_id 'brake/command'; known sources: motor/command"),
    ("inputs: [\n", "not valid YAML"),
], ids=["version", "time-not-whole-ticks", "no-payload", "unknown-source", "yaml"])
def test_error_invalid_inputs_file(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                   document: str, expected: str) -> None:
    inputs = tmp_path / "inputs.yaml"
    inputs.write_text(document, encoding="utf-8")
    line = _user_error(capsys, ["run", str(MANIFEST), "--steps", "10", "--inputs", str(inputs)])
    assert expected in line


def test_error_negative_steps(capsys: pytest.CaptureFixture[str]) -> None:
    line = _user_error(capsys, ["run", str(MANIFEST), "--steps", "-1"])
    assert line == "fibril_sim: error: --steps must be >= 0, got -1"


# ------------------------------------------------------------------ Ctrl-C
def test_sigint_during_run_leaves_a_readable_trace(tmp_path: Path) -> None:
    trace = tmp_path / "trace"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(CORE), env.get("PYTHONPATH")) if p)
    child = subprocess.Popen(
        [sys.executable, "-m", "fibril_sim_core.cli", "run", str(MANIFEST), "--duration", "3600",
         "--trace", str(trace)],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        # The suite may run with SIGINT ignored (a background job), which a child inherits.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.monotonic() + 20
        while not list(trace.glob("*.mcap")):  # the run has started once the bag exists
            assert child.poll() is None, child.communicate()
            assert time.monotonic() < deadline, "the run never started"
            time.sleep(0.05)
        time.sleep(1.5)
        assert child.poll() is None  # an hour of simulated time: still running
        child.send_signal(signal.SIGINT)
        _, err = child.communicate(timeout=60)
    finally:
        if child.poll() is None:
            child.kill()
            child.communicate()
    assert child.returncode == 130, err
    assert "Traceback" not in err
    match = re.fullmatch(rf"fibril_sim: interrupted at tick (\d+); trace closed: "
                         rf"{re.escape(str(trace))}\n", err)
    assert match, err
    tick = int(match.group(1))
    assert tick > 0
    with TraceReader(trace) as reader:
        outputs = list(reader.device_outputs())
        encoder = [o for o in outputs if o.device_id == "wheel_encoder"]
        assert reader.provenance["seed"] == 0
        assert len(list(reader.snapshots())) > 0
    assert len(outputs) > 0
    # Nothing emitted before the interrupt is lost: every encoder sample delivered by then.
    delivered = (tick - 1) // 2 + 1
    assert delivered - 1 <= len(encoder) <= delivered
    assert [o.acquisition_tick for o in encoder] == list(range(0, 2 * len(encoder), 2))
