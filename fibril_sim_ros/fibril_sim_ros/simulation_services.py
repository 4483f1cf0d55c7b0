"""The standard ROS 2 simulation interfaces (package ``simulation_interfaces``) on the sim node.

Gazebo, Isaac Sim and O3DE answer these services, so a tool written against them drives Fibril
Sim too. Under ``prefix`` (default ``~/``: ``/fibril_sim/get_simulator_features`` …, the way
Gazebo serves ``/gzserver/…``; ``prefix=""`` gives global names, ``/get_simulator_features``):

    get_simulator_features  get_simulation_state  set_simulation_state  reset_simulation
    step_simulation  get_entities  get_entity_state  get_entities_states  get_entity_info
    set_entity_state        (services)        simulate_steps        (action)

Everything is answered from a ``SimulationControl`` (the node implements it). What it means here:

* States. PLAYING = not paused. STOPPED = paused at the start of an episode (episode time 0:
  after a reset, or launched with ``start_paused``), which is what the standard calls "pausing
  and resetting"; PAUSED = paused anywhere else. A stopped simulation is played or stepped; it
  cannot be paused (INCORRECT_TRANSITION, as SetSimulationState.srv says). STATE_QUITTING is
  refused (FEATURE_UNSUPPORTED): the node stops on SIGINT / SIGTERM, which closes the trace
  complete; a service reply cannot outlive the node that sends it. There are no worlds.
* Reset restarts the episode: the state goes back to the scenario's keyframe with the same seed
  and the episode time restarts at 0, so SCOPE_TIME and SCOPE_STATE come together (or as
  SCOPE_DEFAULT / SCOPE_ALL). ``/clock`` (session time) stays monotonic, so ROS nodes never see
  time go back. Nothing is ever spawned: SCOPE_SPAWNED alone is refused.
* Stepping (StepSimulation, SimulateSteps) runs physics ticks and only while paused (else
  RESULT_OPERATION_FAILED, as both definitions say). The action steps in chunks of about
  ``feedback_period_ns`` of simulated time, publishes feedback after each chunk and stops at a
  tick boundary between chunks when canceled (status CANCELED, result RESULT_OK, its message
  saying how many steps were done). One goal runs at a time.
* Entities are the model's bodies (``world`` first), in the world frame (``frame_id`` "world"),
  stamped with the session time of the state they were read from (the ``/clock`` time). The
  name filter is a regular expression searched in the name; categories, tags and bounds
  filters are refused (FEATURE_UNSUPPORTED). SetEntityState places a body with a free joint or
  a mocap body; it goes through the ingress like any input (committed at a tick boundary,
  traced: while paused, the next step commits it, and GetEntityState shows it after that);
  accelerations are not set (said in the result message).

Every handler but GetSimulatorFeatures runs on a worker thread and is awaited from a reentrant
callback group, so the node's single-threaded executor goes on serving its topics and other
services while the simulation steps.
"""

from __future__ import annotations

import math
import re
import threading
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Protocol, TypeVar

from builtin_interfaces.msg import Time
from rclpy.action.server import ActionServer, CancelResponse, GoalResponse, ServerGoalHandle
from rclpy.callback_groups import ReentrantCallbackGroup
from rclpy.node import Node
from rclpy.task import Future
from simulation_interfaces.action import SimulateSteps
from simulation_interfaces.msg import Bounds, EntityCategory, EntityFilters, Result, \
    SimulationState, SimulatorFeatures
from simulation_interfaces.msg import EntityState as EntityStateMsg
from simulation_interfaces.srv import GetEntities, GetEntitiesStates, GetEntityInfo, \
    GetEntityState, GetSimulationState, GetSimulatorFeatures, ResetSimulation, SetEntityState, \
    SetSimulationState, StepSimulation

from fibril_sim_core.errors import FibrilError

if TYPE_CHECKING:
    from fibril_sim_core.entities import EntityState



class _Answer(Protocol):
    """A simulation_interfaces service response: each has a ``result``."""

    result: Result


T = TypeVar("T")
Request = TypeVar("Request")  # a service's generated request and response classes
Response = TypeVar("Response", bound=_Answer)

WORLD_FRAME = "world"
DEFAULT_FEEDBACK_PERIOD_NS = 10_000_000  # SimulateSteps: feedback every ~10 ms of sim time
_LISTED = 20  # names listed in a NOT_FOUND message

