"""Calibration request 3.1: a valid request resolves into typed specs; every inconsistent
combination is a CalibrationRequestError naming the file, the key path, the value and what was
expected."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from _calibration_rig import (DAMPING, ENCODER_BIAS, RESISTANCE, duty, request_doc, samples,
                              write_request, write_rig)

from fibril_calibration.model.decoders import (CalibrationDeviceOutputDecoder,
                                               CalibrationDeviceOutputDecoderRegistry)
from fibril_calibration.errors import CalibrationRequestError
from fibril_calibration.request import load_calibration_request


@pytest.fixture(scope="module")
def rig(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_rig(tmp_path_factory.mktemp("rig"))


def _load(folder: Path, doc: dict[str, Any], **kwargs: Any):
    return load_calibration_request(write_request(folder, doc), **kwargs)


def _signal(doc: dict, name: str = "speed", episode: int = 0, scope: str = "training") -> dict:
    return doc[scope][episode]["signals"][name]


def _observe(doc: dict, observation: dict, signal: dict) -> None:
    doc["observations"].append(observation)
    doc["training"][0]["signals"][observation["id"]] = signal


def _sig(count_ms: list[float], width: int = 1, **extra: Any) -> dict:
    return {"alignment": "exact", "residual_scale": 0.1, "samples": samples(count_ms, width),
            **extra}


# ------------------------------------------------------------------ the valid request
def test_valid_request_resolves_to_typed_specs(rig: Path, tmp_path: Path) -> None:
    doc = request_doc(rig)
    doc["parameters"] += [copy.deepcopy(RESISTANCE), copy.deepcopy(ENCODER_BIAS)]
    doc["parameters"][0]["prior"] = {"mean": 0.03, "standard_deviation": 0.01}
    _observe(doc, {"id": "current", "source": "device_output", "name": "feedback",
                   "sample_type": "fibril_sim/motor_feedback_sample/v1",
                   "indices": ["current"]}, _sig([10, 20]))
    _observe(doc, {"id": "orientation", "source": "body_quaternion", "name": "rotor",
                   "sample_every_steps": 2},
             {"alignment": "linear", "residual_scales": [0.1, 0.1, 0.2],
              "samples": [{"time_ns": 3_000_000, "values": [1.004, 0, 0, 0]}]})
    doc["training"][0]["initial_state"] = [
        {"type": "joint", "joint": "shaft", "qvel": [1.0]},
        {"type": "joint", "joint": "puck_free", "qpos": [0, 1, 1, 1, 0, 0, 0]},
        {"type": "mocap", "body": "target", "pos": [0, 2, 2]},
        {"type": "actuator", "actuator": "lag", "act": [0.5]}]
    doc["validation"] = [{"id": "held", "episode_seed": 3, "horizon_steps": 80,
                          "signals": {"speed": _sig([10, 70])}}]
    doc["optimizer"] = {"type": "least_squares", "max_iterations": 7, "function_tolerance": 1e-9}
    doc["objective"] = {"loss": {"type": "tukey", "scale": 2.0}}
    doc["execution"] = {"max_parallelism": 3, "cache_entries": 0}
    doc["analysis"] = {"profile_likelihood": {"samples_per_parameter": 5},
                       "information_matrix": True}
    doc["fit"] = {"max_training_rms": 2.0, "max_validation_rms": 3.0,
                  "reject_parameter_near_bound": True, "near_bound_fraction": 0.01}
    doc["context"] = {"metric_id": "m", "seed": 9, "parameter_set_id": "rig-v1"}
    request = _load(tmp_path, doc)

    assert request.parameter_ids == ("damping", "resistance", "encoder_bias")
    damping, resistance, bias = request.parameters
    assert damping.prior is not None and damping.prior.standard_deviation == 0.01
    assert damping.targets[0].key == "mujoco:joint_damping:shaft:0"
    assert resistance.targets[0].key == "mujoco:dcmotor_resistance:drive:0"
    assert bias.targets[0].key == "component_config:shaft_encoder:bias"
    speed, current, orientation = request.observations
    assert speed.components == ("velocity",) and not speed.event_driven
    assert current.indices == (2,) and current.components == ("current",)
    assert current.timestamp == "delivery" and current.event_driven
    assert orientation.quaternion and orientation.residual_dimension == 3
    episode = request.training[0]
    assert [s.observation for s in episode.signals] == ["speed", "current", "orientation"]
    np.testing.assert_allclose(episode.signal("orientation").values, [[1.0, 0, 0, 0]])
    assert episode.initial_state[3] == {"type": "actuator", "actuator": "lag", "act": [0.5]}
    assert request.validation[0].horizon_steps == 80 and request.validation[0].seed == 3
    assert request.optimizer.type == "least_squares" and request.optimizer.max_iterations == 7
    assert request.objective.loss is not None and request.objective.loss.type == "tukey"
    assert (request.execution.max_parallelism, request.execution.cache_entries) == (3, 0)
    assert request.analysis.profile_likelihood.enabled
    assert request.fit.near_bound_fraction == 0.01
    assert request.context == {"metric_id": "m", "seed": 9, "parameter_set_id": "rig-v1"}
    assert len(episode.content_sha256) == 64


def test_ceres_is_accepted_and_is_the_default(rig: Path, tmp_path: Path) -> None:
    assert _load(tmp_path, request_doc(rig)).optimizer.type == "ceres"
    assert _load(tmp_path, request_doc(rig, optimizer={"type": "ceres"})).optimizer.type == "ceres"


def test_relative_paths_resolve_against_the_request_file(rig: Path, tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "speed.csv").write_text("time_ns,velocity\n10000000,1.5\n20000000,2.5\n")
    (data / "inputs.yaml").write_text(yaml.safe_dump({"recorded_inputs": [duty(1, 0.5, 0)]}))
    (tmp_path / "rig.xml").write_text((rig.parent / "rig.xml").read_text())
    (tmp_path / "rig.yaml").write_text(rig.read_text())
    doc = request_doc("rig.yaml")
    episode = doc["training"][0]
    del episode["recorded_inputs"]
    episode["recorded_inputs_file"] = "data/inputs.yaml"
    episode["signals"]["speed"] = {"alignment": "exact", "residual_scale": 0.1,
                                   "samples_file": "data/speed.csv"}
    request = _load(tmp_path, doc)
    assert request.manifest.path == (tmp_path / "rig.yaml").resolve()
    signal = request.training[0].signals[0]
    assert signal.times_ns.tolist() == [10_000_000, 20_000_000]
    assert signal.values.tolist() == [[1.5], [2.5]]
    assert request.training[0].recorded_inputs[0].source_id == "motor/command"


def test_custom_decoder_registry_resolves_device_output(rig: Path, tmp_path: Path) -> None:
    registry = CalibrationDeviceOutputDecoderRegistry()
    registry.register(CalibrationDeviceOutputDecoder(
        "fibril_sim/encoder_sample/v1", ("angle", "rate", "ticks")))
    doc = request_doc(rig)
    _observe(doc, {"id": "enc", "source": "device_output", "name": "shaft_encoder",
                   "indices": ["rate"]}, _sig([10]))
    request = _load(tmp_path, doc, decoders=registry)
    assert request.observations[1].components == ("rate",)
    with pytest.raises(CalibrationRequestError, match="no calibration decoder"):
        _load(tmp_path, doc, decoders=CalibrationDeviceOutputDecoderRegistry())


# ------------------------------------------------------------------ every error
Mutation = Callable[[dict], None]


def _set(path: str, value: Any) -> Mutation:
    def apply(doc: dict) -> None:
        keys = [int(k) if k.isdigit() else k for k in path.split(".")]
        target = doc
        for key in keys[:-1]:
            target = target[key]
        target[keys[-1]] = value
    return apply


def _delete(path: str) -> Mutation:
    def apply(doc: dict) -> None:
        keys = [int(k) if k.isdigit() else k for k in path.split(".")]
        target = doc
        for key in keys[:-1]:
            target = target[key]
        del target[keys[-1]]
    return apply


def _all(*mutations: Mutation) -> Mutation:
    def apply(doc: dict) -> None:
        for mutation in mutations:
            mutation(doc)
    return apply


def _add_observation(observation: dict, signal: dict | None = None) -> Mutation:
    return lambda doc: _observe(doc, observation, signal or _sig([10]))


def _add_parameter(parameter: dict) -> Mutation:
    return lambda doc: doc["parameters"].append(copy.deepcopy(parameter))


def _second_episode(scope: str = "training", **fields: Any) -> Mutation:
    def apply(doc: dict) -> None:
        episode = {"id": "ep2", "signals": {"speed": _sig([10])}}
        episode.update(fields)
        doc.setdefault(scope, []).append(episode)
    return apply


SPEED = "training[0].signals.speed"
INPUT = "training[0].recorded_inputs[0]"
STATE = "training[0].initial_state[0]"
QUAT = {"id": "q", "source": "body_quaternion", "name": "rotor"}
DEVICE = {"id": "current", "source": "device_output", "name": "feedback", "indices": [2]}

ERRORS: list[tuple[str, Mutation, tuple[str, ...]]] = [
    # document structure and versions
    ("unknown top-level key", _set("solver", {}), ("solver: unknown key",)),
    ("wrong version", _set("schema_version", {"major": 3, "minor": 0}),
     ("schema_version", "unsupported schema version 3.0", "expected 3.1")),
    ("missing training", _delete("training"), ("training: missing required key",)),
    ("manifest missing", _set("manifest", "nowhere.yaml"), ("manifest:", "nowhere.yaml")),
    # parameters
    ("duplicate parameter", _add_parameter(DAMPING), ("parameters[1].id",
                                                      "duplicate parameter id 'damping'")),
    ("unknown parameter key", _set("parameters.0.step", 1), ("parameters[0].step",
                                                            "unknown key")),
    ("upper below lower", _set("parameters.0.upper", 0.0001),
     ("parameters[0].upper", "expected upper > lower")),
    ("initial outside", _set("parameters.0.initial", 2.0),
     ("parameters[0].initial", "outside the bounds [0.001, 1]")),
    ("log_positive needs positive lower", _all(_set("parameters.0.lower", 0.0)),
     ("parameters[0].lower", "log_positive", "> 0")),
    ("negative bound on non-negative target",
     _all(_set("parameters.0.parameterization", "linear"), _set("parameters.0.lower", -0.1)),
     ("parameters[0].lower", "joint_damping:shaft:0 must be >= 0")),
    ("unknown parameterization", _set("parameters.0.parameterization", "exp"),
     ("parameters[0].parameterization", "unknown parameterization 'exp'")),
    ("non-positive coordinate scale", _set("parameters.0.coordinate_scale", 0),
     ("parameters[0].coordinate_scale", "expected a number > 0")),
    ("prior without sd", _set("parameters.0.prior", {"mean": 0.1}),
     ("parameters[0].prior.standard_deviation", "missing required key")),
    ("prior sd not positive", _set("parameters.0.prior", {"mean": 0.1, "standard_deviation": 0}),
     ("parameters[0].prior.standard_deviation", "> 0")),
    ("target and targets", _set("parameters.0.targets", ["mujoco:joint_damping:elbow"]),
     ("parameters[0]", "exactly one of 'target'")),
    ("unknown target kind", _set("parameters.0.target.kind", "joint_springiness"),
     ("parameters[0].target.kind", "unknown MuJoCo target kind")),
    ("target object missing in the model", _set("parameters.0.target.object", "nope"),
     ("parameters:", "cannot be built", "nope")),
    ("two parameters on one field",
     _add_parameter({**DAMPING, "id": "damping2"}),
     ("parameters[1].target", "already bound by parameter 'damping'")),
    # observations
    ("duplicate observation", _add_observation({"id": "speed", "source": "qvel",
                                                "indices": [0]}),
     ("observations[1].id", "duplicate observation id 'speed'")),
    ("unknown source", _set("observations.0.source", "joint_torque"),
     ("observations[0].source", "unknown observation source 'joint_torque'")),
    ("unknown joint name", _set("observations.0.name", "wrist"),
     ("observations[0].name", "no MuJoCo joint named 'wrist'", "known: shaft")),
    ("unknown sensor", _add_observation({"id": "s", "source": "sensor", "name": "gyro"}),
     ("observations[1].name", "no MuJoCo sensor named 'gyro'")),
    ("unknown body", _add_observation({"id": "b", "source": "body_position", "name": "x"}),
     ("observations[1].name", "no MuJoCo body named 'x'")),
    ("sample_type on a joint selector", _set("observations.0.sample_type", "x/v1"),
     ("observations[0].sample_type", "only device_output")),
    ("indices on a named selector", _set("observations.0.indices", [0]),
     ("observations[0].indices", "indices apply to")),
    ("qpos without indices", _add_observation({"id": "raw", "source": "qpos"}),
     ("observations[1].indices", "missing required key")),
    ("qpos with a name", _add_observation({"id": "raw", "source": "qpos", "name": "shaft",
                                           "indices": [0]}),
     ("observations[1].name", "takes 'indices'")),
    ("qpos index out of range", _add_observation({"id": "raw", "source": "qpos",
                                                  "indices": [0, 10]}),
     ("observations[1].indices[1]", "index 10 is out of range", "9 element(s)")),
    ("duplicate index", _add_observation({"id": "raw", "source": "sensordata",
                                          "indices": [1, 1]}, _sig([10], 2)),
     ("observations[1].indices[1]", "selected twice")),
    ("unknown device", _add_observation({**DEVICE, "name": "lidar"}),
     ("observations[1].name", "no device 'lidar'", "feedback")),
    ("wrong sample type", _add_observation({**DEVICE,
                                            "sample_type": "fibril_sim/imu_sample/v1"}),
     ("observations[1].sample_type", "emits 'fibril_sim/motor_feedback_sample/v1'")),
    ("unknown device component", _add_observation({**DEVICE, "indices": ["torque"]}),
     ("observations[1].indices[0]", "unknown component 'torque'", "force, velocity, current")),
    ("device index out of range", _add_observation({**DEVICE, "indices": [3]}),
     ("observations[1].indices[0]", "index 3 is out of range")),
    ("subsampled event-driven selector", _add_observation({**DEVICE,
                                                           "sample_every_steps": 2}),
     ("observations[1].sample_every_steps", "event-driven", "must be 1")),
    ("unknown endpoint", _add_observation({"id": "a", "source": "actuator_application",
                                           "name": "brake/command"}),
     ("observations[1].name", "no actuator endpoint 'brake/command'", "motor/command")),
    ("bad timestamp", _add_observation({**DEVICE, "timestamp": "arrival"}),
     ("observations[1].timestamp", "delivery, acquisition")),
    # episodes and signals
    ("duplicate episode", _second_episode(id="ep1"),
     ("training[1].id", "duplicate episode id 'ep1'")),
    ("duplicate across scopes", _second_episode("validation", id="ep1"),
     ("validation[0].id", "duplicate episode id 'ep1'")),
    ("unknown observation in signals", _set("training.0.signals.torque", _sig([10])),
     ("training[0].signals.torque", "unknown observation id 'torque'")),
    ("values length mismatch", _set("training.0.signals.speed.samples.1.values", [1.0, 2.0]),
     ("training[0].signals.speed.samples[1].values", "1 value(s) per sample", "got 2")),
    ("residual_scales length", _all(_delete("training.0.signals.speed.residual_scale"),
                                    _set("training.0.signals.speed.residual_scales", [1, 2])),
     (f"{SPEED}.residual_scales", "1 residual component(s)", "got 2")),
    ("quaternion residual_scales are 3-D", _add_observation(
        QUAT, {"alignment": "exact", "residual_scales": [1, 1, 1, 1],
               "samples": [{"time_ns": 0, "values": [1, 0, 0, 0]}]}),
     ("training[0].signals.q.residual_scales", "3 residual component(s)", "rotation vector")),
    ("quaternion not unit", _add_observation(
        QUAT, {"alignment": "exact", "residual_scale": 1,
               "samples": [{"time_ns": 0, "values": [0.5, 0, 0, 0]}]}),
     ("training[0].signals.q", "expected a unit quaternion")),
    ("both residual_scale and residual_scales",
     _set("training.0.signals.speed.residual_scales", [1.0]),
     (SPEED, "exactly one of 'residual_scale'")),
    ("non-positive scale", _set("training.0.signals.speed.residual_scale", 0),
     (f"{SPEED}.residual_scale", "> 0")),
    ("non-increasing time", _set("training.0.signals.speed.samples.2.time_ns", 20_000_000),
     (f"{SPEED}.samples[2].time_ns", "must increase strictly")),
    ("unknown alignment", _set("training.0.signals.speed.alignment", "cubic"),
     (f"{SPEED}.alignment", "unknown alignment 'cubic'")),
    ("unknown scale semantics", _set("training.0.signals.speed.scale_semantics", "sigma"),
     (f"{SPEED}.scale_semantics", "unknown scale_semantics 'sigma'")),
    ("exact off the observation grid", _all(
        _set("observations.0.sample_every_steps", 4)),
     (SPEED, "not on the observation grid of 4 step(s)", "8000000 or 12000000")),
    ("linear on event-driven without horizon", _add_observation(
        DEVICE, {**_sig([10]), "alignment": "linear"}),
     ("training[0].signals.current.alignment", "needs the episode's horizon_steps")),
    ("linear on actuator_application without horizon", _add_observation(
        {"id": "a", "source": "actuator_application", "name": "motor/command"},
        {**_sig([10]), "alignment": "linear"}),
     ("training[0].signals.a.alignment", "horizon_steps")),
    ("horizon shorter than the last sample", _set("training.0.horizon_steps", 59),
     ("training[0].horizon_steps", "before the last reference sample at 60000000 ns",
      "at least 60 step(s)")),
    ("no signals", _set("training.0.signals", {}), ("training[0].signals", "at least one")),
    ("no samples", _set("training.0.signals.speed.samples", []),
     (f"{SPEED}.samples", "at least one sample")),
    ("zero weight", _set("training.0.weight", 0), ("training[0].weight", "> 0")),
    # standardized Gaussian residuals
    ("standardized with user scale", _all(
        _set("objective", {"standardized_gaussian_residuals": True}),
        _set("training.0.signals.speed.scale_semantics", "user_scale")),
     (f"{SPEED}.scale_semantics", "must be measurement_standard_deviation")),
    ("standardized with an engineering weight", _all(
        _set("objective", {"standardized_gaussian_residuals": True}),
        _set("training.0.weight", 2.0)),
     ("training[0].weight", "must be 1.0")),
    ("standardized with a validation weight", _all(
        _set("objective", {"standardized_gaussian_residuals": True}),
        _second_episode("validation", weight=0.5,
                        signals={"speed": {**_sig([10]), "scale_semantics":
                                           "measurement_standard_deviation"}})),
     ("validation[0].weight", "must be 1.0")),
    ("standardized with a validation characteristic scale", _all(
        _set("objective", {"standardized_gaussian_residuals": True}),
        _second_episode("validation", signals={"speed": {
            **_sig([10]), "scale_semantics": "characteristic_scale"}})),
     ("validation[0].signals.speed.scale_semantics", "characteristic_scale")),
    # recorded inputs
    ("unknown input source", _set("training.0.recorded_inputs.0.source_id", "brake"),
     (f"{INPUT}.source_id", "unknown source 'brake'", "motor/command")),
    ("wrong payload type", _set("training.0.recorded_inputs.0.payload_type", "x/v1"),
     (f"{INPUT}.payload_type", "'x/v1' is not accepted", "fibril_sim/motor_command/v1")),
    ("payload the endpoint refuses", _set("training.0.recorded_inputs.0.payload_json",
                                          '{"mode": "warp", "value": 1}'),
     (f"{INPUT}.payload_json", "mode", "'warp'")),
    ("mode the actuator does not take", _set("training.0.recorded_inputs.0.payload_json",
                                             '{"mode": "position", "value": 1}'),
     (f"{INPUT}.payload_json", "not accepted by actuator 'drive'")),
    ("payload not JSON", _set("training.0.recorded_inputs.0.payload_json", "{mode"),
     (f"{INPUT}.payload_json", "not valid JSON")),
    ("payload and payload_json", _set("training.0.recorded_inputs.0.payload",
                                      {"mode": "duty", "value": 0}),
     (INPUT, "exactly one of 'payload_json'")),
    ("source_sequence not increasing", _set("training.0.recorded_inputs",
                                            [duty(3, 0.5, 0), duty(2, 0.1, 5)]),
     ("training[0].recorded_inputs[1].source_sequence", "does not increase")),
    ("duplicate acceptance", _set("training.0.recorded_inputs",
                                  [duty(1, 0.5, 0), duty(2, 0.1, 5, acceptance=1)]),
     ("training[0].recorded_inputs[1].acceptance_sequence", "also used by")),
    ("negative commit tick", _set("training.0.recorded_inputs.0.commit_tick", -1),
     (f"{INPUT}.commit_tick", ">= 0")),
    # initial state
    ("unknown initial joint", _set("training.0.initial_state",
                                   [{"type": "joint", "joint": "knee", "qpos": [0]}]),
     (f"{STATE}.joint", "no MuJoCo joint named 'knee'")),
    ("free joint qpos size", _set("training.0.initial_state",
                                  [{"type": "joint", "joint": "puck_free", "qpos": [0, 0, 0]}]),
     (f"{STATE}.qpos", "free joint 'puck_free' has 7 qpos value(s), got 3")),
    ("hinge qvel size", _set("training.0.initial_state",
                             [{"type": "joint", "joint": "shaft", "qvel": [0, 1]}]),
     (f"{STATE}.qvel", "hinge joint 'shaft' has 1 qvel value(s), got 2")),
    ("joint entry without values", _set("training.0.initial_state",
                                        [{"type": "joint", "joint": "shaft"}]),
     (STATE, "qpos, qvel or both")),
    ("mocap on a normal body", _set("training.0.initial_state",
                                    [{"type": "mocap", "body": "rotor", "pos": [0, 0, 0]}]),
     (f"{STATE}.body", "not a mocap body")),
    ("mocap quat size", _set("training.0.initial_state",
                             [{"type": "mocap", "body": "target", "quat": [1, 0, 0]}]),
     (f"{STATE}.quat", "expected 4 values")),
    ("actuator without activation", _set("training.0.initial_state",
                                         [{"type": "actuator", "actuator": "drive", "act": [1]}]),
     (f"{STATE}.actuator", "no activation state")),
    ("activation size", _set("training.0.initial_state",
                             [{"type": "actuator", "actuator": "lag", "act": [1, 2]}]),
     (f"{STATE}.act", "1 activation value(s), got 2")),
    ("activation switched off at a bound",
     _all(_add_parameter({"id": "inductance", "lower": 0.0, "upper": 0.01, "initial": 0.001,
                          "target": "mujoco:dcmotor_inductance:drive"}),
          _set("training.0.initial_state",
               [{"type": "actuator", "actuator": "drive", "act": [0.0]}])),
     (f"{STATE}.act", "1 activation value(s) in the nominal plan but 0 with every parameter "
                      "at its lower bound")),
    ("unknown state type", _set("training.0.initial_state", [{"type": "tendon"}]),
     (f"{STATE}.type", "expected joint, mocap or actuator")),
    # optimizer, objective, execution, analysis, fit, context
    ("unknown optimizer", _set("optimizer", {"type": "lbfgs"}),
     ("optimizer.type", "unknown optimizer 'lbfgs'", "ceres, least_squares")),
    ("zero iterations", _set("optimizer", {"max_iterations": 0}),
     ("optimizer.max_iterations", ">= 1")),
    ("unknown optimizer key", _set("optimizer", {"trust_region": "dogleg"}),
     ("optimizer.trust_region", "unknown key")),
    ("unknown loss", _set("objective", {"loss": {"type": "welsch"}}),
     ("objective.loss.type", "unknown loss 'welsch'", "huber, soft_l1, cauchy, arctan, tukey")),
    ("loss scale", _set("objective", {"loss": {"type": "huber", "scale": 0}}),
     ("objective.loss.scale", "> 0")),
    ("parallelism 0", _set("execution", {"max_parallelism": 0}),
     ("execution.max_parallelism", ">= 1")),
    ("negative cache", _set("execution", {"cache_entries": -1}),
     ("execution.cache_entries", ">= 0")),
    ("profile samples", _set("analysis", {"profile_likelihood": {"samples_per_parameter": 1}}),
     ("analysis.profile_likelihood.samples_per_parameter", ">= 3")),
    ("unknown analysis key", _set("analysis", {"covariance": True}),
     ("analysis.covariance", "unknown key")),
    ("validation criterion without validation", _set("fit", {"max_validation_rms": 2.0}),
     ("fit.max_validation_rms", "needs validation episodes")),
    ("condition number below 1", _set("fit", {"max_local_condition_number": 0.5}),
     ("fit.max_local_condition_number", ">= 1")),
    ("near-bound fraction without rejection", _set("fit", {"near_bound_fraction": 0.1}),
     ("fit.near_bound_fraction", "reject_parameter_near_bound")),
    ("reserved context key", _set("context", {"objective_version": "mine"}),
     ("context.objective_version", "reserved")),
    ("nested context value", _set("context", {"operator": {"name": "x"}}),
     ("context.operator", "strings, numbers or booleans")),
    ("context seed not integer", _set("context", {"seed": "nine"}),
     ("context.seed", "expected an integer")),
]


@pytest.mark.parametrize("mutation, expected", [(m, e) for _, m, e in ERRORS],
                         ids=[name for name, _, _ in ERRORS])
def test_request_error(rig: Path, tmp_path: Path, mutation: Mutation,
                       expected: tuple[str, ...]) -> None:
    doc = request_doc(rig)
    mutation(doc)
    path = write_request(tmp_path, doc)
    with pytest.raises(CalibrationRequestError) as caught:
        load_calibration_request(path)
    message = str(caught.value)
    assert "\n" not in message
    if expected[0].startswith(("manifest:", "parameters:")):
        assert message.startswith(f"{path.resolve()}: ")
    else:
        assert message.startswith(f"{path.resolve()}: {expected[0]}"), message
    for part in expected[1:]:
        assert part in message, message


def test_samples_file_errors_name_the_csv_line(rig: Path, tmp_path: Path) -> None:
    doc = request_doc(rig)
    doc["training"][0]["signals"]["speed"] = {"alignment": "exact", "residual_scale": 0.1,
                                              "samples_file": "speed.csv"}
    cases = [
        ("t,velocity\n1000000,1\n", "line 1: expected a header row starting with 'time_ns'"),
        ("time_ns,a,b\n1000000,1,2\n", "line 1: observation 'speed' has 1 value column(s)"),
        ("time_ns,v\n2000000,1\n1000000,2\n", "line 3: time_ns must increase strictly"),
        ("time_ns,v\n1000000,fast\n", "line 2: values must be numbers"),
        ("time_ns,v\n1.5e6,1\n", "line 2: time_ns '1.5e6' is not an integer"),
        ("time_ns,v\n", "expected at least one sample row"),
    ]
    for text, expected in cases:
        (tmp_path / "speed.csv").write_text(text)
        with pytest.raises(CalibrationRequestError) as caught:
            _load(tmp_path, doc)
        assert str(caught.value).startswith(str(tmp_path / "speed.csv")), caught.value
        assert expected in str(caught.value)
    (tmp_path / "speed.csv").unlink()
    with pytest.raises(CalibrationRequestError, match=r"signals\.speed\.samples_file: cannot "
                                                      r"read samples file"):
        _load(tmp_path, doc)


def test_yaml_syntax_error_names_line(rig: Path, tmp_path: Path) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text("schema_version: {major: 3\nmanifest: [\n")
    with pytest.raises(CalibrationRequestError, match=r"broken\.yaml: not valid YAML \(line"):
        load_calibration_request(path)


SPEC_EXAMPLE = """\
schema_version:
  major: 3
  minor: 1
