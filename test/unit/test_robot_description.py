"""The URDF and geom markers generated from a MuJoCo model, checked against the model itself.

The URDF is parsed with the standard library; the forward-kinematics tests compose its joint
origins and joint motions at random joint positions and compare every link's world pose with
MuJoCo's xpos/xmat after mj_kinematics for the same qpos: that is what proves the frames (and
the joint position = qpos convention, refs included) right.
"""

from __future__ import annotations

import functools
import math
import struct
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlparse

import mujoco
import numpy as np
import pytest

from fibril_sim_core.robot_description import (
    PLANE_THICKNESS,
    RobotDescriptionError,
    body_frame_names,
    geom_markers,
    joint_chain_frames,
    link_frames,
    urdf_from_model,
)

REPO = Path(__file__).resolve().parents[2]
DRIVETRAIN = REPO / "config" / "examples" / "drivetrain" / "drivetrain.xml"
PANDA = Path("/work/shared/models/franka_emika_panda/panda.xml")
needs_panda = pytest.mark.skipif(not PANDA.is_file(),
                                 reason=f"the Menagerie Panda is not at {PANDA}")

# Every kind of body attachment and geom: a multi-joint body (an off-axis hinge with a ref, a
# slide with a ref, a hinge) chained through intermediate links, an unnamed body whose hinge
# anchor is off its axis, ball, free and mocap bodies, fixed bodies (one pitched 90 degrees, where
# roll and yaw are one axis), all geom types but hfield.
ZOO_XML = """
<mujoco model="zoo">
  <compiler angle="radian" meshdir="meshes"/>
  <asset>
    <material name="red" rgba="1 0 0 1"/>
    <mesh name="tet" file="tet.obj" scale="0.1 0.2 0.3"/>
  </asset>
  <worldbody>
    <geom name="ground" type="plane" size="0 0 1"/>
    <body name="base" pos="0.1 0.2 0.3" euler="0.1 0.2 0.3">
      <geom name="pillar" type="capsule" size="0.05 0.2" material="red"/>
      <body name="arm" pos="0 0 0.5" euler="0.3 -0.2 0.5">
        <joint name="j_off" type="hinge" axis="1 0 0" pos="0 0.1 0.05" ref="0.3" range="-1 1"/>
        <joint name="j_slide" type="slide" axis="0 0.6 0.8" ref="0.05" range="-0.2 0.3"
               actuatorfrcrange="-7 7"/>
        <joint name="j_last" type="hinge" axis="0 0 1"/>
        <geom name="egg" type="ellipsoid" size="0.1 0.2 0.05" rgba="0 1 0 0.5"/>
        <body pos="0.2 0 0">
          <joint type="hinge" axis="0 1 0" pos="0 0 0.1" ref="-0.4" range="-2 2"/>
          <geom name="tet" type="mesh" mesh="tet" pos="0.01 0.02 0.03" euler="0.4 0.5 0.6"/>
          <geom name="hidden_box" type="box" size="0.1 0.1 0.1" group="3"/>
          <geom name="ghost" type="sphere" size="0.05" contype="0" conaffinity="0"/>
        </body>
      </body>
      <body name="ballbody" pos="0.3 0 0">
        <joint name="ball" type="ball"/>
        <geom name="ball_geom" type="sphere" size="0.1"/>
      </body>
      <body name="lamp" pos="0 0.3 0" quat="0.9 0.1 0.2 0.3">
        <geom name="lamp_geom" type="box" size="0.02 0.03 0.04"/>
        <body name="tilted" pos="0 0 0.1" axisangle="0 1 0 1.5707963267948966"/>
      </body>
    </body>
    <body name="target" mocap="true" pos="1 1 1">
      <geom name="target_geom" type="box" size="0.1 0.1 0.1" contype="0" conaffinity="0"/>
    </body>
    <body name="floater" pos="0 0 2">
      <freejoint name="floater_free"/>
      <geom name="can" type="cylinder" size="0.1 0.2"/>
    </body>
  </worldbody>
  <tendon>
    <fixed name="pull"><joint joint="j_last" coef="-2"/><joint joint="j_off" coef="0"/></fixed>
  </tendon>
  <equality>
    <joint joint1="j_slide" joint2="j_off" polycoef="0.01 0.5 0 0 0"/>
  </equality>
  <actuator>
    <motor joint="j_last" gear="2" ctrllimited="true" ctrlrange="-3 3"/>
    <position joint="j_off" kp="10" forcelimited="true" forcerange="-5 5"/>
    <motor tendon="pull" forcelimited="true" forcerange="-4 4"/>
  </actuator>
</mujoco>
"""
TET_OBJ = "v 0 0 0\nv 1 0 0\nv 0 2 0\nv 0 0 3\nf 1 2 3\nf 1 2 4\nf 1 3 4\nf 2 3 4\n"


