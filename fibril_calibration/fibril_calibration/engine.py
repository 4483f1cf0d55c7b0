"""``run_calibration``: request → problem → solver → result document (the programmatic entry).

    result = run_calibration("calibration.yaml", progress=print)
    result.document["fitted_parameters"]; result.parameter_overlay

The CLI is a thin layer over this function. Custom device decoders and a replacement
CandidatePlanBuilder plug in here without changing the calibration core.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from fibril_sim_core.execution.backend import Backend, ExecutionError, resolve_backend
from fibril_sim_core.manifest import SimulationManifest
from fibril_sim_core.overlays import OverlayParameter
from fibril_sim_core.plan import SimulationPlan

from ._atomic import write_atomic
from ._json import JsonObject, JsonValue, json_object
from .analysis.scores import input_timing, scores_text, signal_units
from .analysis.verdict import FitCriteria
from .fitted import FittedParameter, fitted_parameters
from .model.candidate_plan import (CandidatePlanBuilder, CandidatePlanBuilderProtocol,
                                   OverlayingBuilder)
from .model.decoders import CalibrationDeviceOutputDecoderRegistry
from .outcome import CalibrationOutcome
from .parameter_sets import nominal_set, score_sets
from .parameters import CalibrationParameter
from .recordings.time_offsets import candidate_builder as offset_aware
from .recordings.time_offsets import OffsetAwareBuilder, is_time_offset
from .request.document import CalibrationRequest, load_calibration_request
from .request.gravity_check import gravcomp_warnings
from .result import build_result_document, strict, to_json
from .solve.optimizer import Tolerances
from .solve.problem import CalibrationProblem, Progress
from .solver import SolverOptions, calibrate

if TYPE_CHECKING:
    from fibril_sim_core.execution.dask_session import DaskSession

    from .metrics_json import MetricsDocuments

BuilderFactory = Callable[[SimulationManifest, Sequence[CalibrationParameter]],
                          CandidatePlanBuilderProtocol]
CandidateBuilderArgument = CandidatePlanBuilderProtocol | BuilderFactory | None


@dataclass(frozen=True)
class CalibrationResult:
    """The outcome of one calibration run and its full result document."""

    request: CalibrationRequest = field(repr=False)
    outcome: CalibrationOutcome = field(repr=False)
    fitted_plan: SimulationPlan = field(repr=False)
    document: JsonObject = field(repr=False)
    # ``{"nominal" | "fitted": {episode: metrics.json document}}`` (``--metrics``)
    metrics: dict[str, MetricsDocuments] = field(default_factory=dict, repr=False)

    @property
    def fitted_values(self) -> dict[str, float]:
        return self.outcome.fitted_values

    @property
    def parameter_overlay(self) -> Mapping[str, JsonValue]:
        """The portable overlay artifact of the fitted values (``--output-overlay``)."""
        return json_object(self.document["parameter_overlay"], "parameter_overlay")

    def to_json(self, *, indent: int | None = 2) -> str:
        return to_json(self.document, indent=indent)

    def summary(self) -> str:
        return summary_text(self.document)

    @property
    def parameters(self) -> dict[str, FittedParameter]:
        """``{id: FittedParameter}``: ``.value``, ``.sd``, ``.interval`` (95 %)."""
        return fitted_parameters(self.document)

    @property
    def verdict(self) -> str | None:
        """The fit verdict (``plausible_fit``, ...); None when the request sets no criteria."""
        verdict = json_object(self.document.get("fit") or {}, "fit").get("verdict")
        return None if verdict is None else str(verdict)

    @property
    def scores(self) -> Mapping[str, JsonValue]:
        """The nominal and fitted parameter sets scored on every episode (``scores``)."""
        return json_object(self.document.get("scores") or {}, "scores")

    def to_overlay(self, path: str | Path | None = None) -> Mapping[str, JsonValue]:
        """The fitted values as a parameter overlay artifact; written to ``path`` if given
        (a manifest's ``parameter_overlays`` then loads it)."""
        if path is not None:
            write_atomic(path, to_json(self.parameter_overlay))
        return self.parameter_overlay

    def save(self, path: str | Path) -> Path:
        """Write the result document (what ``fibril_sim calibrate --output`` writes)."""
        write_atomic(path, self.to_json())
        return Path(path)

    def report(self, folder: str | Path) -> Path:
        """Draw the HTML + PNG report into ``folder`` (what ``--report DIR`` writes; needs
        matplotlib: ``fibril_calibration[report]``); returns its index.html."""
        from .report import report_result  # the report's figures: matplotlib, only here

        return report_result(self.document, Path(folder), where=str(folder),
                             request=self.request)


def solver_options(request: CalibrationRequest,
                   progress: Progress | None = None) -> SolverOptions:
    """Map the request's optimizer / objective / analysis / fit blocks to SolverOptions."""
    optimizer = request.optimizer
    defaults = Tolerances()
    tolerances = Tolerances(
        ftol=optimizer.function_tolerance or defaults.ftol,
        xtol=optimizer.parameter_tolerance or defaults.xtol,
        gtol=optimizer.gradient_tolerance or defaults.gtol)
    fit = request.fit
    criteria = None
    if fit.specified:
        extra = ({} if fit.near_bound_fraction is None
                 else {"near_bound_fraction": fit.near_bound_fraction})
        criteria = FitCriteria(
            max_training_rms=fit.max_training_rms, max_validation_rms=fit.max_validation_rms,
            max_local_condition_number=fit.max_local_condition_number,
            max_episode_rms_ratio=fit.max_episode_rms_ratio,
            reject_parameter_near_bound=fit.reject_parameter_near_bound, **extra)
    return SolverOptions(
        max_iterations=optimizer.max_iterations,
        loss=request.objective.loss,
        standardized_gaussian_residuals=request.objective.standardized_gaussian_residuals,
        profile_likelihood=request.analysis.profile_likelihood.enabled,
        profile_samples=request.analysis.profile_likelihood.samples_per_parameter,
        information_matrix=request.analysis.information_matrix,
        fit_criteria=criteria, progress=progress, tolerances=tolerances,
        cache_entries=request.execution.cache_entries,
        optimizer_differences=optimizer.jacobian,
        interior_start_fraction=optimizer.interior_start_fraction,
        relative_step=optimizer.finite_difference_relative_step)


def run_calibration(request_or_path: CalibrationRequest | str | Path, *,
                    progress: Progress | None = None,
                    candidate_builder: CandidateBuilderArgument = None,
                    decoders: CalibrationDeviceOutputDecoderRegistry | None = None,
                    metrics: bool = False, scheduler: str | None = None,
                    environ: Mapping[str, str] | None = None) -> CalibrationResult:
    """Load (if needed) and validate the request, fit, analyse and build the result document.

    ``candidate_builder`` is a CandidatePlanBuilder-like object (``build(values) -> plan``) or
    a factory ``(manifest, parameters) -> builder``; ``decoders`` adds custom device decoders;
    ``metrics`` also builds the metrics.json documents (``CalibrationResult.metrics``).
    ``scheduler`` (``--scheduler``) or ``FIBRIL_DASK_SCHEDULER`` in ``environ`` (default: this
    process's environment) run the rollouts on Dask instead of the request's
    ``execution.backend`` (docs/distributed.md).
    Raises CalibrationRequestError for an invalid request and EvaluationError when a rollout
    cannot be evaluated (e.g. at the initial values).
    """
    decoders = decoders or CalibrationDeviceOutputDecoderRegistry.standard()
    factory, instance = _builder_parts(candidate_builder)
    environ = os.environ if environ is None else environ
    stack = contextlib.ExitStack()
    try:
        # --scheduler / FIBRIL_DASK_SCHEDULER: connected before the episodes are decoded, so
        # an unreachable scheduler or mismatched workers fail at once.
        backend = resolve_backend(Backend(), scheduler, environ)
        session = _dask_session(stack, backend, candidate_builder, progress)
        if isinstance(request_or_path, CalibrationRequest):
            request = request_or_path
        else:
            if progress is not None:
                progress(f"loading {request_or_path}")
            request = load_calibration_request(request_or_path, decoders=decoders,
                                               candidate_builder=factory)
            if progress is not None:
                for warning in gravcomp_warnings(request):
                    progress(f"warning: {warning['message']}")
        if session is None:  # the request's execution.backend
            backend = resolve_backend(request.execution.backend, None, {},
                                      request.execution.max_parallelism)
            session = _dask_session(stack, backend, candidate_builder, progress)
    except BaseException:
        stack.close()
        raise

    if instance is not None:  # a ready builder still gets its time offsets attached
        builder = offset_aware(lambda manifest, parameters: instance, request.manifest,
                               request.parameters)
    else:
        builder = offset_aware(factory or CandidatePlanBuilder.holding(request.fixed_overlays),
                               request.manifest, request.parameters)
    if progress is not None:
        sizes = [sum(s.count for s in e.signals) for e in request.training]
        progress(f"{len(request.parameters)} parameter(s), {len(request.training)} training / "
                 f"{len(request.validation)} validation episode(s), {sum(sizes)} training "
                 f"reference sample(s); max_parallelism {request.execution.max_parallelism}")
    with stack:
        problem = stack.enter_context(CalibrationProblem(
            request, candidate_builder=builder, decoders=decoders, progress=progress))
        described = backend.describe()
        if session is not None:
            from .solve.dask_rollouts import DaskRollouts  # Dask only when used

            problem.set_remote(DaskRollouts.for_problem(session, problem))
            described = session.describe()
        state_fit: JsonObject | None = None
        if problem.fits_initial_states:
            outcome, state_fit = _fit_with_initial_states(problem, request, progress)
        else:
            outcome = calibrate(problem, request.parameters, solver_options(request, progress))
        fitted_plan = problem.candidate_plan(outcome.fitted)
        rollout_ticks = {s.episode.id: s.end_tick for scope in ("training", "validation")
                         for s in problem.schedules(scope)}
        values = dict(zip(request.parameter_ids, (float(v) for v in outcome.fitted)))
        # The nominal (initial) set beside the fitted one, in physical units (``scores``).
        # A set or scope that cannot be evaluated is recorded as {"error": ...}: the finished
        # fit is never lost to its scores.
        documents: dict[str, MetricsDocuments] | None = {} if metrics else None
        scores = score_sets(problem, [nominal_set(request),
                                      ("fitted", values, {"from": "this calibration"})],
                            documents)
        statistics = problem.statistics
    overlay_parameters = _overlay_parameters(request, builder, values)
    document = build_result_document(request, outcome, fitted_plan, overlay_parameters,
                                     statistics, rollout_ticks, described)
    document["scores"] = strict(scores)
    from .report.physical_errors import error_summary, floor_scores

    document["error_summary"] = strict(error_summary(scores, floor_scores(request,
                                                                          signal_units(request))))
    if state_fit is not None:
        document["initial_state_fit"] = strict(state_fit)
    document["input_timing"] = strict(input_timing(request))
    if progress is not None:
        progress(f"done: {outcome.termination}, fit {outcome.verdict.verdict}")
    return CalibrationResult(request, outcome, fitted_plan, document, documents or {})


class CommandBackend:
    """A command's Dask session, if any: ``--scheduler`` / ``FIBRIL_DASK_SCHEDULER`` connect
    at once (before the request's episodes are decoded), else the request's
    ``execution.backend`` decides once the request is loaded (``session``)."""

    def __init__(self, stack: contextlib.ExitStack, session: DaskSession | None,
                 progress: Progress | None) -> None:
        self._stack = stack
        self._session = session
        self._progress = progress

    def session(self, request: CalibrationRequest) -> DaskSession | None:
        """The open DaskSession (None: the local backend)."""
        if self._session is None:
            backend = resolve_backend(request.execution.backend, None, {},
                                      request.execution.max_parallelism)
            self._session = _dask_session(self._stack, backend, None, self._progress)
        return self._session


@contextlib.contextmanager
def open_backend(scheduler: str | None, environ: Mapping[str, str],
                 progress: Progress | None) -> Iterator[CommandBackend]:
    """The backend of a command that is not a fit (``--evaluate``); closed on exit."""
    with contextlib.ExitStack() as stack:
        backend = resolve_backend(Backend(), scheduler, environ)
        yield CommandBackend(stack, _dask_session(stack, backend, None, progress), progress)


def _dask_session(stack: contextlib.ExitStack, backend: Backend,
                  candidate_builder: CandidateBuilderArgument,
                  progress: Progress | None) -> DaskSession | None:
    """An open DaskSession for a dask ``backend`` (closed with ``stack``), else None."""
    if not backend.is_dask:
        return None
    if candidate_builder is not None:
        raise ExecutionError("the dask backend builds candidates with the standard "
                             "CandidatePlanBuilder on its workers; a custom candidate_builder "
                             "runs on the local backend only")
    from fibril_sim_core.execution.dask_session import open_session  # Dask only when used

    return stack.enter_context(open_session(backend, progress))


def _fit_with_initial_states(problem: CalibrationProblem, request: CalibrationRequest,
                             progress: Progress | None) -> tuple[CalibrationOutcome, JsonObject]:
    """Two passes (``initial_state_fit``): the initial-state sensitivities at the initial
    values, a fit, the sensitivities again at that fit, a second fit from there; the nuisance
    initial states at the final fit are reported, never in the physical result."""
    started = time.perf_counter()
    initial = np.array([p.initial for p in request.parameters], dtype=float)
    problem.refresh_initial_state_fit(initial)
    first = calibrate(problem, request.parameters, solver_options(request, progress))
    if progress is not None:
        progress("initial_state_fit: sensitivities again at the first fit, second pass")
    problem.refresh_initial_state_fit(first.fitted)
    # The second pass restarts at the first fit through an explicit start vector: the
    # parameters (their initial values, and the coordinate origin of a normalized_linear one
    # without a nominal) stay the request's, so value == origin + coordinate * scale holds.
    outcome = calibrate(problem, request.parameters, solver_options(request, progress),
                        start_values=first.fitted)
    # The fit started at the request's initial values (the first pass): its start, initial
    # objective and start warnings; both passes' evaluations and time (sensitivity rollouts
    # included) are counted.
    counts = {f.name: getattr(first.evaluations, f.name) + getattr(outcome.evaluations, f.name)
              for f in fields(outcome.evaluations)}
    outcome_initial = outcome.initial_objective
    outcome = replace(outcome, start=first.start, initial_objective=first.initial_objective,
                      warnings=first.warnings,
                      evaluations=replace(outcome.evaluations, **counts),
                      wall_time_s=time.perf_counter() - started)
    estimates = problem.initial_state_estimates(outcome.fitted)
    removed = {scope: sum(_rank(e["rank"]) for e in estimates.values() if e["scope"] == scope)
               for scope in ("training", "validation")}
    return outcome, {
        "role": "nuisance: estimated per episode, not part of the fitted parameter set",
        "method": "linearised variable projection (initial_state_fit module)",
        "passes": [{"sensitivity_at": point} for point in problem.initial_state_fit_points],
        "first_pass": {"fitted": dict(zip(request.parameter_ids,
                                          (float(v) for v in first.fitted))),
                       "iterations": first.iterations, "termination": first.termination,
                       "training_rms": first.training_summary.rms,
                       "final_objective": first.final_objective},
        "second_pass": {"start": "first_pass.fitted",
                        "initial_objective": float(outcome_initial)},
        "degrees_of_freedom_removed": removed,
        "episodes": estimates}


def _rank(value: JsonValue) -> int:
    """An estimate's rank (``model.initial_state_fit.describe``: an int)."""
    if not isinstance(value, int):
        raise TypeError(f"rank: expected an integer, got {type(value).__name__}")
    return value


def _builder_parts(argument: CandidateBuilderArgument
                   ) -> tuple[BuilderFactory | None, CandidatePlanBuilderProtocol | None]:
    if argument is None:
        return None, None
    if isinstance(argument, type) or not isinstance(argument, CandidatePlanBuilderProtocol):
        return argument, None
    # A ready builder object also resolves the request's selectors on its nominal plan.
    return (lambda manifest, parameters: argument), argument


def _overlay_parameters(request: CalibrationRequest, builder: CandidatePlanBuilderProtocol,
                        values: dict[str, float]) -> tuple[OverlayParameter, ...]:
    """The fitted values bound to their typed targets; provenance names the calibration."""
    inner = builder.inner if isinstance(builder, OffsetAwareBuilder) else builder
    if isinstance(inner, OverlayingBuilder):
        parameters = tuple(inner.overlay_parameters(values))
    else:  # time offsets are not overlays
        overlay = [p for p in request.parameters if not is_time_offset(p)]
        parameters = CandidatePlanBuilder(request.manifest, overlay).overlay_parameters(values)
    origin = f"fibril_sim calibrate {request.path.name} (request sha256 {request.sha256[:16]})"
    return tuple(OverlayParameter(p.id, p.value, p.targets, p.unit,
                                  origin + (f"; prior provenance: {p.provenance}"
                                            if p.provenance else ""))
                 for p in parameters)


# --------------------------------------------------------------------------- summary

def summary_text(document: Mapping[str, Any]) -> str:
    """A readable summary of a result document (the CLI's default output). The document is
    read as JSON as loaded (a boundary): a key the summary needs and cannot find raises."""
    lines: list[str] = []
    optimizer = document.get("optimizer", {})
    lines.append(f"calibration  {document['request']['path']}")
    evaluations = document.get("evaluations", {})
    lines.append(f"termination  {document.get('optimization_termination')} after "
                 f"{optimizer.get('iterations')} iteration(s) "
                 f"(max {optimizer.get('max_iterations')}); "
                 f"{evaluations.get('training')} training evaluation(s), "
                 f"{document.get('wall_time_s', 0.0):.2f} s")
    identifiability = document.get("local_identifiability") or {}
    per = {p["id"]: p for p in identifiability.get("parameters", [])}
    contract = {p["id"]: p for p in document.get("parameter_contract", [])}
    valid = document.get("likelihood_interpretation_valid")
    lines.append("parameters" + ("  (± 1 standard deviation, 95 % interval)" if valid else
                                 "  (no statistical interval: likelihood interpretation "
                                 "not valid)"))
    width = max([len(pid) for pid in document.get("fitted_parameters", {})] + [4])
    for pid, value in document.get("fitted_parameters", {}).items():
        unit = contract.get(pid, {}).get("unit") or ""
        entry = per.get(pid, {})
        text = f"  {pid:<{width}}  {value:.6g}{(' ' + unit) if unit else ''}"
        if valid:
            sd = entry.get("standard_deviation")
            interval = entry.get("interval_95")
            if sd is not None and interval is not None:
                text += f"  ± {sd:.3g}  [{interval[0]:.6g}, {interval[1]:.6g}]"
            else:
                text += "  (not locally identifiable: no interval)"
        bounds = contract.get(pid, {})
        if bounds:
            text += f"   bounds [{bounds['lower']:g}, {bounds['upper']:g}]"
        lines.append(text)
    for scope in ("training", "validation"):
        summary = document.get(f"{scope}_summary")
        if not summary:
            continue
        aggregate = summary["aggregate"]
        episodes = ", ".join(f"{e['episode']} {_g(e['rms'])}" for e in summary["episodes"])
        corrected = ""
        if "rms_dof_corrected" in aggregate:
            corrected = (f", {_g(aggregate['rms_dof_corrected'])} corrected for "
                         f"{aggregate['nuisance_degrees_of_freedom']} nuisance degree(s) of "
                         f"freedom")
        lines.append(f"{scope:<11}  rms {_g(aggregate['rms'])}{corrected} over "
                     f"{aggregate['count']} residual(s)  (per episode: {episodes})")
    rank = identifiability.get("numerical_rank")
    count = len(document.get("fitted_parameters", {}))
    condition = identifiability.get("condition_number")
    condition_text = "infinite" if identifiability.get("condition_number_infinite") \
        else _g(condition)
    timing = document.get("input_timing") or {}
    for policy, stats in timing.items():
        lines.append(f"input timing {stats['samples']} recorded input sample(s) committed at the "
                     f"{policy.replace('_', ' ')}: {stats['moved']} moved, largest shift "
                     f"{stats['max_shift_s'] * 1e3:.4g} ms; {stats['held_at_start']} held in "
                     f"force at a window start"
                     + (f" (acting only after the endpoint latency of "
                        f"{stats['held_latency_ticks']} tick(s))"
                        if stats.get("held_latency_ticks") else ""))
    state_fit = document.get("initial_state_fit")
    if state_fit:
        removed = state_fit["degrees_of_freedom_removed"]
        episodes = state_fit["episodes"].values()
        health = [e.get("sensitivity", {}) for e in episodes]
        worst = ("infinite" if any(h.get("condition_number_infinite") for h in health) else
                 _g(max((h.get("condition_number") or 0.0 for h in health), default=None)))
        unidentified = sum(len(e.get("unidentified", ())) for e in episodes)
        lines.append(f"initial states  fitted as nuisance in {len(state_fit['episodes'])} "
                     f"episode(s) ({removed['training']} training / {removed['validation']} "
                     f"validation degree(s) of freedom; the iterations above are the second "
                     f"pass, from a first fit of {state_fit['first_pass']['iterations']} "
                     f"iteration(s); sensitivity condition number up to {worst}, "
                     f"{unidentified} unidentified coordinate(s); estimates: "
                     f"initial_state_fit in the result)")
    if document.get("scores"):
        lines.extend(scores_text(document["scores"]))
    lines.append(f"identifiability  rank {rank}/{count}, condition number {condition_text}")
    for warning in document.get("warnings") or []:
        lines.append(f"warning      {warning.get('message')}")
    fit = document.get("fit") or {}
    reasons = fit.get("reasons") or []
    lines.append(f"fit          {fit.get('verdict')}"
                 + (f"  (reasons: {', '.join(reasons)})" if reasons else ""))
    return "\n".join(lines) + "\n"


def _g(value: object) -> str:
    return "n/a" if value is None else f"{value:.4g}"