manifest: {manifest}

parameters:
  - id: wheel_damping
    unit: N_m_s_per_rad
    provenance: bench-test-2026-08
    lower: 0.01
    upper: 4.0
    initial: 0.4
    nominal: 0.5
    parameterization: log_positive
    target:
      type: mujoco
      kind: joint_damping
      object: wheel_joint
      component_index: 0

  - id: encoder_bias
    lower: -0.1
    upper: 0.1
    initial: 0.0
    parameterization: normalized_linear
    target:
      type: component_config
      component: wheel_encoder
      config_path: bias

observations:
  - id: wheel_position
    source: joint_position
    name: wheel_joint
    sample_every_steps: 1
  - id: imu_motion
    source: device_output
    name: chassis_imu
    sample_type: fibril_sim/imu_sample/v1

training:
  - id: run-01
    episode_seed: 9
    weight: 1.0
    initial_state:
      - type: joint
        joint: wheel_joint
        qpos: [0.0]
        qvel: [1.2]
    recorded_inputs:
      - source_id: motor/command
        source_sequence: 1
        payload_type: fibril_sim/motor_command/v1
        payload_json: '{{"mode":"duty","value":0.3}}'
        commit_tick: 0
        acceptance_sequence: 0
    signals:
      wheel_position:
        alignment: linear
        residual_scale: 0.002
        scale_semantics: measurement_standard_deviation
        samples:
          - time_ns: 10000000
            values: [0.011]
      imu_motion:
        alignment: nearest
        residual_scales: [0.01, 0.01, 0.01, 0.05, 0.05, 0.05]
        scale_semantics: measurement_standard_deviation
        samples:
          - time_ns: 12000000
            values: [0.0, 0.0, 0.2, 0.0, 0.0, 9.81]

