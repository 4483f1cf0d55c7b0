"""Integer-nanosecond time and its relation to physics ticks.

A tick is one physics step; its length comes from MJCF only. Durations from YAML (seconds) must
be whole numbers of ticks so that schedules never drift.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

NS_PER_S = 1_000_000_000
#: Session and episode times are int64 nanoseconds: no duration may exceed this.
MAX_TIME_NS = 2**63 - 1


@dataclass(frozen=True)
class Timebase:
    """The physics step in integer nanoseconds."""

    timestep_ns: int

    @classmethod
    def from_seconds(cls, timestep: float) -> Timebase:
        if not (math.isfinite(timestep) and 0 < timestep * NS_PER_S < MAX_TIME_NS):
            raise ValueError(f"timestep {timestep!r} s is not a positive number of nanoseconds "
                             f"within int64")
        ns = round(timestep * NS_PER_S)
        if ns <= 0 or abs(ns - timestep * NS_PER_S) > 1e-3:
            raise ValueError(f"timestep {timestep!r} s is not a whole number of nanoseconds")
        return cls(ns)

    @property
    def timestep_s(self) -> float:
        return self.timestep_ns / NS_PER_S

    def time_ns(self, tick: int) -> int:
        return tick * self.timestep_ns

    @property
    def max_ticks(self) -> int:
        """The most ticks whose time still fits int64 nanoseconds (about 292 years)."""
        return MAX_TIME_NS // self.timestep_ns

    def _exact(self, seconds: float) -> float:
        """Seconds as a (fractional) tick count; ValueError for a non-finite or too-long time."""
        value: object = seconds  # (whatever a caller passed)
        if isinstance(value, bool) or not isinstance(value, (int, float)) \
                or not math.isfinite(value):
            raise ValueError(f"{seconds!r} s is not a finite number of seconds")
        if abs(seconds) > self.max_ticks * self.timestep_s:
            raise ValueError(f"{seconds:g} s is longer than the longest time a simulation "
                             f"can represent ({self.max_ticks * self.timestep_s:.4g} s, int64 "
                             f"nanoseconds)")
        return seconds * NS_PER_S / self.timestep_ns

    def ticks(self, seconds: float, minimum: int = 0) -> int:
        """Seconds → whole ticks (at least ``minimum``); raises ValueError naming the nearest
        valid values (or saying the time is not finite or too long)."""
        exact = self._exact(seconds)
        ticks = round(exact)
        if abs(exact - ticks) > 1e-6 or ticks < minimum:
            lower = int(exact // 1)
            candidates = sorted({max(t, minimum) for t in (lower, lower + 1)})
            options = [f"{t * self.timestep_s:g} s" for t in candidates]
            what = (f"shorter than {minimum} physics step(s)" if exact < minimum
                    else "not a whole number of physics steps")
            raise ValueError(
                f"{seconds:g} s is {what} "
                f"(timestep {self.timestep_s:g} s); nearest valid: {' or '.join(options)}")
        return ticks

    def ticks_ceil(self, seconds: float) -> int:
        """Seconds → the number of ticks that covers them (for run durations); ValueError for
        a non-finite or too-long time."""
        exact = self._exact(seconds)
        ticks = round(exact)
        ticks = ticks if abs(exact - ticks) <= 1e-6 else int(exact // 1) + 1
        return min(ticks, self.max_ticks)
