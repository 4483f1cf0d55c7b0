"""``initial_state_fit``: window initial states fitted as nuisance parameters.

A synthetic two-joint arm logged with measurement noise: windows that start from the noisy
logged state leave residuals far above the noise at the truth; with ``initial_state_fit:
[qpos, qvel]`` the residuals at the fit are the noise alone, the Gaussian intervals are
claimed and hold the truth, and the nuisance estimates are nearer the true initial states
than the logged ones. Bad declarations are one-line request errors."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import _recording_rig as rig
import numpy as np
import pytest
from fibril_calibration.engine import run_calibration
from fibril_calibration.errors import CalibrationRequestError
from fibril_calibration.request import load_calibration_request

Q_SD, DQ_SD = 2e-4, 4e-3


@pytest.fixture(scope="module")
def noisy(tmp_path_factory: pytest.TempPathFactory) -> dict:
    folder = tmp_path_factory.mktemp("noisy-arm")
    data = rig.recording(folder, duration_s=1.0)
    rng = np.random.default_rng(7)
    clean = copy.deepcopy(data)
    # write_csv samples q / dq at the log times from the per-tick truth: add noise per row
    stamps = data["log_times"]
    noise_q = rng.normal(0, Q_SD, (stamps.size, 2))
    noise_dq = rng.normal(0, DQ_SD, (stamps.size, 2))
    times = sorted(set(data["command_times"].tolist()) | set(stamps.tolist()))
    path = folder / "log.csv"
    import csv

    ctimes = data["command_times"]
    row_of = {t: i for i, t in enumerate(stamps.tolist())}
    with path.open("w", newline="", encoding="utf-8") as out:
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(["t_s", "tau1", "tau2", "q1", "q2", "dq1", "dq2"])
        for t in times:
            c = int(np.searchsorted(ctimes, t, "right")) - 1
            q = np.array(rig.sample_at(data, t, "q"))
            dq = np.array(rig.sample_at(data, t, "dq"))
            if t in row_of:
                q = q + noise_q[row_of[t]]
                dq = dq + noise_dq[row_of[t]]
            writer.writerow([repr(t / 1e9), *map(repr, data["torques"][c].tolist()),
                             *map(repr, q.tolist()), *map(repr, dq.tolist())])
    return {"folder": folder, "data": clean, "csv": path}


def _doc(noisy: dict, fit: list[str] | None) -> dict:
    doc = rig.request(noisy["data"]["manifest"],
                      {"path": str(noisy["csv"]), "time_column": "t_s"},
                      windows={"every": 0.2}, csv_log=True)
    episode = doc["training"][0]
    episode["signals"]["q"]["residual_scale"] = Q_SD
    episode["signals"]["q"]["scale_semantics"] = "measurement_standard_deviation"
    if fit is not None:
        episode["initial_state_fit"] = fit
    doc["execution"] = {"max_parallelism": 1}
    doc["objective"] = {"standardized_gaussian_residuals": True}
    return doc


def test_nuisance_initial_states_give_honest_intervals(noisy: dict) -> None:
    folder = noisy["folder"]
    plain = run_calibration(rig.write_request(folder, _doc(noisy, None), "plain.yaml"))
    fitted = run_calibration(rig.write_request(folder, _doc(noisy, ["qpos", "qvel"]),
                                               "fit.yaml"))
    # From the noisy logged states the residuals are far above the noise ...
    assert plain.outcome.training_summary.rms > 1.3
    # ... with the initial states fitted they are the noise alone and intervals are claimed.
    assert 0.85 < fitted.outcome.training_summary.rms < 1.15
    assert fitted.document["likelihood_interpretation_valid"] is True
    per = {p["id"]: p for p in fitted.document["local_identifiability"]["parameters"]}
    for joint, truth in rig.TRUTH.items():
        entry = per[f"d_{joint}"]
        low, high = entry["interval_95"]
        assert low <= truth <= high, (joint, truth, low, high)
    # The nuisance estimates: reported beside (not inside) the physical result, and nearer the
    # true window-start states than the logged ones.
    section = fitted.document["initial_state_fit"]
    assert set(fitted.document["fitted_parameters"]) == {"d_j1", "d_j2"}
    assert len(section["passes"]) == 2 and section["degrees_of_freedom_removed"]["training"] == 20
    data = noisy["data"]
    logged_err, fitted_err = [], []
    for episode_id, estimate in section["episodes"].items():
        window = int(episode_id.rsplit("/w", 1)[1])
        tick = window * 200
        for n, joint in enumerate(rig.JOINTS):
            for part, key in (("qvel", "dq_ticks"), ("qpos", "q_ticks")):
                c = estimate["coordinates"][f"{joint}.{part}"]
                true = data[key][tick, n]
                logged_err.append(abs(c["logged"] - true) / (Q_SD if part == "qpos" else DQ_SD))
                fitted_err.append(abs(c["estimate"] - true) / (Q_SD if part == "qpos" else DQ_SD))
    assert np.mean(fitted_err) < 0.5 * np.mean(logged_err)


@pytest.mark.parametrize(("value", "message"), [
    (["qacc"], "initial_state_fit[0]: must be one of qpos, qvel, got 'qacc'"),
    (["qvel", "qvel"], "initial_state_fit[1]: 'qvel' is listed twice"),
    ([], "initial_state_fit: list at least one of qpos, qvel"),
    ("qvel", "initial_state_fit"),
])
def test_bad_declarations_are_request_errors(noisy: dict, value: object, message: str) -> None:
    doc = _doc(noisy, None)
    doc["training"][0]["initial_state_fit"] = value
    path = rig.write_request(noisy["folder"], doc, "bad.yaml")
    with pytest.raises(CalibrationRequestError) as caught:
        load_calibration_request(path)
    assert message in str(caught.value) and "\n" not in str(caught.value)


def test_nothing_to_fit_is_a_request_error(noisy: dict) -> None:
    doc = _doc(noisy, ["qpos"])
    doc["training"][0]["initial_state"] = [
        {"type": "joint", "joint": "j1", "qvel_from": {"column": "dq1"}}]
    path = rig.write_request(noisy["folder"], doc, "none.yaml")
    with pytest.raises(CalibrationRequestError, match="initial_state has no joint entry "
                                                      "setting qpos: nothing to fit"):
        load_calibration_request(path)


def test_inline_episode_recovers_its_initial_velocity(tmp_path: Path) -> None:
    """An inline episode whose declared initial velocity is off: with ``initial_state_fit:
    [qvel]`` the damping is exact and the reported nuisance estimate is the true velocity; the
    nuisance is not a fitted parameter. A free joint cannot be fitted."""
    import _calibration_rig as crig

    manifest = crig.write_rig(tmp_path)
    doc = crig.request_doc(manifest)
    episode = doc["training"][0]
    episode["initial_state"] = [{"type": "joint", "joint": "shaft", "qvel": [3.0]}]
    episode["signals"]["speed"]["samples"] = crig.samples([5 * k for k in range(1, 41)])
    truth = crig.synthesize(tmp_path, doc, {"damping": 0.05})
    truth["training"][0]["initial_state"][0]["qvel"] = [3.2]  # the "logged" value is off
    truth["training"][0]["initial_state_fit"] = ["qvel"]
    result = run_calibration(crig.write_request(tmp_path, truth, "fit.yaml"), metrics=True)
    assert result.fitted_values == {"damping": pytest.approx(0.05, rel=1e-5)}
    # metrics.json says its errors are projected residuals (not a replay from the log)
    assert result.metrics["fitted"]["ep1"]["initial_state_fit"] is True
    assert "not comparable" in result.metrics["fitted"]["ep1"]["initial_state_fit_note"]
    estimate = result.document["initial_state_fit"]["episodes"]["ep1"]["coordinates"]
    assert estimate["shaft.qvel"]["logged"] == 3.2
    assert estimate["shaft.qvel"]["estimate"] == pytest.approx(3.0, abs=1e-4)
    assert estimate["shaft.qvel"]["identified"] is True
    assert estimate["shaft.qvel"]["step"] == pytest.approx(1e-5 * 3.2)  # scaled to |x0|
    health = result.document["initial_state_fit"]["episodes"]["ep1"]["sensitivity"]
    assert health["condition_number"] == 1.0 and health["differences"] == "forward"
    assert "initial states  fitted as nuisance in 1 episode(s)" in result.summary()
    assert "sensitivity condition number up to 1, 0 unidentified" in result.summary()
    bad = copy.deepcopy(truth)
    bad["training"][0]["initial_state"] = [
        {"type": "joint", "joint": "puck_free", "qvel": [0.0] * 6}]
    with pytest.raises(CalibrationRequestError, match=r"training\[0\]\.initial_state_fit: "
                                                      r"joint 'puck_free' of initial_state is "
                                                      r"not a hinge or slide joint"):
        load_calibration_request(crig.write_request(tmp_path, bad, "bad.yaml"))


def test_second_pass_keeps_the_request_start_and_coordinates(tmp_path: Path) -> None:
    """The second pass restarts at the first fit without rewriting the parameters: a
    normalized_linear parameter without nominal keeps the request's initial value as its
    coordinate origin (value == initial + coordinate * scale), and optimizer.start /
    initial_objective describe the request's initial values (the first pass)."""
    import _calibration_rig as crig

    manifest = crig.write_rig(tmp_path)
    doc = crig.request_doc(manifest)
    doc["parameters"][0].update(parameterization="normalized_linear", nominal=None,
                                coordinate_scale=0.01)
    del doc["parameters"][0]["nominal"]
    episode = doc["training"][0]
    episode["initial_state"] = [{"type": "joint", "joint": "shaft", "qvel": [3.0]}]
    episode["signals"]["speed"]["samples"] = crig.samples([5 * k for k in range(1, 41)])
    truth = crig.synthesize(tmp_path, doc, {"damping": 0.05})
    truth["training"][0]["initial_state"][0]["qvel"] = [3.2]
    truth["training"][0]["initial_state_fit"] = ["qvel"]
    result = run_calibration(crig.write_request(tmp_path, truth, "fit.yaml"))
    entry = result.document["parameters"][0]
    assert entry["initial"] == 0.02
    assert entry["value"] == pytest.approx(0.02 + entry["coordinate"] * 0.01, rel=1e-12)
    assert entry["value"] == pytest.approx(0.05, rel=1e-5)
    optimizer = result.document["optimizer"]
    assert optimizer["start"] == {"damping": 0.02}
    section = result.document["initial_state_fit"]
    # the initial objective is the first pass's, at the request's initial values: far above
    # the second pass's, which started at the first fit
    assert optimizer["initial_objective"] > 100 * section["second_pass"]["initial_objective"]