_F = SimulatorFeatures
FEATURES: tuple[int, ...] = (
    _F.ENTITY_STATE_GETTING, _F.ENTITY_STATE_SETTING, _F.ENTITY_INFO_GETTING,
    _F.SIMULATION_RESET, _F.SIMULATION_RESET_TIME, _F.SIMULATION_RESET_STATE,
    _F.SIMULATION_STATE_GETTING, _F.SIMULATION_STATE_SETTING, _F.SIMULATION_STATE_PAUSE,
    _F.STEP_SIMULATION_SINGLE, _F.STEP_SIMULATION_MULTIPLE, _F.STEP_SIMULATION_ACTION)
CUSTOM_INFO = (
    "Fibril Sim (MuJoCo). Entities are the model's bodies, in the world frame 'world', stamped "
    "with the /clock (session) time. Reset restarts the episode: state back to the scenario "
    "keyframe, same seed, episode time 0 (SCOPE_TIME and SCOPE_STATE together; /clock stays "
    "monotonic). STOPPED = paused at episode time 0. SetEntityState: bodies with a free joint "
    "or mocap bodies, committed at a tick boundary through the ingress and traced. Not "
    "supported: spawning and deleting (SpawnEntity, SpawnEntities, DeleteEntity, "
    "GetSpawnables, SCOPE_SPAWNED), worlds (LoadWorld, UnloadWorld, GetCurrentWorld, "
    "GetAvailableWorlds), named poses and bounds (GetNamedPoses, GetNamedPoseBounds, "
    "GetEntityBounds), entity tags, categories and bounds filters, SetEntityInfo, "
    "accelerations, STATE_QUITTING (stop the node with SIGINT).")

_STATE_NAMES = {SimulationState.STATE_STOPPED: "STATE_STOPPED",
                SimulationState.STATE_PLAYING: "STATE_PLAYING",
                SimulationState.STATE_PAUSED: "STATE_PAUSED",
                SimulationState.STATE_QUITTING: "STATE_QUITTING",
                SimulationState.STATE_NO_WORLD: "STATE_NO_WORLD",
                SimulationState.STATE_LOADING_WORLD: "STATE_LOADING_WORLD"}
_TIME_AND_STATE = ResetSimulation.Request.SCOPE_TIME | ResetSimulation.Request.SCOPE_STATE
_KNOWN_SCOPES = _TIME_AND_STATE | ResetSimulation.Request.SCOPE_SPAWNED


class SimulationControl(Protocol):
    """What the standard services need from the simulation node.

    Methods may block (they wait for the host thread); they are called from worker threads.
    They raise FibrilError (or ValueError) naming what is wrong; the message reaches the caller
    in the Result."""

    @property
    def paused(self) -> bool: ...

    @property
    def timestep_ns(self) -> int: ...

    def set_paused(self, paused: bool) -> Mapping[str, object]: ...

    def step(self, ticks: int) -> Mapping[str, object]:
        """Advance exactly ``ticks`` ticks (only while paused) and return ``state()``."""
        ...

    def reset(self) -> Mapping[str, object]:
        """A new episode, same seed and keyframe; paused or playing stays as it was."""
        ...

    def state(self) -> Mapping[str, object]:
        """At least ``tick``, ``episode``, ``episode_time_ns``, ``session_time_ns``."""
        ...

    def entity_names(self) -> tuple[str, ...]:
        """Every body, ``world`` first."""
        ...

    def entity_states(self, names: list[str] | None) -> tuple[int, list[EntityState]]:
        """The session time (ns) of the state read, and the world poses / twists of ``names``
        (every body when None) at that state, in that order."""
        ...

    def set_entity_state(self, payload: dict[str, object]) -> None:
        """Submit an entity-state input (payload of fibril_sim_core.entities)."""
        ...

    def placeable(self, name: str) -> bool:
        """Whether the body's state can be set (its one joint is free, or it is mocap)."""
        ...


class _Refused(Exception):
    """A request answered with a Result other than OK."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def _result(code: int = Result.RESULT_OK, message: str = "") -> Result:
    return Result(result=code, error_message=message)


def _stamp(ns: int) -> Time:
    return Time(sec=ns // 1_000_000_000, nanosec=ns % 1_000_000_000)


def state_message(state: EntityState, stamp_ns: int) -> EntityStateMsg:
    """A body's state as simulation_interfaces/EntityState (quaternion x y z w)."""
    msg = EntityStateMsg()
    msg.header.stamp = _stamp(stamp_ns)
    msg.header.frame_id = WORLD_FRAME
    p, q = msg.pose.position, msg.pose.orientation
    p.x, p.y, p.z = (float(v) for v in state.position)
    q.w, q.x, q.y, q.z = (float(v) for v in state.orientation)
    lin, ang = msg.twist.linear, msg.twist.angular
    lin.x, lin.y, lin.z = (float(v) for v in state.linear_velocity)
    ang.x, ang.y, ang.z = (float(v) for v in state.angular_velocity)
    return msg


