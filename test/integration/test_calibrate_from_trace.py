"""Calibrating from a recorded trace: an episode's ``recording`` (a fibril_sim rosbag2/MCAP
trace) gives its recorded inputs and a signal's ``samples_from`` gives its reference samples
from a trace selector.

The recording is a ``fibril_sim run --inputs ... --trace ...`` of the drivetrain bench stand
(config/examples/drivetrain/bench.yaml) with a known wheel damping applied through an overlay
artifact in a copy of the manifest; the request replays it on the nominal bench manifest from a
wrong initial damping and must recover the true value (noise-free joint velocity snapshots).
"""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from fibril_calibration.engine import run_calibration
from fibril_calibration.errors import CalibrationRequestError
from fibril_calibration.request import load_calibration_request
from fibril_sim_core import IngressError, SimulationBuilder, external_input
from fibril_sim_core.cli import main
from fibril_sim_core.trace import TraceWriter
from fibril_sim_core.trace.query import query
from fibril_sim_core.trace.reader import TraceReader

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "config" / "examples" / "drivetrain"
BENCH = EXAMPLE / "bench.yaml"
TRUE_DAMPING = 0.05  # drivetrain_bench.xml says 0.02
PAYLOAD = "fibril_sim/motor_command/v1"
STEPS = 500
VELOCITY = "joint:wheel_joint.velocity"
# (time s, mode, value) of the recorded motor commands
COMMANDS = [(0.0, "duty", 0.6), (0.2, "duty", -0.4), (0.35, "voltage", 0.0)]


