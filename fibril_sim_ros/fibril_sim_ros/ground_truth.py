"""Ground truth as ROS users expect it: ``/joint_states``, ``/tf`` and ``/tf_static``.

The host takes the state observations on the simulated clock's grid (see
``fibril_sim_core.runtime.observation``); this module only turns them into messages: a
``sensor_msgs/JointState`` with every hinge and slide joint (position, velocity, effort = the
actuator force on its dof), and a ``tf2_msgs/TFMessage`` with every moving body's pose relative
to its parent body. Bodies fixed to their parent go once to ``/tf_static``. Frame names are the
MuJoCo body names (the world body is ``world``), with an optional prefix, the same names the
robot description's links carry.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from builtin_interfaces.msg import Time
from geometry_msgs.msg import TransformStamped
from sensor_msgs.msg import JointState

from fibril_sim_core.records import StateObservation
from fibril_sim_core.runtime.observation import StateLayout, StaticFrame

try:  # tf2_msgs: a ROS installation's, or built from the vendored definitions by make setup
    from tf2_msgs.msg import TFMessage
except ImportError:  # pragma: no cover - reported by the node (no /tf then)
    TFMessage = None


def tf_available() -> bool:
    return TFMessage is not None


def _stamp(ns: int) -> Time:
    return Time(sec=ns // 1_000_000_000, nanosec=ns % 1_000_000_000)


def joint_state(layout: StateLayout, observation: StateObservation) -> JointState:
    msg = JointState()
    msg.header.stamp = _stamp(observation.session_time_ns)
    msg.name = list(layout.joint_names)
    msg.position = observation.joint_position.tolist()
    msg.velocity = observation.joint_velocity.tolist()
    msg.effort = observation.joint_effort.tolist()
    return msg


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
    """Builds the TF messages of one model's frames, with ``prefix`` on every name."""

    def __init__(self, layout: StateLayout, prefix: str = "") -> None:
        self._children = [prefix + name for name in layout.frame_names]
        self._parents = [prefix + name for name in layout.frame_parents]
        self._prefix = prefix

    def moving(self, observation: StateObservation) -> Any:
        """The moving bodies' transforms at the observation's time."""
        stamp = _stamp(observation.session_time_ns)
        positions = observation.frame_position.tolist()
        orientations = observation.frame_orientation.tolist()
        return TFMessage(transforms=[
            _transform(stamp, parent, child, position, orientation)
            for parent, child, position, orientation
            in zip(self._parents, self._children, positions, orientations, strict=True)])

    def static(self, frames: Sequence[StaticFrame], stamp_ns: int) -> Any:
        """The fixed bodies' transforms (published once, transient local)."""
        stamp = _stamp(stamp_ns)
        prefix = self._prefix
        return TFMessage(transforms=[
            _transform(stamp, prefix + f.parent, prefix + f.name, f.position, f.orientation)
            for f in frames])
