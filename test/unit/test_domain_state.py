"""Domain state (concepts: a SimulationInstance isolates MuJoCo state, times, device queues,
actuator driver state, inputs, domain state, RNG and trace state): what components keep outside
MuJoCo is per instance and reset by ``reset()``. See docs/concepts/domain_state.md.

Every standard component type that keeps such state is in one plan here: noise streams (all
noisy devices), the encoder's last position (its velocity), the lidar's ray buffers, the motor
endpoint's transport queue (command latency), the digital input's binding. Two instances of the
plan must not see each other, and an episode after ``reset()`` must repeat the first exactly.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from fibril_sim_core import SimulationBuilder, external_input
from fibril_sim_core.records import ActuatorApplication, DeviceOutput

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "config" / "examples" / "drivetrain"
PAYLOAD = "fibril_sim/motor_command/v1"
TICKS = 240
#: Component types of this plan and the domain state each keeps (the docs page's table).
STATEFUL = {
    "fibril_sim/motor": "transport queue of released commands (command latency)",
    "fibril_sim/encoder": "noise stream, last quantized position",
    "fibril_sim/imu": "noise stream",
    "fibril_sim/rangefinder": "noise stream",
    "fibril_sim/body_kinematics": "noise stream",
    "fibril_sim/motor_feedback": "noise stream",
    "fibril_sim/planar_lidar": "noise stream, ray buffers",
    "fibril_sim/digital_input": "noise stream (unused), delivery queue",
}


@pytest.fixture(scope="module")
def plan(tmp_path_factory: pytest.TempPathFactory) -> Any:
    document = yaml.safe_load((EXAMPLE / "simulation.yaml").read_text())
    document["model"] = str(EXAMPLE / document["model"])
    by_id = {c["id"]: c for c in document["components"]}
    by_id["chassis_pose"]["config"].update(position_noise=0.01, velocity_noise=0.02)
    by_id["drive_feedback"]["config"].update(force_noise=0.1, velocity_noise=0.1)
    document["components"] += [
        {"id": "lidar", "type": "fibril_sim/planar_lidar", "bind": {"site": "lidar"},
         "config": {"period": 0.01, "latency": 0.003, "rays": 16, "noise": 0.01}},
        {"id": "wheel_switch", "type": "fibril_sim/digital_input",
         "bind": {"joint": "wheel_joint"}, "config": {"period": 0.004, "threshold": 0.5}},
    ]
    path = tmp_path_factory.mktemp("domain") / "simulation.yaml"
    path.write_text(yaml.safe_dump(document))
    built = SimulationBuilder().build(path)
    assert {d.type for d in built.devices} | {a.type for a in built.actuators} == set(STATEFUL)
    return built


def _commands(instance: Any, start: int, values: list[float]) -> None:
    for n, value in enumerate(values):
        instance.enqueue(external_input("motor/command", start + n, PAYLOAD,
                                        {"mode": "voltage", "value": value}))


def _episode(records: list[Any]) -> dict[str, list[Any]]:
    """Per device id and per endpoint: what the episode delivered / applied, in episode time."""
    out: dict[str, list[Any]] = {}
    for record in records:
        if isinstance(record, DeviceOutput):
            out.setdefault(record.device_id, []).append(
                (record.acquisition_tick, record.delivery_time_ns, record.values.tolist()))
        elif isinstance(record, ActuatorApplication):
            out.setdefault(record.endpoint, []).append(
                (record.tick, record.mode, record.applied))
    return out


def _reference(plan: Any) -> dict[str, list[Any]]:
    instance = plan.create_instance(7)
    instance.advance(30)
    _commands(instance, 1, [4.0, -2.0])
    instance.advance(TICKS - 30)
    return _episode(instance.poll())


def test_every_component_type_is_isolated_between_two_instances(plan: Any) -> None:
    reference = _reference(plan)
    assert set(reference) == {d.id for d in plan.devices} | {"motor/command"}
    a, b = plan.create_instance(7), plan.create_instance(7)
    assert not ({id(x) for x in a._device_reads.devices}
                & {id(x) for x in b._device_reads.devices})
    assert not {id(x) for x in a._endpoints} & {id(x) for x in b._endpoints}
    # Interleaved, with A given other commands, another seed mid-run and a reset: B must
    # deliver what an instance alone delivers.
    a.advance(17)
    b.advance(30)
    _commands(a, 1, [9.0, 1.0, -6.0])
    _commands(b, 1, [4.0, -2.0])
    for chunk in (13, 41, 7, 59, 90):
        a.advance(chunk)
        b.advance(chunk)
    a.reset(seed=99)
    a.advance(40)
    assert b.tick == TICKS
    assert _episode(b.poll()) == reference
    noisy = [d for d in plan.devices if d.type != "fibril_sim/digital_input"]
    assert all(reference[d.id] for d in noisy)


def test_reset_restarts_every_component_state(plan: Any) -> None:
    reference = _reference(plan)
    instance = plan.create_instance(7)
    instance.advance(50)
    _commands(instance, 1, [12.0])
    instance.advance(1)  # committed: released 2 ticks later (command latency)
    instance.poll()
    instance.reset()  # the released-but-unapplied command must not reach the new episode
    instance.advance(30)
    _commands(instance, 2, [4.0, -2.0])
    instance.advance(TICKS - 30)
    records = instance.poll()
    assert {r.episode for r in records if hasattr(r, "episode")} == {1}
    assert _episode(records) == reference


def test_another_seed_changes_only_the_noise_streams(plan: Any) -> None:
    reference = _reference(plan)
    instance = plan.create_instance(8)
    instance.advance(30)
    _commands(instance, 1, [4.0, -2.0])
    instance.advance(TICKS - 30)
    other = _episode(instance.poll())
    assert other["motor/command"] == reference["motor/command"]
    for device in plan.devices:
        if device.type == "fibril_sim/digital_input":
            continue  # no noise
        assert not np.array_equal(np.array([v for *_, v in other[device.id]]),
                                  np.array([v for *_, v in reference[device.id]])), device.id
