"""The time series a calibration report draws, re-simulated from a result's own request.

The result document holds no time series (it would be as large as the data). The report
replays each scored parameter set (nominal, fitted; or the sets of an ``--evaluate``) once per
scope on the request's episodes: a few rollouts, against the hundreds of the fit. Before that,
``load_request`` checks that the request, manifest, model files and episode data on disk
still hash to what the result recorded, and refuses with one line when they do not.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from .._json import JsonObject, JsonValue
from ..analysis.units import NO_UNIT
from ..errors import CalibrationError, EvaluationError
from .document import SCOPES, ResultDocument, read_result

if TYPE_CHECKING:  # the request module loads MuJoCo: imported where a request is loaded
    from ..request.document import CalibrationRequest

__all__ = ["SignalSeries", "load_request", "simulate_series", "stale_reason"]


@dataclass(frozen=True)
class SignalSeries:
    """One episode's signal: recorded values and, per parameter set, (simulated - recorded) in
    the observation's units (a rotation vector for an orientation), at the reference samples."""

    scope: str
    episode: str
    signal: str
    components: tuple[str, ...]  # residual components
    unit: str
    quaternion: bool
    times_s: np.ndarray = field(repr=False)
    recorded: np.ndarray = field(repr=False)  # (n, dimension)
    scales: np.ndarray = field(repr=False)  # (residual dimension,)
    errors: Mapping[str, np.ndarray] = field(repr=False)  # set → (n, residual dimension)
    floor: np.ndarray = field(repr=False)  # hold-last error, (n, residual dimension)

    def simulated(self, name: str) -> np.ndarray:
        """Simulated values of a set (not for orientations: their error is drawn instead)."""
        values: np.ndarray = self.recorded + self.errors[name]
        return values


def stale_reason(document: ResultDocument, request: CalibrationRequest) -> str | None:
    """Why the files on disk are not what the result was computed from (None: they are)."""
    recorded = document.get("request") or {}
    if recorded.get("sha256") != request.sha256:
        return (f"request {str(request.path)!r} changed since the result (sha256 "
                f"{request.sha256[:16]}, the result's {str(recorded.get('sha256'))[:16]})")
    provenance = (document.get("candidate_plan") or {}).get("provenance") or {}
    nominal = request.nominal_plan.provenance
    for key, label in (("manifest_sha256", "manifest"), ("model_sha256", "model")):
        recorded_hash = provenance.get(key)
        if key in provenance and recorded_hash != nominal[key]:
            path = nominal.get(f"{label}_path") or nominal.get("manifest_path")
            return (f"{label} {str(path)!r} changed since the result ({key} "
                    f"{str(nominal[key])[:16]}, the result's {str(recorded_hash)[:16]})")
    files = provenance.get("model_files")
    if files is not None and dict(files) != dict(nominal["model_files"]):
        changed = sorted(k for k in set(files) | set(nominal["model_files"])
                         if files.get(k) != nominal["model_files"].get(k))
        return f"model file(s) {', '.join(changed)} changed since the result"
    episodes = document.get("episodes") or {}
    for scope in SCOPES:
        # an --evaluate document lists episode ids only: no hash to check them by
        known = {e["id"]: e.get("content_sha256") for e in episodes.get(scope) or ()
                 if not isinstance(e, str)}
        for episode in request.episodes(scope):
            if episode.id in known and known[episode.id] != episode.content_sha256:
                return (f"episode {episode.id!r}: its recorded data changed since the result "
                        f"(content sha256 {episode.content_sha256[:16]}, the result's "
                        f"{str(known[episode.id])[:16]})")
    return None


def load_request(document: Mapping[str, JsonValue], where: str) -> CalibrationRequest:
    """The result's request, loaded from disk and checked against the result's hashes."""
    from fibril_sim_core.errors import FibrilError

    from ..request.document import load_calibration_request

    result = read_result(document)
    path = (result.get("request") or {}).get("path")
    if not path:
        raise CalibrationError(f"{where}: the result names no request (request.path)")
    if not Path(path).is_file():
        raise CalibrationError(f"{where}: its request {path!r} no longer exists")
    try:
        request = load_calibration_request(path)
    except FibrilError as exc:
        raise CalibrationError(f"{where}: its request no longer loads: {exc}") from None
    reason = stale_reason(result, request)
    if reason is not None:
        raise CalibrationError(f"{where}: {reason}; re-run the calibration")
    return request


