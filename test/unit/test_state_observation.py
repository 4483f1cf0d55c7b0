"""Ground-truth state observations (joint states, body frames) on the simulated clock's grid,
and entity states read and set through the ingress."""

from __future__ import annotations

from pathlib import Path

import mujoco
import numpy as np
import pytest

from fibril_sim_core.entities import ENTITY_PAYLOAD_TYPE, ENTITY_SOURCE
from fibril_sim_core.errors import IngressError, InstanceError
from fibril_sim_core.ingress import external_input
from fibril_sim_core.manifest import RuntimeOptions
from fibril_sim_core.plan import SimulationBuilder
from fibril_sim_core.runtime import SimulationRuntime
from fibril_sim_core.runtime.observation import static_frames

MODEL = """<mujoco><option timestep="0.002"/><worldbody>
  <body name="box" pos="0 0 1"><freejoint/><geom type="box" size=".1 .1 .1"/></body>
  <body name="base" pos="0.5 0 0" quat="0.7071068 0 0 0.7071068">
    <geom type="box" size=".05 .05 .05"/>
    <body name="arm" pos="0 0 0.1"><joint name="shoulder" type="hinge" axis="0 1 0"/>
      <geom type="capsule" size=".02" fromto="0 0 0 .3 0 0"/>
      <body name="slider" pos="0.3 0 0"><joint name="slide" type="slide" axis="1 0 0"/>
        <geom type="sphere" size=".03"/></body></body></body>
  <body name="target" mocap="true" pos="1 1 1"><geom type="sphere" size=".05" contype="0"/></body>
</worldbody>
<actuator><motor name="m" joint="shoulder"/><position name="p" joint="slide" kp="100"/></actuator>
</mujoco>"""
MANIFEST = """schema_version: {major: 3, minor: 1}
model: m.xml
components:
  - {id: motor, type: fibril_sim/motor, bind: {actuator: m}}
"""


@pytest.fixture()
def plan(tmp_path: Path):
    (tmp_path / "m.xml").write_text(MODEL)
    (tmp_path / "s.yaml").write_text(MANIFEST)
    return SimulationBuilder().build(tmp_path / "s.yaml")


@pytest.fixture()
def runtime(plan):
    runtime = SimulationRuntime(plan, seed=0, options=RuntimeOptions(
        mode="fast", real_time_factor=1.0, frame_duration_s=0.01, start_paused=True))
    runtime.start()
    yield runtime
    runtime.stop()


def _quat_rotate(q: np.ndarray, v: np.ndarray) -> np.ndarray:
    out = np.empty(3)
    mujoco.mju_rotVecQuat(out, v, q)
    return out


def test_observations_fall_exactly_on_the_rate_grid(runtime) -> None:
    connection = runtime.connect()
    got = []
    connection.on_record(got.append, kinds="state_observation")
    connection.step(7)  # the stream starts off the grid: its first stamp is the next grid tick
    connection.observe(50.0)
    for chunk in (3, 17, 250, 1, 229):  # frames that end anywhere between grid points
        connection.step(chunk)
    stamps = [o.session_time_ns for o in got]
    assert stamps == [20_000_000 * k for k in range(1, 1 + len(stamps))]
    assert len(stamps) == (7 + 500) * 2_000_000 // 20_000_000
    layout = connection.state_layout()
    assert layout.joint_names == ("shoulder", "slide")
    assert all(o.joint_position.shape == (2,) and o.frame_position.shape == (0,) for o in got)


def test_joint_states_are_the_state_and_effort_the_actuator_force(runtime, plan) -> None:
    connection = runtime.connect()
    got = []
    connection.on_record(got.append, kinds="state_observation")
    connection.submit(external_input("motor", 1, "fibril_sim/motor_command/v1",
                                     {"mode": "torque", "value": 0.5}))
    connection.observe(100.0)
    state = connection.step(100)
    last = got[-1]
    assert last.session_time_ns == state["session_time_ns"]
    model = plan.model
    shoulder = model.joint("shoulder")
    assert last.joint_position[0] == pytest.approx(state["qpos"][shoulder.qposadr[0]])
    assert last.joint_velocity[0] == pytest.approx(state["qvel"][shoulder.dofadr[0]])
    assert last.joint_effort[0] == pytest.approx(0.5)  # the motor's force on its dof