validation:
  - id: run-held-out
    signals:
      wheel_position:
        alignment: exact
        residual_scale: 0.002
        scale_semantics: measurement_standard_deviation
        samples:
          - time_ns: 10000000
            values: [0.012]
      imu_motion:
        alignment: nearest
        residual_scales: [0.01, 0.01, 0.01, 0.05, 0.05, 0.05]
        scale_semantics: measurement_standard_deviation
        samples:
          - time_ns: 12000000
            values: [0.0, 0.0, 0.19, 0.0, 0.0, 9.81]

optimizer:
  type: ceres
  max_iterations: 50

objective:
  standardized_gaussian_residuals: true

execution:
  max_parallelism: 4
  cache_entries: 256

analysis:
  profile_likelihood:
    enabled: true
    samples_per_parameter: 21
  information_matrix: true

fit:
  max_training_rms: 3.0
  max_validation_rms: 4.0
  max_local_condition_number: 1000000
  max_episode_rms_ratio: 3.0
  reject_parameter_near_bound: true

context:
  metric_id: standardized_least_squares
  input_provenance: recording-sha256
  parameter_set_id: drivetrain-v3
  seed: 9
"""


def test_the_specification_example_loads_and_evaluates(tmp_path: Path) -> None:
    from fibril_calibration.model.decoders import STANDARD_DECODERS
    from fibril_calibration.solve.problem import CalibrationProblem

    manifest = Path(__file__).resolve().parents[2] / "config/examples/drivetrain/simulation.yaml"
    path = tmp_path / "calibration.yaml"
    path.write_text(SPEC_EXAMPLE.format(manifest=manifest))
    request = load_calibration_request(path)
    assert request.parameter_ids == ("wheel_damping", "encoder_bias")
    assert request.observations[1].components == ("gx", "gy", "gz", "ax", "ay", "az")
    assert request.context["parameter_set_id"] == "drivetrain-v3"
    with CalibrationProblem(request) as problem:
        training = problem.evaluate(request.initial_values)
        validation = problem.evaluate(request.initial_values, "validation")
    assert [(b.signal, b.stop - b.start) for b in training.blocks] == [
        ("wheel_position", 1), ("imu_motion", 6)]
    assert validation.residuals.shape == (7,)
    assert {d.sample_type.split("/")[1] for d in STANDARD_DECODERS} == {
        "digital_input_sample", "encoder_sample", "rangefinder_sample",
        "motor_feedback_sample", "body_kinematics_sample", "imu_sample"}


def test_a_long_model_name_list_is_never_cut(tmp_path: Path) -> None:
    """A model with 60 joints, 60 sensors and 61 bodies whose names make a list too long for a
    one-line error: an unknown name gives the count, where every name is (the model file) and
    the closest names, never a list cut after 16 with "..." (issue 24: errors never truncate
    a list the user needs); an unknown qpos / decoder component likewise."""
    from fibril_calibration.model.observations import parse_observation

    from fibril_sim_core import SimulationBuilder
    from fibril_sim_core import schema as s

    bodies = "".join(f'<body name="left_leg_segment_body_{n:02d}" pos="0 0 0.1">'
                     f'<joint name="left_leg_segment_joint_{n:02d}" type="hinge"/>'
                     f'<geom type="sphere" size="0.01" mass="0.1"/>' for n in range(60))
    sensors = "".join(f'<jointpos name="left_leg_segment_sensor_{n:02d}" '
                      f'joint="left_leg_segment_joint_{n:02d}"/>' for n in range(60))
    model = tmp_path / "chain.xml"
    model.write_text(f'<mujoco><worldbody>{bodies}{"</body>" * 60}</worldbody>'
                     f'<sensor>{sensors}</sensor></mujoco>')
    manifest = tmp_path / "chain.yaml"
    manifest.write_text(yaml.safe_dump({"schema_version": {"major": 3, "minor": 1},
                                        "model": "chain.xml", "components": []}))
    plan = SimulationBuilder().build(manifest)
    where = s.Where("request.yaml", "observations[0]", CalibrationRequestError)
    registry = CalibrationDeviceOutputDecoderRegistry.standard()

    def fails(raw: dict[str, Any]) -> str:
        with pytest.raises(CalibrationRequestError) as info:
            parse_observation(raw, where, plan, registry)
        text = str(info.value)
        assert " ..." not in text and len(text) < 1000, text
        return text

    text = fails({"id": "q", "source": "joint_position", "name": "left_leg_segmnt_joint_07"})
    assert ("no MuJoCo joint named 'left_leg_segmnt_joint_07' in the compiled model; 60 joints "
            f"in the model (every name: the model file {str(model)!r} and its includes); the "
            "closest: left_leg_segment_joint_") in text
    assert text.split("the closest: ")[1].startswith("left_leg_segment_joint_07")
    text = fails({"id": "s", "source": "sensor", "name": "left_leg_sensor_12"})
    assert "; 60 sensors in the model (every name: the model file" in text
    assert text.split("the closest: ")[1].startswith("left_leg_segment_sensor_12")
    text = fails({"id": "b", "source": "body_position", "name": "left_leg_segment_bdy_03"})
    assert "; 61 bodies in the model (every name: the model file" in text
    text = fails({"id": "raw", "source": "qpos", "indices": ["qpos[60]"]})
    assert "unknown component 'qpos[60]' of qpos; 60 components of qpos (qpos[0] to " \
           "qpos[59])" in text
