"""Make ``model/panda_torque.xml`` and ``model/panda_impedance.xml``: mesh-free copies of MuJoCo
Menagerie's Franka Panda arm, torque-driven and Cartesian-impedance-driven.

    python config/examples/panda/make_model.py [--source ../shared/models/franka_emika_panda]

Kept unchanged: the kinematic tree (body positions and orientations), the joints (axes,
ranges, the class defaults) and every body's explicit ``<inertial>`` (so the dynamics are the
full model's). Dropped: every mesh asset and mesh geom (36 MB of meshes). Added: one capsule
per link from its origin to the next link (visual only: no contacts, no mass, since explicit
inertials take precedence), ``gravcomp="1"`` on every body (the robot's own controller removes
gravity, so logged torques exclude it) and one torque ``<motor>`` per joint in place of the
position servos, with the servos' force ranges. The Menagerie LICENSE (Apache-2.0) is copied
beside the model. The keyframe keeps its pose but no ctrl (the servos' setpoints were joint
positions).

``panda_impedance.xml`` drives the same arm with a Cartesian impedance controller made of
MuJoCo-native parts, no per-tick Python: six ``<position>`` actuators on ``attachment_site``
with a site transmission, three translational ones against the world-aligned ``base_ref`` site
(ctrl = the target position, m, in the base frame) and three rotational ones against
``anchor_ref`` (oriented as the end effector at HOME; ctrl = the target orientation's rotation
vector ``log(conj(q_anchor) ⊗ q_des)``, rad, the residual convention of calibration). Their
``kp``/``kv`` are the lab's ``kp_pos``/``kd_pos`` and ``kp_ori``/``kd_ori``: force = kp·(ctrl -
length) - kv·velocity along each axis, mapped to joint torques through the site Jacobian by
MuJoCo. Gravity compensation stays the bodies' ``gravcomp``, counted as actuator force
(``actuatorgravcomp``), and each joint's total actuator torque is limited to the robot's
(``actuatorfrcrange``: ±87 N·m on joints 1-4, ±12 N·m on 5-7).
"""

from __future__ import annotations

import argparse
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

HERE = Path(__file__).resolve().parent
HOME = (0.0, -0.3, 0.0, -2.0, 0.0, 1.8, 0.8)  # the example's start pose and impedance anchor
GAINS = {"kp_pos": 500.0, "kd_pos": 44.7, "kp_ori": 30.0, "kd_ori": 10.95}  # the lab's defaults
# ../shared/models/franka_emika_panda beside the repository (or beside its worktree folder)
_CANDIDATES = [up / "shared" / "models" / "franka_emika_panda" for up in HERE.parents[2:5]]
DEFAULT_SOURCE = next((c for c in _CANDIDATES if c.is_dir()), _CANDIDATES[0])


GRAVCOMP_NOTE = """ Gravity compensation: every body has gravcomp="1", so MuJoCo cancels gravity itself. That
     is right for torques that leave gravity out (the commanded torque of a controller above
     Franka's own gravity compensation, as calibration_data/ replays), and wrong for torques
     that include gravity (measured joint torques, tau_J): a real arm's measured torques gave
     0.089 rad nominal error with it against 0.029 without. For such logs set gravcomp="0" (or
     drop the attribute) on the bodies; `fibril_sim calibrate` warns when recorded torques drive
     gravity-compensated bodies. See README.md beside panda.yaml. """


