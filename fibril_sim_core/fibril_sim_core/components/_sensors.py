"""Adding hidden MuJoCo sensors to the spec, so devices read MuJoCo's own sensor pipeline."""

from __future__ import annotations

import mujoco

from .. import schema as s
from .base import internal_name

_LOOKUP = {
    mujoco.mjtObj.mjOBJ_JOINT: ("joint", "joints"),
    mujoco.mjtObj.mjOBJ_SITE: ("site", "sites"),
    mujoco.mjtObj.mjOBJ_XBODY: ("body", "bodies"),
    mujoco.mjtObj.mjOBJ_BODY: ("body", "bodies"),
    mujoco.mjtObj.mjOBJ_ACTUATOR: ("actuator", "actuators"),
    mujoco.mjtObj.mjOBJ_CAMERA: ("camera", "cameras"),
    mujoco.mjtObj.mjOBJ_GEOM: ("geom", "geoms"),
    mujoco.mjtObj.mjOBJ_SENSOR: ("sensor", "sensors"),
}


def require_object(spec: mujoco.MjSpec, objtype: mujoco.mjtObj, name: str,
                   where: s.Where) -> None:
    """Fail with the known names when the MJCF has no such object."""
    kind, attribute = _LOOKUP[objtype]
    names = [item.name for item in getattr(spec, attribute) if item.name]
    if name not in names:
        shown = ", ".join(names[:12]) + (" ..." if len(names) > 12 else "")
        raise where.fail(f"no MuJoCo {kind} named {name!r} in the model"
                         + (f"; known: {shown}" if names else ""))


def require_scalar_joint(spec: mujoco.MjSpec, name: str, where: s.Where) -> None:
    """The joint exists and is a hinge or slide (one position value)."""
    require_object(spec, mujoco.mjtObj.mjOBJ_JOINT, name, where)
    if spec.joint(name).type not in (mujoco.mjtJoint.mjJNT_HINGE, mujoco.mjtJoint.mjJNT_SLIDE):
        raise where.fail(f"joint {name!r} is not a hinge or slide joint")


def add_sensor(spec: mujoco.MjSpec, component_id: str, what: str, sensor: mujoco.mjtSensor,
               objtype: mujoco.mjtObj, objname: str) -> str:
    name = internal_name(component_id, what)
    added = spec.add_sensor(name=name, type=sensor, objtype=objtype, objname=objname)
    if sensor == mujoco.mjtSensor.mjSENS_RANGEFINDER:
        added.intprm[0] = 1  # report the distance only, as the MJCF default does
    return name
