"""Episodes from what robots record: rosbag2 (MCAP, sqlite3), raw MCAP and CSV logs mapped to
recorded inputs, reference signals and initial states, cut into windows, with jittered
timestamps; every bad recording is a one-line request error naming file, topic / column and
time.

The recordings come from ``_recording_rig``: a two-joint torque arm with a known joint damping,
its torque commands at jittered times and its joint states logged 0.7-8.8 ms apart. Linear
alignment and ``commit: next_tick`` replay it exactly, so each fit must recover the truth.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import _recording_rig as rig
import numpy as np
import pytest
from fibril_calibration.engine import run_calibration
from fibril_calibration.parameter_sets import evaluate_parameter_sets
from fibril_calibration.recordings.sources import SourceError
from fibril_calibration.recordings.formats import open_source

WINDOWS = {"every": 0.2, "validation_every": 4}


def _extra_topics(data: dict[str, Any]) -> Any:
    """/m1/torque (std_msgs/Float64) and /m2/cmd (fibril_msgs/MotorCommand) carrying the same
    commands as /joint_commands."""
    def add(writer: Any, store: Any) -> list[tuple[int, Any, Any]]:
        Float64 = store.types["std_msgs/msg/Float64"]
        MotorCommand = store.types["fibril_msgs/msg/MotorCommand"]
        torque = writer.add_connection("/m1/torque", Float64.__msgtype__, typestore=store)
        command = writer.add_connection("/m2/cmd", MotorCommand.__msgtype__, typestore=store)
        rows = []
        for t, tau in zip(data["command_times"].tolist(), data["torques"].tolist()):
            rows.append((rig.EPOCH + t, torque, Float64(data=tau[0])))
            rows.append((rig.EPOCH + t, command, MotorCommand(mode=2, value=tau[1])))
        return rows
    return add


@pytest.fixture(scope="module")
def arm(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    folder = tmp_path_factory.mktemp("arm")
    data = rig.recording(folder)
    data["folder"] = folder
    data["mcap"] = rig.write_bag(folder / "bag-mcap", data, "mcap", extra=_extra_topics(data),
                                 header_offset_ns=500_000)
    data["sqlite3"] = rig.write_bag(folder / "bag-sqlite3", data, "sqlite3")
    data["raw"] = rig.raw_mcap(data["mcap"], folder / "raw.mcap")
    data["csv"] = rig.write_csv(folder / "log.csv", data)
    return data


_load, _fails = rig.load_request, rig.request_fails


def _recovers(request: Any) -> None:
    result = run_calibration(request)
    for joint, value in rig.TRUTH.items():
        assert result.fitted_values[f"d_{joint}"] == pytest.approx(value, rel=1e-6)
    assert result.outcome.training_summary.rms < 1e-8


# --------------------------------------------------------------------------- recovery

@pytest.mark.parametrize("kind", ["mcap", "sqlite3", "raw", "csv"])
def test_each_source_recovers_the_truth_over_windows(arm: dict[str, Any], kind: str) -> None:
    source: dict[str, Any] = {"path": str(arm[kind])}
    if kind == "csv":
        source["time_column"] = "t_s"
    doc = rig.request(arm["manifest"], source, windows=WINDOWS, csv_log=kind == "csv")
    request = _load(arm["folder"], doc)
    assert [e.id for e in request.training] == ["arm/w000", "arm/w001", "arm/w002", "arm/w004"]
    assert [e.id for e in request.validation] == ["arm/w003"]
    # initial state: the logged state at the window start (a log sample sits on each start)
    second = request.training[1]
    assert second.source["window_s"] == [0.2, 0.4]
    state = {entry["joint"]: entry for entry in second.initial_state}
    for n, joint in enumerate(rig.JOINTS):
        assert state[joint]["qpos"][0] == pytest.approx(arm["q_ticks"][200][n], abs=1e-12)
        assert state[joint]["qvel"][0] == pytest.approx(arm["dq_ticks"][200][n], abs=1e-12)
    # window-relative reference times, the window's own samples only
    signal = second.signals[0]
    assert signal.times_ns[0] == 0 and signal.times_ns[-1] == 200_000_000
    _recovers(request)


def test_whole_recording_and_listed_windows(arm: dict[str, Any]) -> None:
    doc = rig.request(arm["manifest"], {"path": str(arm["mcap"])})
    whole = _load(arm["folder"], doc)
    assert [e.id for e in whole.training] == ["arm"] and not whole.validation
    assert whole.training[0].signals[0].count == arm["log_times"].size
    doc = rig.request(arm["manifest"], {"path": str(arm["mcap"])},
                      windows=[[0.1, 0.3], [0.55, 0.9]])
    listed = _load(arm["folder"], doc)
    assert [e.source["window_s"] for e in listed.training] == [[0.1, 0.3], [0.55, 0.9]]
    stamps = arm["log_times"]
    inside = stamps[(stamps >= 550_000_000) & (stamps <= 900_000_000)]
    np.testing.assert_array_equal(listed.training[1].signals[0].times_ns, inside - 550_000_000)
    # a window that starts between log samples: the state is interpolated at its start
    q = rig.sample(arm["q_ticks"], np.array([550_000_000]))[0]
    entry = listed.training[1].initial_state[0]
    stamps_before = stamps[stamps < 550_000_000][-1]
    stamps_after = stamps[stamps >= 550_000_000][0]
    w = (550_000_000 - stamps_before) / (stamps_after - stamps_before)
    i = int(np.searchsorted(stamps, stamps_before))
    expected = (1 - w) * arm["q"][i][0] + w * arm["q"][i + 1][0]
    assert entry["qpos"][0] == pytest.approx(expected, abs=1e-12)
    assert entry["qpos"][0] == pytest.approx(q[0], abs=1e-3)


def test_shared_named_source_and_float64_and_motor_command_inputs(arm: dict[str, Any]) -> None:
    doc = rig.request(arm["manifest"], "bench", windows=WINDOWS,
                      sources={"bench": {"path": str(arm["mcap"])}})
    doc["training"][0]["inputs"] = [
        {"topic": "/m1/torque", "field": "data", "source_id": "j1/command", "mode": "torque",
         "commit": "next_tick"},
        {"topic": "/m2/cmd", "source_id": "j2/command", "commit": "next_tick"}]
    request = _load(arm["folder"], doc)
    reference = _load(arm["folder"], rig.request(arm["manifest"], {"path": str(arm["mcap"])},
                                                 windows=WINDOWS), "reference.yaml")
    for episode, expected in zip(request.training, reference.training):
        got = sorted((r.source_id, r.commit_tick, r.payload_json)
                     for r in episode.recorded_inputs)
        want = sorted((r.source_id, r.commit_tick, r.payload_json)
                      for r in expected.recorded_inputs)
        assert got == want
    _recovers(request)


# --------------------------------------------------------------------------- timestamps

def test_jittered_commands_are_moved_to_ticks_and_reported(arm: dict[str, Any]) -> None:
    doc = rig.request(arm["manifest"], {"path": str(arm["mcap"])})
    episode = _load(arm["folder"], doc).training[0]
    times = arm["command_times"]
    off_grid = int(np.count_nonzero(times % rig.DT))
    timing = episode.source["input_timing"]["next_tick"]
    assert timing["samples"] == 2 * times.size
    assert timing["moved"] == 2 * off_grid
    shift = int(np.max((-(-times // rig.DT)) * rig.DT - times))
    assert timing["max_shift_ns"] == shift
    ticks = sorted({r.commit_tick for r in episode.recorded_inputs})
    assert ticks == sorted(set((-(-times // rig.DT)).tolist()))
    # nearest_tick: a sample less than half a tick after a tick goes back to it
    doc["training"][0]["inputs"][0]["commit"] = "nearest_tick"
    nearest = _load(arm["folder"], doc).training[0]
    expected = sorted(set(np.rint(times / rig.DT).astype(int).tolist()))
    assert sorted({r.commit_tick for r in nearest.recorded_inputs}) == expected
    stats = nearest.source["input_timing"]["nearest_tick"]
    assert stats["max_shift_ns"] <= rig.DT // 2
    # the result reports it too
    result = run_calibration(_load(arm["folder"], rig.request(
        arm["manifest"], {"path": str(arm["mcap"])}, windows=[[0.0, 0.3]])))
    assert result.document["input_timing"]["next_tick"]["moved"] > 0
    assert "largest shift" in result.summary()


def test_header_time_instead_of_log_time(arm: dict[str, Any]) -> None:
    doc = rig.request(arm["manifest"], {"path": str(arm["mcap"]), "time": "header"})
    episode = _load(arm["folder"], doc).training[0]
    # commands carry header = log time; the states are stamped 0.5 ms after their log time
    np.testing.assert_array_equal(episode.signals[0].times_ns, arm["log_times"] + 500_000)
    for signal in doc["training"][0]["signals"].values():
        signal["time"] = "log"
    episode = _load(arm["folder"], doc).training[0]
    np.testing.assert_array_equal(episode.signals[0].times_ns, arm["log_times"])
    doc["training"][0]["inputs"] = [{"topic": "/m1/torque", "field": "data", "time": "header",
                                     "source_id": "j1/command", "mode": "torque",
                                     "commit": "next_tick"}]
    _fails(arm["folder"], doc, "topic '/m1/torque'", "has no header", "time: log")


# --------------------------------------------------------------------------- scores

def test_result_and_evaluate_give_nominal_beside_fitted_in_physical_units(
        arm: dict[str, Any], tmp_path: Path) -> None:
    doc = rig.request(arm["manifest"], {"path": str(arm["mcap"])}, windows=WINDOWS)
    request = _load(arm["folder"], doc)
    result = run_calibration(request)
    scores = result.document["scores"]
    assert set(scores) == {"nominal", "fitted"}
    nominal = scores["nominal"]["training"]
    fitted = scores["fitted"]["training"]
    assert [s["signal"] for s in nominal["signals"]] == ["q_j1", "q_j2"]
    assert nominal["signals"][0]["unit"] == "rad"
    assert nominal["signals"][0]["rms"][0] > 1e-3 > fitted["signals"][0]["rms"][0]
    assert scores["nominal"]["validation"]["standardized_rms"] > 1.0
    # the physical RMS is the standardized one times the scale (1e-3 rad)
    first = nominal["episodes"][0]
    physical = [s["rms"][0] for s in first["signals"]]  # both signals have the same count
    assert first["standardized_rms"] == pytest.approx(
        np.sqrt(np.mean(np.square(physical))) / 1e-3)
    assert "nominal" in result.summary() and "[rad]" in result.summary()
    overlay = tmp_path / "fit.json"
    overlay.write_text(json.dumps(result.parameter_overlay))
    evaluated = evaluate_parameter_sets(request, ["nominal", str(overlay)])
    assert list(evaluated["scores"]) == ["nominal", str(overlay)]
    assert evaluated["scores"]["nominal"]["training"] == nominal
    assert evaluated["scores"][str(overlay)]["training"]["standardized_rms"] < 1e-8
    assert evaluated["scores"][str(overlay)]["values"] == pytest.approx(
        {f"d_{j}": v for j, v in rig.TRUTH.items()})


# --------------------------------------------------------------------------- bad recordings

def _doc(arm: dict[str, Any], kind: str = "mcap", **kw: Any) -> dict[str, Any]:
    source: dict[str, Any] = {"path": str(arm[kind])}
    if kind == "csv":
        source["time_column"] = "t_s"
    return rig.request(arm["manifest"], source, csv_log=kind == "csv", **kw)


def test_missing_topic_field_element_and_wrong_type(arm: dict[str, Any]) -> None:
    doc = _doc(arm)
    bad = copy.deepcopy(doc)
    bad["training"][0]["signals"]["q_j1"]["topic"] = "/nope"
    _fails(arm["folder"], bad, "training[0].signals.q_j1", str(arm["mcap"]), "no topic '/nope'",
           "/joint_states")
    bad = copy.deepcopy(doc)
    bad["training"][0]["signals"]["q_j1"]["type"] = "std_msgs/msg/Float64"
    _fails(arm["folder"], bad, "topic '/joint_states'", "carries sensor_msgs/msg/JointState",
           "not std_msgs/msg/Float64")
    bad = copy.deepcopy(doc)
    bad["training"][0]["signals"]["q_j1"]["field"] = "positon[j1]"
    _fails(arm["folder"], bad, "has no field 'positon'", "position")
    bad = copy.deepcopy(doc)
    bad["training"][0]["signals"]["q_j1"]["field"] = "position[j9]"
    _fails(arm["folder"], bad, "no element named 'j9'", "j2, j1")
    bad = copy.deepcopy(doc)
    bad["training"][0]["inputs"][0]["endpoints"] = {"j1": "nope/command"}
    _fails(arm["folder"], bad, "unknown endpoint source id 'nope/command'", "j1/command")
    bad = copy.deepcopy(doc)
    del bad["training"][0]["inputs"][0]["commit"]
    _fails(arm["folder"], bad, "inputs[0]", "commit")
    bad = copy.deepcopy(doc)
    bad["training"][0]["inputs"][0]["mode"] = "duty"
    _fails(arm["folder"], bad, "mode", "duty")
    bad = copy.deepcopy(doc)
    bad["training"][0]["source"] = "bench"
    _fails(arm["folder"], bad, "unknown source 'bench'")
    bad = copy.deepcopy(doc)
    bad["training"][0]["source"] = {"path": str(arm["folder"] / "missing-bag")}
    _fails(arm["folder"], bad, "does not exist", "missing-bag")


def test_missing_column_nan_rows_and_backwards_time(arm: dict[str, Any]) -> None:
    doc = _doc(arm, "csv")
    bad = copy.deepcopy(doc)
    bad["training"][0]["signals"]["q"]["columns"] = ["q1", "q9"]
    _fails(arm["folder"], bad, str(arm["csv"]), "no column 'q9'", "q1, q2")
    bad = copy.deepcopy(doc)
    bad["training"][0]["source"].pop("time_column")  # t_s: found by its name (issue 24)
    _load(arm["folder"], bad)
    stamp = arm["folder"] / "stamp.csv"
    stamp.write_text(arm["csv"].read_text().replace("t_s,", "stamp,", 1))
    bad["training"][0]["source"]["path"] = str(stamp)
    _fails(arm["folder"], bad, "name its time column")
    lines = arm["csv"].read_text().splitlines()
    nan = arm["folder"] / "nan.csv"
    rows = [line.split(",") for line in lines]
    for n in (40, 41, 90):
        rows[n][3] = "nan"
    nan.write_text("\n".join(",".join(r) for r in rows) + "\n")
    bad = copy.deepcopy(doc)
    bad["training"][0]["source"]["path"] = str(nan)
    t = float(rows[40][0])
    _fails(arm["folder"], bad, str(nan), "'q1'", "3 row(s) with NaN", f"{t:.9g} s")
    back = arm["folder"] / "back.csv"
    rows = [line.split(",") for line in lines]
    rows[50], rows[51] = rows[51], rows[50]
    back.write_text("\n".join(",".join(r) for r in rows) + "\n")
    bad = copy.deepcopy(doc)
    bad["training"][0]["source"]["path"] = str(back)
    _fails(arm["folder"], bad, str(back), "'t_s'", "time goes backwards at line 52")


def test_empty_window_and_gap_tolerance(arm: dict[str, Any]) -> None:
    doc = _doc(arm, windows=[[0.2, 0.4], [1.5, 1.7]])
    text = _fails(arm["folder"], doc, "training[0].windows[1]", "window 1 [1.5 s, 1.7 s]",
                  "topic '/joint_states'", "no sample in the window")
    assert str(arm["mcap"]) in text
    gaps = np.diff(arm["log_times"])
    widest = int(np.argmax(gaps))
    doc = _doc(arm)
    doc["training"][0]["signals"]["q_j1"]["max_gap"] = 0.005  # the signal's own tolerance
    start = arm["log_times"][np.flatnonzero(gaps > 5_000_000)[0]] / 1e9
    _fails(arm["folder"], doc, "signals.q_j1", "topic '/joint_states'", "has a gap of",
           f"{start:.9g} s", "max_gap 5 ms")
    del doc["training"][0]["signals"]["q_j1"]["max_gap"]
    doc["training"][0]["source"]["max_gap"] = 0.005  # the source's: commands are sparser
    _fails(arm["folder"], doc, "inputs[0]", "topic '/joint_commands'", "has a gap of")
    doc["training"][0]["source"]["max_gap"] = 0.07
    assert float(gaps[widest]) < 0.07e9
    _load(arm["folder"], doc)


def test_repeated_reference_times_are_refused(arm: dict[str, Any]) -> None:
    lines = arm["csv"].read_text().splitlines()
    rows = [line.split(",") for line in lines]
    rows[30][0] = rows[29][0]
    dup = arm["folder"] / "dup.csv"
    dup.write_text("\n".join(",".join(r) for r in rows) + "\n")
    doc = _doc(arm, "csv")
    doc["training"][0]["source"]["path"] = str(dup)
    _fails(arm["folder"], doc, "two samples at", "increase strictly")


def test_source_reader_directly(arm: dict[str, Any]) -> None:
    bag = open_source(arm["mcap"])
    try:
        assert bag.topics["/joint_states"] == "sensor_msgs/msg/JointState"
        stream = bag.stream(topic="/joint_states", field="velocity[j2]")
        np.testing.assert_allclose(stream.values[:, 0], arm["dq"][:, 1])
        whole = bag.stream(topic="/joint_states", field="position")
        assert whole.values.shape == (arm["log_times"].size, 2)
        with pytest.raises(SourceError, match="name a topic"):
            bag.stream(columns=["q1"])
    finally:
        bag.close()
    other = arm["folder"] / "notes.yaml"
    other.write_text("{}")
    with pytest.raises(SourceError, match="cannot tell its format"):
        open_source(other)
    garbage = arm["folder"] / "garbage.mcap"
    garbage.write_bytes(b"not an mcap file at all")
    with pytest.raises(SourceError, match="cannot read recording .*garbage.mcap"):
        open_source(garbage)


def test_joint_logs_decode_column_wise_or_per_message_alike(arm: dict[str, Any],
                                                            tmp_path: Path) -> None:
    """The numpy column decode of an equal-layout JointState topic gives what rosbags'
    per-message decode gives; a log whose name order changes takes the per-message path."""
    bag = open_source(arm["mcap"])
    try:
        fast = bag.stream(topic="/joint_states", field="position[j1]", time="header")
        assert bag._joints["/joint_states"] is not None
        _, messages = bag.messages("/joint_states")
        slow = [m.position[list(m.name).index("j1")] for m in messages]
        np.testing.assert_array_equal(fast.values[:, 0], slow)
        stamps = [m.header.stamp.sec * 10**9 + m.header.stamp.nanosec for m in messages]
        np.testing.assert_array_equal(fast.times_ns, stamps)
    finally:
        bag.close()
    from rosbags.rosbag2 import StoragePlugin, Writer

    store = rig.typestore()
    JointState = store.types["sensor_msgs/msg/JointState"]
    Header, Time = store.types["std_msgs/msg/Header"], store.types["builtin_interfaces/msg/Time"]
    path = tmp_path / "shuffled"
    with Writer(path, version=9, storage_plugin=StoragePlugin.MCAP) as writer:
        conn = writer.add_connection("/joint_states", JointState.__msgtype__, typestore=store)
        for n in range(6):
            names = ["a", "b"] if n % 2 else ["b", "a"]
            values = [float(n), -float(n)] if n % 2 else [-float(n), float(n)]
            msg = JointState(header=Header(stamp=Time(sec=n, nanosec=0), frame_id=""),
                             name=names, position=np.array(values), velocity=np.zeros(0),
                             effort=np.zeros(0))
            writer.write(conn, n * 10**9, store.serialize_cdr(msg, conn.msgtype))
    shuffled = open_source(path)
    try:
        stream = shuffled.stream(topic="/joint_states", field="position[a]")
        assert shuffled._joints["/joint_states"] is None
        np.testing.assert_array_equal(stream.values[:, 0], np.arange(6.0))
    finally:
        shuffled.close()



def test_metrics_json_against_a_hand_computation(arm: dict[str, Any], tmp_path: Path) -> None:
    """--evaluate nominal --metrics DIR: the held-out whole run's metrics.json equals the lab's
    formulas applied to a rollout at the nominal damping interpolated onto the log times."""
    from fibril_sim_core.cli import main

    doc = rig.request(arm["manifest"], {"path": str(arm["mcap"])}, windows=[[0.0, 0.5]])
    held = copy.deepcopy(doc["training"][0])
    held["id"] = "held"
    del held["windows"]
    doc["validation"] = [held]
    doc["observations"].append({"id": "v_j1", "source": "joint_velocity", "name": "j1"})
    held["signals"]["v_j1"] = {"topic": "/joint_states", "field": "velocity[j1]",
                               "alignment": "linear", "residual_scale": 0.01}
    request = rig.write_request(tmp_path, doc)
    code = main(["calibrate", str(request), "--quiet", "--evaluate", "nominal",
                 "--metrics", str(tmp_path / "metrics")])
    assert code == 0
    written = json.loads((tmp_path / "metrics" / "nominal" / "held" / "metrics.json")
                         .read_text())
    q, v = rig.truth(arm["manifest"], arm["command_times"], arm["torques"], arm["duration_s"],
                     damping={"j1": 0.1, "j2": 0.1})
    stamps = arm["log_times"]
    sim_q, sim_v = rig.sample(q, stamps), rig.sample(v, stamps)
    error = sim_q - arm["q"]
    joints = written["joints"]
    np.testing.assert_allclose(joints["pos_rmse_rad"], np.sqrt(np.mean(error ** 2, axis=0)),
                               rtol=1e-9)
    np.testing.assert_allclose(joints["pos_max_abs_rad"], np.max(np.abs(error), axis=0),
                               rtol=1e-9)
    assert joints["pos_rmse_all_rad"] == pytest.approx(np.sqrt(np.mean(error ** 2)), rel=1e-9)
    assert joints["pos_mse_all_rad2"] == pytest.approx(np.mean(error ** 2), rel=1e-9)
    motion = np.max(arm["q"], axis=0) - np.min(arm["q"], axis=0)
    np.testing.assert_allclose(joints["real_motion_range_rad"], motion, rtol=1e-12)
    np.testing.assert_allclose(joints["pos_rmse_pct_of_motion"],
                               100 * np.sqrt(np.mean(error ** 2, axis=0)) / motion, rtol=1e-9)
    verror = sim_v[:, 0] - arm["dq"][:, 0]
    assert joints["vel_rmse_rad_s"] == pytest.approx([np.sqrt(np.mean(verror ** 2))], rel=1e-9)
    assert written["schema_version"] == 1 and written["ee"] is None
    assert written["num_samples"] == stamps.size
    assert written["metrics_path"].endswith("nominal/held/metrics.json")
    assert "initial_state_fit" not in written  # a replay from the logged state


def test_metrics_ee_fields() -> None:
    """EE position per axis and 3d (RMS / max of the error norm); orientation: the angle of
    the rotation-vector residual."""
    from fibril_calibration.metrics_json import ee_metrics

    position = np.array([[0.003, 0.0, 0.004], [0.0, -0.001, 0.0]])
    rotation = np.array([[0.0, 0.0, 0.02], [0.03, 0.04, 0.0]])
    ee = ee_metrics((position, None, None), (rotation, None, None))
    assert ee["pos"]["rmse_m"]["x"] == pytest.approx(np.sqrt(0.003 ** 2 / 2))
    assert ee["pos"]["rmse_m"]["3d"] == pytest.approx(np.sqrt((0.005 ** 2 + 0.001 ** 2) / 2))
    assert ee["pos"]["max_abs_m"] == pytest.approx({"x": 0.003, "y": 0.001, "z": 0.004,
                                                    "3d": 0.005})
    assert ee["ori"] == pytest.approx({"rmse_rad": np.sqrt((0.02 ** 2 + 0.05 ** 2) / 2),
                                       "max_rad": 0.05})


def test_sysid_best_params_import_and_evaluate(arm: dict[str, Any], tmp_path: Path) -> None:
    """The lab's sysid_best_params.json → an overlay artifact; --evaluate matches its damping
    to the request's parameters by target and holds armature, friction and delay fixed."""
    from fibril_calibration.sysid_import import main as import_main

    def lab_fit(name: str, armature: list[float]) -> Path:
        params = tmp_path / f"{name}.json"
        params.write_text(json.dumps({"best_score": 0.002, "best_params_decoded": {
            "armature": armature, "mu_static": [0.1, 0.1], "dynamic_ratio": [0.5, 0.5],
            "mu_dynamic": [0.0, 0.0], "mu_viscous": [rig.TRUTH["j1"], rig.TRUTH["j2"]],
            "motor_delay_steps": 0}}))
        out = tmp_path / f"{name}-overlay.json"
        assert import_main([str(params), "--joints", "j1,j2", "--motors",
                            "motor_j1,motor_j2", "--output", str(out)]) == 0
        return out

    exact = lab_fit("exact", [0.0, 0.0])
    heavy = lab_fit("heavy", [0.01, 0.01])
    artifact = json.loads(exact.read_text())
    ids = [p["id"] for p in artifact["parameters"]]
    assert ids == ["armature_j1", "armature_j2", "frictionloss_j1", "frictionloss_j2",
                   "damping_j1", "damping_j2", "motor_delay"]
    assert artifact["source"]["not_mapped"] == {"mu_static": [0.1, 0.1],
                                                "dynamic_ratio": [0.5, 0.5]}
    request = _load(arm["folder"], rig.request(arm["manifest"], {"path": str(arm["mcap"])},
                                               windows=[[0.0, 0.5]]))
    scored = evaluate_parameter_sets(request, [str(exact), str(heavy)])["scores"]
    entry = scored[str(exact)]
    assert entry["values"] == {"d_j1": rig.TRUTH["j1"], "d_j2": rig.TRUTH["j2"]}
    assert entry["provenance"]["overlay_parameters"] == {"d_j1": "damping_j1",
                                                         "d_j2": "damping_j2"}
    assert len(entry["provenance"]["fixed_overlays"]) == 5
    assert entry["training"]["standardized_rms"] < 1e-8
    assert scored[str(heavy)]["training"]["standardized_rms"] > 0.1  # armature applied
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"best_params_decoded": {"armature": [0.1]}}))
    assert import_main([str(bad), "--joints", "j1,j2", "--output",
                        str(tmp_path / "x.json")]) == 2


