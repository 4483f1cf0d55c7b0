"""The calibration result document: the solver's outcome plus provenance and the fitted overlay.

A versioned, strict JSON document (``allow_nan=False``; a non-finite number is ``null``):

* everything the solver reports (``CalibrationOutcome.to_document()``: fitted parameters,
  termination, summaries, local identifiability, information matrix, profile likelihood, fit);
* ``context``: the request's own context keys plus the training/validation episode content
  hashes, objective version, alignment contract, observation spec hash, optimizer id and option
  hash, and seeds;
* ``candidate_plan``: the provenance of the SimulationPlan built at the fitted values
  (manifest / model / compiled-model / asset / parameter-set hashes, MuJoCo and build identity);
* ``parameter_contract`` (bounds, unit, provenance, parameterization, prior, targets) and
  ``target_mapping`` (parameter id → typed targets) with its hash;
* ``parameter_overlay``: the portable overlay artifact of the fitted values, which a
  SimulationManifest's ``parameter_overlays`` loads unchanged.

Files are written atomically (a temporary file in the same folder, then a rename), so an
interrupted or failed run never leaves a half-written result or overlay.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from fibril_sim_core.overlays import OverlayParameter, overlay_document

from ._json import JsonObject, JsonValue, json_list, json_object
from ._atomic import write_atomic  # noqa: F401  (re-exported: writers import it from here)
from .alignment import ALIGNMENTS
from .errors import CalibrationError
from .parameters import physical_scale
from .request.canonical import canonical_sha256
from .request.document import OBJECTIVE_VERSION, CalibrationRequest
from .request.gravity_check import gravcomp_warnings

if TYPE_CHECKING:
    from fibril_sim_core.plan import SimulationPlan

    from .outcome import CalibrationOutcome
    from .solve.problem import ProblemStatistics

RESULT_FORMAT = "fibril_calibration/result"
RESULT_SCHEMA_VERSION = {"major": 1, "minor": 0}
ALIGNMENT_CONTRACT = {
    "id": "fibril_calibration/alignment/v1",
    "policies": list(ALIGNMENTS),
    "snapshot_time": "sample at tick t is the state x(t) at time t*dt, on a grid of "
                     "sample_every_steps ticks from tick 0",
    "event_time": "device_output: delivery time (or acquisition time if requested); "
                  "actuator_application: release tick time; samples stamped in [0, horizon]",
    "duplicates": "the last sample emitted at a timestamp is the value at that time",
    "nearest_tie": "earlier sample",
    "quaternion": "wxyz; linear = shortest-path SLERP; residual = 3-D rotation vector "
                  "log(conj(q_recorded) * q_simulated), q and -q identical",
    "residual": "sqrt(episode_weight) * (simulated - recorded) / residual_scale",
    "layout": "episodes in declaration order; signals in observation declaration order; "
              "samples in time order; components innermost",
}


def build_result_document(request: CalibrationRequest, outcome: CalibrationOutcome,
                          fitted_plan: SimulationPlan, overlay_parameters:
                          Sequence[OverlayParameter],
                          statistics: ProblemStatistics | None = None,
                          rollout_ticks: Mapping[str, int] | None = None,
                          backend: Mapping[str, JsonValue] | None = None) -> JsonObject:
    """The full, strict-JSON calibration result; ``backend``: where the rollouts ran
    (``DaskSession.describe()``; the local backend when None)."""
    solver = outcome.to_document()
    fitted = {pid: float(v) for pid, v in zip(request.parameter_ids, outcome.fitted)}
    mapping = target_mapping(request)
    document: dict[str, object] = {
        "format": RESULT_FORMAT,
        "schema_version": dict(RESULT_SCHEMA_VERSION),
        "request": {"path": str(request.path), "sha256": request.sha256,
                    "schema_version": {"major": 3, "minor": 1},
                    "manifest": str(request.manifest.path),
                    "optimizer_type": request.optimizer.type},
    }
    for key, value in solver.items():
        document[key] = value
    document["warnings"] = [*json_list(solver.get("warnings", []), "warnings"),
                            *recording_warnings(request)]
    document["context"] = result_context(request, solver)
    document["candidate_plan"] = {
        "values": fitted,
        "provenance": strict(dict(fitted_plan.provenance)),
    }
    document["parameter_contract"] = parameter_contract(request)
    document["target_mapping"] = mapping
    document["observations"] = [o.describe() for o in request.observations]
    document["episodes"] = {
        scope: [{"id": e.id, "episode_seed": e.seed, "weight": e.weight,
                 "horizon_steps": e.horizon_steps,
                 "rollout_ticks": None if rollout_ticks is None else rollout_ticks.get(e.id),
                 "signals": [{"observation": s.observation, "alignment": s.alignment,
                              "scale_semantics": s.scale_semantics, "samples": s.count}
                             for s in e.signals],
                 "content_sha256": e.content_sha256,
                 **({"source": dict(e.source)} if e.source is not None else {})}
                for e in request.episodes(scope)]
        for scope in ("training", "validation")}
    document["execution"] = {
        "max_parallelism": request.execution.max_parallelism,
        "cache_entries": request.execution.cache_entries,
        "statistics": None if statistics is None else statistics.to_document(),
        "backend": dict(backend) if backend is not None else {"backend": "local",
                                                              "scheduler": None},
    }
    source = {"format": RESULT_FORMAT, "request": str(request.path),
              "request_sha256": request.sha256,
              "optimization_termination": outcome.termination,
              "fit_verdict": outcome.verdict.verdict,
              "target_mapping_sha256": mapping["sha256"]}
    overlay_id = request.context.get("parameter_set_id")
    document["parameter_overlay"] = overlay_document(
        overlay_parameters, id=str(overlay_id) if overlay_id is not None else None,
        source=source)
    return strict_object(document)


def recording_warnings(request: CalibrationRequest) -> list[JsonObject]:
    """One warning per recording whose bytes could not be fully checked (an MCAP written
    without CRCs, sqlite3 storage), naming the episodes read from it, and one when recorded
    torques drive gravity-compensated bodies (``gravity_check``): the result's ``warnings``
    and the CLI's stderr carry them."""
    found: dict[str, tuple[JsonValue, list[str]]] = {}
    for scope in ("training", "validation"):
        for episode in request.episodes(scope):
            source = episode.source or {}
            for message in json_list(source.get("warnings", ()), "source warnings"):
                path, episodes = found.setdefault(str(message), (source["path"], []))
                if episode.id not in episodes:
                    episodes.append(episode.id)
    unchecked: list[JsonObject] = [
        {"code": "recording_unchecked", "path": path, "episodes": episodes, "message": message}
        for message, (path, episodes) in found.items()]
    return [*unchecked, *gravcomp_warnings(request)]


