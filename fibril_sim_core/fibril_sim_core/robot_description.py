"""Robot description: a URDF and geom markers generated from a compiled MuJoCo model.

RViz's RobotModel and Foxglove's URDF layer draw a robot from a URDF whose links are TF frames.
The URDF made here has one link per MuJoCo body, named like the TF frames the node publishes
(``body_frame_names``: the body name with an optional prefix, ``world`` for the world body,
``body_<id>`` for an unnamed body), so the drawing follows the simulated state through ``/tf``.

Rules (each chosen so that the URDF, composed at joint positions equal to MuJoCo's qpos, puts
every link exactly where MuJoCo puts the body):

- Joints. A body without joints (and not mocap) is a ``fixed`` joint named ``<link>_fixed`` at
  ``body_pos``/``body_quat``. A hinge is ``revolute`` (``continuous`` when not limited), a slide
  ``prismatic``; the URDF joint keeps the MuJoCo joint's name (the ``/joint_states`` name,
  ``joint_<id>`` when unnamed) and its position *is* MuJoCo's qpos: the joint origin is the body
  frame at qpos = 0, i.e. turned (moved) by ``-ref`` about (along) the axis from the body's
  pose at qpos0. A ball or free joint, or a mocap body, is one ``floating`` joint (named after
  the first joint, or ``<link>_mocap``): its pose comes from TF. Several hinge/slide joints in
  one body, or a hinge whose anchor is off its axis through the body origin, become a chain
  through intermediate links named after the joints (prefixed); the last link is the body.
- Limits: ``jnt_range``; an unlimited slide gets +-``UNLIMITED_SLIDE_RANGE``. Effort: the
  joint's ``actuatorfrcrange`` when limited, else the sum over the actuators driving the joint
  (directly, or through a fixed tendon times the joint's coefficient) of
  ``|gear| * max|forcerange|`` (or ``|gear| * |gain| * max|ctrlrange|`` for a plain motor);
  ``DEFAULT_EFFORT`` (0, unknown) otherwise. Velocity: MuJoCo has no joint speed limit:
  ``DEFAULT_VELOCITY`` (0, unknown). An active linear joint equality (``joint1`` follows
  ``joint2``) is a ``<mimic>`` on joint1, refs folded into the offset.
- Inertial: ``body_mass`` at ``body_ipos``/``body_iquat`` with the diagonal ``body_inertia``
  (omitted for massless bodies, the world included).
- Geometry: a geom in one of ``visual_groups`` (MuJoCo's viewer shows groups 0-2) with alpha > 0
  is a ``<visual>``; a geom that can collide (contype or conaffinity set) is a ``<collision>``.
  Box, sphere and cylinder are exact; a capsule is a cylinder plus two spheres; an ellipsoid is
  a sphere of its largest semi-axis (the markers draw it exactly); a plane is a box
  ``PLANE_THICKNESS`` thick whose top face is the plane (an infinite plane gets half-sizes of
  ``INFINITE_PLANE_HALF_SIZE``); a mesh is its file (``file://`` URI, or ``package://`` under a
  ``package_roots`` entry) with its scale, placed where MuJoCo draws it (MuJoCo recentres and
  realigns a mesh when compiling; ``mesh_pos``/``mesh_quat`` undo that). Height fields, SDFs
  and meshes without a file are left out. Colours are the geom's rgba, or its material's when
  the geom keeps the default rgba (MuJoCo's rule).

Quaternions are w x y z (MuJoCo's order) everywhere in this module.
"""

from __future__ import annotations

import copy
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import mujoco
import numpy as np

from .entities import body_names
from .errors import FibrilError
from .rigid import Pose, quad, rotation, rpy, triple
from .runtime.observation import StaticFrame

