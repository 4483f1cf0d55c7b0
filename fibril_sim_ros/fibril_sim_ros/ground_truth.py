"""Ground truth as ROS users expect it: ``/joint_states``, ``/tf`` and ``/tf_static``.

The host takes the state observations on the simulated clock's grid (see
``fibril_sim_core.runtime.observation``); this module only turns them into messages: a
``sensor_msgs/JointState`` with every hinge and slide joint (position, velocity, effort = the
actuator force on its dof), and a ``tf2_msgs/TFMessage`` with every moving body's pose relative
to its parent body, and every link between two joints of one body relative to that body (the
robot description's intermediate links, ``JointChainFrame``). Bodies fixed to their parent go
once to ``/tf_static``. Frame names are the
MuJoCo body names (the world body is ``world``), with an optional prefix, the same names the
robot description's links carry.

Both messages have a fixed layout for a model (names and counts never change), so they are
packed from CDR templates (``cdr.Template``): as fast as possible, 50 Hz of simulated time is
thousands of messages a second, and building message objects would cost the node a third of
its speed.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from builtin_interfaces.msg import Time
from geometry_msgs.msg import TransformStamped
from sensor_msgs.msg import JointState

from fibril_sim_core.records import StateObservation
from fibril_sim_core.robot_description import JointChainFrame
from fibril_sim_core.runtime.observation import StateLayout, StaticFrame

from .cdr import Packer, Template

try:  # tf2_msgs: a ROS installation's, or built from the vendored definitions by make setup
    from tf2_msgs.msg import TFMessage
except ImportError:  # pragma: no cover - reported by the node (no /tf then)
    TFMessage = None

__all__ = ["FramePublisher", "JointStates", "TFMessage", "tf_available"]

_NS = 1_000_000_000


def tf_available() -> bool:
    return TFMessage is not None


def _stamp(ns: int) -> Time:
    return Time(sec=ns // _NS, nanosec=ns % _NS)


class JointStates:
    """Serialized ``sensor_msgs/JointState`` messages of one model's hinge and slide joints."""

    def __init__(self, layout: StateLayout) -> None:
        count = len(layout.joint_names)
        prototype = JointState(name=list(layout.joint_names))
        self._pack = Template(prototype, [("header.stamp", "time"), ("position", "f64s", count),
                                          ("velocity", "f64s", count),
                                          ("effort", "f64s", count)]).packer()

    def message(self, observation: StateObservation) -> bytes:
        ns = observation.session_time_ns
        return self._pack(ns // _NS, ns % _NS, *observation.joint_position.tolist(),
                          *observation.joint_velocity.tolist(),
                          *observation.joint_effort.tolist())


def _transform(stamp: Time, parent: str, child: str, position: Sequence[float],
               orientation: Sequence[float]) -> TransformStamped:
    """``orientation`` is w x y z (MuJoCo); geometry_msgs holds x y z w."""
    item = TransformStamped()
    item.header.stamp = stamp
    item.header.frame_id = parent
    item.child_frame_id = child
    translation, rotation = item.transform.translation, item.transform.rotation
    translation.x, translation.y, translation.z = (float(v) for v in position)
    rotation.w, rotation.x, rotation.y, rotation.z = (float(v) for v in orientation)
    return item


class FramePublisher:
    """The TF messages of one model's frames, with ``prefix`` on every name; ``chains`` (the
    links between the joints of one body) need the observations' joint positions."""

    def __init__(self, layout: StateLayout, prefix: str = "",
                 chains: Sequence[JointChainFrame] = ()) -> None:
        self._prefix = prefix
        self._chains = tuple(chains)
        # A chain's pose takes the model's qpos: the observed joints' positions go there.
        self._qpos = np.zeros(max(layout.joint_qpos, default=-1) + 1)
        self._joint_qpos = np.array(layout.joint_qpos, dtype=np.intp)
        children = [prefix + name for name in layout.frame_names]
        parents = [prefix + name for name in layout.frame_parents]
        children += [prefix + chain.name for chain in self._chains]
        parents += [prefix + chain.parent for chain in self._chains]
        prototype = TFMessage(transforms=[
            _transform(Time(), parent, child, (0.0, 0.0, 0.0), (1.0, 0.0, 0.0, 0.0))
            for parent, child in zip(parents, children, strict=True)])
        fields: list[tuple[str, str]] = []
        for k in range(len(children)):
            fields.append((f"transforms.{k}.header.stamp", "time"))
            fields += [(f"transforms.{k}.transform.translation.{a}", "f64") for a in "xyz"]
            fields += [(f"transforms.{k}.transform.rotation.{a}", "f64") for a in "xyzw"]
        self._pack: Packer | None = Template(prototype, fields).packer() if children else None

    @property
    def needs_joints(self) -> bool:
        """Whether ``moving`` needs the observations' joint positions."""
        return bool(self._chains)

    def moving(self, observation: StateObservation) -> bytes | None:
        """The moving bodies' transforms at the observation's time (None: there is none)."""
        if self._pack is None:
            return None
        ns = observation.session_time_ns
        sec, nanosec = ns // _NS, ns % _NS
        values: list[float] = []
        for (x, y, z), (w, qx, qy, qz) in zip(observation.frame_position.tolist(),
                                              observation.frame_orientation.tolist()):
            values += (sec, nanosec, x, y, z, qx, qy, qz, w)
        if self._chains:
            qpos = self._qpos
            qpos[self._joint_qpos] = observation.joint_position
            for chain in self._chains:
                (x, y, z), (w, qx, qy, qz) = chain.pose(qpos)
                values += (sec, nanosec, x, y, z, qx, qy, qz, w)
        return self._pack(*values)

    def static(self, frames: Sequence[StaticFrame], stamp_ns: int) -> TFMessage:
        """The fixed bodies' transforms (published once, transient local)."""
        stamp = _stamp(stamp_ns)
        prefix = self._prefix
        return TFMessage(transforms=[
            _transform(stamp, prefix + f.parent, prefix + f.name, f.position, f.orientation)
            for f in frames])
