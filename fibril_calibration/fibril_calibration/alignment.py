"""Time alignment of simulated samples to a signal's reference timestamps, and the quaternion
algebra body-orientation residuals need.

The reference sample times fix the residual layout; each policy picks (or interpolates) one
simulated value per reference time:

* ``exact``: a simulated sample stamped exactly at the reference time;
* ``linear``: linear interpolation between the simulated samples that bracket it (a sample at
  the reference time is used as is); orientations use shortest-path SLERP;
* ``zero_order_hold``: the latest simulated sample at or before it;
* ``nearest``: the simulated sample closest in time (a tie goes to the earlier sample).

When several simulated samples share a timestamp, the last one emitted is the value "at" that
time. A reference time the policy cannot serve is an ``EvaluationError``: a point is never
dropped, so the residual dimension never depends on the candidate parameters.
"""

from __future__ import annotations

from typing import Literal

import numpy as np

from .errors import EvaluationError

Alignment = Literal["exact", "linear", "zero_order_hold", "nearest"]
ALIGNMENTS: tuple[str, ...] = ("exact", "linear", "zero_order_hold", "nearest")


def align(reference_times: np.ndarray, sim_times: np.ndarray, sim_values: np.ndarray,
          policy: str, *, quaternion: bool = False, label: str = "signal") -> np.ndarray:
    """Simulated values at the reference times, ``(len(reference_times), dim)``.

    ``sim_times`` must be sorted (non-decreasing) integer nanoseconds; ``sim_values`` has one
    row per simulated sample. ``quaternion`` rows are wxyz and interpolate by SLERP.
    """
    ref = np.asarray(reference_times, dtype=np.int64)
    times = np.asarray(sim_times, dtype=np.int64)
    values = np.asarray(sim_values, dtype=np.float64)
    if values.ndim == 1:
        values = values.reshape(len(times), -1)
    if policy not in ALIGNMENTS:
        raise ValueError(f"unknown alignment {policy!r}; expected one of {', '.join(ALIGNMENTS)}")
    count = times.shape[0]
    if count == 0:
        _missing(label, policy, ref, np.zeros(len(ref), dtype=bool), times)
    right = np.searchsorted(times, ref, side="right")  # first sample after t
    at_or_before = right - 1  # last sample at or before t (-1: none)
    has_before = at_or_before >= 0
    before = np.where(has_before, at_or_before, 0)
    hit = has_before & (times[before] == ref)

    if policy == "exact":
        if not hit.all():
            _missing(label, policy, ref, hit, times)
        return values[before]
    if policy == "zero_order_hold":
        if not has_before.all():
            _missing(label, policy, ref, has_before, times)
        return values[before]

    has_after = right < count
    after = np.where(has_after, right, count - 1)
    # The last of several samples sharing the bracketing time is the value at that time.
    after = np.searchsorted(times, times[after], side="right") - 1
    if policy == "nearest":
        ok = has_before | has_after
        if not ok.all():  # pragma: no cover - count > 0 always gives a candidate
            _missing(label, policy, ref, ok, times)
        gap_before = np.where(has_before, ref - times[before], np.iinfo(np.int64).max)
        gap_after = np.where(has_after, times[after] - ref, np.iinfo(np.int64).max)
        take_after = gap_after < gap_before
        return np.where(take_after[:, None], values[after], values[before])

    # linear
    ok = hit | (has_before & has_after)
    if not ok.all():
        _missing(label, policy, ref, ok, times)
    t0 = times[before]
    t1 = times[after]
    span = np.where(hit, 1, t1 - t0).astype(np.float64)
    u = np.where(hit, 0.0, (ref - t0).astype(np.float64) / span)
    v0 = values[before]
    v1 = values[after]
    if quaternion:
        out = quat_slerp(v0, v1, u)
        out[hit] = v0[hit]
        return out
    out = v0 + u[:, None] * (v1 - v0)
    out[hit] = v0[hit]
    return out


