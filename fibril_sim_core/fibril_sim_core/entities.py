"""Entities: the model's bodies as a simulator API names them (simulation_interfaces).

Reading an entity's state (world pose and twist) never touches the instance's MjData: the state
x(t) is copied into a scratch MjData whose kinematics and velocities are computed there (the
instance's own derived quantities belong to x(t-1), see instance.py).

Setting an entity's state is an input like any other: an ExternalInput from the reserved source
``fibril_sim/entity_state`` (payload type ``fibril_sim/entity_state/v1``) is checked at
enqueue, committed at a tick boundary by the ingress and traced with its acceptance order, so a
run that moved a body replays exactly. Only bodies that can be placed are accepted: a body whose
only joint is a free joint, or a mocap body.

Payload: ``{"body": NAME, "position": [x, y, z], "orientation": [w, x, y, z],
"linear_velocity": [vx, vy, vz], "angular_velocity": [wx, wy, wz]}`` in the world frame; each
key but ``body`` is optional (absent: that part of the state is kept). MuJoCo's free joint
keeps its angular velocity in the body frame: it is rotated there on commit.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass

import mujoco
import numpy as np
import numpy.typing as npt

from ._document import Node
from .schema import short

ENTITY_SOURCE = "fibril_sim/entity_state"
ENTITY_PAYLOAD_TYPE = "fibril_sim/entity_state/v1"
_KEYS = {"body": 0, "position": 3, "orientation": 4, "linear_velocity": 3,
         "angular_velocity": 3}
_FREE = int(mujoco.mjtJoint.mjJNT_FREE)


@dataclass(frozen=True, slots=True)
class EntityCommand:
    """A checked entity-state payload: what to set on one placeable body."""

    body: str
    body_id: int
    position: tuple[float, ...] | None = None
    orientation: tuple[float, ...] | None = None  # unit quaternion, w x y z
    linear_velocity: tuple[float, ...] | None = None
    angular_velocity: tuple[float, ...] | None = None  # world frame


@dataclass(frozen=True, slots=True)
class EntityState:
    """A body's world pose and twist at one time (quaternion w x y z; twist in the world
    frame, linear velocity of the body frame's origin)."""

    name: str
    position: tuple[float, float, float]
    orientation: tuple[float, float, float, float]
    linear_velocity: tuple[float, float, float]
    angular_velocity: tuple[float, float, float]


def body_names(model: mujoco.MjModel) -> tuple[str, ...]:
    """Every body's name ("world" for body 0, ``body_<id>`` for an unnamed one)."""
    names = []
    for body in range(model.nbody):
        name = mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_BODY, body)
        names.append(name or ("world" if body == 0 else f"body_{body}"))
    return tuple(names)


def placeable(model: mujoco.MjModel, body: int) -> bool:
    """Whether a body's pose can be set: its only joint is free, or it is a mocap body."""
    if model.body_mocapid[body] >= 0:
        return True
    return int(model.body_jntnum[body]) == 1 and \
        int(model.jnt_type[model.body_jntadr[body]]) == _FREE


