"""Calibration rollouts on a Dask cluster (the ``dask`` execution backend).

A task is a few whole candidates × all their episodes when at least as many candidates as task
slots are evaluated at once (a finite-difference Jacobian's batch: one plan build per
candidate, as locally, and a few tasks per slot so that round trips stay small against the
rollouts), and one candidate × a group of its episodes otherwise (one evaluation: its episodes
spread over the slots); see ``task_layout``. A task builds each candidate's plan on a worker
(kept there for the candidate's next episodes, then handed back to the builder, which reuses
its model) and returns unweighted residuals, exactly what the local backend computes.

What every task needs is sent once per calibration and copied between the workers: the
manifest's files by content (``Bundle``), the parameters and the episode schedules with their
decoded recorded inputs and reference samples. Residuals are assembled on the client in
declaration order, so the fit is bit for bit the local one. At most ``max_parallelism`` tasks
are in flight when the request sets it below the cluster's threads (at or above, the threads
bound them: every task is submitted, the scheduler queues them on the workers).
"""

from __future__ import annotations

import hashlib
import pickle
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from fibril_sim_core.errors import FibrilError
from fibril_sim_core.execution.bundle import Bundle, collect_bundle, manifest_files, remap

from ..errors import EvaluationError
from ..parameters import CalibrationParameter
from ..model.candidate_plan import CandidatePlanBuilder
from ..model.decoders import CalibrationDeviceOutputDecoderRegistry
from .episodes import EpisodeSchedule, episode_residuals, run_episode
from .problem import CalibrationProblem, build_candidate

if TYPE_CHECKING:
    from fibril_sim_core.execution.dask_session import DaskSession
    from fibril_sim_core.overlays import OverlayParameter
    from fibril_sim_core.plan import SimulationPlan


@dataclass(frozen=True)
class RolloutContext:
    """What every rollout task of one calibration shares (sent once, kept by each worker)."""

    key: str
    bundle: Bundle
    manifest: str  # relative to the bundle
    parameters: tuple[CalibrationParameter, ...]
    schedules: dict[str, tuple[EpisodeSchedule, ...]]
    decoders: CalibrationDeviceOutputDecoderRegistry
    timestep_ns: int
    #: Overlays held at fixed values in every candidate (the request's ``fixed_overlays``,
    #: and an evaluated artifact's parameters that the request does not fit).
    fixed_overlays: tuple[OverlayParameter, ...] = ()


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
    def for_problem(cls, session: DaskSession, problem: CalibrationProblem,
                    fixed_overlays: Sequence[OverlayParameter] | None = None) -> DaskRollouts:
        """The rollouts of ``problem`` (its request, decoded episodes and decoders);
        ``fixed_overlays`` defaults to the request's."""
        request = problem.request
        fixed = request.fixed_overlays if fixed_overlays is None else fixed_overlays
        return cls(session, request.manifest.path, request.parameters,
                   problem.decoded_schedules(), problem.decoders,
                   request.nominal_plan.timebase.timestep_ns, request.execution.task_limit,
                   tuple(fixed))

    def __init__(self, session: DaskSession, manifest: Path,
                 parameters: Sequence[CalibrationParameter],
                 schedules: dict[str, tuple[EpisodeSchedule, ...]],
                 decoders: CalibrationDeviceOutputDecoderRegistry, timestep_ns: int,
                 limit: int | None, fixed_overlays: tuple[OverlayParameter, ...] = ()) -> None:
        bundle = collect_bundle(manifest_files(manifest))
        payload = pickle.dumps((bundle.digest, tuple(parameters), schedules, fixed_overlays),
                               protocol=5)
        self._session = session
        self._limit = limit
        self._context = session.scatter(RolloutContext(
            hashlib.sha256(payload).hexdigest(), bundle, bundle.relative(manifest),
            tuple(parameters), schedules, decoders, timestep_ns, fixed_overlays))

    def rollouts(self, vectors: Sequence[np.ndarray], parameter_ids: Sequence[str],
                 scope: str, episodes: int) -> tuple[list[np.ndarray], RolloutStatistics]:
        """Unweighted residuals of each candidate's episodes (candidate-major, episodes in
        declaration order); the first failure in that order is raised, as locally."""
        threads = max(1, int(self._session.threads))
        # A limit at or above the cluster's threads binds nothing: every task is submitted and
        # the scheduler queues the next one on each worker (no idle round trip between tasks).
        limit = self._limit if self._limit is not None and self._limit < threads else None
        slots = min(threads, limit or threads)
        candidates = [tuple(zip(parameter_ids, (float(v) for v in vector)))
                      for vector in vectors]
        items = [(scope, tuple((candidates[c], indices) for c, indices in task))
                 for task in task_layout(len(vectors), episodes, slots)]
        outcomes = self._session.map(_rollout_task, self._context, items, limit)
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


