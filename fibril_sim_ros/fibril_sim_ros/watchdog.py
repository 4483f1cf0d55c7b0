"""DeliveryWatchdog: how late each live output is written in real time, and why.

In real time an output is due at the wall time at which the paced simulation clock reaches its
delivery time (acquisition + device latency); the host holds it until then (see
``fibril_sim_core.runtime.host``). The outbox tells the watchdog when it hands each output to
DDS (or to the writer thread); the watchdog keeps the lateness of the last ``WINDOW`` outputs
for ``get_state`` and, when one is later than the threshold, logs a WARN (at most one a
second) naming the cause it can see: a garbage-collection pause (``gc.callbacks``), the host
overrunning (its frame's own work took more CPU than the real time it covered) or stalling
(the frame took long on the wall clock, not in CPU: blocked, or starved of the CPU by other
processes), a backlog on the writer
thread, or, when none of these, the host thread waking late (another process or thread had
the CPU or the GIL).
"""

from __future__ import annotations

import gc
import math
from array import array
from collections.abc import Callable
from typing import Protocol

import numpy as np

WINDOW = 32768  # outputs kept for the percentiles (about 15 s of the drivetrain's 2.2 kHz)
WARN_PERIOD_S = 1.0
# A pause or an overrun explains a late output when it happened in the lateness window (from
# the output's due time to its write), widened by this much.
_SLACK_S = 0.002
# Collections shorter than this are not kept as a cause (a young generation takes tens of us).
_GC_KEEP_S = 0.0002


class Paced(Protocol):
    """What the watchdog reads of the simulation host."""

    overrun_at: float
    overrun_s: float
    overrun_wall_s: float
    overrun_cpu_s: float
    overrun_span_s: float

    def wall_time(self, session_time_ns: int) -> float: ...


class GcPauses:
    """The last collection long enough to matter: when it ended, how long, which generation.
    Installed in ``gc.callbacks`` (any thread that triggers a collection calls it)."""

    def __init__(self, now: Callable[[], float]) -> None:
        self._now = now
        self._start = 0.0
        self.end = -math.inf
        self.seconds = 0.0
        self.generation = 0
        self.count = 0  # collections of at least _GC_KEEP_S

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        now = self._now()
        if phase == "start":
            self._start = now
            return
        seconds = now - self._start
        if seconds >= _GC_KEEP_S:
            self.end, self.seconds, self.generation = now, seconds, info["generation"]
            self.count += 1

    def install(self) -> None:
        if self not in gc.callbacks:
            gc.callbacks.append(self)

    def remove(self) -> None:
        if self in gc.callbacks:
            gc.callbacks.remove(self)


class DeliveryWatchdog:
    """Lateness of live outputs (host thread), its percentiles and the rate-limited WARN."""

    def __init__(self, host: Paced, now: Callable[[], float], warn: Callable[[str], object],
                 backlog: Callable[[], int], threshold_s: float) -> None:
        self._host = host
        self._now = now
        self._warn = warn
        self._backlog = backlog
        self.threshold_s = threshold_s
        self.gc = GcPauses(now)
        self._lateness = array("d", bytes(8 * WINDOW))
        self._count = 0
        self.late = 0  # outputs later than the threshold since start
        self._warned = -math.inf
        self.last_warning = ""

    def delivered(self, session_time_ns: int) -> None:
        """An output due at ``session_time_ns`` (simulation clock) is written now."""
        late = self._now() - self._host.wall_time(session_time_ns)
        self._lateness[self._count % WINDOW] = late
        self._count += 1
        if late > self.threshold_s:
            self._late(late)

    def _late(self, late: float) -> None:
        self.late += 1
        now = self._now()
        if now - self._warned < WARN_PERIOD_S:
            return
        self._warned = now
        self.last_warning = (f"real-time delivery {late * 1e3:.1f} ms late (threshold "
                             f"{self.threshold_s * 1e3:g} ms): {self.cause(late, now)}")
        self._warn(self.last_warning)

    def cause(self, late: float, now: float) -> str:
        """What held the output for ``late`` seconds up to ``now``, as far as can be seen."""
        since = now - late - _SLACK_S
        pause = self.gc
        if pause.end >= since and pause.seconds >= 0.3 * late:
            return (f"garbage-collection pause of {pause.seconds * 1e3:.1f} ms "
                    f"(generation {pause.generation})")
        host = self._host
        if host.overrun_at >= since:
            wall, cpu = host.overrun_wall_s * 1e3, host.overrun_cpu_s * 1e3
            if host.overrun_cpu_s > host.overrun_span_s:
                return (f"host overrun: a frame's stepping and record callbacks took "
                        f"{cpu:.1f} ms of CPU for {host.overrun_span_s * 1e3:.1f} ms of real "
                        f"time (ended {host.overrun_s * 1e3:.1f} ms after its due time)")
            return (f"host stalled: a frame took {wall:.1f} ms but only {cpu:.1f} ms of CPU "
                    f"(a record callback blocked, or other processes had the CPU; ended "
                    f"{host.overrun_s * 1e3:.1f} ms after its due time)")
        waiting = self._backlog()
        if waiting:
            return f"writer backlog: {waiting} message(s) waiting for the publisher thread"
        return ("the host thread ran late (another process or thread had the CPU or the GIL; "
                "no collection, overrun or backlog seen)")

    def percentiles(self) -> tuple[float, float, float]:
        """p50, p99 and max lateness of the last ``WINDOW`` outputs, in ms (zeros: none)."""
        count = min(self._count, WINDOW)
        if not count:
            return 0.0, 0.0, 0.0
        values = np.frombuffer(self._lateness, dtype=np.float64)[:count] * 1e3
        p50, p99 = np.percentile(values, [50, 99])
        return float(p50), float(p99), float(values.max())

    def reset(self) -> None:
        """Forget the kept lateness (a new pace: resumed, another real-time factor)."""
        self._count = 0
