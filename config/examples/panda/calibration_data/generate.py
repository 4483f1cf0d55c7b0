"""Generate the synthetic Panda runs of ``../calibration.yaml`` in the lab's seed-002 layout.

    python config/examples/panda/calibration_data/generate.py

Each run is a 1 kHz ring log (``<run>.csv`` with ``seq``, and the sidecar ``<run>.json``, see
the data-format document) of the mesh-free arm (``../panda.yaml``) with the TRUE per-joint
armature, frictionloss and damping below applied as typed overlays. A joint-space PD
controller tracks a multi-sine around the home pose (different tones per run); the logged
``tau1..tau7`` are its commanded torques (gravity excluded: the bodies are gravity
compensated), committed at each tick, ``q``/``dq`` the state at that tick plus Gaussian
measurement noise (``Q_SD`` rad, ``DQ_SD`` rad/s). ``tau_J*`` is NaN (as from a daemon before
shm v3) and the EE pose columns come from ``attachment_site`` (quaternions xyzw).

Calibration replays the torques open loop, so at the truth the residual is exactly the noise
(plus what the noisy window-start states add).
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import mujoco
import numpy as np
from fibril_sim_core.overlays import MujocoTarget, OverlayParameter

from fibril_sim_core import SimulationBuilder

HERE = Path(__file__).resolve().parent
MANIFEST = HERE.parent / "panda.yaml"
JOINTS = tuple(f"joint{i}" for i in range(1, 8))
TRUTH = {
    "armature": (0.16, 0.19, 0.13, 0.15, 0.06, 0.07, 0.05),
    "frictionloss": (0.45, 0.5, 0.3, 0.35, 0.15, 0.12, 0.1),
    "damping": (1.8, 1.6, 1.2, 1.4, 0.6, 0.5, 0.4),
}
KINDS = {"armature": "joint_armature", "frictionloss": "joint_frictionloss",
         "damping": "joint_damping"}
HOME = np.array([0.0, -0.3, 0.0, -2.0, 0.0, 1.8, 0.8])
KP = np.array([120.0, 120.0, 100.0, 100.0, 40.0, 40.0, 20.0])
KD = np.array([8.0, 8.0, 6.0, 6.0, 2.5, 2.5, 1.2])
AMPLITUDE = np.array([0.5, 0.35, 0.5, 0.4, 0.7, 0.5, 0.8])
Q_SD = 1e-4
DQ_SD = 2e-3
SEQ_FIRST = 120_000
DURATION = 2.5
NOISE_SEED = 20261201
# run → (tone frequencies in Hz per joint are base · (1, 1.7, 2.9), base per run), phase seed
RUNS = {"run-01": (0.5, 1), "run-02": (0.7, 2), "run-03": (0.6, 3)}


def truth_overlays() -> tuple[OverlayParameter, ...]:
    return tuple(OverlayParameter(f"{kind}_{joint}", value, (MujocoTarget(KINDS[kind], joint),))
                 for kind, values in TRUTH.items() for joint, value in zip(JOINTS, values))


def run(model: mujoco.MjModel, base_hz: float, seed: int) -> dict[str, np.ndarray]:
    """The true closed-loop run: per tick state, commanded torque and EE pose."""
    rng = np.random.default_rng(seed)
    ticks = int(DURATION * 1000)
    t = np.arange(ticks) / 1000.0
    phases = rng.uniform(0, 2 * np.pi, (3, 7))
    tones = np.array([1.0, 1.7, 2.9]) * base_hz
    ramp = np.minimum(1.0, t / 0.3)[:, None]
    target = HOME + ramp * AMPLITUDE * sum(
        np.sin(2 * np.pi * f * t[:, None] + phases[i]) / 3 for i, f in enumerate(tones))
    velocity = np.gradient(target, 1e-3, axis=0)
    data = mujoco.MjData(model)
    data.qpos[:] = HOME
    mujoco.mj_forward(model, data)
    site = model.site("attachment_site").id
    low, high = model.actuator_ctrlrange[:, 0], model.actuator_ctrlrange[:, 1]
    out = {k: np.empty((ticks, n)) for k, n in (("q", 7), ("dq", 7), ("tau", 7), ("x", 3),
                                                ("quat", 4))}
    for k in range(ticks):
        out["q"][k], out["dq"][k] = data.qpos, data.qvel
        out["x"][k] = data.site_xpos[site]
        wxyz = np.empty(4)
        mujoco.mju_mat2Quat(wxyz, data.site_xmat[site])
        out["quat"][k] = wxyz[[1, 2, 3, 0]]  # the lab's logs are xyzw
        tau = np.clip(KP * (target[k] - data.qpos) + KD * (velocity[k] - data.qvel), low, high)
        out["tau"][k] = tau
        data.ctrl[:] = tau
        mujoco.mj_step(model, data)
    return out


def write_run(name: str, logged: dict[str, np.ndarray], rng: np.random.Generator) -> None:
    ticks = logged["q"].shape[0]
    q = logged["q"] + rng.normal(0, Q_SD, logged["q"].shape)
    dq = logged["dq"] + rng.normal(0, DQ_SD, logged["dq"].shape)
    header = (["t_s", "period_ms"] + [f"q{i}" for i in range(1, 8)]
              + [f"dq{i}" for i in range(1, 8)] + ["x_x", "x_y", "x_z"]
              + [f"quat_{c}" for c in "xyzw"] + [f"x_des_{c}" for c in "xyz"]
              + [f"dx_des_{c}" for c in "xyz"] + [f"quat_des_{c}" for c in "xyzw"]
              + [f"tau{i}" for i in range(1, 8)] + [f"tau_J{i}" for i in range(1, 8)]
              + ["seq", "target_idx"])
    with (HERE / f"{name}.csv").open("w", newline="", encoding="utf-8") as out:
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(header)
        for k in range(ticks):
            pose = [*logged["x"][k], *logged["quat"][k]]
            writer.writerow([f"{k / 1000:.3f}", "1.000", *(f"{v:.8g}" for v in q[k]),
                             *(f"{v:.8g}" for v in dq[k]), *(f"{v:.8g}" for v in pose[:3]),
                             *(f"{v:.8g}" for v in pose[3:]), *(f"{v:.8g}" for v in pose[:3]),
                             "0", "0", "0", *(f"{v:.8g}" for v in pose[3:]),
                             *(f"{v:.9g}" for v in logged["tau"][k]), *(["nan"] * 7),
                             SEQ_FIRST + k, k // 20])
    sidecar = {
        "schema_version": 2, "controller": "synthetic_joint_pd_multisine",
        "csv_path": f"{name}.csv", "sidecar_path": f"{name}.json", "control_rate_hz": 1000.0,
        "duration_s": DURATION, "num_samples": ticks, "q_init": HOME.tolist(),
        "args": {"kp_joint": KP.tolist(), "kd_joint": KD.tolist(), "duration": DURATION},
        "abort": {"code": 0, "name": "none", "value": 0.0, "time_s": 0.0},
        "ring_log": {"path": f"{name}.csv", "targets_path": None, "num_frames": ticks,
                     "seq_start": SEQ_FIRST, "seq_first": SEQ_FIRST,
                     "seq_last": SEQ_FIRST + ticks - 1, "duration_s": DURATION,
                     "num_targets": 0, "gaps": [], "dropped_frames": 0, "resets": 0,
                     "poll_hz": 100.0, "log_id": 1},
        "truth": {"note": "generated by generate.py; not part of the lab's format", **TRUTH},
    }
    (HERE / f"{name}.json").write_text(json.dumps(sidecar, indent=1) + "\n")


def main() -> None:
    plan = SimulationBuilder().build(MANIFEST, overlays=truth_overlays())
    rng = np.random.default_rng(NOISE_SEED)
    for name, (base, seed) in RUNS.items():
        logged = run(plan.model, base, seed)
        write_run(name, logged, rng)
        span = logged["q"].max(axis=0) - logged["q"].min(axis=0)
        print(f"{name}: {logged['q'].shape[0]} rows; joint motion {np.round(span, 2).tolist()} "
              f"rad; |tau| max {np.round(np.abs(logged['tau']).max(axis=0), 1).tolist()}")


if __name__ == "__main__":
    main()
