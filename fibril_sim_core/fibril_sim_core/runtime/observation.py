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
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeAlias

import mujoco
import numpy as np

from ..entities import body_names
from ..errors import InstanceError
from ..records import StateObservation
from .streams import StreamTable

ObservationSink = Callable[[StateObservation], None]
#: What ``_views`` fetches once: the instance's MjData and its qpos, qvel, qfrc_actuator,
#: mocap_pos and mocap_quat; the scratch MjData's qpos, mocap_pos, mocap_quat, xpos, xquat and
#: xmat; the frame and parent bodies, the frame count, the joints' qpos and dof indices, and
#: whether the model has mocap bodies.
_Views: TypeAlias = tuple[
    mujoco.MjData, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray,
    np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray,
    np.ndarray, int, np.ndarray, np.ndarray, bool]
_HINGE, _SLIDE = int(mujoco.mjtJoint.mjJNT_HINGE), int(mujoco.mjtJoint.mjJNT_SLIDE)
_EMPTY = np.empty(0)


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
                    _floats3(model.body_pos[b]), _floats4(model.body_quat[b]))
        for b in range(1, model.nbody) if not _moves(model, b))


def _floats3(values: np.ndarray) -> tuple[float, float, float]:
    x, y, z = values
    return float(x), float(y), float(z)


def _floats4(values: np.ndarray) -> tuple[float, float, float, float]:
    w, x, y, z = values
    return float(w), float(x), float(y), float(z)


def _moves(model: mujoco.MjModel, body: int) -> bool:
    return int(model.body_jntnum[body]) > 0 or int(model.body_mocapid[body]) >= 0


@dataclass(frozen=True, slots=True)
class ObservationRequest:
    """A stream of state observations at ``rate_hz`` of simulated time: joint states
    (``joints``) and/or the moving bodies' frames (``frames``).

    ``fast_wall_rate_hz`` (0: no limit): while the host runs free as fast as possible, at most
    this many observations a second of wall time; the grid points in between are skipped (the
    stamps stay on the grid). At a hundred times real time, 50 Hz of simulated time is
    thousands of messages a second, each a DDS write costing more than a physics step, for a
    viewer that draws 60 a second. Stepping (lockstep, ``step(n)``) and real time never skip."""

    rate_hz: float
    joints: bool = True
    frames: bool = False
    fast_wall_rate_hz: float = 0.0

    def period_ticks(self, timestep_ns: int) -> int:
        """The period in whole ticks; InstanceError naming the nearest valid rates."""
        rate: object = self.rate_hz  # (whatever a client sent)
        if isinstance(rate, bool) or not isinstance(rate, (int, float)) or \
                not 0 < rate < math.inf:
            raise InstanceError(f"observe: rate_hz must be a number > 0, got {rate!r}")
        exact = 1e9 / rate / timestep_ns
        if not exact < 2 ** 63:
            raise InstanceError(f"observe: rate {rate:g} Hz is a period longer than 2**63 - 1 "
                                f"physics steps")
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
    owner: object = None
    interval_s: float = 0.0  # free running as fast as possible: at least this much wall time
    last_wall: float = -math.inf
    last_tick: int = 0


