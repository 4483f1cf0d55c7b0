"""Implausible recorded values are caught before they are fitted.

Robot drivers log sentinels (Unitree's ``PosStopF`` 2.146e9 "no position command", 1e10 "no
velocity command"), overflowed counters and NaN placeholders. A stream mapped by a request may
say what its valid values are and what to do with the others:

    signals:
      q_knee: {column: q_knee, valid: {min: -3, max: 0.5}, on_invalid: drop}

* ``valid: {min, max}`` (either may be left out): values outside are invalid; NaN, infinite
  and values beyond ``sources.MAX_VALUE`` always are;
* ``on_invalid``: ``error`` (default: a request error naming file, column / topic+field, the
  line (CSV) or message index and time (bag), the value and how many there are), ``drop``
  (the row is left out) or ``hold`` (the row takes the last valid row's values; invalid rows
  before the first valid one are left out).

Besides ``valid``, every joint or actuator stream is checked against the model by default
(``Plausible``): a joint position further outside the joint's range than ``margin`` (10 % of
the range plus 0.1 rad or m), and any value beyond ``PLAUSIBLE_LIMIT`` (1e6) in a joint /
actuator stream, are invalid too; ``valid`` replaces the range check for its stream.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

import mujoco
import numpy as np

from fibril_sim_core import schema as s

from ..recordings.sources import MAX_VALUE, Stream

__all__ = ["ON_INVALID", "PLAUSIBLE_LIMIT", "Plausible", "Validity", "apply_validity",
           "joint_plausible", "parse_validity"]

ON_INVALID = ("error", "drop", "hold")
PLAUSIBLE_LIMIT = 1e6
VALIDITY_KEYS = ("valid", "on_invalid")


@dataclass(frozen=True)
class Validity:
    low: float | None = None
    high: float | None = None
    on_invalid: str = "error"
    given: bool = False  # valid: was given (it replaces the model's range check)


@dataclass(frozen=True)
class Plausible:
    """The model's bounds on a stream (``what`` words them: "joint 'knee' position (range
    [-2.7, 0.2] + margin 0.39)")."""

    low: float
    high: float
    what: str


def parse_validity(body: Mapping[str, object], where: s.Where) -> Validity:
    on_invalid = s.string(body.get("on_invalid", "error"), where.key("on_invalid"))
    if on_invalid not in ON_INVALID:
        raise where.key("on_invalid").fail(f"expected one of {', '.join(ON_INVALID)}, got "
                                           f"{on_invalid!r}")
    if "valid" not in body:
        return Validity(on_invalid=on_invalid)
    at = where.key("valid")
    bounds = s.mapping(body["valid"], at)
    s.keys(bounds, at, optional=("min", "max"))
    if not bounds:
        raise at.fail("expected min and/or max")
    low = s.number(bounds["min"], at.key("min")) if "min" in bounds else None
    high = s.number(bounds["max"], at.key("max")) if "max" in bounds else None
    if low is not None and high is not None and high < low:
        raise at.key("max").fail(f"max {high:g} is below min {low:g}")
    return Validity(low, high, on_invalid, True)


def joint_plausible(model: mujoco.MjModel, joint: str, part: str) -> Plausible:
    """The bounds of a joint's ``position`` (its range plus a margin, when limited) or of any
    other joint / actuator value (``PLAUSIBLE_LIMIT``)."""
    limit = Plausible(-PLAUSIBLE_LIMIT, PLAUSIBLE_LIMIT,
                      f"joint {joint!r} {part} (|value| up to {PLAUSIBLE_LIMIT:g})")
    if part != "position":
        return limit
    try:
        index = model.joint(joint).id
    except KeyError:
        return limit
    if int(model.jnt_type[index]) not in (mujoco.mjtJoint.mjJNT_HINGE,
                                          mujoco.mjtJoint.mjJNT_SLIDE) \
            or not bool(model.jnt_limited[index]):
        return limit
    low, high = (float(v) for v in model.jnt_range[index])
    margin = 0.1 * (high - low) + 0.1
    return Plausible(low - margin, high + margin,
                     f"joint {joint!r} position (range [{low:g}, {high:g}] + margin "
                     f"{margin:.3g})")


