"""The lab's Franka formats written by Fibril (franka-sysid-data-format.md): the sim CSV +
sidecar of every validation episode (``--write-sim-csv``), read back by a reader written from
the document's column table, and ``sysid_best_params.json`` (``--output-sysid-params`` and
``sysid_export``), the inverse of ``sysid_import``, round-trip tested; ``metrics.json`` names
both."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import Any

import mujoco
import numpy as np
import pytest
import yaml
from fibril_calibration.sysid_export import main as export_main
from fibril_calibration.sysid_import import main as import_main
from fibril_sim_core.cli import main

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "config" / "examples" / "panda"
JOINTS = [f"joint{n}" for n in range(1, 8)]
MOTORS = ["ee_x", "ee_y", "ee_z", "ee_rx", "ee_ry", "ee_rz"]

# The data-format document's sim CSV table, group by group, in its order.
SPEC_SIM_COLUMNS = (
    ["t_s"]
    + [f"q{i}" for i in range(1, 8)] + [f"dq{i}" for i in range(1, 8)]  # q1..q7, dq1..dq7
    + ["x_x", "x_y", "x_z"] + ["dx_x", "dx_y", "dx_z"]  # x_, dx_
    + ["quat_x", "quat_y", "quat_z", "quat_w"] + ["wx", "wy", "wz"]  # quat_* (xyzw), w
    + ["x_des_x", "x_des_y", "x_des_z"] + ["dx_des_x", "dx_des_y", "dx_des_z"]
    + ["quat_des_x", "quat_des_y", "quat_des_z", "quat_des_w"]  # target (copied)
    + ["e_x", "e_y", "e_z", "e_ox", "e_oy", "e_oz"])  # task-space error
# The real sidecar's summary block (the sim sidecar has "the same summary block").
SPEC_SUMMARY = {"ticks", "err_pos_rms_xyz", "err_pos_abs_max_xyz", "err_pos_inf_max",
                "err_ori_rms_rad", "err_ori_max_rad", "tau_J_abs_max_nm", "tau_J_limit_frac",
                "tau_cmd_abs_max_nm"}
# The document's sysid_best_params.json example, with numbers in its shapes (7 joints, 29).
SPEC_SYSID = {
    "best_score": 0.002247,
    "best_params_raw": [0.16, 0.19, 0.13, 0.15, 0.06, 0.07, 0.05,
                        0.5, 0.6, 0.4, 0.45, 0.2, 0.25, 0.1,
                        0.9, 0.8, 0.75, 0.8, 0.9, 0.6, 0.5,
                        1.2, 1.5, 0.9, 1.1, 0.4, 0.5, 0.3, 1],
    "best_params_decoded": {
        "armature": [0.16, 0.19, 0.13, 0.15, 0.06, 0.07, 0.05],
        "mu_static": [0.5, 0.6, 0.4, 0.45, 0.2, 0.25, 0.1],
        "dynamic_ratio": [0.9, 0.8, 0.75, 0.8, 0.9, 0.6, 0.5],
        "mu_dynamic": [0.45, 0.48, 0.3, 0.36, 0.18, 0.15, 0.05],
        "mu_viscous": [1.2, 1.5, 0.9, 1.1, 0.4, 0.5, 0.3],
        "motor_delay_steps": 1},
    "history": [{"iter": 1, "min": 0.01, "mean": 0.02, "best": 0.01, "iter_s": 1.0,
                 "ms_per_tick": 0.1, "eta_s": 10.0, "per_traj_min": [0.01],
                 "best_candidate_weighted": [0.01]}],
    "bounds": [[0.0, 1.0]] * 29,
    "args": {"popsize": 16},
    "source": {"trajectories": [{"real_csv": "a.csv", "real_sidecar": "a.json",
                                 "num_samples": 8000, "weight": 1.0,
                                 "gains": {"kp_pos": 500, "kp_ori": 30, "kd_pos": 44.7,
                                           "kd_ori": 10.95}}],
               "num_trajectories": 1, "time_base": "zoh_1khz_ticks_per_csv_row",
               "warmup_steps": 50}}


def read_sim_csv(path: Path) -> dict[str, np.ndarray]:
    """A reader written from the document's table: the header must be the table's columns
    in its order; every cell a float (``nan`` allowed)."""
    with path.open(newline="") as handle:
        rows = list(csv.reader(handle))
    assert rows[0] == SPEC_SIM_COLUMNS
    values = np.array([[float(cell) for cell in row] for row in rows[1:]])
    return {name: values[:, i] for i, name in enumerate(rows[0])}


def read_real_csv(path: Path) -> dict[str, np.ndarray]:
    with path.open(newline="") as handle:
        rows = list(csv.reader(handle))
    values = np.array([[float(cell) for cell in row] for row in rows[1:]])
    return {name: values[:, i] for i, name in enumerate(rows[0])}


def _request(tmp_path: Path, parameters: int | None = None) -> Path:
    """The closed-loop example request, paths absolute; ``parameters``: keep the first few
    dampings only and a two-iteration fit (a short test)."""
    doc = yaml.safe_load((EXAMPLE / "calibration-closed-loop.yaml").read_text())
    doc["manifest"] = str(EXAMPLE / doc["manifest"])
    for source in doc["sources"].values():
        source["path"] = str(EXAMPLE / source["path"])
    if parameters is not None:
        doc["parameters"] = [p for p in doc["parameters"]
                             if p["id"].startswith("damping_")][:parameters]
        doc["training"] = doc["training"][:1]
        doc["optimizer"]["max_iterations"] = 2
        doc["analysis"] = {"information_matrix": False}
        doc["execution"] = {"max_parallelism": 1}
        doc.pop("fit", None)
    path = tmp_path / "request.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def _check_sim_files(csv_path: Path, sidecar_path: Path, metrics: dict[str, Any],
                     parameter_set: str) -> dict[str, np.ndarray]:
    real = read_real_csv(EXAMPLE / "calibration_data" / "loop-03.csv")
    sim = read_sim_csv(csv_path)
    # the real CSV's time base: row k <-> t_s[k]
    np.testing.assert_array_equal(sim["t_s"], real["t_s"])
    # row 0: the state before any target acted (the logged q_init, at rest)
    sidecar = json.loads(sidecar_path.read_text())
    np.testing.assert_allclose([sim[f"q{i}"][0] for i in range(1, 8)], sidecar["q_init"])
    # targets copied, errors are target minus state, quaternions unit (xyzw)
    for name in SPEC_SIM_COLUMNS:
        if name.startswith(("x_des_", "dx_des_", "quat_des_")):
            np.testing.assert_array_equal(sim[name], real[name])
    for axis in "xyz":
        np.testing.assert_allclose(sim[f"e_{axis}"], sim[f"x_des_{axis}"] - sim[f"x_{axis}"],
                                   atol=1e-15)
    norms = np.sqrt(sum(sim[f"quat_{c}"] ** 2 for c in "xyzw"))
    np.testing.assert_allclose(norms, 1.0, atol=1e-12)
    # the same rollout the scores come from: metrics.json's joint errors from this file
    rmse = [math.sqrt(float(np.mean((sim[f"q{i}"] - real[f"q{i}"]) ** 2))) for i in range(1, 8)]
    np.testing.assert_allclose(metrics["joints"]["pos_rmse_rad"], rmse, rtol=1e-9)
    assert metrics["sim_csv"] == str(csv_path)
    assert metrics["sim_sidecar"] == str(sidecar_path)
    # the sim sidecar: replay arguments, applied parameters, the same summary block
    assert sidecar["schema_version"] == 2
    assert sidecar["csv_path"] == str(csv_path) and sidecar["sidecar_path"] == str(sidecar_path)
    assert sidecar["args"]["episode"] == "loop-03"
    assert sidecar["args"]["parameter_set"] == parameter_set
    assert sidecar["args"]["ee"] == "attachment_site" and sidecar["args"]["joints"] == JOINTS
    assert set(sidecar["summary"]) == SPEC_SUMMARY
    assert sidecar["summary"]["ticks"] == len(sim["t_s"])
    errors = np.column_stack([sim[f"e_{a}"] for a in "xyz"])
    np.testing.assert_allclose(sidecar["summary"]["err_pos_rms_xyz"],
                               np.sqrt(np.mean(errors ** 2, axis=0)), rtol=1e-12)
    return sim


def test_evaluate_writes_the_sim_csv_of_every_validation_episode(tmp_path: Path) -> None:
    request = _request(tmp_path)
    code = main(["calibrate", str(request), "--quiet", "--evaluate", "nominal",
                 "--metrics", str(tmp_path / "m"), "--write-sim-csv", str(tmp_path / "s"),
                 "--output", str(tmp_path / "scores.json")])
    assert code == 0
    scores = json.loads((tmp_path / "scores.json").read_text())
    assert scores["episode_seeds"] == {"loop-01": 0, "loop-02": 0, "loop-03": 0}
    folder = tmp_path / "s" / "nominal" / "loop-03"
    assert sorted(p.name for p in folder.iterdir()) == ["loop-03_sim.csv", "loop-03_sim.json"]
    metrics = json.loads((tmp_path / "m" / "nominal" / "loop-03" / "metrics.json").read_text())
    _check_sim_files(folder / "loop-03_sim.csv", folder / "loop-03_sim.json", metrics,
                     "nominal")
    sidecar = json.loads((folder / "loop-03_sim.json").read_text())
    assert sidecar["applied_params"]["values"]["damping_joint1"] == 1.0
    assert metrics["sysid_params"] is None  # not from a lab file
    assert metrics["episode_seed"] == 0 and sidecar["args"]["episode_seed"] == 0


def test_fit_writes_sim_csv_and_sysid_best_params(tmp_path: Path) -> None:
    request = _request(tmp_path, parameters=2)
    sysid = tmp_path / "sysid_best_params.json"
    code = main(["calibrate", str(request), "--quiet", "--output", str(tmp_path / "r.json"),
                 "--metrics", str(tmp_path / "m"), "--write-sim-csv", str(tmp_path / "s"),
                 "--output-sysid-params", str(sysid)])
    assert code == 0
    result = json.loads((tmp_path / "r.json").read_text())
    fitted = result["fitted_parameters"]
    folder = tmp_path / "s" / "loop-03"
    metrics = json.loads((tmp_path / "m" / "loop-03" / "metrics.json").read_text())
    _check_sim_files(folder / "loop-03_sim.csv", folder / "loop-03_sim.json", metrics, "fitted")
    sidecar = json.loads((folder / "loop-03_sim.json").read_text())
    assert sidecar["applied_params"]["values"] == fitted
    assert metrics["sysid_params"] == str(sysid)
    lab = json.loads(sysid.read_text())
    assert set(lab) == set(SPEC_SYSID)
    decoded = lab["best_params_decoded"]
    assert list(decoded) == list(SPEC_SYSID["best_params_decoded"])
    assert decoded["mu_viscous"][:2] == [fitted["damping_joint1"], fitted["damping_joint2"]]
    assert decoded["mu_viscous"][2:] == [1.0] * 5  # held at the model's value
    assert len(lab["best_params_raw"]) == 29 and len(lab["bounds"]) == 29
    assert lab["bounds"][21] == [0.05, 10.0] and lab["bounds"][23] == [1.0, 1.0]
    assert lab["best_score"] == pytest.approx(result["optimizer"]["final_objective"])
    trajectory = lab["source"]["trajectories"][0]
    assert trajectory["real_csv"].endswith("loop-01.csv")
    assert trajectory["gains"] == {"kp_pos": 500, "kp_ori": 30, "kd_pos": 44.7, "kd_ori": 10.95}


def test_sysid_best_params_round_trip(tmp_path: Path) -> None:
    """The document's example → sysid_import → an overlay on the Panda manifest →
    sysid_export: the same decoded parameters and raw vector, through the compiled model."""
    lab = tmp_path / "sysid_best_params.json"
    lab.write_text(json.dumps(SPEC_SYSID))
    overlay = tmp_path / "overlay.json"
    assert import_main([str(lab), "--joints", ",".join(JOINTS), "--motors", ",".join(MOTORS),
                        "--output", str(overlay)]) == 0
    back = tmp_path / "back.json"
    assert export_main([str(overlay), "--manifest", str(EXAMPLE / "panda_impedance.yaml"),
                        "--joints", ",".join(JOINTS), "--motors", ",".join(MOTORS),
                        "--output", str(back)]) == 0
    document = json.loads(back.read_text())
    assert document["best_params_decoded"] == SPEC_SYSID["best_params_decoded"]
    assert document["best_params_raw"] == SPEC_SYSID["best_params_raw"]
    assert set(document) == set(SPEC_SYSID)
    # ... and back again: the second import is the first one
    again = tmp_path / "again.json"
    assert import_main([str(back), "--joints", ",".join(JOINTS), "--motors", ",".join(MOTORS),
                        "--output", str(again)]) == 0
    first, second = json.loads(overlay.read_text()), json.loads(again.read_text())
    def values(document: dict) -> list:
        return [{k: v for k, v in p.items() if k != "provenance"} for p in document["parameters"]]

    assert values(first) == values(second)
    assert document["best_score"] == SPEC_SYSID["best_score"]  # kept by the import
    # Without an imported static level: one MuJoCo friction level, static = dynamic.
    plain = tmp_path / "plain.json"
    assert export_main(["--manifest", str(EXAMPLE / "panda_impedance.yaml"), "--joints",
                        ",".join(JOINTS), "--output", str(plain)]) == 0
    decoded = json.loads(plain.read_text())["best_params_decoded"]
    assert decoded["mu_static"] == decoded["mu_dynamic"]
    assert decoded["dynamic_ratio"] == [1.0] * 7 and decoded["motor_delay_steps"] is None


def test_evaluating_an_imported_lab_file_names_it_in_metrics(tmp_path: Path) -> None:
    lab = tmp_path / "sysid_best_params.json"
    lab.write_text(json.dumps(SPEC_SYSID))
    overlay = tmp_path / "lab-fit.json"
    assert import_main([str(lab), "--joints", ",".join(JOINTS), "--output", str(overlay)]) == 0
    request = _request(tmp_path)
    assert main(["calibrate", str(request), "--quiet", "--evaluate", str(overlay),
                 "--metrics", str(tmp_path / "m")]) == 0
    metrics = json.loads((tmp_path / "m" / "lab-fit" / "loop-03" / "metrics.json").read_text())
    assert metrics["sysid_params"] == str(lab)
    assert metrics["sim_csv"] is None  # no --write-sim-csv


def test_lab_output_mistakes_are_one_line_errors(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    request = _request(tmp_path)
    assert main(["calibrate", str(request), "--quiet", "--evaluate", "nominal",
                 "--sim-csv-ee", "attachment_site"]) == 2
    assert "--sim-csv-ee" in capsys.readouterr().err
    assert main(["calibrate", str(request), "--quiet", "--evaluate", "nominal",
                 "--write-sim-csv", str(tmp_path / "s"), "--sim-csv-ee", "no_such_site"]) == 2
    err = capsys.readouterr().err
    assert "no_such_site" in err and err.count("\n") == 1
    assert not (tmp_path / "s").exists()  # nothing half-written
    assert main(["calibrate", str(request), "--quiet", "--evaluate", "nominal",
                 "--output-sysid-params", str(tmp_path / "x.json")]) == 2
    assert "does not fit" in capsys.readouterr().err
    drivetrain = REPO / "config" / "examples" / "drivetrain" / "calibration.yaml"
    assert main(["calibrate", str(drivetrain), "--quiet", "--evaluate", "nominal",
                 "--write-sim-csv", str(tmp_path / "d")]) == 2
    err = capsys.readouterr().err
    assert "not from a franka_sysid recording" in err and err.count("\n") == 1


def _raw_rollout(real: dict[str, np.ndarray], sidecar: dict[str, Any], values: dict[str, float],
                 rows: list[int]) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """(q, dq) at each of ``rows``, by MuJoCo alone from the MJCF: start at q_init at rest,
    then hold row j's target (position, and orientation as the rotation vector from the
    anchor: the site actuators' setpoints) for the ticks from t_s[j] to t_s[j+1]."""
    model = mujoco.MjModel.from_xml_path(str(EXAMPLE / "model" / "panda_impedance.xml"))
    for pid, value in values.items():  # the request's overlay targets, set by hand
        kind, joint = pid.split("_joint")
        dof = model.jnt_dofadr[model.joint(f"joint{joint}").id]
        getattr(model, f"dof_{kind}")[dof] = value
    data = mujoco.MjData(model)
    qadr = [model.jnt_qposadr[model.joint(j).id] for j in JOINTS]
    dadr = [model.jnt_dofadr[model.joint(j).id] for j in JOINTS]
    data.qpos[qadr] = sidecar["q_init"]
    ax, ay, az, aw = sidecar["q_anchor_xyzw"]
    anchor_inverse = np.empty(4)
    mujoco.mju_negQuat(anchor_inverse, np.array([aw, ax, ay, az]))
    actuators = [model.actuator(name).id for name in MOTORS]
    dt = model.opt.timestep
    out: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    for k in range(max(rows) + 1):
        if k in rows:
            out[k] = (data.qpos[qadr].copy(), data.qvel[dadr].copy())
        if k + 1 >= len(real["t_s"]):
            break
        relative, rotvec = np.empty(4), np.empty(3)
        target = np.array([real[f"quat_des_{c}"][k] for c in "wxyz"])
        mujoco.mju_mulQuat(relative, anchor_inverse, target)
        mujoco.mju_quat2Vel(rotvec, relative, 1.0)
        data.ctrl[actuators] = [*(real[f"x_des_{c}"][k] for c in "xyz"), *rotvec]
        for _ in range(round((real["t_s"][k + 1] - real["t_s"][k]) / dt)):
            mujoco.mj_step(model, data)
    return out