@pytest.fixture
def zoo(tmp_path: Path) -> tuple[mujoco.MjModel, Path]:
    (tmp_path / "meshes").mkdir()
    (tmp_path / "meshes" / "tet.obj").write_text(TET_OBJ)
    path = tmp_path / "zoo.xml"
    path.write_text(ZOO_XML)
    return mujoco.MjModel.from_xml_path(str(path)), tmp_path


# --- a small URDF reader and forward kinematics (standard library + numpy) -------------------

@dataclass(frozen=True)
class Joint:
    name: str
    kind: str
    parent: str
    child: str
    origin: np.ndarray  # 4x4
    axis: np.ndarray
    limit: dict[str, float]


def parse(urdf: str) -> tuple[ET.Element, list[str], dict[str, Joint]]:
    root = ET.fromstring(urdf)
    assert root.tag == "robot"
    links = [link.get("name") for link in root.findall("link")]
    joints = {}
    for element in root.findall("joint"):
        axis = element.find("axis")
        limit = element.find("limit")
        joints[element.get("name")] = Joint(
            element.get("name"), element.get("type"), element.find("parent").get("link"),
            element.find("child").get("link"), origin(element),
            np.array([float(v) for v in (axis.get("xyz").split() if axis is not None
                                          else "1 0 0".split())]),
            {k: float(v) for k, v in (limit.attrib.items() if limit is not None else ())})
    return root, links, joints


def origin(element: ET.Element) -> np.ndarray:
    o = element.find("origin")
    xyz = [float(v) for v in o.get("xyz", "0 0 0").split()]
    roll, pitch, yaw = (float(v) for v in o.get("rpy", "0 0 0").split())
    out = np.eye(4)
    out[:3, :3] = rot([0, 0, 1], yaw) @ rot([0, 1, 0], pitch) @ rot([1, 0, 0], roll)
    out[:3, 3] = xyz
    return out


def rot(axis, angle: float) -> np.ndarray:
    a = np.asarray(axis, float) / np.linalg.norm(axis)
    k = np.array([[0, -a[2], a[1]], [a[2], 0, -a[0]], [-a[1], a[0], 0]])
    return np.eye(3) + math.sin(angle) * k + (1 - math.cos(angle)) * k @ k


def transform(position, matrix) -> np.ndarray:
    out = np.eye(4)
    out[:3, :3] = np.asarray(matrix, float).reshape(3, 3)
    out[:3, 3] = position
    return out


def quat_matrix(quaternion) -> np.ndarray:
    out = np.zeros(9)
    mujoco.mju_quat2Mat(out, np.asarray(quaternion, float))
    return out.reshape(3, 3)


