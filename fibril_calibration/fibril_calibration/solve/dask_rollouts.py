"""Calibration rollouts on a Dask cluster (the ``dask`` execution backend).

The unit of work is one candidate × one episode when fewer candidates than worker threads are
evaluated at once (one evaluation: its episodes in parallel), and one candidate × all its
episodes otherwise (a finite-difference Jacobian's batch: one plan build per candidate, as
locally). A task builds the candidate's plan on a worker (kept there for the candidate's next
episodes) and returns unweighted residuals, exactly what the local backend computes. What every task needs is sent once per
calibration and copied between the workers: the manifest's files by content (``Bundle``), the
parameters and the episode schedules with their decoded recorded inputs and reference samples.
Residuals are assembled on the client in declaration order, so the fit is bit for bit the
local one. At most ``max_parallelism`` tasks are in flight when the request sets it.
"""

from __future__ import annotations

import hashlib
import pickle
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fibril_sim_core.errors import FibrilError
from fibril_sim_core.execution.bundle import Bundle, collect_bundle, manifest_files, remap

from ..errors import EvaluationError
from ..model.candidate_plan import CandidatePlanBuilder
from ..model.decoders import CalibrationDeviceOutputDecoderRegistry
from .episodes import EpisodeSchedule, episode_residuals, run_episode
from .problem import CalibrationProblem, build_candidate


@dataclass(frozen=True)
class RolloutContext:
    """What every rollout task of one calibration shares (sent once, kept by each worker)."""

    key: str
    bundle: Bundle
    manifest: str  # relative to the bundle
    parameters: tuple[Any, ...]
    schedules: dict[str, tuple[EpisodeSchedule, ...]]
    decoders: CalibrationDeviceOutputDecoderRegistry
    timestep_ns: int


@dataclass(frozen=True)
class RolloutStatistics:
    """What the tasks of one ``rollouts`` call did on the workers."""

    rollouts: int
    plan_builds: int
    build_seconds: float
    rollout_seconds: float


class DaskRollouts:
    """Candidate × episode rollouts as Dask tasks of an open ``DaskSession``."""

    @classmethod
    def for_problem(cls, session: Any, problem: CalibrationProblem) -> DaskRollouts:
        """The rollouts of ``problem`` (its request, decoded episodes and decoders)."""
        request = problem.request
        return cls(session, request.manifest.path, request.parameters,
                   problem.decoded_schedules(), problem.decoders,
                   request.nominal_plan.timebase.timestep_ns, request.execution.task_limit)

    def __init__(self, session: Any, manifest: Path, parameters: Sequence[Any],
                 schedules: dict[str, tuple[EpisodeSchedule, ...]],
                 decoders: CalibrationDeviceOutputDecoderRegistry, timestep_ns: int,
                 limit: int | None) -> None:
        bundle = collect_bundle(manifest_files(manifest))
        payload = pickle.dumps((bundle.digest, tuple(parameters), schedules), protocol=5)
        self._session = session
        self._limit = limit
        self._context = session.scatter(RolloutContext(
            hashlib.sha256(payload).hexdigest(), bundle, bundle.relative(manifest),
            tuple(parameters), schedules, decoders, timestep_ns))

    def rollouts(self, vectors: Sequence[np.ndarray], parameter_ids: Sequence[str],
                 scope: str, episodes: int) -> tuple[list[np.ndarray], RolloutStatistics]:
        """Unweighted residuals of each candidate's episodes (candidate-major, episodes in
        declaration order); the first failure in that order is raised, as locally."""
        per_candidate = len(vectors) >= self._session.threads
        groups = [tuple(range(episodes))] if per_candidate else [(i,) for i in range(episodes)]
        items = [(scope, group, tuple(zip(parameter_ids, (float(v) for v in vector))))
                 for vector in vectors for group in groups]
        outcomes = self._session.map(_rollout_task, self._context, items, self._limit)
        residuals: list[np.ndarray] = []
        builds = 0
        build_seconds = rollout_seconds = 0.0
        error: BaseException | None = None
        for ok, value in outcomes:
            if not ok:
                error = error or value
                continue
            done, built, build_time, rollout_time = value
            residuals.extend(done)
            builds += built
            build_seconds += build_time
            rollout_seconds += rollout_time
        statistics = RolloutStatistics(len(vectors) * episodes, builds, build_seconds,
                                       rollout_seconds)
        if error is not None:
            raise _as_evaluation_error(error) from None
        return residuals, statistics


def _as_evaluation_error(error: BaseException) -> BaseException:
    """A failed rollout stays an EvaluationError; a task lost with its worker becomes one."""
    if isinstance(error, (EvaluationError, FibrilError)):
        return error
    text = str(error).splitlines()[0] if str(error) else ""
    return EvaluationError(f"Dask rollout task failed: {type(error).__name__}: {text}")


# --------------------------------------------------------------------------- on the workers
class _WorkerState:
    """Per worker process and calibration: the candidate builder and the last candidate's
    plan (a candidate's episodes usually land on the same worker)."""

    def __init__(self, context: RolloutContext, root: Path) -> None:
        from ..recordings.time_offsets import candidate_builder

        self.root = root
        self.builder = candidate_builder(CandidatePlanBuilder, root / context.manifest,
                                         context.parameters)
        self.lock = threading.Lock()
        self.plan: tuple[tuple[tuple[str, float], ...], Any] | None = None


_STATES: dict[str, _WorkerState] = {}
_STATES_LOCK = threading.Lock()


def _state(context: RolloutContext) -> _WorkerState:
    with _STATES_LOCK:
        state = _STATES.get(context.key)
        if state is None:
            from fibril_sim_core.execution.dask_session import worker_cache

            root = context.bundle.materialize(Path(worker_cache()) / "fibril_sim-bundles")
            _STATES.clear()  # one calibration at a time per worker keeps its memory bounded
            state = _STATES[context.key] = _WorkerState(context, root)
        return state


def _rollout_task(context: RolloutContext,
                  item: tuple[str, tuple[int, ...], tuple[tuple[str, float], ...]]
                  ) -> tuple[list[np.ndarray], int, float, float]:
    """One candidate × some episodes: (their unweighted residuals in order, plans built,
    build s, rollout s)."""
    scope, indices, values = item
    state = _state(context)
    built, build_seconds = 0, 0.0
    with state.lock:
        cached = state.plan
        if cached is not None and cached[0] == values:
            plan = cached[1]
        else:
            started = time.perf_counter()
            plan = _candidate_plan(state, context, dict(values))
            built, build_seconds = 1, time.perf_counter() - started
            state.plan = (values, plan)
    started = time.perf_counter()
    residuals = []
    try:
        for index in indices:
            schedule = context.schedules[scope][index]
            tracks = run_episode(plan, schedule, context.decoders)
            residuals.append(episode_residuals(schedule, tracks)[0])
    except EvaluationError as exc:  # names the submitter's files, not the worker's copy
        raise EvaluationError(remap(str(exc), str(state.root), context.bundle.root)) from None
    return residuals, built, build_seconds, time.perf_counter() - started


def _candidate_plan(state: _WorkerState, context: RolloutContext,
                    values: dict[str, float]) -> Any:
    try:
        return build_candidate(state.builder, values, context.timestep_ns)
    except EvaluationError as exc:  # names the submitter's files, not the worker's copy
        raise EvaluationError(remap(str(exc), str(state.root), context.bundle.root)) from None