UNLIMITED_SLIDE_RANGE = 1.0e6  # m, the +- range of a prismatic joint MuJoCo leaves unlimited
DEFAULT_EFFORT = 0.0  # no actuator bound known
DEFAULT_VELOCITY = 0.0  # MuJoCo has no joint velocity limit
PLANE_THICKNESS = 0.001  # m
INFINITE_PLANE_HALF_SIZE = 10.0  # m, for a plane whose MJCF size is 0 (infinite)
VISUAL_GROUPS = (0, 1, 2)  # the geom groups MuJoCo's viewer shows by default

_HINGE, _SLIDE = int(mujoco.mjtJoint.mjJNT_HINGE), int(mujoco.mjtJoint.mjJNT_SLIDE)
_BALL, _FREE = int(mujoco.mjtJoint.mjJNT_BALL), int(mujoco.mjtJoint.mjJNT_FREE)
_G = mujoco.mjtGeom
_TRN_JOINT, _TRN_TENDON = int(mujoco.mjtTrn.mjTRN_JOINT), int(mujoco.mjtTrn.mjTRN_TENDON)
_WRAP_JOINT = int(mujoco.mjtWrap.mjWRAP_JOINT)
_EQ_JOINT = int(mujoco.mjtEq.mjEQ_JOINT)
_GAIN_FIXED, _BIAS_NONE = int(mujoco.mjtGain.mjGAIN_FIXED), int(mujoco.mjtBias.mjBIAS_NONE)
_DEFAULT_RGBA = (0.5, 0.5, 0.5, 1.0)
_ON_AXIS = 1e-12


class RobotDescriptionError(FibrilError):
    """The model cannot be described as a URDF (a name clash, a mesh file that is missing)."""


@dataclass(frozen=True, slots=True)
class GeomMarker:
    """One visible geom, as a visualization marker in its body's frame.

    ``kind`` is box, sphere, ellipsoid, cylinder, capsule, plane or mesh; ``scale`` is the
    marker scale (full extents: box and plane sizes, sphere/ellipsoid diameters, cylinder and
    capsule diameter x diameter x cylinder length (a capsule adds a sphere of that diameter at
    each end), a mesh's scale); the pose is in the body frame, quaternion w x y z; ``mesh_uri``
    is set for meshes only."""

    frame: str
    name: str
    kind: str
    scale: tuple[float, float, float]
    position: tuple[float, float, float]
    orientation: tuple[float, float, float, float]
    rgba: tuple[float, float, float, float]
    mesh_uri: str | None = None


def body_frame_names(model: mujoco.MjModel, frame_prefix: str = "") -> tuple[str, ...]:
    """The TF frame (and URDF link) name of every body, by body id."""
    return tuple(frame_prefix + name for name in body_names(model))


def urdf_from_model(model: mujoco.MjModel, *, spec: mujoco.MjSpec | None = None,
                    frame_prefix: str = "",
                    package_roots: Mapping[str, Path | str] | None = None,
                    robot_name: str | None = None,
                    visual_groups: Iterable[int] = VISUAL_GROUPS) -> str:
    """The URDF document of ``model`` (see the module docstring for the rules).

    Mesh files are found from the compiled model's paths (absolute when the model was loaded
    by absolute path); relative ones are resolved against ``spec``'s model directory (the MjSpec
    the model was compiled from) and meshdir, else against the working directory.
    ``package_roots`` maps package names to share directories: a mesh under one of them gets a
    ``package://`` URI, any other a ``file://`` URI."""
    links = _unique_body_links(model, frame_prefix)
    meshes = _MeshFiles(model, spec, package_roots)
    groups = frozenset(int(g) for g in visual_groups)
    name = robot_name or _model_name(model) or "mujoco_model"
    robot = ET.Element("robot", name=name)
    visual_names, collision_names = _Names(set()), _Names(set())
    elements = {body: _link(links[body]) for body in range(model.nbody)}
    for body in range(model.nbody):
        _inertial(model, body, elements[body])
        for geom in _body_geoms(model, body):
            _geometry(model, geom, elements[body], meshes, groups,
                      visual_names, collision_names)
    robot.extend(elements[b] for b in range(model.nbody))
    robot.extend(_joints(model, links, frame_prefix, [], []))
    ET.indent(robot)
    return '<?xml version="1.0"?>\n' + ET.tostring(robot, encoding="unicode") + "\n"