def world_poses(links: list[str], joints: dict[str, Joint], qpos: dict[str, float],
                floating: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Every link's world pose: joint origins composed with the motions at ``qpos``;
    a floating joint takes its child's pose relative to the parent from ``floating``."""
    by_child = {j.child: j for j in joints.values()}
    roots = [link for link in links if link not in by_child]
    assert len(roots) == 1, f"not one root: {roots}"
    poses = {roots[0]: np.eye(4)}

    def pose(link: str) -> np.ndarray:
        if link not in poses:
            j = by_child[link]
            motion = np.eye(4)
            if j.kind in ("revolute", "continuous"):
                motion[:3, :3] = rot(j.axis, qpos[j.name])
            elif j.kind == "prismatic":
                motion[:3, 3] = j.axis * qpos[j.name]
            elif j.kind == "floating":
                motion = np.linalg.inv(j.origin) @ floating[link]
            else:
                assert j.kind == "fixed", j.kind
            poses[link] = pose(j.parent) @ j.origin @ motion
        return poses[link]

    for link in links:
        pose(link)
    return poses


def random_state(model: mujoco.MjModel, rng: np.random.Generator
                 ) -> tuple[mujoco.MjData, dict[str, float]]:
    data = mujoco.MjData(model)
    qpos: dict[str, float] = {}
    for j in range(model.njnt):
        adr, kind = int(model.jnt_qposadr[j]), int(model.jnt_type[j])
        name = mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_JOINT, j) or f"joint_{j}"
        if kind == mujoco.mjtJoint.mjJNT_FREE:
            data.qpos[adr:adr + 3] = rng.uniform(-1, 1, 3)
            data.qpos[adr + 3:adr + 7] = unit(rng.normal(size=4))
        elif kind == mujoco.mjtJoint.mjJNT_BALL:
            data.qpos[adr:adr + 4] = unit(rng.normal(size=4))
        else:
            low, high = model.jnt_range[j] if model.jnt_limited[j] else (-math.pi, math.pi)
            data.qpos[adr] = qpos[name] = float(rng.uniform(low, high))
    for mocap in range(model.nmocap):
        data.mocap_pos[mocap] = rng.uniform(-1, 1, 3)
        data.mocap_quat[mocap] = unit(rng.normal(size=4))
    mujoco.mj_kinematics(model, data)
    return data, qpos


def unit(v: np.ndarray) -> np.ndarray:
    return v / np.linalg.norm(v)


def check_forward_kinematics(model: mujoco.MjModel, urdf: str, prefix: str = "",
                             samples: int = 5) -> None:
    _, links, joints = parse(urdf)
    names = body_frame_names(model, prefix)
    rng = np.random.default_rng(7)
    for _ in range(samples):
        data, qpos = random_state(model, rng)
        world = [transform(data.xpos[b], data.xmat[b]) for b in range(model.nbody)]
        floating = {names[b]: np.linalg.inv(world[int(model.body_parentid[b])]) @ world[b]
                    for b in range(1, model.nbody)}
        poses = world_poses(links, joints, qpos, floating)
        for body, name in enumerate(names):
            np.testing.assert_allclose(poses[name], world[body], atol=1e-9, err_msg=name)


def resolve(uri: str, package_roots: dict[str, Path] | None = None) -> Path:
    parsed = urlparse(uri)
    if parsed.scheme == "file":
        return Path(unquote(parsed.path))
    assert parsed.scheme == "package", uri
    return Path((package_roots or {})[parsed.netloc]) / unquote(parsed.path).lstrip("/")


@functools.lru_cache(maxsize=None)
def file_vertices(path: Path) -> np.ndarray:
    """A mesh file's vertices: OBJ ``v`` lines (x y z, optional extras dropped), or an STL
    (binary or ASCII)."""
    if path.suffix.lower() == ".obj":
        rows = [line.split()[1:4] for line in path.read_text().splitlines()
                if line.startswith("v ")]
        return np.array(rows, dtype=float)
    raw = path.read_bytes()
    count = struct.unpack("<I", raw[80:84])[0]
    if len(raw) == 84 + 50 * count:
        rows = np.frombuffer(raw[84:], dtype=np.dtype([("n", "<f4", 3), ("v", "<f4", (3, 3)),
                                                      ("a", "<u2")]))
        return rows["v"].reshape(-1, 3).astype(float)
    return np.array([[float(v) for v in line.split()[1:4]]
                     for line in raw.decode().splitlines() if line.strip().startswith("vertex")])


# --- structure ------------------------------------------------------------------------------

