"""One bounded ``scipy.optimize.least_squares`` (trf) run over a subset of the coordinates.

Iterations: ``max_iterations`` counts trf's outer iterations (one Jacobian, one or more trial
steps each), like Ceres' ``max_num_iterations``. A ``least_squares`` callback stops the run
after exactly that many (on SciPy < 1.16, which has no callback, ``least_squares_compat`` makes the
same calls); ``max_nfev = 1 + 10 * max_iterations`` is only a safety net against
runs whose trial steps keep failing (non-finite rollouts), which is then reported as
``no_convergence``. When the iteration limit is hit on an iteration that itself satisfied
trf's ``ftol`` / ``xtol`` / ``gtol`` test, the run is still reported ``converged``.

A trial point whose rollout fails (``EvaluationError``) is handed to trf as non-finite
residuals, so trf shrinks its trust region and retries; a failure at the starting point or in
a Jacobian propagates.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ..errors import EvaluationError
from .least_squares_compat import least_squares_with_callback

if TYPE_CHECKING:  # scipy is untyped: to mypy this is Any, the name says what it is
    from scipy.optimize import OptimizeResult
from .objective import Objective

CONVERGED = "converged"
MAX_ITERATIONS = "max_iterations"
NO_CONVERGENCE = "no_convergence"

_TRIAL_EVALUATIONS_PER_ITERATION = 10


@dataclass(frozen=True)
class Tolerances:
    """trf's termination tolerances (scipy defaults)."""

    ftol: float = 1e-8
    xtol: float = 1e-8
    gtol: float = 1e-8


@dataclass(frozen=True)
class FitResult:
    coordinate: np.ndarray
    termination: str
    status: int
    message: str
    iterations: int
    function_evaluations: int
    jacobian_evaluations: int
    objective: float
    initial_objective: float


def minimize(
    objective: Objective,
    u0: np.ndarray,
    free: Sequence[int] | None = None,
    max_iterations: int = 50,
    tolerances: Tolerances = Tolerances(),
    progress: Callable[[str], None] | None = None,
    label: str = "",
) -> FitResult:
    """Minimise over coordinates ``free`` (all by default), the others fixed at ``u0``."""
    cmap = objective.cmap
    base = np.asarray(u0, dtype=float).copy()
    free_idx = list(range(cmap.size)) if free is None else [int(i) for i in free]
    cols = None if free is None else free_idx

    # trf's first trust radius is |x0| in x_scale units, which would make it depend on where a
    # coordinate's origin happens to be (a linear 0.01 starts ~50x more timidly than a 0.5).
    # It works on the offset from the start instead, so the first radius is one physical scale.
    origin = np.zeros(len(free_idx))

    def full(x: np.ndarray) -> np.ndarray:
        u = base.copy()
        u[free_idx] = origin + x
        return u

    initial_objective = objective.objective_value(base)
    if progress is not None:
        progress(f"{label}start: objective={initial_objective:.6g} evaluations={objective.evaluator.total}")
    if max_iterations <= 0 or not free_idx:
        return FitResult(base, MAX_ITERATIONS if free_idx else CONVERGED, 0, "no iterations", 0, 0, 0,
                         initial_objective, initial_objective)

    lower = cmap.coordinate_lower[free_idx]
    upper = cmap.coordinate_upper[free_idx]
    origin = np.clip(base[free_idx], lower, upper)
    x0 = np.zeros(len(free_idx))
    lower, upper = lower - origin, upper - origin
    m_total = objective.data(base).residuals.size + objective.prior_index.size
    calls = [0]

    def fun(x: np.ndarray) -> np.ndarray:
        calls[0] += 1
        try:
            return objective.residuals(full(x))
        except EvaluationError:
            if calls[0] == 1:
                raise
            return np.full(m_total, np.nan)

    def jac(x: np.ndarray, *_args: object, **_kwargs: object) -> np.ndarray:
        return objective.jacobian(full(x), cols)

    history: list[tuple[np.ndarray, float]] = [(x0.copy(), 0.5 * initial_objective)]

    def callback(intermediate_result: OptimizeResult) -> None:
        x = np.array(intermediate_result.x, dtype=np.float64)
        cost = float(intermediate_result.cost)
        nit = int(intermediate_result.nit)
        history.append((x, cost))
        if progress is not None:
            progress(
                f"{label}iteration {nit}: objective={2.0 * cost:.6g} "
                f"evaluations={objective.evaluator.total}"
            )
        if nit >= max_iterations:
            raise StopIteration

    loss, f_scale = objective.scipy_loss()
    result = least_squares_with_callback(
        fun,
        x0,
        jac,
        callback,
        lambda x: 0.5 * objective.objective_value(full(x)),
        bounds=(lower, upper),
        loss=loss,
        f_scale=f_scale,
        x_scale=cmap.coordinate_unit()[free_idx],
        ftol=tolerances.ftol,
        xtol=tolerances.xtol,
        gtol=tolerances.gtol,
        max_nfev=1 + _TRIAL_EVALUATIONS_PER_ITERATION * max_iterations,
    )
    status = int(result.status)
    if status > 0:
        termination = CONVERGED
    elif status == -2:
        termination = CONVERGED if _last_iteration_converged(result, history, tolerances) else MAX_ITERATIONS
    else:
        termination = NO_CONVERGENCE
    iterations = max(len(history) - 1, 0)
    u = full(np.asarray(result.x, dtype=float))
    return FitResult(
        coordinate=u,
        termination=termination,
        status=status,
        message=str(result.message),
        iterations=iterations,
        function_evaluations=int(result.nfev),
        jacobian_evaluations=int(result.njev),
        objective=2.0 * float(result.cost),
        initial_objective=initial_objective,
    )


def _last_iteration_converged(
    result: OptimizeResult, history: list[tuple[np.ndarray, float]], tol: Tolerances
) -> bool:
    """trf's own termination tests, replayed on the iteration the callback stopped
    (``result``: scipy's OptimizeResult, untyped)."""
    if float(result.optimality) < tol.gtol:
        return True
    if len(history) < 2:
        return False
    (x_prev, cost_prev), (x, cost) = history[-2], history[-1]
    reduction = cost_prev - cost
    if not reduction > 0.0:
        return False
    if reduction < tol.ftol * cost:
        return True
    return bool(np.linalg.norm(x - x_prev) < tol.xtol * (tol.xtol + np.linalg.norm(x)))
