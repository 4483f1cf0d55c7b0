"""SimulationConnection: what a client (a ROS node, a test, a GUI) may do with a running
simulation. It never exposes MjData: inputs go through the ingress, records come back through
callbacks, control goes through host requests served between frames.

The in-process connection and the remote one (``SimulationConnection.connect(url)``, see
``remote.py``) have the same methods, so a ROS node or a test harness works with either.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from collections.abc import Iterable
from typing import TYPE_CHECKING

from .._document import JsonValue
from ..errors import InstanceError
from ..plan import SimulationPlan
from ..entities import EntityState
from ..records import ExternalInput, RenderFrame, StateObservation
from .host import CallbackHandle, RecordCallback, SimulationHost
from .observation import ObservationRequest, StateLayout
from .render import RenderRequest
from .requests import (
    Entities,
    GetState,
    Pause,
    Reset,
    Resume,
    SetMode,
    SetRealTimeFactor,
    State,
    StartObserve,
    StartRender,
    Step,
    StopObserve,
    StopRender,
)
from .subscription import RecordFilter

if TYPE_CHECKING:
    from .remote import RemoteConnection


@dataclass(eq=False)
class Subscription:
    """An ``on_record`` subscription: what it receives, and its host callback's handle."""

    callback: RecordCallback
    filter: RecordFilter
    handle: CallbackHandle


