"""The sim node's own services (``~/step``, ``~/reset``, ``~/set_paused``, ``~/get_state``) and
the node as the standard simulation_interfaces services see it.

Each handler runs on a worker thread (``off_executor``): the single-threaded executor keeps
serving the command topics meanwhile (a sync-mode ``~/step`` waits for the controllers'
answers, which arrive through it).
"""

from __future__ import annotations

import importlib.util
import itertools
import threading
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import TYPE_CHECKING, SupportsFloat, SupportsInt, TypeVar

from rclpy.node import Node
from rclpy.task import Future

from fibril_msgs.srv import GetState, Reset, SetPaused, Step
from fibril_sim_core.entities import ENTITY_PAYLOAD_TYPE, ENTITY_SOURCE, placeable
from fibril_sim_core.errors import FibrilError
from fibril_sim_core.ingress import external_input

from .sync import SyncTimeout

if TYPE_CHECKING:  # (the node imports this module)
    from fibril_sim_core.entities import EntityState

    from .sim_node import SimNode
    from .simulation_services import SimulationServices

Request = TypeVar("Request")
Response = TypeVar("Response")


def off_executor(node: Node, handler: Callable[[Request, Response], Response]
                 ) -> Callable[[Request, Response], Awaitable[Response]]:
    """A service callback that runs ``handler`` on a worker thread and awaits it, so that
    the (single-threaded) executor keeps serving the command topics meanwhile."""

    async def callback(request: Request, response: Response) -> Response:
        future: Future[Response] = Future()

        def work() -> None:
            try:
                future.set_result(handler(request, response))
            except BaseException as exc:  # noqa: BLE001 - handed to the service call
                future.set_exception(exc if isinstance(exc, Exception)
                                     else RuntimeError(f"{type(exc).__name__}: {exc}"))
            executor = node.executor
            if executor is not None:
                executor.wake()

        threading.Thread(target=work, name="fibril-sim-service", daemon=True).start()
        result = await future
        assert result is not None  # (set_result above; set_exception raises here)
        return result

    return callback


class NodeServices:
    """The node's control services, answered from its state."""

    def __init__(self, node: SimNode) -> None:
        self._node = node
        for cls, name, handler in ((Step, "~/step", self._on_step),
                                   (Reset, "~/reset", self._on_reset),
                                   (SetPaused, "~/set_paused", self._on_set_paused),
                                   (GetState, "~/get_state", self.get_state)):
            node.create_service(cls, name, off_executor(node, handler))
        self.standard: SimulationServices | None = None
        if importlib.util.find_spec("simulation_interfaces") is not None:
            # (simulation_interfaces is optional: imported only when installed.)
            from .simulation_services import SimulationServices

            self.standard = SimulationServices(node, StandardControl(node))
        else:
            node.get_logger().info("no simulation_interfaces services: the package is not "
                                   "installed (a ROS installation has it; in the venv, make "
                                   "setup builds it from ../shared/vendor/ros2)")

    def destroy(self) -> None:
        standard, self.standard = self.standard, None
        if standard is not None:
            standard.destroy()

    def _on_step(self, request: Step.Request, response: Step.Response) -> Step.Response:
        node = self._node
        try:
            state = node.step(int(request.steps))
            response.success = True
            response.message = f"stepped {request.steps} tick(s)"
            self._fill(response, state)
        except FibrilError as exc:
            if isinstance(exc, SyncTimeout):
                node.get_logger().error(str(exc))
            response.success = False
            response.message = str(exc)
            self._fill(response, node.state_or_empty())
        return response

    def _on_reset(self, request: Reset.Request, response: Reset.Response) -> Reset.Response:
        node = self._node
        try:
            state = node.reset(request.keyframe or None,
                               int(request.seed) if request.set_seed else None)
            response.success = True
            response.message = f"episode {state['episode']} started"
        except FibrilError as exc:
            response.success = False
            response.message = str(exc)
            state = node.state_or_empty()
        response.episode = _int(state, "episode")
        response.tick = _int(state, "tick")
        response.session_time_ns = _int(state, "session_time_ns")
        response.seed = _int(state, "seed")
        return response

    def _on_set_paused(self, request: SetPaused.Request,
                       response: SetPaused.Response) -> SetPaused.Response:
        node = self._node
        try:
            state = node.set_paused(bool(request.paused))
            response.success = True
            response.message = "paused" if request.paused else "running"
        except FibrilError as exc:
            response.success = False
            response.message = str(exc)
            state = node.state_or_empty()
        response.paused = node.paused
        response.tick = _int(state, "tick")
        response.session_time_ns = _int(state, "session_time_ns")
        return response

    def get_state(self, request: GetState.Request,
                  response: GetState.Response) -> GetState.Response:
        node = self._node
        state = node.state_or_empty()
        response.paused = node.paused
        response.episode = _int(state, "episode")
        response.tick = _int(state, "tick")
        response.episode_time_ns = _int(state, "episode_time_ns")
        response.session_time_ns = _int(state, "session_time_ns")
        response.qpos = _floats(state, "qpos")
        response.qvel = _floats(state, "qvel")
        if response.qpos:
            layout = node.publishing.layout
            response.joint_names = list(layout.joint_names)
            response.joint_positions = [response.qpos[i] for i in layout.joint_qpos]
            response.joint_velocities = [response.qvel[i] for i in layout.joint_dof]
        response.seed = _int(state, "seed")
        response.mode = node.mode
        response.target_real_time_factor = float(node.target_rtf)
        # The host measures it in every mode (sync / lockstep frames included).
        response.real_time_factor = _float(state, "real_time_factor")
        response.accepted_inputs = _int(state, "accepted_inputs")
        response.rejected_inputs = (_int(state, "rejected_inputs")
                                    + node.commands.malformed)
        drops = dict(node.publishing.outbox.drops)
        response.drop_topics = list(drops)
        response.drop_counts = [int(v) for v in drops.values()]
        watchdog = node.watchdog
        (response.lateness_p50_ms, response.lateness_p99_ms,
         response.lateness_max_ms) = watchdog.percentiles()
        response.late_deliveries = int(watchdog.late)
        response.lateness_warning = watchdog.last_warning
        return response

    def _fill(self, response: Step.Response, state: Mapping[str, object]) -> None:
        response.tick = _int(state, "tick")
        response.episode_time_ns = _int(state, "episode_time_ns")
        response.session_time_ns = _int(state, "session_time_ns")
        response.episode = _int(state, "episode")
        response.paused = self._node.paused


