"""Synthetic robot recordings for the recording-source tests: a two-joint torque arm, a truth
rollout through the normal ingress, and writers for rosbag2 (MCAP / sqlite3), raw MCAP and CSV.

The "robot" is ARM_XML with the TRUE joint damping (an overlay); its commands are torques that
change at jittered times (committed at the next tick, as a real controller's command is) and
its joint states are logged at irregular times (0.7-8.8 ms apart, like a real 1 kHz log), each
value the state linearly interpolated between the physics ticks around it. With linear
alignment and ``commit: next_tick`` a replay at the true damping reproduces the log exactly.
"""

from __future__ import annotations

import csv
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from fibril_sim_core.overlays import MujocoTarget, OverlayParameter

from fibril_sim_core import IngressRecord, SimulationBuilder, StateSnapshot

ARM_XML = """\
<mujoco model="arm">
  <option timestep="0.001" gravity="0 0 0"/>
  <worldbody>
    <body name="link1" pos="0 0 1">
      <joint name="j1" type="hinge" axis="0 0 1" damping="0.1"/>
      <geom type="capsule" fromto="0 0 0 0.3 0 0" size="0.02" mass="1" contype="0"
            conaffinity="0"/>
      <body name="link2" pos="0.3 0 0">
        <joint name="j2" type="hinge" axis="0 0 1" damping="0.1"/>
        <geom type="capsule" fromto="0 0 0 0.25 0 0" size="0.02" mass="0.6" contype="0"
              conaffinity="0"/>
        <site name="tip" pos="0.25 0 0"/>
      </body>
    </body>
  </worldbody>
  <actuator>
    <motor name="m1" joint="j1" gear="1"/>
    <motor name="m2" joint="j2" gear="1"/>
  </actuator>
</mujoco>
"""

JOINTS = ("j1", "j2")
ENDPOINTS = {"j1": "j1/command", "j2": "j2/command"}
TRUTH = {"j1": 0.3, "j2": 0.2}
PAYLOAD = "fibril_sim/motor_command/v1"
DT = 1_000_000
EPOCH = 1_700_000_000_000_000_000  # bag log times are wall-clock ns


def write_arm(folder: Path) -> Path:
    (folder / "arm.xml").write_text(ARM_XML)
    manifest = {"schema_version": {"major": 3, "minor": 1}, "model": "arm.xml",
                "components": [{"id": f"motor_{j}", "type": "fibril_sim/motor",
                                "endpoint": ENDPOINTS[j], "bind": {"actuator": f"m{n + 1}"}}
                               for n, j in enumerate(JOINTS)]}
    path = folder / "arm.yaml"
    path.write_text(yaml.safe_dump(manifest, sort_keys=False))
    return path


