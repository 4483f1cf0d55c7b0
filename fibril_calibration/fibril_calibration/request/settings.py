"""The request's settings sections: ``optimizer``, ``objective``, ``execution``,
``analysis``, ``fit`` and ``context``, each parsed into a frozen spec."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import cast

from fibril_sim_core import schema as s
from fibril_sim_core.execution.backend import Backend, parse_backend

from .._json import JsonObject
from ..loss_spec import LOSS_TYPES, LossSpec

__all__ = ["OBJECTIVE_VERSION", "OPTIMIZER_TYPES", "RESERVED_CONTEXT_KEYS", "AnalysisSpec",
           "ExecutionSpec", "FitSpec", "ObjectiveSpec", "OptimizerSpec", "ProfileLikelihoodSpec",
           "parse_analysis", "parse_context", "parse_execution", "parse_fit", "parse_objective",
           "parse_optimizer"]

OPTIMIZER_TYPES = ("ceres", "least_squares")
OBJECTIVE_VERSION = "fibril_calibration/objective/v1"
# Keys the result writes into its context beside the request's own context keys.
RESERVED_CONTEXT_KEYS = ("training_episode_content_sha256", "validation_episode_content_sha256",
                         "training_content_sha256", "validation_content_sha256",
                         "objective_version", "alignment_contract", "observation_spec_sha256",
                         "optimizer_id", "optimizer_option_sha256", "episode_seeds",
                         "request_sha256")


@dataclass(frozen=True)
class OptimizerSpec:
    """``optimizer``: ``ceres`` names the spec's bound-constrained least-squares solver, which
    this implementation runs with ``scipy.optimize.least_squares`` (same as ``least_squares``)."""

    type: str = "ceres"
    max_iterations: int = 100
    function_tolerance: float | None = None
    parameter_tolerance: float | None = None
    gradient_tolerance: float | None = None
    finite_difference_relative_step: float | None = None
    jacobian: str = "central"
    # ``interior_start: {fraction: f}``: parameters whose initial value is a bound start that
    # fraction of their range inside (see ``starting_point``); None: start at ``initial``.
    interior_start_fraction: float | None = None

    def describe(self) -> JsonObject:
        return {key: value for key, value in self.__dict__.items() if value is not None}


@dataclass(frozen=True)
class ObjectiveSpec:
    standardized_gaussian_residuals: bool = False
    loss: LossSpec | None = None

    def describe(self) -> JsonObject:
        return {"version": OBJECTIVE_VERSION,
                "standardized_gaussian_residuals": self.standardized_gaussian_residuals,
                "loss": None if self.loss is None else {"type": self.loss.type,
                                                        "scale": self.loss.scale}}


@dataclass(frozen=True)
class ExecutionSpec:
    max_parallelism: int = 1
    cache_entries: int = 256
    #: ``local`` (rollouts on ``max_parallelism`` threads) or ``dask`` (candidate × episode
    #: tasks on a cluster: ``solve.dask_rollouts``).
    backend: Backend = Backend()
    #: Dask tasks in flight at most: the document's ``max_parallelism`` when it sets one.
    task_limit: int | None = None

    def with_max_parallelism(self, count: int) -> ExecutionSpec:
        return replace(self, max_parallelism=count, task_limit=count)


@dataclass(frozen=True)
class ProfileLikelihoodSpec:
    enabled: bool = False
    samples_per_parameter: int = 21


@dataclass(frozen=True)
class AnalysisSpec:
    profile_likelihood: ProfileLikelihoodSpec = ProfileLikelihoodSpec()
    information_matrix: bool = False


@dataclass(frozen=True)
class FitSpec:
    """Fit criteria; ``specified`` is False when the request has no ``fit`` block."""

    specified: bool = False
    max_training_rms: float | None = None
    max_validation_rms: float | None = None
    max_local_condition_number: float | None = None
    max_episode_rms_ratio: float | None = None
    reject_parameter_near_bound: bool = False
    near_bound_fraction: float | None = None


def parse_optimizer(value: object, where: s.Where) -> OptimizerSpec:
    body = s.mapping(value, where)
    s.keys(body, where, optional=("type", "max_iterations", "function_tolerance",
                                  "parameter_tolerance", "gradient_tolerance",
                                  "finite_difference_relative_step", "jacobian",
                                  "interior_start"))
    kind = s.string(body.get("type", "ceres"), where.key("type"))
    if kind not in OPTIMIZER_TYPES:
        raise where.key("type").fail(f"unknown optimizer {kind!r}; expected one of "
                                     f"{', '.join(OPTIMIZER_TYPES)} (ceres runs the bound-"
                                     f"constrained least-squares solver)")

    def tolerance(key: str) -> float | None:
        return s.number(body[key], where.key(key), positive=True) if key in body else None

    jacobian = body.get("jacobian", "central")
    if jacobian not in ("central", "forward"):
        raise where.key("jacobian").fail(f"expected 'central' (the default: central inside the "
                                         f"bounds, one-sided at a bound) or 'forward', got "
                                         f"{s.describe(jacobian)}")
    step = tolerance("finite_difference_relative_step")
    if step is not None and step >= 0.5:
        raise where.key("finite_difference_relative_step").fail(
            f"expected a small relative step (< 0.5), got {step:g}")
    return OptimizerSpec(
        type=kind,
        max_iterations=s.integer(body.get("max_iterations", 100), where.key("max_iterations"),
                                 minimum=1),
        function_tolerance=tolerance("function_tolerance"),
        parameter_tolerance=tolerance("parameter_tolerance"),
        gradient_tolerance=tolerance("gradient_tolerance"),
        finite_difference_relative_step=step, jacobian=jacobian,
        interior_start_fraction=_interior_start(body.get("interior_start"),
                                                where.key("interior_start")))


def _interior_start(value: object, where: s.Where) -> float | None:
    """``interior_start: {fraction: f}`` with 0 < f < 0.5 (absent or null: no interior start)."""
    if value is None:
        return None
    body = s.mapping(value, where)
    s.keys(body, where, required=("fraction",))
    fraction = s.number(body["fraction"], where.key("fraction"), positive=True)
    if not fraction < 0.5:
        raise where.key("fraction").fail(f"expected a fraction of the parameter range in "
                                         f"(0, 0.5), got {fraction:g}")
    return fraction


def parse_objective(value: object, where: s.Where) -> ObjectiveSpec:
    body = s.mapping(value, where)
    s.keys(body, where, optional=("standardized_gaussian_residuals", "loss"))
    standardized = s.boolean(body.get("standardized_gaussian_residuals", False),
                             where.key("standardized_gaussian_residuals"))
    loss = None
    if body.get("loss") is not None:
        lw = where.key("loss")
        raw = s.mapping(body["loss"], lw)
        s.keys(raw, lw, required=("type",), optional=("scale",))
        kind = s.string(raw["type"], lw.key("type"))
        if kind not in LOSS_TYPES:
            raise lw.key("type").fail(f"unknown loss {kind!r}; expected one of "
                                      f"{', '.join(LOSS_TYPES)}")
        scale = s.number(raw.get("scale", 1.0), lw.key("scale"), positive=True)
        loss = LossSpec(kind, scale)
    return ObjectiveSpec(standardized, loss)


def parse_execution(value: object, where: s.Where) -> ExecutionSpec:
    body = s.mapping(value, where)
    s.keys(body, where, optional=("max_parallelism", "cache_entries", "backend", "scheduler"))
    parallelism = s.integer(body.get("max_parallelism", 1), where.key("max_parallelism"),
                            minimum=1)
    return ExecutionSpec(
        max_parallelism=parallelism,
        cache_entries=s.integer(body.get("cache_entries", 256), where.key("cache_entries"),
                                minimum=0),
        backend=parse_backend(body, where),
        task_limit=parallelism if "max_parallelism" in body else None)


def parse_analysis(value: object, where: s.Where) -> AnalysisSpec:
    body = s.mapping(value, where)
    s.keys(body, where, optional=("profile_likelihood", "information_matrix"))
    profile = ProfileLikelihoodSpec()
    if "profile_likelihood" in body:
        pw = where.key("profile_likelihood")
        raw = s.mapping(body["profile_likelihood"], pw)
        s.keys(raw, pw, optional=("enabled", "samples_per_parameter"))
        samples = s.integer(raw.get("samples_per_parameter", 21),
                            pw.key("samples_per_parameter"), minimum=3)
        profile = ProfileLikelihoodSpec(
            enabled=s.boolean(raw.get("enabled", True), pw.key("enabled")),
            samples_per_parameter=samples)
    return AnalysisSpec(profile, s.boolean(body.get("information_matrix", False),
                                           where.key("information_matrix")))


def parse_fit(value: object, where: s.Where) -> FitSpec:
    if value is None:
        return FitSpec()
    body = s.mapping(value, where)
    s.keys(body, where, optional=("max_training_rms", "max_validation_rms",
                                  "max_local_condition_number", "max_episode_rms_ratio",
                                  "reject_parameter_near_bound", "near_bound_fraction"))

    def positive(key: str, minimum: float | None = None) -> float | None:
        if key not in body:
            return None
        number = s.number(body[key], where.key(key), positive=True)
        if minimum is not None and number < minimum:
            raise where.key(key).fail(f"expected a number >= {minimum:g}, got {number:g}")
        return number

    tolerance = positive("near_bound_fraction")
    if tolerance is not None and tolerance >= 0.5:
        raise where.key("near_bound_fraction").fail(
            f"expected a fraction of the parameter range below 0.5, got {tolerance:g}")
    fit = FitSpec(
        specified=True,
        max_training_rms=positive("max_training_rms"),
        max_validation_rms=positive("max_validation_rms"),
        max_local_condition_number=positive("max_local_condition_number", 1.0),
        max_episode_rms_ratio=positive("max_episode_rms_ratio", 1.0),
        reject_parameter_near_bound=s.boolean(body.get("reject_parameter_near_bound", False),
                                              where.key("reject_parameter_near_bound")),
        near_bound_fraction=tolerance)
    if tolerance is not None and not fit.reject_parameter_near_bound:
        raise where.key("near_bound_fraction").fail(
            "near_bound_fraction applies only with reject_parameter_near_bound: true")
    return fit


#: a context value: scalars only
ContextValue = str | int | float | bool


def parse_context(value: object, where: s.Where) -> dict[str, ContextValue]:
    """Free-form provenance keys with scalar values (``seed`` must be an integer)."""
    body = cast("Mapping[object, object]", s.mapping(value, where))  # YAML: keys of any type
    out: dict[str, ContextValue] = {}
    for key, item in body.items():
        at = where.key(str(key))
        if not isinstance(key, str) or not key:
            raise at.fail("context keys must be non-empty strings")
        if key in RESERVED_CONTEXT_KEYS:
            raise at.fail(f"{key!r} is written by the calibration result itself; reserved "
                          f"context keys: {', '.join(RESERVED_CONTEXT_KEYS)}")
        if key == "seed":
            out[key] = s.integer(item, at, minimum=0)
        elif isinstance(item, bool) or isinstance(item, str):
            out[key] = item
        elif isinstance(item, (int, float)):
            out[key] = s.number(item, at) if isinstance(item, float) else item
        else:
            raise at.fail(f"context values must be strings, numbers or booleans, got "
                          f"{s.describe(item)}")
    return out