def test_offsets_use_the_projections_truncated_svd() -> None:
    """The reported correction is the one the projection applied: r + S δ == apply(r) even
    when S is numerically rank deficient (a singular value under the projection's cut-off but
    above lstsq's default), and the coordinates loading on the null space are unidentified."""
    from fibril_calibration.model.initial_state_fit import Coordinate, InitialStateProjection, step

    rng = np.random.default_rng(3)
    a = rng.normal(size=200)
    b = rng.normal(size=200)
    u, _ = np.linalg.qr(np.column_stack([a, b, rng.normal(size=200)]))
    # three coordinates: the first two act only through their sum (s_min ~ 1e-12 s0)
    s = np.diag([5.0, 2.0, 5e-12])
    v = np.linalg.qr(np.array([[1.0, 0.0, 1.0], [1.0, 0.0, -1.0], [0.0, 1.0, 0.0]]))[0]
    sensitivity = u @ s @ v.T
    coords = tuple(Coordinate(i, f"j{i}", "qvel") for i in range(3))
    projection = InitialStateProjection.from_sensitivity(coords, sensitivity, [1e-5] * 3)
    assert projection.rank == 2
    r = rng.normal(size=200)
    delta = projection.offsets(r)
    np.testing.assert_allclose(r + sensitivity @ delta, projection.apply(r), atol=1e-9)
    assert np.abs(delta).max() < 10  # lstsq(rcond=None) would divide by 5e-12
    assert projection.identified.tolist() == [False, False, True]
    assert projection.condition_number > 1e10
    assert step("qpos", 0.5) == 1e-6 and step("qpos", -3.0) == pytest.approx(3e-6)
    assert step("qvel", 20.0) == pytest.approx(2e-4)