def check_structure(model: mujoco.MjModel, urdf: str, prefix: str = "") -> None:
    root, links, joints = parse(urdf)
    names = body_frame_names(model, prefix)
    assert len(set(links)) == len(links), "duplicate link names"
    assert len(set(joints)) == len(root.findall("joint")), "duplicate joint names"
    assert set(names) <= set(links)
    assert len({j.child for j in joints.values()}) == len(joints) == len(links) - 1
    for tag in ("visual", "collision"):
        visual_names = [e.get("name") for e in root.iter(tag)]
        assert len(set(visual_names)) == len(visual_names), f"duplicate {tag} names"
    # Every hinge/slide is a URDF joint of the same name, type, limits.
    for j in range(model.njnt):
        kind = int(model.jnt_type[j])
        if kind not in (mujoco.mjtJoint.mjJNT_HINGE, mujoco.mjtJoint.mjJNT_SLIDE):
            continue
        name = mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_JOINT, j) or f"joint_{j}"
        joint = joints[name]
        if kind == mujoco.mjtJoint.mjJNT_SLIDE:
            assert joint.kind == "prismatic"
        else:
            assert joint.kind == ("revolute" if model.jnt_limited[j] else "continuous")
        np.testing.assert_allclose(joint.axis, model.jnt_axis[j], atol=1e-12)
        if model.jnt_limited[j]:
            assert (joint.limit["lower"], joint.limit["upper"]) == \
                pytest.approx(tuple(model.jnt_range[j]), abs=1e-12)
        assert {"effort", "velocity"} <= set(joint.limit)
    # Inertia per body link.
    by_name = {link.get("name"): link for link in root.findall("link")}
    for body, name in enumerate(names):
        inertial = by_name[name].find("inertial")
        if model.body_mass[body] <= 0 or body == 0:
            assert inertial is None
            continue
        assert float(inertial.find("mass").get("value")) == pytest.approx(model.body_mass[body])
        inertia = inertial.find("inertia")
        assert [float(inertia.get(k)) for k in ("ixx", "iyy", "izz")] == \
            pytest.approx(list(model.body_inertia[body]), abs=1e-12)
        assert [float(inertia.get(k)) for k in ("ixy", "ixz", "iyz")] == [0, 0, 0]
        np.testing.assert_allclose(origin(inertial)[:3, 3], model.body_ipos[body], atol=1e-12)
        np.testing.assert_allclose(origin(inertial)[:3, :3], quat_matrix(model.body_iquat[body]),
                                   atol=1e-9)


def test_drivetrain_urdf_links_joints_limits_inertia() -> None:
    model = mujoco.MjModel.from_xml_path(str(DRIVETRAIN))
    urdf = urdf_from_model(model)
    check_structure(model, urdf)
    root, links, joints = parse(urdf)
    assert root.get("name") == "drivetrain"
    assert links == ["world", "chassis", "axle"]
    assert joints["chassis_free"].kind == "floating"
    assert joints["wheel_joint"].kind == "continuous"
    assert (joints["wheel_joint"].parent, joints["wheel_joint"].child) == ("chassis", "axle")
    np.testing.assert_allclose(joints["wheel_joint"].origin[:3, 3], [0.08, 0, 0])
    world = {link.get("name"): link for link in root.findall("link")}["world"]
    assert [v.get("name") for v in world.findall("visual")] == ["floor", "wall"]
    floor = world.find("visual")
    assert [float(v) for v in floor.find("geometry/box").get("size").split()] == \
        [40.0, 40.0, PLANE_THICKNESS]
    assert origin(floor)[2, 3] == pytest.approx(-PLANE_THICKNESS / 2)
    check_forward_kinematics(model, urdf)


