"""State observations: joint states and body frames that the host takes on the simulated clock.

The ground truth a ROS user expects beside the sensors (``/joint_states``, ``/tf``) is not a
device (no noise, no latency): the host takes it itself, on its own thread, at tick boundaries
that fall exactly on the grid ``k / rate`` of session time, so stamps are regular whatever the
load. A rate whose period is not a whole number of physics steps is refused with the nearest
valid rates.

Body frames are each body's pose relative to its parent body, from the kinematics of the state
x(t) computed on a scratch MjData (the instance's own derived quantities belong to x(t-1)).
Bodies that cannot move relative to their parent (no joint, not mocap) are the static frames:
``static_frames`` gives them once, from the model.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import mujoco
import numpy as np

from ..entities import body_names
from ..errors import InstanceError
from ..records import StateObservation

ObservationSink = Callable[[StateObservation], None]
_HINGE, _SLIDE = int(mujoco.mjtJoint.mjJNT_HINGE), int(mujoco.mjtJoint.mjJNT_SLIDE)


@dataclass(frozen=True, slots=True)
class StateLayout:
    """What a StateObservation's arrays hold, in order: the hinge and slide joints, and the
    bodies that move relative to their parent (with that parent)."""

    joint_names: tuple[str, ...]
    frame_names: tuple[str, ...]  # moving bodies
    frame_parents: tuple[str, ...]
    joint_qpos: tuple[int, ...] = field(repr=False, default=())
    joint_dof: tuple[int, ...] = field(repr=False, default=())
    frame_bodies: tuple[int, ...] = field(repr=False, default=())
    parent_bodies: tuple[int, ...] = field(repr=False, default=())

    @classmethod
    def of(cls, model: mujoco.MjModel) -> StateLayout:
        joints = [j for j in range(model.njnt) if int(model.jnt_type[j]) in (_HINGE, _SLIDE)]
        names = body_names(model)
        moving = [b for b in range(1, model.nbody) if _moves(model, b)]
        parents = [int(model.body_parentid[b]) for b in moving]
        return cls(
            tuple(mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_JOINT, j) or f"joint_{j}"
                  for j in joints),
            tuple(names[b] for b in moving), tuple(names[p] for p in parents),
            tuple(int(model.jnt_qposadr[j]) for j in joints),
            tuple(int(model.jnt_dofadr[j]) for j in joints), tuple(moving), tuple(parents))


@dataclass(frozen=True, slots=True)
class StaticFrame:
    """A body fixed to its parent: its pose there (quaternion w x y z)."""

    name: str
    parent: str
    position: tuple[float, float, float]
    orientation: tuple[float, float, float, float]


def static_frames(model: mujoco.MjModel) -> tuple[StaticFrame, ...]:
    """Every body (but the world) that cannot move relative to its parent."""
    names = body_names(model)
    return tuple(
        StaticFrame(names[b], names[int(model.body_parentid[b])],
                    tuple(float(v) for v in model.body_pos[b]),  # type: ignore[arg-type]
                    tuple(float(v) for v in model.body_quat[b]))  # type: ignore[arg-type]
        for b in range(1, model.nbody) if not _moves(model, b))


def _moves(model: mujoco.MjModel, body: int) -> bool:
    return int(model.body_jntnum[body]) > 0 or int(model.body_mocapid[body]) >= 0


@dataclass(frozen=True, slots=True)
class ObservationRequest:
    """A stream of state observations at ``rate_hz`` of simulated time: joint states
    (``joints``) and/or the moving bodies' frames (``frames``)."""

    rate_hz: float
    joints: bool = True
    frames: bool = False

    def period_ticks(self, timestep_ns: int) -> int:
        """The period in whole ticks; InstanceError naming the nearest valid rates."""
        rate = self.rate_hz
        if isinstance(rate, bool) or not isinstance(rate, (int, float)) or \
                not 0 < rate < math.inf:
            raise InstanceError(f"observe: rate_hz must be a number > 0, got {rate!r}")
        exact = 1e9 / rate / timestep_ns
        ticks = round(exact)
        if ticks < 1 or abs(exact - ticks) > 1e-6 * exact:
            below, above = max(1, math.floor(exact)), max(1, math.ceil(exact))
            valid = sorted({1e9 / (t * timestep_ns) for t in (below, above)}, reverse=True)
            raise InstanceError(
                f"observe: rate {rate:g} Hz is not a whole number of physics steps of "
                f"{timestep_ns / 1e9:g} s; nearest valid rates: "
                f"{' or '.join(f'{v:g} Hz' for v in valid)}")
        return ticks


