"""Regressions from the spec-compliance review of the calibration engine."""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pytest

from _calibration_rig import request_doc, samples, synthesize, write_request, write_rig
from fibril_calibration import run_calibration
from fibril_calibration.solve.episodes import run_episode
from fibril_calibration.solve.problem import CalibrationProblem
from fibril_calibration.request import load_calibration_request
from fibril_sim_core import MujocoTarget, OverlayParameter, SimulationBuilder, load_manifest


def test_episode_weight_never_leaks_into_the_data_only_analysis(tmp_path: Path) -> None:
    """Noise-free data fitted exactly: weighted and unweighted residuals are both zero at the
    fit, yet the analysis must still use the unweighted (data-only) Jacobian."""
    rig = write_rig(tmp_path)
    doc = synthesize(tmp_path, request_doc(rig), {"damping": 0.02})
    doc["analysis"] = {"information_matrix": True}
    found = {}
    for weight in (1.0, 4.0):
        doc["training"][0]["weight"] = weight
        result = run_calibration(write_request(tmp_path, doc, f"w{weight}.yaml")).document
        identifiability = result["local_identifiability"]
        found[weight] = (identifiability["jacobian_source"],
                         identifiability["singular_values"],
                         result["information_matrix"]["matrix"])
    assert found[1.0][0] == "objective_jacobian"
    assert found[4.0][0] == "data_only_relinearization"
    np.testing.assert_allclose(found[4.0][1], found[1.0][1], rtol=1e-6)
    np.testing.assert_allclose(found[4.0][2], found[1.0][2], rtol=1e-6)


def test_a_builder_object_also_resolves_the_request(tmp_path: Path) -> None:
    """A replacement CandidatePlanBuilder object (a model variant) is used for the request's
    nominal plan too, not only for the candidates."""
    rig = write_rig(tmp_path)
    doc = synthesize(tmp_path, request_doc(rig), {"damping": 0.05})
    doc["parameters"] = [dict(doc["parameters"][0], initial=0.02)]

    class Variant:
        def __init__(self) -> None:
            self.manifest = load_manifest(rig)
            self.builder = SimulationBuilder()
            self.built = 0

        def build(self, values):
            self.built += 1
            target = MujocoTarget("joint_damping", "shaft")
            return self.builder.build(self.manifest, [
                OverlayParameter("damping", values["damping"], (target,))])

    variant = Variant()
    result = run_calibration(write_request(tmp_path, doc), candidate_builder=variant)
    assert variant.built > 3
    assert result.document["fitted_parameters"]["damping"] == pytest.approx(0.05, rel=1e-6)


def test_mocap_pose_and_actuator_activation_initial_state_take_effect(tmp_path: Path) -> None:
    rig = write_rig(tmp_path)
    doc = request_doc(rig)
    doc["observations"] += [{"id": "target_position", "source": "body_position", "name": "target"},
                            {"id": "elbow_speed", "source": "joint_velocity", "name": "elbow"}]
    episode = doc["training"][0]
    episode["initial_state"] = [{"type": "mocap", "body": "target", "pos": [5, 6, 7]},
                                {"type": "actuator", "actuator": "lag", "act": [100.0]}]
    episode["signals"]["target_position"] = {"alignment": "exact", "residual_scale": 1,
                                             "samples": samples([0, 3], 3)}
    episode["signals"]["elbow_speed"] = {"alignment": "exact", "residual_scale": 1,
                                         "samples": samples([0, 3, 10])}
    request = load_calibration_request(write_request(tmp_path, doc))
    with CalibrationProblem(request) as problem:
        schedule = problem.schedules("training")[0]
        tracks = run_episode(problem.candidate_plan(request.initial_values), schedule,
                             problem.decoders)
    by_signal = {item.signal.observation: track
                 for item, track in zip(schedule.signals, tracks)}
    np.testing.assert_array_equal(by_signal["target_position"].values[0], [5, 6, 7])
    speeds = by_signal["elbow_speed"].values[:, 0]
    assert speeds[0] == 0.0 and speeds[-1] > speeds[1] > 0.0  # the activation drives the elbow


SPEC = Path(__file__).resolve().parent / "test_calibration_request.py"