def test_zoo_urdf_every_attachment_and_geom(zoo: tuple[mujoco.MjModel, Path]) -> None:
    model, folder = zoo
    urdf = urdf_from_model(model)
    check_structure(model, urdf)
    root, links, joints = parse(urdf)
    # Bodies first, by id, then the intermediate links named after the chained joints.
    assert links == ["world", "base", "arm", "body_3", "ballbody", "lamp", "tilted", "target",
                     "floater", "j_off", "j_slide", "joint_3"]
    kinds = {name: j.kind for name, j in joints.items()}
    assert kinds == {
        "base_fixed": "fixed", "j_off": "revolute", "j_slide": "prismatic",
        "j_last": "continuous", "joint_3": "revolute", "body_3_fixed": "fixed",
        "ball": "floating", "lamp_fixed": "fixed", "tilted_fixed": "fixed",
        "target_mocap": "floating",
        "floater_free": "floating"}
    chain = [(joints[n].parent, joints[n].child) for n in ("j_off", "j_slide", "j_last")]
    assert chain == [("base", "j_off"), ("j_off", "j_slide"), ("j_slide", "arm")]
    # The unnamed body's hinge is off its axis: the joint frame sits at the anchor.
    assert (joints["joint_3"].child, joints["body_3_fixed"].parent) == ("joint_3", "joint_3")
    np.testing.assert_allclose(joints["body_3_fixed"].origin[:3, 3], [0, 0, -0.1], atol=1e-12)
    # Effort: a joint's own actuator force range, a force-limited servo, a motor's ctrl range
    # plus a tendon motor's force times the joint's coefficient (2 x 4).
    assert joints["j_slide"].limit["effort"] == 7.0
    assert joints["j_off"].limit["effort"] == 5.0
    assert joints["j_last"].limit["effort"] == 6.0 + 8.0
    assert joints["joint_3"].limit["effort"] == 0.0
    # The joint equality j_slide - 0.05 = 0.01 + 0.5 (j_off - 0.3), in qpos: a mimic.
    mimic = root.find("joint[@name='j_slide']/mimic")
    assert (mimic.get("joint"), float(mimic.get("multiplier")), float(mimic.get("offset"))) == \
        ("j_off", 0.5, pytest.approx(0.05 + 0.01 - 0.5 * 0.3))
    assert len(root.findall(".//mimic")) == 1
    # Visual and collision geometry.
    by_name = {link.get("name"): link for link in root.findall("link")}
    base = by_name["base"]
    assert [v.get("name") for v in base.findall("visual")] == \
        ["pillar", "pillar_top", "pillar_bottom"]
    assert base.find("visual/geometry/cylinder").attrib == {"radius": "0.05", "length": "0.4"}
    assert base.find("visual/material").get("name") == "red"
    assert base.find("visual/material/color").get("rgba") == "1.0 0 0 1.0"
    top = base.findall("visual")[1]
    np.testing.assert_allclose(origin(top)[:3, 3], [0, 0, 0.2], atol=1e-12)
    arm = by_name["arm"]
    assert arm.find("visual/geometry/sphere").get("radius") == "0.2"  # the ellipsoid
    assert arm.find("visual/material/color").get("rgba") == "0 1.0 0 0.5"
    body3 = by_name["body_3"]
    assert [v.get("name") for v in body3.findall("visual")] == ["tet", "ghost"]
    assert [c.get("name") for c in body3.findall("collision")] == ["tet", "hidden_box"]
    mesh = body3.find("visual/geometry/mesh")
    assert mesh.get("scale") == "0.1 0.2 0.3"
    assert resolve(mesh.get("filename")) == (folder / "meshes" / "tet.obj").resolve()
    assert by_name["target"].find("collision") is None
    assert by_name["world"].find("visual/geometry/box").get("size") == "20.0 20.0 0.001"
    check_forward_kinematics(model, urdf)


def test_link_frames_put_an_off_axis_joint_frame_where_the_urdf_does(
        zoo: tuple[mujoco.MjModel, Path]) -> None:
    """The URDF's links that are no body but sit fixed on one (the unnamed body's off-axis
    hinge) are frames of that body where forward kinematics of the URDF puts them; the links
    between the chained joints of one body move with them and are not among these."""
    model, _ = zoo
    _, links, joints = parse(urdf_from_model(model, frame_prefix="r/"))
    (frame,) = link_frames(model, "r/")
    assert (frame.name, frame.parent) == ("joint_3", "body_3")  # without the prefix
    names = body_frame_names(model, "r/")
    rng = np.random.default_rng(3)
    for _ in range(3):
        data, qpos = random_state(model, rng)
        world = [transform(data.xpos[b], data.xmat[b]) for b in range(model.nbody)]
        floating = {names[b]: np.linalg.inv(world[int(model.body_parentid[b])]) @ world[b]
                    for b in range(1, model.nbody)}
        poses = world_poses(links, joints, qpos, floating)
        expected = poses["r/body_3"] @ transform(frame.position, quat_matrix(frame.orientation))
        np.testing.assert_allclose(poses["r/joint_3"], expected, atol=1e-9)


