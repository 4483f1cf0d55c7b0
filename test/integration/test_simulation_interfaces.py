"""The standard simulation_interfaces services and SimulateSteps action of the real sim node
(a child process), called as a ROS 2 user's node would: each call against the node, the
entity state set through the ingress and traced, stepping and cancel on the simulated clock."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

rclpy = pytest.importorskip("rclpy")
pytest.importorskip("simulation_interfaces",
                    reason="simulation_interfaces is not built (make setup builds it from "
                           "../shared/vendor/ros2, or a ROS distro provides it)")

from _sim_node_peer import Peer, SimProcess, wait_until  # noqa: E402
from action_msgs.msg import GoalStatus  # noqa: E402
from rclpy.action import ActionClient  # noqa: E402
from simulation_interfaces.action import SimulateSteps  # noqa: E402
from simulation_interfaces.msg import Result, SimulationState, SimulatorFeatures  # noqa: E402
from simulation_interfaces.srv import GetEntities, GetEntitiesStates, GetEntityState, \
    GetSimulationState, GetSimulatorFeatures, ResetSimulation, SetEntityState, \
    SetSimulationState, StepSimulation  # noqa: E402

from fibril_sim_core.entities import ENTITY_SOURCE  # noqa: E402
from fibril_sim_core.trace import TraceReader  # noqa: E402

pytestmark = [pytest.mark.ros, pytest.mark.slow]

NODE = "/fibril_sim/"
TIMESTEP_NS = 2_000_000
OK, FAILED = Result.RESULT_OK, Result.RESULT_OPERATION_FAILED
S = SimulationState
MODEL = """<mujoco><option timestep="0.002"/><worldbody>
  <body name="box" pos="0 0 1"><freejoint/><geom type="box" size=".1 .1 .1"/></body>
  <body name="base" pos="0.5 0 0"><geom type="box" size=".05 .05 .05"/>
    <body name="arm" pos="0 0 0.1"><joint name="shoulder" type="hinge" axis="0 1 0"/>
      <geom type="capsule" size=".02" fromto="0 0 0 .3 0 0"/></body></body>
  <body name="target" mocap="true" pos="1 1 1"><geom type="sphere" size=".05" contype="0"/></body>
</worldbody>
<actuator><motor name="m" joint="shoulder"/></actuator>
</mujoco>"""
MANIFEST = """schema_version: {major: 3, minor: 1}
model: m.xml
components:
  - {id: motor, type: fibril_sim/motor, bind: {actuator: m}}
