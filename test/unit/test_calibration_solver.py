"""The calibration solver end to end on closed-form residual models (no simulation)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from _calibration_models import BatchNumpyModel, NumpyModel, Signal
from scipy.stats import norm

from fibril_calibration.loss_spec import LossSpec
from fibril_calibration.parameters import CalibrationParameter, Prior
from fibril_calibration.solver import SolverOptions, calibrate
from fibril_calibration.analysis.verdict import FitCriteria

T = np.linspace(0.0, 3.0, 60)


def decay_model(truth: float = 1.3, sd: float = 0.01) -> NumpyModel:
    y = 2.0 * np.exp(-truth * T)
    return NumpyModel(["k"], [Signal("run-01", "y", lambda p: (2.0 * np.exp(-p[0] * T) - y) / sd)])


def strict_json(outcome: object) -> dict:
    doc = outcome.to_document()  # type: ignore[attr-defined]
    return json.loads(json.dumps(doc, allow_nan=False))


@pytest.mark.parametrize("kind", ["linear", "normalized_linear", "log_positive"])
def test_one_parameter_recovered_with_each_parameterization(kind: str) -> None:
    model = decay_model()
    param = CalibrationParameter("k", 0.05, 10.0, 4.0, nominal=1.0, parameterization=kind)
    out = calibrate(model, [param], SolverOptions())
    assert out.termination == "converged"
    assert out.fitted_values["k"] == pytest.approx(1.3, abs=1e-8)
    assert out.training_summary.rms < 1e-6
    assert out.evaluations.training == model.count("training")
    assert out.evaluations.validation == 0
    strict_json(out)


def test_three_parameters_mixed_parameterizations() -> None:
    truth = np.array([2.0, 0.7, 0.3])
    f = lambda p: p[0] * np.exp(-p[1] * T) + p[2]  # noqa: E731
    y = f(truth)
    model = NumpyModel(["amp", "rate", "offset"], [Signal("e", "y", lambda p: (f(p) - y) / 0.01)])
    params = [
        CalibrationParameter("amp", 0.1, 10.0, 1.0, parameterization="log_positive"),
        CalibrationParameter("rate", 0.01, 5.0, 1.5, nominal=1.0, parameterization="normalized_linear"),
        CalibrationParameter("offset", -1.0, 1.0, 0.0),
    ]
    out = calibrate(model, params, SolverOptions(standardized_gaussian_residuals=True))
    assert out.termination == "converged"
    np.testing.assert_allclose(out.fitted, truth, atol=1e-8)
    assert list(out.fitted_values) == ["amp", "rate", "offset"]
    assert out.analysis.numerical_rank == 3
    assert out.likelihood_interpretation_valid


def test_six_parameters_recovered() -> None:
    truth = np.array([0.5, -0.2, 1.5, 2.0, 0.8, 3.0])
    f = lambda p: p[0] + p[1] * T + p[2] * np.exp(-p[3] * T) + p[4] * np.cos(p[5] * T)  # noqa: E731
    y = f(truth)
    kinds = ["linear", "normalized_linear", "log_positive"] * 2
    initial = truth * np.array([1.3, 0.7, 0.8, 1.25, 1.2, 0.9])
    params = [
        CalibrationParameter(
            f"p{i}", 0.01 if kinds[i] == "log_positive" else -5.0, 5.0, initial[i],
            parameterization=kinds[i],  # type: ignore[arg-type]
        )
        for i in range(6)
    ]
    model = BatchNumpyModel([p.id for p in params], [Signal("e", "y", lambda p: (f(p) - y) / 0.01)])
    out = calibrate(model, params, SolverOptions())
    assert out.termination == "converged"
    np.testing.assert_allclose(out.fitted, truth, atol=1e-7)
    # Central differences (the default): one batched call of 2n points per Jacobian; the
    # analysis at the fit reuses the optimizer's last, memoised Jacobian.
    assert set(model.batches) == {12}
    assert out.evaluations.analysis_relinearization == 0


def test_forward_differences_are_opt_in() -> None:
    truth = np.array([0.5, -0.2, 1.5])
    f = lambda p: p[0] + p[1] * T + p[2] * np.exp(-T)  # noqa: E731
    y = f(truth)
    params = [CalibrationParameter(f"p{i}", -5.0, 5.0, 0.0) for i in range(3)]
    model = BatchNumpyModel([p.id for p in params], [Signal("e", "y", lambda p: (f(p) - y) / 0.01)])
    out = calibrate(model, params, SolverOptions(optimizer_differences="forward"))
    np.testing.assert_allclose(out.fitted, truth, atol=1e-7)
    # n points per Jacobian while iterating, then one second-order batch (2n) at the fit.
    assert model.batches[-1] == 6
    assert set(model.batches[:-1]) == {3}
    assert out.evaluations.analysis_relinearization == 6


def test_bounds_are_never_evaluated_outside_and_bound_optimum_is_reported() -> None:
    # Truth k = 1.3 lies above the upper bound 1.0: the optimum sits on the bound.
    model = decay_model()
    params = [CalibrationParameter("k", 0.2, 1.0, 0.5, parameterization="log_positive")]
    out = calibrate(
        model, params,
        SolverOptions(profile_likelihood=True, profile_samples=7,
                      fit_criteria=FitCriteria(reject_parameter_near_bound=True)),
    )
    points = model.evaluated("training")[:, 0]
    assert points.min() >= 0.2 and points.max() <= 1.0
    assert out.fitted_values["k"] == pytest.approx(1.0, abs=1e-9)
    assert out.finite_difference["analysis_schemes"]["k"] == "backward3"
    assert out.verdict.verdict == "no_plausible_fit"
    assert "parameter_near_bound:k" in out.verdict.reasons


def test_rank_deficient_sum_reports_unidentifiable_direction() -> None:
    # a and b only enter as a + b; c is identifiable.
    rng = np.random.default_rng(3)
    y = 1.0 * T + 0.5 * T**2 + 0.05 * rng.standard_normal(T.size)
    model = NumpyModel(
        ["a", "b", "c"],
        [Signal("e", "y", lambda p: ((p[0] + p[1]) * T + p[2] * T**2 - y) / 0.05)],
    )
    # Different scales and parameterizations: the finite-difference columns of a and b then
    # differ by ~1e-12 relative, which an exact-matrix rank tolerance would call full rank.
    params = [
        CalibrationParameter("a", 0.01, 5.0, 0.2, nominal=0.5, parameterization="log_positive"),
        CalibrationParameter("b", 0.01, 5.0, 0.3, nominal=2.0, parameterization="normalized_linear"),
        CalibrationParameter("c", -5.0, 5.0, 0.0),
    ]
    out = calibrate(
        model, params,
        SolverOptions(standardized_gaussian_residuals=True, information_matrix=True,
                      fit_criteria=FitCriteria(max_local_condition_number=1e6)),
    )
    a = out.analysis
    assert a.numerical_rank == 2
    assert math.isinf(a.condition_number)
    assert list(a.identifiable) == [False, False, True]
    sd = a.standard_deviations
    assert sd is not None and math.isinf(sd[0]) and math.isinf(sd[1]) and math.isfinite(sd[2])
    assert 0.0 < a.singular_values[2] < 1e-10 * a.singular_values[0]  # FD noise, not zero
    # In dimensionless coordinates (delta_p / physical_scale) a + b unchanged is the null
    # direction: physical_scale_a * theta_a = -physical_scale_b * theta_b.
    null_direction = a.directions[2] * [0.5, 2.0, 1.0]
    assert null_direction[0] == pytest.approx(-null_direction[1], rel=1e-6)
    assert abs(null_direction[2]) < 1e-9
    assert out.information is not None and out.information.log_determinant is None
    assert out.verdict.verdict == "no_plausible_fit" and "ill_conditioned" in out.verdict.reasons
    doc = strict_json(out)["local_identifiability"]
    assert doc["condition_number"] is None and doc["condition_number_infinite"] is True
    entries = {p["id"]: p for p in doc["parameters"]}
    assert entries["a"]["standard_deviation"] is None and entries["a"]["interval_95"] is None
    assert entries["c"]["standard_deviation"] == pytest.approx(float(sd[2]))
    # Ceres' rank-deficient covariance: the pseudo-inverse, finite, with the null space named;
    # no standard deviation, interval or correlation for the unidentifiable parameters.
    covariance = doc["covariance"]
    assert covariance["method"] == "svd_pseudo_inverse"
    assert covariance["null_space_dimension"] == 1
    assert covariance["unidentifiable_parameters"] == ["a", "b"]
    pinv = np.linalg.pinv(a.directions.T @ np.diag(a.singular_values ** 2) @ a.directions,
                          rcond=float(a.rank_tolerance / a.singular_values[0]) ** 2)
    np.testing.assert_allclose(np.array(covariance["dimensionless"]), pinv, rtol=1e-6,
                               atol=1e-12 * np.abs(pinv).max())
    assert all(math.isfinite(v) for row in covariance["physical"] for v in row)
    assert covariance["correlation"][0][2] is None and covariance["correlation"][0][0] is None
    assert covariance["correlation"][2][2] == 1.0


def test_profile_interval_matches_wald_interval_on_linear_gaussian_problem() -> None:
    rng = np.random.default_rng(1)
    t = np.linspace(0.0, 1.0, 40)
    y = 1.0 + 2.0 * t + 0.1 * rng.standard_normal(t.size)
    model = NumpyModel(["a", "b"], [Signal("e", "y", lambda p: (p[0] + p[1] * t - y) / 0.1)])
    params = [CalibrationParameter("a", -10.0, 10.0, 0.0), CalibrationParameter("b", -10.0, 10.0, 0.0)]
    out = calibrate(
        model, params,
        SolverOptions(standardized_gaussian_residuals=True, profile_likelihood=True,
                      profile_samples=21, information_matrix=True),
    )
    assert out.likelihood_interpretation_valid
    wald = out.analysis.intervals
    sd = out.analysis.standard_deviations
    assert wald is not None and sd is not None
    # Closed-form check of the Wald interval itself.
    X = np.column_stack([np.ones_like(t), t]) / 0.1
    cov = np.linalg.inv(X.T @ X)
    np.testing.assert_allclose(sd, np.sqrt(np.diag(cov)), rtol=1e-6)
    np.testing.assert_allclose(wald[:, 1] - wald[:, 0], 2 * norm.ppf(0.975) * sd, rtol=1e-9)
    assert out.profile is not None
    for i, pid in enumerate(["a", "b"]):
        prof = out.profile.profile(pid)
        assert prof.interval is not None
        assert not prof.lower_limited and not prof.upper_limited
        np.testing.assert_allclose(prof.interval, wald[i], atol=1e-6 * sd[i])
        assert sum(p.is_optimum for p in prof.points) == 1
        assert any(p.value == pytest.approx(out.fitted[i], abs=0.0) for p in prof.points)
        assert len(prof.points) in (21, 22)
    assert out.information is not None
    assert out.information.name == "fisher_information_approximation"
    np.testing.assert_allclose(
        out.information.matrix, (X * [20.0, 20.0]).T @ (X * [20.0, 20.0]), rtol=1e-6
    )  # dimensionless: physical_scale = range = 20
    strict_json(out)


def test_profile_interval_is_bound_limited_when_no_crossing() -> None:
    rng = np.random.default_rng(2)
    t = np.linspace(0.0, 1.0, 10)
    y = 1.0 + 2.0 * t + 0.5 * rng.standard_normal(t.size)
    model = NumpyModel(["a"], [Signal("e", "y", lambda p: (p[0] + 2.0 * t - y) / 0.5)])
    out = calibrate(
        model, [CalibrationParameter("a", 0.9, 5.0, 2.0)],
        SolverOptions(standardized_gaussian_residuals=True, profile_likelihood=True, profile_samples=11),
    )
    prof = out.profile.profile("a")  # type: ignore[union-attr]
    assert prof.lower_limited is True and prof.interval[0] == 0.9  # type: ignore[index]
    assert prof.upper_limited is False and prof.interval[1] < 5.0  # type: ignore[index]
    doc = strict_json(out)["profile_likelihood"]["parameters"][0]
    assert doc["confidence_lower_bound_limited"] is True
    assert doc["confidence_upper_bound_limited"] is False


def _prior_problem(prior: bool = True) -> tuple[NumpyModel, list[CalibrationParameter]]:
    rng = np.random.default_rng(4)
    y = 1.0 + 2.0 * T + 0.1 * rng.standard_normal(T.size)
    model = NumpyModel(["a", "b"], [Signal("e", "y", lambda p: (p[0] + p[1] * T - y) / 0.1)])
    params = [
        CalibrationParameter("a", -10.0, 10.0, 0.0, prior=Prior(0.0, 0.05) if prior else None),
        CalibrationParameter("b", -10.0, 10.0, 0.0),
    ]
    return model, params


def test_prior_switches_off_likelihood_and_appears_only_in_optimization_summary() -> None:
    model, params = _prior_problem()
    out = calibrate(
        model, params,
        SolverOptions(standardized_gaussian_residuals=True, profile_likelihood=True,
                      profile_samples=9, information_matrix=True),
    )
    assert not out.likelihood_interpretation_valid
    assert out.optimization_summary.episode_ids == ("e", "__prior__")
    assert out.training_summary.episode_ids == ("e",)
    prior = out.optimization_summary.episode("__prior__")
    assert [s.signal for s in prior.signals] == ["a"]
    assert prior.sse == pytest.approx((out.fitted[0] / 0.05) ** 2)
    # The prior pulls a toward 0, so it is not the least-squares fit: training is worse.
    free = calibrate(*_prior_problem(prior=False), SolverOptions(standardized_gaussian_residuals=True))
    assert out.training_summary.sse > free.training_summary.sse
    assert out.analysis.jacobian_source == "data_only_relinearization"
    assert out.analysis.standard_deviations is None and out.analysis.intervals is None
    assert out.information is not None and out.information.name == "sensitivity_gram_matrix"
    assert out.profile is not None and out.profile.threshold is None
    assert all(p.interval is None for p in out.profile.profiles)
    doc = strict_json(out)
    assert "standard_deviation" not in doc["local_identifiability"]["parameters"][0]
    assert [e["episode"] for e in doc["training_summary"]["episodes"]] == ["e"]


def test_robust_loss_switches_off_likelihood_and_tukey_rejects_outliers() -> None:
    rng = np.random.default_rng(5)
    y = 1.0 + 2.0 * T + 0.1 * rng.standard_normal(T.size)
    y[::10] += 5.0  # gross outliers
    model = NumpyModel(["a", "b"], [Signal("e", "y", lambda p: (p[0] + p[1] * T - y) / 0.1)])
    params = [CalibrationParameter("a", -10.0, 10.0, 0.9), CalibrationParameter("b", -10.0, 10.0, 2.1)]
    plain = calibrate(model, params, SolverOptions(standardized_gaussian_residuals=True))
    tukey = calibrate(
        model, params, SolverOptions(standardized_gaussian_residuals=True, loss=LossSpec("tukey", 4.0))
    )
    assert plain.likelihood_interpretation_valid and not tukey.likelihood_interpretation_valid
    assert abs(plain.fitted[0] - 1.0) > 0.3
    np.testing.assert_allclose(tukey.fitted, [1.0, 2.0], atol=0.1)
    # Each outlier contributes at most c**2 / 3 to the robustified objective.
    opt = tukey.optimization_summary
    assert opt.sse < tukey.training_summary.sse
    assert opt.sse <= 6 * 16.0 / 3.0 + 54 * 16.0
    assert tukey.analysis.jacobian_source == "data_only_relinearization"
    strict_json(tukey)


def test_episode_weights_leave_training_summary_unweighted() -> None:
    y1 = 2.0 * np.exp(-1.3 * T)
    y2 = y1 + 0.02
    model = NumpyModel(
        ["k"],
        [
            Signal("run-01", "y", lambda p: (2.0 * np.exp(-p[0] * T) - y1) / 0.01, weight=4.0),
            Signal("run-02", "y", lambda p: (2.0 * np.exp(-p[0] * T) - y2) / 0.01, weight=1.0),
        ],
    )
    out = calibrate(model, [CalibrationParameter("k", 0.1, 5.0, 1.0)], SolverOptions())
    final = model.evaluate(out.fitted)
    assert out.training_summary.sse == pytest.approx(float(final.unweighted @ final.unweighted))
    assert out.optimization_summary.sse == pytest.approx(float(final.residuals @ final.residuals))
    assert out.analysis.jacobian_source == "data_only_relinearization"


def test_verdicts() -> None:
    rng = np.random.default_rng(6)
    y_good = 1.0 + 2.0 * T + 0.1 * rng.standard_normal(T.size)
    y_bad = 1.0 + 2.0 * T + 0.1 * rng.standard_normal(T.size) + 0.8 * np.sin(7.0 * T)
    line = lambda y: (lambda p: (p[0] + p[1] * T - y) / 0.1)  # noqa: E731
    params = [CalibrationParameter("a", -10.0, 10.0, 0.0), CalibrationParameter("b", -10.0, 10.0, 0.0)]
    consistent = NumpyModel(
        ["a", "b"], [Signal("r1", "y", line(y_good))], validation=[Signal("v1", "y", line(y_good))]
    )
    criteria = FitCriteria(max_training_rms=3.0, max_validation_rms=4.0,
                           max_local_condition_number=1e6, max_episode_rms_ratio=3.0,
                           reject_parameter_near_bound=True)
    out = calibrate(consistent, params, SolverOptions(fit_criteria=criteria))
    assert out.verdict.verdict == "plausible_fit" and out.verdict.reasons == ()
    assert consistent.count("validation") == 1  # validation evaluated exactly once
    assert out.validation_summary is not None and out.validation_summary.rms < 1.5

    inconsistent = NumpyModel(
        ["a", "b"], [Signal("r1", "y", line(y_good)), Signal("r2", "y", line(y_bad))]
    )
    out = calibrate(inconsistent, params, SolverOptions(fit_criteria=criteria))
    assert out.verdict.verdict == "no_plausible_fit"
    assert "cross_episode_inconsistency" in out.verdict.reasons
    ratio = out.verdict.measurements["episode_rms_ratio"]
    rms = [e.rms for e in out.training_summary.episodes]
    assert ratio == pytest.approx(max(rms) / min(rms)) and ratio > 3.0
    # Validation criterion given but no validation data: not judged as plausible.
    assert "validation_unavailable" in out.verdict.reasons

    out = calibrate(inconsistent, params, SolverOptions())
    assert out.verdict.verdict == "indeterminate" and out.verdict.reasons == ("no_fit_criteria",)
    doc = strict_json(out)
    assert doc["fit"]["verdict"] == "indeterminate"


def test_termination_max_iterations_and_progress() -> None:
    model = decay_model()
    lines: list[str] = []
    out = calibrate(
        model, [CalibrationParameter("k", 0.05, 10.0, 8.0)],
        SolverOptions(max_iterations=1, progress=lines.append),
    )
    assert out.termination == "max_iterations"
    assert out.iterations == 1
    assert any(line.startswith("iteration 1:") for line in lines)
    full = calibrate(model, [CalibrationParameter("k", 0.05, 10.0, 8.0)], SolverOptions())
    assert full.termination == "converged" and full.iterations > 1
    zero = calibrate(model, [CalibrationParameter("k", 0.05, 10.0, 8.0)], SolverOptions(max_iterations=0))
    assert zero.termination == "max_iterations" and zero.fitted_values["k"] == 8.0


def test_failed_trial_rollouts_shrink_the_step_instead_of_aborting() -> None:
    # Rollouts "diverge" for k < 0.5 although that is inside the bounds; the first
    # Gauss-Newton step from k = 5 on this saturating residual overshoots to k ~ 0.
    model = NumpyModel(
        ["k"], [Signal("e", "y", lambda p: 10.0 * np.arctan(np.array([p[0] - 1.0, 0.5 * (p[0] - 1.0)])))],
        fail_when=lambda p: p[0] < 0.5,
    )
    out = calibrate(model, [CalibrationParameter("k", -10.0, 10.0, 5.0)], SolverOptions())
    assert out.evaluations.failed >= 1
    assert out.termination == "converged"
    assert out.fitted_values["k"] == pytest.approx(1.0, abs=1e-8)


def test_central_optimizer_differences_reuse_the_final_jacobian() -> None:
    model = decay_model()
    out = calibrate(
        model, [CalibrationParameter("k", 0.05, 10.0, 4.0)], SolverOptions(optimizer_differences="central")
    )
    assert out.fitted_values["k"] == pytest.approx(1.3, abs=1e-8)
    assert out.evaluations.analysis_relinearization == 0
    assert out.analysis.jacobian_source == "objective_jacobian"


def test_document_is_strict_json_with_everything_enabled() -> None:
    model, params = _prior_problem()
    model = NumpyModel(
        ["a", "b", "c"],
        [Signal("e", "y", lambda p: ((p[0] + p[1]) * T + p[2] - 1.0 - 2.0 * T) / 0.1)],
        validation=[Signal("v", "y", lambda p: ((p[0] + p[1]) * T + p[2] - 1.0 - 2.0 * T) / 0.1)],
    )
    params = [
        CalibrationParameter("a", -10.0, 10.0, 0.5, unit="m", prior=Prior(1.0, 1.0)),
        CalibrationParameter("b", 0.1, 10.0, 0.5, parameterization="log_positive"),
        CalibrationParameter("c", -10.0, 10.0, 0.5, parameterization="normalized_linear"),
    ]
    out = calibrate(
        model, params,
        SolverOptions(loss=LossSpec("huber", 1.0), profile_likelihood=True, profile_samples=5,
                      information_matrix=True, fit_criteria=FitCriteria(max_local_condition_number=10.0)),
    )
    doc = strict_json(out)
    assert doc["optimization_termination"] in ("converged", "max_iterations", "no_convergence")
    assert set(doc["fitted_parameters"]) == {"a", "b", "c"}
    assert doc["information_matrix"]["name"] == "sensitivity_gram_matrix"
    assert doc["information_matrix"]["coordinate_system"]["physical_scale"]["a"] == 20.0
    assert doc["validation_summary"]["aggregate"]["count"] == T.size
    assert doc["likelihood_interpretation_valid"] is False