def test_links_between_the_joints_of_one_body_move_where_the_urdf_puts_them(
        zoo: tuple[mujoco.MjModel, Path]) -> None:
    """The links between the chained joints of one body (``arm``: j_off, j_slide, j_last) are
    frames of that body whose pose follows the joints after them: composed with the body's
    pose in MuJoCo, they land where forward kinematics of the URDF puts them (issue 22)."""
    model, _ = zoo
    _, links, joints = parse(urdf_from_model(model, frame_prefix="r/"))
    chains = joint_chain_frames(model, "r/")
    assert [(c.name, c.parent) for c in chains] == [("j_off", "arm"), ("j_slide", "arm")]
    assert {"r/j_off", "r/j_slide"} <= set(links)
    names = body_frame_names(model, "r/")
    arm = names.index("r/arm")
    rng = np.random.default_rng(5)
    for _ in range(5):
        data, qpos = random_state(model, rng)
        world = [transform(data.xpos[b], data.xmat[b]) for b in range(model.nbody)]
        floating = {names[b]: np.linalg.inv(world[int(model.body_parentid[b])]) @ world[b]
                    for b in range(1, model.nbody)}
        poses = world_poses(links, joints, qpos, floating)
        for chain in chains:
            position, orientation = chain.pose(data.qpos)
            expected = world[arm] @ transform(position, quat_matrix(orientation))
            np.testing.assert_allclose(poses["r/" + chain.name], expected, atol=1e-9,
                                       err_msg=chain.name)


def test_frame_prefix_names_links_not_joints(zoo: tuple[mujoco.MjModel, Path]) -> None:
    model, _ = zoo
    assert body_frame_names(model, "r1/")[:4] == ("r1/world", "r1/base", "r1/arm", "r1/body_3")
    urdf = urdf_from_model(model, frame_prefix="r1/", robot_name="r1")
    check_structure(model, urdf, "r1/")
    root, links, joints = parse(urdf)
    assert root.get("name") == "r1"
    assert all(link.startswith("r1/") for link in links)
    assert "j_off" in joints and joints["j_off"].child == "r1/j_off"
    check_forward_kinematics(model, urdf, "r1/", samples=2)