def convert(source: Path, target: Path) -> None:
    tree = ET.parse(source / "panda_nohand.xml")
    root = tree.getroot()
    root.set("model", "panda torque (mesh-free)")
    compiler = root.find("compiler")
    if compiler is not None and "meshdir" in compiler.attrib:
        del compiler.attrib["meshdir"]
    option = root.find("option")
    if option is not None:
        option.set("timestep", "0.001")
    for parent in root.iter():
        for child in list(parent):
            if child.tag == "mesh" or (child.tag == "geom" and "mesh" in child.attrib) or child.tag == "geom" and child.get("type") == "mesh" or child.tag == "light":
                parent.remove(child)
    for body in root.iter("body"):
        body.set("gravcomp", "1")
        child = body.find("body")
        if child is not None:
            end = child.get("pos", "0 0 0")
            if any(abs(float(v)) > 1e-9 for v in end.split()):
                ET.SubElement(body, "geom", {"type": "capsule", "fromto": f"0 0 0 {end}",
                                             "size": "0.04", "contype": "0",
                                             "conaffinity": "0", "group": "2",
                                             "rgba": "0.9 0.9 0.9 1"})
    root.insert(0, ET.Comment(GRAVCOMP_NOTE))  # logs that include gravity: see the note
    actuators = root.find("actuator")
    limits = {}
    if actuators is not None:
        for general in actuators.findall("general"):
            limits[general.get("joint")] = general.get("forcerange", "-87 87")
        root.remove(actuators)
    actuators = ET.SubElement(root, "actuator")
    for n in range(1, 8):
        joint = f"joint{n}"
        ET.SubElement(actuators, "motor", {"name": f"motor{n}", "joint": joint,
                                           "ctrlrange": limits.get(joint, "-87 87")})
    # the servo default (<general ... biastype=affine>) no longer applies to anything
    for default in root.iter("default"):
        for general in default.findall("general"):
            default.remove(general)
    for key in root.iter("key"):
        key.attrib.pop("ctrl", None)
    target.parent.mkdir(parents=True, exist_ok=True)
    ET.indent(tree)
    tree.write(target, encoding="unicode")
    shutil.copyfile(source / "LICENSE", target.parent / "LICENSE")


def impedance(torque_model: Path, target: Path) -> None:
    """The Cartesian impedance variant of the torque model (see the module docstring)."""
    import mujoco

    model = mujoco.MjModel.from_xml_path(str(torque_model))
    data = mujoco.MjData(model)
    data.qpos[:] = HOME
    mujoco.mj_forward(model, data)
    import numpy as np

    quat = np.empty(4)
    mujoco.mju_mat2Quat(quat, data.site_xmat[model.site("attachment_site").id])
    anchor = [float(v) for v in quat]
    tree = ET.parse(torque_model)
    root = tree.getroot()
    root.set("model", "panda cartesian impedance (mesh-free)")
    world = root.find("worldbody")
    assert world is not None
    world.insert(0, ET.Element("site", {"name": "anchor_ref", "group": "4",
                                        "quat": " ".join(f"{v:.17g}" for v in anchor)}))
    world.insert(0, ET.Element("site", {"name": "base_ref", "group": "4"}))
    actuators = root.find("actuator")
    assert actuators is not None
    limits = {m.get("joint"): m.get("ctrlrange") for m in actuators.findall("motor")}
    root.remove(actuators)
    for joint in root.iter("joint"):
        if joint.get("name") in limits:  # not the class defaults
            joint.set("actuatorgravcomp", "true")
            joint.set("actuatorfrcrange", limits[joint.get("name")])
    actuators = ET.SubElement(root, "actuator")
    for axis, gear, ref, kind in (("x", "1 0 0 0 0 0", "base_ref", "pos"),
                                  ("y", "0 1 0 0 0 0", "base_ref", "pos"),
                                  ("z", "0 0 1 0 0 0", "base_ref", "pos"),
                                  ("rx", "0 0 0 1 0 0", "anchor_ref", "ori"),
                                  ("ry", "0 0 0 0 1 0", "anchor_ref", "ori"),
                                  ("rz", "0 0 0 0 0 1", "anchor_ref", "ori")):
        ET.SubElement(actuators, "position", {
            "name": f"ee_{axis}", "site": "attachment_site", "refsite": ref, "gear": gear,
            "kp": f"{GAINS['kp_' + kind]:g}", "kv": f"{GAINS['kd_' + kind]:g}",
            "ctrlrange": "-3.2 3.2"})
    ET.indent(tree)
    tree.write(target, encoding="unicode")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", type=Path, default=DEFAULT_SOURCE)
    args = parser.parse_args()
    convert(args.source, HERE / "model" / "panda_torque.xml")
    impedance(HERE / "model" / "panda_torque.xml", HERE / "model" / "panda_impedance.xml")
    print(f"wrote {HERE / 'model' / 'panda_torque.xml'} and panda_impedance.xml")


if __name__ == "__main__":
    main()
