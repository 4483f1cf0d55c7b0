"""SimulationHost: the one owner thread that steps a SimulationInstance.

One owner thread (the host) steps the instance: paused, lockstep (only ``step(n)`` advances),
real time at factor r, or as fast as possible. Clients never touch MjData: they submit
ExternalInputs through the ingress, receive records through callbacks (called on the host
thread), and control the host through requests that the host serves between frames.
"""

from __future__ import annotations

import math
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Generic, TypeVar, overload

from ..errors import FibrilError, InstanceError
from ..instance import SimulationInstance
from ..manifest import RuntimeOptions
from ..records import ClientRecord, DeviceOutput, FrameTiming, RenderFrame, StateObservation
from .observation import ObservationStreams
from .pacing import PaceClock, Poke, RateMeter, WallClock, offer_idle_time
from .render import RenderStreams
from .requests import (
    Entities,
    GetState,
    HostRequest,
    Pause,
    Reset,
    Resume,
    SetMode,
    SetRealTimeFactor,
    StartObserve,
    StartRender,
    State,
    Step,
    StopObserve,
    StopRender,
    Wake,
    host_request,
)
from .subscription import (
    RECORD_KINDS,
    AnyOf,
    RecordFilter,
    record_source,
    wanted_records,
)

R = TypeVar("R")
RecordCallback = Callable[[ClientRecord], None]
# A callback and the filter it was added with: the handle add_callback returns.
CallbackHandle = tuple[RecordCallback, "RecordFilter | AnyOf | None"]
Routes = dict[type, tuple[tuple[RecordCallback, "frozenset[str] | None"], ...]]
StateProvider = Callable[[], State]
# In real time a frame is stepped in pieces of about this much wall time, each when it is due,
# rather than all at once ahead of the clock: outputs leave at their real time, and the host
# is not busy for the whole frame while the server and its clients wait for a CPU and the GIL.
_PACE_S = 0.001
# Shorter waits are not worth a sleep (a wake-up costs more, and a timed wait may end a few
# microseconds early, which would otherwise mean a second one right after).
_MIN_WAIT_S = 20e-6
# The record types the dispatch routes by table (``wanted_records`` leaves render frames out:
# they go to their streams' sinks).
_DISPATCHED = frozenset(RECORD_KINDS) - {RenderFrame, StateObservation}


@dataclass
class _Pending(Generic[R]):
    """A request waiting for the host thread, then its answer."""

    request: HostRequest[R]
    done: threading.Event = field(default_factory=threading.Event)
    result: R | None = None
    error: BaseException | None = None


