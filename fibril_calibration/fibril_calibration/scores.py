"""Scores of fixed parameter sets on the request's episodes, in physical units.

A standardized RMS says how well a fit explains the data relative to the declared scales; an
engineer also wants "the joint-3 position error went from 12 mrad to 2 mrad". ``score`` turns one
``Evaluation`` into both: per scope the standardized RMS, and per signal (over all episodes of
the scope, then per episode) each residual component's RMS and largest absolute error in the
observation's own units (``(sim - rec)``: the residual times its scale; rad for an orientation's
rotation vector).

Every calibration result carries ``scores`` for the ``nominal`` (initial) parameter set beside
the ``fitted`` one, training and validation; ``fibril_sim calibrate --evaluate`` scores the
nominal set or overlay artifacts without fitting (``evaluate_parameter_sets``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import mujoco
import numpy as np
import numpy.typing as npt

from fibril_sim_core.errors import FibrilError
from fibril_sim_core.overlays import load_overlay_artifact

from ._json import JsonObject, JsonValue, json_list, json_object
from .errors import CalibrationError, EvaluationError
from .model.candidate_plan import CandidatePlanBuilder
from .recordings.time_offsets import candidate_builder as offset_aware
from .report.physical_errors import device_unit
from .request.input_timing import InputTiming, describe_timing
from .result import recording_warnings, strict_object
from .solve.problem import CalibrationProblem, Progress

if TYPE_CHECKING:
    from fibril_sim_core.overlays import OverlayParameter

    from .evaluation import Evaluation
    from .metrics_json import MetricsDocuments
    from fibril_sim_core.execution.dask_session import DaskSession
    from .request.document import CalibrationRequest

__all__ = ["EVALUATION_FORMAT", "ParameterSet", "evaluate_parameter_sets", "overlay_values",
           "score", "score_sets", "scores_text"]

EVALUATION_FORMAT = "fibril_calibration/evaluation"

ParameterSet = tuple[str, dict[str, float], JsonObject]  # name, values, provenance


def signal_units(request: CalibrationRequest) -> dict[str, str]:
    """Observation id → unit where the source says it (joints: by joint type)."""
    model = request.nominal_plan.model
    out: dict[str, str] = {}
    for observation in request.observations:
        source = observation.source
        unit = None
        if source in ("joint_position", "joint_velocity"):
            jid = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_JOINT, observation.name or "")
            if jid >= 0:
                kind = int(model.jnt_type[jid])
                linear = kind == int(mujoco.mjtJoint.mjJNT_SLIDE)
                angular = kind == int(mujoco.mjtJoint.mjJNT_HINGE)
                if linear or angular:
                    unit = ("m" if linear else "rad") + ("/s" if source == "joint_velocity"
                                                         else "")
        elif source == "body_position":
            unit = "m"
        elif source == "body_quaternion" or observation.quaternion:
            unit = "rad"
        elif source == "device_output":  # the units of its sample components
            unit = device_unit(observation.sample_type, observation.indices)
        out[observation.id] = unit or "observation units"
    return out


def score(request: CalibrationRequest, evaluation: Evaluation, scope: str,
          nuisance_dof: Mapping[str, int] | None = None) -> JsonObject:
    """Standardized and physical-unit scores of one scope's evaluation. ``nuisance_dof``
    (initial_state_fit: episode → degrees of freedom its nuisance initial states took) adds
    ``standardized_rms_dof_corrected``, ``sqrt(SSE / (count - nuisance dof))``."""
    episodes = {e.id: e for e in request.episodes(scope)}
    units = signal_units(request)
    observations = {o.id: o for o in request.observations}
    per_signal: dict[str, list[npt.NDArray[np.float64]]] = {}
    per_episode: dict[str, list[JsonObject]] = {}
    sse: dict[str, float] = {}
    counts: dict[str, int] = {}
    residuals = evaluation.unweighted
    for block in evaluation.blocks:
        observation = observations[block.signal]
        signal = episodes[block.episode].signal(block.signal)
        width = observation.residual_dimension
        standardized = residuals[block.start:block.stop].reshape(-1, width)
        physical = standardized * signal.residual_scales
        per_signal.setdefault(block.signal, []).append(physical)
        per_episode.setdefault(block.episode, []).append(
            _signal_score(block.signal, observation.residual_components, units[block.signal],
                          physical))
        sse[block.episode] = sse.get(block.episode, 0.0) + float(np.sum(standardized ** 2))
        counts[block.episode] = counts.get(block.episode, 0) + int(standardized.size)
    total = sum(counts.values())
    removed = {e: int(n) for e, n in (nuisance_dof or {}).items() if n and e in counts}
    corrected: JsonObject = {}
    if removed:
        dof = sum(removed.values())
        corrected = {"nuisance_degrees_of_freedom": dof,
                     "standardized_rms_dof_corrected": _root(sum(sse.values()), total - dof)}
    return {
        "standardized_rms": _root(sum(sse.values()), total),
        **corrected,
        "count": total,
        "signals": [_signal_score(name, observations[name].residual_components, units[name],
                                  np.concatenate(parts))
                    for name, parts in per_signal.items()],
        "episodes": [{"episode": episode, "standardized_rms": _root(sse[episode],
                                                                      counts[episode]),
                      **({"nuisance_degrees_of_freedom": removed[episode],
                          "standardized_rms_dof_corrected": _root(
                              sse[episode], counts[episode] - removed[episode])}
                         if episode in removed else {}),
                      "signals": signals}
                     for episode, signals in per_episode.items()],
    }


def _signal_score(name: str, components: Sequence[str], unit: str,
                  physical: npt.NDArray[np.float64]) -> JsonObject:
    rms: list[float | None]
    peak: list[float | None]
    if physical.shape[0] == 0:
        rms = [None] * len(components)
        peak = [None] * len(components)
    else:
        rms = np.sqrt(np.mean(physical ** 2, axis=0)).tolist()
        peak = np.max(np.abs(physical), axis=0).tolist()
    return {"signal": name, "unit": unit, "samples": int(physical.shape[0]),
            "components": list(components), "rms": rms, "max_abs": peak}


def _root(sse: float, count: int) -> float | None:
    return math.sqrt(sse / count) if count > 0 else None


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


def input_timing(request: CalibrationRequest) -> InputTiming | None:
    """How recording-source input samples were moved onto ticks, all episodes together."""
    return describe_timing(request.training + request.validation)


def scores_text(scores: Mapping[str, JsonValue]) -> list[str]:
    """Readable lines: per scope, each signal component's RMS (and max) per parameter set."""
    sets = {n: json_object(entry, f"scores {n}") for n, entry in scores.items()}
    lines: list[str] = []
    for scope in ("training", "validation"):
        entries: dict[str, list[Mapping[str, JsonValue]]] = {}
        rms: dict[str, JsonValue] = {}
        for n, entry in sets.items():
            scored = json_object(entry.get(scope) or {}, f"scores {n} {scope}")
            if "error" in scored:
                lines.append(f"{scope} scores  {n}: not evaluated: {scored['error']}")
            elif scored:
                rms[n] = scored["standardized_rms"]
                entries[n] = [json_object(s, "signal score")
                              for s in json_list(scored["signals"], "signals")]
        if not entries:
            continue
        head = "  ".join(f"{n}: {_g(value)}" for n, value in rms.items())
        lines.append(f"{scope} scores  (standardized rms  {head})")
        first = next(iter(entries.values()))
        for index, signal in enumerate(first):
            for c, component in enumerate(json_list(signal["components"], "components")):
                cells = []
                for n, signals in entries.items():
                    other = signals[index]
                    cells.append(f"{n} {_g(json_list(other['rms'])[c])} "
                                 f"(max {_g(json_list(other['max_abs'])[c])})")
                lines.append(f"  {signal['signal']}.{component} [{signal['unit']}] rms  "
                             + "  ".join(cells))
    return lines


def _g(value: JsonValue) -> str:
    return "n/a" if value is None else f"{value:.4g}"