def test_held_command_behind_an_endpoint_latency_is_reported(arm: dict[str, Any],
                                                            tmp_path: Path) -> None:
    import yaml

    manifest = yaml.safe_load(arm["manifest"].read_text())
    manifest["model"] = str(arm["folder"] / manifest["model"])
    for component in manifest["components"]:
        component["config"] = {"command_latency": 0.002}
    slow = tmp_path / "slow.yaml"
    slow.write_text(yaml.safe_dump(manifest))
    doc = rig.request(slow, {"path": str(arm["mcap"])}, windows=WINDOWS)
    request = _load(tmp_path, doc)
    timing = request.training[1].source["input_timing"]["next_tick"]
    assert timing["held_at_start"] == 2 and timing["held_latency_ticks"] == 2
    result = run_calibration(_load(tmp_path, rig.request(slow, {"path": str(arm["mcap"])},
                                                         windows=[[0.2, 0.4]])))
    assert "after the endpoint latency of 2 tick(s)" in result.summary()


def test_bag_typestore_is_the_core_one_unless_the_bag_redefines_a_type(arm: dict[str, Any]
                                                                      ) -> None:
    """Bags of known types decode with the core's shared typestore (its generated decoders
    reused); an embedded definition that differs gets a private store, the shared one is left
    unchanged."""
    from types import SimpleNamespace

    from fibril_calibration.recordings.message_types import bag_typestore as _bag_typestore
    from fibril_sim_core.trace.msgtypes import typestore

    source = open_source(arm["mcap"])
    try:
        assert _bag_typestore(source._reader.connections) is typestore()
    finally:
        source.close()
    custom = SimpleNamespace(msgtype="my_msgs/msg/Reading", msgdef=SimpleNamespace(
        format=SimpleNamespace(name="MSG"), data="float64 value\nint32 count\n"))
    store = _bag_typestore([custom])
    assert store is not typestore() and "my_msgs/msg/Reading" not in typestore().fielddefs
    raw = store.serialize_cdr(store.types["my_msgs/msg/Reading"](value=1.5, count=3),
                              "my_msgs/msg/Reading")
    decoded = store.deserialize_cdr(raw, "my_msgs/msg/Reading")
    assert (decoded.value, decoded.count) == (1.5, 3)
    assert store.deserialize_cdr(typestore().serialize_cdr(
        typestore().types["std_msgs/msg/Float64"](data=2.0), "std_msgs/msg/Float64"),
        "std_msgs/msg/Float64").data == 2.0


