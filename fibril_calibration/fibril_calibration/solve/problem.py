"""The calibration problem: the ``ResidualModel`` the solver drives.

One evaluation at one physical parameter vector builds ONE candidate SimulationPlan and replays
every episode of the scope on its own fresh SimulationInstance. Episode residual vectors are
stacked in declaration order (signals in observation declaration order, samples in time order,
components innermost), so the layout is fixed by the reference data and never by the candidate
or by ``execution.max_parallelism``.

* ``execution.max_parallelism`` >= 2 runs independent rollouts on a thread pool (MuJoCo releases
  the GIL inside ``mj_step``); ``evaluate_many`` spreads the rollouts of several candidates (a
  finite-difference Jacobian) over the same pool.
* ``set_remote`` hands the rollouts of every evaluation to a ``RemoteRollouts`` (the Dask
  backend, ``dask_rollouts``); the residuals are assembled here in the same order.
* ``execution.cache_entries`` memoizes full evaluations per parameter vector (LRU), with
  training and validation in separate scopes, for the lifetime of one calibration run.
"""

from __future__ import annotations

import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Protocol, TypeVar, runtime_checkable

import numpy as np

from fibril_sim_core.errors import FibrilError
from fibril_sim_core.plan import SimulationPlan

from .._json import JsonObject
from ..errors import EvaluationError
from ..evaluation import Evaluation, ResidualBlock, Scope
from ..model.candidate_plan import CandidatePlanBuilder, CandidatePlanBuilderProtocol
from ..model.decoders import CalibrationDeviceOutputDecoderRegistry
from ..model.initial_state_fit import InitialStateProjection, describe
from ..recordings.time_offsets import candidate_builder as offset_aware
from ..request.document import CalibrationRequest
from .episodes import EpisodeSchedule, episode_residuals, run_episode, schedule_episode
from .initial_state_sensitivity import InitialStateSensitivities, Projections

Progress = Callable[[str], None]
_T = TypeVar("_T")
_R = TypeVar("_R")


class RolloutCounts(Protocol):
    """What a remote batch of rollouts reports (``dask_rollouts.RolloutStatistics``)."""

    @property
    def rollouts(self) -> int: ...
    @property
    def plan_builds(self) -> int: ...
    @property
    def build_seconds(self) -> float: ...
    @property
    def rollout_seconds(self) -> float: ...


class RemoteRollouts(Protocol):
    """Runs the rollouts of candidates elsewhere (``solve.dask_rollouts.DaskRollouts``)."""

    def rollouts(self, vectors: Sequence[np.ndarray], parameter_ids: Sequence[str],
                 scope: str, episodes: int) -> tuple[list[np.ndarray], RolloutCounts]:
        """Unweighted residuals per candidate × episode (candidate-major) and statistics
        (``rollouts``, ``plan_builds``, ``build_seconds``, ``rollout_seconds``)."""
        ...


@runtime_checkable
class ReleasingBuilder(Protocol):
    """A candidate builder that takes finished plans back (``CandidatePlanBuilder``: their
    models may be reused for later candidates)."""

    def release(self, plan: SimulationPlan) -> None: ...


class _TurnReleased:
    """Gives the Python turn away for the duration of a rollout, and takes it back after."""

    def __init__(self, turn: threading.Lock) -> None:
        self._turn = turn

    def __enter__(self) -> None:
        self._turn.release()

    def __exit__(self, *exc: object) -> None:
        self._turn.acquire()


@dataclass
class ProblemStatistics:
    """Counters of one calibration run (reported in the result)."""

    evaluations: dict[str, int] = field(default_factory=lambda: {"training": 0,
                                                                  "validation": 0})
    cache_hits: dict[str, int] = field(default_factory=lambda: {"training": 0,
                                                                 "validation": 0})
    plan_builds: int = 0
    rollouts: int = 0
    failures: int = 0
    build_seconds: float = 0.0
    rollout_seconds: float = 0.0

    def to_document(self) -> JsonObject:
        return {"evaluations": dict(self.evaluations), "cache_hits": dict(self.cache_hits),
                "plan_builds": self.plan_builds, "rollouts": self.rollouts,
                "failed_evaluations": self.failures,
                "build_seconds": round(self.build_seconds, 6),
                "rollout_seconds": round(self.rollout_seconds, 6)}