def link_frames(model: mujoco.MjModel, frame_prefix: str = "") -> tuple[StaticFrame, ...]:
    """The URDF's links that are not bodies but sit rigidly on one (the joint frame of a
    hinge whose axis misses the body origin), as fixed frames of that body (names without
    ``frame_prefix``): RViz draws a URDF only when every link has a transform, so the node
    puts these on ``/tf_static``. Links between several joints of one body move with the
    joints: see ``joint_chain_frames``."""
    rigid: list[tuple[str, str, Pose]] = []
    _joints(model, _unique_body_links(model, frame_prefix), frame_prefix, rigid, [])
    cut = len(frame_prefix)
    return tuple(StaticFrame(name[cut:], body[cut:], triple(pose.position),
                             quad(v + 0.0 for v in pose.quaternion))
                 for name, body, pose in rigid)


def geom_markers(model: mujoco.MjModel, frame_prefix: str = "", *,
                 spec: mujoco.MjSpec | None = None,
                 package_roots: Mapping[str, Path | str] | None = None,
                 visual_groups: Iterable[int] = VISUAL_GROUPS) -> tuple[GeomMarker, ...]:
    """One marker per visible geom (in ``visual_groups``, alpha > 0), in geom id order.

    A mesh without a file (or a height field, an SDF) has no marker."""
    links = body_frame_names(model, frame_prefix)
    meshes = _MeshFiles(model, spec, package_roots)
    groups = frozenset(int(g) for g in visual_groups)
    markers = []
    for geom in range(model.ngeom):
        rgba = _rgba(model, geom)
        if int(model.geom_group[geom]) not in groups or rgba[3] <= 0:
            continue
        kind, size = int(model.geom_type[geom]), model.geom_size[geom]
        pose = Pose(model.geom_pos[geom], model.geom_quat[geom])
        uri = None
        if kind == _G.mjGEOM_BOX:
            shape, scale = "box", 2 * size
        elif kind == _G.mjGEOM_SPHERE:
            shape, scale = "sphere", np.full(3, 2 * size[0])
        elif kind == _G.mjGEOM_ELLIPSOID:
            shape, scale = "ellipsoid", 2 * size
        elif kind == _G.mjGEOM_CYLINDER:
            shape, scale = "cylinder", np.array([2 * size[0], 2 * size[0], 2 * size[1]])
        elif kind == _G.mjGEOM_CAPSULE:
            shape, scale = "capsule", np.array([2 * size[0], 2 * size[0], 2 * size[1]])
        elif kind == _G.mjGEOM_PLANE:
            half = _plane_half_sizes(size)
            shape, scale = "plane", np.array([2 * half[0], 2 * half[1], PLANE_THICKNESS])
            pose = pose * Pose((0.0, 0.0, -PLANE_THICKNESS / 2))
        elif kind == _G.mjGEOM_MESH and meshes.has_file(int(model.geom_dataid[geom])):
            mesh = int(model.geom_dataid[geom])
            shape, scale, uri = "mesh", model.mesh_scale[mesh], meshes.uri(mesh)
            pose = pose * meshes.file_frame(mesh).inverse()
        else:
            continue
        markers.append(GeomMarker(
            links[int(model.geom_bodyid[geom])], _geom_name(model, geom), shape,
            triple(scale), triple(pose.position), quad(pose.quaternion), rgba, uri))
    return tuple(markers)