def test_sim_csv_row_k_is_the_state_under_target_k_minus_1(tmp_path: Path) -> None:
    """The document's time base, checked directly: row k's joint state is MuJoCo's after the
    targets of rows 0..k-1 each held for one row period (row k's own target not yet acting),
    here by a rollout of the MJCF that shares nothing with Fibril's replay."""
    request = _request(tmp_path)
    assert main(["calibrate", str(request), "--quiet", "--evaluate", "nominal",
                 "--write-sim-csv", str(tmp_path / "s")]) == 0
    folder = tmp_path / "s" / "nominal" / "loop-03"
    sim = read_sim_csv(folder / "loop-03_sim.csv")
    sidecar = json.loads((folder / "loop-03_sim.json").read_text())
    real = read_real_csv(EXAMPLE / "calibration_data" / "loop-03.csv")
    real_sidecar = json.loads((EXAMPLE / "calibration_data" / "loop-03.json").read_text())
    nominal = {p["id"]: p["nominal"] for p in yaml.safe_load(request.read_text())["parameters"]}
    assert sidecar["applied_params"]["values"] == nominal
    last = len(sim["t_s"]) - 1
    rows = [0, 1, 2, 7, 50, last]
    expected = _raw_rollout(real, real_sidecar, nominal, rows)
    for k in rows:
        q, dq = expected[k]
        np.testing.assert_allclose([sim[f"q{i}"][k] for i in range(1, 8)], q, rtol=0,
                                   atol=1e-10, err_msg=f"row {k}")
        np.testing.assert_allclose([sim[f"dq{i}"][k] for i in range(1, 8)], dq, rtol=0,
                                   atol=1e-8, err_msg=f"row {k}")
    # ... and not the state under target k (one row period more) nor under target k-2: the
    # check tells the neighbouring conventions apart.
    q_late = _raw_rollout(real, real_sidecar, nominal, [51])[51][0]
    q_early = _raw_rollout(real, real_sidecar, nominal, [49])[49][0]
    row = np.array([sim[f"q{i}"][50] for i in range(1, 8)])
    assert np.max(np.abs(row - q_late)) > 1e-6 and np.max(np.abs(row - q_early)) > 1e-6
