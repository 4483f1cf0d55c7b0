"""The calibration solver: fit, analyse, profile and judge one ``ResidualModel``.

``calibrate(model, parameters, options)`` runs

1. a bounded trf ``least_squares`` fit in optimizer coordinates (``optimizer.minimize``) with
   the bound-aware finite-difference Jacobian (``differentiation``), robust loss on data
   residuals and Gaussian priors appended as ``__prior__`` residuals (``objective``);
2. summaries: ``optimization_summary`` (what was minimised), ``training_summary`` and
   ``validation_summary`` (raw unweighted residuals; validation is evaluated once, at the fit);
3. local analysis of the data-only unweighted training Jacobian at the fit (``analysis``): one
   second-order linearisation at the fitted point through the same adapter (Ceres'
   ``Problem::Evaluate`` at the solution). It costs nothing after the default central-difference
   iterations (memoised) and ``2n`` rollouts after opt-in forward-difference ones. The weighted and unweighted Jacobians
   come from the same rollouts; ``jacobian_source`` is ``objective_jacobian`` when they coincide
   with the objective's (no prior, no loss, all weights 1) and ``data_only_relinearization``
   otherwise;
4. optional information matrix and profile likelihood, then the fit verdict (``verdict``).

Never imports rclpy; the problem side owns requests, rollouts and the result document.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from .analysis.identifiability import analyze, information_matrix
from .analysis.profile_likelihood import profile_likelihood
from .analysis.summaries import ResidualSummary, summarize
from .analysis.verdict import FitCriteria, judge
from .errors import CalibrationRequestError
from .evaluation import NuisanceDegrees, ResidualModel
from .loss_spec import LossSpec
from .outcome import CalibrationOutcome, EvaluationCounts
from .parameters import CalibrationParameter, CoordinateMap
from .solve.differentiation import Evaluator, FiniteDifference
from .solve.objective import Objective
from .solve.optimizer import Tolerances, minimize
from .solve.starting_point import StartingPoint, starting_point


@dataclass(frozen=True)
class SolverOptions:
    """Solver settings (the problem side maps the request's optimizer/objective/analysis/fit)."""

    max_iterations: int = 50
    loss: LossSpec | None = None
    standardized_gaussian_residuals: bool = False
    profile_likelihood: bool = False
    profile_samples: int = 21
    information_matrix: bool = False
    fit_criteria: FitCriteria | None = None
    progress: Callable[[str], None] | None = None
    optimizer_differences: str = "central"
    relative_step: float | None = None
    tolerances: Tolerances = Tolerances()
    cache_entries: int = 16  # execution.cache_entries (the latest centre is always kept)
    # optimizer.interior_start.fraction: start parameters at a bound that far inside (see
    # ``starting_point``); None starts at the declared initial values.
    interior_start_fraction: float | None = None

    def __post_init__(self) -> None:
        if int(self.max_iterations) != self.max_iterations or self.max_iterations < 0:
            raise CalibrationRequestError(
                f"optimizer.max_iterations must be a non-negative integer, got {self.max_iterations!r}"
            )
        if self.optimizer_differences not in ("forward", "central"):
            raise CalibrationRequestError(
                "optimizer_differences must be 'forward' or 'central', "
                f"got {self.optimizer_differences!r}"
            )
        fraction = self.interior_start_fraction
        if fraction is not None and not (np.isfinite(fraction) and 0.0 < fraction < 0.5):
            raise CalibrationRequestError(
                f"optimizer.interior_start.fraction must lie in (0, 0.5), got {fraction!r}"
            )
        if self.profile_likelihood and self.profile_samples < 2:
            raise CalibrationRequestError(
                "analysis.profile_likelihood.samples_per_parameter must be at least 2, "
                f"got {self.profile_samples!r}"
            )


def likelihood_interpretation_valid(
    options: SolverOptions, parameters: Sequence[CalibrationParameter]
) -> bool:
    """Standardized Gaussian residuals, no prior and no robust loss (weights are 1 by request)."""
    return (
        options.standardized_gaussian_residuals
        and options.loss is None
        and all(p.prior is None for p in parameters)
    )


def calibrate(
    model: ResidualModel,
    parameters: Sequence[CalibrationParameter],
    options: SolverOptions = SolverOptions(),
    start_values: np.ndarray | None = None,
) -> CalibrationOutcome:
    """``start_values`` (physical values) restarts the fit from a given point (initial_state_fit's
    second pass) instead of the declared initial values: the parameters, their coordinate
    origins and the contract stay the request's."""
    start = time.perf_counter()
    progress = options.progress
    cmap = CoordinateMap(parameters)
    if tuple(model.parameter_ids) != cmap.ids:
        raise CalibrationRequestError(
            f"the residual model's parameters {list(model.parameter_ids)} differ from the "
            f"calibration parameters {list(cmap.ids)}"
        )
    evaluator = Evaluator(model, cmap, options.cache_entries)
    fd = FiniteDifference(evaluator, options.relative_step)
    order = 1 if options.optimizer_differences == "forward" else 2
    objective = Objective(evaluator, fd, options.loss, order)

    if start_values is None:
        start_point = starting_point(cmap, options.interior_start_fraction)
    else:
        start_point = StartingPoint(np.clip(np.asarray(start_values, dtype=float), cmap.lower,
                                            cmap.upper), ())
    if progress is not None:
        for warning in start_point.warnings:
            progress(f"warning: {warning['message']}")
    u0 = cmap.to_coordinate(start_point.physical)
    fit = minimize(objective, u0, None, options.max_iterations, options.tolerances, progress)
    u_hat = fit.coordinate
    p_hat = cmap.to_physical(u_hat)

    before = evaluator.counts["training"]
    lin = fd.linearize(u_hat, None, 2)  # central / one-sided 3-point; memo hit if order 2
    relinearization = evaluator.counts["training"] - before
    centre = lin.centre
    weighted = centre.weighted or not np.array_equal(centre.residuals, centre.unweighted)
    same_contract = not (objective.has_prior or options.loss is not None or weighted)
    source = "objective_jacobian" if same_contract else "data_only_relinearization"
    # Request validation already rejects weights != 1 with standardized residuals; the solver
    # double-checks on the residuals themselves.
    valid = likelihood_interpretation_valid(options, parameters) and not weighted

    # Summaries.
    data_sq, prior_sq = objective.squares(u_hat)
    n_data = data_sq.size
    optimization_summary = summarize(
        np.concatenate([data_sq, prior_sq]),
        tuple(centre.blocks) + objective.prior_blocks(n_data),
    )
    # initial_state_fit: degrees of freedom the projected nuisance states took, per episode
    nuisance = (model.nuisance_degrees_of_freedom if isinstance(model, NuisanceDegrees)
                else None)
    training_summary = summarize(centre.unweighted**2, centre.blocks,
                                 nuisance("training") if nuisance else None)
    validation_summary: ResidualSummary | None = None
    if model.has_validation:
        validation = evaluator.evaluate(u_hat, "validation")
        validation_summary = summarize(validation.unweighted**2, validation.blocks,
                                       nuisance("validation") if nuisance else None)
    if progress is not None:
        val = "" if validation_summary is None else f" validation_rms={_g(validation_summary.rms)}"
        progress(f"fit {fit.termination}: training_rms={_g(training_summary.rms)}{val}")

    # Local analysis in dimensionless coordinates.
    J = lin.dimensionless_unweighted(cmap)
    analysis = analyze(
        cmap.ids,
        p_hat,
        cmap.physical_scale,
        J,
        centre.unweighted,
        options.standardized_gaussian_residuals,
        valid,
        source,
        bounds=(cmap.lower, cmap.upper),
        nuisance_dof=training_summary.nuisance_dof,
    )
    information = information_matrix(analysis, J) if options.information_matrix else None

    profile = None
    if options.profile_likelihood:
        profile = profile_likelihood(
            objective, u_hat, options.profile_samples, valid, options.max_iterations,
            options.tolerances, progress,
        )

    verdict = judge(
        options.fit_criteria, training_summary, validation_summary,
        analysis.condition_number, cmap, u_hat,
    )
    return CalibrationOutcome(
        parameters=tuple(parameters),
        fitted=p_hat,
        coordinates=u_hat,
        initial_objective=fit.initial_objective,
        final_objective=objective.objective_value(u_hat),
        termination=fit.termination,
        optimizer_status=fit.status,
        optimizer_message=fit.message,
        iterations=fit.iterations,
        max_iterations=options.max_iterations,
        evaluations=EvaluationCounts(
            training=evaluator.counts["training"],
            validation=evaluator.counts["validation"],
            failed=evaluator.failures,
            optimizer_function=fit.function_evaluations,
            optimizer_jacobian=fit.jacobian_evaluations,
            analysis_relinearization=relinearization,
        ),
        wall_time_s=time.perf_counter() - start,
        loss=options.loss,
        has_prior=objective.has_prior,
        standardized_gaussian_residuals=options.standardized_gaussian_residuals,
        likelihood_interpretation_valid=valid,
        optimization_summary=optimization_summary,
        training_summary=training_summary,
        validation_summary=validation_summary,
        analysis=analysis,
        information=information,
        profile=profile,
        verdict=verdict,
        finite_difference={
            "optimizer_order": order,
            "optimizer_relative_step": fd.step_for(order),
            "analysis_order": 2,
            "analysis_relative_step": fd.step_for(2),
            "analysis_schemes": dict(zip(cmap.ids, lin.schemes)),
            "analysis_steps": dict(zip(cmap.ids, (float(s) for s in lin.steps))),
        },
        start=start_point.physical,
        interior_start_fraction=options.interior_start_fraction,
        warnings=start_point.warnings,
    )


def _g(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.6g}"
