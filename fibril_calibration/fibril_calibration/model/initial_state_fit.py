"""Initial states fitted as nuisance parameters (``initial_state_fit`` of an episode).

A window cut from a recording starts from the LOGGED state, whose measurement noise the model
does not carry: an open-loop rollout from a slightly wrong velocity drifts, and the residuals at
the true parameters are then not the measurement noise alone (a standardized RMS of 2-4 instead
of 1 on the Panda example), so Gaussian intervals would be wrong. ``initial_state_fit: [qpos,
qvel]`` makes the listed parts of every hinge / slide joint entry of the episode's
``initial_state`` nuisance parameters: estimated per episode, reported as nuisance, never part of
the physical result or the fitted overlay.

How (variable projection, linearised): the sensitivity ``S = d r / d x0`` of the episode's
standardized residuals to its initial-state coordinates is computed by forward differences
(one extra rollout per coordinate) at a reference parameter point; every evaluation then uses
``r - S S⁺ r``, the residuals at the best initial state ``x0 + δ`` with ``δ = -S⁺ r`` to first
order. Minimising those over the physical parameters is minimising over both, and their
Jacobian is the physical Jacobian with the initial-state directions projected out, so the
physical intervals account for the unknown initial states (the Schur complement of the joint
information matrix). ``S`` depends weakly on the parameters; ``run_calibration`` computes it at
the initial values, fits, recomputes it at the fit and fits again from there (the result's
``initial_state_fit.passes``), so the final analysis uses the sensitivity at the fitted point.
The projection removes ``rank(S)`` degrees of freedom per episode (reported, and taken off the
residual degrees of freedom by the analysis and the fit verdict); a coordinate that loads on
S's numerical null space is reported as not identified (its offset is the minimum-norm one). A
``CalibrationProblem`` driven directly (not through ``run_calibration``) takes ``S`` at its first
evaluation of a scope, or wherever ``refresh_initial_state_fit`` is called.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, TypedDict

import mujoco
import numpy as np

from fibril_sim_core import schema as s

from .._json import JsonObject

PARTS = ("qpos", "qvel")
# Forward-difference steps: ``BASE_STEPS[part] * max(1, |x0|)`` (rad or m, rad/s or m/s):
# far above a rollout's rounding (which grows with the value, hence the ``|x0|`` factor), far
# below any measurement noise worth fitting. Forward differences (one rollout per coordinate,
# not two): S enters only through its column space and the offsets; an O(h) relative error
# in S moves the projected residuals by that fraction of their nuisance component, orders of
# magnitude under the noise, and central differences would double the sensitivity rollouts.
# The result reports the steps and the conditioning of S per episode (``describe``).
BASE_STEPS = {"qpos": 1e-6, "qvel": 1e-5}
# A coordinate whose axis has a component above this in S's numerical null space is not
# identified by the episode (the analysis module's criterion for parameters).
NULL_LOADING_TOLERANCE = 1e-6


def step(part: str, value: float) -> float:
    """The forward-difference step of one coordinate at its value ``value``."""
    return BASE_STEPS[part] * max(1.0, abs(float(value)))


class InitialStateEntry(TypedDict, total=False):
    """One checked ``initial_state`` entry: a joint's qpos / qvel, a mocap body's pos / quat,
    or an actuator's activation (``type`` says which)."""

    type: str
    joint: str
    body: str
    actuator: str
    qpos: list[float]
    qvel: list[float]
    pos: list[float]
    quat: list[float]
    act: list[float]


class _Episode(Protocol):
    """An episode as read here (the request's ``EpisodeSpec``, a layer above)."""

    @property
    def initial_state(self) -> tuple[InitialStateEntry, ...]: ...


@dataclass(frozen=True)
class Coordinate:
    """One nuisance coordinate: ``initial_state[entry][part]`` of a hinge or slide joint."""

    entry: int
    joint: str
    part: str

    @property
    def label(self) -> str:
        return f"{self.joint}.{self.part}"


def parse(value: object, where: s.Where, initial_state: Sequence[InitialStateEntry],
          model: mujoco.MjModel) -> tuple[str, ...]:
    """``initial_state_fit``: a list of ``qpos`` / ``qvel``; every joint entry of the episode's
    initial_state that sets such a part must be a hinge or slide joint (one value)."""
    parts = s.sequence(value, where)
    out: list[str] = []
    for i, item in enumerate(parts):
        part = s.string(item, where.key(i))
        if part not in PARTS:
            raise where.key(i).fail(f"must be one of {', '.join(PARTS)}, got {part!r}")
        if part in out:
            raise where.key(i).fail(f"{part!r} is listed twice")
        out.append(part)
    if not out:
        raise where.fail(f"list at least one of {', '.join(PARTS)}")
    found = False
    for entry in initial_state:
        if entry.get("type") != "joint" or not any(p in entry for p in out):
            continue
        jid = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_JOINT, entry["joint"])
        if int(model.jnt_type[jid]) not in (2, 3):
            raise where.fail(f"joint {entry['joint']!r} of initial_state is not a hinge or "
                             f"slide joint; initial_state_fit fits one-valued joints only")
        found = True
    if not found:
        raise where.fail(f"initial_state has no joint entry setting {' or '.join(out)}: "
                         f"nothing to fit (add e.g. {{type: joint, joint: J, qpos_from: ..., "
                         f"qvel_from: ...}})")
    return tuple(out)


