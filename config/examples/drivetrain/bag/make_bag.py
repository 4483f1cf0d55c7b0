"""Write bench-run/, the rosbag2 (MCAP) recording calibration.yaml fits: the drivetrain on its
bench stand (bench.yaml) as a robot would record it.

The "robot" is the bench with a wheel damping of 0.05 N·m·s/rad (the model says 0.02): duty
commands on /motor/duty (std_msgs/msg/Float64) at irregular times, the wheel velocity logged on
/joint_states (sensor_msgs/msg/JointState, header-stamped, 1-6 ms apart, Gaussian noise of
0.02 rad/s). Run it again to make the bag anew:

    python make_bag.py [--output bench-run]
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

import numpy as np
from rosbags.rosbag2 import StoragePlugin, Writer
from rosbags.typesys import Stores, get_typestore

from fibril_sim_core import (MujocoTarget, OverlayParameter, SimulationBuilder, StateSnapshot,
                             external_input)

HERE = Path(__file__).resolve().parent
TRUE_DAMPING = 0.05
DURATION = 1.2  # s
NOISE = 0.02  # rad/s
EPOCH = 1_767_225_600 * 10**9  # bag times are wall-clock ns (2026-01-01)


def commands(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Duty steps 30-90 ms apart (ns, duty)."""
    times = [0]
    while times[-1] < DURATION * 1e9:
        times.append(times[-1] + int(rng.uniform(30e6, 90e6)))
    return np.array(times[:-1], dtype=np.int64), rng.uniform(-0.8, 0.8, len(times) - 1)


def wheel_velocity(times: np.ndarray, duties: np.ndarray) -> tuple[np.ndarray, int]:
    """The true wheel velocity at every tick, and the tick length (ns)."""
    truth = OverlayParameter("wheel_damping", TRUE_DAMPING,
                             (MujocoTarget("joint_damping", "wheel_joint"),))
    plan = SimulationBuilder().build(HERE / "bench.yaml", overlays=(truth,))
    dt = plan.timebase.timestep_ns
    dof = int(plan.model.jnt_dofadr[plan.model.joint("wheel_joint").id])
    ticks = int(DURATION * 1e9) // dt
    instance = plan.create_instance(0, snapshot_every=1)
    velocity = np.zeros(ticks + 1)
    due = {-(-int(t) // dt): float(d) for t, d in zip(times, duties)}  # the next tick
    for tick in range(ticks + 1):
        if tick in due:
            instance.enqueue(external_input("motor/command", tick + 1,
                                            "fibril_sim/motor_command/v1",
                                            {"mode": "duty", "value": due[tick]}))
        instance.advance(1)
        for record in instance.poll():
            if isinstance(record, StateSnapshot) and record.tick <= ticks:
                velocity[record.tick] = record.qvel[dof]
    return velocity, dt


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output", type=Path, default=HERE / "bench-run")
    output = parser.parse_args().output
    rng = np.random.default_rng(2026)
    times, duties = commands(rng)
    velocity, dt = wheel_velocity(times, duties)
    stamps = np.cumsum(rng.uniform(1e6, 6e6, 1000)).astype(np.int64)
    stamps = stamps[stamps <= DURATION * 1e9]
    logged = np.interp(stamps, np.arange(velocity.size) * dt, velocity)
    logged += rng.normal(0.0, NOISE, logged.size)

    store = get_typestore(Stores.ROS2_JAZZY)
    JointState, Float64 = (store.types["sensor_msgs/msg/JointState"],
                           store.types["std_msgs/msg/Float64"])
    Header, Time = store.types["std_msgs/msg/Header"], store.types["builtin_interfaces/msg/Time"]
    if output.exists():
        shutil.rmtree(output)
    rows = []
    with Writer(output, version=9, storage_plugin=StoragePlugin.MCAP) as writer:
        duty = writer.add_connection("/motor/duty", Float64.__msgtype__, typestore=store)
        states = writer.add_connection("/joint_states", JointState.__msgtype__, typestore=store)
        for t, value in zip(times.tolist(), duties.tolist()):
            rows.append((EPOCH + t, duty, Float64(data=value)))
        for t, v in zip(stamps.tolist(), logged.tolist()):
            stamp = EPOCH + t
            header = Header(stamp=Time(sec=stamp // 10**9, nanosec=stamp % 10**9),
                            frame_id="")
            rows.append((stamp + 300_000, states,  # received 0.3 ms after its stamp
                         JointState(header=header, name=["wheel_joint"], position=np.zeros(1),
                                    velocity=np.array([v]), effort=np.zeros(1))))
        for t, connection, message in sorted(rows, key=lambda row: row[0]):
            writer.write(connection, t, store.serialize_cdr(message, connection.msgtype))
    print(f"wrote {output} ({len(times)} commands, {stamps.size} joint states)")


if __name__ == "__main__":
    main()