class _Names:
    """Unique names in one URDF namespace: a taken name gets ``_1``, ``_2``... appended."""

    def __init__(self, reserved: set[str]) -> None:
        self._taken = set(reserved)

    def claim(self, wanted: str) -> str:
        name, n = wanted, 0
        while name in self._taken:
            n += 1
            name = f"{wanted}_{n}"
        self._taken.add(name)
        return name


def _unique_body_links(model: mujoco.MjModel, prefix: str) -> tuple[str, ...]:
    links = body_frame_names(model, prefix)
    seen: dict[str, int] = {}
    for body, name in enumerate(links):
        if name.startswith("/"):
            raise RobotDescriptionError(
                f"robot description: body {body}'s frame name {name!r} starts with '/', "
                f"which tf2 refuses; drop the leading '/' from the name or the prefix")
        if name in seen:
            raise RobotDescriptionError(
                f"robot description: body {body} and body {seen[name]} are both named "
                f"{name!r} (an unnamed body is called body_<id>); rename one in the MJCF")
        seen[name] = body
    return links


def _model_name(model: mujoco.MjModel) -> str:
    return bytes(model.names[:bytes(model.names).index(b"\0")]).decode()


def _joint_name(model: mujoco.MjModel, joint: int) -> str:
    return mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_JOINT, joint) or f"joint_{joint}"


def _geom_name(model: mujoco.MjModel, geom: int) -> str:
    return mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_GEOM, geom) or f"geom_{geom}"


def _body_geoms(model: mujoco.MjModel, body: int) -> range:
    start = int(model.body_geomadr[body])
    return range(start, start + int(model.body_geomnum[body])) if start >= 0 else range(0)


def _link(name: str) -> ET.Element:
    return ET.Element("link", name=name)


def _inertial(model: mujoco.MjModel, body: int, link: ET.Element) -> None:
    mass = float(model.body_mass[body])
    if body == 0 or mass <= 0:
        return
    inertial = ET.SubElement(link, "inertial")
    inertial.append(_origin(Pose(model.body_ipos[body], model.body_iquat[body])))
    ET.SubElement(inertial, "mass", value=_num(mass))
    ixx, iyy, izz = (float(v) for v in model.body_inertia[body])
    ET.SubElement(inertial, "inertia", ixx=_num(ixx), ixy="0", ixz="0", iyy=_num(iyy),
                  iyz="0", izz=_num(izz))


@dataclass(frozen=True)
class ChainStep:
    """One joint on the way from an intermediate link to its body: the joint's origin in the
    link before it, then its motion (rotation about ``axis``, or translation along it for a
    slide) by the joint's qpos."""

    origin_position: tuple[float, float, float]
    origin_orientation: tuple[float, float, float, float]
    slide: bool  # else a hinge
    axis: tuple[float, float, float]
    qpos_address: int


@dataclass(frozen=True)
class JointChainFrame:
    """A URDF link between two joints of one body (names without the frame prefix). It moves
    with the joints after it, so its pose in the body depends on their positions (``pose``):
    the node puts it on ``/tf`` with the body's other moving frames."""

    name: str
    parent: str  # the body's frame
    steps: tuple[ChainStep, ...]  # the joints after this link, in chain order
    tail_position: tuple[float, float, float]  # the last joint's link -> the body
    tail_orientation: tuple[float, float, float, float]

    def pose(self, qpos: Sequence[float] | np.ndarray
             ) -> tuple[tuple[float, float, float], tuple[float, float, float, float]]:
        """Its position and orientation (w x y z) in the body at ``qpos`` (the model's)."""
        chain = Pose()
        for step in self.steps:
            value = float(qpos[step.qpos_address])
            motion = (Pose(tuple(value * a for a in step.axis)) if step.slide
                      else rotation(step.axis, value))
            chain = chain * Pose(step.origin_position, step.origin_orientation) * motion
        inverse = (chain * Pose(self.tail_position, self.tail_orientation)).inverse()
        return triple(inverse.position), quad(inverse.quaternion)


