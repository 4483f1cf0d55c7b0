"""Generate the quadruped-leg logs of ``../calibration.yaml``: a command file and a state file.

    python config/examples/quadruped_leg/calibration_data/generate.py

A legged robot's driver logs each topic to its own CSV, as these do:

* ``command.csv``: ``time_ns, hip_target, knee_target``: the position targets the locomotion
  controller sent at ~500 Hz (jittered), stamped in ns since the epoch (19 digits);
* ``state.csv``: ``time_ns, q_hip, q_knee, dq_hip, dq_knee, tau_hip, tau_knee``: the joint
  state and the servo torque the driver reports, at 1 kHz, on the same clock, with Gaussian
  measurement noise (``Q_SD``, ``DQ_SD``, ``TAU_SD``).

The "robot" is ``../leg.yaml`` with the TRUE servo gains (kp, kv) and joint damping below,
applied as typed overlays; the targets (a stand pose plus a multi-sine swing and a few steps,
as a gait's swing phase) are replayed through the simulator's own position endpoints, each
committed at the first physics tick at or after its stamp, so a calibration replaying the
command file at the truth reproduces the state file up to its noise.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
from fibril_sim_core.overlays import MujocoTarget, OverlayParameter
from fibril_sim_core.records import IngressRecord, StateSnapshot

from fibril_sim_core import SimulationBuilder

HERE = Path(__file__).resolve().parent
MANIFEST = HERE.parent / "leg.yaml"
JOINTS = ("hip", "knee")
TRUTH = {"kp_hip": 24.0, "kp_knee": 17.0, "kv_hip": 0.35, "kv_knee": 0.65,
         "damping_hip": 0.08, "damping_knee": 0.14}
STAND = np.array([0.6, -1.2])
DURATION = 12.0  # s
EPOCH = 1_763_146_355_421_617_551  # the log's first stamp (ns since the epoch)
DT = 1_000_000
Q_SD, DQ_SD, TAU_SD = 2e-4, 5e-3, 0.02
PAYLOAD = "fibril_sim/motor_command/v1"


def truth_overlays() -> tuple[OverlayParameter, ...]:
    kinds = {"kp": "actuator_position_kp", "kv": "actuator_position_kv",
             "damping": "joint_damping"}
    out = []
    for name, value in TRUTH.items():
        kind, joint = name.split("_")
        target = f"{joint}_servo" if kind in ("kp", "kv") else joint
        out.append(OverlayParameter(name, value, (MujocoTarget(kinds[kind], target),)))
    return tuple(out)


def targets(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Command stamps (ns after the first) and (n, 2) position targets."""
    times = [0]
    while times[-1] < DURATION * 1e9:
        times.append(times[-1] + 2_000_000 + int(rng.integers(-300_000, 300_000)))
    t = np.array(times[:-1], dtype=np.int64)
    s = t / 1e9
    swing = np.column_stack([0.35 * np.sin(2 * np.pi * 1.1 * s) + 0.15 * np.sin(2 * np.pi * 2.9 * s + 1),
                             0.45 * np.sin(2 * np.pi * 1.1 * s + 0.8) + 0.2 * np.sin(2 * np.pi * 3.7 * s)])
    steps = np.where((s % 3.0) > 1.5, 1.0, 0.0)[:, None] * np.array([0.2, -0.3])
    return t, STAND + swing + steps


def rollout(times: np.ndarray, values: np.ndarray) -> dict[str, np.ndarray]:
    """qpos, qvel and the servo torques at every tick 0..DURATION of the true leg."""
    plan = SimulationBuilder().build(MANIFEST, overlays=truth_overlays())
    records = []
    for n, (t, row) in enumerate(zip(times.tolist(), values.tolist())):
        tick = -(-t // DT)
        for j, joint in enumerate(JOINTS):
            records.append(IngressRecord(0, f"{joint}/position", n + 1, PAYLOAD,
                                         json.dumps({"mode": "position", "value": row[j]}),
                                         True, tick, len(records), "", 0))
    ticks = round(DURATION * 1e9 / DT)
    instance = plan.create_instance(0, snapshot_every=1)
    instance.enqueue_recorded_trace_inputs(records)
    instance.advance(ticks + 1)
    out = {k: np.zeros((ticks + 1, 2)) for k in ("q", "dq", "tau")}
    for snap in instance.poll():
        if isinstance(snap, StateSnapshot) and snap.tick <= ticks:
            out["q"][snap.tick], out["dq"][snap.tick] = snap.qpos[:2], snap.qvel[:2]
            out["tau"][snap.tick] = snap.sensordata[:2]
    return out


def main() -> None:
    rng = np.random.default_rng(24)
    times, values = targets(rng)
    state = rollout(times, values)
    with (HERE / "command.csv").open("w", newline="") as out:
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(["time_ns", "hip_target", "knee_target"])
        for t, row in zip(times.tolist(), values.tolist()):
            writer.writerow([EPOCH + t, *(f"{v:.6f}" for v in row)])
    with (HERE / "state.csv").open("w", newline="") as out:
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(["time_ns", "q_hip", "q_knee", "dq_hip", "dq_knee", "tau_hip",
                         "tau_knee"])
        for tick in range(1, state["q"].shape[0]):  # tick 0: before the first command
            q = state["q"][tick] + rng.normal(0, Q_SD, 2)
            dq = state["dq"][tick] + rng.normal(0, DQ_SD, 2)
            tau = state["tau"][tick] + rng.normal(0, TAU_SD, 2)
            writer.writerow([EPOCH + tick * DT, *(f"{v:.6f}" for v in (*q, *dq, *tau))])
    print(f"wrote {HERE / 'command.csv'} ({times.size} rows) and state.csv "
          f"({state['q'].shape[0] - 1} rows)")


if __name__ == "__main__":
    main()
