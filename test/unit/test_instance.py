"""SimulationInstance: determinism, the tick time model, reset, state injection, replay."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import mujoco
import numpy as np
import pytest
import yaml
from _models import (
    DRIVETRAIN,
    HINGE_XML,
    MOTOR_PAYLOAD,
    SCENE_XML,
    build,
    command,
    device,
    motor,
    write_manifest,
)

from fibril_sim_core import (
    ActuatorApplication,
    DeviceOutput,
    IngressError,
    IngressRecord,
    InstanceError,
    SimulationBuilder,
    SimulationPlan,
    StateSnapshot,
)

DT_NS = 1_000_000
SNAPSHOT_ARRAYS = ("qpos", "qvel", "act", "ctrl", "actuator_force", "sensordata", "xpos",
                   "xquat")


@pytest.fixture(scope="module")
def drivetrain() -> SimulationPlan:
    return SimulationBuilder().build(DRIVETRAIN)


def _canon(record: Any, *, episode_local: bool = False) -> tuple:
    """A hashable, bit-exact form of a record; ``episode_local`` drops episode/session time."""
    if isinstance(record, DeviceOutput):
        head = (record.device_id, record.sample_type, record.acquisition_tick,
                record.acquisition_time_ns, record.delivery_time_ns)
        if not episode_local:
            head += (record.episode, record.session_acquisition_time_ns,
                     record.session_delivery_time_ns)
        return ("device", *head, record.values.tobytes(), record.component_names,
                record.frame_id)
    if isinstance(record, StateSnapshot):
        head = (record.tick, record.time_ns)
        if not episode_local:
            head += (record.episode, record.session_time_ns)
        return ("state", *head, *(getattr(record, a).tobytes() for a in SNAPSHOT_ARRAYS))
    fields = {k: getattr(record, k) for k in record.__slots__}
    if episode_local:
        for key in ("episode", "session_time_ns"):
            fields.pop(key, None)
    return (type(record).__name__, repr(sorted(fields.items())))


def _run(plan: SimulationPlan, ticks: int, seed: int = 0, **kwargs: Any) -> list:
    instance = plan.create_instance(seed, **kwargs)
    instance.advance(ticks)
    return instance.poll()


def _devices(records: list, device_id: str | None = None) -> list[DeviceOutput]:
    return [r for r in records if isinstance(r, DeviceOutput)
            and (device_id is None or r.device_id == device_id)]


# ------------------------------------------------------------------ determinism
def test_same_plan_seed_and_inputs_give_identical_records(drivetrain: SimulationPlan) -> None:
    first = _run(drivetrain, 600, seed=7, snapshot_every=25)
    second = _run(drivetrain, 600, seed=7, snapshot_every=25)
    assert len(first) == len(second) == 300 + 120 + 30 + 60 + 300 + 24 + 2
    assert [_canon(r) for r in first] == [_canon(r) for r in second]
    kinds = {type(r).__name__ for r in first}
    assert kinds == {"DeviceOutput", "IngressRecord", "ActuatorApplication", "StateSnapshot"}


def test_other_seed_changes_noise_only(drivetrain: SimulationPlan) -> None:
    seven, eight = _run(drivetrain, 300, seed=7), _run(drivetrain, 300, seed=8)
    imu7, imu8 = _devices(seven, "chassis_imu"), _devices(eight, "chassis_imu")
    assert len(imu7) == len(imu8) == 60
    assert all(not np.array_equal(a.values, b.values) for a, b in zip(imu7, imu8))
    # Noise never feeds back into physics here: the noiseless ground truth is identical.
    pose7, pose8 = _devices(seven, "chassis_pose"), _devices(eight, "chassis_pose")
    assert [p.values.tobytes() for p in pose7] == [p.values.tobytes() for p in pose8]


def test_adding_a_device_leaves_other_devices_bit_identical(
        tmp_path: Path, drivetrain: SimulationPlan) -> None:
    doc = yaml.safe_load(DRIVETRAIN.read_text(encoding="utf-8"))
    doc["model"] = str(DRIVETRAIN.parent / "drivetrain.xml")
    doc["components"].insert(1, {"id": "aaa_extra_imu", "type": "fibril_sim/imu",
                                 "bind": {"site": "imu"},
                                 "config": {"period": 0.003, "gyro_noise": 0.2,
                                            "accel_noise": 0.3}})
    doc["components"].append({"id": "extra_lidar", "type": "fibril_sim/planar_lidar",
                              "bind": {"site": "lidar"},
                              "config": {"period": 0.007, "rays": 16, "noise": 0.01}})
    extended = SimulationBuilder().build(write_manifest(tmp_path, doc))
    base = _run(drivetrain, 500, seed=3)
    more = _run(extended, 500, seed=3)
    assert len(_devices(more, "aaa_extra_imu")) == 167
    assert len(_devices(more, "extra_lidar")) == 72
    for device_id in ("wheel_encoder", "chassis_imu", "front_range", "chassis_pose",
                      "drive_feedback"):
        ours = [_canon(r) for r in _devices(base, device_id)]
        theirs = [_canon(r) for r in _devices(more, device_id)]
        assert ours and ours == theirs, device_id


# ------------------------------------------------------------------ tick time model
@pytest.mark.parametrize(("period", "latency"), [(1, 0), (3, 5), (4, 1), (2, 2), (5, 3)])
def test_acquisition_and_delivery_at_tick_granularity(tmp_path: Path, period: int,
                                                      latency: int) -> None:
    plan = build(tmp_path, HINGE_XML, [device("enc", "encoder", {"joint": "shaft"},
                                              period=period / 1000, latency=latency / 1000)])
    descriptor = plan.device("enc")
    assert (descriptor.period_ticks, descriptor.latency_ticks) == (period, latency)
    instance = plan.create_instance()
    seen_at: dict[int, int] = {}
    for _ in range(40):
        instance.step()
        for output in _devices(instance.poll()):
            seen_at[output.acquisition_tick] = instance.tick
            assert output.acquisition_time_ns == output.acquisition_tick * DT_NS
            assert output.delivery_time_ns == (output.acquisition_tick + latency) * DT_NS
            assert output.session_delivery_time_ns == output.delivery_time_ns  # episode 0
    expected = [a for a in range(0, 40, period) if max(a + 1, a + latency) <= 40]
    assert sorted(seen_at) == expected
    for acquired, tick in seen_at.items():
        assert tick == max(acquired + 1, acquired + latency)


def test_advance_in_one_call_equals_single_steps(drivetrain: SimulationPlan) -> None:
    whole = drivetrain.create_instance(5, snapshot_every=7)
    whole.advance(733)
    single = drivetrain.create_instance(5, snapshot_every=7)
    for _ in range(733):
        single.step()
    mixed = drivetrain.create_instance(5, snapshot_every=7)
    for chunk in (1, 99, 3, 400, 0, 230):
        mixed.advance(chunk)
    reference = [_canon(r) for r in whole.poll()]
    assert reference == [_canon(r) for r in single.poll()]
    assert reference == [_canon(r) for r in mixed.poll()]
    assert whole.tick == single.tick == mixed.tick == 733
    for other in (single, mixed):
        np.testing.assert_array_equal(whole.data.qpos, other.data.qpos)
        np.testing.assert_array_equal(whole.data.qvel, other.data.qvel)
    assert whole.data.qpos[7] > 1.0  # the wheel really turned


def test_advance_rejects_negative_ticks(drivetrain: SimulationPlan) -> None:
    instance = drivetrain.create_instance()
    with pytest.raises(InstanceError, match="advance: ticks must be >= 0, got -1"):
        instance.advance(-1)
    assert instance.tick == 0


def test_encoder_output_equals_joint_qpos_at_acquisition_tick(tmp_path: Path) -> None:
    plan = build(tmp_path, HINGE_XML, [
        motor("m", "drive", "drive/command"),
        device("enc", "encoder", {"joint": "shaft"}, period=0.002, latency=0.003,
               counts_per_revolution=4096.0)])
    per_unit = plan.device("enc").binding["counts_per_unit"]
    assert per_unit == 4096.0 / (2 * math.pi)
    instance = plan.create_instance()
    instance.enqueue(command("drive/command", 0, "voltage", 3.0))
    raw = mujoco.MjData(plan.model)
    raw.ctrl[plan.model.actuator("drive").id] = 3.0
    qpos_at = {}
    for tick in range(300):
        qpos_at[tick] = float(raw.qpos[0])
        mujoco.mj_step(plan.model, raw)
    instance.advance(300)
    samples = _devices(instance.poll(), "enc")
    assert len(samples) == 149  # acquisitions 0..296; 298 is delivered at tick 301
    for sample in samples:
        position, _, counts = sample.values
        assert counts == float(round(qpos_at[sample.acquisition_tick] * per_unit))
        assert position == counts / per_unit
    assert samples[-1].values[0] > 1.0
    np.testing.assert_array_equal(instance.data.qpos, raw.qpos)


def test_state_snapshots_are_consistent_with_their_qpos(drivetrain: SimulationPlan) -> None:
    records = _run(drivetrain, 200, seed=0, snapshot_every=10)
    snapshots = [r for r in records if isinstance(r, StateSnapshot)]
    assert [s.tick for s in snapshots] == list(range(0, 200, 10))
    model = drivetrain.model
    check = mujoco.MjData(model)
    chassis = model.body("chassis").id
    for snapshot in snapshots:
        assert snapshot.time_ns == snapshot.tick * DT_NS
        check.qpos[:], check.qvel[:] = snapshot.qpos, snapshot.qvel
        mujoco.mj_forward(model, check)
        np.testing.assert_allclose(snapshot.xpos, check.xpos, rtol=0, atol=1e-12)
        np.testing.assert_allclose(snapshot.xquat, check.xquat, rtol=0, atol=1e-12)
        assert snapshot.xpos.shape == (model.nbody, 3)
    # The chassis pose device (latency 0) samples the same state at the same ticks.
    poses = {p.acquisition_tick: p.values for p in _devices(records, "chassis_pose")}
    for snapshot in snapshots:
        np.testing.assert_allclose(poses[snapshot.tick][:3], snapshot.xpos[chassis], atol=1e-12)


def test_snapshot_ctrl_is_the_ctrl_that_produced_its_actuator_force(tmp_path: Path) -> None:
    plan = build(tmp_path, HINGE_XML, [motor("m", "drive", "drive/command")])
    instance = plan.create_instance(snapshot_every=1)
    instance.enqueue(command("drive/command", 0, "voltage", 6.0))
    instance.advance(3)
    instance.enqueue(command("drive/command", 1, "voltage", -2.0))
    instance.advance(3)
    snapshots = [r for r in instance.poll() if isinstance(r, StateSnapshot)]
    assert [s.tick for s in snapshots] == [0, 1, 2, 3, 4, 5]
    assert [s.ctrl[0] for s in snapshots] == [6.0, 6.0, 6.0, -2.0, -2.0, -2.0]
    for snapshot in snapshots:
        # DC motor, K = 0.05, R = 2, gear 10: force = K (V - K · 10 · qvel) / R.
        expected = 0.05 * (snapshot.ctrl[0] - 0.05 * 10 * snapshot.qvel[0]) / 2.0
        assert snapshot.actuator_force[0] == pytest.approx(expected, rel=1e-9)


# ------------------------------------------------------------------ reset
def test_reset_restarts_episode_and_keeps_session_time(drivetrain: SimulationPlan) -> None:
    instance = drivetrain.create_instance(11)
    keyframe = drivetrain.model.key_qpos[drivetrain.keyframe_id].copy()
    np.testing.assert_array_equal(instance.data.qpos, keyframe)
    instance.advance(300)
    first = instance.poll()
    assert instance.session_time_ns == 300 * DT_NS
    assert not np.array_equal(instance.data.qpos, keyframe)
    instance.reset()
    assert (instance.tick, instance.episode, instance.episode_time_ns) == (0, 1, 0)
    assert instance.session_time_ns == 300 * DT_NS
    np.testing.assert_array_equal(instance.data.qpos, keyframe)
    assert not instance.data.qvel.any()
    instance.advance(300)
    second = instance.poll()
    assert instance.session_time_ns == 600 * DT_NS
    # Same seed: the episode repeats exactly, only episode number and session time differ.
    assert [_canon(r, episode_local=True) for r in first] == \
        [_canon(r, episode_local=True) for r in second]
    assert {r.episode for r in second if isinstance(r, DeviceOutput)} == {1}
    for a, b in zip(_devices(first), _devices(second)):
        assert b.session_acquisition_time_ns == a.session_acquisition_time_ns + 300 * DT_NS
        assert b.session_delivery_time_ns == a.session_delivery_time_ns + 300 * DT_NS
    # Session time never goes back, across every record of both episodes.
    session = [r.session_delivery_time_ns for r in _devices(first + second)]
    assert session[-1] > session[0] and min(s for s in session[len(_devices(first)):]) >= \
        300 * DT_NS


def test_reset_with_new_seed_or_keyframe(tmp_path: Path) -> None:
    plan = build(tmp_path, HINGE_XML, [device("enc", "encoder", {"joint": "shaft"},
                                              noise_counts=3.0)])
    instance = plan.create_instance(1)
    instance.advance(20)
    first = [o.values.tobytes() for o in _devices(instance.poll())]
    instance.reset(seed=2)
    assert instance.seed == 2
    instance.advance(20)
    assert [o.values.tobytes() for o in _devices(instance.poll())] != first
    instance.reset(keyframe="quarter")
    assert instance.data.qpos[0] == pytest.approx(math.pi / 2)
    assert instance.data.qpos[1] == pytest.approx(0.1)
    with pytest.raises(InstanceError, match="reset: no keyframe named 'launch' in the model"):
        instance.reset(keyframe="launch")


# ------------------------------------------------------------------ inject_state
def test_inject_state_sets_joint_qpos_and_qvel(drivetrain: SimulationPlan) -> None:
    instance = drivetrain.create_instance()
    model = drivetrain.model
    wheel = model.joint("wheel_joint")
    instance.inject_state([
        {"type": "joint", "joint": "wheel_joint", "qpos": [0.25], "qvel": [3.0]},
        {"type": "joint", "joint": "chassis_free", "qpos": [1, 2, 0.05, 1, 0, 0, 0]}])
    assert instance.data.qpos[wheel.qposadr[0]] == 0.25
    assert instance.data.qvel[wheel.dofadr[0]] == 3.0
    np.testing.assert_array_equal(instance.data.qpos[:3], [1, 2, 0.05])
    instance.advance(20)
    encoder = _devices(instance.poll(), "wheel_encoder")[0]
    assert encoder.acquisition_tick == 0
    assert encoder.values[0] == pytest.approx(0.25, abs=2 * 2 * math.pi / 1024)


@pytest.mark.parametrize(("entry", "message"), [
    ({"type": "joint", "joint": "wheel_joint", "qpos": [0.1, 0.2]},
     "inject_state[0].qpos: expected 1 value(s), got 2"),
    ({"type": "joint", "joint": "chassis_free", "qvel": [0.0] * 7},
     "inject_state[0].qvel: expected 6 value(s), got 7"),
    ({"type": "joint", "joint": "nope", "qpos": [0.0]},
     "inject_state[0].joint: no MuJoCo joint named 'nope'"),
    ({"type": "joint", "joint": "wheel_joint", "qvel": [float("nan")]},
     "inject_state[0].qvel: values must be finite, got [nan]"),
    ({"type": "joint", "joint": "wheel_joint", "qpos": [float("inf")]},
     "inject_state[0].qpos: values must be finite, got [inf]"),
    ({"type": "mocap", "body": "chassis", "pos": [0, 0, 0]},
     "inject_state[0].body: body 'chassis' is not a mocap body"),
    ({"type": "teleport"}, ("inject_state[0].type: expected joint, mocap or actuator, got "
                            "'teleport'")),
])
def test_inject_state_errors(drivetrain: SimulationPlan, entry: dict, message: str) -> None:
    instance = drivetrain.create_instance()
    before = instance.data.qpos.copy(), instance.data.qvel.copy()
    with pytest.raises(InstanceError) as info:
        instance.inject_state([entry])
    assert str(info.value) == message
    np.testing.assert_array_equal(instance.data.qpos, before[0])
    np.testing.assert_array_equal(instance.data.qvel, before[1])


# ------------------------------------------------------------------ recorded inputs
def _recorded(source: str, sequence: int, value: float, tick: int, acceptance: int,
              accepted: bool = True) -> IngressRecord:
    payload = f'{{"mode":"voltage","value":{value}}}'
    return IngressRecord(0, source, sequence, MOTOR_PAYLOAD, payload, accepted, tick, acceptance,
                         "", 0)


def test_recorded_inputs_commit_at_recorded_tick_in_acceptance_order(tmp_path: Path) -> None:
    plan = build(tmp_path, HINGE_XML, [motor("m", "drive", "drive/command"),
                                       motor("p", "push", "push/command")])
    instance = plan.create_instance()
    queued = instance.enqueue_recorded_trace_inputs([
        _recorded("drive/command", 2, 3.0, tick=5, acceptance=7),
        _recorded("drive/command", 1, 2.0, tick=5, acceptance=4),
        _recorded("drive/command", 0, 1.0, tick=2, acceptance=1),
        _recorded("drive/command", 9, 9.0, tick=3, acceptance=2, accepted=False),  # skipped
        {"source_id": "drive/command", "source_sequence": 3, "payload_type": MOTOR_PAYLOAD,
         "payload_json": '{"mode":"voltage","value":4.0}', "commit_tick": 9,
         "acceptance_sequence": 8},
    ])
    assert queued == 4
    ctrl_at = {}
    for _ in range(12):
        instance.step()
        ctrl_at[instance.tick] = float(instance.data.ctrl[0])
    records = instance.poll()
    commits = [r for r in records if isinstance(r, IngressRecord)]
    assert [(r.source_sequence, r.commit_tick, r.acceptance_sequence) for r in commits] == \
        [(0, 2, 1), (1, 5, 4), (2, 5, 7), (3, 9, 8)]
    assert all(r.accepted for r in commits)
    applications = [r for r in records if isinstance(r, ActuatorApplication)]
    assert [(a.tick, a.applied) for a in applications] == [(2, 1.0), (5, 2.0), (5, 3.0),
                                                           (9, 4.0)]
    assert [ctrl_at[t] for t in range(1, 13)] == [0, 1, 1, 1, 3, 3, 3, 3, 4, 4, 4, 4]


@pytest.mark.parametrize(("records", "message"), [
    ([_recorded("drive/command", 0, 1.0, tick=1, acceptance=0)],
     "recorded input ('drive/command' sequence 0): commit_tick 1 is before the current tick 4"),
    ([_recorded("drive/command", 3, 1.0, tick=5, acceptance=0),
      _recorded("drive/command", 2, 1.0, tick=6, acceptance=1)],
     "recorded input 'drive/command': source_sequence 2 does not increase in acceptance order"),
    ([_recorded("brake/command", 0, 1.0, tick=5, acceptance=0)],
     "unknown source_id 'brake/command'; known sources: drive/command"),
    ([{"source_id": "drive/command"}],
     ("recorded input 0: missing source_sequence, payload_type, payload_json, commit_tick, "
      "acceptance_sequence")),
])
def test_recorded_inputs_errors(tmp_path: Path, records: list, message: str) -> None:
    plan = build(tmp_path, HINGE_XML, [motor("m", "drive", "drive/command")])
    instance = plan.create_instance()
    instance.advance(4)
    with pytest.raises(IngressError) as info:
        instance.enqueue_recorded_trace_inputs(records)
    assert str(info.value) == message
    instance.advance(10)
    assert not [r for r in instance.poll() if isinstance(r, ActuatorApplication)]


def test_scenario_initial_inputs_commit_at_tick_zero_every_episode(
        drivetrain: SimulationPlan) -> None:
    instance = drivetrain.create_instance()
    instance.advance(5)
    instance.reset()
    instance.advance(5)
    records = instance.poll()
    commits = [r for r in records if isinstance(r, IngressRecord)]
    applications = [r for r in records if isinstance(r, ActuatorApplication)]
    assert [(r.episode, r.commit_tick, r.accepted) for r in commits] == [(0, 0, True),
                                                                        (1, 0, True)]
    # command_latency 2 ms: released two ticks after the commit; duty 0.5 × 12 V.
    assert [(a.episode, a.tick, a.applied) for a in applications] == [(0, 2, 6.0), (1, 2, 6.0)]
    assert applications[1].session_time_ns == 7 * DT_NS


def test_instances_from_one_plan_share_no_state(tmp_path: Path) -> None:
    plan = build(tmp_path, SCENE_XML, [device("imu", "imu", {"site": "block_imu"})])
    a, b = plan.create_instance(), plan.create_instance()
    a.inject_state([{"type": "joint", "joint": "block_free", "qvel": [0, 0, 5, 0, 0, 0]}])
    a.advance(10)
    b.advance(10)
    assert a.data.qpos[2] > b.data.qpos[2] + 0.03
    assert a.tick == b.tick == 10
