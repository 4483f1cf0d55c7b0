"""A signal's reference samples given inline in the request (``samples: [[t, v...], ...]``)."""

from __future__ import annotations

import numpy as np

from fibril_sim_core import schema as s

from ..model.observations import ObservationSpec
from ..recordings.sources import MAX_VALUE


def inline_samples(value: object, where: s.Where,
                    observation: ObservationSpec) -> tuple[np.ndarray, np.ndarray]:
    items = s.sequence(value, where)
    if not items:
        raise where.fail("expected at least one sample")
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
                raise at.key("values").key(j).fail(f"{v!r} cannot be a recorded value (beyond "
                                                   f"{MAX_VALUE:g})")
    return times, values
