"""Time windows: one recording cut into many calibration episodes.

``windows: [[start, end], ...]`` lists windows in seconds after the recording's origin;
``windows: {every: 0.2, length?: 0.2, start?: 0, end?: <last sample>, validation_every?: 4}``
cuts consecutive windows ``[start + k·every, start + k·every + length]`` (a last window that
would run past ``end`` is left out), and every ``validation_every``-th of them (the 4th, 8th,
...) becomes a validation episode. Without ``windows`` the whole recording is one episode.
``every`` and ``length`` are at least one physics timestep (after rounding to nanoseconds), and
one entry cuts at most ``MAX_WINDOWS`` windows.
"""

from __future__ import annotations

from dataclasses import dataclass

from fibril_sim_core import schema as s

from ..recordings.sources import span

__all__ = ["MAX_WINDOWS", "Window", "parse_windows"]

_NS = 1_000_000_000
MAX_WINDOWS = 100_000


@dataclass(frozen=True)
class Window:
    """``[start_ns, end_ns]`` after the origin; ``index`` counts from 0; ``validation``: moved
    to the validation episodes by ``validation_every``."""

    index: int
    start_ns: int
    end_ns: int
    validation: bool = False

    def describe(self) -> list[float]:
        return [self.start_ns / _NS, self.end_ns / _NS]


def parse_windows(value: object, where: s.Where, span_ns: int, timestep_ns: int = 1,
                  default_start_ns: int = 0, origin_ns: int | None = None
                  ) -> tuple[tuple[Window, ...], bool]:
    """The windows (and whether they were listed explicitly); ``span_ns`` is the recording's
    length after its origin (the default end), ``timestep_ns`` the plan's physics timestep
    (the shortest ``every`` / ``length``), ``default_start_ns`` where ``every`` windows start
    without a ``start`` (where every mapped stream has data), ``origin_ns`` the origin's
    stamp in the recording, for errors that give the stamps (None: seconds only)."""
    if value is None:
        return (Window(0, 0, span_ns),), False
    if isinstance(value, (list, tuple)):
        out = []
        for i, item in enumerate(value):
            at = where.key(i)
            pair = s.sequence(item, at)
            if len(pair) != 2:
                raise at.fail(f"expected [start, end] in seconds, got {s.describe(item)}")
            start = _ns(s.number(pair[0], at.key(0), minimum=0.0))
            end = _ns(s.number(pair[1], at.key(1)))
            if end <= start:
                raise at.key(1).fail(f"window end {end / _NS:g} s is not after its start "
                                     f"{start / _NS:g} s")
            out.append(Window(i, start, end))
        if not out:
            raise where.fail("expected at least one [start, end] window")
        if len(out) > MAX_WINDOWS:
            raise where.fail(f"{len(out)} windows; at most {MAX_WINDOWS} per entry")
        return tuple(out), True
    body = s.mapping(value, where)
    s.keys(body, where, required=("every",),
           optional=("length", "start", "end", "validation_every"))
    every = _at_least_a_step(body["every"], where.key("every"), timestep_ns)
    length = _at_least_a_step(body["length"], where.key("length"), timestep_ns) \
        if "length" in body else every
    start = (_ns(s.number(body["start"], where.key("start"), minimum=0.0)) if "start" in body
             else default_start_ns)
    end = _ns(s.number(body["end"], where.key("end"))) if "end" in body else span_ns
    nth = s.integer(body["validation_every"], where.key("validation_every"), minimum=2) \
        if "validation_every" in body else None
    if end - start < length:
        late = ("" if "start" in body or not default_start_ns else
                f"; every mapped stream has data from {start / _NS:g} s on")
        between = (f"{start / _NS:.9g} s to {end / _NS:.9g} s into the recording"
                   if origin_ns is None else
                   span(origin_ns + start, origin_ns + end, origin_ns))
        raise where.fail(f"no window of {length / _NS:g} s fits from {between} (the "
                         f"recording spans {span_ns / _NS:.9g} s{late})")
    count = (end - start - length) // every + 1
    if count > MAX_WINDOWS:
        nearest = -(-(end - start - length) // (MAX_WINDOWS - 1))
        raise where.key("every").fail(
            f"every {every / _NS:g} s cuts {count} windows of {length / _NS:g} s between "
            f"{start / _NS:g} s and {end / _NS:g} s; at most {MAX_WINDOWS} per entry (for "
            f"this length the nearest valid every is {nearest / _NS:.9g} s)")
    out = []
    k = 0
    while start + k * every + length <= end:
        first = start + k * every
        out.append(Window(k, first, first + length,
                          validation=nth is not None and (k + 1) % nth == 0))
        k += 1
    return tuple(out), False


def _ns(seconds: float) -> int:
    return round(seconds * _NS)


def _at_least_a_step(value: object, where: s.Where, timestep_ns: int) -> int:
    """A positive duration in seconds, in ns, no shorter than one physics timestep."""
    seconds = s.number(value, where, positive=True)
    ns = _ns(seconds)
    step = max(int(timestep_ns), 1)
    if ns < step:
        raise where.fail(f"{seconds:g} s is shorter than one physics timestep "
                         f"({step} ns); the nearest valid value is {step / _NS:.9g} s")
    return ns
