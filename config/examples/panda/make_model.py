"""Make ``model/panda_torque.xml``: a mesh-free copy of MuJoCo Menagerie's Franka Panda arm.

    python config/examples/panda/make_model.py [--source ../shared/models/franka_emika_panda]

Kept unchanged: the kinematic tree (body positions and orientations), the joints (axes,
ranges, the class defaults) and every body's explicit ``<inertial>`` (so the dynamics are the
full model's). Dropped: every mesh asset and mesh geom (36 MB of meshes). Added: one capsule
per link from its origin to the next link (visual only: no contacts, no mass, since explicit
inertials take precedence), ``gravcomp="1"`` on every body (the robot's own controller removes
gravity, so logged torques exclude it) and one torque ``<motor>`` per joint in place of the
position servos, with the servos' force ranges. The Menagerie LICENSE (Apache-2.0) is copied
beside the model.
"""

from __future__ import annotations

import argparse
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

HERE = Path(__file__).resolve().parent
# ../shared/models/franka_emika_panda beside the repository (or beside its worktree folder)
_CANDIDATES = [up / "shared" / "models" / "franka_emika_panda" for up in HERE.parents[2:5]]
DEFAULT_SOURCE = next((c for c in _CANDIDATES if c.is_dir()), _CANDIDATES[0])


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
            if child.tag == "mesh" or (child.tag == "geom" and "mesh" in child.attrib):
                parent.remove(child)
            elif child.tag == "geom" and child.get("type") == "mesh":  # class defaults
                parent.remove(child)
            elif child.tag == "light":
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
    target.parent.mkdir(parents=True, exist_ok=True)
    ET.indent(tree)
    tree.write(target, encoding="unicode")
    shutil.copyfile(source / "LICENSE", target.parent / "LICENSE")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", type=Path, default=DEFAULT_SOURCE)
    args = parser.parse_args()
    convert(args.source, HERE / "model" / "panda_torque.xml")
    print(f"wrote {HERE / 'model' / 'panda_torque.xml'}")


if __name__ == "__main__":
    main()