class SimulationConnection:
    """An in-process client of a running simulation (callbacks run on the host thread)."""

    def __init__(self, host: SimulationHost) -> None:
        self._host = host
        self._subscriptions: list[Subscription] = []
        self._lock = threading.Lock()
        self._closed = False

    @staticmethod
    def connect(url: str, *, token: str | bytes | None = None, name: str = "",
                timeout: float = 10.0) -> RemoteConnection:
        """A connection to a SimulationServer in another process: ``unix:///path/to.sock``
        or ``tcp://127.0.0.1:PORT`` (TCP needs the server's shared ``token``)."""
        # Imported here: remote.py imports pyzmq, which in-process clients never need.
        from .remote import RemoteConnection

        return RemoteConnection(url, token=token, name=name, timeout=timeout)

    @property
    def plan(self) -> SimulationPlan:
        plan = self._host.instance.plan
        if not isinstance(plan, SimulationPlan):  # an instance made outside a runtime
            raise InstanceError("this simulation's plan is not a SimulationPlan")
        return plan

    def describe(self) -> dict[str, JsonValue]:
        """The plan as ``fibril_sim inspect --json`` shows it: components, endpoints, devices
        and their sample types, timestep. The same document a remote connection gets (use it
        rather than ``plan`` in code that runs with either)."""
        return self._host.instance.plan.inspect()

    def submit(self, item: ExternalInput) -> int:
        """Thread-safe ingress; returns the acceptance sequence or raises IngressError."""
        return self._host.instance.enqueue(item)

    def on_record(self, callback: RecordCallback, kinds: Iterable[str] | str | None = None,
                  devices: Iterable[str] | str | None = None) -> Subscription:
        """Receive records, on the host thread, as the simulation emits them: every kind
        (``device_output``, ``actuator_application``, ``ingress_record``, ``state_snapshot``,
        ``frame_timing``, ``episode_start``; ``render_frame`` of this connection's render
        streams) or only ``kinds``, of every device or only ``devices`` (device ids,
        endpoints, input sources, cameras). The simulation makes only what some client
        wants (a device nobody asked for costs nothing). Returns a handle for
        ``set_record_filter``."""
        record_filter = RecordFilter.of(kinds, devices)
        self._check_open()
        with self._lock:
            entry = Subscription(callback, record_filter,
                                  self._host.add_callback(callback, record_filter))
            self._subscriptions.append(entry)
        return entry

    def set_record_filter(self, handle: object, kinds: Iterable[str] | str | None = None,
                          devices: Iterable[str] | str | None = None) -> None:
        """Change what the ``on_record`` subscription ``handle`` receives, from the next
        record on (none lost, none twice): e.g. only the devices someone listens to now."""
        record_filter = RecordFilter.of(kinds, devices)
        self._check_open()
        with self._lock:
            entry = next((e for e in self._subscriptions if e is handle), None)
            if entry is None:
                raise InstanceError("set_record_filter: not a subscription of this connection")
            entry.handle = self._host.set_callback_filter(entry.handle, record_filter)
            entry.filter = record_filter

    def pause(self) -> State:
        return self._host.request(Pause())

    def resume(self) -> State:
        return self._host.request(Resume())

    def step(self, ticks: int) -> State:
        """Advance exactly ``ticks`` ticks (while paused: lockstep) and return the state."""
        return self._host.request(Step(ticks))

    def reset(self, keyframe: str | None = None, seed: int | None = None) -> State:
        """Start a new episode (EpisodeTime restarts, SessionTime goes on); ``seed`` replaces
        the episode seed, ``keyframe`` the scenario keyframe."""
        return self._host.request(Reset(keyframe, seed))

    def set_real_time_factor(self, factor: float) -> State:
        return self._host.request(SetRealTimeFactor(factor))

    def set_mode(self, mode: str) -> State:
        return self._host.request(SetMode(mode))

    def state(self) -> State:
        """tick, episode, episode_time_ns, session_time_ns, paused, seed, mode,
        real_time_factor (measured over the last second), target_real_time_factor,
        accepted_inputs, rejected_inputs, drops (per remote client), clients, qpos, qvel."""
        return self._host.request(GetState())

    def render(self, camera: str | None, width: int, height: int, rate_hz: float,
               depth: bool = False) -> int:
        """Start a render stream: frames of ``camera`` ("" or None: the free camera) every
        1/rate_hz of simulated time, as ``render_frame`` records to this connection's
        callbacks. Returns the stream id; raises InstanceError without a GL context."""
        self._check_open()
        return self._host.request(StartRender(RenderRequest(camera, width, height, rate_hz,
                                                            depth), self._deliver_frame, self))

    def stop_render(self, stream: int) -> None:
        self._host.request(StopRender(stream, self))

    def observe(self, rate_hz: float, *, joints: bool = True, frames: bool = False,
                fast_wall_rate_hz: float = 0.0) -> int:
        """Start a stream of ground-truth state observations every 1/rate_hz of simulated
        time, exactly on that grid (a rate that is not a whole number of physics steps is
        refused): joint states (``joints``) and the moving bodies' frames (``frames``), as
        ``state_observation`` records to this connection's callbacks, on the host thread.
        ``state_layout()`` says what the arrays hold. ``fast_wall_rate_hz``: running free as
        fast as possible, at most this many a second of wall time (see ObservationRequest).
        Returns the stream id."""
        self._check_open()
        request = ObservationRequest(rate_hz, joints, frames, fast_wall_rate_hz)
        return self._host.request(StartObserve(request, self._deliver_frame, self))

    def stop_observe(self, stream: int) -> None:
        self._host.request(StopObserve(stream, self))

    def state_layout(self) -> StateLayout:
        """The joints and moving bodies a StateObservation's arrays hold, in order."""
        return StateLayout.of(self._host.instance.model)

    def entity_states(self, names: list[str] | None = None
                      ) -> tuple[int, list[EntityState]]:
        """The session time and the world poses and twists of the bodies ``names`` (all
        when None) at that time, between frames; InstanceError naming an unknown body."""
        return self._host.request(Entities(None if names is None else tuple(names)))

    def close(self) -> None:
        """Drop this connection's callbacks and render streams; the simulation goes on."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            subscriptions, self._subscriptions = self._subscriptions, []
        for entry in subscriptions:
            self._host.remove_callback(entry.handle)
        if self._host.running:
            self._host.request(StopRender(None, self))
            self._host.request(StopObserve(None, self))

    def __enter__(self) -> SimulationConnection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ internals
    def _deliver_frame(self, frame: RenderFrame | StateObservation) -> None:
        for entry in self._subscriptions:
            if entry.filter.matches(frame):
                entry.callback(frame)

    def _check_open(self) -> None:
        if self._closed:
            raise InstanceError("the connection is closed")

