"""Manifest and plan construction errors: each names the file, the key path and the value."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
from _models import (
    HINGE_XML,
    MOTOR_PAYLOAD,
    device,
    manifest_doc,
    motor,
    write_manifest,
    write_model,
)

from fibril_sim_core import FibrilError, ManifestError, SimulationBuilder, load_manifest

ENCODER = device("enc", "encoder", {"joint": "shaft"}, period=0.002)
MOTOR = motor("drive_motor", "drive", "motor/command")


def _base() -> dict[str, Any]:
    return manifest_doc([MOTOR, ENCODER], scenario={"keyframe": "quarter"})


def _write(tmp_path: Path, doc: dict[str, Any]) -> Path:
    write_model(tmp_path, HINGE_XML)
    return write_manifest(tmp_path, doc).resolve()


def _load_error(tmp_path: Path, doc: dict[str, Any]) -> tuple[str, Path]:
    path = _write(tmp_path, doc)
    with pytest.raises(ManifestError) as info:
        load_manifest(path)
    return str(info.value), path


def _build_error(tmp_path: Path, doc: dict[str, Any]) -> tuple[str, Path]:
    path = _write(tmp_path, doc)
    with pytest.raises(FibrilError) as info:
        SimulationBuilder().build(path)
    return str(info.value), path


def test_valid_manifest_loads_and_builds(tmp_path: Path) -> None:
    path = _write(tmp_path, _base())
    manifest = load_manifest(path)
    assert manifest.path == path
    assert manifest.model == path.parent / "model.xml"
    assert [c.id for c in manifest.components] == ["drive_motor", "enc"]
    assert len(manifest.sha256) == 64
    plan = SimulationBuilder().build(manifest)
    assert plan.timebase.timestep_ns == 1_000_000
    assert plan.device("enc").period_ticks == 2
    assert plan.endpoints["motor/command"].actuator == "drive"
    assert plan.keyframe_id == 0


def test_unknown_top_level_key(tmp_path: Path) -> None:
    doc = _base()
    doc["colour"] = "blue"
    message, path = _load_error(tmp_path, doc)
    assert message.startswith(f"{path}: colour: unknown key; expected one of: ")
    for key in ("components", "model", "profiles", "scenario", "schema_version"):
        assert key in message


def test_timestep_key_points_to_mjcf(tmp_path: Path) -> None:
    doc = _base()
    doc["timestep"] = 0.001
    message, path = _load_error(tmp_path, doc)
    assert message.startswith(f"{path}: timestep: ")
    assert "<option timestep=...> in the MJCF" in message


def test_wrong_schema_version(tmp_path: Path) -> None:
    doc = _base()
    doc["schema_version"] = {"major": 2, "minor": 0}
    message, path = _load_error(tmp_path, doc)
    assert message == (f"{path}: schema_version: unsupported schema version 2.0; "
                       f"expected 3.0, 3.1")


def test_missing_model_file(tmp_path: Path) -> None:
    doc = _base()
    doc["model"] = "nope.xml"
    message, path = _load_error(tmp_path, doc)
    assert message.startswith(f"{path}: model: model file ")
    assert str(path.parent / "nope.xml") in message
    assert "does not exist" in message


def test_missing_manifest_file(tmp_path: Path) -> None:
    missing = tmp_path / "absent.yaml"
    with pytest.raises(ManifestError, match="absent.yaml: file not found"):
        load_manifest(missing)


def test_unknown_component_type_lists_known_types(tmp_path: Path) -> None:
    doc = _base()
    doc["components"][1]["type"] = "fibril_sim/warp_drive"
    message, path = _build_error(tmp_path, doc)
    assert message.startswith(
        f"{path}: components[1].type: unknown component type 'fibril_sim/warp_drive'; known: ")
    for known in ("fibril_sim/encoder", "fibril_sim/imu", "fibril_sim/motor",
                  "fibril_sim/planar_lidar", "fibril_sim/camera"):
        assert known in message


def test_unknown_profile(tmp_path: Path) -> None:
    doc = _base()
    doc["profiles"] = {"fine": {"type": "fibril_sim/encoder",
                                "config": {"counts_per_revolution": 8192}}}
    doc["components"][1]["profile"] = "coarse"
    message, path = _load_error(tmp_path, doc)
    assert message == f"{path}: components[1].profile: unknown profile 'coarse'; known: fine"


def test_profile_type_mismatch(tmp_path: Path) -> None:
    doc = _base()
    doc["profiles"] = {"imu_profile": {"type": "fibril_sim/imu", "config": {}}}
    doc["components"][1]["profile"] = "imu_profile"
    message, path = _load_error(tmp_path, doc)
    assert message == (f"{path}: components[1].profile: profile 'imu_profile' is for type "
                       f"'fibril_sim/imu', not 'fibril_sim/encoder'")


def test_profile_config_is_composed_with_instance_config(tmp_path: Path) -> None:
    doc = _base()
    doc["profiles"] = {"fine": {"type": "fibril_sim/encoder",
                                "config": {"counts_per_revolution": 8192, "bias": 0.5}}}
    doc["components"][1]["profile"] = "fine"
    doc["components"][1]["config"]["bias"] = 0.25
    plan = SimulationBuilder().build(_write(tmp_path, doc))
    config = plan.device("enc").config
    assert config["counts_per_revolution"] == 8192.0
    assert config["bias"] == 0.25  # the instance wins


def test_duplicate_component_id(tmp_path: Path) -> None:
    doc = _base()
    doc["components"].append(copy.deepcopy(ENCODER))
    message, path = _load_error(tmp_path, doc)
    assert message == (f"{path}: components[2].id: duplicate component id 'enc' "
                       f"(first declared at components[1])")


def test_unknown_config_key(tmp_path: Path) -> None:
    doc = _base()
    doc["components"][1]["config"]["colour"] = "red"
    message, path = _build_error(tmp_path, doc)
    assert message.startswith(f"{path}: components[1].config.colour: unknown key; expected one "
                              f"of: ")
    assert "counts_per_revolution" in message and "period" in message


def test_wrong_value_type(tmp_path: Path) -> None:
    doc = _base()
    doc["components"][1]["config"]["counts_per_revolution"] = "lots"
    message, path = _build_error(tmp_path, doc)
    assert message == (f"{path}: components[1].config.counts_per_revolution: expected a number, "
                       f"got str 'lots'")


def test_missing_required_period(tmp_path: Path) -> None:
    doc = _base()
    del doc["components"][1]["config"]["period"]
    message, path = _build_error(tmp_path, doc)
    assert message == f"{path}: components[1].config.period: missing required key"


@pytest.mark.parametrize(("key", "value", "nearest"), [
    ("period", 0.0015, "0.001 s or 0.002 s"),
    ("latency", 0.0025, "0.002 s or 0.003 s"),
])
def test_non_whole_tick_duration_names_nearest_valid_values(
        tmp_path: Path, key: str, value: float, nearest: str) -> None:
    doc = _base()
    doc["components"][1]["config"][key] = value
    message, path = _build_error(tmp_path, doc)
    assert message.startswith(f"{path}: components[1].config.{key}: {value:g} s is not a whole "
                              f"number of physics steps (timestep 0.001 s)")
    assert message.endswith(f"nearest valid: {nearest}")


def test_non_whole_tick_command_latency(tmp_path: Path) -> None:
    doc = _base()
    doc["components"][0]["config"] = {"command_latency": 0.0005}
    message, path = _build_error(tmp_path, doc)
    assert f"{path}: components[0].config.command_latency: 0.0005 s" in message
    assert "nearest valid: 0 s or 0.001 s" in message


@pytest.mark.parametrize("period", [1e-9, 0.0004])
def test_period_shorter_than_one_tick_is_rejected(tmp_path: Path, period: float) -> None:
    """A period must be at least one tick; the hint never offers 0 s."""
    doc = _base()
    doc["components"][1]["config"]["period"] = period
    message, path = _build_error(tmp_path, doc)
    assert message.startswith(f"{path}: components[1].config.period: {period:g} s ")
    assert message.endswith("nearest valid: 0.001 s")


def test_unknown_binding_name_lists_known_joints(tmp_path: Path) -> None:
    doc = _base()
    doc["components"][1]["bind"] = {"joint": "nope"}
    message, path = _build_error(tmp_path, doc)
    assert message == (f"{path}: components[1].bind.joint: no MuJoCo joint named 'nope' in the "
                       f"model; known: shaft, rail, lift, axle")


def test_unknown_actuator_binding_lists_known_actuators(tmp_path: Path) -> None:
    doc = _base()
    doc["components"][0]["bind"] = {"actuator": "warp"}
    message, path = _build_error(tmp_path, doc)
    assert message == (f"{path}: components[0].bind.actuator: no MuJoCo actuator named 'warp' "
                       f"in the model; known: drive, push, servo, speed")


def test_unknown_bind_key(tmp_path: Path) -> None:
    doc = _base()
    doc["components"][1]["bind"] = {"joint": "shaft", "site": "x"}
    message, path = _build_error(tmp_path, doc)
    assert message == f"{path}: components[1].bind.site: unknown key; expected one of: joint"


def test_unknown_keyframe(tmp_path: Path) -> None:
    doc = _base()
    doc["scenario"] = {"keyframe": "launch"}
    message, path = _build_error(tmp_path, doc)
    assert message == (f"{path}: scenario.keyframe: no keyframe named 'launch'; "
                       f"known: quarter")


def _initial(**overrides: Any) -> dict[str, Any]:
    item = {"source_id": "motor/command", "source_sequence": 0, "payload_type": MOTOR_PAYLOAD,
            "payload": {"mode": "duty", "value": 0.5}}
    item.update(overrides)
    return item


def test_initial_input_unknown_source(tmp_path: Path) -> None:
    doc = _base()
    doc["scenario"]["initial_inputs"] = [_initial(source_id="brake/command")]
    message, path = _build_error(tmp_path, doc)
    assert message == (f"{path}: scenario.initial_inputs[0].source_id: unknown source "
                       f"'brake/command'; endpoints: motor/command")


def test_initial_input_bad_payload(tmp_path: Path) -> None:
    doc = _base()
    doc["scenario"]["initial_inputs"] = [_initial(payload={"mode": "warp", "value": 1})]
    message, path = _build_error(tmp_path, doc)
    assert message.startswith(f"{path}: scenario.initial_inputs[0].payload: payload 'mode' must "
                              f"be one of duty, voltage, torque, velocity, position, got 'warp'")


def test_initial_input_mode_not_accepted(tmp_path: Path) -> None:
    doc = _base()
    doc["scenario"]["initial_inputs"] = [_initial(payload={"mode": "torque", "value": 1})]
    message, path = _build_error(tmp_path, doc)
    assert message == (f"{path}: scenario.initial_inputs[0].payload: mode 'torque' is not "
                       f"accepted by actuator 'drive' (a DC motor: inputs voltage); accepted: "
                       f"voltage, duty")


def test_initial_input_wrong_payload_type(tmp_path: Path) -> None:
    doc = _base()
    doc["scenario"]["initial_inputs"] = [_initial(payload_type="fibril_sim/other/v1")]
    message, path = _build_error(tmp_path, doc)
    assert message == (f"{path}: scenario.initial_inputs[0].payload_type: 'fibril_sim/other/v1' "
                       f"is not accepted by 'motor/command'; expected '{MOTOR_PAYLOAD}'")


def test_initial_input_missing_key(tmp_path: Path) -> None:
    doc = _base()
    item = _initial()
    del item["source_sequence"]
    doc["scenario"]["initial_inputs"] = [item]
    message, path = _load_error(tmp_path, doc)
    assert message == f"{path}: scenario.initial_inputs[0].source_sequence: missing required key"


def test_endpoint_on_a_device(tmp_path: Path) -> None:
    doc = _base()
    doc["components"][1]["endpoint"] = "enc/command"
    message, path = _build_error(tmp_path, doc)
    assert message == (f"{path}: components[1].endpoint: only actuator components have an "
                       f"endpoint; fibril_sim/encoder is a device")


def test_duplicate_endpoint(tmp_path: Path) -> None:
    doc = _base()
    doc["components"].append(motor("push_motor", "push", "motor/command"))
    message, path = _build_error(tmp_path, doc)
    assert message == (f"{path}: components[2].endpoint: endpoint 'motor/command' is already "
                       f"used by component 'drive_motor'")


def test_unknown_runtime_mode(tmp_path: Path) -> None:
    doc = _base()
    doc["runtime"] = {"mode": "turbo"}
    message, path = _load_error(tmp_path, doc)
    assert message == (f"{path}: runtime.mode: unknown mode 'turbo'; expected one of paused, "
                       f"lockstep, realtime, fast")


def test_not_valid_yaml_names_line(tmp_path: Path) -> None:
    write_model(tmp_path, HINGE_XML)
    path = (tmp_path / "simulation.yaml")
    path.write_text("schema_version: {major: 3\nmodel: [\n", encoding="utf-8")
    with pytest.raises(ManifestError, match=r"simulation.yaml: not valid YAML \(line \d+"):
        load_manifest(path)
