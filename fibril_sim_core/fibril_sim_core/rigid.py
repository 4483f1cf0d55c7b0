"""Rigid transforms (a position and a unit quaternion, w x y z: MuJoCo's order), composed
with MuJoCo's own quaternion routines."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import mujoco
import numpy as np


@dataclass(frozen=True, slots=True)
class Pose:
    """A rigid transform: position and unit quaternion (w x y z)."""

    position: tuple[float, ...] | np.ndarray = (0.0, 0.0, 0.0)
    quaternion: tuple[float, ...] | np.ndarray = (1.0, 0.0, 0.0, 0.0)

    def __mul__(self, other: Pose) -> Pose:
        position = np.zeros(3)
        mujoco.mju_rotVecQuat(position, np.asarray(other.position, float),
                              np.asarray(self.quaternion, float))
        quaternion = np.zeros(4)
        mujoco.mju_mulQuat(quaternion, np.asarray(self.quaternion, float),
                           np.asarray(other.quaternion, float))
        return Pose(position + np.asarray(self.position, float), quaternion)

    def inverse(self) -> Pose:
        quaternion = np.zeros(4)
        mujoco.mju_negQuat(quaternion, np.asarray(self.quaternion, float))
        position = np.zeros(3)
        mujoco.mju_rotVecQuat(position, -np.asarray(self.position, float), quaternion)
        return Pose(position, quaternion)

    def is_identity(self) -> bool:
        q = np.asarray(self.quaternion, float)
        return bool(np.allclose(self.position, 0.0, atol=1e-15) and
                    np.allclose(abs(q[0]), 1.0, atol=1e-15))


def rotation(axis: Sequence[float] | np.ndarray, angle: float) -> Pose:
    quaternion = np.zeros(4)
    mujoco.mju_axisAngle2Quat(quaternion, np.asarray(axis, float), float(angle))
    return Pose((0.0, 0.0, 0.0), quaternion)


def triple(values: Iterable[float]) -> tuple[float, float, float]:
    x, y, z = (float(v) for v in values)
    return x, y, z


def quad(values: Iterable[float]) -> tuple[float, float, float, float]:
    w, x, y, z = (float(v) for v in values)
    return w, x, y, z


def rpy(quaternion: Sequence[float] | np.ndarray) -> tuple[float, float, float]:
    """URDF roll-pitch-yaw (fixed axes x, y, z: R = Rz(yaw) Ry(pitch) Rx(roll))."""
    matrix = np.zeros(9)
    q = np.asarray(quaternion, float)
    mujoco.mju_quat2Mat(matrix, q / np.linalg.norm(q))
    r = matrix.reshape(3, 3)
    pitch = math.atan2(-r[2, 0], math.hypot(r[0, 0], r[1, 0]))
    if math.hypot(r[0, 0], r[1, 0]) < 1e-9:  # gimbal lock: yaw and roll share one axis
        return 0.0, pitch, math.atan2(-r[0, 1], r[1, 1])
    return math.atan2(r[2, 1], r[2, 2]), pitch, math.atan2(r[1, 0], r[0, 0])
