"""Parameterizations, the bound-aware finite-difference adapter, losses and the analysis."""

from __future__ import annotations

import math

import numpy as np
import pytest
from _calibration_models import BatchNumpyModel, NumpyModel, Signal
from scipy.optimize import least_squares

from fibril_calibration.analysis.identifiability import analyze
from fibril_calibration.solve.differentiation import Evaluator, FiniteDifference
from fibril_calibration.errors import CalibrationRequestError, EvaluationError
from fibril_calibration.evaluation import ResidualBlock
from fibril_calibration.loss_spec import LossSpec
from fibril_calibration.solve.losses import data_only_loss, robustified_squares, unit_loss
from fibril_calibration.parameters import (
    CalibrationParameter,
    CoordinateMap,
    Prior,
    parameter_problems,
    physical_scale,
    validate_parameter,
    validate_parameters,
)
from fibril_calibration.analysis.summaries import summarize
from fibril_calibration.analysis.verdict import bound_fractions, episode_rms_ratio

T = np.linspace(0.0, 2.0, 30)


# --- parameters -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("param", "fragment"),
    [
        (CalibrationParameter("d", 2.0, 1.0, 1.5), "lower (2) must be smaller than upper (1)"),
        (CalibrationParameter("d", 0.0, 1.0, 1.5), "initial (1.5) lies outside [0, 1]"),
        (CalibrationParameter("d", 0.0, 1.0, 0.5, parameterization="log_positive"), "log_positive needs lower > 0"),
        (CalibrationParameter("d", 0.0, math.inf, 0.5), "upper must be a finite number"),
        (CalibrationParameter("d", 0.0, 1.0, math.nan), "initial must be a finite number"),
        (CalibrationParameter("d", 0.0, 1.0, 0.5, prior=Prior(0.5, 0.0)), "prior standard_deviation"),
        (CalibrationParameter("d", 0.0, 1.0, 0.5, coordinate_scale=-1.0), "coordinate_scale must be positive"),
        (CalibrationParameter("d", 0.0, 1.0, 0.5, parameterization="cubic"), "parameterization 'cubic'"),  # type: ignore[arg-type]
    ],
)
def test_invalid_parameters_are_rejected_naming_the_parameter(param: CalibrationParameter, fragment: str) -> None:
    problems = parameter_problems(param)
    assert any(fragment in p and "parameter 'd'" in p for p in problems), problems
    with pytest.raises(CalibrationRequestError, match="parameter 'd'"):
        validate_parameter(param)


def test_duplicate_ids_and_valid_parameters() -> None:
    ok = CalibrationParameter("d", 0.0, 1.0, 0.0)
    assert parameter_problems(ok) == []
    with pytest.raises(CalibrationRequestError, match="duplicate id"):
        validate_parameters([ok, ok])


def test_physical_scale_precedence_and_coordinate_maps() -> None:
    assert physical_scale(CalibrationParameter("a", 0.0, 4.0, 1.0, nominal=2.0, coordinate_scale=0.5)) == 0.5
    assert physical_scale(CalibrationParameter("a", -1.0, 4.0, 1.0, nominal=-2.0)) == 2.0
    assert physical_scale(CalibrationParameter("a", -1.0, 4.0, 1.0, nominal=0.0)) == 5.0
    params = [
        CalibrationParameter("lin", -1.0, 4.0, 1.0),
        CalibrationParameter("norm", -1.0, 4.0, 1.0, nominal=2.0, parameterization="normalized_linear"),
        CalibrationParameter("norm0", -1.0, 4.0, 3.0, parameterization="normalized_linear"),
        CalibrationParameter("log", 0.01, 100.0, 1.0, parameterization="log_positive"),
    ]
    cmap = CoordinateMap(params)
    p = np.array([1.5, 3.0, 0.5, 10.0])
    u = cmap.to_coordinate(p)
    # normalized: origin nominal (else initial), scale |nominal| (else range)
    np.testing.assert_allclose(u, [1.5, (3.0 - 2.0) / 2.0, (0.5 - 3.0) / 5.0, math.log(10.0)])
    np.testing.assert_allclose(cmap.to_physical(u), p, rtol=1e-15)
    np.testing.assert_allclose(cmap.coordinate_lower, [-1.0, -1.5, -0.8, math.log(0.01)])
    np.testing.assert_allclose(cmap.coordinate_upper, [4.0, 1.0, 0.2, math.log(100.0)])
    # physical values never leave the bounds, even through exp/log round trips
    assert np.all(cmap.to_physical(cmap.coordinate_upper + 1e-12) <= cmap.upper)
    assert np.all(cmap.to_physical(cmap.coordinate_lower - 1e-12) >= cmap.lower)


