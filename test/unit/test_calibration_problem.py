"""The calibration problem side: replay through the normal instance lifecycle, observations that
match the instance's own records, residual layout and weights, cache, parallelism, and
end-to-end recovery with the real solver."""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _calibration_rig import (DAMPING, ENCODER_BIAS, RESISTANCE, duty, request_doc, samples,
                              synthesize, write_request, write_rig)

from fibril_calibration.model.candidate_plan import CandidatePlanBuilder
from fibril_calibration.engine import run_calibration
from fibril_calibration.solve.episodes import run_episode
from fibril_calibration.errors import EvaluationError
from fibril_calibration.solve.problem import CalibrationProblem
from fibril_calibration.request import CalibrationRequest, load_calibration_request
from fibril_sim_core import ActuatorApplication, DeviceOutput, IngressRecord, StateSnapshot

MS = 1_000_000


@pytest.fixture(scope="module")
def rig(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_rig(tmp_path_factory.mktemp("rig"))


@pytest.fixture(scope="module")
def rig_latency(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The rig with a 3 ms command latency and a scenario initial input (duty 0.25, seq 0)."""
    initial = [{"source_id": "motor/command", "source_sequence": 0,
                "payload_type": "fibril_sim/motor_command/v1",
                "payload": {"mode": "duty", "value": 0.25}}]
    return write_rig(tmp_path_factory.mktemp("rig_latency"), latency=0.003,
                     initial_inputs=initial)


def _load(folder: Path, doc: dict[str, Any]) -> CalibrationRequest:
    return load_calibration_request(write_request(folder, doc))


def _reference_run(plan: Any, request: CalibrationRequest, ticks: int, episode: int = 0
                   ) -> list:
    """The same episode through the plain instance API, recording every state snapshot."""
    spec = request.training[episode]
    instance = plan.create_instance(spec.seed, snapshot_every=1)
    if spec.initial_state:
        instance.inject_state([dict(e) for e in spec.initial_state])
    instance.enqueue_recorded_trace_inputs(spec.recorded_inputs)
    instance.advance(ticks)
    return instance.poll()


# ------------------------------------------------------------------ observations
def test_snapshot_observations_equal_the_instance_state_snapshots(rig: Path,
                                                                  tmp_path: Path) -> None:
    doc = request_doc(rig)
    doc["observations"] += [
        {"id": "angle", "source": "joint_position", "name": "shaft", "sample_every_steps": 3},
        {"id": "puck", "source": "joint_position", "name": "puck_free"},
        {"id": "puck_v", "source": "joint_velocity", "name": "puck_free"},
        {"id": "speed_sensor", "source": "sensor", "name": "shaft_speed"},
        {"id": "tip", "source": "sensor", "name": "tip_pos", "sample_every_steps": 2},
        {"id": "rotor_pos", "source": "body_position", "name": "rotor"},
        {"id": "rotor_q", "source": "body_quaternion", "name": "rotor"},
        {"id": "raw_qpos", "source": "qpos", "indices": [0, 3]},
        {"id": "raw_qvel", "source": "qvel", "indices": [1]},
        {"id": "raw_sensors", "source": "sensordata", "indices": [3, 0]},
    ]
    widths = {"angle": 1, "puck": 7, "puck_v": 6, "speed_sensor": 1, "tip": 3, "rotor_pos": 3,
              "rotor_q": 4, "raw_qpos": 2, "raw_qvel": 1, "raw_sensors": 2}
    episode = doc["training"][0]
    episode["initial_state"] = [{"type": "joint", "joint": "shaft", "qvel": [3.0]},
                                {"type": "joint", "joint": "puck_free", "qvel": [0, 0, 1, 0, 0, 2]}]
    episode["recorded_inputs"] = [duty(1, 0.5, 4), duty(2, -0.2, 13)]
    times = {"angle": [0, 3, 6, 9, 21], "tip": [0, 2, 4, 20], "rotor_q": [1, 7, 19]}
    for name, width in widths.items():
        values = [[1, 0, 0, 0]] if name == "rotor_q" else None
        entry = samples(times.get(name, [0, 1, 2, 5, 12, 13, 14, 20]), width)
        if values:
            for item in entry:
                item["values"] = [1.0, 0.0, 0.0, 0.0]
        episode["signals"][name] = {"alignment": "exact", "residual_scale": 1.0,
                                    "samples": entry}
    request = _load(tmp_path, doc)
    with CalibrationProblem(request) as problem:
        plan = problem.candidate_plan(request.initial_values)
        schedule = problem.schedules("training")[0]
        tracks = run_episode(plan, schedule, problem.decoders)
    snapshots = {r.tick: r for r in _reference_run(plan, request, 70)
                 if isinstance(r, StateSnapshot)}
    extract = {
        "speed": lambda s: s.qvel[7:8], "angle": lambda s: s.qpos[0:1],
        "puck": lambda s: s.qpos[1:8], "puck_v": lambda s: s.qvel[1:7],
        "speed_sensor": lambda s: s.sensordata[0:1], "tip": lambda s: s.sensordata[1:4],
        "rotor_pos": lambda s: s.xpos[1], "rotor_q": lambda s: s.xquat[1],
        "raw_qpos": lambda s: s.qpos[[0, 3]], "raw_qvel": lambda s: s.qvel[[1]],
        "raw_sensors": lambda s: s.sensordata[[3, 0]],
    }
    # the rig's dofs: shaft 0, puck 1..6, elbow 7 (qvel) — the speed selector is the shaft's
    extract["speed"] = lambda s: s.qvel[0:1]
    assert plan.model.nv == 8
    for item, track in zip(schedule.signals, tracks):
        name = item.signal.observation
        for tick, row in zip(item.ticks.tolist(), track.values):
            np.testing.assert_array_equal(row, extract[name](snapshots[tick]), err_msg=name)
        np.testing.assert_array_equal(track.times_ns, item.ticks * MS)
    puck_v = tracks[[s.signal.observation for s in schedule.signals].index("puck_v")]
    assert puck_v.values[0].tolist() == [0, 0, 1, 0, 0, 2]  # initial_state is the state at 0


def test_event_observations_equal_the_instance_records(rig_latency: Path,
                                                        tmp_path: Path) -> None:
    doc = request_doc(rig_latency)
    doc["observations"] += [
        {"id": "enc", "source": "device_output", "name": "shaft_encoder"},
        {"id": "enc_acq", "source": "device_output", "name": "shaft_encoder",
         "timestamp": "acquisition", "indices": ["position"]},
        {"id": "current", "source": "device_output", "name": "feedback", "indices": [2, 0]},
        {"id": "applied", "source": "actuator_application", "name": "motor/command"},
        {"id": "commands", "source": "actuator_application", "name": "motor/command",
         "indices": ["commanded", "released", "applied"]},
    ]
    episode = doc["training"][0]
    del episode["signals"]["speed"]
    episode["horizon_steps"] = 40
    episode["recorded_inputs"] = [duty(1, 0.5, 0), duty(2, 2.0, 10)]
    for name, width in (("enc", 3), ("enc_acq", 1), ("current", 2), ("applied", 1),
                        ("commands", 3)):
        episode["signals"][name] = {"alignment": "nearest", "residual_scale": 1.0,
                                    "samples": samples([20], width)}
    request = _load(tmp_path, doc)
    with CalibrationProblem(request) as problem:
        plan = problem.candidate_plan(request.initial_values)
        schedule = problem.schedules("training")[0]
        tracks = dict(zip([s.signal.observation for s in schedule.signals],
                          run_episode(plan, schedule, problem.decoders)))
    records = _reference_run(plan, request, 60)
    encoder = [r for r in records if isinstance(r, DeviceOutput) and r.device_id ==
               "shaft_encoder"]
    kept = [r for r in encoder if r.delivery_time_ns <= 40 * MS]
    np.testing.assert_array_equal(tracks["enc"].times_ns, [r.delivery_time_ns for r in kept])
    np.testing.assert_array_equal(tracks["enc"].values, [r.values for r in kept])
    acquired = [r for r in encoder if r.acquisition_time_ns <= 40 * MS]
    assert tracks["enc_acq"].times_ns[-1] == 40 * MS  # delivered at 42 ms, still observed
    np.testing.assert_array_equal(tracks["enc_acq"].values[:, 0],
                                  [r.values[0] for r in acquired])
    feedback = [r for r in records if isinstance(r, DeviceOutput) and r.device_id == "feedback"
                and r.delivery_time_ns <= 40 * MS]
    np.testing.assert_array_equal(tracks["current"].values,
                                  [r.values[[2, 0]] for r in feedback])
    # Recorded inputs reach the actuator through ingress: scenario input first, then the
    # recording, each released after the 3 ms command latency; the duty clamps at 1.0.
    applications = [r for r in records if isinstance(r, ActuatorApplication)]
    assert [(r.tick, r.commanded, r.applied) for r in applications] == [
        (3, 0.25, 3.0), (3, 0.5, 6.0), (13, 2.0, 12.0)]
    np.testing.assert_array_equal(tracks["applied"].times_ns, [3 * MS, 3 * MS, 13 * MS])
    np.testing.assert_array_equal(tracks["commands"].values,
                                  [[0.25, 0.25, 3.0], [0.5, 0.5, 6.0], [2.0, 2.0, 12.0]])


def test_nothing_moves_before_the_recorded_commit_tick(rig: Path, tmp_path: Path) -> None:
    doc = request_doc(rig)
    doc["training"][0]["recorded_inputs"] = [duty(1, 0.8, 25)]
    doc["training"][0]["signals"]["speed"]["samples"] = samples([0, 10, 25, 26, 40])
    request = _load(tmp_path, doc)
    with CalibrationProblem(request) as problem:
        plan = problem.candidate_plan(request.initial_values)
        track = run_episode(plan, problem.schedules("training")[0], problem.decoders)[0]
    assert track.values[:3, 0].tolist() == [0.0, 0.0, 0.0]
    assert track.values[3, 0] > 0.0


def test_a_payload_the_ingress_refuses_fails_the_evaluation(rig: Path, tmp_path: Path) -> None:
    request = _load(tmp_path, request_doc(rig))
    bad = IngressRecord(0, "motor/command", 1, "fibril_sim/motor_command/v1",
                        '{"mode": "warp", "value": 1}', True, 0, 0, "", 0)
    episode = dataclasses.replace(request.training[0], recorded_inputs=(bad,))
    broken = dataclasses.replace(request, training=(episode,))
    with CalibrationProblem(broken) as problem, pytest.raises(EvaluationError) as caught:
        problem.evaluate(broken.initial_values)
    assert str(caught.value).startswith("episode 'ep1': recorded_inputs: ")
    assert "'warp'" in str(caught.value)


def test_missing_exact_event_sample_fails_the_evaluation(rig: Path, tmp_path: Path) -> None:
    doc = request_doc(rig)
    doc["observations"].append({"id": "current", "source": "device_output",
                                "name": "feedback", "indices": [2]})
    doc["training"][0]["signals"]["current"] = {"alignment": "exact", "residual_scale": 1.0,
                                                "samples": samples([4, 7, 8])}
    request = _load(tmp_path, doc)
    with CalibrationProblem(request) as problem, pytest.raises(EvaluationError) as caught:
        problem.evaluate(request.initial_values)
    assert ("episode 'ep1' signal 'current': exact alignment of reference sample 1 "
            "(time_ns 7000000)") in str(caught.value)


def test_linear_event_alignment_needs_a_sample_within_the_horizon(rig: Path,
                                                                  tmp_path: Path) -> None:
    doc = request_doc(rig)
    doc["observations"].append({"id": "current", "source": "device_output",
                                "name": "feedback", "indices": [2]})
    doc["training"][0]["signals"]["current"] = {"alignment": "linear", "residual_scale": 1.0,
                                                "samples": samples([5, 61])}
    doc["training"][0]["horizon_steps"] = 61  # the sample after 61 ms is delivered at 62 ms
    request = _load(tmp_path, doc)
    with CalibrationProblem(request) as problem, pytest.raises(EvaluationError,
                                                               match="extend horizon_steps"):
        problem.evaluate(request.initial_values)
    doc["training"][0]["horizon_steps"] = 64
    request = _load(tmp_path, doc)
    with CalibrationProblem(request) as problem:
        assert problem.evaluate(request.initial_values).residuals.shape == (8,)


def test_quaternion_residuals_are_3d_and_sign_invariant(rig: Path, tmp_path: Path) -> None:
    doc = request_doc(rig)
    doc["observations"].append({"id": "q", "source": "body_quaternion", "name": "rotor"})
    doc["training"][0]["initial_state"] = [{"type": "joint", "joint": "shaft", "qvel": [5.0]}]
    placeholders = samples([2.5, 30.5, 59.5], 4)
    for item in placeholders:
        item["values"] = [1.0, 0.0, 0.0, 0.0]
    doc["training"][0]["signals"]["q"] = {"alignment": "linear", "residual_scales": [1, 1, 0.5],
                                          "samples": placeholders}
    truth = synthesize(tmp_path, doc, {"damping": 0.02})
    flipped = copy.deepcopy(truth)
    for item in flipped["training"][0]["signals"]["q"]["samples"]:
        item["values"] = [-v for v in item["values"]]
    results = []
    for variant in (truth, flipped):
        request = _load(tmp_path, variant)
        with CalibrationProblem(request) as problem:
            results.append(problem.evaluate(np.array([0.05])))
    block = [b for b in results[0].blocks if b.signal == "q"][0]
    assert block.stop - block.start == 9  # 3 samples x 3 rotation-vector components
    np.testing.assert_allclose(results[0].residuals, results[1].residuals, atol=1e-12)
    rotation = results[0].residuals[block.start:block.stop].reshape(3, 3)
    assert np.all(rotation[:, :2] == 0.0) or np.allclose(rotation[:, :2], 0.0, atol=1e-12)
    assert abs(rotation[-1, 2]) > 0.0  # about the hinge axis z, scaled by 1 / 0.5


# ------------------------------------------------------------------ layout, cache, threads
def _three_episodes(rig: Path, **execution: Any) -> dict[str, Any]:
    doc = request_doc(rig, execution=execution)
    doc["observations"].append({"id": "current", "source": "device_output",
                                "name": "feedback", "indices": [2]})
    base = doc["training"][0]
    base["signals"]["current"] = {"alignment": "zero_order_hold", "residual_scale": 0.5,
                                  "samples": samples([3, 9, 33])}
    doc["training"] = []
    for n, (weight, command) in enumerate(((1.0, 0.5), (4.0, -0.3), (0.25, 0.9))):
        episode = copy.deepcopy(base)
        episode.update(id=f"ep{n}", weight=weight, episode_seed=n,
                       recorded_inputs=[duty(1, command, 0)])
        doc["training"].append(episode)
    doc["validation"] = [copy.deepcopy(doc["training"][1]) | {"id": "val", "weight": 1.0}]
    return doc


def test_layout_follows_declaration_order_and_weights_scale_residuals(rig: Path,
                                                                      tmp_path: Path) -> None:
    request = _load(tmp_path, _three_episodes(rig))
    with CalibrationProblem(request) as problem:
        evaluation = problem.evaluate(np.array([0.05]))
        assert evaluation.blocks == problem.layout("training")
    assert [(b.episode, b.signal, b.start, b.stop) for b in evaluation.blocks] == [
        ("ep0", "speed", 0, 6), ("ep0", "current", 6, 9), ("ep1", "speed", 9, 15),
        ("ep1", "current", 15, 18), ("ep2", "speed", 18, 24), ("ep2", "current", 24, 27)]
    r, u = evaluation.residuals, evaluation.unweighted
    np.testing.assert_array_equal(r[:9], u[:9])
    np.testing.assert_allclose(r[9:18], 2.0 * u[9:18])
    np.testing.assert_allclose(r[18:], 0.5 * u[18:])
    assert not r.flags.writeable


def test_cache_memoizes_per_vector_and_scope(rig: Path, tmp_path: Path) -> None:
    request = _load(tmp_path, _three_episodes(rig, cache_entries=2))
    with CalibrationProblem(request) as problem:
        first = problem.evaluate(np.array([0.05]))
        again = problem.evaluate(np.array([0.05]))
        assert again is first
        validation = problem.evaluate(np.array([0.05]), "validation")
        assert validation is not first and len(validation.residuals) == 9
        stats = problem.statistics
        assert stats.cache_hits == {"training": 1, "validation": 0}
        assert stats.evaluations == {"training": 1, "validation": 1}
        assert stats.plan_builds == 2 and stats.rollouts == 4
        problem.evaluate(np.array([0.06]))
        problem.evaluate(np.array([0.07]))  # evicts 0.05 (LRU of 2)
        problem.evaluate(np.array([0.05]))
        assert stats.cache_hits["training"] == 1 and stats.evaluations["training"] == 4
    request = _load(tmp_path, _three_episodes(rig, cache_entries=0))
    with CalibrationProblem(request) as problem:
        problem.evaluate(np.array([0.05]))
        problem.evaluate(np.array([0.05]))
        assert problem.statistics.cache_hits["training"] == 0
        assert problem.statistics.evaluations["training"] == 2


def test_parallel_rollouts_give_identical_residuals(rig: Path, tmp_path: Path) -> None:
    points = [np.array([0.05]), np.array([0.011]), np.array([0.3])]
    outcomes = []
    for workers in (1, 3):
        request = _load(tmp_path, _three_episodes(rig, max_parallelism=workers,
                                                  cache_entries=0))
        with CalibrationProblem(request) as problem:
            single = [problem.evaluate(p) for p in points]
            batch = problem.evaluate_many(points)
            assert problem.statistics.plan_builds == 6
        for a, b in zip(single, batch):
            np.testing.assert_array_equal(a.residuals, b.residuals)
            assert a.blocks == b.blocks
        outcomes.append(single)
    for a, b in zip(*outcomes):
        np.testing.assert_array_equal(a.residuals, b.residuals)
        np.testing.assert_array_equal(a.unweighted, b.unweighted)
        assert a.blocks == b.blocks


def test_one_candidate_plan_per_evaluation_from_a_replaceable_builder(rig: Path,
                                                                      tmp_path: Path) -> None:
    request = _load(tmp_path, _three_episodes(rig, max_parallelism=2))

    class Counting:
        def __init__(self) -> None:
            self.inner = CandidatePlanBuilder(request.manifest, request.parameters)
            self.values: list[dict[str, float]] = []

        def build(self, values: dict[str, float]) -> Any:
            self.values.append(dict(values))
            return self.inner.build(values)

    builder = Counting()
    with CalibrationProblem(request, candidate_builder=builder) as problem:
        problem.evaluate(np.array([0.04]))
    assert builder.values == [{"damping": 0.04}]


def test_a_rollout_that_blows_up_is_an_evaluation_error(rig: Path, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # MuJoCo logs the instability to ./MUJOCO_LOG.TXT
    doc = request_doc(rig)
    doc["training"][0]["initial_state"] = [{"type": "joint", "joint": "puck_free",
                                            "qvel": [1e300, 0, 0, 0, 0, 0]}]
    request = _load(tmp_path, doc)
    with CalibrationProblem(request) as problem, pytest.raises(EvaluationError) as caught:
        problem.evaluate(request.initial_values)
    assert str(caught.value).startswith("episode 'ep1': the simulation became unstable")


# ------------------------------------------------------------------ end to end
def test_recovers_one_parameter_exactly_from_noise_free_data(rig: Path, tmp_path: Path) -> None:
    doc = synthesize(tmp_path, request_doc(rig), {"damping": 0.0637})
    result = run_calibration(write_request(tmp_path, doc))
    assert result.outcome.termination == "converged"
    assert result.fitted_values["damping"] == pytest.approx(0.0637, rel=1e-6)
    document = result.document
    assert document["training_summary"]["aggregate"]["rms"] < 1e-4
    assert document["parameter_overlay"]["parameters"][0]["value"] == pytest.approx(0.0637,
                                                                                     rel=1e-6)


def test_recovers_three_parameters_within_their_intervals(rig: Path, tmp_path: Path) -> None:
    doc = request_doc(rig, parameters=[DAMPING, RESISTANCE, ENCODER_BIAS],
                      objective={"standardized_gaussian_residuals": True},
                      fit={"max_training_rms": 1.5, "max_validation_rms": 1.5},
                      analysis={"information_matrix": True})
    doc["observations"] += [
        {"id": "current", "source": "device_output", "name": "feedback", "indices": ["current"]},
        {"id": "angle", "source": "device_output", "name": "shaft_encoder",
         "indices": ["position"]}]
    times = [float(t) for t in range(2, 121, 2)]
    episode = doc["training"][0]
    episode["recorded_inputs"] = [duty(1, 0.5, 0), duty(2, -0.4, 60)]
    episode["signals"] = {
        "speed": {"alignment": "exact", "residual_scale": 0.05, "samples": samples(times),
                  "scale_semantics": "measurement_standard_deviation"},
        "current": {"alignment": "exact", "residual_scale": 0.02, "samples": samples(times),
                    "scale_semantics": "measurement_standard_deviation"},
        "angle": {"alignment": "zero_order_hold", "residual_scale": 0.002,
                  "samples": samples(times), "scale_semantics": "measurement_standard_deviation"}}
    validation = copy.deepcopy(episode)
    validation.update(id="val", episode_seed=5, recorded_inputs=[duty(1, 0.8, 0)])
    doc["validation"] = [validation]
    truth = {"damping": 0.05, "resistance": 3.1, "encoder_bias": 0.03}
    doc = synthesize(tmp_path, doc, truth, noise=1.0, seed=7)
    result = run_calibration(write_request(tmp_path, doc))
    document = result.document
    assert document["likelihood_interpretation_valid"] is True
    assert document["fit"]["verdict"] == "plausible_fit"
    assert document["local_identifiability"]["numerical_rank"] == 3
    intervals = {p["id"]: p["interval_95"]
                 for p in document["local_identifiability"]["parameters"]}
    for pid, value in truth.items():
        low, high = intervals[pid]
        assert low <= value <= high, (pid, value, low, high)


def test_custom_decoders_decode_device_outputs_at_evaluation(rig: Path, tmp_path: Path) -> None:
    from fibril_calibration.model.decoders import (CalibrationDeviceOutputDecoder,
                                                   CalibrationDeviceOutputDecoderRegistry)

    registry = CalibrationDeviceOutputDecoderRegistry.standard()
    registry.register(CalibrationDeviceOutputDecoder(
        "fibril_sim/motor_feedback_sample/v1", ("milliamps",),
        lambda output: output.values[2:3] * 1000.0), replace=True)
    doc = request_doc(rig)
    doc["observations"].append({"id": "ma", "source": "device_output", "name": "feedback"})
    doc["training"][0]["signals"] = {"ma": {"alignment": "exact", "residual_scale": 1000.0,
                                            "samples": samples([10, 20])}}
    standard = copy.deepcopy(doc)
    standard["observations"][-1]["indices"] = ["current"]
    standard["training"][0]["signals"]["ma"]["residual_scale"] = 1.0
    custom = load_calibration_request(write_request(tmp_path, doc, "custom.yaml"),
                                      decoders=registry)
    assert custom.observations[-1].components == ("milliamps",)
    with CalibrationProblem(custom, decoders=registry) as problem:
        scaled = problem.evaluate(custom.initial_values).residuals
    with CalibrationProblem(_load(tmp_path, standard)) as problem:
        plain = problem.evaluate(custom.initial_values).residuals
    np.testing.assert_allclose(scaled, plain, rtol=1e-12)
    assert np.all(plain > 0)
