"""Inline reference samples: the plain-array path (a notebook's thousands of samples) returns
exactly what the checked path does, and every sample it cannot vouch for goes to the checked
path, whose error names the sample."""

from __future__ import annotations

import numpy as np
import pytest

from fibril_calibration import CalibrationRequestError
from fibril_calibration.model.observations import ObservationSpec
from fibril_calibration.request.inline_samples import inline_samples
from fibril_sim_core import schema as s

OBSERVATION = ObservationSpec("q", "qpos", None, (0, 1), None, 1, None, ("qpos[0]", "qpos[1]"))
WHERE = s.Where("request.yaml", "training[0].signals.q.samples", CalibrationRequestError)


def _checked(samples: list[dict[str, object]]) -> tuple[np.ndarray, np.ndarray]:
    """The checked path: rows as tuples, which the plain path never takes."""
    return inline_samples([{**item, "values": tuple(item["values"])}  # type: ignore[arg-type]
                           for item in samples], WHERE, OBSERVATION)


def test_plain_samples_equal_the_checked_path() -> None:
    rng = np.random.default_rng(3)
    times = np.cumsum(rng.integers(1, 10**6, 500))
    samples = [{"time_ns": int(t), "values": [float(a), int(b)]}
               for t, a, b in zip(times, rng.normal(size=500) * 1e5,
                                  rng.integers(-10**6, 10**6, 500))]
    fast_t, fast_v = inline_samples(samples, WHERE, OBSERVATION)
    slow_t, slow_v = _checked(samples)
    assert fast_t.dtype == slow_t.dtype == np.int64 and fast_v.dtype == slow_v.dtype
    np.testing.assert_array_equal(fast_t, slow_t)
    np.testing.assert_array_equal(fast_v, slow_v)


@pytest.mark.parametrize(("bad", "message"), [
    ({"time_ns": 30, "values": [True, 1.0]}, r"samples\[2\]\.values\[0\]: expected a number"),
    ({"time_ns": 30, "values": ["1.0", 1.0]}, r"samples\[2\]\.values\[0\]: expected a number"),
    ({"time_ns": 30, "values": [float("nan"), 1.0]}, r"values\[0\]: expected a finite number"),
    ({"time_ns": 30, "values": [2e12, 1.0]}, r"values\[0\]: 2000000000000.0 cannot be a recorded"),
    ({"time_ns": 30, "values": [10**400, 1.0]}, r"values\[0\]: expected a finite number"),
    ({"time_ns": 20, "values": [1.0, 1.0]}, r"samples\[2\]\.time_ns: time_ns must increase"),
    ({"time_ns": 30.0, "values": [1.0, 1.0]}, r"samples\[2\]\.time_ns: expected an integer"),
    ({"time_ns": 2**64, "values": [1.0, 1.0]}, r"samples\[2\]\.time_ns: expected an integer"),
    ({"time_ns": 30, "values": [1.0]}, r"samples\[2\]\.values: observation 'q' .* got 1"),
    ({"time_ns": 30, "values": [1.0, 1.0], "x": 1}, r"samples\[2\]\.x: unknown key"),
])
def test_a_bad_sample_is_named_by_the_checked_path(bad: dict[str, object], message: str) -> None:
    samples = [{"time_ns": 10, "values": [0.0, 0.0]}, {"time_ns": 20, "values": [1.0, 2.0]}, bad]
    with pytest.raises(CalibrationRequestError, match=message):
        inline_samples(samples, WHERE, OBSERVATION)


def test_a_negative_first_time_is_named() -> None:
    with pytest.raises(CalibrationRequestError, match=r"samples\[0\]\.time_ns: expected an "
                                                      r"integer >= 0"):
        inline_samples([{"time_ns": -1, "values": [0.0, 0.0]}], WHERE, OBSERVATION)
