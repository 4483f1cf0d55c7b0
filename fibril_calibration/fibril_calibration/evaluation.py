"""The contract between the problem side (episodes → residuals) and the solver side.

The problem side turns one vector of physical parameter values into one ``Evaluation``: a fixed
residual layout whose blocks say which episode and signal each slice came from. The solver side
(optimizer, finite differences, analysis) sees nothing else.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol, runtime_checkable

import numpy as np

Scope = Literal["training", "validation"]


@dataclass(frozen=True)
class ResidualBlock:
    """One (episode, signal) slice ``[start, stop)`` of a residual vector."""

    episode: str
    signal: str
    start: int
    stop: int


@dataclass(frozen=True)
class Evaluation:
    """Residuals of one scope at one parameter vector.

    ``residuals`` are the objective's data residuals ``sqrt(w_e) * (sim - rec) / scale``;
    ``unweighted`` are the same without ``sqrt(w_e)`` (equal when every weight is 1). Neither
    includes priors or robust losses: the solver adds those.
    """

    residuals: np.ndarray
    unweighted: np.ndarray
    blocks: tuple[ResidualBlock, ...]
    # Some episode weight is not 1 (so ``residuals`` and ``unweighted`` differ in general, even
    # where both happen to be zero).
    weighted: bool = False


class ResidualModel(Protocol):
    """What the solver calls: physical parameter values (declaration order) → Evaluation.

    ``evaluate`` raises ``EvaluationError`` when a rollout fails; the layout never depends on
    the parameter values.
    """

    parameter_ids: tuple[str, ...]
    has_validation: bool

    def evaluate(self, physical: np.ndarray, scope: Scope = "training") -> Evaluation: ...


@runtime_checkable
class BatchEvaluation(Protocol):
    """A residual model that evaluates several vectors at once (``CalibrationProblem``: their
    rollouts share its workers); the solver's finite differences use it when offered."""

    def evaluate_many(self, physicals: Sequence[np.ndarray],
                      scope: Scope = "training") -> list[Evaluation]: ...


@runtime_checkable
class NuisanceDegrees(Protocol):
    """A residual model that fits nuisance initial states (``initial_state_fit``): episode id
    → the degrees of freedom they took, per scope."""

    def nuisance_degrees_of_freedom(self, scope: str) -> dict[str, int]: ...