# --- finite differences ---------------------------------------------------------------------


def _exp_model(weight: float = 1.0, **kwargs: object) -> NumpyModel:
    return NumpyModel(
        ["a", "k"],
        [Signal("e", "y", lambda p: p[0] * np.exp(-p[1] * T), weight=weight)],
        **kwargs,  # type: ignore[arg-type]
    )


def _analytic(p: np.ndarray) -> np.ndarray:
    return np.column_stack([np.exp(-p[1] * T), -p[0] * T * np.exp(-p[1] * T)])


@pytest.mark.parametrize("kind", ["linear", "normalized_linear", "log_positive"])
def test_central_jacobian_matches_analytic_in_dimensionless_coordinates(kind: str) -> None:
    params = [
        CalibrationParameter("a", 0.5, 4.0, 2.0, nominal=2.0, parameterization=kind),  # type: ignore[arg-type]
        CalibrationParameter("k", 0.1, 3.0, 0.7, parameterization=kind),  # type: ignore[arg-type]
    ]
    model = _exp_model()
    cmap = CoordinateMap(params)
    fd = FiniteDifference(Evaluator(model, cmap))
    u = cmap.to_coordinate(np.array([2.0, 0.7]))
    lin = fd.linearize(u)
    assert lin.schemes == ("central", "central")
    expected = _analytic(np.array([2.0, 0.7])) * cmap.physical_scale
    np.testing.assert_allclose(lin.dimensionless_unweighted(cmap), expected, rtol=1e-8, atol=1e-10)
    assert model.count() == 1 + 4
    fd.linearize(u)  # memoised: no new rollout
    assert model.count() == 5


@pytest.mark.parametrize("order", [1, 2])
def test_one_sided_differences_at_bounds_stay_inside(order: int) -> None:
    params = [CalibrationParameter("a", 0.5, 4.0, 2.0), CalibrationParameter("k", 0.7, 3.0, 0.7)]
    model = _exp_model()
    cmap = CoordinateMap(params)
    fd = FiniteDifference(Evaluator(model, cmap))
    for p in (np.array([4.0, 0.7]), np.array([0.5, 3.0])):  # a at upper & k at lower, and reverse
        lin = fd.linearize(cmap.to_coordinate(p), order=order)
        at_upper = "backward3" if order == 2 else "backward"
        at_lower = "forward3" if order == 2 else "forward"
        assert lin.schemes == ((at_upper, at_lower) if p[0] == 4.0 else (at_lower, at_upper))
        rtol = 1e-8 if order == 2 else 1e-4  # first order: O(h) with h ~ 6e-6
        np.testing.assert_allclose(lin.jacobian, _analytic(p), rtol=rtol, atol=rtol)
    pts = model.evaluated()
    assert np.all(pts >= cmap.lower) and np.all(pts <= cmap.upper)


def test_step_shrinks_inside_a_very_narrow_range() -> None:
    # physical_scale (coordinate_scale 10) is huge compared with the range 1e-7.
    params = [CalibrationParameter("a", 2.0, 2.0 + 1e-7, 2.0 + 5e-8, coordinate_scale=10.0),
              CalibrationParameter("k", 0.1, 3.0, 0.7)]
    model = _exp_model()
    cmap = CoordinateMap(params)
    lin = FiniteDifference(Evaluator(model, cmap)).linearize(cmap.to_coordinate(np.array([2.0 + 5e-8, 0.7])))
    assert lin.schemes[0] in ("forward3", "backward3")
    pts = model.evaluated()
    assert np.all(pts[:, 0] >= 2.0) and np.all(pts[:, 0] <= 2.0 + 1e-7)
    np.testing.assert_allclose(lin.jacobian[:, 0], _analytic(np.array([2.0, 0.7]))[:, 0], rtol=1e-5)