def result_context(request: CalibrationRequest, solver: Mapping[str, JsonValue]) -> JsonObject:
    context: JsonObject = dict(request.context)
    for scope in ("training", "validation"):
        episodes = request.episodes(scope)
        context[f"{scope}_episode_content_sha256"] = {e.id: e.content_sha256 for e in episodes}
        context[f"{scope}_content_sha256"] = (
            canonical_sha256([[e.id, e.content_sha256] for e in episodes]) if episodes else None)
    context["objective_version"] = OBJECTIVE_VERSION
    context["alignment_contract"] = dict(ALIGNMENT_CONTRACT)
    context["observation_spec_sha256"] = request.observation_spec_sha256()
    optimizer_id = json_object(solver.get("optimizer", {}), "optimizer").get("id", "unknown")
    context["optimizer_id"] = f"{optimizer_id} (request optimizer.type: {request.optimizer.type})"
    context["optimizer_option_sha256"] = canonical_sha256(optimizer_options(request))
    context["episode_seeds"] = {e.id: e.seed for e in request.training + request.validation}
    context.setdefault("seed", None)
    context["request_sha256"] = request.sha256
    return context


def optimizer_options(request: CalibrationRequest) -> JsonObject:
    """Everything that changes what the optimizer does (the basis of the option hash)."""
    analysis = request.analysis
    return {"optimizer": request.optimizer.describe(),
            "objective": request.objective.describe(),
            "analysis": {"profile_likelihood": {
                "enabled": analysis.profile_likelihood.enabled,
                "samples_per_parameter": analysis.profile_likelihood.samples_per_parameter},
                "information_matrix": analysis.information_matrix},
            "fit": {k: v for k, v in request.fit.__dict__.items()}}


def parameter_contract(request: CalibrationRequest) -> list[JsonObject]:
    out: list[JsonObject] = []
    for p in request.parameters:
        out.append({
            "id": p.id, "unit": p.unit, "provenance": p.provenance,
            "lower": p.lower, "upper": p.upper, "initial": p.initial, "nominal": p.nominal,
            "parameterization": p.parameterization, "coordinate_scale": p.coordinate_scale,
            "physical_scale": physical_scale(p),
            "prior": None if p.prior is None else {
                "mean": p.prior.mean, "standard_deviation": p.prior.standard_deviation},
            "targets": [t.describe() for t in p.targets],
        })
    return out


def target_mapping(request: CalibrationRequest) -> JsonObject:
    parameters = {p.id: [t.describe() for t in p.targets] for p in request.parameters}
    return {"parameters": parameters, "sha256": canonical_sha256(parameters)}


# --------------------------------------------------------------------------- JSON

def strict(value: object) -> JsonValue:
    """A JSON-able copy: numpy → Python, non-finite floats → None, tuples → lists."""
    if isinstance(value, Mapping):
        return {str(k): strict(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [strict(v) for v in value]
    if isinstance(value, np.ndarray):
        return strict(value.tolist())
    if isinstance(value, np.generic):
        value = value.item()  # a Python scalar (or, for datetimes and such, other objects)
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, (str, int, bool)) or value is None:
        return value
    if isinstance(value, Path):
        return str(value)
    return str(value)


def strict_object(document: Mapping[str, object]) -> JsonObject:
    """``strict`` of a mapping: a JSON object with string keys."""
    return {str(k): strict(v) for k, v in document.items()}


def to_json(document: Mapping[str, JsonValue], *, indent: int | None = 2) -> str:
    return json.dumps(document, indent=indent, allow_nan=False, sort_keys=False) + "\n"


def check_writable(path: str | Path, what: str) -> None:
    """Fail before a long run when an output path cannot be written."""
    target = Path(path)
    folder = target.parent if str(target.parent) else Path(".")
    if not folder.is_dir():
        raise CalibrationError(f"{what} {str(target)!r}: folder {str(folder)!r} does not exist")
    if target.is_dir():
        raise CalibrationError(f"{what} {str(target)!r} is a directory")
    if not os.access(folder, os.W_OK):
        raise CalibrationError(f"{what} {str(target)!r}: folder {str(folder)!r} is not writable")
