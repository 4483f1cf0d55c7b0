"""Pure-numpy ResidualModels for the calibration solver tests (no simulation)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from fibril_calibration.errors import EvaluationError
from fibril_calibration.evaluation import Evaluation, ResidualBlock

Residual = Callable[[np.ndarray], np.ndarray]


@dataclass(frozen=True)
class Signal:
    """One (episode, signal) block: ``raw(p)`` is the unweighted scaled residual."""

    episode: str
    signal: str
    raw: Residual
    weight: float = 1.0


class NumpyModel:
    """A ResidualModel over closed-form residuals that records every evaluated point."""

    def __init__(
        self,
        ids: Sequence[str],
        training: Sequence[Signal],
        validation: Sequence[Signal] | None = None,
        fail_when: Callable[[np.ndarray], bool] | None = None,
    ) -> None:
        self.parameter_ids = tuple(ids)
        self.training = tuple(training)
        self.validation = None if validation is None else tuple(validation)
        self.has_validation = validation is not None
        self.fail_when = fail_when
        self.points: list[tuple[str, np.ndarray]] = []

    def evaluate(self, physical: np.ndarray, scope: str = "training") -> Evaluation:
        p = np.array(physical, dtype=float)
        self.points.append((scope, p.copy()))
        if self.fail_when is not None and self.fail_when(p):
            raise EvaluationError(f"rollout diverged at {p}")
        signals = self.training if scope == "training" else self.validation
        assert signals is not None
        residuals, unweighted, blocks, start = [], [], [], 0
        for s in signals:
            r = np.atleast_1d(np.asarray(s.raw(p), dtype=float))
            unweighted.append(r)
            residuals.append(np.sqrt(s.weight) * r)
            blocks.append(ResidualBlock(s.episode, s.signal, start, start + r.size))
            start += r.size
        return Evaluation(np.concatenate(residuals), np.concatenate(unweighted), tuple(blocks))

    def count(self, scope: str = "training") -> int:
        return sum(1 for s, _ in self.points if s == scope)

    def evaluated(self, scope: str = "training") -> np.ndarray:
        return np.array([p for s, p in self.points if s == scope])


class BatchNumpyModel(NumpyModel):
    """Also offers ``evaluate_many`` (the optional batch hook) and counts its calls."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.batches: list[int] = []

    def evaluate_many(self, physicals: Sequence[np.ndarray], scope: str = "training") -> list[Evaluation]:
        self.batches.append(len(physicals))
        return [self.evaluate(p, scope) for p in physicals]
