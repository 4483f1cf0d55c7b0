"""Generic experiment metrics, computed from a run's trace and from live contact observation.

Signal metrics read the run's own MCAP trace through the same selectors as
``fibril_sim trace query``, so a metric can always be re-derived from the trace it cites.
Contact metrics observe MuJoCo contacts every tick while the run steps. Robot- or task-specific
names and thresholds belong in experiment documents, never here.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from pathlib import Path
from typing import TypeAlias

import mujoco
import numpy as np
import numpy.typing as npt

from .experiment import Metric
from ..errors import TraceError
from ..trace.query import query

#: A metric's value: a number, a vector (``final`` of a multi-column signal), or none (an
#: event that never happened, a metric that could not be computed).
MetricValue: TypeAlias = float | list[float] | None

COMPARE: dict[str, Callable[[float, float], bool]] = {
    "lt": operator.lt, "le": operator.le, "gt": operator.gt, "ge": operator.ge,
    "eq": operator.eq, "ne": operator.ne}


class MetricUnavailable(Exception):
    """A metric cannot be computed for this run (unknown name, no samples)."""


class ContactObserver:
    """Accumulates contact time and peak contact force of one geom or body, tick by tick."""

    def __init__(self, model: mujoco.MjModel, name: str) -> None:
        geom = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_GEOM, name)
        if geom >= 0:
            self.geoms = np.array([geom])
        else:
            body = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_BODY, name)
            if body < 0:
                raise MetricUnavailable(f"contact {name!r} is neither a geom nor a body of the "
                                        f"model")
            self.geoms = np.flatnonzero(model.geom_bodyid == body)
        self.ticks_in_contact = 0
        self.max_force = 0.0
        self._force = np.zeros(6)

    def observe(self, model: mujoco.MjModel, data: mujoco.MjData) -> None:
        ncon = data.ncon
        if ncon == 0:
            return
        pairs = data.contact.geom[:ncon]
        involved = np.flatnonzero(np.isin(pairs, self.geoms).any(axis=1))
        if involved.size == 0:
            return
        self.ticks_in_contact += 1
        total = np.zeros(3)
        for i in involved:
            mujoco.mj_contactForce(model, data, int(i), self._force)
            total += data.contact.frame[i].reshape(3, 3).T @ self._force[:3]
        self.max_force = max(self.max_force, float(np.linalg.norm(total)))


def signal_metric(trace: Path, metric: Metric) -> MetricValue:
    """Reduce one selector's time series from ``trace``."""
    try:
        result = query(trace, metric.signal or "")
    except (TraceError, ValueError) as exc:
        raise MetricUnavailable(str(exc)) from None
    if not result.rows:
        raise MetricUnavailable(f"signal {metric.signal!r} has no samples in the trace")
    times = np.array([row[0] for row in result.rows], dtype=float) * 1e-9
    # Rows start with time_ns and episode; device rows then carry the acquisition time.
    first = 3 if result.columns[2:3] == ["acquisition_time_ns"] else 2
    values = np.array([[float(v) for v in row[first:]] for row in result.rows], dtype=float)
    if metric.kind == "event_reached":
        return event_time(times, values, metric.op or "gt", float(metric.value or 0.0))
    return reduce(metric.reduce or "final", times, values, metric.threshold)


def reduce(name: str, times: npt.NDArray[np.float64], values: npt.NDArray[np.float64],
           threshold: float | None) -> MetricValue:
    norms = np.linalg.norm(values, axis=1)
    if name == "final":
        last = values[-1]
        return float(last[0]) if last.size == 1 else [float(v) for v in last]
    if name == "max_abs":
        return float(np.max(np.abs(values)))
    if name == "max_norm":
        return float(np.max(norms))
    if name == "delta_norm":
        return float(np.linalg.norm(values[-1] - values[0]))
    if name == "duration_above":
        level = values[:, 0] if values.shape[1] == 1 else norms
        widths = np.diff(times, append=times[-1])
        return float(np.sum(widths[level > float(threshold or 0.0)]))
    raise MetricUnavailable(f"unknown reducer {name!r}")


def event_time(times: npt.NDArray[np.float64], values: npt.NDArray[np.float64], op: str,
               value: float) -> float | None:
    """EpisodeTime (s) of the first sample whose value (or norm) satisfies ``op value``."""
    level = values[:, 0] if values.shape[1] == 1 else np.linalg.norm(values, axis=1)
    compare = COMPARE[op]
    for t, v in zip(times, level):
        if compare(float(v), value):
            return float(t)
    return None
