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
from typing import Any, Protocol

import numpy as np

from fibril_sim_core.errors import FibrilError
from fibril_sim_core.plan import SimulationPlan

from ..errors import EvaluationError
from ..evaluation import Evaluation, ResidualBlock, Scope
from ..model.candidate_plan import CandidatePlanBuilder, CandidatePlanBuilderProtocol
from ..model.decoders import CalibrationDeviceOutputDecoderRegistry
from ..model.initial_state_fit import (InitialStateProjection, coordinates, describe, perturbed,
                                       step)
from ..request.document import CalibrationRequest
from .episodes import EpisodeSchedule, episode_residuals, run_episode, schedule_episode

Progress = Callable[[str], None]


class RemoteRollouts(Protocol):
    """Runs the rollouts of candidates elsewhere (``solve.dask_rollouts.DaskRollouts``)."""

    def rollouts(self, vectors: Sequence[np.ndarray], parameter_ids: Sequence[str],
                 scope: str, episodes: int) -> tuple[list[np.ndarray], Any]:
        """Unweighted residuals per candidate × episode (candidate-major) and statistics
        (``rollouts``, ``plan_builds``, ``build_seconds``, ``rollout_seconds``)."""
        ...


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

    def to_document(self) -> dict[str, Any]:
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
            from ..recordings.time_offsets import candidate_builder as offset_aware

            candidate_builder = offset_aware(
                CandidatePlanBuilder.holding(request.fixed_overlays), request.manifest,
                request.parameters)
        self.candidate_builder = candidate_builder
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
        self._cache: dict[str, OrderedDict[bytes, Evaluation]] = {
            "training": OrderedDict(), "validation": OrderedDict()}
        self._lock = threading.Lock()
        self._workers = request.execution.max_parallelism
        # Python work of the workers takes turns (one holds the turn, except while MuJoCo
        # steps a rollout without the GIL): without it, a worker that drops the GIL inside a
        # short C call lets the other's whole Python phase in first, and both cores idle.
        self._turn = threading.Lock()
        self._rollout_turn = _TurnReleased(self._turn)
        self._pool: ThreadPoolExecutor | None = None
        self._remote: RemoteRollouts | None = None
        self._last_report = 0.0
        # initial_state_fit: per scope, one projection (or None) per schedule, and where the
        # sensitivities were computed (``refresh_initial_state_fit``).
        self._projections: dict[str, tuple[InitialStateProjection | None, ...]] = {}
        self.initial_state_fit_points: list[dict[str, Any]] = []

    # ----------------------------------------------------------------- ResidualModel
    def evaluate(self, physical: np.ndarray, scope: Scope = "training") -> Evaluation:
        """Residuals of ``scope`` at ``physical``; raises EvaluationError on a failed rollout."""
        return self.evaluate_many([physical], scope)[0]

    def evaluate_many(self, physicals: Sequence[np.ndarray],
                      scope: Scope = "training") -> list[Evaluation]:
        """Evaluate several parameter vectors; their rollouts share the worker pool."""
        self._check_scope(scope)
        vectors = [self._vector(p) for p in physicals]
        results: list[Evaluation | None] = [None] * len(vectors)
        pending: dict[bytes, list[int]] = {}
        for i, vector in enumerate(vectors):
            key = vector.tobytes()
            hit = self._cached(scope, key)
            if hit is not None:
                results[i] = hit
            else:
                pending.setdefault(key, []).append(i)
        if pending:
            todo = [vectors[indices[0]] for indices in pending.values()]
            computed = self._compute(todo, scope)
            for (key, indices), evaluation in zip(pending.items(), computed):
                self._store(scope, key, evaluation)
                for i in indices:
                    results[i] = evaluation
        self._report(scope)
        return results  # type: ignore[return-value]

    # ----------------------------------------------------------------- plans
    def values(self, physical: np.ndarray) -> dict[str, float]:
        return {pid: float(v) for pid, v in zip(self.parameter_ids, self._vector(physical))}

    def candidate_plan(self, physical: np.ndarray) -> SimulationPlan:
        """The candidate SimulationPlan at ``physical`` (one build)."""
        vector = self._vector(physical)
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
        return any(s.episode.initial_state_fit for scope in ("training", "validation")
                   for s in self._schedules[scope])

    def refresh_initial_state_fit(self, physical: np.ndarray) -> None:
        """(Re)compute the initial-state sensitivities of every episode with an
        ``initial_state_fit`` at ``physical``; forgets the memoised evaluations."""
        vector = self._vector(physical)
        plan = self.candidate_plan(vector)
        try:
            for scope in ("training", "validation"):
                self._projections[scope] = self._sensitivities(plan, self._schedules[scope])
        finally:
            self._release(plan)
        with self._lock:
            for cache in self._cache.values():
                cache.clear()
        self.initial_state_fit_points.append(self.values(vector))

    def nuisance_degrees_of_freedom(self, scope: str) -> dict[str, int]:
        """Episode id → the rank of its initial-state sensitivity (the degrees of freedom the
        projection removed) under the sensitivities in effect; empty without any."""
        projections = self._projections.get(scope) or ()
        return {s.episode.id: p.rank for s, p in zip(self._schedules[scope], projections)
                if p is not None}

    def initial_state_estimates(self, physical: np.ndarray) -> dict[str, Any]:
        """The nuisance initial states at ``physical``: per episode with an
        ``initial_state_fit``, each coordinate's logged value, offset and estimate."""
        vector = self._vector(physical)
        out: dict[str, Any] = {}
        plan = self.candidate_plan(vector)
        try:
            for scope in ("training", "validation"):
                projections = self._projection_set(scope, plan)
                for schedule, projection in zip(self._schedules[scope], projections):
                    if projection is not None:
                        raw = self._rollout((plan, schedule))
                        out[schedule.episode.id] = {"scope": scope,
                                                    **describe(schedule.episode, projection,
                                                               raw)}
        finally:
            self._release(plan)
        return out

    def _projection_set(self, scope: str, plan: SimulationPlan
                        ) -> tuple[InitialStateProjection | None, ...]:
        projections = self._projections.get(scope)
        if projections is None:
            projections = self._projections[scope] = self._sensitivities(
                plan, self._schedules[scope])
            self.initial_state_fit_points.append({"scope": scope, "at": "first evaluation"})
        return projections

    def _sensitivities(self, plan: SimulationPlan, schedules: Sequence[EpisodeSchedule]
                       ) -> tuple[InitialStateProjection | None, ...]:
        """Forward differences of each fitted episode's residuals in its initial state."""
        tasks: list[tuple[SimulationPlan, EpisodeSchedule, str | None]] = []
        layout: list[tuple[int, tuple, int, list[float]]] = []
        for index, schedule in enumerate(schedules):
            parts = schedule.episode.initial_state_fit
            if not parts:
                continue
            coords = coordinates(schedule.episode.initial_state, parts)
            steps = [step(c.part, schedule.episode.initial_state[c.entry][c.part][0])
                     for c in coords]
            layout.append((index, coords, len(tasks), steps))
            tasks.append((plan, schedule, None))
            for c, h in zip(coords, steps):
                moved = perturbed(schedule.episode, c, h)
                tasks.append((plan, replace(schedule, episode=moved), f"{c.label} + {h:g}"))
        if not tasks:
            return tuple(None for _ in schedules)
        outcomes = self._map(self._sensitivity_rollout, tasks)
        projections: list[InitialStateProjection | None] = [None] * len(schedules)
        for index, coords, first, steps in layout:
            base = outcomes[first]
            columns = [(outcomes[first + 1 + k] - base) / h for k, h in enumerate(steps)]
            projections[index] = InitialStateProjection.from_sensitivity(
                coords, np.column_stack(columns), steps)
        return tuple(projections)

    def _sensitivity_rollout(self, task: tuple[SimulationPlan, EpisodeSchedule, str | None]
                             ) -> np.ndarray:
        """One rollout of the sensitivities; a failure counts in statistics.failures and
        says it came from the initial-state sensitivities (a perturbed initial state)."""
        plan, schedule, moved = task
        try:
            return self._rollout((plan, schedule))
        except EvaluationError as exc:
            with self._lock:
                self.statistics.failures += 1
            where = (f"the rollout from the perturbed initial state {moved}" if moved else
                     "the rollout from the logged initial state")
            raise EvaluationError(f"initial_state_fit sensitivity of episode "
                                  f"{schedule.episode.id!r}: {where} failed: {exc}") from None

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
    def _check_scope(self, scope: str) -> None:
        if scope not in ("training", "validation"):
            raise ValueError(f"unknown scope {scope!r}; expected training or validation")
        if scope == "validation" and not self.has_validation:
            raise EvaluationError("the request has no validation episodes")

    def _vector(self, physical: Any) -> np.ndarray:
        vector = np.array(physical, dtype=np.float64).ravel()
        if vector.shape[0] != len(self.parameter_ids):
            raise ValueError(f"expected {len(self.parameter_ids)} parameter value(s) "
                             f"({', '.join(self.parameter_ids)}), got {vector.shape[0]}")
        if not np.all(np.isfinite(vector)):
            raise EvaluationError(f"non-finite parameter values {vector.tolist()}")
        return vector

    def _cached(self, scope: str, key: bytes) -> Evaluation | None:
        if not self._capacity:
            return None
        with self._lock:
            cache = self._cache[scope]
            hit = cache.get(key)
            if hit is not None:
                cache.move_to_end(key)
                self.statistics.cache_hits[scope] += 1
            return hit

    def _store(self, scope: str, key: bytes, evaluation: Evaluation) -> None:
        if not self._capacity:
            return
        with self._lock:
            cache = self._cache[scope]
            cache[key] = evaluation
            cache.move_to_end(key)
            while len(cache) > self._capacity:
                cache.popitem(last=False)

    def _compute(self, vectors: list[np.ndarray], scope: str) -> list[Evaluation]:
        schedules = self._schedules[scope]
        with self._lock:
            self.statistics.evaluations[scope] += len(vectors)
        try:
            if self._remote is not None:
                outcomes = self._remote_rollouts(vectors, scope)
            elif len(vectors) > 1:
                # One task per candidate (its build, then its episodes): while one worker holds
                # the GIL for Python work, another is inside a GIL-free MuJoCo rollout.
                per_candidate = self._map(lambda v: self._candidate_rollouts(v, scope), vectors)
                outcomes = [o for outcome in per_candidate for o in outcome]
            else:
                plan = self.candidate_plan(vectors[0])
                try:
                    outcomes = self._map(self._rollout, [(plan, s) for s in schedules])
                finally:
                    self._release(plan)
                    del plan
        except EvaluationError:
            with self._lock:
                self.statistics.failures += 1
            raise
        if scope not in self._projections and any(s.episode.initial_state_fit
                                                  for s in schedules):
            plan = self.candidate_plan(vectors[0])
            try:
                self._projection_set(scope, plan)
            finally:
                self._release(plan)
        projections = self._projections.get(scope)
        if projections is not None:
            per = len(schedules)
            outcomes = [o if projections[k % per] is None else projections[k % per].apply(o)
                        for k, o in enumerate(outcomes)]
        evaluations = []
        per = len(schedules)
        for i, vector in enumerate(vectors):
            evaluations.append(self._assemble(scope, schedules,
                                              outcomes[i * per:(i + 1) * per]))
        return evaluations

    def _remote_rollouts(self, vectors: list[np.ndarray], scope: str) -> list[np.ndarray]:
        assert self._remote is not None
        outcomes, done = self._remote.rollouts(vectors, self.parameter_ids, scope,
                                               len(self._schedules[scope]))
        with self._lock:
            self.statistics.rollouts += done.rollouts
            self.statistics.plan_builds += done.plan_builds
            self.statistics.build_seconds += done.build_seconds
            self.statistics.rollout_seconds += done.rollout_seconds
        return outcomes

    def _candidate_rollouts(self, vector: np.ndarray, scope: str) -> list[np.ndarray]:
        with self._turn:
            plan = self.candidate_plan(vector)
        try:
            return [self._rollout((plan, schedule)) for schedule in self._schedules[scope]]
        finally:
            self._release(plan)

    def _release(self, plan: SimulationPlan) -> None:
        """Hand a finished candidate plan back to the builder (its model may be reused)."""
        release = getattr(self.candidate_builder, "release", None)
        if release is not None:
            with self._turn:
                release(plan)

    def _rollout(self, task: tuple[SimulationPlan, EpisodeSchedule]) -> np.ndarray:
        plan, schedule = task
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

    def _assemble(self, scope: str, schedules: Sequence[EpisodeSchedule],
                  outcomes: Sequence[np.ndarray]) -> Evaluation:
        blocks = self._blocks.get(scope)
        if blocks is None:  # the layout is fixed by the reference samples: one tuple per scope
            blocks = self._blocks[scope] = self.layout(scope)  # type: ignore[arg-type]
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

    def _map(self, function: Callable[[Any], Any], items: Sequence[Any]) -> list[Any]:
        if self._workers <= 1 or len(items) <= 1:
            return [function(item) for item in items]
        if self._pool is None:
            with self._lock:
                if self._pool is None:
                    self._pool = ThreadPoolExecutor(max_workers=self._workers,
                                                    thread_name_prefix="fibril-calibration")
        futures = [self._pool.submit(function, item) for item in items]
        results = []
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

    def _report(self, scope: str) -> None:
        if self.progress is None:
            return
        now = time.monotonic()
        if now - self._last_report < 1.0:
            return
        self._last_report = now
        stats = self.statistics
        self.progress(f"{scope}: {stats.evaluations[scope]} evaluation(s), "
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
