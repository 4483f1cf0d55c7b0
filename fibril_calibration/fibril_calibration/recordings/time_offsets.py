"""Per-signal time offsets: a calibrated sensor delay or clock offset, applied at the residual.

    parameters:
      - id: encoder_delay
        unit: s
        lower: -0.005
        upper: 0.01
        initial: 0.0
        target: {type: time_offset, observation: wheel_velocity}
      - id: state_clock             # every signal read from the request's source 'state'
        lower: -0.05
        upper: 0.05
        initial: 0.0
        target: {type: time_offset, source: state}

A source's offset shifts the comparison of the signals read from it (the source's fixed
``offset`` stays; the fitted one adds to it); a source that also feeds recorded inputs cannot
take one (the inputs are cut into windows once, not per candidate: fit the other source's),
and its initial states are read at the fixed offset.

A recorded sample stamped ``t`` of a signal with offset ``d`` is compared with the simulation
at ``t - d`` (``d > 0``: the recording lags the model, as a sensor delay does), interpolated
linearly between the simulated samples around it (SLERP for orientations), in continuous time,
so the residual is smooth in ``d`` and the finite-difference Jacobian sees it. No candidate plan
changes: the parameter is not an overlay (it never appears in the fitted overlay artifact) and
the rollout is the same for every ``d``; the snapshot schedule covers every time the bounds
allow. Such a signal needs ``alignment: linear``, and its samples must stay at or after episode
time 0 when shifted by the upper bound (a request error names the first one that does not).

Mechanics: the candidate builder (``OffsetAwareBuilder``) builds plans from the overlay
parameters only and hands the problem a plan that also carries the offsets of that parameter
vector (``OffsetPlan``); ``episodes.run_episode`` attaches them to its tracks.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, cast, runtime_checkable

import numpy as np

from ..alignment import quat_slerp
from .._json import JsonObject
from ..errors import EvaluationError

if TYPE_CHECKING:
    from fibril_sim_core.overlays import OverlayParameter
    from fibril_sim_core.plan import SimulationPlan

__all__ = ["OffsetAwareBuilder", "OffsetPlan", "TimeOffsetTarget", "candidate_builder",
           "is_time_offset", "offset_ticks", "offsets_of", "shifted_linear"]


class PlanBuilder(Protocol):
    """A candidate builder as wrapped here (``model.candidate_plan``'s protocol, which this
    layer does not import): physical values → plan."""

    def build(self, values: Mapping[str, float]) -> SimulationPlan: ...


@runtime_checkable
class _Overlaying(Protocol):
    """A builder that says which overlays its values make (``OverlayingBuilder``)."""

    def overlay_parameters(self, values: Mapping[str, float]) -> Sequence[OverlayParameter]: ...


class Targeted(Protocol):
    """A calibration parameter as seen here: its id and its targets."""

    @property
    def id(self) -> str: ...

    @property
    def targets(self) -> Sequence[object]: ...


@dataclass(frozen=True)
class TimeOffsetTarget:
    """The time offset (s) of one observation's reference samples in every episode, or of
    every signal read from one named ``source`` (its clock against the episode's: the fitted
    part of the source's ``offset``)."""

    observation: str | None = None
    source: str | None = None

    def __post_init__(self) -> None:
        if (self.observation is None) == (self.source is None):
            raise ValueError("a time_offset target names an observation or a source")

    @property
    def offset_key(self) -> str:
        """What a signal bound to it carries (``SignalSpec.time_offset_key``) and the key of
        its value in ``OffsetPlan.time_offsets``: the observation id, or ``source:NAME``."""
        return self.observation if self.observation is not None else f"source:{self.source}"

    @property
    def key(self) -> str:
        return f"time_offset:{self.offset_key}"

    def describe(self) -> JsonObject:
        if self.source is not None:
            return {"type": "time_offset", "source": self.source}
        return {"type": "time_offset", "observation": self.observation}


def is_time_offset(parameter: Targeted) -> bool:
    return any(isinstance(t, TimeOffsetTarget) for t in parameter.targets)


def offsets_of(parameters: Sequence[Targeted], values: Mapping[str, float]
               ) -> dict[str, float]:
    """Offset key (an observation id, or ``source:NAME``) → offset in ns at ``values``."""
    out: dict[str, float] = {}
    for parameter in parameters:
        for target in parameter.targets:
            if isinstance(target, TimeOffsetTarget):
                out[target.offset_key] = float(values[parameter.id]) * 1e9
    return out


class OffsetPlan:
    """A candidate SimulationPlan plus the time offsets (ns) of its parameter vector."""

    def __init__(self, plan: SimulationPlan, offsets: Mapping[str, float]) -> None:
        self._plan = plan
        self.time_offsets = dict(offsets)

    def __getattr__(self, name: str) -> Any:  # reads through to the plan (any attribute)
        return getattr(self._plan, name)


class OffsetAwareBuilder:
    """Wraps a candidate builder made from the overlay parameters only."""

    def __init__(self, inner: PlanBuilder,
                 parameters: Sequence[Targeted]) -> None:
        self.inner = inner
        self.offset_parameters = tuple(p for p in parameters if is_time_offset(p))

    def build(self, values: Mapping[str, float]) -> SimulationPlan:
        # an OffsetPlan stands in for the plan it wraps (it reads through to it)
        return cast("SimulationPlan", OffsetPlan(self.inner.build(values),
                                                 offsets_of(self.offset_parameters, values)))

    def overlay_parameters(self, values: Mapping[str, float]) -> Sequence[OverlayParameter]:
        if not isinstance(self.inner, _Overlaying):
            raise AttributeError(f"{type(self.inner).__name__} makes no overlay parameters")
        return self.inner.overlay_parameters(values)

    def release(self, plan: SimulationPlan) -> None:
        """Hand a finished candidate plan (the inner builder's, unwrapped) back to the inner
        builder, when it takes plans back (its model may be reused)."""
        release = getattr(self.inner, "release", None)
        if release is not None:
            release(plan._plan if isinstance(plan, OffsetPlan) else plan)


_T = TypeVar("_T", bound=Targeted)
_M = TypeVar("_M")  # the manifest as the factory takes it (loaded, or its path)
_B = TypeVar("_B", bound=PlanBuilder)


def candidate_builder(factory: Callable[[_M, Sequence[_T]], _B], manifest: _M,
                      parameters: Sequence[_T]) -> _B | OffsetAwareBuilder:
    """``factory(manifest, overlay parameters)``, wrapped when some parameters are time
    offsets (the plain builder otherwise)."""
    overlay = tuple(p for p in parameters if not is_time_offset(p))
    if len(overlay) == len(parameters):
        return factory(manifest, parameters)
    return OffsetAwareBuilder(factory(manifest, overlay), parameters)


def shifted_linear(reference_ns: np.ndarray, offset_ns: float, sim_times: np.ndarray,
                   sim_values: np.ndarray, *, quaternion: bool, label: str) -> np.ndarray:
    """Simulated values at ``reference - offset`` (continuous), linearly interpolated."""
    t = np.asarray(reference_ns, dtype=np.float64) - offset_ns
    times = np.asarray(sim_times, dtype=np.float64)
    values = np.asarray(sim_values, dtype=np.float64).reshape(times.shape[0], -1)
    if times.shape[0] == 0 or t[0] < times[0] or t[-1] > times[-1]:
        bad = int(np.flatnonzero((t < (times[0] if times.size else np.inf))
                                 | (t > (times[-1] if times.size else -np.inf)))[0])
        span = (f"{times[0]:.0f}..{times[-1]:.0f} ns" if times.size else "no samples")
        raise EvaluationError(f"{label}: reference sample {bad} shifted by the time offset "
                              f"{offset_ns:.6g} ns falls at {t[bad]:.6g} ns, outside the "
                              f"simulated samples ({span})")
    right = np.clip(np.searchsorted(times, t, side="right"), 1, times.shape[0] - 1)
    left = right - 1
    step = times[right] - times[left]
    u = np.where(step > 0, (t - times[left]) / np.where(step > 0, step, 1.0), 0.0)
    u = np.clip(u, 0.0, 1.0)
    if quaternion:
        return quat_slerp(values[left], values[right], u)
    return values[left] + u[:, None] * (values[right] - values[left])


def offset_ticks(times_ns: np.ndarray, lower_ns: float, upper_ns: float, every: int,
                 timestep_ns: int) -> np.ndarray:
    """Every observation-grid tick a shifted sample may need for an offset in the bounds."""
    grid = every * timestep_ns
    start = np.floor((times_ns - upper_ns) / grid).astype(np.int64)
    stop = np.ceil((times_ns - lower_ns) / grid).astype(np.int64)
    start = np.maximum(start, 0)
    ranges = [np.arange(a, b + 1) for a, b in zip(start.tolist(), stop.tolist())]
    return np.unique(np.concatenate(ranges)) * every if ranges else np.zeros(0, np.int64)