class CalibrationProblem:
    """Physical parameter values (declaration order) → ``Evaluation`` of a scope."""

    def __init__(self, request: CalibrationRequest, *,
                 candidate_builder: CandidatePlanBuilderProtocol | None = None,
                 decoders: CalibrationDeviceOutputDecoderRegistry | None = None,
                 progress: Progress | None = None) -> None:
        self.request = request
        self.parameter_ids: tuple[str, ...] = request.parameter_ids
        self.has_validation: bool = bool(request.validation)
        if candidate_builder is None:  # time-offset parameters are not overlays
            candidate_builder = offset_aware(
                CandidatePlanBuilder.holding(request.fixed_overlays), request.manifest,
                request.parameters)
        self.candidate_builder: CandidatePlanBuilderProtocol = candidate_builder
        self._releases = (candidate_builder.release
                          if isinstance(candidate_builder, ReleasingBuilder) else None)
        self.decoders = decoders or CalibrationDeviceOutputDecoderRegistry.standard()
        self.progress = progress
        self.statistics = ProblemStatistics()
        timestep = request.nominal_plan.timebase.timestep_ns
        observations = {o.id: o for o in request.observations}
        self._schedules: dict[str, tuple[EpisodeSchedule, ...]] = {
            scope: tuple(schedule_episode(e, observations, timestep)
                         for e in request.episodes(scope))
            for scope in ("training", "validation")}
        self._timestep = timestep
        self._blocks: dict[str, tuple[ResidualBlock, ...]] = {}
        self._capacity = request.execution.cache_entries
        self._lock = threading.Lock()
        self._cache = _EvaluationCache(self._lock, self.statistics)
        self._workers = request.execution.max_parallelism
        # Python work of the workers takes turns (one holds the turn, except while MuJoCo
        # steps a rollout without the GIL): without it, a worker that drops the GIL inside a
        # short C call lets the other's whole Python phase in first, and both cores idle.
        self._turn = threading.Lock()
        self._rollout_turn = _TurnReleased(self._turn)
        self._pool: ThreadPoolExecutor | None = None
        self._remote: RemoteRollouts | None = None
        self._last_report = [0.0]  # when progress was last reported (``_report``)
        # initial_state_fit: per scope, one projection (or None) per schedule, and where the
        # sensitivities were computed (``refresh_initial_state_fit``).
        self._sensitivities = InitialStateSensitivities(self._schedules)
        self.initial_state_fit_points: list[JsonObject] = self._sensitivities.points

    # ----------------------------------------------------------------- ResidualModel
    def evaluate(self, physical: np.ndarray, scope: Scope = "training") -> Evaluation:
        """Residuals of ``scope`` at ``physical``; raises EvaluationError on a failed rollout."""
        return self.evaluate_many([physical], scope)[0]

    def evaluate_many(self, physicals: Sequence[np.ndarray],
                      scope: Scope = "training") -> list[Evaluation]:
        """Evaluate several parameter vectors; their rollouts share the worker pool."""
        _check_scope(scope, self.has_validation)
        vectors = [_vector(p, self.parameter_ids) for p in physicals]
        results: list[Evaluation | None] = [None] * len(vectors)
        pending: dict[bytes, list[int]] = {}
        for i, vector in enumerate(vectors):
            key = vector.tobytes()
            hit = self._cache.get(scope, key) if self._capacity else None
            if hit is not None:
                results[i] = hit
            else:
                pending.setdefault(key, []).append(i)
        if pending:
            todo = [vectors[indices[0]] for indices in pending.values()]
            computed = self._compute(todo, scope)
            for (key, indices), evaluation in zip(pending.items(), computed):
                if self._capacity:
                    self._cache.put(scope, key, evaluation, self._capacity)
                for i in indices:
                    results[i] = evaluation
        _report(self.progress, self.statistics, scope, self._last_report)
        return [r for r in results if r is not None]  # every slot is filled above

    # ----------------------------------------------------------------- plans
    def values(self, physical: np.ndarray) -> dict[str, float]:
        vector = _vector(physical, self.parameter_ids)
        return {pid: float(v) for pid, v in zip(self.parameter_ids, vector)}

    def candidate_plan(self, physical: np.ndarray) -> SimulationPlan:
        """The candidate SimulationPlan at ``physical`` (one build)."""
        vector = _vector(physical, self.parameter_ids)
        values = self.values(vector)
        started = time.perf_counter()
        try:
            return build_candidate(self.candidate_builder, values, self._timestep)
        finally:
            with self._lock:
                self.statistics.plan_builds += 1
                self.statistics.build_seconds += time.perf_counter() - started

    def set_remote(self, remote: RemoteRollouts | None) -> None:
        """Run the rollouts of every evaluation on ``remote`` (None: here again)."""
        self._remote = remote

    def decoded_schedules(self) -> dict[str, tuple[EpisodeSchedule, ...]]:
        """Every scope's episode schedules (recorded inputs and reference samples decoded)."""
        return dict(self._schedules)

    # ----------------------------------------------------------------- initial_state_fit
    @property
    def fits_initial_states(self) -> bool:
        return self._sensitivities.any

    def refresh_initial_state_fit(self, physical: np.ndarray) -> None:
        """(Re)compute the initial-state sensitivities of every episode with an
        ``initial_state_fit`` at ``physical``; forgets the memoised evaluations."""
        vector = _vector(physical, self.parameter_ids)
        plan = self.candidate_plan(vector)
        try:
            self._sensitivities.refresh(plan, self._rollout, self._map, self._count_failure)
        finally:
            self._release(plan)
        self._cache.clear()
        self.initial_state_fit_points.append({**self.values(vector)})

    def nuisance_degrees_of_freedom(self, scope: str) -> dict[str, int]:
        """Episode id → the rank of its initial-state sensitivity (the degrees of freedom the
        projection removed) under the sensitivities in effect; empty without any."""
        projections = self._sensitivities.projections.get(scope) or ()
        return {s.episode.id: p.rank for s, p in zip(self._schedules[scope], projections)
                if p is not None}

    def initial_state_estimates(self, physical: np.ndarray) -> dict[str, JsonObject]:
        """The nuisance initial states at ``physical``: per episode with an
        ``initial_state_fit``, each coordinate's logged value, offset and estimate."""
        vector = _vector(physical, self.parameter_ids)
        out: dict[str, JsonObject] = {}
        plan = self.candidate_plan(vector)
        try:
            for scope in ("training", "validation"):
                projections = self._sensitivities.of_scope(scope, plan, self._rollout,
                                                           self._map, self._count_failure)
                for schedule, projection in zip(self._schedules[scope], projections):
                    if projection is not None:
                        raw = self._rollout(plan, schedule)
                        out[schedule.episode.id] = {"scope": scope,
                                                    **describe(schedule.episode, projection,
                                                               raw)}
        finally:
            self._release(plan)
        return out

    def _count_failure(self) -> None:
        with self._lock:
            self.statistics.failures += 1

    def schedules(self, scope: Scope) -> tuple[EpisodeSchedule, ...]:
        return self._schedules[scope]

    def layout(self, scope: Scope) -> tuple[ResidualBlock, ...]:
        """The residual blocks of a scope (fixed by the reference samples)."""
        blocks: list[ResidualBlock] = []
        start = 0
        for schedule in self._schedules[scope]:
            for item in schedule.signals:
                size = item.signal.count * item.observation.residual_dimension
                blocks.append(ResidualBlock(schedule.episode.id, item.signal.observation,
                                            start, start + size))
                start += size
        return tuple(blocks)

    # ----------------------------------------------------------------- lifecycle
    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None

    def __enter__(self) -> CalibrationProblem:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ----------------------------------------------------------------- internals
    def _compute(self, vectors: list[np.ndarray], scope: Scope) -> list[Evaluation]:
        schedules = self._schedules[scope]
        with self._lock:
            self.statistics.evaluations[scope] += len(vectors)
        try:
            if self._remote is not None:
                outcomes = _remote_rollouts(self._remote, vectors, self.parameter_ids, scope,
                                            len(schedules), self.statistics, self._lock)
            elif len(vectors) > 1:
                # One task per candidate (its build, then its episodes): while one worker holds
                # the GIL for Python work, another is inside a GIL-free MuJoCo rollout.
                per_candidate = self._map(lambda v: self._candidate_rollouts(v, scope), vectors)
                outcomes = [o for outcome in per_candidate for o in outcome]
            else:
                plan = self.candidate_plan(vectors[0])
                try:
                    outcomes = self._map(lambda s: self._rollout(plan, s), schedules)
                finally:
                    self._release(plan)
                    del plan
        except EvaluationError:
            self._count_failure()
            raise
        if scope not in self._sensitivities.projections and any(s.episode.initial_state_fit
                                                                for s in schedules):
            plan = self.candidate_plan(vectors[0])
            try:
                self._sensitivities.of_scope(scope, plan, self._rollout, self._map,
                                             self._count_failure)
            finally:
                self._release(plan)
        projections = self._sensitivities.projections.get(scope)
        per = len(schedules)
        if projections is not None:
            outcomes = [_projected(projections[k % per], o) for k, o in enumerate(outcomes)]
        blocks = self._blocks.get(scope)
        if blocks is None:  # the layout is fixed by the reference samples: one tuple per scope
            blocks = self._blocks[scope] = self.layout(scope)
        return [_assemble(blocks, schedules, outcomes[i * per:(i + 1) * per])
                for i in range(len(vectors))]

    def _candidate_rollouts(self, vector: np.ndarray, scope: Scope) -> list[np.ndarray]:
        with self._turn:
            plan = self.candidate_plan(vector)
        try:
            return [self._rollout(plan, schedule) for schedule in self._schedules[scope]]
        finally:
            self._release(plan)

    def _release(self, plan: SimulationPlan) -> None:
        """Hand a finished candidate plan back to the builder (its model may be reused)."""
        if self._releases is not None:
            with self._turn:
                self._releases(plan)

    def _rollout(self, plan: SimulationPlan, schedule: EpisodeSchedule) -> np.ndarray:
        started = time.perf_counter()
        try:
            with self._turn:
                tracks = run_episode(plan, schedule, self.decoders,
                                     rollout_context=self._rollout_turn)
                residuals, _ = episode_residuals(schedule, tracks)
        finally:
            with self._lock:
                self.statistics.rollouts += 1
                self.statistics.rollout_seconds += time.perf_counter() - started
        return residuals

    def _map(self, function: Callable[[_T], _R], items: Sequence[_T]) -> list[_R]:
        if self._workers <= 1 or len(items) <= 1:
            return [function(item) for item in items]
        if self._pool is None:
            with self._lock:
                if self._pool is None:
                    self._pool = ThreadPoolExecutor(max_workers=self._workers,
                                                    thread_name_prefix="fibril-calibration")
        futures = [self._pool.submit(function, item) for item in items]
        results: list[_R] = []
        error: BaseException | None = None
        for future in futures:  # wait for all, then raise the first failure in order
            try:
                results.append(future.result())
            except BaseException as exc:  # noqa: BLE001 - re-raised below
                if error is None:
                    error = exc
        if error is not None:
            raise error
        return results