def _main(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


def _bench_copy(folder: Path, name: str, **extra: Any) -> Path:
    """bench.yaml with an absolute model path (and ``extra`` top-level keys) in ``folder``."""
    doc = yaml.safe_load(BENCH.read_text())
    doc["model"] = str(EXAMPLE / doc["model"])
    doc.update(extra)
    path = folder / name
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def _inputs_file(folder: Path) -> Path:
    path = folder / "inputs.yaml"
    path.write_text(yaml.safe_dump({
        "schema_version": {"major": 1, "minor": 0},
        "inputs": [{"time": t, "source_id": "motor/command", "source_sequence": n + 1,
                    "payload_type": PAYLOAD, "payload": {"mode": mode, "value": value}}
                   for n, (t, mode, value) in enumerate(COMMANDS)]}))
    return path


def _record(folder: Path, manifest: Path, name: str = "trace") -> Path:
    trace = folder / name
    code, _, err = _main(["run", str(manifest), "--steps", str(STEPS), "--inputs",
                          str(_inputs_file(folder)), "--trace", str(trace)])
    assert code == 0, err
    return trace


@pytest.fixture(scope="module")
def bench(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A recording of the bench stand with the true damping (a manifest overlay artifact)."""
    folder = tmp_path_factory.mktemp("bench")
    (folder / "truth.yaml").write_text(yaml.safe_dump({
        "format": "fibril_sim/parameter_overlay", "schema_version": {"major": 1, "minor": 0},
        "parameters": [{"id": "wheel_damping", "value": TRUE_DAMPING, "unit": "N_m_s_per_rad",
                        "target": "mujoco:joint_damping:wheel_joint:0"}]}))
    manifest = _bench_copy(folder, "bench-truth.yaml", parameter_overlays=["truth.yaml"])
    return {"folder": folder, "trace": _record(folder, manifest)}


def request_doc(trace: str | Path = "trace", *, signal: dict | None = None,
                **episode: Any) -> dict[str, Any]:
    """One episode replaying ``trace``; the wheel velocity snapshots are the reference."""
    return {
        "schema_version": {"major": 3, "minor": 1},
        "manifest": str(BENCH),
        "parameters": [{
            "id": "wheel_damping", "unit": "N_m_s_per_rad", "lower": 0.001, "upper": 1.0,
            "initial": 0.2, "nominal": 0.02, "parameterization": "log_positive",
            "target": {"type": "mujoco", "kind": "joint_damping", "object": "wheel_joint",
                       "component_index": 0}}],
        "observations": [{"id": "wheel_velocity", "source": "joint_velocity",
                          "name": "wheel_joint", "sample_every_steps": 10}],
        "training": [{
            "id": "bench-run", "recording": str(trace),
            "signals": {"wheel_velocity": signal or {
                "alignment": "exact", "residual_scale": 0.01,
                "samples_from": {"selector": VELOCITY}}},
            **episode}],
        "optimizer": {"max_iterations": 50, "function_tolerance": 1e-12,
                      "parameter_tolerance": 1e-12, "gradient_tolerance": 1e-12},
    }


def _write(folder: Path, doc: dict[str, Any], name: str = "request.yaml") -> Path:
    path = folder / name
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def _episode(doc: dict[str, Any]) -> dict[str, Any]:
    return doc["training"][0]


# ------------------------------------------------------------------ what a recording provides
def test_recording_gives_the_accepted_inputs_and_selector_samples(bench: dict[str, Path]
                                                                  ) -> None:
    request = load_calibration_request(_write(bench["folder"], request_doc()))
    episode = request.training[0]
    assert episode.recording == bench["trace"].resolve() and episode.recording_episode == 0
    assert [(r.source_id, r.source_sequence, r.payload_type, json.loads(r.payload_json),
             r.accepted, r.commit_tick, r.acceptance_sequence)
            for r in episode.recorded_inputs] == [
        ("motor/command", n + 1, PAYLOAD, {"mode": mode, "value": value}, True,
         round(t * 1000), n) for n, (t, mode, value) in enumerate(COMMANDS)]
    signal = episode.signal("wheel_velocity")
    assert signal.samples_from == VELOCITY
    table = query(bench["trace"], VELOCITY)
    np.testing.assert_array_equal(signal.times_ns, [row[0] for row in table.rows])
    np.testing.assert_array_equal(signal.values, [[row[2]] for row in table.rows])
    assert signal.times_ns[-1] == (STEPS - 10) * 1_000_000  # every state_every_steps (10)
    assert np.ptp(signal.values) > 1.0  # the recording really moves


def test_content_hash_covers_the_loaded_data_like_inline_data(bench: dict[str, Path],
                                                              tmp_path: Path) -> None:
    from_trace = load_calibration_request(_write(bench["folder"], request_doc(), "hash.yaml"))
    episode = from_trace.training[0]
    signal = episode.signal("wheel_velocity")
    inline = request_doc(signal={
        "alignment": "exact", "residual_scale": 0.01,
        "samples": [{"time_ns": int(t), "values": v.tolist()}
                    for t, v in zip(signal.times_ns, signal.values)]})
    del _episode(inline)["recording"]
    _episode(inline)["recorded_inputs"] = [
        {"source_id": r.source_id, "source_sequence": r.source_sequence,
         "payload_type": r.payload_type, "payload_json": r.payload_json,
         "commit_tick": r.commit_tick, "acceptance_sequence": r.acceptance_sequence}
        for r in episode.recorded_inputs]
    same = load_calibration_request(_write(tmp_path, inline)).training[0]
    assert same.content_sha256 == episode.content_sha256
    _episode(inline)["recorded_inputs"][1]["commit_tick"] += 1  # other data, other hash
    other = load_calibration_request(_write(tmp_path, inline)).training[0]
    assert other.content_sha256 != episode.content_sha256


# ------------------------------------------------------------------ the fit
def test_fit_from_the_recording_recovers_the_true_damping(bench: dict[str, Path]) -> None:
    result = run_calibration(_write(bench["folder"], request_doc(), "fit.yaml"))
    fitted = result.fitted_values["wheel_damping"]
    assert fitted == pytest.approx(TRUE_DAMPING, rel=1e-6)
    assert result.document["training_summary"]["aggregate"]["rms"] < 1e-6
    assert result.document["optimization_termination"] == "converged"


def test_cli_calibrates_from_the_recording(bench: dict[str, Path], tmp_path: Path) -> None:
    path = _write(tmp_path, request_doc(bench["trace"]))
    overlay = tmp_path / "fit.json"
    code, out, err = _main(["calibrate", str(path), "--json", "--quiet", "--output-overlay",
                            str(overlay)])
    assert (code, err) == (0, "")
    document = json.loads(out)
    assert document["fitted_parameters"]["wheel_damping"] == pytest.approx(TRUE_DAMPING,
                                                                           rel=1e-6)
    assert set(document["context"]["training_episode_content_sha256"]) == {"bench-run"}
    artifact = json.loads(overlay.read_text())
    assert artifact["parameters"][0]["value"] == pytest.approx(TRUE_DAMPING, rel=1e-6)


def test_cli_reports_a_bad_selector_as_one_line(bench: dict[str, Path], tmp_path: Path) -> None:
    doc = request_doc(bench["trace"])
    _episode(doc)["signals"]["wheel_velocity"]["samples_from"]["selector"] = \
        "joint:rear_joint.velocity"
    path = _write(tmp_path, doc)
    code, out, err = _main(["calibrate", str(path), "--quiet"])
    assert code == 2 and out == ""
    assert err.startswith(f"fibril_sim: error: {path}: training[0].signals.wheel_velocity."
                          f"samples_from.selector: unknown joint 'rear_joint' in selector "
                          f"'joint:rear_joint.velocity'; valid: wheel_joint")
    assert err.count("\n") == 1 and "Traceback" not in err


# ------------------------------------------------------------------ episodes of a trace
@pytest.fixture(scope="module")
def two_episodes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A programmatic trace with two episodes, live inputs and one rejected input."""
    folder = tmp_path_factory.mktemp("episodes")
    plan = SimulationBuilder().build(BENCH)
    path = folder / "trace"
    writer = TraceWriter(path, provenance=dict(plan.provenance), layout=dict(plan.layout))
    try:
        instance = plan.create_instance(3, trace=writer, collect=False)

        def send(sequence: int, value: float, source: str = "motor/command") -> None:
            instance.enqueue(external_input(source, sequence, PAYLOAD,
                                            json.dumps({"mode": "duty", "value": value})))

        send(1, 0.6)
        with pytest.raises(IngressError):
            send(1, 0.9, "brake/command")  # rejected: traced, never replayed
        instance.advance(150)
        send(2, -0.3)
        instance.advance(150)
        instance.reset()
        send(3, 0.9)
        instance.advance(200)
    finally:
        writer.close()
    return {"folder": folder, "trace": path}


def _inputs(request: Any) -> list[tuple[int, float, int, int]]:
    return [(r.source_sequence, json.loads(r.payload_json)["value"], r.commit_tick,
             r.acceptance_sequence) for r in request.training[0].recorded_inputs]


def test_default_is_the_first_episode_and_rejected_inputs_are_skipped(
        two_episodes: dict[str, Any], tmp_path: Path) -> None:
    request = load_calibration_request(_write(tmp_path, request_doc(two_episodes["trace"])))
    assert request.training[0].recording_episode == 0
    assert _inputs(request) == [(1, 0.6, 0, 0), (2, -0.3, 150, 1)]
    signal = request.training[0].signal("wheel_velocity")
    assert signal.times_ns[0] == 0 and signal.times_ns[-1] == 290_000_000


def test_recording_episode_selects_inputs_and_samples(two_episodes: dict[str, Any],
                                                      tmp_path: Path) -> None:
    doc = request_doc(two_episodes["trace"], recording_episode=1)
    request = load_calibration_request(_write(tmp_path, doc))
    episode = request.training[0]
    assert episode.recording_episode == 1
    assert _inputs(request) == [(3, 0.9, 0, 0)]  # acceptance order restarts per episode
    rows = [row for row in query(two_episodes["trace"], VELOCITY).rows if row[1] == 1]
    np.testing.assert_array_equal(episode.signal("wheel_velocity").values,
                                  [[row[2]] for row in rows])
    assert episode.signal("wheel_velocity").times_ns[-1] == 190_000_000


def test_samples_from_another_recording(bench: dict[str, Path], two_episodes: dict[str, Any],
                                        tmp_path: Path) -> None:
    """Inputs of one trace, samples of another: each trace's first episode by default."""
    doc = request_doc(bench["trace"])
    _episode(doc)["signals"]["wheel_velocity"]["samples_from"]["recording"] = str(
        two_episodes["trace"])
    signal = load_calibration_request(_write(tmp_path, doc)).training[0].signal(
        "wheel_velocity")
    assert signal.times_ns[-1] == 290_000_000  # episode 0 of the two-episode trace
    del _episode(doc)["recording"]
    _episode(doc)["recording_episode"] = 1  # applies to samples_from's trace too
    request = load_calibration_request(_write(tmp_path, doc))
    assert request.training[0].recorded_inputs == ()
    assert request.training[0].signal("wheel_velocity").times_ns[-1] == 190_000_000


def test_scenario_initial_inputs_are_restored_by_the_lifecycle_not_replayed(
        tmp_path: Path) -> None:
    """A scenario input is traced at tick 0 with acceptance 0 and the inputs of ``--inputs``
    after it (acceptance order is unique); calibration restores the scenario input through
    create_instance, so it is not replayed from the trace (it would be applied twice)."""
    scenario = {"initial_inputs": [{"source_id": "motor/command", "source_sequence": 0,
                                    "payload_type": PAYLOAD,
                                    "payload": {"mode": "duty", "value": 0.3}}]}
    (tmp_path / "truth.yaml").write_text(yaml.safe_dump({
        "schema_version": {"major": 1, "minor": 0},
        "parameters": [{"id": "wheel_damping", "value": TRUE_DAMPING,
                        "target": "mujoco:joint_damping:wheel_joint:0"}]}))
    trace = _record(tmp_path, _bench_copy(tmp_path, "scenario-truth.yaml", scenario=scenario,
                                          parameter_overlays=["truth.yaml"]))
    with TraceReader(trace) as reader:
        traced = [(r.source_sequence, r.commit_tick, r.acceptance_sequence)
                  for r in reader.external_inputs()]
    assert traced == [(0, 0, 0), (1, 0, 1), (2, 200, 2), (3, 350, 3)]
    doc = request_doc(trace)
    doc["manifest"] = str(_bench_copy(tmp_path, "scenario.yaml", scenario=scenario))
    request = load_calibration_request(_write(tmp_path, doc))
    assert [r.source_sequence for r in request.training[0].recorded_inputs] == [1, 2, 3]
    result = run_calibration(request)
    assert result.fitted_values["wheel_damping"] == pytest.approx(TRUE_DAMPING, rel=1e-6)


def test_device_samples_are_stamped_like_the_observation(bench: dict[str, Path],
                                                         tmp_path: Path) -> None:
    doc = request_doc(bench["trace"])
    doc["observations"] += [
        {"id": "current", "source": "device_output", "name": "drive_feedback",
         "indices": ["current"]},
        {"id": "current_acquired", "source": "device_output", "name": "drive_feedback",
         "indices": ["current"], "timestamp": "acquisition"}]
    selector = {"selector": "device:drive_feedback", "columns": ["current"]}
    for name in ("current", "current_acquired"):
        _episode(doc)["signals"][name] = {"alignment": "exact", "residual_scale": 0.02,
                                          "samples_from": dict(selector)}
    episode = load_calibration_request(_write(tmp_path, doc)).training[0]
    table = query(bench["trace"], "device:drive_feedback")
    column = table.columns.index("current")
    np.testing.assert_array_equal(episode.signal("current").times_ns,
                                  [row[0] for row in table.rows])
    np.testing.assert_array_equal(episode.signal("current_acquired").times_ns,
                                  [row[2] for row in table.rows])
    np.testing.assert_array_equal(episode.signal("current").values,
                                  [[row[column]] for row in table.rows])


# ------------------------------------------------------------------ request errors
SIGNAL = "training[0].signals.wheel_velocity"
SAMPLES_FROM = f"{SIGNAL}.samples_from"


def _set_samples_from(doc: dict[str, Any], **values: Any) -> None:
    _episode(doc)["signals"]["wheel_velocity"]["samples_from"].update(values)


ERRORS: list[tuple[str, Any, str, str]] = [
    ("recording_and_inputs",
     lambda doc, trace: _episode(doc).update(recorded_inputs=[]),
     "training[0]", "give 'recording' (a trace whose accepted inputs are replayed) or "
                    "'recorded_inputs', not both"),
    ("recording_and_inputs_file",
     lambda doc, trace: _episode(doc).update(recorded_inputs_file="inputs.yaml"),
     "training[0]", "or 'recorded_inputs_file', not both"),
    ("samples_from_and_samples",
     lambda doc, trace: _episode(doc)["signals"]["wheel_velocity"].update(
         samples=[{"time_ns": 0, "values": [0.0]}]),
     SIGNAL, "give exactly one of 'samples' (inline), 'samples_file' (a CSV file) or "
             "'samples_from' (a trace selector)"),
    ("samples_from_and_samples_file",
     lambda doc, trace: _episode(doc)["signals"]["wheel_velocity"].update(
         samples_file="v.csv"),
     SIGNAL, "give exactly one of 'samples'"),
    ("missing_trace",
     lambda doc, trace: _episode(doc).update(recording=str(trace.parent / "nope")),
     "training[0].recording", "cannot read the trace '{parent}/nope': trace does not exist"),
    ("not_a_trace",
     lambda doc, trace: _episode(doc).update(recording=str(trace.parent)),
     "training[0].recording", "cannot read the trace '{parent}': not a trace (expected a "
                              "rosbag2 bag directory with metadata.yaml)"),
    ("missing_samples_from_trace",
     lambda doc, trace: _set_samples_from(doc, recording=str(trace.parent / "nope")),
     f"{SAMPLES_FROM}.recording", "cannot read the trace '{parent}/nope'"),
    ("episode_not_in_trace",
     lambda doc, trace: _episode(doc).update(recording_episode=3),
     "training[0].recording_episode", "episode 3 is not in the trace '{trace}'; its "
                                      "episodes: 0"),
    ("negative_episode",
     lambda doc, trace: _episode(doc).update(recording_episode=-1),
     "training[0].recording_episode", "-1"),
    ("episode_without_a_trace",
     lambda doc, trace: (_episode(doc).pop("recording"),
                         _episode(doc)["signals"]["wheel_velocity"].pop("samples_from"),
                         _episode(doc)["signals"]["wheel_velocity"].update(
                             samples=[{"time_ns": 0, "values": [0.0]}]),
                         _episode(doc).update(recording_episode=0)),
     "training[0].recording_episode", "recording_episode 0 selects an episode of a trace, "
                                      "but the episode has no 'recording'"),
    ("samples_from_without_a_trace",
     lambda doc, trace: _episode(doc).pop("recording"),
     f"{SAMPLES_FROM}.recording", "missing: the episode has no 'recording'"),
    ("unknown_selector_kind",
     lambda doc, trace: _set_samples_from(doc, selector="wheel:wheel_joint.velocity"),
     f"{SAMPLES_FROM}.selector", "unknown selector kind 'wheel' in "
                                 "'wheel:wheel_joint.velocity'"),
    ("unknown_selector_name",
     lambda doc, trace: _set_samples_from(doc, selector="sensor:wheel_speed"),
     f"{SAMPLES_FROM}.selector", "unknown sensor 'wheel_speed' in selector "
                                 "'sensor:wheel_speed'"),
    ("unknown_selector_field",
     lambda doc, trace: _set_samples_from(doc, selector="joint:wheel_joint.speed"),
     f"{SAMPLES_FROM}.selector", "selector 'joint:wheel_joint.speed' has field 'speed'"),
    ("wrong_width",
     lambda doc, trace: _set_samples_from(doc, selector="body:axle.position"),
     f"{SAMPLES_FROM}.selector", "selector 'body:axle.position' gives 3 value column(s) "
                                 "(x, y, z); observation 'wheel_velocity' (joint_velocity) "
                                 "has 1 value(s) per sample (velocity); keep the matching "
                                 "ones with 'columns'"),
    ("wrong_width_of_columns",
     lambda doc, trace: _set_samples_from(doc, selector="body:axle.position",
                                          columns=["x", 2]),
     f"{SAMPLES_FROM}.columns", "gives 2 value column(s) (x, z)"),
    ("unknown_column",
     lambda doc, trace: _set_samples_from(doc, columns=["speed"]),
     f"{SAMPLES_FROM}.columns[0]", "selector 'joint:wheel_joint.velocity' has no value "
                                   "column 'speed'; value columns: velocity"),
    ("column_out_of_range",
     lambda doc, trace: _set_samples_from(doc, columns=[1]),
     f"{SAMPLES_FROM}.columns[0]", "index 1 is out of range"),
    ("unknown_samples_from_key",
     lambda doc, trace: _set_samples_from(doc, episode=1),
     f"{SAMPLES_FROM}.episode", "unknown key; expected one of: columns, recording, selector"),
    ("off_grid_samples",
     lambda doc, trace: doc["observations"][0].update(sample_every_steps=20),
     f"{SIGNAL}", "exact alignment: sample 1 at time_ns 10000000 is not on the observation "
                  "grid"),
]


@pytest.mark.parametrize(("mutate", "key", "message"), [e[1:] for e in ERRORS],
                         ids=[e[0] for e in ERRORS])
def test_request_errors_name_file_key_and_value(bench: dict[str, Path], tmp_path: Path,
                                                mutate: Any, key: str, message: str) -> None:
    trace = bench["trace"]
    doc = request_doc(trace)
    mutate(doc, trace)
    path = _write(tmp_path, doc)
    with pytest.raises(CalibrationRequestError) as raised:
        load_calibration_request(path)
    text = str(raised.value)
    assert text.startswith(f"{path}: {key}: "), text
    assert message.format(parent=trace.parent, trace=trace) in text, text


def test_trace_with_another_timestep_or_no_records_is_refused(tmp_path: Path) -> None:
    plan = SimulationBuilder().build(BENCH)
    for name, timestep, message in (
            ("coarse", 2_000_000, "was recorded with a 2000000 ns timestep; the plan steps "
                                  "1000000 ns"),
            ("empty", 1_000_000, "has no records")):
        TraceWriter(tmp_path / name, provenance={},
                    layout=dict(plan.layout, timestep_ns=timestep)).close()
        path = _write(tmp_path, request_doc(tmp_path / name))
        with pytest.raises(CalibrationRequestError) as raised:
            load_calibration_request(path)
        assert str(raised.value).startswith(f"{path}: training[0].recording: ")
        assert message in str(raised.value)