def _finite(values: Sequence[float]) -> bool:
    return all(math.isfinite(v) for v in values)


class SimulationServices:
    """The simulation_interfaces services and the SimulateSteps action on ``node``."""

    def __init__(self, node: Node, control: SimulationControl, *, prefix: str = "~/",
                 feedback_period_ns: int = DEFAULT_FEEDBACK_PERIOD_NS) -> None:
        if prefix and not prefix.endswith("/"):
            prefix += "/"
        self._node = node
        self._control = control
        timestep = int(control.timestep_ns)
        if timestep <= 0 or feedback_period_ns <= 0:
            raise ValueError(f"simulation services: timestep_ns {timestep} and "
                             f"feedback_period_ns {feedback_period_ns} must be positive")
        self.chunk_ticks = max(1, feedback_period_ns // timestep)
        # Held around "is it paused? then step" (and other changes), so the check holds.
        self._lock = threading.Lock()
        self._goal_lock = threading.Lock()
        self._goal_running = False
        self._group = ReentrantCallbackGroup()
        self._services = [node.create_service(GetSimulatorFeatures,
                                              prefix + "get_simulator_features",
                                              self._on_features, callback_group=self._group)]
        for cls, name, handler in (
                (GetSimulationState, "get_simulation_state", self._get_simulation_state),
                (SetSimulationState, "set_simulation_state", self._set_simulation_state),
                (ResetSimulation, "reset_simulation", self._reset_simulation),
                (StepSimulation, "step_simulation", self._step_simulation),
                (GetEntities, "get_entities", self._get_entities),
                (GetEntityState, "get_entity_state", self._get_entity_state),
                (GetEntitiesStates, "get_entities_states", self._get_entities_states),
                (GetEntityInfo, "get_entity_info", self._get_entity_info),
                (SetEntityState, "set_entity_state", self._set_entity_state)):
            self._services.append(node.create_service(cls, prefix + name, self._served(handler),
                                                      callback_group=self._group))
        self._action = ActionServer(node, SimulateSteps, prefix + "simulate_steps",
                                    self._simulate_steps, callback_group=self._group,
                                    goal_callback=lambda goal: GoalResponse.ACCEPT,
                                    cancel_callback=lambda request: CancelResponse.ACCEPT)

    def destroy(self) -> None:
        """Remove the services and the action server from the node."""
        for service in self._services:
            self._node.destroy_service(service)
        self._services = []
        self._action.destroy()

    @property
    def service_names(self) -> list[str]:
        return [service.service_name for service in self._services]

    # ------------------------------------------------------------------ threading
    def _in_thread(self, function: Callable[..., T], *args: object) -> Future[T]:
        """Run ``function`` on a worker thread; the returned future is awaited on the
        executor, which stays free meanwhile (and is woken when the result is in)."""
        future: Future[T] = Future()

        def work() -> None:
            try:
                future.set_result(function(*args))
            except BaseException as exc:  # noqa: BLE001 - handed to the awaiting coroutine
                future.set_exception(exc if isinstance(exc, Exception)
                                     else RuntimeError(f"{type(exc).__name__}: {exc}"))
            executor = self._node.executor
            if executor is not None:
                executor.wake()

        threading.Thread(target=work, name="fibril-sim-interfaces", daemon=True).start()
        return future

    def _served(self, handler: Callable[[Request, Response], None]
                ) -> Callable[[Request, Response], Awaitable[Response]]:
        async def callback(request: Request, response: Response) -> Response:
            await self._in_thread(self._answer, handler, request, response)
            return response

        return callback

    def _answer(self, handler: Callable[[Request, Response], None], request: Request,
                response: Response) -> None:
        response.result = _result()
        try:
            handler(request, response)
        except _Refused as refusal:
            response.result = _result(refusal.code, refusal.message)
        except (FibrilError, ValueError) as exc:
            response.result = _result(Result.RESULT_OPERATION_FAILED, str(exc))
        except Exception as exc:  # noqa: BLE001 - a bug: the caller still gets an answer
            self._node.get_logger().error(f"{type(request).__name__}: {type(exc).__name__}: "
                                          f"{exc}")
            response.result = _result(Result.RESULT_OPERATION_FAILED,
                                      f"internal error: {type(exc).__name__}: {exc}")

    # ------------------------------------------------------------------ simulation
    def _on_features(self, request: GetSimulatorFeatures.Request,
                     response: GetSimulatorFeatures.Response) -> GetSimulatorFeatures.Response:
        response.features.features = list(FEATURES)
        response.features.spawn_formats = []
        response.features.custom_info = CUSTOM_INFO
        return response

    def _simulation_state(self) -> tuple[int, Mapping[str, object]]:
        if not self._control.paused:
            return SimulationState.STATE_PLAYING, {}
        state = self._control.state()
        stopped = state.get("episode_time_ns") == 0
        return (SimulationState.STATE_STOPPED if stopped else SimulationState.STATE_PAUSED), state

    def _get_simulation_state(self, request: GetSimulationState.Request,
                                  response: GetSimulationState.Response) -> None:
        response.state.state = self._simulation_state()[0]

    def _set_simulation_state(self, request: SetSimulationState.Request,
                                  response: SetSimulationState.Response) -> None:
        target = int(request.state.state)
        name = _STATE_NAMES.get(target, f"state {target}")
        if target == SimulationState.STATE_QUITTING:
            raise _Refused(Result.RESULT_FEATURE_UNSUPPORTED,
                           "STATE_QUITTING: the node is not shut down over a service; stop it "
                           "with SIGINT or SIGTERM (Ctrl-C, ros2 launch), which stops at a tick "
                           "boundary and closes the trace complete")
        if target in (SimulationState.STATE_NO_WORLD, SimulationState.STATE_LOADING_WORLD):
            raise _Refused(Result.RESULT_FEATURE_UNSUPPORTED,
                           f"{name}: worlds are not supported (the node simulates the model of "
                           f"its manifest)")
        if target not in _STATE_NAMES:
            raise _Refused(Result.RESULT_FEATURE_UNSUPPORTED,
                           f"{name} is not a SimulationState (0..5)")
        with self._lock:
            current, state = self._simulation_state()
            if current == target:
                raise _Refused(SetSimulationState.Response.ALREADY_IN_TARGET_STATE,
                               f"the simulation is already {name}")
            if target == SimulationState.STATE_PAUSED and \
                    current == SimulationState.STATE_STOPPED:
                raise _Refused(SetSimulationState.Response.INCORRECT_TRANSITION,
                               f"STATE_STOPPED -> STATE_PAUSED: the simulation is stopped "
                               f"(paused at the start of episode {state.get('episode', '?')}); "
                               f"play it (STATE_PLAYING) or step it")
            try:
                if target == SimulationState.STATE_PLAYING:
                    self._control.set_paused(False)
                elif target == SimulationState.STATE_PAUSED:
                    self._control.set_paused(True)
                else:  # STOPPED: pause, then a new episode
                    if current == SimulationState.STATE_PLAYING:
                        self._control.set_paused(True)
                    self._control.reset()
            except (FibrilError, ValueError) as exc:
                raise _Refused(SetSimulationState.Response.STATE_TRANSITION_ERROR,
                               f"{_STATE_NAMES[current]} -> {name}: {exc}") from None

    def _reset_simulation(self, request: ResetSimulation.Request,
                              response: ResetSimulation.Response) -> None:
        scope = int(request.scope)
        S = ResetSimulation.Request
        if scope not in (S.SCOPE_DEFAULT, S.SCOPE_ALL):
            unknown = scope & ~_KNOWN_SCOPES
            if unknown:
                raise _Refused(Result.RESULT_FEATURE_UNSUPPORTED,
                               f"scope {scope}: unknown bit(s) {unknown:#x} (SCOPE_TIME 1, "
                               f"SCOPE_STATE 2, SCOPE_SPAWNED 4, SCOPE_ALL 255)")
            if not scope & _TIME_AND_STATE:
                raise _Refused(Result.RESULT_FEATURE_UNSUPPORTED,
                               "SCOPE_SPAWNED: Fibril Sim spawns no entities, so there is "
                               "nothing to de-spawn; SCOPE_TIME | SCOPE_STATE (or SCOPE_ALL) "
                               "restarts the episode")
            if scope & _TIME_AND_STATE != _TIME_AND_STATE:
                part = "SCOPE_TIME" if scope & S.SCOPE_TIME else "SCOPE_STATE"
                raise _Refused(Result.RESULT_FEATURE_UNSUPPORTED,
                               f"{part} alone: a reset restarts the episode, time and state "
                               f"together (same seed and keyframe); ask SCOPE_TIME | "
                               f"SCOPE_STATE (3) or SCOPE_ALL")
        with self._lock:
            state = self._control.reset()
        response.result = _result(message=f"episode {state.get('episode', '?')} started")

    def _step_simulation(self, request: StepSimulation.Request,
                             response: StepSimulation.Response) -> None:
        steps = int(request.steps)
        if steps < 1:
            raise _Refused(Result.RESULT_OPERATION_FAILED,
                           f"steps {steps}: step at least 1 tick")
        state = self._step_paused(steps)
        response.result = _result(message=f"stepped {steps} tick(s) to tick "
                                          f"{state.get('tick', '?')}")

    def _step_paused(self, ticks: int) -> Mapping[str, object]:
        with self._lock:
            if not self._control.paused:
                raise _Refused(Result.RESULT_OPERATION_FAILED,
                               "the simulation is playing: stepping needs it paused "
                               "(SetSimulationState STATE_PAUSED first)")
            return self._control.step(ticks)

    async def _simulate_steps(
            self, goal_handle: ServerGoalHandle[SimulateSteps.Goal, SimulateSteps.Result,
                                                SimulateSteps.Feedback]) -> SimulateSteps.Result:
        total = int(goal_handle.request.steps)
        result = SimulateSteps.Result()
        if total < 1:
            result.result = _result(Result.RESULT_OPERATION_FAILED,
                                    f"steps {total}: step at least 1 tick")
            goal_handle.abort()
            return result
        with self._goal_lock:
            busy, self._goal_running = self._goal_running, True
        if busy:
            result.result = _result(Result.RESULT_INCORRECT_STATE,
                                    "another SimulateSteps goal is running; cancel it or wait")
            goal_handle.abort()
            return result
        try:
            done = 0
            feedback = SimulateSteps.Feedback()
            while done < total:
                if goal_handle.is_cancel_requested:
                    goal_handle.canceled()
                    result.result = _result(message=f"canceled after {done} of {total} "
                                                    f"steps ({total - done} not done)")
                    return result
                chunk = min(self.chunk_ticks, total - done)
                try:
                    await self._in_thread(self._step_paused, chunk)
                except _Refused as refusal:
                    result.result = _result(refusal.code, f"after {done} of {total} steps: "
                                                          f"{refusal.message}")
                    goal_handle.abort()
                    return result
                except (FibrilError, ValueError) as exc:
                    result.result = _result(Result.RESULT_OPERATION_FAILED,
                                            f"after {done} of {total} steps: {exc}")
                    goal_handle.abort()
                    return result
                done += chunk
                feedback.completed_steps = done
                feedback.remaining_steps = total - done
                goal_handle.publish_feedback(feedback)
            goal_handle.succeed()
            result.result = _result(message=f"{total} steps done")
            return result
        finally:
            self._goal_running = False

    # ------------------------------------------------------------------ entities
    def _known(self, name: str) -> None:
        names = self._control.entity_names()
        if name not in names:
            listed = ", ".join(names[:_LISTED]) + (" …" if len(names) > _LISTED else "")
            raise _Refused(Result.RESULT_NOT_FOUND, f"no entity {name!r}; entities: {listed}")

    def _filtered(self, filters: EntityFilters) -> list[str]:
        if len(filters.categories):
            raise _Refused(Result.RESULT_FEATURE_UNSUPPORTED,
                           "filters.categories: entity categories are not supported "
                           "(ENTITY_CATEGORIES is not in GetSimulatorFeatures)")
        if len(filters.tags.tags):
            raise _Refused(Result.RESULT_FEATURE_UNSUPPORTED,
                           "filters.tags: entity tags are not supported (ENTITY_TAGS is not in "
                           "GetSimulatorFeatures)")
        if filters.bounds.type != Bounds.TYPE_EMPTY:
            raise _Refused(Result.RESULT_FEATURE_UNSUPPORTED,
                           f"filters.bounds (type {filters.bounds.type}): bounds filters are "
                           f"not supported (ENTITY_BOUNDS is not in GetSimulatorFeatures)")
        names = list(self._control.entity_names())
        if filters.filter:
            try:
                pattern = re.compile(filters.filter)
            except re.error as exc:
                raise _Refused(Result.RESULT_OPERATION_FAILED,
                               f"filters.filter {filters.filter!r} is not a valid regular "
                               f"expression: {exc}") from None
            names = [name for name in names if pattern.search(name)]
        return names

    def _get_entities(self, request: GetEntities.Request, response: GetEntities.Response) -> None:
        response.entities = self._filtered(request.filters)

    def _get_entity_state(self, request: GetEntityState.Request,
                              response: GetEntityState.Response) -> None:
        self._known(request.entity)
        stamp, states = self._control.entity_states([request.entity])
        response.state = state_message(states[0], stamp)

    def _get_entities_states(self, request: GetEntitiesStates.Request,
                                 response: GetEntitiesStates.Response) -> None:
        names = self._filtered(request.filters)
        if not names:
            return
        everything = len(names) == len(self._control.entity_names())
        stamp, states = self._control.entity_states(None if everything else names)
        response.entities = [state.name for state in states]
        response.states = [state_message(state, stamp) for state in states]

    def _get_entity_info(self, request: GetEntityInfo.Request,
                             response: GetEntityInfo.Response) -> None:
        name = request.entity
        self._known(name)
        world = name == self._control.entity_names()[0]
        response.info.category.category = (EntityCategory.CATEGORY_STATIC_OBJECT if world
                                           else EntityCategory.CATEGORY_OBJECT)
        response.info.description = (
            f"MuJoCo body {name!r}: its state can be set (free joint or mocap body)"
            if self._control.placeable(name) else
            f"MuJoCo body {name!r}: its state cannot be set (not a free-joint or mocap body)")

    def _set_entity_state(self, request: SetEntityState.Request,
                              response: SetEntityState.Response) -> None:
        name = request.entity
        self._known(name)
        state = request.state
        if state.header.frame_id not in ("", WORLD_FRAME):
            raise _Refused(Result.RESULT_FEATURE_UNSUPPORTED,
                           f"header.frame_id {state.header.frame_id!r}: states are set in the "
                           f"world frame only ('{WORLD_FRAME}' or empty)")
        if not self._control.placeable(name):
            names = self._control.entity_names()
            settable = [n for n in names if self._control.placeable(n)]
            raise _Refused(Result.RESULT_OPERATION_FAILED,
                           f"entity {name!r} cannot be set: only a body whose one joint is "
                           f"free, or a mocap body, can be placed; settable: "
                           f"{', '.join(settable) or 'none'}")
        payload: dict[str, object] = {"body": name}
        if request.set_pose:
            p, q = state.pose.position, state.pose.orientation
            position, quaternion = [p.x, p.y, p.z], [q.w, q.x, q.y, q.z]
            if not _finite(position + quaternion):
                raise _Refused(SetEntityState.Response.INVALID_POSE,
                               f"pose of {name!r} must hold finite numbers")
            if math.sqrt(sum(v * v for v in quaternion)) < 1e-9:
                raise _Refused(SetEntityState.Response.INVALID_POSE,
                               f"pose.orientation of {name!r} is a zero quaternion (the "
                               f"identity is w=1)")
            payload["position"], payload["orientation"] = position, quaternion
        if request.set_twist:
            lin, ang = state.twist.linear, state.twist.angular
            linear, angular = [lin.x, lin.y, lin.z], [ang.x, ang.y, ang.z]
            if not _finite(linear + angular):
                raise _Refused(Result.RESULT_OPERATION_FAILED,
                               f"twist of {name!r} must hold finite numbers")
            payload["linear_velocity"], payload["angular_velocity"] = linear, angular
        notes = []
        acc = state.acceleration
        if request.set_acceleration and any(
                v != 0.0 for v in (acc.linear.x, acc.linear.y, acc.linear.z,
                                   acc.angular.x, acc.angular.y, acc.angular.z)):
            notes.append("acceleration not set: Fibril Sim does not set accelerations (physics "
                         "computes them at the next step)")
        if len(payload) == 1:
            response.result = _result(message="; ".join(
                ["nothing set (set_pose and set_twist are false)"] + notes))
            return
        self._control.set_entity_state(payload)
        when = "the next step (paused)" if self._control.paused else "the next tick boundary"
        response.result = _result(message="; ".join(
            [f"{name!r}: submitted, committed at {when}"] + notes))