class _EvaluationCache:
    """Full evaluations memoised per scope and parameter vector (LRU), for one run."""

    def __init__(self, lock: threading.Lock, statistics: ProblemStatistics) -> None:
        self._lock = lock
        self._statistics = statistics
        self._scopes: dict[str, OrderedDict[bytes, Evaluation]] = {
            "training": OrderedDict(), "validation": OrderedDict()}

    def get(self, scope: str, key: bytes) -> Evaluation | None:
        with self._lock:
            cache = self._scopes[scope]
            hit = cache.get(key)
            if hit is not None:
                cache.move_to_end(key)
                self._statistics.cache_hits[scope] += 1
            return hit

    def put(self, scope: str, key: bytes, evaluation: Evaluation, capacity: int) -> None:
        with self._lock:
            cache = self._scopes[scope]
            cache[key] = evaluation
            cache.move_to_end(key)
            while len(cache) > capacity:
                cache.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            for cache in self._scopes.values():
                cache.clear()


def _remote_rollouts(remote: RemoteRollouts, vectors: list[np.ndarray],
                     parameter_ids: Sequence[str], scope: str, episodes: int,
                     statistics: ProblemStatistics, lock: threading.Lock) -> list[np.ndarray]:
    """The candidates' rollouts on ``remote``, its counts added to ``statistics``."""
    outcomes, done = remote.rollouts(vectors, parameter_ids, scope, episodes)
    with lock:
        statistics.rollouts += done.rollouts
        statistics.plan_builds += done.plan_builds
        statistics.build_seconds += done.build_seconds
        statistics.rollout_seconds += done.rollout_seconds
    return outcomes


