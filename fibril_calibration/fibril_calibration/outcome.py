"""The solver side's result: fitted values, termination, summaries, analysis, profile, verdict.

``to_document()`` is strict JSON (``json.dumps(..., allow_nan=False)`` works): non-finite
numbers are ``null`` with an explicit flag beside them. The problem side wraps it into the full
calibration result document (context, provenance, parameter contract, overlay).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ._json import JsonObject, finite_or_none
from .analysis.identifiability import InformationMatrix, LocalAnalysis
from .analysis.profile_likelihood import ProfileLikelihood
from .analysis.summaries import ResidualSummary
from .analysis.verdict import FitVerdict
from .loss_spec import LossSpec
from .parameters import CalibrationParameter

OUTCOME_VERSION = 1


@dataclass(frozen=True)
class EvaluationCounts:
    training: int
    validation: int
    failed: int
    optimizer_function: int
    optimizer_jacobian: int
    analysis_relinearization: int

    def to_document(self) -> dict[str, int]:
        return {
            "training": self.training,
            "validation": self.validation,
            "failed": self.failed,
            "optimizer_function_evaluations": self.optimizer_function,
            "optimizer_jacobian_evaluations": self.optimizer_jacobian,
            "analysis_relinearization_evaluations": self.analysis_relinearization,
        }


@dataclass(frozen=True)
class CalibrationOutcome:
    parameters: tuple[CalibrationParameter, ...]
    fitted: np.ndarray  # physical values, declaration order
    coordinates: np.ndarray  # optimizer coordinates
    initial_objective: float
    final_objective: float
    termination: str  # converged | max_iterations | no_convergence
    optimizer_status: int
    optimizer_message: str
    iterations: int
    max_iterations: int
    evaluations: EvaluationCounts
    wall_time_s: float
    loss: LossSpec | None
    has_prior: bool
    standardized_gaussian_residuals: bool
    likelihood_interpretation_valid: bool
    optimization_summary: ResidualSummary
    training_summary: ResidualSummary
    validation_summary: ResidualSummary | None
    analysis: LocalAnalysis
    information: InformationMatrix | None
    profile: ProfileLikelihood | None
    verdict: FitVerdict
    finite_difference: JsonObject
    # Where the fit started (physical; the declared initial values unless an interior start
    # moved a parameter off its bound) and the warnings about the start.
    start: np.ndarray | None = None
    interior_start_fraction: float | None = None
    warnings: tuple[JsonObject, ...] = ()

    @property
    def parameter_ids(self) -> tuple[str, ...]:
        return tuple(p.id for p in self.parameters)

    @property
    def fitted_values(self) -> dict[str, float]:
        return {pid: float(v) for pid, v in zip(self.parameter_ids, self.fitted)}

    def to_document(self) -> JsonObject:
        params: list[JsonObject] = []
        for p, value, coord, scale in zip(
            self.parameters, self.fitted, self.coordinates, self.analysis.physical_scale
        ):
            params.append(
                {
                    "id": p.id,
                    "value": float(value),
                    "initial": float(p.initial),
                    "lower": float(p.lower),
                    "upper": float(p.upper),
                    "nominal": None if p.nominal is None else float(p.nominal),
                    "unit": p.unit,
                    "parameterization": p.parameterization,
                    "coordinate": float(coord),
                    "physical_scale": float(scale),
                    "prior": None
                    if p.prior is None
                    else {"mean": float(p.prior.mean), "standard_deviation": float(p.prior.standard_deviation)},
                }
            )
        return {
            "outcome_version": OUTCOME_VERSION,
            "optimizer": {
                "id": "scipy.optimize.least_squares/trf",
                "optimization_termination": self.termination,
                "status": self.optimizer_status,
                "message": self.optimizer_message,
                "iterations": self.iterations,
                "max_iterations": self.max_iterations,
                "initial_objective": finite_or_none(self.initial_objective),
                "final_objective": finite_or_none(self.final_objective),
                "finite_difference": self.finite_difference,
                "interior_start_fraction": self.interior_start_fraction,
                "start": {pid: float(v) for pid, v in zip(
                    self.parameter_ids,
                    [p.initial for p in self.parameters] if self.start is None
                    else self.start)},
            },
            "warnings": [dict(w) for w in self.warnings],
            "optimization_termination": self.termination,
            "evaluations": self.evaluations.to_document(),
            "wall_time_s": self.wall_time_s,
            "objective": {
                "loss": None if self.loss is None else {"type": self.loss.type, "scale": self.loss.scale},
                "prior": self.has_prior,
                "standardized_gaussian_residuals": self.standardized_gaussian_residuals,
            },
            "likelihood_interpretation_valid": self.likelihood_interpretation_valid,
            "parameters": params,
            "fitted_parameters": self.fitted_values,
            "optimization_summary": self.optimization_summary.to_document(),
            "training_summary": self.training_summary.to_document(),
            "validation_summary": None
            if self.validation_summary is None
            else self.validation_summary.to_document(),
            "local_identifiability": self.analysis.to_document(),
            "information_matrix": None if self.information is None else self.information.to_document(),
            "profile_likelihood": None if self.profile is None else self.profile.to_document(),
            "fit": self.verdict.to_document(),
        }