def coordinates(initial_state: Sequence[InitialStateEntry],
                parts: Sequence[str]) -> tuple[Coordinate, ...]:
    return tuple(Coordinate(i, entry["joint"], part)
                 for i, entry in enumerate(initial_state) if entry.get("type") == "joint"
                 for part in PARTS if part in parts and part in entry)


def perturbed(initial_state: Sequence[InitialStateEntry], coordinate: Coordinate,
              step: float) -> tuple[InitialStateEntry, ...]:
    """The initial state with one coordinate moved by ``step``."""
    state = list(initial_state)
    entry = state[coordinate.entry].copy()
    moved = [float(part_values(entry, coordinate.part)[0]) + step]
    if coordinate.part == "qpos":
        entry["qpos"] = moved
    else:
        entry["qvel"] = moved
    state[coordinate.entry] = entry
    return tuple(state)


def part_values(entry: InitialStateEntry, part: str) -> list[float]:
    """A joint entry's ``qpos`` or ``qvel`` (``PARTS``)."""
    return entry["qpos"] if part == "qpos" else entry["qvel"]


@dataclass(frozen=True)
class InitialStateProjection:
    """The linearised nuisance elimination of one episode.

    One truncated SVD of ``S`` serves both the projection (``apply``) and the offsets
    (``offsets``), so the correction reported is exactly the one the residuals received;
    singular values at or below ``1e-12 * max(shape) * s0`` are dropped."""

    coordinates: tuple[Coordinate, ...]
    sensitivity: np.ndarray  # (residuals, coordinates): d r / d x0
    basis: np.ndarray  # U_r: orthonormal basis of the sensitivity's column space
    singular_values: np.ndarray  # all of them, descending
    directions: np.ndarray  # V^T (coordinates, coordinates)
    rank: int
    steps: tuple[float, ...] = ()

    @classmethod
    def from_sensitivity(cls, coords: tuple[Coordinate, ...], sensitivity: np.ndarray,
                         steps: Sequence[float] = ()) -> InitialStateProjection:
        u, singular, vt = np.linalg.svd(sensitivity, full_matrices=False)
        tolerance = (singular[0] if singular.size else 0.0) * max(sensitivity.shape) * 1e-12
        rank = int(np.sum(singular > tolerance))
        return cls(coords, sensitivity, np.ascontiguousarray(u[:, :rank]), singular, vt, rank,
                   tuple(float(h) for h in steps))

    def apply(self, residuals: np.ndarray) -> np.ndarray:
        """The residuals at the best initial state (to first order)."""
        result: np.ndarray = residuals - self.basis @ (self.basis.T @ residuals)
        return result

    def offsets(self, residuals: np.ndarray) -> np.ndarray:
        """``δ = -S⁺ r`` with the projection's truncated SVD (the minimum-norm correction)."""
        r = self.rank
        result: np.ndarray = -(self.directions[:r].T
                               @ ((self.basis.T @ residuals) / self.singular_values[:r]))
        return result

    @property
    def identified(self) -> np.ndarray:
        """Per coordinate: False when its axis loads on S's numerical null space."""
        null = self.directions[self.rank:]
        if not null.size:
            return np.ones(len(self.coordinates), dtype=bool)
        result: np.ndarray = np.linalg.norm(null, axis=0) <= NULL_LOADING_TOLERANCE
        return result

    @property
    def condition_number(self) -> float:
        """``s_max / s_min`` of S with unit-norm columns (coordinates in different units
        compare), infinite when a column or a combination has no effect."""
        norms = np.linalg.norm(self.sensitivity, axis=0)
        if not norms.size or not np.all(norms > 0.0):
            return float("inf")
        s = np.linalg.svd(self.sensitivity / norms, compute_uv=False)
        return float(s[0] / s[-1]) if s[-1] > 0.0 else float("inf")


def describe(episode: _Episode, projection: InitialStateProjection, raw: np.ndarray
             ) -> JsonObject:
    """The nuisance estimates of one episode (result document)."""
    delta = projection.offsets(raw)
    identified = projection.identified
    estimates: JsonObject = {}
    steps = projection.steps or (None,) * len(projection.coordinates)
    for coordinate, d, ok, h in zip(projection.coordinates, delta.tolist(), identified.tolist(),
                                    steps):
        logged = float(part_values(episode.initial_state[coordinate.entry],
                                   coordinate.part)[0])
        estimates[coordinate.label] = {"logged": logged, "offset": d, "estimate": logged + d,
                                       "identified": bool(ok), "step": h}
    condition = projection.condition_number
    return {"rank": projection.rank,
            "unidentified": [c.label for c, ok in zip(projection.coordinates, identified)
                             if not ok],
            "sensitivity": {
                "singular_values": [float(v) for v in projection.singular_values],
                "condition_number": condition if np.isfinite(condition) else None,
                "condition_number_infinite": bool(not np.isfinite(condition)),
                "columns": "unit-norm (coordinates in different units compare)",
                "differences": "forward"},
            "coordinates": estimates}