def test_mesh_uris_under_a_package_root_and_from_a_spec(zoo: tuple[mujoco.MjModel, Path],
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    model, folder = zoo
    roots = {"zoo_description": folder}
    urdf = urdf_from_model(model, package_roots=roots)
    uri = ET.fromstring(urdf).find(".//mesh").get("filename")
    assert uri == "package://zoo_description/meshes/tet.obj"
    assert resolve(uri, roots).is_file()
    # Loaded from a relative path, the model keeps the mesh path relative: the spec resolves it.
    monkeypatch.chdir(folder)
    spec = mujoco.MjSpec.from_file("zoo.xml")
    compiled = spec.compile()
    assert not Path(bytes(compiled.paths).split(b"\0")[0].decode()).is_absolute()
    assert urdf_from_model(compiled, spec=spec) == urdf_from_model(model)
    assert urdf_from_model(compiled) == urdf_from_model(model)  # from the working directory
    monkeypatch.chdir(folder / "meshes")
    with pytest.raises(RobotDescriptionError, match="mesh 'tet': file .* not found"):
        urdf_from_model(compiled)


def test_a_missing_mesh_file_is_one_line_naming_it(zoo: tuple[mujoco.MjModel, Path]) -> None:
    model, folder = zoo
    (folder / "meshes" / "tet.obj").unlink()
    with pytest.raises(RobotDescriptionError, match=r"mesh 'tet': file '.*tet\.obj' not found"):
        urdf_from_model(model)


def test_a_body_name_clash_is_refused() -> None:
    model = mujoco.MjModel.from_xml_string(
        "<mujoco><worldbody><body><geom size='.1'/></body>"
        "<body name='body_1'><geom size='.1'/></body></worldbody></mujoco>")
    with pytest.raises(RobotDescriptionError, match="body 2 and body 1 are both named 'body_1'"):
        urdf_from_model(model)
    with pytest.raises(RobotDescriptionError, match="frame name '/world' starts with '/'"):
        urdf_from_model(mujoco.MjModel.from_xml_string("<mujoco/>"), frame_prefix="/")


@needs_panda
def test_panda_urdf_structure_and_forward_kinematics() -> None:
    model = mujoco.MjModel.from_xml_path(str(PANDA))
    urdf = urdf_from_model(model)
    check_structure(model, urdf)
    root, links, joints = parse(urdf)
    assert links == list(body_frame_names(model))
    assert [n for n, j in joints.items() if j.kind == "revolute"] == \
        [f"joint{i}" for i in range(1, 8)]
    assert [n for n, j in joints.items() if j.kind == "prismatic"] == \
        ["finger_joint1", "finger_joint2"]
    assert [joints[f"joint{i}"].limit["effort"] for i in range(1, 8)] == [87.0] * 4 + [12.0] * 3
    # The fingers: the tendon "split" (coefficients 0.5) driven up to 100 N; tied by equality.
    assert [joints[f"finger_joint{i}"].limit["effort"] for i in (1, 2)] == [50.0, 50.0]
    mimic = root.find("joint[@name='finger_joint1']/mimic")
    assert mimic.attrib == {"joint": "finger_joint2", "multiplier": "1.0", "offset": "0"}
    check_forward_kinematics(model, urdf, samples=10)


@needs_panda
def test_panda_meshes_resolve_and_sit_where_mujoco_draws_them() -> None:
    """File vertices placed by the URDF visual origin (and by the marker pose) cover the same
    box in the body frame as MuJoCo's compiled (recentred, realigned) vertices at the geom."""
    model = mujoco.MjModel.from_xml_path(str(PANDA))
    roots = {"menagerie": PANDA.parent.parent}
    root = ET.fromstring(urdf_from_model(model, package_roots=roots))
    geoms = {mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_GEOM, g) or f"geom_{g}": g
             for g in range(model.ngeom)}
    checked = 0
    for tag in ("visual", "collision"):
        for element in root.iter(tag):
            mesh = element.find("geometry/mesh")
            if mesh is None:
                continue
            uri = mesh.get("filename")
            assert uri.startswith("package://menagerie/franka_emika_panda/assets/")
            path = resolve(uri, roots)
            assert path.is_file(), uri
            geom = geoms[element.get("name")]
            scale = np.array([float(v) for v in mesh.get("scale").split()])
            placed = origin(element)
            vertices = file_vertices(path) * scale @ placed[:3, :3].T + placed[:3, 3]
            compiled = compiled_vertices(model, geom)
            np.testing.assert_allclose(vertices.min(0), compiled.min(0), atol=1e-6, err_msg=uri)
            np.testing.assert_allclose(vertices.max(0), compiled.max(0), atol=1e-6, err_msg=uri)
            checked += 1
    assert checked == sum(1 for g in range(model.ngeom)
                          if model.geom_type[g] == mujoco.mjtGeom.mjGEOM_MESH
                          and (model.geom_group[g] <= 2 or model.geom_contype[g]
                               or model.geom_conaffinity[g]))
    for marker in geom_markers(model, package_roots=roots):
        if marker.kind != "mesh":
            continue
        placed = transform(marker.position, quat_matrix(marker.orientation))
        vertices = file_vertices(resolve(marker.mesh_uri, roots)) * marker.scale
        vertices = vertices @ placed[:3, :3].T + placed[:3, 3]
        compiled = compiled_vertices(model, geoms[marker.name])
        np.testing.assert_allclose(vertices.min(0), compiled.min(0), atol=1e-6)
        np.testing.assert_allclose(vertices.max(0), compiled.max(0), atol=1e-6)


def compiled_vertices(model: mujoco.MjModel, geom: int) -> np.ndarray:
    """MuJoCo's compiled vertices of a mesh geom, in its body's frame."""
    mesh = int(model.geom_dataid[geom])
    start = int(model.mesh_vertadr[mesh])
    vertices = model.mesh_vert[start:start + int(model.mesh_vertnum[mesh])]
    return vertices @ quat_matrix(model.geom_quat[geom]).T + model.geom_pos[geom]


# --- markers ------------------------------------------------------------------------------------