def test_the_specification_example_runs_end_to_end(tmp_path: Path) -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location("_spec_example", SPEC)
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(module)
    manifest = Path(__file__).resolve().parents[2] / "config/examples/drivetrain/simulation.yaml"
    path = tmp_path / "calibration.yaml"
    path.write_text(module.SPEC_EXAMPLE.format(manifest=manifest))
    document = run_calibration(path).document
    assert document["optimization_termination"] in ("converged", "max_iterations")
    assert document["fit"]["verdict"] in ("plausible_fit", "no_plausible_fit")
    assert document["fit"]["verdict"] != "plausible_fit" or not document["fit"]["reasons"]
    assert {p["parameter"] for p in document["profile_likelihood"]["parameters"]} == {
        "wheel_damping", "encoder_bias"}
    assert document["information_matrix"]["name"] == "fisher_information_approximation"
    overlay = document["parameter_overlay"]
    assert [p["id"] for p in overlay["parameters"]] == ["wheel_damping", "encoder_bias"]
    fitted = copy.deepcopy(document["fitted_parameters"])
    assert set(fitted) == {"wheel_damping", "encoder_bias"}


def test_normal_intervals_say_when_they_cross_the_bounds(tmp_path: Path) -> None:
    rig = write_rig(tmp_path)
    doc = synthesize(tmp_path, request_doc(rig), {"damping": 0.05}, noise=0.002)
    doc["objective"] = {"standardized_gaussian_residuals": True}
    for signal in doc["training"][0]["signals"].values():
        signal["scale_semantics"] = "measurement_standard_deviation"
    tight = copy.deepcopy(doc)
    tight["parameters"][0].update(lower=0.04999, upper=0.05001, initial=0.05)
    for request, crosses in ((doc, False), (tight, True)):
        result = run_calibration(write_request(tmp_path, request, f"{crosses}.yaml")).document
        entry = result["local_identifiability"]["parameters"][0]
        assert entry["interval_95_crosses_bounds"] is crosses, entry


def test_recorded_inputs_file_may_be_a_run_inputs_file(tmp_path: Path) -> None:
    """The file `fibril_sim run --inputs` replays also serves as an episode's recorded inputs."""
    import yaml

    rig = write_rig(tmp_path)
    doc = request_doc(rig)
    inline = doc["training"][0]["recorded_inputs"]
    assert inline, "the rig's episode has recorded inputs"
    (tmp_path / "inputs.yaml").write_text(yaml.safe_dump({
        "schema_version": {"major": 1, "minor": 0},
        "inputs": [{"commit_tick": r["commit_tick"], "source_id": r["source_id"],
                    "source_sequence": r["source_sequence"], "payload_type": r["payload_type"],
                    "payload_json": r["payload_json"]}
                   for r in sorted(inline, key=lambda r: (r["commit_tick"],
                                                          r["acceptance_sequence"]))]}))
    from_file = copy.deepcopy(doc)
    del from_file["training"][0]["recorded_inputs"]
    from_file["training"][0]["recorded_inputs_file"] = "inputs.yaml"
    a = load_calibration_request(write_request(tmp_path, doc, "inline.yaml"))
    b = load_calibration_request(write_request(tmp_path, from_file, "file.yaml"))
    with CalibrationProblem(a) as pa, CalibrationProblem(b) as pb:
        np.testing.assert_array_equal(pa.evaluate(a.initial_values).residuals,
                                      pb.evaluate(b.initial_values).residuals)
    (tmp_path / "inputs.yaml").write_text("schema_version: {major: 1, minor: 0}\ninputs:\n"
                                          "  - {time: 0.0005, source_id: x}\n")
    with pytest.raises(Exception, match="inputs.yaml: inputs\\[0\\]"):
        load_calibration_request(write_request(tmp_path, from_file, "bad.yaml"))


def test_recycled_mujoco_data_gives_identical_residuals(tmp_path: Path, monkeypatch) -> None:
    """Rollouts reuse their thread's MjData (reset by the fresh instance): same numbers."""
    from fibril_calibration.solve import episodes

    rig = write_rig(tmp_path)
    request = load_calibration_request(write_request(tmp_path, request_doc(rig)))
    points = [request.initial_values * factor for factor in (1.0, 1.3, 0.7, 1.0)]
    with CalibrationProblem(request) as problem:
        problem._capacity = 0
        recycled = [problem.evaluate(p).residuals for p in points]
    monkeypatch.setattr(episodes, "_scratch_data", lambda model: None)
    with CalibrationProblem(request) as problem:
        problem._capacity = 0
        fresh = [problem.evaluate(p).residuals for p in points]
    for a, b in zip(recycled, fresh):
        np.testing.assert_array_equal(a, b)