def joint_chain_frames(model: mujoco.MjModel,
                       frame_prefix: str = "") -> tuple[JointChainFrame, ...]:
    """The URDF's links between two hinge/slide joints of one body (see ``JointChainFrame``):
    RViz draws a URDF only when every link has a transform."""
    chains: list[JointChainFrame] = []
    _joints(model, _unique_body_links(model, frame_prefix), frame_prefix, [], chains)
    cut = len(frame_prefix)
    return tuple(JointChainFrame(c.name[cut:], c.parent[cut:], c.steps, c.tail_position,
                                 c.tail_orientation) for c in chains)


def _joints(model: mujoco.MjModel, links: Sequence[str], prefix: str,
            rigid: list[tuple[str, str, Pose]],
            chains: list[JointChainFrame]) -> list[ET.Element]:
    """The URDF joints (and intermediate links) of every body; ``rigid`` gains each
    intermediate link fixed to its body: (link, body link, pose in the body), ``chains`` each
    one that moves in it."""
    link_names = _Names(set(links))
    joint_names = _Names(set(_joint_name(model, j) for j in range(model.njnt)))
    return [element for body in range(1, model.nbody)
            for element in _body_joints(model, body, links, link_names, joint_names, prefix,
                                        rigid, chains)]


def _body_joints(model: mujoco.MjModel, body: int, links: Sequence[str], link_names: _Names,
                 joint_names: _Names, prefix: str, rigid: list[tuple[str, str, Pose]],
                 chains: list[JointChainFrame]) -> list[ET.Element]:
    """The URDF joints (and intermediate links) that attach ``body`` to its parent."""
    link, parent = links[body], links[int(model.body_parentid[body])]
    at_qpos0 = Pose(model.body_pos[body], model.body_quat[body])
    first, count = int(model.body_jntadr[body]), int(model.body_jntnum[body])
    joints = list(range(first, first + count)) if count > 0 else []
    types = [int(model.jnt_type[j]) for j in joints]
    if model.body_mocapid[body] >= 0 or _BALL in types or _FREE in types:
        name = _joint_name(model, joints[0]) if joints else joint_names.claim(f"{link}_mocap")
        return [_joint(name, "floating", parent, link, at_qpos0)]
    if not joints:
        return [_joint(joint_names.claim(f"{link}_fixed"), "fixed", parent, link, at_qpos0)]
    out: list[ET.Element] = []
    pending, current = at_qpos0, parent
    steps: list[tuple[str, ChainStep]] = []  # (the link after the joint, the joint)
    for index, joint in enumerate(joints):
        axis = np.asarray(model.jnt_axis[joint], float)
        anchor = np.asarray(model.jnt_pos[joint], float)
        ref = float(model.qpos0[model.jnt_qposadr[joint]])
        if types[index] == _SLIDE:
            before, after = Pose(-ref * axis), Pose()
        elif np.linalg.norm(anchor - anchor.dot(axis) * axis) <= _ON_AXIS:
            before, after = rotation(axis, -ref), Pose()
        else:  # an axis off the body origin: the joint frame sits at the anchor
            before, after = Pose(anchor) * rotation(axis, -ref), Pose(-anchor)
        last = index == len(joints) - 1 and after.is_identity()
        child = link if last else link_names.claim(prefix + _joint_name(model, joint))
        if not last:
            out.append(_link(child))
        origin = pending * before
        out.append(_moving_joint(model, joint, types[index], current, child, origin, axis))
        steps.append((child, ChainStep(triple(origin.position), quad(origin.quaternion),
                                       types[index] == _SLIDE, triple(axis),
                                       int(model.jnt_qposadr[joint]))))
        pending, current = after, child
    if current != link:
        out.append(_joint(joint_names.claim(f"{link}_fixed"), "fixed", current, link, pending))
        rigid.append((current, link, pending.inverse()))
    for k, (name, _) in enumerate(steps[:-1]):  # the last one is the body, or rigid on it
        chains.append(JointChainFrame(name, link, tuple(step for _, step in steps[k + 1:]),
                                      triple(pending.position), quad(pending.quaternion)))
    return out


