"""A signal's reference samples given inline in the request (``samples: [[t, v...], ...]``)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from fibril_sim_core import schema as s

from ..model.observations import ObservationSpec
from ..recordings.sources import MAX_VALUE


def inline_samples(value: object, where: s.Where,
                    observation: ObservationSpec) -> tuple[np.ndarray, np.ndarray]:
    items = s.sequence(value, where)
    if not items:
        raise where.fail("expected at least one sample")
    plain = _plain_samples(items, observation.dimension)
    if plain is not None:
        return plain
    times = np.empty(len(items), dtype=np.int64)
    values = np.empty((len(items), observation.dimension))
    previous = -1
    for i, item in enumerate(items):
        at = where.key(i)
        body = s.mapping(item, at)
        s.keys(body, at, required=("time_ns", "values"))
        t = s.integer(body["time_ns"], at.key("time_ns"), minimum=0)
        if t <= previous:
            raise at.key("time_ns").fail(f"time_ns must increase strictly; {t} follows "
                                         f"{previous}")
        previous = t
        row = s.sequence(body["values"], at.key("values"))
        if len(row) != observation.dimension:
            raise at.key("values").fail(
                f"observation {observation.id!r} ({observation.source}) has "
                f"{observation.dimension} value(s) per sample "
                f"({', '.join(observation.components)}), got {len(row)}")
        times[i] = t
        values[i] = [s.number(v, at.key("values").key(j)) for j, v in enumerate(row)]
        for j, v in enumerate(values[i]):
            if abs(v) > MAX_VALUE:
                raise at.key("values").key(j).fail(f"{float(v)!r} cannot be a recorded value "
                                                   f"(beyond {MAX_VALUE:g})")
    return times, values


def _plain_samples(items: Sequence[object], dimension: int
                   ) -> tuple[np.ndarray, np.ndarray] | None:
    """The samples as arrays when each is exactly ``{time_ns: int, values: [dimension
    numbers]}`` with times increasing and values finite within MAX_VALUE, as the checked path
    would return them; else None, and the checked path names the first bad sample. Thousands
    of samples (a notebook's arrays, ``Signal.from_arrays``) are read without a key path per
    value."""
    times: list[int] = []
    rows: list[list[object]] = []
    for item in items:
        if type(item) is not dict or len(item) != 2:
            return None
        t, row = item.get("time_ns"), item.get("values")
        if type(t) is not int or type(row) is not list or len(row) != dimension:
            return None
        for v in row:
            if type(v) is not float and type(v) is not int:
                return None
        times.append(t)
        rows.append(row)
    try:
        time_array = np.array(times, dtype=np.int64)
        values = np.array(rows, dtype=np.float64).reshape(len(rows), dimension)
    except (OverflowError, ValueError):
        return None
    if time_array[0] < 0 or np.any(np.diff(time_array) <= 0):
        return None
    if not np.all(np.abs(values) <= MAX_VALUE):  # also False for NaN
        return None
    return time_array, values