def test_frames_are_poses_relative_to_the_parent_at_the_current_state(runtime, plan) -> None:
    connection = runtime.connect()
    got = []
    connection.on_record(got.append, kinds="state_observation")
    connection.submit(external_input("motor", 1, "fibril_sim/motor_command/v1",
                                     {"mode": "torque", "value": 2.0}))
    connection.observe(500.0, joints=False, frames=True)
    state = connection.step(200)
    layout = connection.state_layout()
    assert layout.frame_names == ("box", "arm", "slider", "target")
    assert layout.frame_parents == ("world", "base", "arm", "world")
    last = got[-1]
    # Compose the relative frames back to world poses and compare with MuJoCo's kinematics
    # of the state the observation was taken at.
    model = plan.model
    data = mujoco.MjData(model)
    data.qpos[:] = state["qpos"]
    mujoco.mj_kinematics(model, data)
    world = {"world": (np.zeros(3), np.array([1.0, 0, 0, 0]))}
    for frame in static_frames(model):
        parent_pos, parent_quat = world[frame.parent]
        quat = np.empty(4)
        mujoco.mju_mulQuat(quat, parent_quat, np.array(frame.orientation))
        world[frame.name] = (parent_pos + _quat_rotate(parent_quat, np.array(frame.position)),
                             quat)
    for name, parent, pos, quat in zip(layout.frame_names, layout.frame_parents,
                                       last.frame_position, last.frame_orientation,
                                       strict=True):
        parent_pos, parent_quat = world[parent]
        composed = np.empty(4)
        mujoco.mju_mulQuat(composed, parent_quat, quat)
        world[name] = (parent_pos + _quat_rotate(parent_quat, pos), composed)
        body = model.body(name).id
        np.testing.assert_allclose(world[name][0], data.xpos[body], atol=1e-12)
        assert abs(np.dot(world[name][1], data.xquat[body])) == pytest.approx(1.0, abs=1e-12)
    assert abs(data.qpos[model.joint("shoulder").qposadr[0]]) > 0.01  # it did move


def test_a_rate_off_the_physics_grid_is_refused_with_the_nearest_rates(runtime) -> None:
    connection = runtime.connect()
    with pytest.raises(InstanceError, match=r"rate 33 Hz .* 0\.002 s; nearest valid rates: "
                                            r"33\.3333 Hz or 31\.25 Hz"):
        connection.observe(33.0)
    with pytest.raises(InstanceError, match=r"longer than 2\*\*63 - 1 physics steps"):
        connection.observe(1e-300)
    for bad in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(InstanceError, match="rate_hz must be a number > 0"):
            connection.observe(bad)


def test_entity_states_are_world_poses_and_twists(runtime) -> None:
    connection = runtime.connect()
    connection.step(100)  # the free box falls
    now, (box,) = connection.entity_states(["box"])
    assert now == 100 * 2_000_000
    assert box.position[2] == pytest.approx(1.0 - 0.5 * 9.81 * 0.2 ** 2, abs=0.01)
    assert box.linear_velocity[2] == pytest.approx(-9.81 * 0.2, abs=0.02)
    _, everything = connection.entity_states()
    assert [e.name for e in everything] == ["world", "box", "base", "arm", "slider", "target"]
    with pytest.raises(InstanceError, match="no body 'ghost' in the model"):
        connection.entity_states(["ghost"])


def test_setting_an_entity_state_commits_at_a_tick_boundary_and_is_traced(plan) -> None:
    instance = plan.create_instance(seed=0)
    records = []
    instance.subscribe(records.append)
    instance.advance(10)
    instance.enqueue(external_input(ENTITY_SOURCE, 1, ENTITY_PAYLOAD_TYPE, {
        "body": "box", "position": [2.0, 0.0, 3.0], "orientation": [0, 0, 0, 2],
        "linear_velocity": [1.0, 0.0, 0.0], "angular_velocity": [0.0, 0.0, 3.0]}))
    instance.enqueue(external_input(ENTITY_SOURCE, 2, ENTITY_PAYLOAD_TYPE, {
        "body": "target", "position": [0.0, 2.0, 0.5]}))
    instance.advance(1)
    (box,) = instance.entities.states(instance.data, ["box"])
    # committed at tick 10, then one step of 2 ms
    assert box.position[0] == pytest.approx(2.0 + 0.002, abs=1e-9)
    assert box.position[2] == pytest.approx(3.0, abs=1e-3)
    assert abs(box.orientation[3]) == pytest.approx(1.0, abs=1e-3)  # normalized, about z
    assert box.angular_velocity == pytest.approx((0.0, 0.0, 3.0), abs=1e-9)
    assert instance.data.mocap_pos[0].tolist() == [0.0, 2.0, 0.5]
    committed = [r for r in records if type(r).__name__ == "IngressRecord"]
    assert [(r.source_id, r.commit_tick, r.accepted) for r in committed] == [
        (ENTITY_SOURCE, 10, True), (ENTITY_SOURCE, 10, True)]


@pytest.mark.parametrize(("payload", "message"), [
    ({"body": "arm", "position": [0, 0, 0]}, r"body 'arm' cannot be placed .* placeable: box, "
                                             r"target"),
    ({"body": "nope"}, "no body 'nope' in the model"),
    ({"position": [0, 0, 0]}, "payload 'body' is required"),
    ({"body": "box", "position": [0, 0]}, "'position' must be a list of 3 numbers"),
    ({"body": "box", "position": [0, float("nan"), 0]}, "'position' must hold finite numbers"),
    ({"body": "box", "orientation": [0, 0, 0, 0]}, "non-zero quaternion"),
    ({"body": "target", "linear_velocity": [1, 0, 0]}, "is a mocap body"),
    ({"body": "box", "spin": 1}, "unknown payload key"),
])
def test_a_bad_entity_state_is_rejected_naming_the_problem(plan, payload, message) -> None:
    instance = plan.create_instance(seed=0)
    with pytest.raises(IngressError, match=message):
        instance.enqueue(external_input(ENTITY_SOURCE, 1, ENTITY_PAYLOAD_TYPE, payload))
    assert instance.rejected_count == 1
