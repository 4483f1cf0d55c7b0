"""Generate the closed-loop Panda runs of ``../calibration-closed-loop.yaml`` (seed-002 50 Hz
layout: ``loop-NN.csv`` + ``loop-NN.json``).

    python config/examples/panda/calibration_data/generate_closed_loop.py

The arm (``../panda_impedance.yaml``: Cartesian impedance from MuJoCo site actuators with the
lab's default gains) carries the TRUE armature / frictionloss / damping of ``generate.py``. The
client sends a Cartesian target every 20 ms (multi-sine around the anchor pose, different tones
per run), held until the next one; row k of the CSV is the state just after target k was sent
(the lab's convention), ``q``/``dq`` with Gaussian noise, targets exact, ``tau1..7`` the
commanded impedance torque (actuator torque without the gravity compensation). The sidecar
gives ``q_init`` (the run starts at rest there), ``x_anchor``, ``q_anchor_xyzw`` and the gains.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import generate
import mujoco
import numpy as np
from fibril_calibration.alignment import quat_error

from fibril_sim_core import SimulationBuilder

HERE = Path(__file__).resolve().parent
MANIFEST = HERE.parent / "panda_impedance.yaml"
RATE = 50.0
DURATION = 4.0
AMP_POS = np.array([0.08, 0.08, 0.06])
AMP_ROT = np.array([0.3, 0.25, 0.35])
RUNS = {"loop-01": (0.4, 11), "loop-02": (0.55, 12), "loop-03": (0.47, 13)}
NOISE_SEED = 20261202


def _exp(rotvec: np.ndarray) -> np.ndarray:
    quat = np.empty(4)
    mujoco.mju_axisAngle2Quat(quat, rotvec / max(np.linalg.norm(rotvec), 1e-300),
                              float(np.linalg.norm(rotvec)))
    return quat


def run(model: mujoco.MjModel, base_hz: float, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    rows = int(DURATION * RATE)
    steps = round(1000 / RATE)
    data = mujoco.MjData(model)
    data.qpos[:] = generate.HOME
    mujoco.mj_forward(model, data)
    site = model.site("attachment_site").id
    anchor_pos = data.site_xpos[site].copy()
    anchor = np.empty(4)
    mujoco.mju_mat2Quat(anchor, data.site_xmat[site])
    phases = rng.uniform(0, 2 * np.pi, (3, 6))
    tones = np.array([1.0, 1.6, 2.7]) * base_hz
    out: dict[str, list] = {k: [] for k in ("q", "dq", "x", "quat", "x_des", "quat_des",
                                            "tau")}
    for k in range(rows):
        t = k / RATE
        ramp = min(1.0, t / 0.5)
        wave = sum(np.sin(2 * np.pi * f * t + phases[i]) for i, f in enumerate(tones)) / 3
        x_des = anchor_pos + ramp * AMP_POS * wave[:3]
        q_des = np.empty(4)
        mujoco.mju_mulQuat(q_des, anchor, _exp(ramp * AMP_ROT * wave[3:]))
        q_des_xyzw = [float(v) for v in q_des[[1, 2, 3, 0]]]
        # the setpoints exactly as calibration reads them back from the CSV and sidecar
        wxyz = np.array([q_des_xyzw[3], *q_des_xyzw[:3]])
        rotvec = quat_error(wxyz[None, :], anchor[None, :])[0]
        data.ctrl[:3] = x_des
        data.ctrl[3:] = rotvec
        mujoco.mj_forward(model, data)  # row k: the state as target k is sent
        pose = np.empty(4)
        mujoco.mju_mat2Quat(pose, data.site_xmat[site])
        out["q"].append(data.qpos.copy())
        out["dq"].append(data.qvel.copy())
        out["x"].append(data.site_xpos[site].copy())
        out["quat"].append(pose[[1, 2, 3, 0]])
        out["x_des"].append(x_des)
        out["quat_des"].append(q_des_xyzw)
        out["tau"].append(data.qfrc_actuator - data.qfrc_gravcomp)
        for _ in range(steps):
            mujoco.mj_step(model, data)
    result = {k: np.array(v) for k, v in out.items()}
    result["anchor_pos"], result["anchor_xyzw"] = anchor_pos, anchor[[1, 2, 3, 0]]
    return result


def write(name: str, logged: dict[str, np.ndarray], rng: np.random.Generator) -> None:
    rows = logged["q"].shape[0]
    q = logged["q"] + rng.normal(0, generate.Q_SD, logged["q"].shape)
    dq = logged["dq"] + rng.normal(0, generate.DQ_SD, logged["dq"].shape)
    header = (["t_s", "period_ms"] + [f"q{i}" for i in range(1, 8)]
              + [f"dq{i}" for i in range(1, 8)] + ["x_x", "x_y", "x_z"]
              + [f"quat_{c}" for c in "xyzw"] + [f"x_des_{c}" for c in "xyz"]
              + [f"dx_des_{c}" for c in "xyz"] + [f"quat_des_{c}" for c in "xyzw"]
              + [f"tau{i}" for i in range(1, 8)] + [f"tau_J{i}" for i in range(1, 8)])
    velocity = np.gradient(logged["x_des"], 1 / RATE, axis=0)
    with (HERE / f"{name}.csv").open("w", newline="", encoding="utf-8") as out:
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(header)
        for k in range(rows):
            writer.writerow([f"{k / RATE:.2f}", f"{1000 / RATE:.3f}",
                             *(f"{v:.8g}" for v in q[k]), *(f"{v:.8g}" for v in dq[k]),
                             *(f"{v:.8g}" for v in logged["x"][k]),
                             *(f"{v:.8g}" for v in logged["quat"][k]),
                             *(repr(float(v)) for v in logged["x_des"][k]),
                             *(f"{v:.8g}" for v in velocity[k]),
                             *(repr(float(v)) for v in logged["quat_des"][k]),
                             *(f"{v:.8g}" for v in logged["tau"][k]), *(["nan"] * 7)])
    sidecar = {
        "schema_version": 2, "controller": "synthetic_cartesian_multisine",
        "csv_path": f"{name}.csv", "sidecar_path": f"{name}.json", "control_rate_hz": RATE,
        "duration_s": DURATION, "num_samples": rows, "q_init": list(generate.HOME),
        "x_anchor": logged["anchor_pos"].tolist(),
        "q_anchor_xyzw": logged["anchor_xyzw"].tolist(),
        "args": {"kp_pos": 500, "kp_ori": 30, "kd_pos": 44.7, "kd_ori": 10.95,
                 "duration": DURATION, "rate": RATE, "mode": "multisine"},
        "abort": {"code": 0, "name": "none", "value": 0.0, "time_s": 0.0},
        "ring_log": None,
        "truth": {"note": "generated by generate_closed_loop.py; not part of the lab's format",
                  **generate.TRUTH},
    }
    (HERE / f"{name}.json").write_text(json.dumps(sidecar, indent=1) + "\n")


def main() -> None:
    plan = SimulationBuilder().build(MANIFEST, overlays=generate.truth_overlays())
    rng = np.random.default_rng(NOISE_SEED)
    for name, (base, seed) in RUNS.items():
        logged = run(plan.model, base, seed)
        write(name, logged, rng)
        span = logged["q"].max(axis=0) - logged["q"].min(axis=0)
        print(f"{name}: {logged['q'].shape[0]} rows; joint motion "
              f"{np.round(span, 2).tolist()} rad")


if __name__ == "__main__":
    main()