def test_degrees_of_freedom_are_corrected_for_the_nuisance_states(tmp_path: Path) -> None:
    """50 Hz rows, 0.1 s windows: 12 residuals per window, 4 of whose degrees of freedom go to
    the nuisance initial states. The plain RMS of the projected residuals is biased low
    (~sqrt(8/12)); the dof-corrected one, used by the verdict, the residual variance and the
    scores, is the noise's."""
    import csv

    manifest = rig.write_arm(tmp_path)
    duration = 4.0
    rng = np.random.default_rng(11)
    times = np.arange(0, round(duration * 50)) * 20_000_000
    torques = rng.uniform(-0.4, 0.4, (times.size, 2))
    q, v = rig.truth(manifest, times, torques, duration)
    path = tmp_path / "log50.csv"
    with path.open("w", newline="") as out:
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(["t_s", "tau1", "tau2", "q1", "q2", "dq1", "dq2"])
        for n in range(times.size + 1):
            tick = 20 * n
            row = torques[min(n, times.size - 1)]
            writer.writerow([f"{n * 0.02:.2f}", *map(repr, row.tolist()),
                             *map(repr, (q[tick] + rng.normal(0, Q_SD, 2)).tolist()),
                             *map(repr, (v[tick] + rng.normal(0, DQ_SD, 2)).tolist())])
    doc = rig.request(manifest, {"path": str(path), "time_column": "t_s"},
                      windows={"every": 0.1}, csv_log=True)
    episode = doc["training"][0]
    episode["signals"]["q"].update(residual_scale=Q_SD,
                                   scale_semantics="measurement_standard_deviation")
    episode["initial_state_fit"] = ["qpos", "qvel"]
    doc["execution"] = {"max_parallelism": 1}
    doc["objective"] = {"standardized_gaussian_residuals": True}
    doc["fit"] = {"max_training_rms": 0.9}
    result = run_calibration(rig.write_request(tmp_path, doc, "fit50.yaml"))
    summary = result.document["training_summary"]["aggregate"]
    m, removed = summary["count"], summary["nuisance_degrees_of_freedom"]
    assert (m, removed) == (40 * 12, 40 * 4)
    assert summary["rms"] < 0.88  # biased low: a third of the degrees of freedom are gone
    assert summary["rms_dof_corrected"] == pytest.approx(summary["rms"] * np.sqrt(m / (m - removed)))
    assert 0.88 < summary["rms_dof_corrected"] < 1.12
    covariance = result.document["local_identifiability"]["covariance"]
    assert covariance["residual_degrees_of_freedom"] == m - 2 - removed
    assert covariance["residual_variance_estimate"] == pytest.approx(
        summary["sse"] / (m - 2 - removed))
    fit = result.document["fit"]
    assert fit["measurements"]["training_rms"] == summary["rms_dof_corrected"]
    assert fit["measurements"]["training_rms_uncorrected"] == summary["rms"]
    assert "dof_corrected" in fit["measurements"]["rms_basis"]
    assert fit["verdict"] == "no_plausible_fit" and "training_rms_exceeded" in fit["reasons"]
    fitted = result.document["scores"]["fitted"]["training"]
    assert fitted["nuisance_degrees_of_freedom"] == removed
    assert fitted["standardized_rms_dof_corrected"] == pytest.approx(
        fitted["standardized_rms"] * np.sqrt(m / (m - removed)))
    assert "corrected for 160 nuisance degree(s) of freedom" in result.summary()


