"""The optimizer's objective: data residuals, robust loss and Gaussian prior residuals.

``residuals(u)`` is the vector ``least_squares`` sees: the model's (weighted, scaled) training
residuals followed by one ``(p - mean) / sd`` residual per parameter with a prior, in physical
coordinates and declaration order. The robust loss applies to the data part only. The scalar
objective reported everywhere (optimization summary, profiles) is ``2 * cost``:
``sum(c**2 rho(r**2 / c**2)) + sum(prior**2)``, i.e. the sum of squares without a loss.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from ..evaluation import Evaluation, ResidualBlock
from ..loss_spec import LossSpec
from .losses import data_only_loss, robustified_squares
from .differentiation import Evaluator, FiniteDifference, Linearization

PRIOR_EPISODE = "__prior__"


class Objective:
    """Residual vector, Jacobian and cost of the calibration objective at coordinates ``u``."""

    def __init__(
        self,
        evaluator: Evaluator,
        fd: FiniteDifference,
        loss: LossSpec | None,
        order: int = 1,
    ) -> None:
        self.evaluator = evaluator
        self.order = order  # finite-difference order of the optimizer's Jacobian
        self.fd = fd
        self.cmap = evaluator.cmap
        self.loss = loss
        params = self.cmap.parameters
        self.prior_index = np.array([i for i, p in enumerate(params) if p.prior is not None], dtype=int)
        priors = [p.prior for p in params if p.prior is not None]  # in prior_index order
        self.prior_mean = np.array([prior.mean for prior in priors], dtype=float)
        self.prior_sd = np.array([prior.standard_deviation for prior in priors], dtype=float)
        self.n_data: int | None = None

    @property
    def has_prior(self) -> bool:
        return self.prior_index.size > 0

    def data(self, u: np.ndarray) -> Evaluation:
        evaluation = self.evaluator.evaluate(u)
        self.n_data = evaluation.residuals.size
        return evaluation

    def prior_residuals(self, u: np.ndarray) -> np.ndarray:
        if not self.has_prior:
            return np.zeros(0)
        physical = self.cmap.to_physical(u)
        result: np.ndarray = (physical[self.prior_index] - self.prior_mean) / self.prior_sd
        return result

    def residuals(self, u: np.ndarray) -> np.ndarray:
        return np.concatenate([self.data(u).residuals, self.prior_residuals(u)])

    def jacobian(self, u: np.ndarray, columns: Sequence[int] | None = None) -> np.ndarray:
        lin: Linearization = self.fd.linearize(u, columns, self.order)
        self.n_data = lin.centre.residuals.size
        if not self.has_prior:
            return lin.jacobian
        prior = np.zeros((self.prior_index.size, len(lin.columns)))
        dp = self.cmap.dphysical_dcoordinate(u)
        position = {c: j for j, c in enumerate(lin.columns)}
        for row, i in enumerate(self.prior_index):
            if int(i) in position:
                prior[row, position[int(i)]] = dp[i] / self.prior_sd[row]
        return np.vstack([lin.jacobian, prior])

    def scipy_loss(self) -> tuple[Callable[[np.ndarray], np.ndarray] | str, float]:
        """``(loss, f_scale)`` for ``least_squares`` (needs ``n_data``: evaluate once first)."""
        if self.loss is None:
            return "linear", 1.0
        assert self.n_data is not None
        return data_only_loss(self.loss.type, self.n_data), self.loss.scale

    def squares(self, u: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per-residual contributions to ``2 * cost``: (robustified data, prior squares)."""
        data = robustified_squares(self.loss, self.data(u).residuals)
        prior = self.prior_residuals(u)
        return data, prior * prior

    def objective_value(self, u: np.ndarray) -> float:
        """``2 * cost``: robustified data sum of squares plus prior sum of squares."""
        data, prior = self.squares(u)
        return float(np.sum(data) + np.sum(prior))

    def prior_blocks(self, offset: int) -> tuple[ResidualBlock, ...]:
        return tuple(
            ResidualBlock(PRIOR_EPISODE, self.cmap.ids[int(i)], offset + k, offset + k + 1)
            for k, i in enumerate(self.prior_index)
        )