def _check_scope(scope: str, has_validation: bool) -> None:
    if scope not in ("training", "validation"):
        raise ValueError(f"unknown scope {scope!r}; expected training or validation")
    if scope == "validation" and not has_validation:
        raise EvaluationError("the request has no validation episodes")


def _vector(physical: object, parameter_ids: Sequence[str]) -> np.ndarray:
    """Physical values as a float64 vector, checked: one per parameter, finite."""
    vector = np.array(physical, dtype=np.float64).ravel()
    if vector.shape[0] != len(parameter_ids):
        raise ValueError(f"expected {len(parameter_ids)} parameter value(s) "
                         f"({', '.join(parameter_ids)}), got {vector.shape[0]}")
    if not np.all(np.isfinite(vector)):
        raise EvaluationError(f"non-finite parameter values {vector.tolist()}")
    return vector


def _projected(projection: InitialStateProjection | None, outcome: np.ndarray) -> np.ndarray:
    return outcome if projection is None else projection.apply(outcome)


def _assemble(blocks: tuple[ResidualBlock, ...], schedules: Sequence[EpisodeSchedule],
              outcomes: Sequence[np.ndarray]) -> Evaluation:
    """One candidate's evaluation: its episodes' residuals stacked in declaration order,
    weighted by the square root of each episode's weight."""
    weighted: list[np.ndarray] = []
    unweighted: list[np.ndarray] = []
    for schedule, residuals in zip(schedules, outcomes):
        if residuals.shape[0] != schedule.residual_count:  # pragma: no cover - invariant
            raise EvaluationError(f"episode {schedule.episode.id!r}: residual layout "
                                  f"mismatch ({residuals.shape[0]} != "
                                  f"{schedule.residual_count})")
        unweighted.append(residuals)
        weight = schedule.episode.weight
        weighted.append(residuals if weight == 1.0 else math.sqrt(weight) * residuals)
    r = np.concatenate(weighted) if weighted else np.empty(0)
    u = np.concatenate(unweighted) if unweighted else np.empty(0)
    r.setflags(write=False)
    u.setflags(write=False)
    return Evaluation(residuals=r, unweighted=u, blocks=blocks,
                      weighted=any(s.episode.weight != 1.0 for s in schedules))


