"""The Panda example (config/examples/panda/): the mesh-free model keeps the full model's
kinematics and inertials, the committed seed-002 logs replay at the truth to the noise level,
and a reduced fit (the seven dampings, armature and friction held at the truth by a manifest
overlay) recovers the truth on windows. The full 21-parameter request (about 30 s on two cores)
is the slow- and extended-marked test at the end (make test-busy runs it, make test does not):
with the windows' initial states fitted as nuisance (``initial_state_fit``) its residuals are
the noise alone and its 95 % intervals hold the truth.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml
from fibril_calibration.engine import run_calibration
from fibril_calibration.request import load_calibration_request
from fibril_calibration.parameter_sets import evaluate_parameter_sets
from fibril_sim_core.overlays import overlay_document

REPO = Path(__file__).resolve().parents[1].parent
EXAMPLE = REPO / "config" / "examples" / "panda"
sys.path.insert(0, str(EXAMPLE))
sys.path.insert(0, str(EXAMPLE / "calibration_data"))

import generate
import make_model


def test_mesh_free_model_keeps_kinematics_and_inertials(tmp_path: Path) -> None:
    import mujoco

    source = make_model.DEFAULT_SOURCE
    if not (source / "panda_nohand.xml").is_file():
        pytest.skip(f"the Menagerie model is not at {source}")
    target = tmp_path / "model" / "panda_torque.xml"
    make_model.convert(source, target)
    assert target.read_text() == (EXAMPLE / "model" / "panda_torque.xml").read_text()
    assert "Apache License" in (tmp_path / "model" / "LICENSE").read_text()
    full = mujoco.MjModel.from_xml_path(str(source / "panda_nohand.xml"))
    light = mujoco.MjModel.from_xml_path(str(target))
    assert light.nmesh == 0 and light.nu == 7 and light.ngeom > 0
    for field in ("body_pos", "body_quat", "body_mass", "body_inertia", "body_ipos",
                  "body_iquat", "jnt_axis", "jnt_range", "dof_armature", "dof_damping"):
        np.testing.assert_allclose(getattr(light, field), getattr(full, field), err_msg=field)
    assert set(light.actuator_trntype.tolist()) == {0} and light.actuator_gainprm[:, 0].all()


def _truth_overlay(folder: Path, kinds: tuple[str, ...] | None = None) -> Path:
    parameters = [p for p in generate.truth_overlays()
                  if kinds is None or p.id.split("_")[0] in kinds]
    path = folder / "truth.json"
    path.write_text(json.dumps(overlay_document(parameters, id="panda-truth")))
    return path



def _dampings_only(tmp_path: Path, manifest_name: str, request_name: str) -> dict:
    """A copy of the example's manifest with armature and frictionloss held at the truth (an
    overlay), and its request document pointing at that copy."""
    overlay = _truth_overlay(tmp_path, ("armature", "frictionloss"))
    manifest = yaml.safe_load((EXAMPLE / manifest_name).read_text())
    manifest["model"] = str(EXAMPLE / manifest["model"])
    manifest["parameter_overlays"] = [str(overlay)]
    (tmp_path / manifest_name).write_text(yaml.safe_dump(manifest))
    doc = yaml.safe_load((EXAMPLE / request_name).read_text())
    doc["manifest"] = manifest_name
    return doc

def test_logs_replay_at_the_truth_to_the_noise_level(tmp_path: Path) -> None:
    request = load_calibration_request(EXAMPLE / "calibration.yaml")
    assert len(request.parameters) == 21 and len(request.training) == 8
    scored = evaluate_parameter_sets(request, ["nominal", str(_truth_overlay(tmp_path))])
    truth = scored["scores"][str(tmp_path / "truth.json")]
    nominal = scored["scores"]["nominal"]
    # The noise alone: the windows' initial states are fitted (initial_state_fit).
    assert 0.95 < truth["training"]["standardized_rms"] < 1.05
    assert nominal["training"]["standardized_rms"] > 100 * truth["training"]["standardized_rms"]
    first = truth["validation"]["signals"][0]
    assert first["signal"] == "q1" and first["unit"] == "rad" and first["rms"][0] < 1e-3


def test_reduced_fit_recovers_the_dampings(tmp_path: Path) -> None:
    doc = _dampings_only(tmp_path, "panda.yaml", "calibration.yaml")
    doc["parameters"] = [p for p in doc["parameters"] if p["id"].startswith("damping_")]
    for source in doc["sources"].values():
        source["path"] = str(EXAMPLE / source["path"])
    doc["training"] = doc["training"][:1]
    doc["training"][0]["windows"] = [[0.4, 0.9], [1.4, 1.9]]
    del doc["validation"]
    doc.pop("fit")
    doc["execution"] = {"max_parallelism": 1}
    (tmp_path / "calibration.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    result = run_calibration(tmp_path / "calibration.yaml")
    fitted = [result.fitted_values[f"damping_joint{n}"] for n in range(1, 8)]
    np.testing.assert_allclose(fitted, generate.TRUTH["damping"], rtol=0.01)
    assert result.document["likelihood_interpretation_valid"] is True
    per = {p["id"]: p for p in result.document["local_identifiability"]["parameters"]}
    for n, truth in enumerate(generate.TRUTH["damping"], 1):
        sd = per[f"damping_joint{n}"]["standard_deviation"]
        assert abs(result.fitted_values[f"damping_joint{n}"] - truth) < 4 * sd


# extended: make test-busy runs it (CI); make test has test_logs_replay_at_the_truth_to_the_
# noise_level (the shipped 21-parameter request at the truth, windows' initial states fitted),
# test_reduced_fit_recovers_the_dampings (a fit recovers the truth inside its intervals) and
# test_initial_state_fit.py's nuisance degrees of freedom.
@pytest.mark.slow
@pytest.mark.extended
def test_full_example_recovers_the_truth_inside_its_intervals(tmp_path: Path) -> None:
    """The shipped request as a user runs it: 21 parameters on 0.5 s windows with the
    windows' initial states as nuisance. 95 % intervals miss a true value about once in 20, so
    the test asks for all 21 within 3 standard deviations and at least 19 inside the 95 %
    intervals (this data: 19, before and after the review fixes of 2026-12; damping_joint5 lies
    2.25 and armature_joint4 2.09 standard deviations off). With initial_state_fit the verdict
    compares the dof-corrected RMS (112 of 56 112 training degrees of freedom are nuisance)."""
    result = run_calibration(EXAMPLE / "calibration.yaml")
    document = result.document
    assert document["likelihood_interpretation_valid"] is True
    assert document["fit"]["verdict"] == "plausible_fit"
    assert 0.95 < result.outcome.training_summary.rms < 1.05
    aggregate = document["training_summary"]["aggregate"]
    assert aggregate["nuisance_degrees_of_freedom"] == 112
    assert document["fit"]["measurements"]["training_rms"] == aggregate["rms_dof_corrected"]
    inside = 0
    per = {p["id"]: p for p in document["local_identifiability"]["parameters"]}
    for kind, values in generate.TRUTH.items():
        for n, truth in enumerate(values, 1):
            entry = per[f"{kind}_joint{n}"]
            fitted = result.fitted_values[f"{kind}_joint{n}"]
            assert abs(fitted - truth) < 3 * entry["standard_deviation"], (kind, n)
            low, high = entry["interval_95"]
            inside += low <= truth <= high
    assert inside >= 19
    nuisance = document["initial_state_fit"]
    assert len(nuisance["episodes"]) == 12  # 8 training and 4 validation windows
    assert nuisance["degrees_of_freedom_removed"] == {"training": 112, "validation": 56}
    assert not any("." in pid for pid in result.fitted_values)  # nuisance not in the result


def test_closed_loop_replay_through_the_impedance_recovers_the_dampings(tmp_path: Path) -> None:
    """Whole closed-loop runs: the recorded Cartesian targets drive the site-actuator
    impedance; at the truth the residuals are the noise alone (standardized RMS ~ 1) and the
    dampings are recovered inside their statistical intervals (armature and friction held at
    the truth by a manifest overlay to keep the test short)."""
    doc = _dampings_only(tmp_path, "panda_impedance.yaml", "calibration-closed-loop.yaml")
    doc["parameters"] = [p for p in doc["parameters"] if p["id"].startswith("damping_")]
    for source in doc["sources"].values():
        source["path"] = str(EXAMPLE / source["path"])
    doc["training"] = doc["training"][:1]
    doc["execution"] = {"max_parallelism": 1}
    doc.pop("fit")
    (tmp_path / "closed.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    result = run_calibration(tmp_path / "closed.yaml")
    assert result.document["likelihood_interpretation_valid"] is True
    assert 0.8 < result.outcome.training_summary.rms < 1.2
    assert result.document["scores"]["nominal"]["validation"]["standardized_rms"] > 20
    per = {p["id"]: p for p in result.document["local_identifiability"]["parameters"]}
    for n, truth in enumerate(generate.TRUTH["damping"], 1):
        fitted = result.fitted_values[f"damping_joint{n}"]
        assert abs(fitted - truth) < 4 * per[f"damping_joint{n}"]["standard_deviation"]


def test_sidecar_gains_become_impedance_overlays(tmp_path: Path) -> None:
    """A run's args.kp_*/kd_* as actuator kp/kv overlays: the manifest loads them and the
    replay at the truth is unchanged (they are the model's own gains)."""
    from fibril_calibration.sysid_import import main as import_main

    from fibril_sim_core import SimulationBuilder

    out = tmp_path / "gains.json"
    assert import_main(["--sidecar-gains", str(EXAMPLE / "calibration_data" / "loop-01.json"),
                        "--output", str(out)]) == 0
    artifact = json.loads(out.read_text())
    assert [p["id"] for p in artifact["parameters"]] == ["kp_pos", "kd_pos", "kp_ori", "kd_ori"]
    manifest = yaml.safe_load((EXAMPLE / "panda_impedance.yaml").read_text())
    manifest["model"] = str(EXAMPLE / manifest["model"])
    manifest["parameter_overlays"] = [str(out)]
    (tmp_path / "m.yaml").write_text(yaml.safe_dump(manifest))
    plan = SimulationBuilder().build(tmp_path / "m.yaml")
    np.testing.assert_allclose(plan.model.actuator_gainprm[:, 0], [500] * 3 + [30] * 3)
    np.testing.assert_allclose(-plan.model.actuator_biasprm[:, 2], [44.7] * 3 + [10.95] * 3)


def test_impedance_targets_are_live_external_inputs() -> None:
    """Live use: an ExternalInput target on ee_x/command moves the end effector there through
    the MuJoCo-native impedance (no per-tick Python)."""
    from fibril_sim_core import SimulationBuilder, external_input

    plan = SimulationBuilder().build(EXAMPLE / "panda_impedance.yaml")
    instance = plan.create_instance(0)
    instance.inject_state([{"type": "joint", "joint": f"joint{n + 1}", "qpos": [q]}
                           for n, q in enumerate(generate.HOME)])
    instance.advance(1)
    data = instance.data
    site = plan.model.site("attachment_site").id
    start = data.site_xpos[site].copy()
    hold = data.actuator_length.copy()
    for n, axis in enumerate(("x", "y", "z", "rx", "ry", "rz")):
        value = float(hold[n] + (0.05 if axis == "x" else 0.0))
        instance.enqueue(external_input(f"ee_{axis}/command", 1, "fibril_sim/motor_command/v1",
                                        json.dumps({"mode": "position", "value": value})))
    instance.advance(2000)
    moved = data.site_xpos[site] - start
    assert moved[0] == pytest.approx(0.05, abs=2e-3)
    assert abs(moved[1]) < 2e-3 and abs(moved[2]) < 2e-3


def _ring_log_run(folder: Path, seconds: float = 1.5) -> Path:
    """A closed-loop run of the impedance arm at the truth as a 1 kHz ring log: every tick a
    row (``seq``, ``target_idx``, the setpoint in force, noisy q / dq) and ``<stem>_targets.csv``
    with one row per 50 Hz Cartesian setpoint at the frame it took effect."""
    import csv

    import generate_closed_loop as loop
    import mujoco
    from fibril_calibration.alignment import quat_error

    from fibril_sim_core import SimulationBuilder

    plan = SimulationBuilder().build(EXAMPLE / "panda_impedance.yaml",
                                     overlays=generate.truth_overlays())
    model = plan.model
    data = mujoco.MjData(model)
    data.qpos[:] = generate.HOME
    mujoco.mj_forward(model, data)
    site = model.site("attachment_site").id
    anchor_pos = data.site_xpos[site].copy()
    anchor = np.empty(4)
    mujoco.mju_mat2Quat(anchor, data.site_xmat[site])
    rng = np.random.default_rng(5)
    phases = rng.uniform(0, 2 * np.pi, (3, 6))
    tones = np.array([1.0, 1.6, 2.7]) * 0.5
    seq_first, ticks = 40_000, round(seconds * 1000)
    rows, targets = [], []
    for tick in range(ticks + 1):
        if tick % 20 == 0:  # the client sends a target every 20 ms; it acts from this tick
            t = tick / 1000
            wave = sum(np.sin(2 * np.pi * f * t + phases[i]) for i, f in enumerate(tones)) / 3
            ramp = min(1.0, t / 0.5)
            x_des = anchor_pos + ramp * loop.AMP_POS * wave[:3]
            q_des = np.empty(4)
            mujoco.mju_mulQuat(q_des, anchor, loop._exp(ramp * loop.AMP_ROT * wave[3:]))
            xyzw = [float(v) for v in q_des[[1, 2, 3, 0]]]
            wxyz = np.array([xyzw[3], *xyzw[:3]])
            data.ctrl[:3] = x_des
            data.ctrl[3:] = quat_error(wxyz[None, :], anchor[None, :])[0]
            targets.append([len(targets), seq_first + tick - 1, seq_first + tick,
                            *map(float, x_des), *xyzw])
        q = data.qpos + rng.normal(0, generate.Q_SD, 7)
        dq = data.qvel + rng.normal(0, generate.DQ_SD, 7)
        rows.append([f"{tick / 1000:.3f}", "1.000", *map(repr, q.tolist()),
                     *map(repr, dq.tolist()), *targets[-1][3:6], *targets[-1][6:],
                     seq_first + tick, len(targets) - 1])
        mujoco.mj_step(model, data)
    path = folder / "ring.csv"
    with path.open("w", newline="") as out:
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(["t_s", "period_ms"] + [f"q{i}" for i in range(1, 8)]
                        + [f"dq{i}" for i in range(1, 8)] + [f"x_des_{c}" for c in "xyz"]
                        + [f"quat_des_{c}" for c in "xyzw"] + ["seq", "target_idx"])
        writer.writerows(rows)
    with (folder / "ring_targets.csv").open("w", newline="") as out:
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(["target_idx", "head", "seq_effective", "x_des_x", "x_des_y",
                         "x_des_z", "quat_des_x", "quat_des_y", "quat_des_z", "quat_des_w"])
        writer.writerows(targets)
    sidecar = {"schema_version": 2, "controller": "synthetic_ring_log", "q_init":
               generate.HOME.tolist(), "q_anchor_xyzw": anchor[[1, 2, 3, 0]].tolist(),
               "ring_log": {"path": "ring.csv", "targets_path": "ring_targets.csv",
                            "num_frames": ticks + 1, "seq_first": seq_first,
                            "num_targets": len(targets), "gaps": [], "resets": 0}}
    (folder / "ring.json").write_text(json.dumps(sidecar))
    return path


def test_closed_loop_replay_from_a_ring_log_and_its_targets_file(tmp_path: Path) -> None:
    """The lab's closed-loop replay from a 1 kHz ring log: the setpoints come from
    ``<stem>_targets.csv`` (``targets.*`` columns at their effective frames, zero-order held)
    and drive the impedance; the dampings are recovered within their intervals."""
    run = _ring_log_run(tmp_path)
    doc = _dampings_only(tmp_path, "panda_impedance.yaml", "calibration-closed-loop.yaml")
    doc["parameters"] = [p for p in doc["parameters"] if p["id"].startswith("damping_")]
    doc["sources"] = {"ring": {"path": str(run), "format": "franka_sysid"}}
    episode = doc["training"][0]
    episode["source"] = "ring"
    episode["id"] = "ring"
    episode["inputs"][0]["endpoints"] = {
        f"targets.{name}": endpoint
        for name, endpoint in episode["inputs"][0]["endpoints"].items()}
    doc["training"] = [episode]
    del doc["validation"]
    doc.pop("fit")
    doc["execution"] = {"max_parallelism": 1}
    (tmp_path / "ring.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    result = run_calibration(tmp_path / "ring.yaml")
    inputs = result.request.training[0].recorded_inputs
    assert len(inputs) == 6 * 75  # six setpoint endpoints, a target every 20 ms in [0, 1.5)
    assert result.document["likelihood_interpretation_valid"] is True
    assert 0.8 < result.outcome.training_summary.rms < 1.2
    per = {p["id"]: p for p in result.document["local_identifiability"]["parameters"]}
    for n, truth in enumerate(generate.TRUTH["damping"], 1):
        fitted = result.fitted_values[f"damping_joint{n}"]
        assert abs(fitted - truth) < 4 * per[f"damping_joint{n}"]["standard_deviation"]