def test_a_failing_sensitivity_rollout_counts_and_names_the_perturbed_state(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import _calibration_rig as crig
    from fibril_calibration.errors import EvaluationError
    from fibril_calibration.solve.problem import CalibrationProblem

    manifest = crig.write_rig(tmp_path)
    doc = crig.request_doc(manifest)
    doc["training"][0]["initial_state"] = [{"type": "joint", "joint": "shaft", "qvel": [3.0]}]
    doc["training"][0]["initial_state_fit"] = ["qvel"]
    request = load_calibration_request(crig.write_request(tmp_path, doc, "fail.yaml"))
    rollout = CalibrationProblem._rollout

    def failing(self: CalibrationProblem, plan: object, schedule: Any) -> np.ndarray:
        if schedule.episode.initial_state[0]["qvel"] != [3.0]:
            raise EvaluationError("rollout diverged")
        return rollout(self, plan, schedule)

    monkeypatch.setattr(CalibrationProblem, "_rollout", failing)
    with CalibrationProblem(request) as problem:
        with pytest.raises(EvaluationError, match=r"initial_state_fit sensitivity of episode "
                                                  r"'ep1': the rollout from the perturbed "
                                                  r"initial state shaft.qvel \+ 3e-05 failed: "
                                                  r"rollout diverged"):
            problem.refresh_initial_state_fit(np.array([0.02]))
        assert problem.statistics.failures == 1