def test_weighted_and_unweighted_jacobians_come_from_the_same_rollouts() -> None:
    params = [CalibrationParameter("a", 0.5, 4.0, 2.0), CalibrationParameter("k", 0.1, 3.0, 0.7)]
    model = _exp_model(weight=4.0)
    cmap = CoordinateMap(params)
    lin = FiniteDifference(Evaluator(model, cmap)).linearize(np.array([2.0, 0.7]))
    np.testing.assert_allclose(lin.jacobian, 2.0 * lin.unweighted_jacobian, rtol=1e-12)
    assert model.count() == 5


def test_failed_perturbation_falls_back_to_the_other_side_and_then_errors() -> None:
    params = [CalibrationParameter("a", 0.5, 4.0, 2.0), CalibrationParameter("k", 0.1, 3.0, 0.7)]
    model = _exp_model(fail_when=lambda p: p[1] > 0.7)
    cmap = CoordinateMap(params)
    lin = FiniteDifference(Evaluator(model, cmap)).linearize(np.array([2.0, 0.7]))
    assert lin.schemes == ("central", "backward3")
    np.testing.assert_allclose(lin.jacobian, _analytic(np.array([2.0, 0.7])), rtol=1e-7)
    both = _exp_model(fail_when=lambda p: p[1] != 0.7)
    with pytest.raises(EvaluationError, match="parameter 'k'"):
        FiniteDifference(Evaluator(both, cmap)).linearize(np.array([2.0, 0.7]))


def test_batch_hook_evaluates_a_jacobian_in_one_call() -> None:
    params = [CalibrationParameter("a", 0.5, 4.0, 2.0), CalibrationParameter("k", 0.1, 3.0, 0.7)]
    model = BatchNumpyModel(["a", "k"], [Signal("e", "y", lambda p: p[0] * np.exp(-p[1] * T))])
    cmap = CoordinateMap(params)
    evaluator = Evaluator(model, cmap)
    FiniteDifference(evaluator).linearize(np.array([2.0, 0.7]))
    assert model.batches == [4]
    assert evaluator.counts["training"] == 5
    evaluator.evaluate(np.array([2.0, 0.7]))  # centre memoised
    assert evaluator.counts["training"] == 5


# --- losses ---------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["huber", "soft_l1", "cauchy", "arctan", "tukey"])
def test_loss_derivatives_are_consistent(name: str) -> None:
    z = np.array([0.0, 0.3, 0.99, 1.5, 4.0, 30.0])
    rho = unit_loss(name)(z)
    assert rho.shape == (3, z.size)
    assert rho[0, 0] == 0.0 and rho[1, 0] == pytest.approx(1.0)
    h = 1e-6
    zi = z[1:]
    up, down = unit_loss(name)(zi + h), unit_loss(name)(zi - h)
    np.testing.assert_allclose((up[0] - down[0]) / (2 * h), rho[1, 1:], rtol=1e-5, atol=1e-9)
    np.testing.assert_allclose((up[1] - down[1]) / (2 * h), rho[2, 1:], rtol=1e-4, atol=1e-8)


@pytest.mark.parametrize("name", ["huber", "soft_l1", "cauchy", "arctan"])
def test_builtin_losses_match_scipy(name: str) -> None:
    rng = np.random.default_rng(0)
    y = 1.0 + 2.0 * T + 0.1 * rng.standard_normal(T.size)
    y[::7] += 3.0
    fun = lambda x: x[0] + x[1] * T - y  # noqa: E731
    for x in ([0.0, 0.0], [1.0, 2.0], [1.2, 1.7]):
        # max_nfev=1: scipy reports cost and gradient at x itself
        ours = least_squares(fun, x, loss=data_only_loss(name, T.size), f_scale=0.3, max_nfev=1)
        theirs = least_squares(fun, x, loss=name, f_scale=0.3, max_nfev=1)
        assert ours.cost == pytest.approx(theirs.cost, rel=1e-13)
        np.testing.assert_allclose(ours.grad, theirs.grad, rtol=1e-12)
        assert 0.5 * robustified_squares(LossSpec(name, 0.3), fun(np.array(x))).sum() == pytest.approx(
            theirs.cost, rel=1e-13
        )


