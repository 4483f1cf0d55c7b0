"""``scipy.optimize.least_squares`` with a per-iteration ``callback`` on every supported SciPy.

``callback`` exists from SciPy 1.16; Ubuntu 24.04 (ROS 2 Jazzy) ships 1.11.4. There the same
calls are reproduced from trf's structure: trf evaluates the Jacobian once at the start and
once after each accepted step, just before it ends that iteration, so every later Jacobian call
ends one iteration; residual evaluations left over after the last Jacobian mean one final
iteration without an accepted step (trf's ``xtol`` test on a rejected step, or ``max_nfev``),
which SciPy >= 1.16 also reports to the callback. ``StopIteration`` from the callback stops the
run with status -2, as SciPy >= 1.16 does.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable

import numpy as np
from scipy.optimize import OptimizeResult, least_squares

HAS_CALLBACK = "callback" in inspect.signature(least_squares).parameters
_STOPPED = "Stopped because `callback` function raised `StopIteration` or returned `True`"


class _Stop(Exception):
    """The emulated callback asked trf to stop at ``x``."""

    def __init__(self, x: np.ndarray) -> None:
        super().__init__("stop")
        self.x = x


def least_squares_with_callback(
    fun: Callable[[np.ndarray], np.ndarray],
    x0: np.ndarray,
    jac: Callable[..., np.ndarray],
    callback: Callable[[OptimizeResult], None],
    cost: Callable[[np.ndarray], float],
    **options: object,
) -> OptimizeResult:
    """``least_squares(fun, x0, jac=jac, callback=callback, method="trf", **options)``.

    ``callback`` takes one parameter named ``intermediate_result`` (SciPy passes the
    OptimizeResult with ``x``, ``cost``, ``nit`` only to a parameter of that name).
    ``cost(x)`` is trf's cost at an evaluated point (``0.5 * sum(rho)``); only the emulation
    needs it, for the ``cost`` it hands the callback. The result has ``x``, ``cost``, ``nfev``,
    ``njev``, ``status``, ``message`` and ``optimality``.
    """
    if HAS_CALLBACK:
        return least_squares(fun, x0, jac=jac, callback=callback, method="trf", **options)
    counts = {"nfev": 0, "njev": 0, "nit": 0, "trials": 0}

    def end_iteration(x: np.ndarray) -> None:
        counts["nit"] += 1
        try:
            callback(OptimizeResult(x=x.copy(), cost=cost(x), nit=counts["nit"], nfev=counts["nfev"]))
        except StopIteration:
            raise _Stop(x.copy()) from None

    def counted_fun(x: np.ndarray) -> np.ndarray:
        counts["nfev"] += 1
        counts["trials"] += 1
        return fun(x)

    def counted_jac(x: np.ndarray, *args: object, **kwargs: object) -> np.ndarray:
        jacobian = jac(x, *args, **kwargs)
        counts["njev"] += 1
        counts["trials"] = 0
        if counts["njev"] > 1:
            end_iteration(x)
        return jacobian

    try:
        result = least_squares(counted_fun, x0, jac=counted_jac, method="trf", **options)
    except _Stop as stop:
        # trf's ``optimality`` on a callback stop is the gradient norm from the start of that
        # iteration, >= gtol (or trf would have stopped there): never a gtol convergence.
        return OptimizeResult(
            x=stop.x, cost=cost(stop.x), nfev=counts["nfev"], njev=counts["njev"], status=-2,
            message=_STOPPED, optimality=np.inf,
        )
    if counts["trials"] > 0:  # a last iteration that accepted no step
        try:
            end_iteration(np.asarray(result.x, dtype=float))
        except _Stop:
            result.status, result.message = -2, _STOPPED
    return result
