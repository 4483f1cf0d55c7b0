"""Profile likelihood: fix one parameter on a grid, re-optimise the others, record the objective.

Grid: ``samples_per_parameter`` points evenly spaced in the parameter's optimizer coordinate
across its bounds (log-spaced for ``log_positive``), plus the fitted optimum itself (it replaces
a grid point that coincides with it, otherwise it is inserted). Starting at the optimum, the
grid is walked outwards in both directions; each point re-optimises the other parameters with
``least_squares`` (trf, same bounds, loss, priors and finite-difference contract) warm-started
from the neighbouring solution. With one parameter the profile is the objective along the grid.

The profiled value is the objective ``2 * cost`` (robustified data + prior sum of squares);
``delta`` is its increase over the fitted optimum.

Only when the objective is a standardized Gaussian likelihood (``likelihood_interpretation_valid``)
is a likelihood-ratio interval computed: threshold ``chi2.ppf(0.95, df=1)`` on ``delta``; on
each side the first grid point at or above it brackets the crossing, which ``toms748`` refines
(every evaluation re-optimises the others). No crossing before a bound returns that bound with
``confidence_<side>_bound_limited = true``. Otherwise only the curve is reported.
A grid point whose re-optimisation fails (``EvaluationError``) is recorded with a null objective
and skipped.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy.optimize import toms748

from .._json import JsonObject, finite_or_none
from ..errors import EvaluationError
from ..solve.objective import Objective
from ..solve.optimizer import CONVERGED, Tolerances, minimize

CONFIDENCE_LEVEL = 0.95


@dataclass(frozen=True)
class ProfilePoint:
    coordinate: float
    value: float
    objective: float | None
    delta: float | None
    termination: str
    physical: tuple[float, ...]
    is_optimum: bool = False

    def to_document(self, ids: tuple[str, ...]) -> JsonObject:
        return {
            "value": self.value,
            "objective": finite_or_none(self.objective),
            "delta_objective": finite_or_none(self.delta),
            "reoptimization": self.termination,
            "fitted_optimum": self.is_optimum,
            "parameters": {pid: v for pid, v in zip(ids, self.physical)},
        }


@dataclass(frozen=True)
class ParameterProfile:
    parameter: str
    points: tuple[ProfilePoint, ...]
    refinements: tuple[ProfilePoint, ...]
    interval: tuple[float, float] | None
    lower_limited: bool | None
    upper_limited: bool | None
    lower_objective_found: bool

    def to_document(self, ids: tuple[str, ...]) -> JsonObject:
        doc: JsonObject = {
            "parameter": self.parameter,
            "points": [p.to_document(ids) for p in self.points],
            "refinement_evaluations": len(self.refinements),
            "lower_objective_found": self.lower_objective_found,
            "confidence_interval": None if self.interval is None else list(self.interval),
        }
        if self.interval is not None:
            doc["confidence_lower_bound_limited"] = self.lower_limited
            doc["confidence_upper_bound_limited"] = self.upper_limited
        return doc


@dataclass(frozen=True)
class ProfileLikelihood:
    parameter_ids: tuple[str, ...]
    samples_per_parameter: int
    reference_objective: float
    likelihood_interpretation_valid: bool
    threshold: float | None
    profiles: tuple[ParameterProfile, ...]

    def profile(self, parameter: str) -> ParameterProfile:
        for p in self.profiles:
            if p.parameter == parameter:
                return p
        raise KeyError(parameter)

    def to_document(self) -> JsonObject:
        return {
            "objective": "2 * cost (robustified data sum of squares + prior sum of squares)",
            "samples_per_parameter": self.samples_per_parameter,
            "reference_objective": self.reference_objective,
            "likelihood_interpretation_valid": self.likelihood_interpretation_valid,
            "confidence_level": CONFIDENCE_LEVEL if self.likelihood_interpretation_valid else None,
            "threshold_delta_objective": self.threshold,
            "parameters": [p.to_document(self.parameter_ids) for p in self.profiles],
        }


def _grid(lo: float, hi: float, optimum: float, samples: int) -> tuple[np.ndarray, int]:
    grid = np.linspace(lo, hi, max(samples, 2))
    j = int(np.argmin(np.abs(grid - optimum)))
    if abs(grid[j] - optimum) <= 1e-9 * (hi - lo):
        grid[j] = optimum
        return grid, j
    j = int(np.searchsorted(grid, optimum))
    return np.insert(grid, j, optimum), j


class _Profiler:
    def __init__(
        self,
        objective: Objective,
        fitted: np.ndarray,
        reference: float,
        max_iterations: int,
        tolerances: Tolerances,
    ) -> None:
        self.objective = objective
        self.cmap = objective.cmap
        self.fitted = fitted
        self.reference = reference
        self.max_iterations = max_iterations
        self.tolerances = tolerances

    def solve(self, k: int, t: float, warm: np.ndarray) -> tuple[np.ndarray, float, str]:
        u = warm.copy()
        u[k] = t
        if self.cmap.size == 1:
            return u, self.objective.objective_value(u), CONVERGED
        free = [i for i in range(self.cmap.size) if i != k]
        fit = minimize(self.objective, u, free, self.max_iterations, self.tolerances)
        return fit.coordinate, self.objective.objective_value(fit.coordinate), fit.termination

    def point(self, k: int, u: np.ndarray | None, t: float, value: float | None, term: str,
              optimum: bool = False) -> ProfilePoint:
        phys = self.cmap.to_physical(u if u is not None else self._at(k, t))
        return ProfilePoint(
            coordinate=float(t),
            value=float(phys[k]),
            objective=value,
            delta=None if value is None else value - self.reference,
            termination=term,
            physical=tuple(float(v) for v in phys),
            is_optimum=optimum,
        )

    def _at(self, k: int, t: float) -> np.ndarray:
        u = self.fitted.copy()
        u[k] = t
        return u


def profile_likelihood(
    objective: Objective,
    fitted: np.ndarray,
    samples_per_parameter: int,
    likelihood_valid: bool,
    max_iterations: int,
    tolerances: Tolerances = Tolerances(),
    progress: Callable[[str], None] | None = None,
) -> ProfileLikelihood:
    cmap = objective.cmap
    fitted = np.asarray(fitted, dtype=float)
    reference = objective.objective_value(fitted)
    profiler = _Profiler(objective, fitted, reference, max_iterations, tolerances)
    threshold = None
    if likelihood_valid:
        from scipy.stats import chi2  # only for intervals: importing scipy.stats costs ~0.5 s

        threshold = float(chi2.ppf(CONFIDENCE_LEVEL, df=1))
    profiles = []
    for k, pid in enumerate(cmap.ids):
        profiles.append(_profile_one(profiler, k, samples_per_parameter, threshold))
        if progress is not None:
            prof = profiles[-1]
            text = "" if prof.interval is None else f" interval=[{prof.interval[0]:.6g}, {prof.interval[1]:.6g}]"
            progress(f"profile {pid}: {len(prof.points)} points{text} evaluations={objective.evaluator.total}")
    return ProfileLikelihood(
        parameter_ids=cmap.ids,
        samples_per_parameter=samples_per_parameter,
        reference_objective=reference,
        likelihood_interpretation_valid=likelihood_valid,
        threshold=threshold,
        profiles=tuple(profiles),
    )


def _profile_one(
    profiler: _Profiler, k: int, samples: int, threshold: float | None
) -> ParameterProfile:
    cmap = profiler.cmap
    lo, hi = float(cmap.coordinate_lower[k]), float(cmap.coordinate_upper[k])
    grid, centre = _grid(lo, hi, float(profiler.fitted[k]), samples)
    solutions: dict[int, tuple[np.ndarray | None, float | None, str]] = {
        centre: (profiler.fitted.copy(), profiler.reference, CONVERGED)
    }
    for order in (range(centre + 1, grid.size), range(centre - 1, -1, -1)):
        warm = profiler.fitted.copy()
        for j in order:
            try:
                u, value, term = profiler.solve(k, float(grid[j]), warm)
                solutions[j] = (u, value, term)
                warm = u
            except EvaluationError:
                solutions[j] = (None, None, "evaluation_failed")
    points = tuple(
        profiler.point(k, solutions[j][0], float(grid[j]), solutions[j][1], solutions[j][2], j == centre)
        for j in range(grid.size)
    )
    tiny = 1e-9 * max(1.0, abs(profiler.reference))
    lower_found = any(p.objective is not None and p.objective < profiler.reference - tiny for p in points)
    if threshold is None:
        return ParameterProfile(cmap.ids[k], points, (), None, None, None, lower_found)

    refinements: list[ProfilePoint] = []

    def crossing(direction: int) -> tuple[float, bool]:
        prev = centre
        j = centre + direction
        while 0 <= j < grid.size:
            u, value, _ = solutions[j]
            if value is not None:
                if value - profiler.reference >= threshold:
                    return _refine(profiler, k, grid, prev, j, solutions, threshold, refinements), False
                prev = j
            j += direction
        bound = hi if direction > 0 else lo
        return bound, True

    t_lo, lower_limited = crossing(-1)
    t_hi, upper_limited = crossing(+1)
    p_lo = float(cmap.to_physical(profiler._at(k, t_lo))[k])
    p_hi = float(cmap.to_physical(profiler._at(k, t_hi))[k])
    return ParameterProfile(
        cmap.ids[k], points, tuple(refinements), (p_lo, p_hi), lower_limited, upper_limited, lower_found
    )


def _refine(
    profiler: _Profiler,
    k: int,
    grid: np.ndarray,
    inside: int,
    outside: int,
    solutions: dict[int, tuple[np.ndarray | None, float | None, str]],
    threshold: float,
    refinements: list[ProfilePoint],
) -> float:
    """toms748 for ``delta(t) = threshold`` inside the bracket ``[grid[inside], grid[outside]]``.

    The root is sought on ``sqrt(max(delta, 0)) - sqrt(threshold)``: the same crossing, but
    for a near-quadratic profile an almost linear function, which toms748 resolves in a few
    re-optimisations instead of a dozen.
    """
    known: dict[float, tuple[np.ndarray, float]] = {}
    for j in (inside, outside):
        u, value, _ = solutions[j]
        assert u is not None and value is not None
        known[float(grid[j])] = (u, value)
    root_threshold = math.sqrt(threshold)

    def transformed(value: float) -> float:
        return math.sqrt(max(value - profiler.reference, 0.0)) - root_threshold

    def g(t: float) -> float:
        t = float(t)
        if t in known:
            return transformed(known[t][1])
        nearest = min(known, key=lambda s: abs(s - t))
        u, value, term = profiler.solve(k, t, known[nearest][0])
        known[t] = (u, value)
        refinements.append(profiler.point(k, u, t, value, term))
        return transformed(value)

    a, b = sorted((float(grid[inside]), float(grid[outside])))
    ga, gb = g(a), g(b)
    if ga == 0.0:
        return a
    if gb == 0.0:
        return b
    try:
        # Resolve the crossing to 1e-9 of the bracket (one grid spacing): far below the
        # interval's own uncertainty, in a handful of re-optimisations.
        return float(toms748(g, a, b, xtol=1e-9 * (b - a), rtol=1e-12, maxiter=50))
    except (EvaluationError, RuntimeError, ValueError):
        # A failed refinement falls back to linear interpolation inside the bracket.
        return a + (b - a) * (-ga) / (gb - ga) if math.isfinite(ga) and math.isfinite(gb) else b
