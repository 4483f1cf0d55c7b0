"""Real-time pacing: the clock the host paces against, its cheap wake-up event, and the
measured real-time factor. Kept apart from the host so that the clock can be faked in tests
and the host module holds only the stepping and request loop."""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Protocol

_RTF_WINDOW_S = 1.0  # the measured real-time factor covers the frames of the last second


class PaceClock(Protocol):
    """What real-time pacing reads and waits on: the wall clock (``WallClock``), or a fake one
    in tests (its ``wait`` moves its time on instead of sleeping)."""

    def now(self) -> float:
        """Seconds on a monotonic clock."""

    def wait(self, event: threading.Event, seconds: float) -> bool:
        """Wait ``seconds`` or until ``event`` is set; True when it was set."""


class WallClock:
    """``time.perf_counter`` and ``Event.wait``."""

    now = staticmethod(time.perf_counter)

    @staticmethod
    def wait(event: threading.Event, seconds: float) -> bool:
        return event.wait(seconds)


class Poke(threading.Event):
    """An ``Event`` whose timed wait is one lock acquisition: real-time pacing waits about
    once a millisecond, and ``Event.wait`` (a condition variable in Python: a new lock, a
    waiter list) cost ~10 us more CPU per wait than this on a virtual machine.

    ``_gate`` is unlocked while the event is set. ``set`` may run on any thread, and twice
    (releasing an unlocked lock raises; that is the already-set case)."""

    def __init__(self) -> None:
        super().__init__()
        self._set = False
        self._gate = threading.Lock()
        self._gate.acquire()

    def is_set(self) -> bool:
        return self._set

    isSet = is_set

    def set(self) -> None:
        self._set = True
        try:
            self._gate.release()
        except RuntimeError:  # already set
            pass

    def clear(self) -> None:
        if self._set:
            self._set = False
            self._gate.acquire(False)

    def wait(self, timeout: float | None = None) -> bool:
        if self._set:
            return True
        gate = self._gate
        if gate.acquire(True, -1 if timeout is None else max(0.0, timeout)):
            gate.release()  # (still set, for the next waiter)
            return True
        return self._set


class RateMeter:
    """The measured real-time factor: simulated over wall time across recent frames."""

    def __init__(self) -> None:
        self.frames: deque[tuple[float, int]] = deque(maxlen=4096)  # (wall, session ns)
        self.since = 0.0  # counts the frames from this wall time on (a new pace: afresh)

    def measured(self, now: float) -> float:
        """Simulated over wall time across the frames of the last second, in every mode.

        Frames are those of free running and of ``step(n)`` requests alike (lockstep, or
        stepping while paused), so in lockstep it is the pace of the whole loop, the client's
        time between its requests included. Of the frames that ended in the last second (and
        after the last pause / resume / set_mode / set_real_time_factor), with F the oldest
        and L the newest: (session time at L - session time at F) / (now - end of F).
        0 with fewer than two such frames (paused, or stepping stopped a second ago)."""
        frames = self.frames
        if len(frames) < 2:
            return 0.0
        since = max(now - _RTF_WINDOW_S, self.since)
        last_wall, last_sim = frames[-1]
        first_wall, first_sim = last_wall, last_sim
        for wall, sim in reversed(frames):
            if wall < since:
                break
            first_wall, first_sim = wall, sim
        span = now - first_wall
        return (last_sim - first_sim) / 1e9 / span if span > 0 else 0.0


def offer_idle_time(tasks: tuple[Callable[[float], None], ...], clock: PaceClock,
                    due: float) -> None:
    """Offer the time until ``due`` to the idle tasks, if there is any."""
    for task in tasks:
        if clock.now() >= due:
            return
        task(due)
