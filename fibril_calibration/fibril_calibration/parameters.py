"""Calibration parameters: physical metadata, bounds, prior and optimizer parameterization.

The optimizer searches coordinates; the simulation receives physical values. Jacobians, SVD and
covariance use the dimensionless coordinate ``delta_p / physical_scale``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

Parameterization = Literal["linear", "normalized_linear", "log_positive"]


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
    targets: tuple[Any, ...] = ()