@dataclass
class ObservationStreams(StreamTable[_Stream]):
    """The host's observation streams (host thread only)."""

    model: mujoco.MjModel
    timestep_ns: int
    streams: dict[int, _Stream] = field(default_factory=dict)
    _next_id: int = 1
    _layout: StateLayout | None = None
    _scratch: mujoco.MjData | None = None
    _cached: _Views | None = None  # see _views

    @property
    def layout(self) -> StateLayout:
        if self._layout is None:
            self._layout = StateLayout.of(self.model)
        return self._layout

    def add(self, request: ObservationRequest, sink: ObservationSink, session_tick: int,
            owner: object = None) -> int:
        """Start a stream; its first observation is at the first grid tick from now on."""
        period = request.period_ticks(self.timestep_ns)
        limit: object = request.fast_wall_rate_hz  # (whatever a client sent)
        if isinstance(limit, bool) or not isinstance(limit, (int, float)) or \
                not 0 <= limit < math.inf:
            raise InstanceError(f"observe: fast_wall_rate_hz must be a number >= 0 (0: no "
                                f"limit), got {limit!r}")
        return self._keep(_Stream(self._next_id, request, sink, period,
                                  -(-session_tick // period) * period, owner,
                                  1.0 / limit if limit else 0.0))

    def prepare(self, data: mujoco.MjData) -> None:
        """Make what observing needs (the layout, a scratch MjData) now rather than at the
        first observation: in real time the first is due as soon as the stream starts."""
        self._views(data)

    def observe_due(self, episode: int, tick: int, session_tick: int,
                    data: mujoco.MjData, free_running: bool = False) -> None:
        """Observe for the streams due at ``session_tick``; ``free_running``: the host runs
        free as fast as possible (streams with a wall-rate limit skip grid points)."""
        frames: tuple[np.ndarray, np.ndarray] | None = None
        joints: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        empty = _EMPTY
        now = time.perf_counter() if free_running else 0.0
        for stream in list(self.streams.values()):
            if stream.due > session_tick:
                continue
            period = stream.period_ticks
            if free_running and stream.interval_s:
                elapsed = now - stream.last_wall
                if elapsed < stream.interval_s:
                    # Not yet: the next check about when the interval will have passed, at
                    # the pace since the last observation (a check at every grid point was
                    # ~8 host stops per observation on the Panda, half its ground truth's
                    # cost as fast as possible).
                    ticks = session_tick - stream.last_tick
                    ahead = (int((stream.interval_s - elapsed) * ticks / elapsed) // period
                             if elapsed > 0 else 0)
                    stream.due = session_tick + max(1, ahead) * period
                    continue
                # The next stop: the grid point about one interval of wall time ahead at the
                # pace of the last one (the host stops stepping at every due tick, and a stop
                # costs more than the steps between two grid points).
                ticks = session_tick - stream.last_tick
                ahead = int(stream.interval_s * ticks / elapsed) // period if elapsed < 1 \
                    else 0
                stream.last_wall, stream.last_tick = now, session_tick
                stream.due = session_tick + max(1, ahead) * period
            else:
                stream.due = session_tick + period
            request = stream.request
            position = velocity = effort = frame_position = frame_orientation = empty
            if request.joints:
                if joints is None:
                    joints = self._joints(data)
                position, velocity, effort = joints
            if request.frames:
                if frames is None:
                    frames = self._frames(data)
                frame_position, frame_orientation = frames
            stream.sink(StateObservation(
                stream.id, episode, tick, session_tick * self.timestep_ns, position, velocity,
                effort, frame_position, frame_orientation))

    def _views(self, data: mujoco.MjData) -> _Views:
        """The arrays read at every observation, fetched once (an MjData attribute makes a
        new view each time): the instance's, the scratch MjData's, the index arrays."""
        views = self._cached
        if views is None or views[0] is not data:
            model, layout = self.model, self.layout
            scratch = self._scratch = mujoco.MjData(model)
            pairs = np.array([*layout.frame_bodies, *layout.parent_bodies], dtype=np.intp)
            views = self._cached = (
                data, data.qpos, data.qvel, data.qfrc_actuator, data.mocap_pos, data.mocap_quat,
                scratch.qpos, scratch.mocap_pos, scratch.mocap_quat, scratch.xpos,
                scratch.xquat, scratch.xmat, pairs, len(layout.frame_bodies),
                np.array(layout.joint_qpos, dtype=np.intp),
                np.array(layout.joint_dof, dtype=np.intp), model.nmocap > 0)
        return views

    def _joints(self, data: mujoco.MjData) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        views = self._views(data)
        qpos, qvel, force, dofs = views[1], views[2], views[3], views[15]
        return qpos.take(views[14]), qvel.take(dofs), force.take(dofs)

    def _frames(self, data: mujoco.MjData) -> tuple[np.ndarray, np.ndarray]:
        """Poses of the moving bodies relative to their parents, at x(t)."""
        (_, qpos, _, _, mocap_pos, mocap_quat, scratch_qpos, scratch_mocap_pos,
         scratch_mocap_quat, xpos, xquat, xmat, pairs, n, _, _, mocap) = self._views(data)
        scratch_qpos[:] = qpos
        if mocap:
            scratch_mocap_pos[:] = mocap_pos
            scratch_mocap_quat[:] = mocap_quat
        mujoco.mj_kinematics(self.model, self._scratch)
        pos, quat = xpos.take(pairs, axis=0), xquat.take(pairs, axis=0)
        rotation = xmat.take(pairs[n:], axis=0).reshape(n, 3, 3)
        # (matmul, not einsum: a few bodies' worth of einsum costs ~25 us a call in set-up)
        position = np.matmul((pos[:n] - pos[n:])[:, None, :], rotation)[:, 0, :]
        parent, child = quat[n:], quat[:n]
        outer = (parent[:, :, None] * child[:, None, :]).reshape(n, 16)
        return position, outer @ _RELATIVE_FLAT


def _relative_product() -> np.ndarray:
    """T with ``conj(a) * b = einsum("ijk,j,k->i", T, a, b)`` for quaternions w x y z (the
    Hamilton product with ``a`` conjugated), so a batch is one einsum."""
    table = np.zeros((4, 4, 4))
    basis = np.eye(4)
    for j in range(4):
        for k in range(4):
            a, b = basis[j] * np.array([1.0, -1.0, -1.0, -1.0]), basis[k]
            table[:, j, k] = [a[0] * b[0] - a[1] * b[1] - a[2] * b[2] - a[3] * b[3],
                              a[0] * b[1] + a[1] * b[0] + a[2] * b[3] - a[3] * b[2],
                              a[0] * b[2] - a[1] * b[3] + a[2] * b[0] + a[3] * b[1],
                              a[0] * b[3] + a[1] * b[2] - a[2] * b[1] + a[3] * b[0]]
    return table


_RELATIVE = _relative_product()
# The same table as one matrix: the batch of outer products a_j b_k (flattened j k) times it.
_RELATIVE_FLAT = np.ascontiguousarray(_RELATIVE.reshape(4, 16).T)
