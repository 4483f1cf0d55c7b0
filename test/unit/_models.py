"""Small purpose-built MJCF models and manifest writers shared by the unit tests.

Every helper writes into a caller-given folder (``tmp_path``) so that tests never share files.
Geometry is chosen so that expected sensor values are known in closed form:

* ``HINGE_XML``: vertical hinges and horizontal slides (no gravity load), one actuator each: a
  native DC motor on ``shaft``, a plain motor on ``rail``, a position servo on ``lift`` and a
  velocity servo on ``axle``.
* ``SCENE_XML``: a floor, a wall whose face is at x = 2.9, a static sensor mount at (0, 0, 1)
  (IMU site, rangefinder sites), a block resting on the floor and a static "lamp" in the air.
* ``LIDAR_XML``: four walls around a static lidar mount, faces at +x 1.0, -x 2.0, +y 1.5, -y 3.0.
* ``multi_xml()``: N plain motors on N hinges (N ingress sources for thread tests).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from fibril_sim_core import SimulationBuilder, SimulationPlan

REPO = Path(__file__).resolve().parents[2]
DRIVETRAIN = REPO / "config" / "examples" / "drivetrain" / "simulation.yaml"

VERSION = {"major": 3, "minor": 1}
MOTOR_PAYLOAD = "fibril_sim/motor_command/v1"

HINGE_XML = """\
<mujoco model="hinge">
  <option timestep="0.001"/>
  <worldbody>
    <body name="rotor" pos="0 0 1">
      <joint name="shaft" type="hinge" axis="0 0 1"/>
      <geom name="rotor_geom" type="cylinder" size="0.05 0.01" mass="0.2"/>
    </body>
    <body name="slider" pos="0 1 1">
      <joint name="rail" type="slide" axis="1 0 0"/>
      <geom name="slider_geom" type="box" size="0.02 0.02 0.02" mass="0.1"/>
    </body>
    <body name="arm" pos="0 2 1">
      <joint name="lift" type="slide" axis="1 0 0"/>
      <geom name="arm_geom" type="box" size="0.02 0.02 0.02" mass="0.1"/>
    </body>
    <body name="wheel" pos="0 3 1">
      <joint name="axle" type="hinge" axis="0 0 1"/>
      <geom name="wheel_geom" type="cylinder" size="0.05 0.01" mass="0.2"/>
    </body>
  </worldbody>
  <actuator>
    <dcmotor name="drive" joint="shaft" resistance="2.0" motorconst="0.05 0.05" gear="10"/>
    <motor name="push" joint="rail" gear="1"/>
    <position name="servo" joint="lift" kp="50"/>
    <velocity name="speed" joint="axle" kv="0.01"/>
  </actuator>
  <keyframe>
    <key name="quarter" qpos="1.5707963267948966 0.1 0 0"/>
  </keyframe>
</mujoco>
"""

SCENE_XML = """\
<mujoco model="scene">
  <option timestep="0.001"/>
  <worldbody>
    <light pos="0 0 5" dir="0 0 -1"/>
    <geom name="floor" type="plane" size="10 10 0.1"/>
    <geom name="wall" type="box" pos="3 0 1" size="0.1 5 1"/>
    <camera name="overview" pos="0 -5 2" xyaxes="1 0 0 0 0.4 1"/>
    <body name="mount" pos="0 0 1">
      <geom name="mount_geom" type="sphere" size="0.01" contype="0" conaffinity="0"/>
      <site name="fixed_imu"/>
      <site name="range_x" zaxis="1 0 0"/>
      <site name="range_up" zaxis="0 0 1"/>
    </body>
    <body name="lamp" pos="0 -3 3">
      <geom name="lamp_geom" type="sphere" size="0.1"/>
    </body>
    <body name="block" pos="-3 -3 0.05">
      <freejoint name="block_free"/>
      <geom name="block_geom" type="box" size="0.05 0.05 0.05" mass="1"/>
      <site name="block_imu"/>
    </body>
  </worldbody>
