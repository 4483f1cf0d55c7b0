"""``initial_state_fit`` inside the problem: the sensitivities of each fitted episode's
residuals to its initial state (forward differences on one candidate plan), the projections
they give (``model.initial_state_fit``), and where they were computed."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Protocol, TypeVar

import numpy as np

from fibril_sim_core.plan import SimulationPlan

from .._json import JsonObject
from ..errors import EvaluationError
from ..model.initial_state_fit import (Coordinate, InitialStateProjection,
                                       coordinates, part_values, perturbed, step)
from .episodes import EpisodeSchedule

__all__ = ["InitialStateSensitivities", "Projections"]

_T = TypeVar("_T")
_R = TypeVar("_R")

#: One projection (or None: the episode fits no initial state) per schedule of a scope.
Projections = tuple[InitialStateProjection | None, ...]
Rollout = Callable[[SimulationPlan, EpisodeSchedule], np.ndarray]


class Mapper(Protocol):
    """``map`` over a pool: ``function`` of each item, results in the items' order."""

    def __call__(self, function: Callable[[_T], _R], items: Sequence[_T], /) -> list[_R]: ...


class InitialStateSensitivities:
    """Per scope, the projections under the sensitivities in effect, and the points they
    were computed at (``points``, reported in the result)."""

    def __init__(self, schedules: Mapping[str, tuple[EpisodeSchedule, ...]]) -> None:
        self._schedules = schedules
        self.projections: dict[str, Projections] = {}
        self.points: list[JsonObject] = []

    @property
    def any(self) -> bool:
        """Some episode of some scope fits its initial state."""
        return any(s.episode.initial_state_fit for schedules in self._schedules.values()
                   for s in schedules)

    def refresh(self, plan: SimulationPlan, rollout: Rollout, map_: Mapper,
                on_failure: Callable[[], None]) -> None:
        """(Re)compute every scope's projections on ``plan``."""
        for scope, schedules in self._schedules.items():
            self.projections[scope] = self.compute(plan, schedules, rollout, map_, on_failure)

    def of_scope(self, scope: str, plan: SimulationPlan, rollout: Rollout,
                 map_: Mapper, on_failure: Callable[[], None]) -> Projections:
        """The scope's projections, computed on ``plan`` the first time they are needed."""
        projections = self.projections.get(scope)
        if projections is None:
            projections = self.projections[scope] = self.compute(
                plan, self._schedules[scope], rollout, map_, on_failure)
            self.points.append({"scope": scope, "at": "first evaluation"})
        return projections

    @staticmethod
    def compute(plan: SimulationPlan, schedules: Sequence[EpisodeSchedule], rollout: Rollout,
                map_: Mapper, on_failure: Callable[[], None]) -> Projections:
        """Forward differences of each fitted episode's residuals in its initial state."""
        tasks: list[tuple[EpisodeSchedule, str | None]] = []
        layout: list[tuple[int, tuple[Coordinate, ...], int, list[float]]] = []
        for index, schedule in enumerate(schedules):
            parts = schedule.episode.initial_state_fit
            if not parts:
                continue
            coords = coordinates(schedule.episode.initial_state, parts)
            steps = [step(c.part, part_values(schedule.episode.initial_state[c.entry], c.part)[0])
                     for c in coords]
            layout.append((index, coords, len(tasks), steps))
            tasks.append((schedule, None))
            for c, h in zip(coords, steps):
                moved = replace(schedule.episode,
                                initial_state=perturbed(schedule.episode.initial_state, c, h))
                tasks.append((replace(schedule, episode=moved), f"{c.label} + {h:g}"))
        if not tasks:
            return tuple(None for _ in schedules)

        def sensitivity_rollout(task: tuple[EpisodeSchedule, str | None]) -> np.ndarray:
            """One rollout; a failure counts (``on_failure``) and says it came from the
            initial-state sensitivities (a perturbed initial state)."""
            schedule, moved = task
            try:
                return rollout(plan, schedule)
            except EvaluationError as exc:
                on_failure()
                where = (f"the rollout from the perturbed initial state {moved}" if moved else
                         "the rollout from the logged initial state")
                raise EvaluationError(f"initial_state_fit sensitivity of episode "
                                      f"{schedule.episode.id!r}: {where} failed: {exc}") from None

        outcomes: list[np.ndarray] = map_(sensitivity_rollout, tasks)
        projections: list[InitialStateProjection | None] = [None] * len(schedules)
        for index, coords, first, steps in layout:
            base = outcomes[first]
            columns = [(outcomes[first + 1 + k] - base) / h for k, h in enumerate(steps)]
            projections[index] = InitialStateProjection.from_sensitivity(
                coords, np.column_stack(columns), steps)
        return tuple(projections)