def simulate_series(request: CalibrationRequest, sets: Mapping[str, Mapping[str, float]],
                    units: Mapping[str, str], *, fitted_compiled_sha256: str | None = None,
                    where: str = "report") -> list[SignalSeries]:
    """Replay each parameter set on every episode; ``fitted_compiled_sha256`` (the result's
    fitted plan) is checked against the plan built at the ``fitted`` values."""
    from ..solve.problem import CalibrationProblem
    from .physical_errors import hold_last_error

    observations = {o.id: o for o in request.observations}
    errors: dict[tuple[str, str, str], dict[str, np.ndarray]] = {}
    with CalibrationProblem(request) as problem:
        if fitted_compiled_sha256 is not None and "fitted" in sets:
            plan = problem.candidate_plan(_vector(request, sets["fitted"]))
            built = plan.provenance["compiled_model_sha256"]
            if built != fitted_compiled_sha256:
                raise CalibrationError(
                    f"{where}: the fitted plan built now compiles to model hash {built[:16]}, "
                    f"the result recorded {fitted_compiled_sha256[:16]} (MuJoCo or the model "
                    f"changed); re-run the calibration")
        for name, values in sets.items():
            vector = _vector(request, values)
            for scope in ("training", "validation"):
                if not request.episodes(scope):
                    continue
                try:
                    if problem.fits_initial_states:
                        problem.refresh_initial_state_fit(vector)
                    evaluation = problem.evaluate(vector, scope)
                except EvaluationError:
                    # The result's scores say why (``{"error": ...}``); the figures lack the set.
                    continue
                episodes = {e.id: e for e in request.episodes(scope)}
                for block in evaluation.blocks:
                    observation = observations[block.signal]
                    signal = episodes[block.episode].signal(block.signal)
                    standardized = evaluation.unweighted[block.start:block.stop]
                    physical = (standardized.reshape(-1, observation.residual_dimension)
                                * signal.residual_scales)
                    errors.setdefault((scope, block.episode, block.signal), {})[name] = physical
    out = []
    for scope in ("training", "validation"):
        for episode in request.episodes(scope):
            for signal in episode.signals:
                observation = observations[signal.observation]
                out.append(SignalSeries(
                    scope=scope, episode=episode.id, signal=signal.observation,
                    components=tuple(observation.residual_components),
                    unit=units.get(signal.observation, NO_UNIT),
                    quaternion=observation.quaternion,
                    times_s=signal.times_ns.astype(np.float64) / 1e9, recorded=signal.values,
                    scales=np.asarray(signal.residual_scales, dtype=float),
                    errors=errors.get((scope, episode.id, signal.observation), {}),
                    floor=hold_last_error(signal.values, observation.quaternion)))
    return out


def _vector(request: CalibrationRequest, values: Mapping[str, float]) -> np.ndarray:
    return np.array([float(values[pid]) for pid in request.parameter_ids], dtype=np.float64)


def score_entries(series: Sequence[SignalSeries], names: Sequence[str]
                  ) -> dict[str, JsonObject]:
    """``{set: {scope: {"signals": [...]}}}`` recomputed from the series (the report's table)."""
    from .physical_errors import aggregate

    out: dict[str, JsonObject] = {}
    for name in names:
        entry: JsonObject = {}
        for scope in ("training", "validation"):
            parts = [(s.signal, s.components, s.unit, s.errors[name]) for s in series
                     if s.scope == scope and name in s.errors]
            entry[scope] = {"signals": aggregate(parts)} if parts else None
        out[name] = entry
    return out


def floor_entries(series: Sequence[SignalSeries]) -> JsonObject:
    from .physical_errors import aggregate

    out: JsonObject = {}
    for scope in ("training", "validation"):
        parts = [(s.signal, s.components, s.unit, s.floor) for s in series if s.scope == scope]
        out[scope] = {"signals": aggregate(parts)} if parts else None
    return out
