"""``fibril_sim calibrate`` straight from a rosbag2 recording of the drivetrain bench stand.

The "robot" is config/examples/drivetrain/bench.yaml with the true wheel damping (0.05 instead of
the MJCF's 0.02): duty commands published on ``/motor/duty`` (std_msgs/Float64) at jittered
times and committed at the next tick, the wheel velocity logged on ``/joint_states``
(sensor_msgs/JointState, header-stamped) 0.7-8.8 ms apart. The request cuts the bag into 0.1 s
windows, takes each window's initial wheel velocity from the log, fits the damping from the
nominal 0.02, scores the nominal set beside the fit, and ``--evaluate`` re-scores both sets
without fitting.
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit"))

import _recording_rig as rig
from fibril_sim_core.cli import main
from fibril_sim_core.overlays import MujocoTarget, OverlayParameter

from fibril_sim_core import IngressRecord, SimulationBuilder, StateSnapshot

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "config" / "examples" / "drivetrain" / "bench.yaml"
TRUE_DAMPING = 0.05
DURATION = 0.6


def _main(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


def _duties(seed: int = 3) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    times = [0]
    while times[-1] < DURATION * 1e9:
        times.append(times[-1] + int(rng.uniform(30e6, 90e6)) + int(rng.integers(1, 999_999)))
    times = np.array(times[:-1], dtype=np.int64)
    return times, rng.uniform(-0.8, 0.8, times.size)


def _bench(folder: Path) -> Path:
    """bench.yaml without the motor's 2 ms command latency: a window's first command is the one
    in force at its start, committed at tick 0, and a latency would hold it back for 2 ms that
    the robot did not wait (the actuator's command state is not part of an initial state)."""
    doc = yaml.safe_load(BENCH.read_text())
    doc["model"] = str(BENCH.parent / doc["model"])
    for component in doc["components"]:
        if component["id"] == "motor":
            component["config"]["command_latency"] = 0.0
    path = folder / "bench.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def _truth_velocity(manifest: Path, times: np.ndarray, duties: np.ndarray) -> np.ndarray:
    plan = SimulationBuilder().build(manifest, overlays=(OverlayParameter(
        "wheel_damping", TRUE_DAMPING, (MujocoTarget("joint_damping", "wheel_joint"),)),))
    dt = plan.timebase.timestep_ns
    records = [IngressRecord(0, "motor/command", n + 1, rig.PAYLOAD,
                             json.dumps({"mode": "duty", "value": float(value)}), True,
                             -(-int(t) // dt), n, "", 0)
               for n, (t, value) in enumerate(zip(times, duties))]
    ticks = int(DURATION * 1e9) // dt
    instance = plan.create_instance(0, snapshot_every=1)
    instance.enqueue_recorded_trace_inputs(records)
    instance.advance(ticks + 1)
    dof = int(plan.model.jnt_dofadr[plan.model.joint("wheel_joint").id])
    velocity = np.zeros((ticks + 1, 1))
    for snap in instance.poll():
        if isinstance(snap, StateSnapshot) and 0 < snap.tick <= ticks:
            velocity[snap.tick, 0] = snap.qvel[dof]
    return velocity


def _write_bag(path: Path, times: np.ndarray, duties: np.ndarray, stamps: np.ndarray,
               velocity: np.ndarray, storage: str) -> Path:
    from rosbags.rosbag2 import StoragePlugin, Writer

    store = rig.typestore()
    types = store.types
    JointState, Float64 = types["sensor_msgs/msg/JointState"], types["std_msgs/msg/Float64"]
    Header, Time = types["std_msgs/msg/Header"], types["builtin_interfaces/msg/Time"]
    plugin = StoragePlugin.MCAP if storage == "mcap" else StoragePlugin.SQLITE3
    rows = []
    with Writer(path, version=9, storage_plugin=plugin) as writer:
        duty = writer.add_connection("/motor/duty", Float64.__msgtype__, typestore=store)
        states = writer.add_connection("/joint_states", JointState.__msgtype__, typestore=store)
        for t, value in zip(times.tolist(), duties.tolist()):
            rows.append((rig.EPOCH + t, duty, Float64(data=value)))
        for t, v in zip(stamps.tolist(), velocity[:, 0].tolist()):
            stamp = rig.EPOCH + t
            header = Header(stamp=Time(sec=stamp // 10**9, nanosec=stamp % 10**9), frame_id="")
            rows.append((stamp + 300_000, states,  # received 0.3 ms after its stamp
                         JointState(header=header, name=["wheel_joint"],
                                    position=np.zeros(1), velocity=np.array([v]),
                                    effort=np.zeros(1))))
        for t, conn, msg in sorted(rows, key=lambda r: r[0]):
            writer.write(conn, t, store.serialize_cdr(msg, conn.msgtype))
    return path


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    folder = tmp_path_factory.mktemp("bags")
    times, duties = _duties()
    manifest = _bench(folder)
    velocity = _truth_velocity(manifest, times, duties)
    stamps = rig.log_times(DURATION, every_s=0.1)
    logged = rig.sample(velocity, stamps)
    bags = {storage: _write_bag(folder / f"bench-{storage}", times, duties, stamps, logged,
                                storage)
            for storage in ("mcap", "sqlite3")}
    return {"folder": folder, "bags": bags, "manifest": manifest}


def _request(folder: Path, bag: Path, name: str = "calibration.yaml") -> Path:
    doc = {
        "schema_version": {"major": 3, "minor": 1},
        "manifest": "bench.yaml",
        "parameters": [{"id": "wheel_damping", "unit": "N_m_s_per_rad", "lower": 0.001,
                        "upper": 1.0, "initial": 0.02, "nominal": 0.02,
                        "parameterization": "log_positive",
                        "target": "mujoco:joint_damping:wheel_joint"}],
        "observations": [{"id": "wheel_velocity", "source": "joint_velocity",
                          "name": "wheel_joint"}],
        "sources": {"bench": {"path": bag.name, "time": "header", "max_gap": 0.1}},
        "training": [{
            "id": "bench",
            "source": "bench",
            "windows": {"every": 0.1, "validation_every": 3},
            "inputs": [{"topic": "/motor/duty", "field": "data", "source_id": "motor/command",
                        "mode": "duty", "commit": "next_tick", "time": "log"}],
            "initial_state": [{"type": "joint", "joint": "wheel_joint",
                               "qvel_from": {"signal": "wheel_velocity"}}],
            "signals": {"wheel_velocity": {"topic": "/joint_states",
                                           "field": "velocity[wheel_joint]",
                                           "alignment": "linear", "residual_scale": 0.01,
                                           "scale_semantics": "measurement_standard_deviation",
                                           "max_gap": 0.01}}}],
        "optimizer": {"max_iterations": 30},
        "objective": {"standardized_gaussian_residuals": True},
    }
    path = folder / name
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


@pytest.mark.parametrize("storage", ["mcap", "sqlite3"])
def test_calibrate_cli_recovers_the_truth_from_a_bag(recorded: dict[str, Any],
                                                     storage: str) -> None:
    folder = recorded["folder"]
    request = _request(folder, recorded["bags"][storage], f"calibration-{storage}.yaml")
    fit = folder / f"fit-{storage}.json"
    code, out, err = _main(["calibrate", str(request), "--json", "--output-overlay", str(fit)])
    assert code == 0, err
    document = json.loads(out)
    assert document["fitted_parameters"]["wheel_damping"] == pytest.approx(TRUE_DAMPING,
                                                                           rel=1e-5)
    episodes = document["episodes"]
    assert [e["id"] for e in episodes["training"]] == ["bench/w000", "bench/w001",
                                                       "bench/w003", "bench/w004"]
    assert [e["id"] for e in episodes["validation"]] == ["bench/w002"]  # 5 whole windows
    assert episodes["training"][1]["source"]["window_s"] == [0.1, 0.2]
    timing = document["input_timing"]["next_tick"]
    assert timing["moved"] > 0 and 0 < timing["max_shift_s"] < 1e-3
    scores = document["scores"]
    nominal = scores["nominal"]["validation"]["signals"][0]
    fitted = scores["fitted"]["validation"]["signals"][0]
    assert nominal["unit"] == "rad/s" and nominal["components"] == ["velocity"]
    assert nominal["rms"][0] > 0.05 and fitted["rms"][0] < 1e-6

    code, out, err = _main(["calibrate", str(request), "--quiet", "--evaluate", "nominal",
                            "--evaluate", str(fit)])
    assert code == 0, err
    assert "no fit" in out and "wheel_velocity.velocity [rad/s]" in out
    code, out, err = _main(["calibrate", str(request), "--quiet", "--json",
                            "--evaluate", str(fit)])
    assert code == 0, err
    evaluated = json.loads(out)
    assert evaluated["format"] == "fibril_calibration/evaluation"
    assert evaluated["scores"][str(fit)]["validation"]["standardized_rms"] < 1e-4


def test_bad_recording_is_one_line_exit_2(recorded: dict[str, Any]) -> None:
    folder = recorded["folder"]
    request = _request(folder, recorded["bags"]["mcap"], "bad.yaml")
    doc = yaml.safe_load(request.read_text())
    doc["training"][0]["signals"]["wheel_velocity"]["topic"] = "/wheel_states"
    request.write_text(yaml.safe_dump(doc))
    code, out, err = _main(["calibrate", str(request), "--quiet"])
    assert code == 2 and not out
    assert err.count("\n") == 1 and "no topic '/wheel_states'" in err and "Traceback" not in err
    code, out, err = _main(["calibrate", str(_request(folder, recorded["bags"]["mcap"])),
                            "--quiet", "--evaluate", str(folder / "missing.json")])
    assert code == 2 and "missing.json" in err and err.count("\n") == 1