def _joint(name: str, kind: str, parent: str, child: str, origin: Pose) -> ET.Element:
    joint = ET.Element("joint", name=name, type=kind)
    joint.append(_origin(origin))
    ET.SubElement(joint, "parent", link=parent)
    ET.SubElement(joint, "child", link=child)
    return joint


def _moving_joint(model: mujoco.MjModel, joint: int, kind: int, parent: str, child: str,
                  origin: Pose, axis: np.ndarray) -> ET.Element:
    limited = bool(model.jnt_limited[joint])
    urdf_kind = "prismatic" if kind == _SLIDE else ("revolute" if limited else "continuous")
    element = _joint(_joint_name(model, joint), urdf_kind, parent, child, origin)
    ET.SubElement(element, "axis", xyz=_vector(axis))
    limit = {"effort": _num(_effort(model, joint)), "velocity": _num(DEFAULT_VELOCITY)}
    if limited:
        limit["lower"], limit["upper"] = (_num(float(v)) for v in model.jnt_range[joint])
    elif kind == _SLIDE:
        limit["lower"], limit["upper"] = _num(-UNLIMITED_SLIDE_RANGE), _num(UNLIMITED_SLIDE_RANGE)
    ET.SubElement(element, "limit", limit)
    mimic = _mimic(model, joint)
    if mimic is not None:
        element.append(mimic)
    return element


def _effort(model: mujoco.MjModel, joint: int) -> float:
    """The joint's force bound: its own actuator force range, else its actuators' capacity
    (through the joint itself, or through a fixed tendon with the joint's coefficient)."""
    if model.jnt_actfrclimited[joint]:
        return float(np.max(np.abs(model.jnt_actfrcrange[joint])))
    total, known = 0.0, False
    for actuator in range(model.nu):
        force = _actuator_force(model, actuator)
        if force is None:
            continue
        gear = abs(float(model.actuator_gear[actuator][0]))
        trntype, target = int(model.actuator_trntype[actuator]), \
            int(model.actuator_trnid[actuator][0])
        if trntype == _TRN_JOINT and target == joint:
            total, known = total + gear * force, True
        elif trntype == _TRN_TENDON:
            first = int(model.tendon_adr[target])
            wraps = range(first, first + int(model.tendon_num[target]))
            if all(int(model.wrap_type[w]) == _WRAP_JOINT for w in wraps):
                coefficient = sum(abs(float(model.wrap_prm[w])) for w in wraps
                                  if int(model.wrap_objid[w]) == joint)
                if coefficient > 0:
                    total, known = total + coefficient * gear * force, True
    return total if known else DEFAULT_EFFORT


def _actuator_force(model: mujoco.MjModel, actuator: int) -> float | None:
    """The bound of an actuator's force: its force range, or a plain motor's gain x ctrl."""
    if model.actuator_forcelimited[actuator]:
        return float(np.max(np.abs(model.actuator_forcerange[actuator])))
    if int(model.actuator_gaintype[actuator]) == _GAIN_FIXED and \
            int(model.actuator_biastype[actuator]) == _BIAS_NONE and \
            model.actuator_ctrllimited[actuator]:
        return abs(float(model.actuator_gainprm[actuator][0])) * \
            float(np.max(np.abs(model.actuator_ctrlrange[actuator])))
    return None


