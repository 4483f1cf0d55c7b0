"""Fixed parameter sets scored on the request's episodes: the ``nominal`` and ``fitted`` sets
of every calibration result (``score_sets``), and ``fibril_sim calibrate --evaluate``'s document
of the nominal set or overlay artifacts scored without fitting (``evaluate_parameter_sets``).

Above the analysis' ``scores`` (one evaluation's scores) and beside the writers: a scored set
can also give its metrics.json documents, and the ``--evaluate`` document carries the result's
recording warnings.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from fibril_sim_core.errors import FibrilError
from fibril_sim_core.overlays import load_overlay_artifact

from ._json import JsonObject
from .errors import CalibrationError, EvaluationError
from .model.candidate_plan import CandidatePlanBuilder
from .recordings.time_offsets import candidate_builder as offset_aware
from .result import recording_warnings, strict_object
from .analysis.scores import input_timing, score
from .solve.problem import CalibrationProblem, Progress

if TYPE_CHECKING:
    from fibril_sim_core.execution.dask_session import DaskSession
    from fibril_sim_core.overlays import OverlayParameter

    from .evaluation import Evaluation
    from .metrics_json import MetricsDocuments
    from .request.document import CalibrationRequest

__all__ = ["EVALUATION_FORMAT", "ParameterSet", "evaluate_parameter_sets", "nominal_set",
           "overlay_values", "score_sets"]

EVALUATION_FORMAT = "fibril_calibration/evaluation"

ParameterSet = tuple[str, dict[str, float], JsonObject]  # name, values, provenance


def score_sets(problem: CalibrationProblem, sets: Sequence[ParameterSet],
               metrics: dict[str, MetricsDocuments] | None = None) -> JsonObject:
    """``{name: {values, provenance, training, validation}}`` for each parameter set;
    ``metrics`` (if given) receives ``{name: {episode: metrics.json document}}`` of the
    validation episodes (the training ones when the request has no validation).

    A scope the set cannot be evaluated on (an ``EvaluationError``: a rollout failure, a
    missing sample) scores as ``{"error": message}``; the other sets and scopes still score."""
    request = problem.request
    out: JsonObject = {}
    for name, values, provenance in sets:
        vector = np.array([values[pid] for pid in request.parameter_ids], dtype=np.float64)
        entry: JsonObject = {"values": dict(values), "provenance": provenance}
        evaluated: dict[str, Evaluation] = {}
        for scope in ("training", "validation"):
            if scope == "validation" and not request.validation:
                entry[scope] = None
                continue
            try:
                if scope == "training" and problem.fits_initial_states:
                    # The nuisance initial states are the best for THIS set (linearised).
                    problem.refresh_initial_state_fit(vector)
                evaluated[scope] = problem.evaluate(vector, scope)
            except EvaluationError as exc:
                entry[scope] = {"error": str(exc)}
                continue
            entry[scope] = score(request, evaluated[scope], scope,
                                 problem.nuisance_degrees_of_freedom(scope))
        if metrics is not None:
            scope = "validation" if request.validation else "training"
            if scope in evaluated:
                from .metrics_json import metrics_documents  # only with --metrics

                metrics[name] = metrics_documents(request, evaluated[scope], scope, name,
                                                  provenance)
        out[name] = entry
    return out


def nominal_set(request: CalibrationRequest) -> ParameterSet:
    return ("nominal", {p.id: float(p.initial) for p in request.parameters},
            {"from": "the request's initial values"})


def overlay_values(request: CalibrationRequest, path: Path
                   ) -> tuple[ParameterSet, tuple[OverlayParameter, ...]]:
    """An overlay artifact's values for the request's parameters, matched by id, or else by
    identical targets; request parameters it does not set keep their initial values. Its
    other parameters (the request does not fit them) are returned as fixed overlays."""
    try:
        artifact = load_overlay_artifact(path)
    except FibrilError as exc:
        raise CalibrationError(f"--evaluate {str(path)!r}: {exc}") from None
    by_id = {p.id: p for p in request.parameters}
    by_targets = {tuple(sorted(repr(t.describe()) for t in p.targets)): p
                  for p in request.parameters}
    values = {p.id: float(p.initial) for p in request.parameters}
    taken: dict[str, str] = {}
    fixed: list[OverlayParameter] = []
    for parameter in artifact.parameters:
        key = tuple(sorted(repr(t.describe()) for t in parameter.targets))
        match = by_id.get(parameter.id)
        if match is not None and tuple(sorted(repr(t.describe()) for t in match.targets)) != key:
            raise CalibrationError(
                f"--evaluate {str(path)!r}: parameter {parameter.id!r} binds "
                f"{[t.describe() for t in parameter.targets]}, the request's "
                f"{[t.describe() for t in match.targets]}")
        match = match or by_targets.get(key)
        if match is None:
            fixed.append(parameter)
            continue
        if not isinstance(parameter.value, (int, float)):
            raise CalibrationError(f"--evaluate {str(path)!r}: parameter {parameter.id!r} has "
                                   f"a range value; only scalars can be scored")
        values[match.id] = float(parameter.value)
        taken[match.id] = parameter.id
    kept = [pid for pid in by_id if pid not in taken]
    return (str(path), values, {"from": str(path), "sha256": artifact.sha256,
                                "overlay_parameters": taken, "initial_values_kept": kept,
                                "fixed_overlays": [p.describe() for p in fixed]}), tuple(fixed)


def evaluate_parameter_sets(request: CalibrationRequest, names: Sequence[str], *,
                            progress: Progress | None = None,
                            metrics: dict[str, MetricsDocuments] | None = None,
                            session: DaskSession | None = None) -> JsonObject:
    """The ``--evaluate`` document: ``nominal`` or overlay artifact paths, scored on the
    training and validation episodes without fitting; ``session`` (an open DaskSession) runs
    the rollouts on its workers (the same document)."""
    scored: JsonObject = {}
    for name in names:
        fixed: tuple[OverlayParameter, ...] = ()
        if name == "nominal":
            chosen = nominal_set(request)
        else:
            chosen, fixed = overlay_values(request, Path(name))

        builder = offset_aware(
            CandidatePlanBuilder.holding((*request.fixed_overlays, *fixed)),
            request.manifest, request.parameters)
        with CalibrationProblem(request, candidate_builder=builder,
                                progress=progress) as problem:
            if session is not None:  # Dask is optional: loaded only for a session
                from .solve.dask_rollouts import DaskRollouts

                problem.set_remote(DaskRollouts.for_problem(
                    session, problem, (*request.fixed_overlays, *fixed)))
            scored.update(score_sets(problem, [chosen], metrics))
    return strict_object({
        "format": EVALUATION_FORMAT, "schema_version": {"major": 1, "minor": 0},
        "request": {"path": str(request.path), "sha256": request.sha256},
        "episodes": {scope: [e.id for e in request.episodes(scope)]
                     for scope in ("training", "validation")},
        "episode_seeds": {e.id: e.seed for e in request.training + request.validation},
        "input_timing": input_timing(request),
        "warnings": recording_warnings(request),
        "scores": scored})
