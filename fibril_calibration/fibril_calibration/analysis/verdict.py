"""The fit verdict: whether the fitted model plausibly explains the data (not why it does not).

Separate from the optimizer's termination. With no criteria the verdict is ``indeterminate``
(reason ``no_fit_criteria``). Otherwise each given criterion is checked on the unweighted
residual summaries and the local analysis; any failure gives ``no_plausible_fit`` with reason
codes, all passing gives ``plausible_fit``:

- ``training_rms_exceeded``: aggregate training RMS > ``max_training_rms``. With
  ``initial_state_fit`` the RMS compared (here and for validation and the episode ratio) is
  ``rms_dof_corrected``, ``sqrt(SSE / (count - nuisance degrees of freedom))``: the projected
  residuals have that many fewer degrees of freedom (``measurements.rms_basis`` says so).
- ``validation_rms_exceeded``: aggregate validation RMS > ``max_validation_rms``. Without
  validation data this criterion cannot be checked: reason ``validation_unavailable`` and, unless
  another criterion failed, the verdict is ``indeterminate``.
- ``ill_conditioned``: local condition number (infinite when rank deficient) >
  ``max_local_condition_number``.
- ``cross_episode_inconsistency``: max / min per-episode training RMS > ``max_episode_rms_ratio``
  (a zero minimum with a non-zero maximum is an infinite ratio; one episode gives ratio 1).
- ``parameter_near_bound:<id>``: with ``reject_parameter_near_bound``, a fitted value within
  ``near_bound_fraction`` (default 1e-3) of its range from a bound, measured in the optimizer
  coordinate (so a ``log_positive`` parameter's distance is a fraction of its log range).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from .._json import JsonObject, finite_or_none
from ..errors import CalibrationRequestError
from ..parameters import CoordinateMap
from .summaries import ResidualSummary

PLAUSIBLE = "plausible_fit"
NOT_PLAUSIBLE = "no_plausible_fit"
INDETERMINATE = "indeterminate"


@dataclass(frozen=True)
class FitCriteria:
    max_training_rms: float | None = None
    max_validation_rms: float | None = None
    max_local_condition_number: float | None = None
    max_episode_rms_ratio: float | None = None
    reject_parameter_near_bound: bool = False
    near_bound_fraction: float = 1e-3

    def __post_init__(self) -> None:
        for key in ("max_training_rms", "max_validation_rms", "max_local_condition_number",
                    "max_episode_rms_ratio"):
            value = getattr(self, key)
            if value is not None and not (math.isfinite(value) and value > 0.0):
                raise CalibrationRequestError(f"fit.{key} must be a positive number, got {value!r}")
        if not 0.0 <= self.near_bound_fraction < 0.5:
            raise CalibrationRequestError(
                f"fit near_bound_fraction must lie in [0, 0.5), got {self.near_bound_fraction!r}"
            )

    @property
    def empty(self) -> bool:
        return (
            self.max_training_rms is None
            and self.max_validation_rms is None
            and self.max_local_condition_number is None
            and self.max_episode_rms_ratio is None
            and not self.reject_parameter_near_bound
        )

    def to_document(self) -> JsonObject:
        return {
            "max_training_rms": self.max_training_rms,
            "max_validation_rms": self.max_validation_rms,
            "max_local_condition_number": self.max_local_condition_number,
            "max_episode_rms_ratio": self.max_episode_rms_ratio,
            "reject_parameter_near_bound": self.reject_parameter_near_bound,
            "near_bound_fraction": self.near_bound_fraction,
        }


@dataclass(frozen=True)
class FitVerdict:
    verdict: str
    reasons: tuple[str, ...]
    criteria: FitCriteria | None
    measurements: JsonObject = field(default_factory=dict)

    def to_document(self) -> JsonObject:
        return {
            "verdict": self.verdict,
            "reasons": list(self.reasons),
            "criteria": None if self.criteria is None else self.criteria.to_document(),
            "measurements": self.measurements,
        }


def episode_rms_ratio(training: ResidualSummary) -> float:
    values = [e.criterion_rms for e in training.episodes if e.criterion_rms is not None]
    if len(values) < 2:
        return 1.0
    hi, lo = max(values), min(values)
    if hi == 0.0:
        return 1.0
    return hi / lo if lo > 0.0 else math.inf


def bound_fractions(cmap: CoordinateMap, coordinate: np.ndarray) -> dict[str, float]:
    """Per parameter, the distance to the nearer bound as a fraction of the coordinate range."""
    span = cmap.coordinate_upper - cmap.coordinate_lower
    distance = np.minimum(coordinate - cmap.coordinate_lower, cmap.coordinate_upper - coordinate)
    return {pid: float(max(d, 0.0) / s) for pid, d, s in zip(cmap.ids, distance, span)}


def judge(
    criteria: FitCriteria | None,
    training: ResidualSummary,
    validation: ResidualSummary | None,
    condition_number: float,
    cmap: CoordinateMap,
    coordinate: np.ndarray,
) -> FitVerdict:
    ratio = episode_rms_ratio(training)
    fractions = bound_fractions(cmap, coordinate)
    training_rms = training.criterion_rms
    validation_rms = None if validation is None else validation.criterion_rms
    measurements: JsonObject = {
        "training_rms": training_rms,
        "validation_rms": validation_rms,
        "local_condition_number": finite_or_none(condition_number),
        "local_condition_number_infinite": not math.isfinite(condition_number),
        "episode_rms_ratio": finite_or_none(ratio),
        "episode_rms_ratio_infinite": not math.isfinite(ratio),
        "bound_distance_fraction": fractions,
    }
    if training.nuisance_dof or (validation is not None and validation.nuisance_dof):
        # initial_state_fit: the RMS figures above (and the episode ratio) are corrected for
        # the degrees of freedom the nuisance initial states took.
        measurements["rms_basis"] = ("dof_corrected: sqrt(SSE / (count - nuisance degrees of "
                                     "freedom)), per scope and per episode")
        measurements["training_rms_uncorrected"] = training.rms
        measurements["validation_rms_uncorrected"] = (None if validation is None
                                                      else validation.rms)
    if criteria is None or criteria.empty:
        return FitVerdict(INDETERMINATE, ("no_fit_criteria",), criteria, measurements)
    failures: list[str] = []
    unavailable: list[str] = []
    if criteria.max_training_rms is not None and (training_rms or 0.0) > criteria.max_training_rms:
        failures.append("training_rms_exceeded")
    if criteria.max_validation_rms is not None:
        if validation_rms is None:
            unavailable.append("validation_unavailable")
        elif validation_rms > criteria.max_validation_rms:
            failures.append("validation_rms_exceeded")
    if (
        criteria.max_local_condition_number is not None
        and not condition_number <= criteria.max_local_condition_number
    ):
        failures.append("ill_conditioned")
    if criteria.max_episode_rms_ratio is not None and ratio > criteria.max_episode_rms_ratio:
        failures.append("cross_episode_inconsistency")
    if criteria.reject_parameter_near_bound:
        for pid, fraction in fractions.items():
            if fraction <= criteria.near_bound_fraction:
                failures.append(f"parameter_near_bound:{pid}")
    if failures:
        return FitVerdict(NOT_PLAUSIBLE, tuple(failures + unavailable), criteria, measurements)
    if unavailable:
        return FitVerdict(INDETERMINATE, tuple(unavailable), criteria, measurements)
    return FitVerdict(PLAUSIBLE, (), criteria, measurements)