def _mimic(model: mujoco.MjModel, joint: int) -> ET.Element | None:
    """A URDF mimic for a joint that an active, linear joint equality ties to another:
    MuJoCo's q1 - q1ref = c0 + c1 (q2 - q2ref) is q1 = c1 q2 + (q1ref + c0 - c1 q2ref)."""
    for eq in range(model.neq):
        if int(model.eq_type[eq]) != _EQ_JOINT or not model.eq_active0[eq] or \
                int(model.eq_obj1id[eq]) != joint or int(model.eq_obj2id[eq]) < 0:
            continue
        other = int(model.eq_obj2id[eq])
        c0, c1, *higher = (float(v) for v in model.eq_data[eq][:5])
        if any(higher) or int(model.jnt_type[other]) not in (_HINGE, _SLIDE):
            continue
        offset = float(model.qpos0[model.jnt_qposadr[joint]]) + c0 - \
            c1 * float(model.qpos0[model.jnt_qposadr[other]])
        return ET.Element("mimic", joint=_joint_name(model, other), multiplier=_num(c1),
                          offset=_num(offset))
    return None


class _MeshFiles:
    """Where each mesh's file is, as a URI, and the frame MuJoCo's compiler moved it to."""

    def __init__(self, model: mujoco.MjModel, spec: mujoco.MjSpec | None,
                 package_roots: Mapping[str, Path | str] | None) -> None:
        self._model, self._spec = model, spec
        self._roots = sorted(((name, Path(root).resolve())
                              for name, root in (package_roots or {}).items()),
                             key=lambda item: -len(item[1].parts))

    def has_file(self, mesh: int) -> bool:
        return self._path(mesh) is not None

    def file_frame(self, mesh: int) -> Pose:
        """The compiled mesh frame in the file's frame (file vertex = this * compiled vertex)."""
        return Pose(self._model.mesh_pos[mesh], self._model.mesh_quat[mesh])

    def uri(self, mesh: int) -> str:
        path = self._path(mesh)
        assert path is not None
        name = mujoco.mj_id2name(self._model, mujoco.mjtObj.mjOBJ_MESH, mesh) or f"mesh_{mesh}"
        if not path.is_file():
            raise RobotDescriptionError(
                f"robot description: mesh {name!r}: file {str(path)!r} not found (a model "
                f"loaded from a relative path: pass its MjSpec, or load it by absolute path)")
        resolved = path.resolve()
        for package, root in self._roots:
            if resolved.is_relative_to(root):
                return f"package://{package}/{resolved.relative_to(root).as_posix()}"
        return resolved.as_uri()

    def _path(self, mesh: int) -> Path | None:
        """The compiled model's path of the mesh file: absolute when loaded from a file path,
        else relative to the MjSpec's model directory (meshdir included or not)."""
        address = int(self._model.mesh_pathadr[mesh])
        if address < 0:
            return None
        raw = bytes(self._model.paths[address:])
        path = Path(raw[:raw.index(b"\0")].decode())
        if path.is_absolute():
            return path
        if self._spec is None:  # relative to the working directory, as MuJoCo compiled it
            return path.absolute()
        base = Path(self._spec.modelfiledir or ".")
        candidates = [base / path, base / (self._spec.meshdir or "") / path]
        return next((c.absolute() for c in candidates if c.is_file()), candidates[0].absolute())


def _plane_half_sizes(size: Sequence[float]) -> tuple[float, float]:
    return (float(size[0]) or INFINITE_PLANE_HALF_SIZE,
            float(size[1]) or INFINITE_PLANE_HALF_SIZE)


def _rgba(model: mujoco.MjModel, geom: int) -> tuple[float, float, float, float]:
    values = model.geom_rgba[geom]
    material = int(model.geom_matid[geom])
    if material >= 0 and np.allclose(values, _DEFAULT_RGBA, atol=1e-6):
        values = model.mat_rgba[material]
    r, g, b, a = (float(v) for v in values)
    return r, g, b, a


def _material(model: mujoco.MjModel, geom: int) -> ET.Element:
    rgba = _rgba(model, geom)
    material = int(model.geom_matid[geom])
    name = mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_MATERIAL, material) \
        if material >= 0 and tuple(model.mat_rgba[material]) == rgba else None
    name = name or "rgba_" + "".join(f"{round(min(max(v, 0.0), 1.0) * 255):02x}"
                                     for v in rgba)
    element = ET.Element("material", name=name)
    ET.SubElement(element, "color", rgba=_vector(rgba))
    return element