def _missing(label: str, policy: str, ref: np.ndarray, ok: np.ndarray, times: np.ndarray) -> None:
    index = int(np.flatnonzero(~ok)[0]) if (~ok).any() else 0
    missing = int((~ok).sum()) if ok.shape[0] else len(ref)
    if times.shape[0]:
        span = (f"the {times.shape[0]} simulated sample(s) span {int(times[0])}.."
                f"{int(times[-1])} ns")
    else:
        span = "the rollout produced no simulated sample"
    need = {"exact": "a simulated sample at exactly that time",
            "zero_order_hold": "a simulated sample at or before it",
            "linear": "simulated samples on both sides of it (extend horizon_steps)",
            "nearest": "at least one simulated sample"}[policy]
    raise EvaluationError(
        f"{label}: {policy} alignment of reference sample {index} (time_ns {int(ref[index])}) "
        f"needs {need}; {span}; {missing} reference sample(s) cannot be aligned")


# --------------------------------------------------------------------------- quaternions

def quat_normalize(q: np.ndarray) -> np.ndarray:
    q = np.asarray(q, dtype=np.float64)
    result: np.ndarray = q / np.linalg.norm(q, axis=-1, keepdims=True)
    return result


def quat_conjugate(q: np.ndarray) -> np.ndarray:
    q = np.asarray(q, dtype=np.float64)
    result: np.ndarray = q * np.array([1.0, -1.0, -1.0, -1.0])
    return result


def quat_multiply(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Hamilton product of wxyz quaternions (broadcasting over leading axes)."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    aw, ax, ay, az = np.moveaxis(a, -1, 0)
    bw, bx, by, bz = np.moveaxis(b, -1, 0)
    return np.stack((aw * bw - ax * bx - ay * by - az * bz,
                     aw * bx + ax * bw + ay * bz - az * by,
                     aw * by - ax * bz + ay * bw + az * bx,
                     aw * bz + ax * by - ay * bx + az * bw), axis=-1)


def quat_slerp(q0: np.ndarray, q1: np.ndarray, u: np.ndarray) -> np.ndarray:
    """Shortest-path spherical interpolation from ``q0`` (u = 0) to ``q1`` (u = 1), row-wise."""
    q0 = quat_normalize(np.atleast_2d(q0))
    q1 = quat_normalize(np.atleast_2d(q1))
    u = np.asarray(u, dtype=np.float64).reshape(-1, 1)
    dot = np.sum(q0 * q1, axis=-1, keepdims=True)
    q1 = np.where(dot < 0.0, -q1, q1)  # q and -q are the same orientation: take the short arc
    dot = np.abs(dot)
    theta = np.arccos(np.clip(dot, -1.0, 1.0))
    sin_theta = np.sin(theta)
    small = sin_theta < 1e-9
    safe = np.where(small, 1.0, sin_theta)
    w0 = np.where(small, 1.0 - u, np.sin((1.0 - u) * theta) / safe)
    w1 = np.where(small, u, np.sin(u * theta) / safe)
    return quat_normalize(w0 * q0 + w1 * q1)


def quat_error(simulated: np.ndarray, recorded: np.ndarray) -> np.ndarray:
    """3-D rotation-vector error ``log(conj(q_rec) ⊗ q_sim)`` in the recorded body frame.

    ``q`` and ``-q`` are the same orientation, so the error is the shortest rotation (angle in
    [0, π]) and is invariant to the sign of either quaternion.
    """
    delta = quat_multiply(quat_conjugate(quat_normalize(recorded)), quat_normalize(simulated))
    delta = np.where(delta[..., :1] < 0.0, -delta, delta)
    w = np.clip(delta[..., 0], -1.0, 1.0)
    v = delta[..., 1:]
    sin_half = np.linalg.norm(v, axis=-1)
    angle = 2.0 * np.arctan2(sin_half, w)
    small = sin_half < 1e-12
    scale = np.where(small, 2.0, angle / np.where(small, 1.0, sin_half))
    return v * scale[..., None]
