"""Calibration parameters: physical metadata, bounds, prior and optimizer parameterization.

The optimizer searches coordinates; the simulation receives physical values. Jacobians, SVD and
covariance use the dimensionless coordinate ``delta_p / physical_scale``.

Parameterizations (``u`` is the optimizer coordinate, ``p`` the physical value):

- ``linear``: ``u = p``.
- ``normalized_linear``: ``u = (p - origin) / scale`` with ``origin`` = nominal, else initial,
  and ``scale`` = coordinate_scale, else ``|nominal|`` (when non-zero), else ``upper - lower``.
- ``log_positive``: ``u = log(p)``; requires ``lower > 0``.

``physical_scale`` (the unit of the dimensionless analysis coordinate) is coordinate_scale, else
``|nominal|`` (when non-zero), else ``upper - lower``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, SupportsFloat, SupportsIndex

import numpy as np

from .errors import CalibrationRequestError

Parameterization = Literal["linear", "normalized_linear", "log_positive"]
PARAMETERIZATIONS: tuple[str, ...] = ("linear", "normalized_linear", "log_positive")


@dataclass(frozen=True)
class Prior:
    """A Gaussian prior on the physical value (a ``__prior__`` residual ``(p - mean) / sd``)."""

    mean: float
    standard_deviation: float


@dataclass(frozen=True)
class CalibrationParameter:
    """One physical parameter to fit. ``targets`` are fibril_sim_core overlay targets."""

    id: str
    lower: float
    upper: float
    initial: float
    nominal: float | None = None
    unit: str | None = None
    provenance: str | None = None
    parameterization: Parameterization = "linear"
    coordinate_scale: float | None = None
    prior: Prior | None = None
    targets: tuple[Any, ...] = ()  # overlay targets, or recordings' TimeOffsetTarget


def _finite(value: object) -> bool:
    if not isinstance(value, (SupportsFloat, SupportsIndex, str, bytes)):
        return False  # float() would raise TypeError
    try:
        return math.isfinite(float(value))
    except (TypeError, ValueError):
        return False


def parameter_problems(parameter: CalibrationParameter) -> list[str]:
    """Everything wrong with one parameter, each message naming it; empty when valid."""
    pid: object = parameter.id  # a Python caller may pass anything
    name = f"parameter {pid!r}"
    problems: list[str] = []
    if not isinstance(pid, str) or not pid:
        problems.append(f"parameter id {pid!r}: must be a non-empty string")
    if pid == "__prior__":
        problems.append(f"{name}: the id '__prior__' is reserved for prior residuals")
    if parameter.parameterization not in PARAMETERIZATIONS:
        problems.append(
            f"{name}: parameterization {parameter.parameterization!r} is not one of "
            + ", ".join(PARAMETERIZATIONS)
        )
    for key in ("lower", "upper", "initial"):
        if not _finite(getattr(parameter, key)):
            problems.append(f"{name}: {key} must be a finite number, got {getattr(parameter, key)!r}")
    for key in ("nominal", "coordinate_scale"):
        value = getattr(parameter, key)
        if value is not None and not _finite(value):
            problems.append(f"{name}: {key} must be a finite number, got {value!r}")
    if problems:
        return problems
    lower, upper, initial = float(parameter.lower), float(parameter.upper), float(parameter.initial)
    if not lower < upper:
        problems.append(f"{name}: lower ({lower:g}) must be smaller than upper ({upper:g})")
    elif not lower <= initial <= upper:
        problems.append(f"{name}: initial ({initial:g}) lies outside [{lower:g}, {upper:g}]")
    if parameter.parameterization == "log_positive" and not lower > 0.0:
        problems.append(f"{name}: log_positive needs lower > 0, got lower = {lower:g}")
    if parameter.coordinate_scale is not None and not float(parameter.coordinate_scale) > 0.0:
        problems.append(
            f"{name}: coordinate_scale must be positive, got {parameter.coordinate_scale:g}"
        )
    prior = parameter.prior
    if prior is not None:
        if not _finite(prior.mean):
            problems.append(f"{name}: prior mean must be a finite number, got {prior.mean!r}")
        if not _finite(prior.standard_deviation) or not float(prior.standard_deviation) > 0.0:
            problems.append(
                f"{name}: prior standard_deviation must be a positive finite number, "
                f"got {prior.standard_deviation!r}"
            )
    return problems


def validate_parameter(parameter: CalibrationParameter) -> None:
    """Raise ``CalibrationRequestError`` (naming the parameter) when the parameter is invalid."""
    problems = parameter_problems(parameter)
    if problems:
        raise CalibrationRequestError("; ".join(problems))


def validate_parameters(parameters: Sequence[CalibrationParameter]) -> None:
    """Validate every parameter and the uniqueness of their ids (one error lists all problems)."""
    problems: list[str] = []
    seen: set[str] = set()
    if not parameters:
        problems.append("parameters: at least one parameter is required")
    for parameter in parameters:
        problems.extend(parameter_problems(parameter))
        if parameter.id in seen:
            problems.append(f"parameter {parameter.id!r}: duplicate id")
        seen.add(parameter.id)
    if problems:
        raise CalibrationRequestError("; ".join(problems))


def physical_scale(parameter: CalibrationParameter) -> float:
    """The unit of the dimensionless coordinate: coordinate_scale, |nominal|, or the range."""
    if parameter.coordinate_scale is not None:
        return float(parameter.coordinate_scale)
    if parameter.nominal is not None and float(parameter.nominal) != 0.0:
        return abs(float(parameter.nominal))
    return float(parameter.upper) - float(parameter.lower)


def _normalized_origin_and_scale(parameter: CalibrationParameter) -> tuple[float, float]:
    origin = float(parameter.nominal if parameter.nominal is not None else parameter.initial)
    return origin, physical_scale(parameter)


_LINEAR, _NORMALIZED, _LOG = 0, 1, 2
_KIND = {"linear": _LINEAR, "normalized_linear": _NORMALIZED, "log_positive": _LOG}


class CoordinateMap:
    """Vectorised map between optimizer coordinates ``u`` and physical values ``p``.

    Physical values returned by ``to_physical`` are clipped to ``[lower, upper]`` so that
    floating-point round trips (``exp(log(upper))``) never leave the declared bounds.
    """

    def __init__(self, parameters: Sequence[CalibrationParameter]) -> None:
        validate_parameters(parameters)
        self.parameters: tuple[CalibrationParameter, ...] = tuple(parameters)
        self.ids: tuple[str, ...] = tuple(p.id for p in parameters)
        self.kind = np.array([_KIND[p.parameterization] for p in parameters], dtype=int)
        self.lower = np.array([float(p.lower) for p in parameters])
        self.upper = np.array([float(p.upper) for p in parameters])
        self.initial = np.array([float(p.initial) for p in parameters])
        self.physical_scale = np.array([physical_scale(p) for p in parameters])
        origin = np.zeros(len(parameters))
        scale = np.ones(len(parameters))
        for i, p in enumerate(parameters):
            if p.parameterization == "normalized_linear":
                origin[i], scale[i] = _normalized_origin_and_scale(p)
        self._origin = origin
        self._scale = scale
        self.coordinate_lower = self.to_coordinate(self.lower)
        self.coordinate_upper = self.to_coordinate(self.upper)

    @property
    def size(self) -> int:
        return len(self.ids)

    def to_coordinate(self, physical: np.ndarray) -> np.ndarray:
        p = np.asarray(physical, dtype=float)
        u = p.copy()
        norm = self.kind == _NORMALIZED
        u[norm] = (p[norm] - self._origin[norm]) / self._scale[norm]
        log = self.kind == _LOG
        u[log] = np.log(p[log])
        return u

    def to_physical(self, coordinate: np.ndarray) -> np.ndarray:
        u = np.asarray(coordinate, dtype=float)
        p = u.copy()
        norm = self.kind == _NORMALIZED
        p[norm] = self._origin[norm] + self._scale[norm] * u[norm]
        log = self.kind == _LOG
        p[log] = np.exp(u[log])
        result: np.ndarray = np.clip(p, self.lower, self.upper)
        return result

    def dphysical_dcoordinate(self, coordinate: np.ndarray) -> np.ndarray:
        """Diagonal of ``dp/du`` at ``u``."""
        u = np.asarray(coordinate, dtype=float)
        d = np.ones_like(u)
        norm = self.kind == _NORMALIZED
        d[norm] = self._scale[norm]
        log = self.kind == _LOG
        d[log] = np.exp(u[log])
        return d

    def coordinate_per_dimensionless(self, coordinate: np.ndarray) -> np.ndarray:
        """``du/dtheta`` with ``theta = delta_p / physical_scale``: ``physical_scale / (dp/du)``."""
        result: np.ndarray = self.physical_scale / self.dphysical_dcoordinate(coordinate)
        return result

    def coordinate_unit(self) -> np.ndarray:
        """The optimizer's ``x_scale``: one dimensionless unit, expressed in coordinates.

        ``linear`` -> physical_scale, ``normalized_linear`` -> 1 (already dimensionless),
        ``log_positive`` -> 1 (a factor e of the value).
        """
        unit = np.ones(self.size)
        linear = self.kind == _LINEAR
        unit[linear] = self.physical_scale[linear]
        return unit

    def fd_step(self, coordinate: np.ndarray, relative_step: float) -> np.ndarray:
        """Finite-difference step in optimizer coordinates (see ``differentiation``).

        Linear kinds perturb the physical value by ``relative_step * max(physical_scale, |p|)``
        (the ``|p|`` term keeps the step above the value's own rounding); ``log_positive``
        perturbs ``log p`` by ``relative_step`` (a relative change of the positive value).
        """
        u = np.asarray(coordinate, dtype=float)
        p = self.to_physical(u)
        physical_step = relative_step * np.maximum(self.physical_scale, np.abs(p))
        step = physical_step / self.dphysical_dcoordinate(u)
        log = self.kind == _LOG
        step[log] = relative_step
        result: np.ndarray = step
        return result