def _shapes(model: mujoco.MjModel, geom: int, meshes: _MeshFiles
            ) -> list[tuple[str, Pose, ET.Element]]:
    """The URDF geometry of a geom: (name suffix, pose in the body frame, <geometry>)."""
    kind, size = int(model.geom_type[geom]), model.geom_size[geom]
    pose = Pose(model.geom_pos[geom], model.geom_quat[geom])

    def geometry(tag: str, **attributes: str) -> ET.Element:
        element = ET.Element("geometry")
        ET.SubElement(element, tag, attributes)
        return element

    if kind == _G.mjGEOM_BOX:
        return [("", pose, geometry("box", size=_vector(2 * size)))]
    if kind in (_G.mjGEOM_SPHERE, _G.mjGEOM_ELLIPSOID):
        return [("", pose, geometry("sphere", radius=_num(float(np.max(size[:3]
                 if kind == _G.mjGEOM_ELLIPSOID else size[:1])))))]
    if kind == _G.mjGEOM_CYLINDER:
        return [("", pose, geometry("cylinder", radius=_num(size[0]), length=_num(2 * size[1])))]
    if kind == _G.mjGEOM_CAPSULE:
        ends = [(suffix, pose * Pose((0.0, 0.0, sign * float(size[1]))),
                 geometry("sphere", radius=_num(size[0])))
                for suffix, sign in (("_top", 1.0), ("_bottom", -1.0))]
        return [("", pose, geometry("cylinder", radius=_num(size[0]),
                                    length=_num(2 * size[1])))] + ends
    if kind == _G.mjGEOM_PLANE:
        half = _plane_half_sizes(size)
        box = geometry("box", size=_vector((2 * half[0], 2 * half[1], PLANE_THICKNESS)))
        return [("", pose * Pose((0.0, 0.0, -PLANE_THICKNESS / 2)), box)]
    if kind == _G.mjGEOM_MESH and meshes.has_file(int(model.geom_dataid[geom])):
        mesh = int(model.geom_dataid[geom])
        return [("", pose * meshes.file_frame(mesh).inverse(),
                 geometry("mesh", filename=meshes.uri(mesh),
                          scale=_vector(model.mesh_scale[mesh])))]
    return []  # height field, SDF, mesh without a file


def _geometry(model: mujoco.MjModel, geom: int, link: ET.Element, meshes: _MeshFiles,
              groups: frozenset[int], visual_names: _Names, collision_names: _Names) -> None:
    visible = int(model.geom_group[geom]) in groups and _rgba(model, geom)[3] > 0
    collides = bool(model.geom_contype[geom] or model.geom_conaffinity[geom])
    if not (visible or collides):
        return
    shapes = _shapes(model, geom, meshes)
    name = _geom_name(model, geom)
    for suffix, pose, geometry in shapes:
        if visible:
            visual = ET.SubElement(link, "visual", name=visual_names.claim(name + suffix))
            visual.append(_origin(pose))
            visual.append(geometry)
            visual.append(_material(model, geom))
        if collides:
            collision = ET.SubElement(link, "collision", name=collision_names.claim(name + suffix))
            collision.append(_origin(pose))
            collision.append(copy.deepcopy(geometry))


def _origin(pose: Pose) -> ET.Element:
    return ET.Element("origin", xyz=_vector(pose.position), rpy=_vector(rpy(pose.quaternion)))


def _num(value: float) -> str:
    """Exact to 1e-12 (a compiled model's round-off below that is written as 0)."""
    text = repr(round(float(value), 12))
    return "0" if text in ("0.0", "-0.0") else text


def _vector(values: Iterable[float]) -> str:
    return " ".join(_num(v) for v in values)