"""
# Calls refused without changing anything: re-sent until answered while the node discovers
# this process's reply readers (a reply to an undiscovered reader is dropped).
WARM_UP = (
    (GetSimulatorFeatures, "get_simulator_features", {}),
    (GetSimulationState, "get_simulation_state", {}),
    (SetSimulationState, "set_simulation_state",
     {"state": SimulationState(state=S.STATE_QUITTING)}),
    (ResetSimulation, "reset_simulation", {"scope": 4}),
    (StepSimulation, "step_simulation", {"steps": 0}),
    (GetEntities, "get_entities", {}),
    (GetEntityState, "get_entity_state", {"entity": "nobody"}),
    (GetEntitiesStates, "get_entities_states", {"filters": GetEntities.Request().filters}),
    (SetEntityState, "set_entity_state", {"entity": "nobody"}))


class Node:
    """The node, started paused with a trace, and a peer calling it."""

    def __init__(self, tmp: Path) -> None:
        (tmp / "m.xml").write_text(MODEL)
        (tmp / "s.yaml").write_text(MANIFEST)
        self.trace = tmp / "trace"
        self.sim = SimProcess(tmp, {"manifest": tmp / "s.yaml", "start_paused": True,
                                    "trace_dir": self.trace})
        self.peer = Peer("fibril_sim_interfaces_peer")
        self.action = ActionClient(self.peer.node, SimulateSteps, NODE + "simulate_steps")
        for cls, name, fields in WARM_UP:
            self.peer.wait_for_service(cls, NODE + name, self.sim, timeout=60)
            client = self.peer._client(cls, NODE + name)
            deadline = time.monotonic() + 60
            while True:
                future = client.call_async(cls.Request(**fields))
                resend = time.monotonic() + 2
                while not future.done() and time.monotonic() < resend:
                    time.sleep(0.005)
                if future.done():
                    break
                client.remove_pending_request(future)
                assert time.monotonic() < deadline, f"no reply from {name}\n{self.sim.log()}"
        assert self.action.wait_for_server(timeout_sec=60), "simulate_steps not available"

    def call(self, cls: type, name: str, **fields: Any) -> Any:
        return self.peer.call(cls, NODE + name, cls.Request(**fields), timeout=60)

    def state(self) -> int:
        return self.call(GetSimulationState, "get_simulation_state").state.state

    def set_state(self, state: int) -> Result:
        return self.call(SetSimulationState, "set_simulation_state",
                         state=SimulationState(state=state)).result

    def entity(self, name: str) -> Any:
        response = self.call(GetEntityState, "get_entity_state", entity=name)
        assert response.result.result == OK, response.result.error_message
        return response.state

    def goal(self, steps: int, feedback: list[tuple[int, int]]) -> Any:
        future = self.action.send_goal_async(
            SimulateSteps.Goal(steps=steps),
            feedback_callback=lambda m: feedback.append((m.feedback.completed_steps,
                                                         m.feedback.remaining_steps)))
        wait_until(future.done, 60, "the goal response", self.sim.log)
        handle = future.result()
        assert handle.accepted
        return handle

    def result(self, handle: Any) -> tuple[int, Result]:
        future = handle.get_result_async()
        wait_until(future.done, 120, "the goal result", self.sim.log)
        return future.result().status, future.result().result.result

    def close(self) -> None:
        self.action.destroy()
        self.peer.close()
        self.sim.stop()


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Any:
    node = Node(tmp_path_factory.mktemp("simulation_interfaces"))
    yield node
    node.close()


def stamp_ns(state: Any) -> int:
    return state.header.stamp.sec * 1_000_000_000 + state.header.stamp.nanosec


def test_features_and_entities(node: Node) -> None:
    features = node.call(GetSimulatorFeatures, "get_simulator_features").features
    assert SimulatorFeatures.STEP_SIMULATION_ACTION in features.features
    assert SimulatorFeatures.SPAWNING not in features.features
    assert features.custom_info.startswith("Fibril Sim")
    response = node.call(GetEntities, "get_entities")
    assert list(response.entities) == ["world", "box", "base", "arm", "target"]
    request = GetEntities.Request()
    request.filters.filter = "^(box|target)$"
    response = node.call(GetEntities, "get_entities", filters=request.filters)
    assert list(response.entities) == ["box", "target"]


def test_stepping_setting_and_reading_entities(node: Node) -> None:
    assert node.state() == S.STATE_STOPPED  # launched paused: episode time 0
    start = stamp_ns(node.entity("box"))
    result = node.call(StepSimulation, "step_simulation", steps=100).result
    assert result.result == OK, result.error_message
    assert node.state() == S.STATE_PAUSED
    box = node.entity("box")
    assert stamp_ns(box) == start + 100 * TIMESTEP_NS
    assert box.header.frame_id == "world"
    assert box.pose.position.z < 1.0 and box.twist.linear.z < 0.0  # falling

    request = SetEntityState.Request(entity="box", set_pose=True, set_twist=True)
    request.state.pose.position.x, request.state.pose.position.z = 0.5, 2.0
    q = request.state.pose.orientation
    q.x, q.y, q.z, q.w = 0.0, 0.0, 0.7071068, 0.7071068  # 90 degrees about z
    request.state.twist.linear.x = 1.0
    result = node.call(SetEntityState, "set_entity_state", entity="box", state=request.state,
                       set_pose=True, set_twist=True).result
    assert result.result == OK, result.error_message
    result = node.call(SetEntityState, "set_entity_state", entity="arm", set_pose=True).result
    assert result.result == FAILED and "settable: box, target" in result.error_message
    node.call(StepSimulation, "step_simulation", steps=1)
    box = node.entity("box")
    assert box.pose.position.x == pytest.approx(0.5 + 0.002, abs=1e-6)
    assert box.pose.position.z == pytest.approx(2.0, abs=1e-3)
    assert (box.pose.orientation.z, box.pose.orientation.w) == pytest.approx(
        (0.7071068, 0.7071068), abs=1e-4)
    assert box.twist.linear.x == pytest.approx(1.0, abs=1e-6)

    states = node.call(GetEntitiesStates, "get_entities_states")
    assert list(states.entities) == ["world", "box", "base", "arm", "target"]
    assert states.states[1].pose.position.x == box.pose.position.x
    assert {stamp_ns(s) for s in states.states} == {stamp_ns(box)}


def test_simulate_steps_feedback_and_cancel(node: Node) -> None:
    before = stamp_ns(node.entity("box"))
    feedback: list[tuple[int, int]] = []
    handle = node.goal(20, feedback)
    wait_until(lambda: len(feedback) >= 4, 60, "the feedback", node.sim.log)
    assert feedback == [(5, 15), (10, 10), (15, 5), (20, 0)]  # 10 ms chunks of 2 ms ticks
    status, result = node.result(handle)
    assert (status, result.result) == (GoalStatus.STATUS_SUCCEEDED, OK)
    assert stamp_ns(node.entity("box")) == before + 20 * TIMESTEP_NS

    before = stamp_ns(node.entity("box"))
    feedback = []
    handle = node.goal(1_000_000, feedback)
    wait_until(lambda: feedback, 60, "the first feedback", node.sim.log)
    cancel = handle.cancel_goal_async()
    wait_until(cancel.done, 60, "the cancel response", node.sim.log)
    status, result = node.result(handle)
    assert (status, result.result) == (GoalStatus.STATUS_CANCELED, OK)
    done = int(result.error_message.split()[2])  # "canceled after K of 1000000 steps ..."
    assert 0 < done < 1_000_000 and done % 5 == 0
    assert stamp_ns(node.entity("box")) == before + done * TIMESTEP_NS  # a tick boundary


def test_simulation_states_and_reset(node: Node) -> None:
    assert node.set_state(S.STATE_PLAYING).result == OK
    assert node.state() == S.STATE_PLAYING
    result = node.call(StepSimulation, "step_simulation", steps=1).result
    assert result.result == FAILED and "playing" in result.error_message
    assert node.set_state(S.STATE_PAUSED).result == OK
    assert node.state() == S.STATE_PAUSED
    assert node.set_state(S.STATE_STOPPED).result == OK
    assert node.state() == S.STATE_STOPPED
    box = node.entity("box")  # back at the model's initial pose
    assert (box.pose.position.x, box.pose.position.z) == pytest.approx((0.0, 1.0), abs=1e-9)
    assert node.set_state(S.STATE_PAUSED).result == \
        SetSimulationState.Response.INCORRECT_TRANSITION
    result = node.call(ResetSimulation, "reset_simulation", scope=4).result
    assert result.result == Result.RESULT_FEATURE_UNSUPPORTED
    result = node.call(ResetSimulation, "reset_simulation").result
    assert result.result == OK and result.error_message.endswith("started")


def test_entity_states_set_are_traced(node: Node) -> None:
    node.sim.stop()  # the trace is complete once the node has stopped
    with TraceReader(node.trace) as trace:
        entity_inputs = [r for r in trace.external_inputs() if r.source_id == ENTITY_SOURCE]
    assert [r.accepted for r in entity_inputs] == [True]
    assert entity_inputs[0].commit_tick > 0