def test_tukey_ignores_far_residuals_and_priors_are_never_robustified() -> None:
    r = np.array([0.1, 1.0, 3.0, 100.0])
    sq = robustified_squares(LossSpec("tukey", 2.0), r)
    assert sq[0] == pytest.approx(0.01, rel=1e-2)  # quadratic well inside the scale
    assert sq[2] == pytest.approx(4.0 / 3.0) and sq[3] == pytest.approx(4.0 / 3.0)
    rho = data_only_loss("tukey", 2)(np.array([0.5, 9.0, 9.0]))
    np.testing.assert_allclose(rho[:, 2], [9.0, 1.0, 0.0])  # the prior entry: identity
    assert rho[1, 1] == 0.0
    np.testing.assert_allclose(robustified_squares(None, r), r * r)
    with pytest.raises(CalibrationRequestError, match="loss type 'l1'"):
        LossSpec("l1")
    with pytest.raises(CalibrationRequestError, match="loss scale"):
        LossSpec("huber", 0.0)


# --- analysis, summaries, verdict helpers ---------------------------------------------------


def test_covariance_scaling_standardized_vs_estimated() -> None:
    rng = np.random.default_rng(0)
    J = rng.standard_normal((50, 2))
    r = 0.3 * rng.standard_normal(50)
    inv = np.linalg.inv(J.T @ J)
    std = analyze(["a", "b"], np.zeros(2), np.array([2.0, 1.0]), J, r, True, True, "objective_jacobian")
    np.testing.assert_allclose(std.covariance, inv, rtol=1e-10)
    np.testing.assert_allclose(std.covariance_physical, inv * np.outer([2.0, 1.0], [2.0, 1.0]), rtol=1e-10)
    est = analyze(["a", "b"], np.zeros(2), np.ones(2), J, r, False, False, "objective_jacobian")
    # Like Ceres' Covariance: (J^T J)^-1 in residual units; the spread estimate beside it.
    np.testing.assert_allclose(est.covariance, inv, rtol=1e-10)
    assert est.residual_variance_estimate == pytest.approx((r @ r) / 48, rel=1e-12)
    doc = est.to_document()["covariance"]
    assert doc["units"] == "residual_units_scale_by_residual_variance_estimate"
    assert doc["residual_variance_estimate"] == pytest.approx((r @ r) / 48, rel=1e-12)
    assert est.standard_deviations is None and est.intervals is None
    np.testing.assert_allclose(std.correlation[0, 1], inv[0, 1] / math.sqrt(inv[0, 0] * inv[1, 1]))
    assert std.condition_number == pytest.approx(np.linalg.cond(J))


def test_fewer_residuals_than_parameters_is_rank_deficient() -> None:
    J = np.array([[1.0, 2.0, 0.0]])
    a = analyze(["a", "b", "c"], np.zeros(3), np.ones(3), J, np.zeros(1), True, True, "objective_jacobian")
    assert a.numerical_rank == 1 and len(a.singular_values) == 3
    assert not a.identifiable.any()
    assert math.isinf(a.condition_number)


def test_summaries_merge_blocks_in_declaration_order() -> None:
    blocks = (
        ResidualBlock("r2", "pos", 0, 2),
        ResidualBlock("r1", "pos", 2, 3),
        ResidualBlock("r2", "imu", 3, 5),
        ResidualBlock("r2", "pos", 5, 6),
    )
    s = summarize(np.array([1.0, 1.0, 4.0, 2.0, 2.0, 1.0]), blocks)
    assert s.episode_ids == ("r2", "r1")
    r2 = s.episode("r2")
    assert [(x.signal, x.count, x.sse) for x in r2.signals] == [("pos", 3, 3.0), ("imu", 2, 4.0)]
    assert r2.rms == pytest.approx(math.sqrt(7.0 / 5.0))
    assert s.count == 6 and s.sse == 11.0


def test_episode_ratio_and_bound_fractions() -> None:
    blocks = (ResidualBlock("a", "y", 0, 1), ResidualBlock("b", "y", 1, 2))
    assert math.isinf(episode_rms_ratio(summarize(np.array([0.0, 1.0]), blocks)))
    assert episode_rms_ratio(summarize(np.array([0.0, 0.0]), blocks)) == 1.0
    cmap = CoordinateMap([CalibrationParameter("g", 0.001, 1.0, 0.5, parameterization="log_positive")])
    # 0.0015 is 0.05 % of the physical range above the lower bound but 5.9 % of the log range.
    fraction = bound_fractions(cmap, cmap.to_coordinate(np.array([0.0015])))["g"]
    assert fraction == pytest.approx(math.log(1.5) / math.log(1000.0))
