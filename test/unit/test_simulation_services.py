"""The simulation_interfaces services and the SimulateSteps action, called through real rclpy
clients against ``SimulationServices`` on a real node in this process, with a fake
``SimulationControl`` (the real node is covered by the integration tests)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

pytest.importorskip("simulation_interfaces",
                    reason="simulation_interfaces is not built (make setup builds it from "
                           "../shared/vendor/ros2, or a ROS distro provides it)")

import rclpy  # noqa: E402
from action_msgs.msg import GoalStatus  # noqa: E402
from rclpy.action import ActionClient  # noqa: E402
from rclpy.executors import SingleThreadedExecutor  # noqa: E402
from simulation_interfaces.action import SimulateSteps  # noqa: E402
from simulation_interfaces.msg import Bounds, EntityCategory, Result, SimulationState, \
    SimulatorFeatures  # noqa: E402
from simulation_interfaces.srv import GetEntities, GetEntitiesStates, GetEntityInfo, \
    GetEntityState, GetSimulationState, GetSimulatorFeatures, ResetSimulation, \
    SetEntityState, SetSimulationState, StepSimulation  # noqa: E402

from fibril_sim_core.entities import EntityState  # noqa: E402
from fibril_sim_core.errors import FibrilError, IngressError  # noqa: E402
from fibril_sim_ros.simulation_services import SimulationServices  # noqa: E402

pytestmark = pytest.mark.ros

TIMESTEP_NS = 1_000_000  # 1 kHz: feedback every 10 ms of sim time = every 10 ticks
NODE = "/fibril_sim/"
OK = Result.RESULT_OK
UNSUPPORTED = Result.RESULT_FEATURE_UNSUPPORTED
FAILED = Result.RESULT_OPERATION_FAILED
NOT_FOUND = Result.RESULT_NOT_FOUND
S = SimulationState


class FakeControl:
    """A simulation that counts ticks: bodies world, box (free joint), arm_link (hinge),
    target (mocap). Playing time passes only when paused again (5 ticks)."""

    timestep_ns = TIMESTEP_NS

    def __init__(self) -> None:
        self.restore()

    def restore(self) -> None:
        self._paused = True
        self.tick = 0
        self.episode = 0
        self.episode_tick = 0
        self.submitted: list[dict[str, Any]] = []
        self.step_calls: list[int] = []
        self.state_names: list[list[str] | None] = []
        self.step_hook: Callable[[int], None] | None = None
        self.fail_next: Exception | None = None

    @property
    def paused(self) -> bool:
        return self._paused

    def _maybe_fail(self) -> None:
        if self.fail_next is not None:
            exc, self.fail_next = self.fail_next, None
            raise exc

    def set_paused(self, paused: bool) -> dict[str, Any]:
        self._maybe_fail()
        if paused and not self._paused:
            self.tick += 5
            self.episode_tick += 5
        self._paused = paused
        return self.state()

    def step(self, ticks: int) -> dict[str, Any]:
        if not self._paused:
            raise FibrilError("step: the simulation is running")
        if self.step_hook is not None:
            self.step_hook(len(self.step_calls))
        self.step_calls.append(ticks)
        self.tick += ticks
        self.episode_tick += ticks
        return self.state()

    def reset(self) -> dict[str, Any]:
        self._maybe_fail()
        self.episode += 1
        self.episode_tick = 0
        return self.state()

    def state(self) -> dict[str, Any]:
        return {"tick": self.tick, "episode": self.episode,
                "episode_time_ns": self.episode_tick * TIMESTEP_NS,
                "session_time_ns": self.tick * TIMESTEP_NS}

    def entity_names(self) -> tuple[str, ...]:
        return ("world", "box", "arm_link", "target")

    def entity_states(self, names: list[str] | None) -> tuple[int, list[EntityState]]:
        self.state_names.append(names)
        out = []
        for i, name in enumerate(names if names is not None else self.entity_names()):
            x = 0.001 * self.tick + i
            out.append(EntityState(name, (x, 2.0, 3.0), (0.9, 0.1, 0.2, 0.3),
                                   (4.0, 5.0, 6.0), (7.0, 8.0, 9.0)))
        return self.tick * TIMESTEP_NS, out

    def set_entity_state(self, payload: dict[str, Any]) -> None:
        self._maybe_fail()
        self.submitted.append(payload)

    def placeable(self, name: str) -> bool:
        return name in ("box", "target")


class Rig:
    """The services on node ``fibril_sim`` and a client node, each spun by its own
    single-threaded executor (like the sim node and a user's node)."""

    def __init__(self) -> None:
        self.context = rclpy.Context()
        rclpy.init(context=self.context)
        self.fake = FakeControl()
        self.server = rclpy.create_node("fibril_sim", context=self.context)
        self.services = SimulationServices(self.server, self.fake, feedback_period_ns=10_000_000)
        self.client = rclpy.create_node("fibril_sim_interfaces_test", context=self.context)
        self.clients: dict[str, Any] = {}
        self.action = ActionClient(self.client, SimulateSteps, NODE + "simulate_steps")
        self._executors = []
        self._threads = []
        for node in (self.server, self.client):
            executor = SingleThreadedExecutor(context=self.context)
            executor.add_node(node)
            thread = threading.Thread(target=self._spin, args=(executor,), daemon=True)
            self._executors.append(executor)
            self._threads.append(thread)
            thread.start()

    def _spin(self, executor: SingleThreadedExecutor) -> None:
        while self.context.ok():
            try:
                executor.spin_once(timeout_sec=0.02)
            except Exception:  # noqa: BLE001 - shutting down
                return

    def call(self, cls: type, name: str, timeout: float = 30.0, **fields: Any) -> Any:
        client = self.clients.get(name)
        if client is None:
            client = self.clients[name] = self.client.create_client(cls, NODE + name)
            assert client.wait_for_service(timeout_sec=timeout), f"{name} not available"
        request = cls.Request(**fields)
        future = client.call_async(request)
        deadline = time.monotonic() + timeout
        while not future.done():
            assert time.monotonic() < deadline, f"no reply from {name} in {timeout} s"
            time.sleep(0.005)
        return future.result()

    def warm_up(self) -> None:
        """A refused (changes nothing) call to every service, re-sent until it is answered: a
        server drops a reply to a client whose reply reader it has not discovered yet."""
        for cls, name, fields in (
                (GetSimulatorFeatures, "get_simulator_features", {}),
                (GetSimulationState, "get_simulation_state", {}),
                (SetSimulationState, "set_simulation_state",
                 {"state": SimulationState(state=S.STATE_QUITTING)}),
                (ResetSimulation, "reset_simulation", {"scope": 4}),
                (StepSimulation, "step_simulation", {"steps": 0}),
                (GetEntities, "get_entities", {}),
                (GetEntityState, "get_entity_state", {"entity": "nobody"}),
                (GetEntitiesStates, "get_entities_states", {}),
                (GetEntityInfo, "get_entity_info", {"entity": "nobody"}),
                (SetEntityState, "set_entity_state", {"entity": "nobody"})):
            client = self.clients[name] = self.client.create_client(cls, NODE + name)
            assert client.wait_for_service(timeout_sec=30), f"{name} not available"
            deadline = time.monotonic() + 30
            while True:
                future = client.call_async(cls.Request(**fields))
                resend = time.monotonic() + 2
                while not future.done() and time.monotonic() < resend:
                    time.sleep(0.005)
                if future.done():
                    break
                client.remove_pending_request(future)
                assert time.monotonic() < deadline, f"no reply from {name}"
        assert self.action.wait_for_server(timeout_sec=30), "simulate_steps not available"
        deadline = time.monotonic() + 30
        while True:  # one-step goals until feedback arrives: the feedback topic is matched
            goal = Goal(self, 1)
            resend = time.monotonic() + 2
            while not goal.feedback and time.monotonic() < resend:
                time.sleep(0.005)
            if goal.feedback == [(1, 0)]:
                break
            assert time.monotonic() < deadline, "no SimulateSteps feedback"
        self.fake.restore()

    def close(self) -> None:
        self.services.destroy()
        self.action.destroy()
        for executor in self._executors:
            executor.shutdown()
        self.context.try_shutdown()
        for thread in self._threads:
            thread.join(5)
        self.client.destroy_node()
        self.server.destroy_node()


@pytest.fixture(scope="module")
def rig() -> Any:
    rig = Rig()
    try:
        rig.warm_up()
        yield rig
    finally:
        rig.close()


@pytest.fixture()
def sim(rig: Rig) -> Rig:
    rig.fake.restore()
    return rig


def wait(condition: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.005)


class Goal:
    """A SimulateSteps goal sent through the action client: its feedback, status, result."""

    def __init__(self, rig: Rig, steps: int) -> None:
        self.feedback: list[tuple[int, int]] = []
        future = rig.action.send_goal_async(SimulateSteps.Goal(steps=steps),
                                            feedback_callback=self._on_feedback)
        wait(future.done, "the goal response")
        self.handle = future.result()
        assert self.handle.accepted

    def _on_feedback(self, message: Any) -> None:
        self.feedback.append((message.feedback.completed_steps,
                              message.feedback.remaining_steps))

    def result(self) -> tuple[int, Result]:
        """Asked for only now: the client drops feedback that arrives after the result."""
        future = self.handle.get_result_async()
        wait(future.done, "the goal result")
        answer = future.result()
        return answer.status, answer.result.result

    def cancel(self) -> Any:
        future = self.handle.cancel_goal_async()
        wait(future.done, "the cancel response")
        return future.result()


def state_of(sim: Rig) -> int:
    return sim.call(GetSimulationState, "get_simulation_state").state.state


def set_state(sim: Rig, state: int) -> Result:
    return sim.call(SetSimulationState, "set_simulation_state",
                    state=SimulationState(state=state)).result


# --------------------------------------------------------------------------- features
def test_features_say_what_is_supported_and_what_is_not(sim: Rig) -> None:
    features = sim.call(GetSimulatorFeatures, "get_simulator_features").features
    F = SimulatorFeatures
    assert sorted(features.features) == sorted([
        F.ENTITY_STATE_GETTING, F.ENTITY_STATE_SETTING, F.ENTITY_INFO_GETTING,
        F.SIMULATION_RESET, F.SIMULATION_RESET_TIME, F.SIMULATION_RESET_STATE,
        F.SIMULATION_STATE_GETTING, F.SIMULATION_STATE_SETTING, F.SIMULATION_STATE_PAUSE,
        F.STEP_SIMULATION_SINGLE, F.STEP_SIMULATION_MULTIPLE, F.STEP_SIMULATION_ACTION])
    for absent in (F.SPAWNING, F.DELETING, F.NAMED_POSES, F.POSE_BOUNDS, F.ENTITY_TAGS,
                   F.ENTITY_BOUNDS, F.ENTITY_CATEGORIES, F.ENTITY_INFO_SETTING, F.SPAWNABLES,
                   F.SIMULATION_RESET_SPAWNED, F.WORLD_LOADING, F.AVAILABLE_WORLDS,
                   F.SPAWNING_ENTITIES):
        assert absent not in features.features
    assert list(features.spawn_formats) == []
    info = features.custom_info
    assert info.startswith("Fibril Sim")
    for word in ("spawning", "worlds", "STATE_QUITTING", "accelerations", "SetEntityInfo"):
        assert word in info


def test_services_are_named_under_the_prefix(sim: Rig) -> None:
    assert sorted(sim.services.service_names) == sorted(NODE + name for name in (
        "get_simulator_features", "get_simulation_state", "set_simulation_state",
        "reset_simulation", "step_simulation", "get_entities", "get_entity_state",
        "get_entities_states", "get_entity_info", "set_entity_state"))
    other = rclpy.create_node("other_sim", context=sim.context)
    try:
        services = SimulationServices(other, sim.fake, prefix="")
        assert "/get_simulator_features" in services.service_names
        services.destroy()
        services = SimulationServices(other, sim.fake, prefix="/custom")
        assert "/custom/step_simulation" in services.service_names
        services.destroy()
    finally:
        other.destroy_node()


# --------------------------------------------------------------------------- states
def test_simulation_state_transitions(sim: Rig) -> None:
    fake = sim.fake
    assert state_of(sim) == S.STATE_STOPPED  # paused at episode time 0 (as launched)
    result = set_state(sim, S.STATE_PAUSED)
    assert result.result == SetSimulationState.Response.INCORRECT_TRANSITION
    assert "stopped" in result.error_message
    assert set_state(sim, S.STATE_STOPPED).result == \
        SetSimulationState.Response.ALREADY_IN_TARGET_STATE

    assert set_state(sim, S.STATE_PLAYING).result == OK
    assert not fake.paused and state_of(sim) == S.STATE_PLAYING
    assert set_state(sim, S.STATE_PLAYING).result == \
        SetSimulationState.Response.ALREADY_IN_TARGET_STATE
    assert set_state(sim, S.STATE_PAUSED).result == OK
    assert fake.paused and fake.episode_tick == 5 and state_of(sim) == S.STATE_PAUSED
    assert set_state(sim, S.STATE_PAUSED).result == \
        SetSimulationState.Response.ALREADY_IN_TARGET_STATE

    assert set_state(sim, S.STATE_STOPPED).result == OK  # paused -> a new episode
    assert fake.episode == 1 and fake.paused and state_of(sim) == S.STATE_STOPPED
    assert set_state(sim, S.STATE_PLAYING).result == OK
    assert set_state(sim, S.STATE_STOPPED).result == OK  # playing -> paused, new episode
    assert fake.episode == 2 and fake.paused and fake.episode_tick == 0
    assert state_of(sim) == S.STATE_STOPPED


def test_refused_states_say_why(sim: Rig) -> None:
    result = set_state(sim, S.STATE_QUITTING)
    assert result.result == UNSUPPORTED and "SIGINT" in result.error_message
    for state in (S.STATE_NO_WORLD, S.STATE_LOADING_WORLD):
        result = set_state(sim, state)
        assert result.result == UNSUPPORTED and "worlds" in result.error_message
    result = set_state(sim, 9)
    assert result.result == UNSUPPORTED and "state 9" in result.error_message
    sim.fake.fail_next = FibrilError("set_paused: the host stopped")
    result = set_state(sim, S.STATE_PLAYING)
    assert result.result == SetSimulationState.Response.STATE_TRANSITION_ERROR
    assert "STATE_STOPPED -> STATE_PLAYING: set_paused: the host stopped" == result.error_message
    assert sim.fake.paused and sim.fake.episode == 0


# --------------------------------------------------------------------------- reset / step
def test_reset_scopes(sim: Rig) -> None:
    fake = sim.fake
    fake.step(7)
    for scope, episode in ((0, 1), (255, 2), (3, 3), (7, 4)):
        result = sim.call(ResetSimulation, "reset_simulation", scope=scope).result
        assert (result.result, result.error_message) == (OK, f"episode {episode} started")
        assert fake.episode == episode and fake.episode_tick == 0
    assert fake.tick == 7  # session time goes on
    for scope, words in ((1, "SCOPE_TIME alone"), (2, "SCOPE_STATE alone"),
                         (4, "nothing to de-spawn"), (8, "unknown bit(s) 0x8")):
        result = sim.call(ResetSimulation, "reset_simulation", scope=scope).result
        assert result.result == UNSUPPORTED and words in result.error_message, scope
    assert fake.episode == 4


def test_step_simulation_only_while_paused(sim: Rig) -> None:
    fake = sim.fake
    result = sim.call(StepSimulation, "step_simulation", steps=5).result
    assert (result.result, result.error_message) == (OK, "stepped 5 tick(s) to tick 5")
    assert fake.step_calls == [5]
    assert state_of(sim) == S.STATE_PAUSED  # stepped away from the stopped state
    assert sim.call(StepSimulation, "step_simulation", steps=1).result.result == OK
    assert fake.tick == 6
    result = sim.call(StepSimulation, "step_simulation", steps=0).result
    assert result.result == FAILED and "at least 1" in result.error_message
    set_state(sim, S.STATE_PLAYING)
    result = sim.call(StepSimulation, "step_simulation", steps=3).result
    assert result.result == FAILED and "playing" in result.error_message
    assert fake.step_calls == [5, 1]


# --------------------------------------------------------------------------- the action
def test_simulate_steps_gives_feedback_per_chunk(sim: Rig) -> None:
    goal = Goal(sim, 25)
    wait(lambda: len(goal.feedback) >= 3, "the feedback")
    assert goal.feedback == [(10, 15), (20, 5), (25, 0)]
    status, result = goal.result()
    assert (status, result.result, result.error_message) == (
        GoalStatus.STATUS_SUCCEEDED, OK, "25 steps done")
    assert sim.fake.step_calls == [10, 10, 5] and sim.fake.tick == 25


def test_simulate_steps_refused_while_playing(sim: Rig) -> None:
    set_state(sim, S.STATE_PLAYING)
    goal = Goal(sim, 20)
    status, result = goal.result()
    assert (status, result.result) == (GoalStatus.STATUS_ABORTED, FAILED)
    assert result.error_message.startswith("after 0 of 20 steps: the simulation is playing")
    assert sim.fake.step_calls == [] and goal.feedback == []
    status, result = Goal(sim, 0).result()
    assert (status, result.result) == (GoalStatus.STATUS_ABORTED, FAILED)


def test_simulate_steps_cancel_stops_between_chunks_and_the_executor_stays_free(
        sim: Rig) -> None:
    fake = sim.fake
    entered, release = threading.Event(), threading.Event()

    def hold_fourth_chunk(index: int) -> None:
        if index == 3:
            entered.set()
            assert release.wait(60)

    fake.step_hook = hold_fourth_chunk
    goal = Goal(sim, 1000)
    try:
        assert entered.wait(30), "the fourth chunk never started"
        # The simulation is busy stepping: other calls are still answered.
        assert state_of(sim) == S.STATE_PAUSED
        names = sim.call(GetEntities, "get_entities").entities
        assert list(names) == ["world", "box", "arm_link", "target"]
        status, result = Goal(sim, 5).result()  # one goal at a time
        assert (status, result.result) == (GoalStatus.STATUS_ABORTED,
                                           Result.RESULT_INCORRECT_STATE)
        assert "another SimulateSteps goal" in result.error_message
        answer = goal.cancel()
        assert len(answer.goals_canceling) == 1
    finally:
        release.set()
    wait(lambda: len(goal.feedback) >= 4, "the feedback")
    status, result = goal.result()
    assert (status, result.result) == (GoalStatus.STATUS_CANCELED, OK)
    assert result.error_message == "canceled after 40 of 1000 steps (960 not done)"
    assert fake.step_calls == [10, 10, 10, 10] and fake.tick == 40  # a tick boundary
    assert goal.feedback == [(10, 990), (20, 980), (30, 970), (40, 960)]


# --------------------------------------------------------------------------- entities
def test_get_entities_filters(sim: Rig) -> None:
    def entities(**filters: Any) -> tuple[int, list[str], str]:
        request = GetEntities.Request()
        for key, value in filters.items():
            setattr(request.filters, key, value)
        response = sim.call(GetEntities, "get_entities", filters=request.filters)
        return response.result.result, list(response.entities), response.result.error_message

    assert entities() == (OK, ["world", "box", "arm_link", "target"], "")
    assert entities(filter="^(box|target)$")[:2] == (OK, ["box", "target"])
    assert entities(filter="link")[:2] == (OK, ["arm_link"])
    assert entities(filter="nothing")[:2] == (OK, [])
    code, names, message = entities(filter="(")
    assert code == FAILED and "not a valid regular expression" in message
    code, _, message = entities(categories=[EntityCategory(category=1)])
    assert code == UNSUPPORTED and "categories" in message
    request = GetEntities.Request()
    request.filters.tags.tags = ["robot"]
    response = sim.call(GetEntities, "get_entities", filters=request.filters)
    assert response.result.result == UNSUPPORTED and "tags" in response.result.error_message
    code, _, message = entities(bounds=Bounds(type=Bounds.TYPE_SPHERE))
    assert code == UNSUPPORTED and "bounds" in message


def test_entity_states_are_world_frame_poses_and_twists_at_sim_time(sim: Rig) -> None:
    sim.fake.step(1500)  # session time 1.5 s
    response = sim.call(GetEntityState, "get_entity_state", entity="box")
    assert response.result.result == OK
    state = response.state
    assert state.header.frame_id == "world"
    assert (state.header.stamp.sec, state.header.stamp.nanosec) == (1, 500_000_000)
    p, q = state.pose.position, state.pose.orientation
    assert (p.x, p.y, p.z) == (1.5, 2.0, 3.0)
    assert (q.x, q.y, q.z, q.w) == (0.1, 0.2, 0.3, 0.9)  # ROS order x y z w
    assert (state.twist.linear.x, state.twist.linear.y, state.twist.linear.z) == (4, 5, 6)
    assert (state.twist.angular.x, state.twist.angular.y, state.twist.angular.z) == (7, 8, 9)
    assert sim.fake.state_names == [["box"]]
    response = sim.call(GetEntityState, "get_entity_state", entity="nobody")
    assert response.result.result == NOT_FOUND
    assert "no entity 'nobody'; entities: world, box, arm_link, target" == \
        response.result.error_message

    response = sim.call(GetEntitiesStates, "get_entities_states")
    assert response.result.result == OK
    assert list(response.entities) == ["world", "box", "arm_link", "target"]
    assert [s.pose.position.x for s in response.states] == [1.5, 2.5, 3.5, 4.5]
    request = GetEntitiesStates.Request()
    request.filters.filter = "^(target|box)$"
    response = sim.call(GetEntitiesStates, "get_entities_states", filters=request.filters)
    assert list(response.entities) == ["box", "target"] and len(response.states) == 2
    assert all(s.header.stamp.sec == 1 for s in response.states)
    assert sim.fake.state_names == [["box"], None, ["box", "target"]]


def test_entity_info(sim: Rig) -> None:
    def info(name: str) -> Any:
        return sim.call(GetEntityInfo, "get_entity_info", entity=name)

    world, box, arm = info("world"), info("box"), info("arm_link")
    assert world.info.category.category == EntityCategory.CATEGORY_STATIC_OBJECT
    assert box.info.category.category == EntityCategory.CATEGORY_OBJECT
    assert "can be set" in box.info.description
    assert "cannot be set" in arm.info.description
    assert info("nobody").result.result == NOT_FOUND


def _set(sim: Rig, entity: str, **fields: Any) -> Result:
    request = SetEntityState.Request(entity=entity)
    for key, value in fields.items():
        if key in ("set_pose", "set_twist", "set_acceleration"):
            setattr(request, key, value)
    state = request.state
    state.header.frame_id = fields.get("frame", "")
    (state.pose.position.x, state.pose.position.y, state.pose.position.z) = \
        fields.get("position", (0.0, 0.0, 0.0))
    q = state.pose.orientation
    (q.x, q.y, q.z, q.w) = fields.get("xyzw", (0.0, 0.0, 0.0, 1.0))
    (state.twist.linear.x, state.twist.linear.y, state.twist.linear.z) = \
        fields.get("linear", (0.0, 0.0, 0.0))
    (state.twist.angular.x, state.twist.angular.y, state.twist.angular.z) = \
        fields.get("angular", (0.0, 0.0, 0.0))
    state.acceleration.linear.z = fields.get("acceleration", 0.0)
    return sim.call(SetEntityState, "set_entity_state", entity=entity, state=state,
                    set_pose=request.set_pose, set_twist=request.set_twist,
                    set_acceleration=request.set_acceleration).result


def test_set_entity_state_submits_the_payload(sim: Rig) -> None:
    fake = sim.fake
    result = _set(sim, "box", set_pose=True, set_twist=True, position=(1.0, 2.0, 3.0),
                  xyzw=(0.1, 0.2, 0.3, 0.9), linear=(0.5, 0.0, 0.0), angular=(0.0, 0.0, 2.0))
    assert (result.result, result.error_message) == (
        OK, "'box': submitted, committed at the next step (paused)")
    assert fake.submitted == [{"body": "box", "position": [1.0, 2.0, 3.0],
                               "orientation": [0.9, 0.1, 0.2, 0.3],  # w x y z
                               "linear_velocity": [0.5, 0.0, 0.0],
                               "angular_velocity": [0.0, 0.0, 2.0]}]
    result = _set(sim, "target", set_pose=True, frame="world", set_acceleration=True,
                  acceleration=9.81)
    assert result.result == OK and "acceleration not set" in result.error_message
    assert fake.submitted[-1] == {"body": "target", "position": [0.0, 0.0, 0.0],
                                  "orientation": [1.0, 0.0, 0.0, 0.0]}
    result = _set(sim, "box")
    assert result.result == OK and "nothing set" in result.error_message
    assert len(fake.submitted) == 2
    fake.set_paused(False)
    result = _set(sim, "box", set_pose=True)
    assert result.error_message == "'box': submitted, committed at the next tick boundary"
    assert len(fake.submitted) == 3


def test_set_entity_state_refusals_say_why(sim: Rig) -> None:
    fake = sim.fake
    result = _set(sim, "arm_link", set_pose=True)
    assert result.result == FAILED
    assert "'arm_link' cannot be set" in result.error_message
    assert "settable: box, target" in result.error_message
    assert _set(sim, "nobody", set_pose=True).result == NOT_FOUND
    result = _set(sim, "box", set_pose=True, xyzw=(0.0, 0.0, 0.0, 0.0))
    assert result.result == SetEntityState.Response.INVALID_POSE
    assert "zero quaternion" in result.error_message
    result = _set(sim, "box", set_pose=True, position=(float("nan"), 0.0, 0.0))
    assert result.result == SetEntityState.Response.INVALID_POSE
    result = _set(sim, "box", set_twist=True, linear=(float("inf"), 0.0, 0.0))
    assert result.result == FAILED and "finite" in result.error_message
    result = _set(sim, "box", set_pose=True, frame="base_link")
    assert result.result == UNSUPPORTED and "world frame only" in result.error_message
    assert fake.submitted == []
    fake.fail_next = IngressError("entity state: body 'box' is a mocap body: it has a pose, "
                                  "no velocity")
    result = _set(sim, "box", set_twist=True)
    assert (result.result, result.error_message) == (
        FAILED, "entity state: body 'box' is a mocap body: it has a pose, no velocity")