def _report(progress: Progress | None, stats: ProblemStatistics, scope: str,
            last: list[float]) -> None:
    """At most one progress line a second (``last[0]``: when the previous one went out)."""
    if progress is None:
        return
    now = time.monotonic()
    if now - last[0] < 1.0:
        return
    last[0] = now
    progress(f"{scope}: {stats.evaluations[scope]} evaluation(s), "
             f"{stats.rollouts} rollout(s), {stats.cache_hits[scope]} cache hit(s)")


def build_candidate(builder: CandidatePlanBuilderProtocol, values: dict[str, float],
                    timestep_ns: int) -> SimulationPlan:
    """The candidate plan at ``values``; any failure is the candidate's EvaluationError."""
    try:
        plan = builder.build(values)
    except FibrilError as exc:
        raise candidate_error(values, str(exc)) from None
    if plan.timebase.timestep_ns != timestep_ns:
        raise candidate_error(values, f"its physics timestep ({plan.timebase.timestep_ns} ns) "
                                      f"differs from the nominal plan's ({timestep_ns} ns)")
    return plan


def candidate_error(values: dict[str, float], message: str) -> EvaluationError:
    return EvaluationError(f"candidate plan at {_describe(values)}: {message}")


def _describe(values: dict[str, float]) -> str:
    return "{" + ", ".join(f"{k}={v:.9g}" for k, v in values.items()) + "}"
