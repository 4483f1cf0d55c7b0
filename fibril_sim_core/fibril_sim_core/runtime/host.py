"""SimulationHost: the one owner thread that steps a SimulationInstance.

One owner thread (the host) steps the instance: paused, lockstep (only ``step(n)`` advances),
real time at factor r, or as fast as possible. Clients never touch MjData: they submit
ExternalInputs through the ingress, receive records through callbacks (called on the host
thread), and control the host through requests that the host serves between frames.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..errors import FibrilError, InstanceError
from ..instance import Record, SimulationInstance
from ..manifest import RuntimeOptions
from ..records import FrameTiming

RecordCallback = Callable[[Any], None]


@dataclass
class _Request:
    action: str
    argument: Any = None
    done: threading.Event = field(default_factory=threading.Event)
    result: Any = None
    error: BaseException | None = None


class SimulationHost:
    """Owns the instance and its thread; serves control requests between frames."""

    def __init__(self, instance: SimulationInstance, options: RuntimeOptions) -> None:
        self.instance = instance
        self.options = options
        timebase = instance.plan.timebase
        self.frame_ticks = max(1, timebase.ticks_ceil(options.frame_duration_s))
        # "paused" starts paused and runs in real time once resumed; "lockstep" only steps.
        self._mode = "realtime" if options.mode == "paused" else options.mode
        self._paused = options.start_paused or options.mode in ("paused", "lockstep")
        self._rtf = options.real_time_factor
        self._requests: queue.Queue[_Request] = queue.Queue()
        self._callbacks: tuple[RecordCallback, ...] = ()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._stopping = False
        self.failure: BaseException | None = None
        self.last_frame: FrameTiming | None = None
        instance.subscribe(self._dispatch)

    # -------------------------------------------------------------- client side
    def add_callback(self, callback: RecordCallback) -> None:
        with self._lock:
            self._callbacks = (*self._callbacks, callback)

    def start(self) -> None:
        if self._thread is not None:
            raise InstanceError("the simulation host is already running")
        self._thread = threading.Thread(target=self._run, name="fibril-sim-host", daemon=True)
        self._thread.start()

    def request(self, action: str, argument: Any = None, timeout: float | None = 60.0) -> Any:
        """Ask the host thread to do something between frames; wait for the result."""
        if self.failure is not None:
            raise InstanceError(f"the simulation host stopped after an error: "
                                f"{_describe(self.failure)}")
        if self._thread is None or not self._thread.is_alive():
            raise InstanceError("the simulation host is not running")
        item = _Request(action, argument)
        self._requests.put(item)
        deadline = None if timeout is None else time.monotonic() + timeout
        while not item.done.wait(0.05):
            if self.failure is not None or not self._thread.is_alive():
                raise InstanceError(f"the simulation host stopped after an error: "
                                    f"{_describe(self.failure)}")
            if deadline is not None and time.monotonic() > deadline:
                raise InstanceError(f"the simulation host did not answer {action!r} in "
                                    f"{timeout} s")
        if item.error is not None:
            raise item.error
        return item.result

    def stop(self, timeout: float = 10.0) -> None:
        thread = self._thread
        if thread is None:
            return
        self._stopping = True
        self._requests.put(_Request("wake"))
        thread.join(timeout)
        self._thread = None

    # -------------------------------------------------------------- host thread
    def _dispatch(self, record: Record) -> None:
        for callback in self._callbacks:
            callback(record)

    def _run(self) -> None:
        try:
            self._loop()
        except BaseException as exc:  # noqa: BLE001 - kept and reported to clients
            self.failure = exc
            while not self._requests.empty():
                item = self._requests.get_nowait()
                item.error = InstanceError(f"the simulation host stopped after an error: "
                                           f"{_describe(exc)}")
                item.done.set()

    def _loop(self) -> None:
        instance = self.instance
        anchor_wall = time.perf_counter()
        anchor_sim = instance.session_time_ns
        while not self._stopping:
            wait: float | None
            if self._paused:
                wait = None
            elif self._mode == "realtime":
                due = anchor_wall + (instance.session_time_ns - anchor_sim) / 1e9 / self._rtf
                wait = max(0.0, due - time.perf_counter())
            else:
                wait = 0.0
            try:
                if wait is None:
                    item = self._requests.get()
                elif wait > 0:
                    item = self._requests.get(timeout=wait)
                else:
                    item = self._requests.get_nowait()
            except queue.Empty:
                item = None
            if item is not None:
                resync = self._serve(item)
                if resync:
                    anchor_wall, anchor_sim = time.perf_counter(), instance.session_time_ns
                continue
            if not self._paused:
                self._frame(self.frame_ticks)

    def _serve(self, item: _Request) -> bool:
        """Run one request; return True when real-time pacing must restart from now."""
        instance = self.instance
        try:
            if item.action == "pause":
                self._paused = True
            elif item.action == "resume":
                if self._mode == "lockstep":
                    raise InstanceError("resume: in lockstep mode only step(n) advances; "
                                        "set_mode('realtime') or set_mode('fast') first")
                self._paused = False
            elif item.action == "step":
                ticks = int(item.argument)
                if ticks < 0:
                    raise InstanceError(f"step: ticks must be >= 0, got {ticks}")
                self._frame(ticks)
            elif item.action == "reset":
                keyframe, seed = item.argument
                instance.reset(keyframe=keyframe, seed=seed)
            elif item.action == "rtf":
                self._rtf = float(item.argument)
            elif item.action == "mode":
                self._mode = str(item.argument)
            elif item.action == "state":
                pass
            elif item.action != "wake":
                raise InstanceError(f"unknown host request {item.action!r}")
            item.result = dict(instance.state(), paused=self._paused)
        except FibrilError as exc:
            item.error = exc
        except BaseException as exc:  # the host stops; the request that hit it learns why
            item.error = InstanceError(f"the simulation host stopped after an error: "
                                       f"{_describe(exc)}")
            raise
        finally:
            item.done.set()
        return item.action in ("resume", "reset", "rtf", "mode", "step")

    def _frame(self, ticks: int) -> None:
        instance = self.instance
        start_sim = instance.session_time_ns
        start = time.perf_counter()
        instance.advance(ticks)
        wall = time.perf_counter() - start
        sim = (instance.session_time_ns - start_sim) / 1e9
        frame = FrameTiming(instance.episode, instance.tick, instance.episode_time_ns,
                            instance.session_time_ns, wall, sim / wall if wall > 0 else 0.0)
        self.last_frame = frame
        self._dispatch(frame)


def _describe(exc: BaseException | None) -> str:
    return "unknown" if exc is None else f"{type(exc).__name__}: {exc}"