# The host's state is a document (a dict of numbers, lists of numbers, strings): read a field
# as the type its response field has (absent: 0), narrowed here.
def _int(state: Mapping[str, object], key: str) -> int:
    value = state.get(key, 0)
    if isinstance(value, SupportsInt):
        return int(value)
    raise TypeError(f"the host state's {key} is not a number: {value!r}")


def _float(state: Mapping[str, object], key: str) -> float:
    value = state.get(key, 0.0)
    if isinstance(value, SupportsFloat):
        return float(value)
    raise TypeError(f"the host state's {key} is not a number: {value!r}")


def _floats(state: Mapping[str, object], key: str) -> list[float]:
    values = state.get(key, ())
    if not isinstance(values, Iterable):
        raise TypeError(f"the host state's {key} is not a list: {values!r}")
    floats: list[float] = []
    for value in values:
        if not isinstance(value, SupportsFloat):
            raise TypeError(f"the host state's {key} holds {value!r}, not a number")
        floats.append(float(value))
    return floats


class StandardControl:
    """The node as the standard simulation services see it (``SimulationControl``)."""

    def __init__(self, node: SimNode) -> None:
        self._node = node
        self._sequence = itertools.count(1)

    @property
    def paused(self) -> bool:
        node = self._node
        return not node.sync.running if node.sync is not None else bool(node.paused)

    @property
    def timestep_ns(self) -> int:
        return int(self._node.plan.timebase.timestep_ns)

    def set_paused(self, paused: bool) -> Mapping[str, object]:
        return self._node.set_paused(paused)

    def step(self, ticks: int) -> Mapping[str, object]:
        return self._node.step(ticks)

    def reset(self) -> Mapping[str, object]:
        return self._node.reset()

    def state(self) -> Mapping[str, object]:
        return self._node.connection.state()

    def entity_names(self) -> tuple[str, ...]:
        return self._node.entities.names

    def entity_states(self, names: list[str] | None) -> tuple[int, list[EntityState]]:
        return self._node.connection.entity_states(names)

    def set_entity_state(self, payload: dict[str, object]) -> None:
        self._node.connection.submit(external_input(
            ENTITY_SOURCE, next(self._sequence), ENTITY_PAYLOAD_TYPE, payload))

    def placeable(self, name: str) -> bool:
        entities = self._node.entities
        return placeable(entities.model, entities.body_id(name))
