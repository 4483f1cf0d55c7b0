"""The optimizer on SciPy without ``least_squares(callback=...)`` (< 1.16, Ubuntu 24.04: 1.11.4).

On a SciPy that has the callback, the emulation is forced and must reproduce the real
callback's runs exactly; on every SciPy, the emulated or real callback sees iterations 1, 2, ...
and ``StopIteration`` stops the run with status -2 at the point the callback saw.
"""

from __future__ import annotations

import numpy as np
import pytest
from _calibration_models import NumpyModel, Signal

from fibril_calibration.solve import least_squares_compat
from fibril_calibration.solve.least_squares_compat import least_squares_with_callback
from fibril_calibration.loss_spec import LossSpec
from fibril_calibration.solve.optimizer import Tolerances
from fibril_calibration.parameters import CalibrationParameter
from fibril_calibration.solver import SolverOptions, calibrate

T = np.linspace(0.0, 3.0, 60)
Y = 2.0 * np.exp(-1.3 * T)


def _decay(fail_when=None) -> NumpyModel:  # type: ignore[no-untyped-def]
    return NumpyModel(["k"], [Signal("e", "y", lambda p: (2.0 * np.exp(-p[0] * T) - Y) / 0.01)],
                      fail_when=fail_when)


def _saturating(fail_below: float) -> NumpyModel:
    return NumpyModel(
        ["k"], [Signal("e", "y", lambda p: 10.0 * np.arctan(np.array([p[0] - 1.0, 0.5 * (p[0] - 1.0)])))],
        fail_when=lambda p: p[0] < fail_below,
    )


_K = CalibrationParameter("k", 0.05, 10.0, 8.0)
_K_WIDE = CalibrationParameter("k", -10.0, 10.0, 5.0)
CASES = {
    "converged": (_decay, _K, SolverOptions()),
    "one iteration": (_decay, _K, SolverOptions(max_iterations=1)),
    "two iterations": (_decay, _K, SolverOptions(max_iterations=2)),
    "robust loss": (_decay, _K, SolverOptions(loss=LossSpec("cauchy", 0.5))),
    "failed trials": (lambda: _saturating(0.5), _K_WIDE, SolverOptions()),
    # Every trial step fails until max_nfev: a last iteration that accepts no step.
    "no step accepted": (lambda: _saturating(4.99999), _K_WIDE, SolverOptions(max_iterations=1)),
    "xtol": (_decay, _K, SolverOptions(tolerances=Tolerances(ftol=1e-15, xtol=1e-3, gtol=1e-15))),
}


def _run(case: str) -> tuple[object, list[str]]:
    make_model, parameter, options = CASES[case]
    lines: list[str] = []
    options = SolverOptions(**{**options.__dict__, "progress": lines.append})
    return calibrate(make_model(), [parameter], options), lines


@pytest.mark.skipif(not least_squares_compat.HAS_CALLBACK,
                    reason="SciPy < 1.16 has no least_squares callback to compare the emulation with "
                           "(every calibration test here runs the emulation)")
@pytest.mark.parametrize("case", list(CASES))
def test_emulated_callback_reproduces_scipy_callback(case: str, monkeypatch: pytest.MonkeyPatch) -> None:
    real, real_lines = _run(case)
    monkeypatch.setattr(least_squares_compat, "HAS_CALLBACK", False)
    emulated, emulated_lines = _run(case)
    assert emulated_lines == real_lines
    assert emulated.termination == real.termination  # type: ignore[attr-defined]
    assert emulated.iterations == real.iterations  # type: ignore[attr-defined]
    assert emulated.optimizer_message == real.optimizer_message  # type: ignore[attr-defined]
    assert emulated.evaluations == real.evaluations  # type: ignore[attr-defined]
    np.testing.assert_array_equal(emulated.fitted, real.fitted)  # type: ignore[attr-defined]


def test_case_terminations() -> None:
    """The cases above reach the terminations they are named for (on this SciPy)."""
    assert _run("converged")[0].termination == "converged"  # type: ignore[attr-defined]
    one, lines = _run("one iteration")
    assert (one.termination, one.iterations) == ("max_iterations", 1)  # type: ignore[attr-defined]
    assert [line.split(":")[0] for line in lines if "iteration" in line or "start" in line][:2] == \
        ["start", "iteration 1"]
    stuck = _run("no step accepted")[0]
    # The start, then max_nfev - 1 = 10 failed trial steps.
    assert stuck.evaluations.optimizer_function == 11  # type: ignore[attr-defined]
    assert (stuck.termination, stuck.iterations) == ("max_iterations", 1)  # type: ignore[attr-defined]
    assert stuck.fitted_values["k"] == 5.0  # type: ignore[attr-defined]


def test_callback_sees_each_iteration_and_stop_iteration_stops_there() -> None:
    def fun(x: np.ndarray) -> np.ndarray:
        return np.array([10.0 * (x[1] - x[0] ** 2), 1.0 - x[0]])

    def jac(x: np.ndarray, *_: object) -> np.ndarray:
        return np.array([[-20.0 * x[0], 10.0], [-1.0, 0.0]])

    def cost(x: np.ndarray) -> float:
        return 0.5 * float(np.sum(fun(x) ** 2))

    seen: list[tuple[int, np.ndarray, float]] = []

    # SciPy passes the OptimizeResult only to a parameter named ``intermediate_result``.
    def callback(intermediate_result: object) -> None:
        state = intermediate_result
        seen.append((state.nit, state.x, state.cost))  # type: ignore[attr-defined]
        if state.nit == 3:  # type: ignore[attr-defined]
            raise StopIteration

    bounds = (np.array([-5.0, -5.0]), np.array([5.0, 5.0]))
    result = least_squares_with_callback(fun, np.array([-1.2, 1.0]), jac, callback, cost, bounds=bounds)
    assert [nit for nit, _, _ in seen] == [1, 2, 3]
    assert result.status == -2 and "StopIteration" in result.message
    np.testing.assert_array_equal(result.x, seen[-1][1])
    assert result.cost == pytest.approx(seen[-1][2], rel=1e-12)
    assert result.njev == 4  # the start and one per iteration

    seen.clear()

    def count(intermediate_result: object) -> None:
        seen.append(intermediate_result.nit)  # type: ignore[attr-defined]

    full = least_squares_with_callback(fun, np.array([-1.2, 1.0]), jac, count, cost, bounds=bounds)
    assert full.status > 0 and np.allclose(full.x, [1.0, 1.0])
    assert seen == list(range(1, len(seen) + 1)) and len(seen) >= full.njev - 1