def commands(duration_s: float, seed: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """Torque commands: times (ns, jittered, the first at 0) and (n, 2) torques."""
    rng = np.random.default_rng(seed)
    times = [0]
    while times[-1] < duration_s * 1e9:
        times.append(times[-1] + int(rng.uniform(20e6, 60e6)) + int(rng.integers(1, 999_999)))
    times = np.array(times[:-1], dtype=np.int64)
    torques = rng.uniform(-0.4, 0.4, (times.size, 2))
    return times, torques


def truth(manifest: Path, times: np.ndarray, torques: np.ndarray, duration_s: float,
          damping: dict[str, float] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """qpos and qvel (ticks+1, 2) at every tick 0..duration of the true arm."""
    damping = damping or TRUTH
    overlays = tuple(OverlayParameter(f"d_{j}", v, (MujocoTarget("joint_damping", j),))
                     for j, v in damping.items())
    plan = SimulationBuilder().build(manifest, overlays=overlays)
    records = []
    acceptance = 0
    for n, (t, row) in enumerate(zip(times.tolist(), torques.tolist())):
        tick = -(-t // DT)
        for j, value in zip(JOINTS, row):
            records.append(IngressRecord(0, ENDPOINTS[j], n + 1, PAYLOAD,
                                         f'{{"mode":"torque","value":{value!r}}}', True, tick,
                                         acceptance, "", 0))
            acceptance += 1
    ticks = round(duration_s * 1e9 / DT)
    instance = plan.create_instance(0, snapshot_every=1)
    instance.enqueue_recorded_trace_inputs(records)
    instance.advance(ticks + 1)
    snaps = [r for r in instance.poll() if isinstance(r, StateSnapshot)]
    q = np.zeros((ticks + 1, 2))
    v = np.zeros((ticks + 1, 2))
    for snap in snaps:
        if 0 < snap.tick <= ticks:
            q[snap.tick], v[snap.tick] = snap.qpos[:2], snap.qvel[:2]
    return q, v


def log_times(duration_s: float, seed: int = 2, every_s: float | None = 0.2) -> np.ndarray:
    """Irregular sample times (ns) 0.7-8.8 ms apart, including each multiple of ``every_s``."""
    rng = np.random.default_rng(seed)
    end = int(duration_s * 1e9)
    times = [0]
    while True:
        nxt = times[-1] + int(rng.uniform(0.7e6, 8.8e6))
        if nxt > end:
            break
        times.append(nxt)
    out = set(times)
    if every_s:
        out.update(round(k * every_s * 1e9) for k in range(int(duration_s / every_s) + 1))
    return np.array(sorted(t for t in out if t <= end), dtype=np.int64)


def sample(track: np.ndarray, times_ns: np.ndarray) -> np.ndarray:
    """``track`` (per tick) linearly interpolated at ``times_ns``."""
    grid = np.arange(track.shape[0]) * DT
    return np.column_stack([np.interp(times_ns, grid, track[:, c])
                            for c in range(track.shape[1])])


def recording(folder: Path, duration_s: float = 1.0) -> dict[str, Any]:
    """The arm's truth: manifest, command times/torques, log times and logged q / dq."""
    manifest = write_arm(folder)
    times, torques = commands(duration_s)
    q, v = truth(manifest, times, torques, duration_s)
    stamps = log_times(duration_s)
    return {"manifest": manifest, "command_times": times, "torques": torques,
            "log_times": stamps, "q": sample(q, stamps), "dq": sample(v, stamps),
            "q_ticks": q, "dq_ticks": v, "duration_s": duration_s}


# --------------------------------------------------------------------------- writers

def typestore() -> Any:
    from fibril_sim_core.trace.msgtypes import typestore as fibril_types

    return fibril_types()


def write_bag(path: Path, data: dict[str, Any], storage: str = "mcap", *,
              header_offset_ns: int = 0, extra: Any = None) -> Path:
    """/joint_commands (JointState effort) and /joint_states (JointState position, velocity,
    header stamped ``header_offset_ns`` after the log time) as rosbags writes them."""
    from rosbags.rosbag2 import StoragePlugin, Writer

    store = typestore()
    JointState = store.types["sensor_msgs/msg/JointState"]
    Header = store.types["std_msgs/msg/Header"]
    Time = store.types["builtin_interfaces/msg/Time"]
    plugin = StoragePlugin.MCAP if storage == "mcap" else StoragePlugin.SQLITE3
    if path.exists():
        shutil.rmtree(path)

    def header(t: int) -> Any:
        return Header(stamp=Time(sec=t // 1_000_000_000, nanosec=t % 1_000_000_000),
                      frame_id="")

    with Writer(path, version=9, storage_plugin=plugin) as writer:
        commands_conn = writer.add_connection("/joint_commands", JointState.__msgtype__,
                                              typestore=store)
        states = writer.add_connection("/joint_states", JointState.__msgtype__, typestore=store)
        rows = []
        for t, tau in zip(data["command_times"].tolist(), data["torques"]):
            msg = JointState(header=header(EPOCH + t), name=list(JOINTS),
                             position=np.zeros(0), velocity=np.zeros(0),
                             effort=np.array(tau, dtype=np.float64))
            rows.append((EPOCH + t, commands_conn, msg))
        for t, q, dq in zip(data["log_times"].tolist(), data["q"], data["dq"]):
            msg = JointState(header=header(EPOCH + t + header_offset_ns),
                             name=list(reversed(JOINTS)),  # named, not positional
                             position=np.array(q[::-1], dtype=np.float64),
                             velocity=np.array(dq[::-1], dtype=np.float64),
                             effort=np.zeros(0))
            rows.append((EPOCH + t, states, msg))
        if extra is not None:
            rows.extend(extra(writer, store))
        rows.sort(key=lambda r: r[0])
        for t, conn, msg in rows:  # bytes: a message of a type outside the store
            writer.write(conn, t, msg if isinstance(msg, bytes) else
                         store.serialize_cdr(msg, conn.msgtype))
    return path


def raw_mcap(bag: Path, target: Path) -> Path:
    """The single .mcap storage file of an MCAP bag, without metadata.yaml."""
    files = sorted(bag.glob("*.mcap"))
    assert len(files) == 1, files
    shutil.copyfile(files[0], target)
    return target


def write_csv(path: Path, data: dict[str, Any], *, commands_zoh: bool = True) -> Path:
    """One log with t_s, tau1, tau2, q1, q2, dq1, dq2: commands as their own rows (jittered
    times) and states at the log times; a state row repeats the command in force."""
    times = sorted(set(data["command_times"].tolist()) | set(data["log_times"].tolist()))
    ctimes = data["command_times"]
    with path.open("w", newline="", encoding="utf-8") as out:
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(["t_s", "tau1", "tau2", "q1", "q2", "dq1", "dq2"])
        for t in times:
            c = int(np.searchsorted(ctimes, t, "right")) - 1
            q = sample_at(data, t, "q")
            dq = sample_at(data, t, "dq")
            writer.writerow([repr(t / 1e9), *map(repr, data["torques"][c].tolist()),
                             *map(repr, q), *map(repr, dq)])
    return path


def sample_at(data: dict[str, Any], t: int, key: str) -> list[float]:
    """The true state at ``t`` (interpolated between the ticks around it)."""
    return sample(data[f"{key}_ticks"], np.array([t]))[0].tolist()


def request(manifest: Path, source: Any, *, windows: Any = None, initial: float = 0.1,
            extra_episode: dict[str, Any] | None = None, csv_log: bool = False,
            **top: Any) -> dict[str, Any]:
    """A request fitting d_j1, d_j2 to the arm recording in ``source``."""
    if csv_log:
        inputs = [{"endpoints": {"tau1": "j1/command", "tau2": "j2/command"}, "mode": "torque",
                   "commit": "next_tick"}]
        signals = {"q": {"columns": ["q1", "q2"], "alignment": "linear",
                         "residual_scale": 1e-3}}
        state = [{"type": "joint", "joint": "j1", "qpos_from": {"column": "q1"},
                  "qvel_from": {"column": "dq1"}},
                 {"type": "joint", "joint": "j2", "qpos_from": {"column": "q2"},
                  "qvel_from": {"column": "dq2"}}]
        observations = [{"id": "q", "source": "qpos", "indices": [0, 1]}]
    else:
        inputs = [{"topic": "/joint_commands", "field": "effort",
                   "endpoints": dict(ENDPOINTS), "mode": "torque", "commit": "next_tick"}]
        signals = {f"q_{j}": {"topic": "/joint_states", "field": f"position[{j}]",
                              "alignment": "linear", "residual_scale": 1e-3} for j in JOINTS}
        state = [{"type": "joint", "joint": j, "qpos_from": {"signal": f"q_{j}"},
                  "qvel_from": {"topic": "/joint_states", "field": f"velocity[{j}]"}}
                 for j in JOINTS]
        observations = [{"id": f"q_{j}", "source": "joint_position", "name": j}
                        for j in JOINTS]
    episode: dict[str, Any] = {"id": "arm", "source": source, "inputs": inputs,
                               "initial_state": state, "signals": signals}
    if windows is not None:
        episode["windows"] = windows
    episode.update(extra_episode or {})
    doc: dict[str, Any] = {
        "schema_version": {"major": 3, "minor": 1}, "manifest": str(manifest),
        "parameters": [{"id": f"d_{j}", "unit": "N_m_s_per_rad", "lower": 0.01, "upper": 2.0,
                        "initial": initial, "nominal": initial,
                        "parameterization": "log_positive",
                        "target": {"type": "mujoco", "kind": "joint_damping", "object": j}}
                       for j in JOINTS],
        "observations": observations,
        "training": [episode],
        "optimizer": {"max_iterations": 30},
    }
    doc.update(top)
    return doc


def write_request(folder: Path, doc: dict[str, Any], name: str = "request.yaml") -> Path:
    path = folder / name
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def load_request(folder: Path, doc: dict[str, Any], name: str = "request.yaml") -> Any:
    """Write ``doc`` as a request file in ``folder`` and load it."""
    from fibril_calibration.request import load_calibration_request

    return load_calibration_request(write_request(folder, doc, name))


def request_fails(folder: Path, doc: dict[str, Any], *needles: str) -> str:
    """Loading ``doc`` is a one-line request error containing every needle; returns it."""
    import pytest
    from fibril_calibration.errors import CalibrationRequestError

    with pytest.raises(CalibrationRequestError) as info:
        load_request(folder, doc, "bad.yaml")
    text = str(info.value)
    assert "\n" not in text
    for needle in needles:
        assert needle in text, text
    return text

