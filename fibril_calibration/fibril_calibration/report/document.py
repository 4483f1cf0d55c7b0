"""The calibration result document as the report reads it: the keys it draws, typed.

The document is JSON, written by ``result.build_result_document`` (and the solver's
``to_document`` methods, ``scores`` and ``error_summary``) or by ``--evaluate``, and read back
from disk by ``fibril_sim report``. These TypedDicts name what the report reads of it; every key
is optional (an ``--evaluate`` document has no fit, an older one may lack a section), so the
page says why a section is empty instead of failing. The shapes are the writers' contract:
``read_result`` checks the document is a mapping and reads it as this type, it does not check
every key (the report shows what is there; a mismatch is a writer bug the report tests catch).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Literal, Required, TypedDict, cast

from .._json import JsonValue, json_object

if TYPE_CHECKING:  # (types only: the report package loads nothing of the request layer)
    from ..request.input_timing import TimingStats

__all__ = ["SCOPES", "ErrorSummary", "IdentifiedParameter", "ParameterProfile",
           "ProfileLikelihood", "ResultDocument", "Scope", "read_error_summary", "read_result"]

Scope = Literal["training", "validation"]
#: The scopes in the order the report shows them (typed: a TypedDict is read with their names).
SCOPES: tuple[Scope, ...] = ("training", "validation")

#: An interval's ends; ``None`` where a bound is not finite.
Interval = Sequence[float | None]


class RequestInfo(TypedDict, total=False):
    path: str
    sha256: str
    manifest: str
    optimizer_type: str


class Provenance(TypedDict, total=False):
    """The fitted plan's provenance (``SimulationPlan.provenance``)."""

    manifest_path: str
    manifest_sha256: str
    model_path: str
    model_sha256: str
    model_files: Mapping[str, str]
    compiled_model_sha256: str
    parameter_set_hash: str
    build: Mapping[str, JsonValue]


class CandidatePlan(TypedDict, total=False):
    values: Mapping[str, float]
    provenance: Provenance


class FitMeasurements(TypedDict, total=False):
    bound_distance_fraction: Mapping[str, float | None]


class FitCriteria(TypedDict, total=False):
    near_bound_fraction: float


class Fit(TypedDict, total=False):
    verdict: str
    reasons: list[str]
    measurements: FitMeasurements
    criteria: FitCriteria


class Optimizer(TypedDict, total=False):
    message: str
    iterations: int
    max_iterations: int
    initial_objective: float | None
    final_objective: float | None


class EpisodeSignal(TypedDict):
    observation: str
    samples: int
    alignment: str


class Episode(TypedDict, total=False):
    id: Required[str]
    signals: list[EpisodeSignal]
    rollout_ticks: int | None
    content_sha256: str
    source: Mapping[str, JsonValue]


class ContractEntry(TypedDict, total=False):
    """One parameter of ``parameter_contract``."""

    id: Required[str]
    unit: str | None
    nominal: float
    initial: float
    lower: float | None
    upper: float | None
    provenance: str | None


class IdentifiedParameter(TypedDict, total=False):
    id: str
    identifiable: bool
    standard_deviation: float | None
    interval_95: Sequence[float] | None  # finite ends, or None
    interval_95_crosses_bounds: bool


class Direction(TypedDict, total=False):
    singular_value: Required[float]
    identifiable: bool
    components: Required[Mapping[str, float]]


class Covariance(TypedDict, total=False):
    unidentifiable_parameters: list[str]
    null_space_dimension: int
    correlation: Sequence[Sequence[float | None]] | None


class LocalIdentifiability(TypedDict, total=False):
    parameters: list[IdentifiedParameter]
    singular_values: list[float]
    rank_tolerance: float | None
    numerical_rank: int
    full_rank: bool
    condition_number: float | None
    condition_number_infinite: bool
    coordinate_system: str
    directions: list[Direction]
    covariance: Covariance


class ProfilePoint(TypedDict, total=False):
    value: Required[float]
    delta_objective: float | None


class ParameterProfile(TypedDict, total=False):
    parameter: str
    points: list[ProfilePoint]
    lower_objective_found: bool
    confidence_interval: Sequence[float] | None
    confidence_lower_bound_limited: bool | None
    confidence_upper_bound_limited: bool | None


class ProfileLikelihood(TypedDict, total=False):
    likelihood_interpretation_valid: bool
    threshold_delta_objective: float | None
    parameters: list[ParameterProfile]


class SignalError(TypedDict):
    """One signal component's RMS per set (``error_summary``'s ``signals[i]``)."""

    signal: str
    component: str
    unit: str
    samples: int
    rms: Mapping[str, float | None]


class PooledError(TypedDict):
    """The RMS of every component with one unit (``error_summary``'s ``pooled[i]``)."""

    unit: str
    components: list[str]
    samples: int
    rms: Mapping[str, float | None]


class ScopeErrors(TypedDict):
    signals: list[SignalError]
    pooled: list[PooledError]


class ErrorSummary(TypedDict, total=False):
    """``physical_errors.error_summary``: per scope (None: no episodes of it)."""

    quantity: str
    sets: list[str]
    floor: str | None
    training: ScopeErrors | None
    validation: ScopeErrors | None


class ScoredSet(TypedDict, total=False):
    """One entry of ``scores``: a parameter set's values (and its scores per scope)."""

    values: Mapping[str, float]


class SolvedParameter(TypedDict, total=False):
    """One entry of the solver's ``parameters``."""

    id: Required[str]
    value: Required[float]
    initial: Required[float]
    lower: Required[float]
    upper: Required[float]
    nominal: float | None
    unit: str | None


class ResultDocument(TypedDict, total=False):
    """A calibration result (``fibril_calibration/result``) or an ``--evaluate`` document
    (``fibril_calibration/evaluation``), as far as the report reads it."""

    format: str
    request: RequestInfo
    fit: Fit | None
    optimizer: Optimizer
    optimization_termination: str
    evaluations: Mapping[str, int]
    wall_time_s: float
    candidate_plan: CandidatePlan
    #: scope → episodes (an ``--evaluate`` document: their ids only)
    episodes: Mapping[str, Sequence[Episode | str]]
    parameters: list[SolvedParameter]
    parameter_contract: list[ContractEntry]
    fitted_parameters: Mapping[str, float]
    likelihood_interpretation_valid: bool
    local_identifiability: LocalIdentifiability | None
    profile_likelihood: ProfileLikelihood | None
    scores: Mapping[str, ScoredSet]
    error_summary: ErrorSummary | None
    input_timing: Mapping[str, TimingStats] | None


def read_result(document: Mapping[str, JsonValue]) -> ResultDocument:
    """A result document (parsed JSON, or built in this process) read as ``ResultDocument``."""
    return cast(ResultDocument, json_object(document, "result"))


def read_error_summary(summary: Mapping[str, JsonValue]) -> ErrorSummary:
    """``error_summary``'s JSON (as built by ``physical_errors.error_summary``), typed."""
    return cast(ErrorSummary, summary)