def test_drivetrain_markers() -> None:
    model = mujoco.MjModel.from_xml_path(str(DRIVETRAIN))
    markers = geom_markers(model, "dt/")
    assert [(m.frame, m.name, m.kind) for m in markers] == [
        ("dt/world", "floor", "plane"), ("dt/world", "wall", "box"),
        ("dt/chassis", "chassis_box", "box"), ("dt/chassis", "caster", "sphere"),
        ("dt/axle", "wheel_left", "cylinder"), ("dt/axle", "wheel_right", "cylinder")]
    by_name = {m.name: m for m in markers}
    assert by_name["floor"].scale == (40.0, 40.0, PLANE_THICKNESS)
    assert by_name["wall"].scale == pytest.approx((0.1, 4.0, 0.5))
    assert by_name["wall"].position == (3.0, 0.0, 0.25)
    assert by_name["caster"].scale == pytest.approx((0.04, 0.04, 0.04))
    assert by_name["wheel_left"].scale == pytest.approx((0.1, 0.1, 0.02))
    assert by_name["wheel_left"].orientation == pytest.approx(tuple(model.geom_quat[4]))
    assert all(m.rgba == (0.5, 0.5, 0.5, 1.0) and m.mesh_uri is None for m in markers)


def test_zoo_markers_kinds_sizes_visibility(zoo: tuple[mujoco.MjModel, Path]) -> None:
    model, folder = zoo
    markers = {m.name: m for m in geom_markers(model)}
    # hidden_box is in group 3 (not shown by default); ghost (contype 0) is.
    assert list(markers) == ["ground", "pillar", "egg", "tet", "ghost", "ball_geom",
                             "lamp_geom", "target_geom", "can"]
    assert markers["pillar"].kind == "capsule"
    assert markers["pillar"].scale == pytest.approx((0.1, 0.1, 0.4))
    assert markers["pillar"].rgba == (1.0, 0.0, 0.0, 1.0)
    assert markers["egg"].kind == "ellipsoid"
    assert markers["egg"].scale == pytest.approx((0.2, 0.4, 0.1))
    assert markers["egg"].rgba == (0.0, 1.0, 0.0, 0.5)
    assert markers["tet"].kind == "mesh" and markers["tet"].frame == "body_3"
    assert markers["tet"].scale == pytest.approx((0.1, 0.2, 0.3))
    assert resolve(markers["tet"].mesh_uri) == (folder / "meshes" / "tet.obj").resolve()
    assert markers["ground"].scale == (20.0, 20.0, PLANE_THICKNESS)
    assert markers["can"].scale == pytest.approx((0.2, 0.2, 0.4))
    assert markers["lamp_geom"].frame == "lamp"
    # The mesh marker puts the file's vertices where MuJoCo's compiled vertices are.
    tet = markers["tet"]
    placed = transform(tet.position, quat_matrix(tet.orientation))
    vertices = file_vertices(folder / "meshes" / "tet.obj") * tet.scale
    vertices = vertices @ placed[:3, :3].T + placed[:3, 3]
    compiled = compiled_vertices(model, mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_GEOM, "tet"))
    np.testing.assert_allclose(np.sort(vertices, axis=0), np.sort(compiled, axis=0), atol=1e-6)


# --- urdf_parser_py, when installed ---------------------------------------------------------

def test_urdf_parser_py_reads_the_panda_and_the_zoo(zoo: tuple[mujoco.MjModel, Path]) -> None:
    urdf_module = pytest.importorskip("urdf_parser_py.urdf",
                                      reason="urdf_parser_py is not installed (optional)")
    models = [zoo[0], mujoco.MjModel.from_xml_path(str(DRIVETRAIN))]
    if PANDA.is_file():
        models.append(mujoco.MjModel.from_xml_path(str(PANDA)))
    for model in models:
        robot = urdf_module.URDF.from_xml_string(urdf_from_model(model))
        assert robot.get_root() == "world"
        assert [link.name for link in robot.links][:model.nbody] == \
            list(body_frame_names(model))
        for joint in robot.joints:
            if joint.type in ("revolute", "prismatic"):
                j = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_JOINT, joint.name)
                if model.jnt_limited[j]:
                    assert (joint.limit.lower, joint.limit.upper) == \
                        pytest.approx(tuple(model.jnt_range[j]))