@dataclass
class _Stream:
    id: int
    request: ObservationRequest
    sink: ObservationSink
    period_ticks: int
    due: int  # session tick of the next observation
    owner: Any = None


@dataclass
class ObservationStreams:
    """The host's observation streams (host thread only)."""

    model: mujoco.MjModel
    timestep_ns: int
    streams: dict[int, _Stream] = field(default_factory=dict)
    _next_id: int = 1
    _layout: StateLayout | None = None
    _scratch: mujoco.MjData | None = None

    @property
    def active(self) -> bool:
        return bool(self.streams)

    @property
    def layout(self) -> StateLayout:
        if self._layout is None:
            self._layout = StateLayout.of(self.model)
        return self._layout

    def add(self, request: ObservationRequest, sink: ObservationSink, session_tick: int,
            owner: Any = None) -> int:
        """Start a stream; its first observation is at the first grid tick from now on."""
        period = request.period_ticks(self.timestep_ns)
        stream = _Stream(self._next_id, request, sink, period,
                         -(-session_tick // period) * period, owner)
        self.streams[stream.id] = stream
        self._next_id += 1
        return stream.id

    def remove(self, stream_id: int) -> bool:
        return self.streams.pop(stream_id, None) is not None

    def remove_owned_by(self, owner: Any) -> None:
        for stream_id in [s.id for s in self.streams.values() if s.owner is owner]:
            del self.streams[stream_id]

    def ticks_until_due(self, session_tick: int) -> int:
        return min(s.due for s in self.streams.values()) - session_tick

    def observe_due(self, episode: int, tick: int, session_tick: int,
                    data: mujoco.MjData) -> None:
        frames: tuple[np.ndarray, np.ndarray] | None = None
        joints: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        layout = self.layout
        empty = np.empty(0)
        for stream in list(self.streams.values()):
            if stream.due > session_tick:
                continue
            request = stream.request
            if request.joints and joints is None:
                dofs = list(layout.joint_dof)
                joints = (data.qpos[list(layout.joint_qpos)].copy(), data.qvel[dofs].copy(),
                          data.qfrc_actuator[dofs].copy())
            if request.frames and frames is None:
                frames = self._frames(data)
            stream.due = session_tick + stream.period_ticks
            position, velocity, effort = joints if request.joints else (empty,) * 3
            stream.sink(StateObservation(
                stream.id, episode, tick, session_tick * self.timestep_ns, position, velocity,
                effort, *(frames if request.frames else (empty, empty))))

    def _frames(self, data: mujoco.MjData) -> tuple[np.ndarray, np.ndarray]:
        """Poses of the moving bodies relative to their parents, at x(t)."""
        model, layout = self.model, self.layout
        scratch = self._scratch
        if scratch is None:
            scratch = self._scratch = mujoco.MjData(model)
        scratch.qpos[:] = data.qpos
        scratch.mocap_pos[:] = data.mocap_pos
        scratch.mocap_quat[:] = data.mocap_quat
        mujoco.mj_kinematics(model, scratch)
        bodies, parents = list(layout.frame_bodies), list(layout.parent_bodies)
        child_pos, child_quat = scratch.xpos[bodies], scratch.xquat[bodies]
        parent_pos, parent_quat = scratch.xpos[parents], scratch.xquat[parents]
        rotation = scratch.xmat[parents].reshape(-1, 3, 3)
        position = np.einsum("nji,nj->ni", rotation, child_pos - parent_pos)
        return position, _multiply(_conjugate(parent_quat), child_quat)


def _conjugate(q: np.ndarray) -> np.ndarray:
    return q * np.array([1.0, -1.0, -1.0, -1.0])


def _multiply(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Hamilton products of rows of quaternions (w x y z)."""
    aw, ax, ay, az = a.T
    bw, bx, by, bz = b.T
    return np.stack([aw * bw - ax * bx - ay * by - az * bz,
                     aw * bx + ax * bw + ay * bz - az * by,
                     aw * by - ax * bz + ay * bw + az * bx,
                     aw * bz + ax * by - ay * bx + az * bw], axis=1)