class Entities:
    """The bodies of one model: names, reading states, checking and applying commands."""

    def __init__(self, model: mujoco.MjModel) -> None:
        self.model = model
        self.names = body_names(model)
        self._ids = {name: i for i, name in enumerate(self.names)}
        self._scratch: mujoco.MjData | None = None
        self._velocity = np.zeros(6)

    def body_id(self, name: object) -> int:
        index = self._ids.get(name) if isinstance(name, str) else None
        if index is None:
            raise ValueError(f"no body {short(name)} in the model; bodies: "
                             f"{', '.join(self.names)}")
        return index

    # ------------------------------------------------------------------ reading
    def states(self, data: mujoco.MjData, names: list[str] | tuple[str, ...] | None = None
               ) -> list[EntityState]:
        """World poses and twists of ``names`` (every body when None) at the state of
        ``data`` (its qpos / qvel / mocap, not its derived quantities)."""
        ids = [self.body_id(n) for n in names] if names is not None else range(self.model.nbody)
        model = self.model
        scratch = self._scratch
        if scratch is None:
            scratch = self._scratch = mujoco.MjData(model)
        scratch.qpos[:] = data.qpos
        scratch.qvel[:] = data.qvel
        scratch.mocap_pos[:] = data.mocap_pos
        scratch.mocap_quat[:] = data.mocap_quat
        mujoco.mj_kinematics(model, scratch)
        mujoco.mj_comPos(model, scratch)
        mujoco.mj_comVel(model, scratch)
        out = []
        velocity = self._velocity
        for body in ids:
            mujoco.mj_objectVelocity(model, scratch, mujoco.mjtObj.mjOBJ_BODY, body, velocity, 0)
            out.append(EntityState(
                self.names[body], _triple(scratch.xpos[body]),
                _quad(scratch.xquat[body]),
                _triple(velocity[3:]), _triple(velocity[:3])))
        return out

    # ------------------------------------------------------------------ setting
    def parse(self, payload: Mapping[str, Node]) -> EntityCommand:
        """Check an entity-state payload; raise ValueError naming the bad key or value."""
        extra = sorted(str(k)[:60] for k in set(payload) - set(_KEYS))
        if extra:
            raise ValueError(f"unknown payload key(s) {', '.join(extra[:5])}; expected "
                             f"{', '.join(_KEYS)}")
        if "body" not in payload:
            raise ValueError("payload 'body' is required (the body to place)")
        body = self.body_id(payload["body"])
        if not placeable(self.model, body):
            movable = [n for i, n in enumerate(self.names) if placeable(self.model, i)]
            raise ValueError(f"body {self.names[body]!r} cannot be placed (only a body whose "
                             f"one joint is free, or a mocap body); placeable: "
                             f"{', '.join(movable) or 'none'}")
        values: dict[str, tuple[float, ...] | None] = {}
        for key, width in _KEYS.items():
            if key == "body":
                continue
            value = payload.get(key)
            values[key] = None if value is None else _vector(key, value, width)
        orientation = values["orientation"]
        if orientation is not None:
            norm = math.sqrt(sum(v * v for v in orientation))
            if not norm > 1e-9:
                raise ValueError("payload 'orientation' must be a non-zero quaternion [w, x, "
                                 "y, z]")
            values["orientation"] = tuple(v / norm for v in orientation)
        if self.model.body_mocapid[body] >= 0 and (
                values["linear_velocity"] is not None or values["angular_velocity"] is not None):
            raise ValueError(f"body {self.names[body]!r} is a mocap body: it has a pose, no "
                             f"velocity")
        return EntityCommand(self.names[body], body, **values)

    def apply(self, data: mujoco.MjData, command: EntityCommand) -> None:
        """Write the command into the state (owner thread, at a tick boundary)."""
        model = self.model
        mocap = int(model.body_mocapid[command.body_id])
        if mocap >= 0:
            if command.position is not None:
                data.mocap_pos[mocap] = command.position
            if command.orientation is not None:
                data.mocap_quat[mocap] = command.orientation
            return
        joint = int(model.body_jntadr[command.body_id])
        qpos, dof = int(model.jnt_qposadr[joint]), int(model.jnt_dofadr[joint])
        if command.position is not None:
            data.qpos[qpos:qpos + 3] = command.position
        if command.orientation is not None:
            data.qpos[qpos + 3:qpos + 7] = command.orientation
        if command.linear_velocity is not None:
            data.qvel[dof:dof + 3] = command.linear_velocity
        if command.angular_velocity is not None:
            rotation = np.empty(9)
            mujoco.mju_quat2Mat(rotation, data.qpos[qpos + 3:qpos + 7])
            data.qvel[dof + 3:dof + 6] = rotation.reshape(3, 3).T @ np.asarray(
                command.angular_velocity)


def _vector(key: str, value: Node, width: int) -> tuple[float, ...]:
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Collection) \
            or len(value) != width:
        raise ValueError(f"payload {key!r} must be a list of {width} numbers, got {short(value)}")
    out = []
    for item in value:
        if isinstance(item, bool) or not isinstance(item, (int, float)) or \
                not math.isfinite(item):
            raise ValueError(f"payload {key!r} must hold finite numbers, got {short(value)}")
        out.append(float(item))
    return tuple(out)


def _triple(values: npt.NDArray[np.float64]) -> tuple[float, float, float]:
    return (float(values[0]), float(values[1]), float(values[2]))


def _quad(values: npt.NDArray[np.float64]) -> tuple[float, float, float, float]:
    return (float(values[0]), float(values[1]), float(values[2]), float(values[3]))