class SimulationHost:
    """Owns the instance and its thread; serves control requests between frames."""

    def __init__(self, instance: SimulationInstance, options: RuntimeOptions,
                 clock: PaceClock | None = None) -> None:
        self.instance = instance
        self.clock: PaceClock = clock or WallClock()
        self.options = options
        timebase = instance.plan.timebase
        self.frame_ticks = max(1, timebase.ticks_ceil(options.frame_duration_s))
        # A long step(n) advances in pieces this long, checking for stop between them.
        self._piece = max(self.frame_ticks, 1000)
        # "paused" starts paused and runs in real time once resumed; "lockstep" only steps.
        self._mode = "realtime" if options.mode == "paused" else options.mode
        self._paused = options.start_paused or options.mode in ("paused", "lockstep")
        self._rtf = options.real_time_factor
        self._requests: queue.Queue[_Pending[object]] = queue.Queue()
        # Set with every request: a real-time frame waiting for its next piece stops pacing
        # and finishes at once, so the request is served as soon as it was before.
        self._poke = Poke()
        # The queue's deque: its truthiness is the cheap "a request waits" check between
        # frames (a real-time frame a millisecond; ``Queue.empty`` and ``get_nowait`` lock).
        self._waiting = self._requests.queue
        self._callbacks: tuple[CallbackHandle, ...] = ()
        self._routes: Routes = {}
        # The callbacks changed: the instance is told what they want before it steps again.
        self._interest_changed = True
        self._state_providers: tuple[StateProvider, ...] = ()
        self._frame_listeners: tuple[Callable[[], None], ...] = ()
        self._idle_tasks: tuple[Callable[[float], None], ...] = ()
        self._lock = threading.Lock()
        # The host thread (None before ``start`` and after ``stop``; only they set it).
        self.thread: threading.Thread | None = None
        self._stopping = False
        self.failure: BaseException | None = None
        self.last_frame: FrameTiming | None = None
        self._rate = RateMeter()
        self._anchor = (0.0, 0)  # real-time pacing: (clock.now(), session ns) it counts from
        # In a paced frame every record is handed to the callbacks at its wall time (``_hold``).
        self._holding = False
        self._held = 0.0  # seconds held in the current frame
        self._held_ns = -1  # the session time of the boundary held last in it
        # The last paced frame that ended after its due wall time and took longer than the
        # simulated time it covered: when it ended (clock.now()), how late, its wall time
        # (stepping and record callbacks, not pacing waits), the host thread's CPU time in it
        # and the real time the frame covered (more CPU than that: the host's own work is too
        # slow; less: it was blocked, or other processes had the CPU).
        # Floats, not a tuple: nothing the collector tracks is made per frame.
        self.overrun_at = -math.inf
        self.overrun_s = 0.0
        self.overrun_wall_s = 0.0
        self.overrun_cpu_s = 0.0
        self.overrun_span_s = 0.0
        self._renders = RenderStreams(instance.model, instance.plan.timebase.timestep_ns)
        self._observations = ObservationStreams(instance.model,
                                                instance.plan.timebase.timestep_ns)
        instance.subscribe(self._dispatch)

    # -------------------------------------------------------------- client side
    def add_callback(self, callback: RecordCallback,
                     record_filter: RecordFilter | AnyOf | None = None) -> CallbackHandle:
        """Call ``callback`` on the host thread with every record ``record_filter`` passes
        (all when None); returns the handle ``remove_callback`` takes."""
        entry = (callback, _simplest(record_filter))
        with self._lock:
            self._callbacks = (*self._callbacks, entry)
            self._routes, self._interest_changed = _routes(self._callbacks), True
        return entry

    def set_callback_filter(self, handle: CallbackHandle,
                            record_filter: RecordFilter | AnyOf | None) -> CallbackHandle:
        """Let the callback of ``handle`` receive what ``record_filter`` passes from now on;
        returns the new handle (records go to one or the other, never both or neither)."""
        entry = (handle[0], _simplest(record_filter))
        with self._lock:
            self._callbacks = tuple(entry if c is handle else c for c in self._callbacks)
            self._routes, self._interest_changed = _routes(self._callbacks), True
        return entry

    def remove_callback(self, handle: CallbackHandle) -> None:
        with self._lock:
            self._callbacks = tuple(c for c in self._callbacks if c is not handle)
            self._routes, self._interest_changed = _routes(self._callbacks), True

    def add_frame_listener(self, listener: Callable[[], None]) -> None:
        """``listener()`` runs on the host thread after every frame (the server flushes)."""
        with self._lock:
            self._frame_listeners = (*self._frame_listeners, listener)

    def add_idle_task(self, task: Callable[[float], None]) -> None:
        """``task(deadline)`` runs on the host thread when real-time pacing leaves it idle,
        before it waits for ``deadline`` (``self.clock.now()``); it must return in time
        (the trace writer serializes its queue there: no other thread then holds the GIL
        when stepping resumes)."""
        with self._lock:
            self._idle_tasks = (*self._idle_tasks, task)

    def add_state_provider(self, provider: StateProvider) -> None:
        """``provider()`` adds keys to every state() answer (the server adds its clients)."""
        with self._lock:
            self._state_providers = (*self._state_providers, provider)

    @property
    def paced(self) -> bool:
        """Stepping in real time (not paused, not as fast as possible)."""
        return self._mode == "realtime" and not self._paused

    @property
    def running(self) -> bool:
        return self.thread is not None and self.thread.is_alive()

    def start(self) -> None:
        if self.thread is not None:
            raise InstanceError("the simulation host is already running")
        self.thread = threading.Thread(target=self._run, name="fibril-sim-host", daemon=True)
        self.thread.start()

    @overload
    def request(self, request: HostRequest[R], argument: None = None,
                timeout: float | None = 60.0) -> R: ...

    @overload
    def request(self, request: str, argument: object = None,
                timeout: float | None = 60.0) -> object: ...

    def request(self, request: HostRequest[object] | str, argument: object = None,
                timeout: float | None = 60.0) -> object:
        """Ask the host thread to do ``request`` between frames; wait for the result. The
        string form (an action name and its argument, ``host_request``) is checked first."""
        if isinstance(request, str):
            request = host_request(request, argument)
        action = request.action
        thread = self.thread
        if thread is not None and threading.current_thread() is thread:
            # The host would wait on its own queue (until the timeout) and stall stepping.
            raise InstanceError(f"{action}: the connection cannot be called from a record "
                                f"callback (it runs on the host thread)")
        if self.failure is not None:
            raise InstanceError(f"the simulation host stopped after an error: "
                                f"{_describe(self.failure)}")
        if thread is None or not thread.is_alive():
            raise InstanceError("the simulation host is not running")
        item = _Pending(request)
        self._requests.put(item)
        self._poke.set()
        deadline = None if timeout is None else time.monotonic() + timeout
        while not item.done.wait(0.05):
            # (the host thread sets ``failure`` meanwhile: read it afresh, not narrowed above)
            if self._current_failure() is not None or not thread.is_alive():
                raise InstanceError(f"the simulation host stopped after an error: "
                                    f"{_describe(self.failure)}")
            if deadline is not None and time.monotonic() > deadline:
                raise InstanceError(f"the simulation host did not answer {action!r} in "
                                    f"{timeout} s")
        if item.error is not None:
            raise item.error
        return item.result

    def _current_failure(self) -> BaseException | None:
        """``failure`` as it is now (a call: a check of the attribute would stay narrowed)."""
        return self.failure

    def stop(self, timeout: float = 10.0) -> None:
        """Stop at a tick boundary and join the host thread; raises InstanceError (and keeps
        the thread, so ``running`` stays true) when it does not end within ``timeout``."""
        thread = self.thread
        if thread is None:
            return
        if threading.current_thread() is thread:
            raise InstanceError("stop: cannot be called from a record callback (it runs on the "
                                "host thread)")
        self._stopping = True
        self._requests.put(_Pending(Wake()))
        self._poke.set()
        thread.join(timeout)
        if thread.is_alive():
            raise InstanceError(f"stop: the simulation host did not stop within {timeout} s "
                                f"(a record callback or a long frame is still running)")
        self.thread = None

    # -------------------------------------------------------------- host thread
    def _dispatch(self, record: ClientRecord) -> None:
        if self._holding:
            self._hold()
        cls = type(record)
        routes = self._routes.get(cls)
        if routes is None:  # a type no callback wants, or one outside the table
            if cls not in _DISPATCHED:
                for callback, record_filter in self._callbacks:
                    if record_filter is None or record_filter.matches(record):
                        callback(record)
            return
        source = record.device_id if type(record) is DeviceOutput else None
        for callback, devices in routes:
            if devices is None:
                callback(record)
            else:
                if source is None:
                    source = record_source(record)
                if source in devices:
                    callback(record)

    def _hold(self) -> None:
        """In real time, wait until the wall time of the boundary being processed, so that
        its records go out when they are due, not when the piece that made them was stepped
        (a piece starts at its first tick's time). A request arriving meanwhile ends the
        holding for the rest of the frame (it is served at once, as before)."""
        session = self.instance.session_time_ns
        if session == self._held_ns:  # (a boundary's later records: already held)
            return
        self._held_ns = session
        clock = self.clock
        start = clock.now()
        due = self.wall_time(session)
        if due - start > _MIN_WAIT_S:
            if self._idle_tasks:  # (the trace writer serializes in the time left)
                offer_idle_time(self._idle_tasks, self.clock, due)
            wait = due - clock.now()
            if wait > _MIN_WAIT_S and clock.wait(self._poke, wait):
                self._holding = False
            self._held += clock.now() - start

    def _run(self) -> None:
        try:
            self._loop()
        except BaseException as exc:  # noqa: BLE001 - kept and reported to clients
            self.failure = exc
        finally:
            self._renders.close()
            reason = (f"the simulation host stopped after an error: {_describe(self.failure)}"
                      if self.failure is not None else "the simulation host stopped")
            while not self._requests.empty():
                item = self._requests.get_nowait()
                item.error = InstanceError(reason)
                item.done.set()

    def _loop(self) -> None:
        instance = self.instance
        self._anchor = (self.clock.now(), instance.session_time_ns)
        while not self._stopping:
            wait: float | None
            item: _Pending[object] | None
            if self._paused:
                wait = None
            elif self._mode == "realtime":
                due = self.wall_time(instance.session_time_ns)
                offer_idle_time(self._idle_tasks, self.clock, due)
                wait = max(0.0, due - self.clock.now())
            else:
                wait = 0.0
            if wait is None:
                item = self._requests.get()
            else:
                self._poke.clear()  # (a request put after this sets it again)
                item = self._requests.get_nowait() if self._waiting else None
                if item is None and wait > 0:
                    self.clock.wait(self._poke, wait)
                    continue
            if item is not None:
                resync = self._serve(item)
                if resync:
                    self._anchor = (self.clock.now(), instance.session_time_ns)
                continue
            if not self._paused:
                self._frame(self.frame_ticks, paced=self._mode == "realtime", free=True)

    def wall_time(self, session_time_ns: int) -> float:
        """When (``clock.now()``) real-time pacing reaches ``session_time_ns``: the due time
        of an output delivered then."""
        wall, sim = self._anchor
        return wall + (session_time_ns - sim) / 1e9 / self._rtf

    def _serve(self, item: _Pending[object]) -> bool:
        """Run one request; return True when real-time pacing must restart from now.

        Requests were checked when they were made (``requests.py``); what is left to check
        needs the model (a camera, a body name, a stream id): InstanceError. Only an error
        while stepping or resetting (the instance or a record callback failing) stops the
        host."""
        request = item.request
        try:
            if request.repace:
                self._rate.since = self.clock.now()  # a new pace: measured afresh
            item.result = self._answer(request)
        except FibrilError as exc:
            item.error = exc
        except BaseException as exc:
            if request.advances or not isinstance(exc, Exception):  # the host stops; the
                # request that hit it learns why
                item.error = InstanceError(f"the simulation host stopped after an error: "
                                           f"{_describe(exc)}")
                raise
            # A request the checks let through still must not stop the simulation.
            item.error = InstanceError(f"{request.action}: {_describe(exc)}")
        finally:
            item.done.set()
        return request.resync

    def _answer(self, request: HostRequest[object]) -> object:
        """Do ``request``; its result (the state, unless it asks for something else)."""
        instance = self.instance
        match request:
            case Pause():
                self._paused = True
            case Resume():
                if self._mode == "lockstep":
                    raise InstanceError("resume: in lockstep mode only step(n) advances; "
                                        "set_mode('realtime') or set_mode('fast') first")
                self._paused = False
            case Step(ticks=ticks):
                self._frame(ticks)
            case Reset(keyframe=keyframe, seed=seed):
                instance.reset(keyframe=keyframe, seed=seed)
            case StartRender():
                return self._renders.add(request.request, request.sink, self._session_tick(),
                                         request.owner)
            case StopRender(stream=stream, owner=owner):
                self._renders.stop(request.action, stream, owner, "render")
            case StartObserve():
                stream = self._observations.add(request.request, request.sink,
                                                self._session_tick(), request.owner)
                self._observations.prepare(instance.data)
                return stream
            case StopObserve(stream=stream, owner=owner):
                self._observations.stop(request.action, stream, owner, "observation")
            case Entities(names=names):
                try:
                    return instance.session_time_ns, instance.entities.states(instance.data,
                                                                              names)
                except ValueError as exc:
                    raise InstanceError(f"entities: {exc}") from None
            case SetRealTimeFactor(factor=factor):
                self._rtf = factor
            case SetMode(mode=mode):
                self._mode = mode
            case Wake():
                return None
            case GetState():
                pass
            case _:
                raise InstanceError(f"unknown host request {request!r}")
        return self._state()

    def _frame(self, ticks: int, paced: bool = False, free: bool = False) -> None:
        """Advance ``ticks`` in pieces, so a stop request or a render due in the middle of a
        long ``step(n)`` is served at a tick boundary. ``paced``: in real time, each piece of
        about ``_PACE_S`` starts at its first tick's wall time and the records of each
        boundary are held until that boundary's wall time (``_hold``); the frame's FrameTiming
        counts the stepping, not the waiting."""
        instance = self.instance
        if self._interest_changed:
            self._interest_changed = False
            instance.set_interest(wanted_records(f for _, f in self._callbacks))
        start_sim = instance.session_time_ns
        renders = self._renders
        observations = self._observations
        free_fast = free and not paced and self._mode == "fast"
        piece = self._piece
        if paced:
            piece = max(1, int(_PACE_S * self._rtf * 1e9) // instance.plan.timebase.timestep_ns)
            self._poke.clear()
            paced = not self._waiting
        self._holding = paced
        self._held = 0.0
        self._held_ns = -1
        done = 0
        busy = 0.0
        cpu = time.thread_time() if paced else 0.0
        mark = self.clock.now()
        while True:
            if renders.active:
                renders.render_due(instance.episode, instance.tick, self._session_tick(),
                                   instance.data)
            if observations.active:
                if self._holding and observations.ticks_until_due(self._session_tick()) <= 0:
                    self._hold()  # (its records go to the sinks, not through _dispatch)
                observations.observe_due(instance.episode, instance.tick, self._session_tick(),
                                         instance.data, free_fast)
            if done >= ticks or (self._stopping and done):
                break
            chunk = min(ticks - done, piece)
            if renders.active:
                chunk = max(1, min(chunk, renders.ticks_until_due(self._session_tick())))
            if observations.active:
                chunk = max(1, min(chunk, observations.ticks_until_due(self._session_tick())))
            if paced and done:
                busy += self.clock.now() - mark
                due = self.wall_time(instance.session_time_ns)
                offer_idle_time(self._idle_tasks, self.clock, due)
                wait = due - self.clock.now()
                if wait > _MIN_WAIT_S and self.clock.wait(self._poke, wait):
                    paced = self._holding = False  # a request waits: the rest at once
                mark = self.clock.now()
            instance.advance(chunk)
            done += chunk
        end = self.clock.now()
        wall = busy + end - mark - self._held
        sim = (instance.session_time_ns - start_sim) / 1e9
        self._rate.frames.append((end, instance.session_time_ns))
        frame = FrameTiming(instance.episode, instance.tick, instance.episode_time_ns,
                            instance.session_time_ns, wall, sim / wall if wall > 0 else 0.0)
        self.last_frame = frame
        self._dispatch(frame)
        self._holding = False
        for listener in self._frame_listeners:
            listener()
        if paced:
            now = self.clock.now()
            late = now - self.wall_time(instance.session_time_ns)
            # Late, and the frame's own work (stepping, record callbacks, frame listeners)
            # took longer than the simulated time it covered: the host overran.
            work = busy + now - mark - self._held
            if late > 0 and work > sim / self._rtf:
                self.overrun_at, self.overrun_s, self.overrun_wall_s = now, late, work
                self.overrun_cpu_s = time.thread_time() - cpu
                self.overrun_span_s = sim / self._rtf

    def _session_tick(self) -> int:
        return self.instance.session_time_ns // self.instance.plan.timebase.timestep_ns

    def _state(self) -> State:
        instance = self.instance
        state = dict(instance.state(), paused=self._paused, seed=instance.seed,
                     mode=self._mode,
                     target_real_time_factor=self._rtf,
                     real_time_factor=self._rate.measured(self.clock.now()),
                     render_streams=len(self._renders.streams), drops={})
        for provider in self._state_providers:
            state.update(provider())
        return state


def _routes(callbacks: tuple[CallbackHandle, ...]) -> Routes:
    """Per record type the callbacks it goes to with the ids they want: the dispatch looks a
    record's type up once instead of asking every filter (a record a tick, as fast as
    possible)."""
    routes: dict[type, list[tuple[RecordCallback, frozenset[str] | None]]] = {}
    for callback, record_filter in callbacks:
        for cls, devices in wanted_records([record_filter]).items():
            routes.setdefault(cls, []).append((callback, devices))
    return {cls: tuple(entries) for cls, entries in routes.items()}


def _describe(exc: BaseException | None) -> str:
    return "unknown" if exc is None else f"{type(exc).__name__}: {exc}"


def _simplest(record_filter: RecordFilter | AnyOf | None) -> RecordFilter | AnyOf | None:
    """None for a filter that passes everything (the dispatch's fast path)."""
    if isinstance(record_filter, AnyOf):
        return None if record_filter.passes_all else record_filter
    if record_filter is not None and record_filter.kinds is None \
            and record_filter.devices is None:
        return None
    return record_filter