#: Tasks per slot when candidates are grouped: enough to even out the slots' loads, few
#: enough that the round trip between a slot's tasks stays small against its rollouts.
TASKS_PER_SLOT = 8

#: One task's work: (candidate index, episode indices) pieces, candidate-major.
TaskLayout = tuple[tuple[int, tuple[int, ...]], ...]


def task_layout(candidates: int, episodes: int, slots: int) -> list[TaskLayout]:
    """The tasks of ``candidates`` × ``episodes`` rollouts for ``slots`` tasks at once, in
    candidate-major order (their concatenation is every rollout once, in residual order).

    At least as many candidates as slots (a Jacobian's batch): whole candidates, grouped into
    at most ``TASKS_PER_SLOT`` tasks per slot (one plan build per candidate, as locally, and
    few round trips). Fewer candidates (one evaluation): each candidate's episodes split into
    contiguous groups so that every slot has work."""
    if candidates == 0 or episodes == 0:
        return []
    every = tuple(range(episodes))
    if candidates >= slots:
        count = min(candidates, TASKS_PER_SLOT * slots)
        bounds = [candidates * k // count for k in range(count + 1)]
        return [tuple((c, every) for c in range(bounds[k], bounds[k + 1]))
                for k in range(count)]
    groups = min(episodes, -(-slots // candidates))
    cuts = [episodes * k // groups for k in range(groups + 1)]
    return [((c, every[cuts[k]:cuts[k + 1]]),) for c in range(candidates)
            for k in range(groups)]


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
        self.builder = candidate_builder(CandidatePlanBuilder.holding(context.fixed_overlays),
                                         root / context.manifest, context.parameters)
        self.lock = threading.Lock()
        self.plan: tuple[tuple[tuple[str, float], ...], SimulationPlan] | None = None


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
                  item: tuple[str, tuple[tuple[tuple[tuple[str, float], ...], tuple[int, ...]],
                                         ...]]
                  ) -> tuple[list[np.ndarray], int, float, float]:
    """Some candidates × some of their episodes: (their unweighted residuals in order, plans
    built, build s, rollout s)."""
    scope, pieces = item
    state = _state(context)
    built, build_seconds, rollout_seconds = 0, 0.0, 0.0
    residuals = []
    for values, indices in pieces:
        started = time.perf_counter()
        plan, new = _plan_for(state, context, values)
        built += new
        build_seconds += time.perf_counter() - started if new else 0.0
        started = time.perf_counter()
        try:
            for index in indices:
                schedule = context.schedules[scope][index]
                tracks = run_episode(plan, schedule, context.decoders)
                residuals.append(episode_residuals(schedule, tracks)[0])
        except EvaluationError as exc:  # names the submitter's files, not the worker's copy
            raise EvaluationError(remap(str(exc), str(state.root),
                                        context.bundle.root)) from None
        finally:
            rollout_seconds += time.perf_counter() - started
        del plan
    return residuals, built, build_seconds, rollout_seconds


def _plan_for(state: _WorkerState, context: RolloutContext,
              values: tuple[tuple[str, float], ...]) -> tuple[SimulationPlan, int]:
    """The candidate's plan (the worker's last one when it is the same candidate) and
    whether it was built; the previous candidate's plan goes back to the builder first, which
    then writes the new values into its model instead of copying one (as locally)."""
    with state.lock:
        cached = state.plan
        if cached is not None and cached[0] == values:
            return cached[1], 0
        state.plan = None
        if cached is not None:
            previous = cached[1]
            del cached
            state.builder.release(previous)  # both standard builders take plans back
            del previous
        plan = _candidate_plan(state, context, dict(values))
        state.plan = (values, plan)
        return plan, 1


def _candidate_plan(state: _WorkerState, context: RolloutContext,
                    values: dict[str, float]) -> SimulationPlan:
    try:
        return build_candidate(state.builder, values, context.timestep_ns)
    except EvaluationError as exc:  # names the submitter's files, not the worker's copy
        raise EvaluationError(remap(str(exc), str(state.root), context.bundle.root)) from None
