"""Alignment policies, the snapshot observation grid and orientation residuals (SLERP, q ≡ -q)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fibril_calibration.alignment import (align, quat_error, quat_multiply, quat_normalize,
                                          quat_slerp)
from fibril_calibration.solve.episodes import grid_ticks
from fibril_calibration.errors import EvaluationError

SIM_T = np.array([0, 10, 20, 30])
SIM_V = np.array([[0.0, 1.0], [10.0, 2.0], [20.0, 4.0], [30.0, 8.0]])


def test_exact_picks_the_sample_at_each_reference_time() -> None:
    out = align(np.array([10, 30]), SIM_T, SIM_V, "exact")
    np.testing.assert_array_equal(out, [[10.0, 2.0], [30.0, 8.0]])


def test_exact_missing_sample_fails_instead_of_dropping_it() -> None:
    with pytest.raises(EvaluationError) as caught:
        align(np.array([10, 15, 30]), SIM_T, SIM_V, "exact", label="episode 'e' signal 's'")
    message = str(caught.value)
    assert message.startswith("episode 'e' signal 's': exact alignment of reference sample 1 "
                              "(time_ns 15)")
    assert "span 0..30 ns" in message and "1 reference sample(s) cannot be aligned" in message


def test_linear_interpolates_between_brackets_and_keeps_hits() -> None:
    out = align(np.array([0, 5, 20, 27]), SIM_T, SIM_V, "linear")
    np.testing.assert_allclose(out, [[0.0, 1.0], [5.0, 1.5], [20.0, 4.0], [27.0, 6.8]])


def test_linear_needs_a_sample_after_the_reference_time() -> None:
    with pytest.raises(EvaluationError, match="linear alignment .* both sides of it "
                                              r"\(extend horizon_steps\)"):
        align(np.array([31]), SIM_T, SIM_V, "linear")
    with pytest.raises(EvaluationError, match="linear alignment"):
        align(np.array([5]), np.array([10, 20]), SIM_V[:2], "linear")


def test_zero_order_hold_takes_the_latest_sample_at_or_before() -> None:
    out = align(np.array([0, 9, 10, 35]), SIM_T, SIM_V, "zero_order_hold")
    np.testing.assert_array_equal(out[:, 0], [0.0, 0.0, 10.0, 30.0])
    with pytest.raises(EvaluationError, match="zero_order_hold alignment .* at or before it"):
        align(np.array([5]), np.array([10, 20]), SIM_V[:2], "zero_order_hold")


def test_nearest_takes_the_closest_sample_and_ties_go_earlier() -> None:
    out = align(np.array([0, 4, 6, 15, 25, 99]), SIM_T, SIM_V, "nearest")
    np.testing.assert_array_equal(out[:, 0], [0.0, 0.0, 10.0, 10.0, 20.0, 30.0])


def test_no_simulated_samples_is_an_error_for_every_policy() -> None:
    for policy in ("exact", "linear", "zero_order_hold", "nearest"):
        with pytest.raises(EvaluationError, match="produced no simulated sample"):
            align(np.array([1]), np.empty(0, dtype=np.int64), np.empty((0, 2)), policy)


def test_duplicate_timestamps_take_the_last_emitted_value() -> None:
    times = np.array([0, 10, 10, 20])
    values = np.array([[0.0], [1.0], [2.0], [3.0]])
    assert align(np.array([10]), times, values, "exact")[0, 0] == 2.0
    assert align(np.array([15]), times, values, "zero_order_hold")[0, 0] == 2.0
    assert align(np.array([5]), times, values, "linear")[0, 0] == 1.0  # toward the last at 10
    assert align(np.array([12]), times, values, "nearest")[0, 0] == 2.0


def test_grid_ticks_cover_what_each_policy_needs() -> None:
    ms = 1_000_000
    times = np.array([0, 3 * ms, 4 * ms, 5 * ms, 9 * ms])
    assert grid_ticks(times, "linear", 2, ms).tolist() == [0, 2, 4, 6, 8, 10]
    assert grid_ticks(times, "zero_order_hold", 2, ms).tolist() == [0, 2, 4, 8]
    assert grid_ticks(times, "nearest", 2, ms).tolist() == [0, 2, 4, 8]  # 3, 5, 9: ties → earlier
    assert grid_ticks(np.array([0, 4 * ms, 8 * ms]), "exact", 4, ms).tolist() == [0, 4, 8]
    assert grid_ticks(np.array([2_600_000]), "nearest", 1, ms).tolist() == [3]


# ------------------------------------------------------------------ orientations
def _axis_angle(axis: tuple[float, float, float], angle: float) -> np.ndarray:
    a = np.asarray(axis, dtype=float)
    a = a / np.linalg.norm(a)
    return np.concatenate(([math.cos(angle / 2)], math.sin(angle / 2) * a))


def test_quaternion_error_is_the_rotation_vector_and_ignores_sign() -> None:
    recorded = _axis_angle((0, 0, 1), 0.3)
    simulated = quat_multiply(recorded, _axis_angle((1, 0, 0), 0.2))  # body-frame 0.2 about x
    error = quat_error(simulated[None], recorded[None])[0]
    np.testing.assert_allclose(error, [0.2, 0.0, 0.0], atol=1e-12)
    for sim_sign in (1, -1):
        for rec_sign in (1, -1):
            np.testing.assert_allclose(
                quat_error(sim_sign * simulated[None], rec_sign * recorded[None])[0],
                [0.2, 0.0, 0.0], atol=1e-12)
    np.testing.assert_allclose(quat_error(recorded[None], recorded[None]), [[0, 0, 0]],
                               atol=1e-15)


def test_quaternion_error_takes_the_short_way_round() -> None:
    recorded = _axis_angle((0, 1, 0), 0.0)
    simulated = _axis_angle((0, 1, 0), 2 * math.pi - 0.1)  # the same as -0.1
    np.testing.assert_allclose(quat_error(simulated[None], recorded[None])[0], [0, -0.1, 0],
                               atol=1e-12)


def test_slerp_follows_the_shortest_arc_at_constant_rate() -> None:
    q0 = _axis_angle((0, 0, 1), 0.0)
    q1 = _axis_angle((0, 0, 1), 1.0)
    for u in (0.0, 0.25, 0.5, 1.0):
        out = quat_slerp(q0[None], -q1[None], np.array([u]))[0]  # -q1: same orientation
        np.testing.assert_allclose(quat_error(out[None], _axis_angle((0, 0, 1), u)[None])[0],
                                   [0, 0, 0], atol=1e-12)
    nearly = quat_slerp(q0[None], q0[None], np.array([0.5]))[0]
    np.testing.assert_allclose(nearly, q0)


def test_linear_alignment_of_orientations_uses_slerp() -> None:
    times = np.array([0, 10])
    q0 = _axis_angle((1, 0, 0), 0.0)
    q1 = -_axis_angle((1, 0, 0), 1.2)
    out = align(np.array([5]), times, np.stack([q0, q1]), "linear", quaternion=True)
    componentwise = align(np.array([5]), times, np.stack([q0, q1]), "linear")
    np.testing.assert_allclose(quat_error(out, _axis_angle((1, 0, 0), 0.6)[None]), [[0, 0, 0]],
                               atol=1e-12)
    assert np.linalg.norm(quat_error(quat_normalize(componentwise),
                                     _axis_angle((1, 0, 0), 0.6)[None])) > 1.0
