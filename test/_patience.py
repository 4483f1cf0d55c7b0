"""How long a test waits for a child process or a condition, scaled by how busy the machine is.

A fixed timeout that is generous on a quiet machine fails on a laptop compiling beside the
suite or on a shared CI runner. Timeouts here are written for a quiet 2-core machine and
multiplied by a speed factor measured now: the wall time of a small fixed CPU workload
against its time on a quiet reference machine (so both a slower CPU and CPU contention count).
The factor is re-measured at most every few seconds (load changes during a run), never below
1, and ``FIBRIL_TEST_SLOWDOWN`` (a number) overrides it.
"""

from __future__ import annotations

import os
import statistics
import time

#: The workload's wall time on a quiet 2-core reference VM (about 10.5 ms measured).
REFERENCE_S = 0.011
#: A factor is reused for this long before it is measured again.
REFRESH_S = 5.0
#: No timeout grows by more than this (a hung child must still fail the test).
MAX_FACTOR = 20.0

_cached: tuple[float, float] | None = None  # (measured at, factor)


def _workload() -> float:
    start = time.perf_counter()
    total = 0
    for i in range(200_000):
        total += i * i
    return time.perf_counter() - start


def speed_factor() -> float:
    """How many times slower than the reference machine this one is right now (≥ 1)."""
    global _cached
    override = os.environ.get("FIBRIL_TEST_SLOWDOWN")
    if override:
        return max(1.0, float(override))
    now = time.monotonic()
    if _cached is not None and now - _cached[0] < REFRESH_S:
        return _cached[1]
    factor = min(MAX_FACTOR, max(1.0, statistics.median(_workload() for _ in range(5))
                                 / REFERENCE_S))
    _cached = (now, factor)
    return factor


def patience(seconds: float) -> float:
    """``seconds`` (a quiet machine's timeout) scaled to this machine's current speed."""
    return seconds * speed_factor()