def apply_validity(stream: Stream, validity: Validity, plausible: Plausible | None,
                   where: s.Where) -> Stream:
    """The stream with its invalid rows handled by ``on_invalid``; an error raises the
    request error at ``where``."""
    values = stream.values
    with np.errstate(invalid="ignore"):
        broken = ~np.isfinite(values) | (values > MAX_VALUE) | (values < -MAX_VALUE)
        outside = np.zeros_like(broken)
        if validity.low is not None:
            outside |= values < validity.low
        if validity.high is not None:
            outside |= values > validity.high
        implausible = np.zeros_like(broken)
        if plausible is not None:
            low = -PLAUSIBLE_LIMIT if validity.given else plausible.low
            high = PLAUSIBLE_LIMIT if validity.given else plausible.high
            implausible = (values < low) | (values > high)
    bad = broken | outside | implausible
    rows = bad.any(axis=1)
    if not rows.any():
        return stream
    if validity.on_invalid == "error":
        raise where.fail(_first_problem(stream, bad, broken, outside, plausible, validity))
    keep = ~rows
    if validity.on_invalid == "hold":
        good = np.flatnonzero(keep)
        if good.size:
            last = np.maximum.accumulate(np.where(keep, np.arange(rows.size), -1))
            held = last >= 0
            values = stream.values[last[held]]
            stream = replace(stream, times_ns=stream.times_ns[held], values=values,
                             modes=_rows(stream.modes, held),
                             rows=_row_numbers(stream)[held])
            return _at_least_two(stream, where, int(rows.sum()))
    stream = replace(stream, times_ns=stream.times_ns[keep], values=stream.values[keep],
                     modes=_rows(stream.modes, keep), rows=_row_numbers(stream)[keep])
    return _at_least_two(stream, where, int(rows.sum()))


def _rows(modes: tuple[str, ...] | None, mask: np.ndarray) -> tuple[str, ...] | None:
    if modes is None:
        return None
    return tuple(m for m, k in zip(modes, mask.tolist()) if k)


def _row_numbers(stream: Stream) -> np.ndarray:
    return stream.rows if stream.rows is not None else np.arange(len(stream))


def _at_least_two(stream: Stream, where: s.Where, dropped: int) -> Stream:
    if len(stream) < 2:
        raise where.fail(f"{stream.label}: {dropped} invalid row(s) left {len(stream)} "
                         f"sample(s); a stream needs at least two")
    return stream


def _first_problem(stream: Stream, bad: np.ndarray, broken: np.ndarray, outside: np.ndarray,
                   plausible: Plausible | None, validity: Validity) -> str:
    row, col = (int(i) for i in np.argwhere(bad)[0])
    value = float(stream.values[row, col])
    component = stream.components[col]
    at = (f"column {component!r} {stream.place(row)}" if stream.first_line else
          f"{component!r} of {stream.place(row)}")
    if broken[row, col]:
        reason = "is not a recorded value (NaN, infinite or beyond 1e12)"
    elif outside[row, col]:
        bounds = f"[{_g(validity.low)}, {_g(validity.high)}]"
        reason = f"is outside the stream's valid {bounds}"
    else:
        assert plausible is not None
        reason = f"is not a plausible {plausible.what}"
    count = int(bad.any(axis=1).sum())
    return (f"{stream.label}: {at}: {value!r} {reason}; {count} such row(s) (a driver's "
            f"sentinel or placeholder?): give the stream valid: {{min, max}} and on_invalid: "
            f"drop or hold to leave them out")


def _g(value: float | None) -> str:
    return "-" if value is None else f"{value:g}"
