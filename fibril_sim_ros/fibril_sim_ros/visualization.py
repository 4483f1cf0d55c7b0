"""The scene's geoms as a ``visualization_msgs/MarkerArray``, for models whose URDF will not do.

Each marker sits in its body's TF frame and is ``frame_locked``, so RViz and Foxglove move it
with ``/tf``: the array can be published once (transient local) and stays right. Namespaces are
the frame names; ids count up from 0 within a namespace in the order given, so the same
markers always get the same ids. Primitives are CUBE, SPHERE and CYLINDER (an ellipsoid is a
SPHERE with unequal scales, a plane a thin CUBE, a capsule a CYLINDER plus two SPHERE caps);
a mesh is a MESH_RESOURCE with the file's URI (``file://`` or ``package://``) and the geom's
colour. The markers come from ``fibril_sim_core.robot_description.geom_markers`` (any object
with the same fields will do: this module never imports mujoco).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Protocol

from builtin_interfaces.msg import Time
from geometry_msgs.msg import Point, Quaternion, Vector3
from std_msgs.msg import ColorRGBA
from visualization_msgs.msg import Marker, MarkerArray


class GeomShape(Protocol):
    """A geom as ``geom_markers`` describes it (pose in the frame; quaternion w x y z)."""

    @property
    def frame(self) -> str: ...
    @property
    def kind(self) -> str: ...
    @property
    def scale(self) -> Sequence[float]: ...
    @property
    def position(self) -> Sequence[float]: ...
    @property
    def orientation(self) -> Sequence[float]: ...
    @property
    def rgba(self) -> Sequence[float]: ...
    @property
    def mesh_uri(self) -> str | None: ...


_PRIMITIVES = {"box": Marker.CUBE, "plane": Marker.CUBE, "sphere": Marker.SPHERE,
               "ellipsoid": Marker.SPHERE, "cylinder": Marker.CYLINDER,
               "capsule": Marker.CYLINDER, "mesh": Marker.MESH_RESOURCE}


def marker_array(markers: Iterable[GeomShape], stamp_ns: int = 0) -> MarkerArray:
    """The MarkerArray of ``markers`` stamped ``stamp_ns`` (0: use the latest transforms)."""
    stamp = Time(sec=stamp_ns // 1_000_000_000, nanosec=stamp_ns % 1_000_000_000)
    ids: dict[str, int] = {}
    out = MarkerArray()
    for shape in markers:
        if shape.kind not in _PRIMITIVES:
            raise ValueError(f"marker_array: geom kind {shape.kind!r} in frame {shape.frame!r} "
                             f"is not one of {', '.join(sorted(_PRIMITIVES))}")
        if shape.kind == "mesh" and not shape.mesh_uri:
            raise ValueError(f"marker_array: mesh marker in frame {shape.frame!r} has no URI")
        sx, sy, sz = (float(v) for v in shape.scale)
        parts = [(shape.position, (sx, sy, sz), _PRIMITIVES[shape.kind])]
        if shape.kind == "capsule":  # the caps: spheres of the cylinder's diameter at its ends
            parts += [(_offset(shape.position, shape.orientation, sign * sz / 2),
                       (sx, sy, sx), Marker.SPHERE) for sign in (1.0, -1.0)]
        for position, scale, kind in parts:
            marker = Marker()
            marker.header.frame_id = shape.frame
            marker.header.stamp = stamp
            marker.ns = shape.frame
            marker.id = ids.get(shape.frame, 0)
            ids[shape.frame] = marker.id + 1
            marker.type = kind
            marker.action = Marker.ADD
            marker.frame_locked = True
            marker.pose.position = Point(x=float(position[0]), y=float(position[1]),
                                         z=float(position[2]))
            w, x, y, z = (float(v) for v in shape.orientation)
            marker.pose.orientation = Quaternion(x=x, y=y, z=z, w=w)
            marker.scale = Vector3(x=scale[0], y=scale[1], z=scale[2])
            r, g, b, a = (float(v) for v in shape.rgba)
            marker.color = ColorRGBA(r=r, g=g, b=b, a=a)
            if kind == Marker.MESH_RESOURCE:
                marker.mesh_resource = shape.mesh_uri or ""
                marker.mesh_use_embedded_materials = False
            out.markers.append(marker)
    return out


def _offset(position: Sequence[float], orientation: Sequence[float],
            distance: float) -> tuple[float, float, float]:
    """``position`` moved ``distance`` along the local z axis of ``orientation`` (w x y z)."""
    w, x, y, z = (float(v) for v in orientation)
    axis = (2 * (x * z + w * y), 2 * (y * z - w * x), 1 - 2 * (x * x + y * y))
    px, py, pz = (float(v) for v in position)
    return px + distance * axis[0], py + distance * axis[1], pz + distance * axis[2]