</mujoco>
"""

LIDAR_XML = """\
<mujoco model="lidar">
  <option timestep="0.001"/>
  <worldbody>
    <geom name="wall_px" type="box" pos="1.1 0 0.5" size="0.1 5 1"/>
    <geom name="wall_nx" type="box" pos="-2.1 0 0.5" size="0.1 5 1"/>
    <geom name="wall_py" type="box" pos="0 1.6 0.5" size="5 0.1 1"/>
    <geom name="wall_ny" type="box" pos="0 -3.1 0.5" size="5 0.1 1"/>
    <body name="lidar_mount" pos="0 0 0.5">
      <geom name="lidar_housing" type="cylinder" size="0.05 0.02"/>
      <site name="lidar"/>
      <site name="lidar_turned" euler="0 0 90"/>
    </body>
  </worldbody>
</mujoco>
"""


def multi_xml(count: int = 8) -> str:
    bodies = "\n".join(
        f'    <body name="b{i}" pos="{i} 0 1"><joint name="j{i}" type="hinge" axis="0 0 1"/>'
        f'<geom type="sphere" size="0.05" mass="0.1"/></body>' for i in range(count))
    motors = "\n".join(f'    <motor name="m{i}" joint="j{i}"/>' for i in range(count))
    return (f'<mujoco model="multi">\n  <option timestep="0.001"/>\n  <worldbody>\n{bodies}\n'
            f'  </worldbody>\n  <actuator>\n{motors}\n  </actuator>\n</mujoco>\n')


def write_model(folder: Path, xml: str, name: str = "model.xml") -> Path:
    path = folder / name
    path.write_text(xml, encoding="utf-8")
    return path


def manifest_doc(components: Sequence[Mapping[str, Any]] = (), *, model: str = "model.xml",
                 **extra: Any) -> dict[str, Any]:
    """A valid manifest document (as a dict) for ``model`` with ``components``."""
    doc: dict[str, Any] = {"schema_version": dict(VERSION), "model": model,
                           "components": copy.deepcopy([dict(c) for c in components])}
    doc.update(extra)
    return doc


def write_manifest(folder: Path, doc: Mapping[str, Any], name: str = "simulation.yaml") -> Path:
    path = folder / name
    path.write_text(yaml.safe_dump(dict(doc), sort_keys=False), encoding="utf-8")
    return path


def build(folder: Path, xml: str, components: Sequence[Mapping[str, Any]] = (),
          **extra: Any) -> SimulationPlan:
    """Write ``xml`` and a manifest with ``components`` into ``folder``; build the plan."""
    write_model(folder, xml)
    path = write_manifest(folder, manifest_doc(components, **extra))
    return SimulationBuilder().build(path)


def device(component_id: str, type_name: str, bind: Mapping[str, str],
           **config: Any) -> dict[str, Any]:
    """A device component; ``period`` defaults to one 1 ms tick."""
    config.setdefault("period", 0.001)
    return {"id": component_id, "type": f"fibril_sim/{type_name}", "bind": dict(bind),
            "config": config}


def motor(component_id: str, actuator: str, endpoint: str | None = None,
          **config: Any) -> dict[str, Any]:
    item: dict[str, Any] = {"id": component_id, "type": "fibril_sim/motor",
                            "bind": {"actuator": actuator}}
    if endpoint is not None:
        item["endpoint"] = endpoint
    if config:
        item["config"] = config
    return item


def command(source: str, sequence: int, mode: str, value: float):
    """An ExternalInput carrying a motor command."""
    from fibril_sim_core import external_input

    return external_input(source, sequence, MOTOR_PAYLOAD, {"mode": mode, "value": value})


def dense_records(sources: Mapping[str, str], ticks: int, every: int = 1,
                  seed: int = 0) -> list[dict[str, Any]]:
    """Dense recorded motor commands: each source (endpoint -> mode) commits a new value every
    ``every`` ticks, and ticks 3 mod 7 carry two commands per source (the later one wins)."""
    rng = np.random.default_rng(seed)
    out, sequence, acceptance = [], dict.fromkeys(sources, 0), 0
    for tick in range(0, ticks, every):
        for source, mode in sources.items():
            for _ in range(2 if tick % 7 == 3 else 1):
                out.append({"source_id": source, "source_sequence": sequence[source],
                            "payload_type": MOTOR_PAYLOAD,
                            "payload_json": json.dumps({"mode": mode,
                                                        "value": float(rng.normal())}),
                            "commit_tick": tick, "acceptance_sequence": acceptance})
                sequence[source] += 1
                acceptance += 1
    return out