def test_candidate_builder_fixed_overlays(arm: dict[str, Any]) -> None:
    """``CandidatePlanBuilder(fixed_overlays=...)``: the --evaluate path's held parameters are
    in every candidate; one that binds a fitted target again is an error naming it."""
    from fibril_calibration.model.candidate_plan import CandidatePlanBuilder
    from fibril_calibration.parameters import CalibrationParameter
    from fibril_sim_core.errors import FibrilError
    from fibril_sim_core.overlays import MujocoTarget, OverlayParameter

    fitted = [CalibrationParameter("d_j1", 0.01, 2.0, 0.1, targets=(
        MujocoTarget("joint_damping", "j1"),))]
    held = OverlayParameter("held_j2", 0.7, (MujocoTarget("joint_damping", "j2"),))
    builder = CandidatePlanBuilder(arm["manifest"], fitted, fixed_overlays=(held,))
    for value in (0.3, 0.4):  # the first build makes the template, the second reuses it
        plan = builder.build({"d_j1": value})
        assert plan.model.dof_damping.tolist() == pytest.approx([value, 0.7])
        builder.release(plan)
    clash = OverlayParameter("other_j1", 0.5, (MujocoTarget("joint_damping", "j1"),))
    with pytest.raises(FibrilError, match="with the fixed overlays other_j1: "):
        CandidatePlanBuilder(arm["manifest"], fitted, fixed_overlays=(clash,)).build(
            {"d_j1": 0.2})
    # a failure inside the plan build (a value the model refuses) names them too
    bad = OverlayParameter("held_bad", 0.5, (MujocoTarget("joint_damping", "no_such_joint"),))
    with pytest.raises(FibrilError, match="with the fixed overlays held_bad: "):
        CandidatePlanBuilder(arm["manifest"], fitted, fixed_overlays=(bad,)).build(
            {"d_j1": 0.2})
