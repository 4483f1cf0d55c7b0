"""The geom MarkerArray, and the shipped RViz config and Foxglove layout.

The markers are built from ``geom_markers`` of real models and checked field by field against
the model; the configs are loaded as YAML / JSON and must name the topics the node publishes.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import mujoco
import numpy as np
import pytest
import yaml
from rclpy.serialization import deserialize_message, serialize_message
from visualization_msgs.msg import Marker, MarkerArray

from fibril_sim_core.robot_description import GeomMarker, geom_markers
from fibril_sim_ros.visualization import marker_array

REPO = Path(__file__).resolve().parents[2]
DRIVETRAIN = REPO / "config" / "examples" / "drivetrain" / "drivetrain.xml"
RVIZ = REPO / "config" / "rviz" / "fibril_sim.rviz"
FOXGLOVE = REPO / "config" / "foxglove" / "fibril_sim.json"

SCENE_XML = """
<mujoco>
  <compiler meshdir="meshes"/>
  <asset><mesh name="tet" file="tet.obj" scale="2 2 2"/></asset>
  <worldbody>
    <body name="rod" pos="0 0 1">
      <joint type="hinge" axis="0 1 0"/>
      <geom name="pill" type="capsule" size="0.1 0.3" euler="0 90 0" rgba="0.2 0.4 0.6 0.8"/>
      <geom name="egg" type="ellipsoid" size="0.1 0.2 0.3"/>
      <geom name="tet" type="mesh" mesh="tet"/>
    </body>
  </worldbody>
</mujoco>
"""


@pytest.fixture
def scene(tmp_path: Path) -> mujoco.MjModel:
    (tmp_path / "meshes").mkdir()
    (tmp_path / "meshes" / "tet.obj").write_text(
        "v 0 0 0\nv 1 0 0\nv 0 1 0\nv 0 0 1\nf 1 2 3\nf 1 2 4\nf 1 3 4\nf 2 3 4\n")
    (tmp_path / "scene.xml").write_text(SCENE_XML)
    return mujoco.MjModel.from_xml_path(str(tmp_path / "scene.xml"))


def test_drivetrain_markers_one_per_geom_in_body_frames() -> None:
    model = mujoco.MjModel.from_xml_path(str(DRIVETRAIN))
    shapes = geom_markers(model, "dt/")
    array = marker_array(shapes, stamp_ns=1_500_000_000)
    markers = array.markers
    assert len(markers) == model.ngeom == 6
    assert [m.type for m in markers] == [Marker.CUBE, Marker.CUBE, Marker.CUBE, Marker.SPHERE,
                                         Marker.CYLINDER, Marker.CYLINDER]
    assert [(m.ns, m.id) for m in markers] == [("dt/world", 0), ("dt/world", 1),
                                               ("dt/chassis", 0), ("dt/chassis", 1),
                                               ("dt/axle", 0), ("dt/axle", 1)]
    for marker, shape in zip(markers, shapes):
        assert marker.header.frame_id == marker.ns == shape.frame
        assert (marker.header.stamp.sec, marker.header.stamp.nanosec) == (1, 500_000_000)
        assert marker.frame_locked and marker.action == Marker.ADD
        assert (marker.scale.x, marker.scale.y, marker.scale.z) == pytest.approx(shape.scale)
        assert (marker.pose.position.x, marker.pose.position.y, marker.pose.position.z) == \
            pytest.approx(shape.position)
        o = marker.pose.orientation
        assert (o.w, o.x, o.y, o.z) == pytest.approx(shape.orientation)
        c = marker.color
        assert (c.r, c.g, c.b, c.a) == pytest.approx(shape.rgba)
    wheel = markers[4]  # a 0.05 m radius, 0.02 m wide wheel turned onto the y axis
    assert (wheel.scale.x, wheel.scale.z) == pytest.approx((0.1, 0.02))
    assert (wheel.pose.orientation.w, wheel.pose.orientation.x) == \
        pytest.approx((math.sqrt(0.5), math.sqrt(0.5)))
    # The message round-trips through rclpy's serialization (every field well typed).
    again = deserialize_message(serialize_message(array), MarkerArray)
    assert [m.id for m in again.markers] == [m.id for m in markers]


def test_capsule_caps_ellipsoid_and_mesh(scene: mujoco.MjModel) -> None:
    shapes = geom_markers(scene)
    markers = marker_array(shapes).markers
    assert [(m.ns, m.id, m.type) for m in markers] == [
        ("rod", 0, Marker.CYLINDER), ("rod", 1, Marker.SPHERE), ("rod", 2, Marker.SPHERE),
        ("rod", 3, Marker.SPHERE), ("rod", 4, Marker.MESH_RESOURCE)]
    cylinder, top, bottom, egg, mesh = markers
    assert (cylinder.scale.x, cylinder.scale.y, cylinder.scale.z) == pytest.approx((0.2, 0.2,
                                                                                    0.6))
    # The capsule lies along the body's x axis (turned 90 degrees about y): caps at x = +-0.3.
    for cap, x in ((top, 0.3), (bottom, -0.3)):
        assert (cap.pose.position.x, cap.pose.position.y, cap.pose.position.z) == \
            pytest.approx((x, 0.0, 0.0), abs=1e-9)
        assert (cap.scale.x, cap.scale.y, cap.scale.z) == pytest.approx((0.2, 0.2, 0.2))
        assert (cap.color.r, cap.color.g, cap.color.b, cap.color.a) == \
            pytest.approx((0.2, 0.4, 0.6, 0.8))
    assert (egg.scale.x, egg.scale.y, egg.scale.z) == pytest.approx((0.2, 0.4, 0.6))
    assert mesh.mesh_resource == shapes[-1].mesh_uri
    assert mesh.mesh_resource.startswith("file:///") and mesh.mesh_resource.endswith("tet.obj")
    assert not mesh.mesh_use_embedded_materials
    assert (mesh.scale.x, mesh.scale.y, mesh.scale.z) == (2.0, 2.0, 2.0)
    # The marker pose undoes MuJoCo's recentring: file vertex (0, 0, 0) lands where MuJoCo has
    # it (the compiled vertices are centred on the tetrahedron's centre of mass).
    start = int(scene.mesh_vertadr[0])
    compiled = scene.mesh_vert[start:start + int(scene.mesh_vertnum[0])]
    quat = np.array([mesh.pose.orientation.w, mesh.pose.orientation.x,
                     mesh.pose.orientation.y, mesh.pose.orientation.z])
    placed = np.zeros(9)
    mujoco.mju_quat2Mat(placed, quat)
    file_vertices = 2.0 * np.array([[0, 0, 0], [1, 0, 0], [0, 1, 0], [0, 0, 1]], float)
    body_frame = file_vertices @ placed.reshape(3, 3).T + [mesh.pose.position.x,
                                                         mesh.pose.position.y,
                                                         mesh.pose.position.z]
    geom_rot = np.zeros(9)
    mujoco.mju_quat2Mat(geom_rot, scene.geom_quat[2])
    expected = compiled @ geom_rot.reshape(3, 3).T + scene.geom_pos[2]
    np.testing.assert_allclose(np.sort(body_frame, axis=0), np.sort(expected, axis=0),
                               atol=1e-6)


def test_ids_are_stable_across_calls_and_bad_kinds_are_named() -> None:
    model = mujoco.MjModel.from_xml_path(str(DRIVETRAIN))
    first, second = marker_array(geom_markers(model)), marker_array(geom_markers(model))
    assert [(m.ns, m.id) for m in first.markers] == [(m.ns, m.id) for m in second.markers]
    odd = GeomMarker("world", "blob", "torus", (1, 1, 1), (0, 0, 0), (1, 0, 0, 0), (1, 1, 1, 1))
    with pytest.raises(ValueError, match="geom kind 'torus' in frame 'world'"):
        marker_array([odd])


# --- the shipped viewer configs -----------------------------------------------------------------

def _values(node: object) -> list[object]:
    """Every scalar in a nested YAML/JSON document."""
    if isinstance(node, dict):
        return [v for value in node.values() for v in _values(value)]
    if isinstance(node, list):
        return [v for value in node for v in _values(value)]
    return [node]


def _displays(node: object) -> list[dict]:
    if isinstance(node, dict):
        found = [node] if "Class" in node else []
        return found + [d for value in node.values() for d in _displays(value)]
    if isinstance(node, list):
        return [d for value in node for d in _displays(value)]
    return []


def test_rviz_config_fixed_frame_tf_robot_model_markers() -> None:
    config = yaml.safe_load(RVIZ.read_text())
    manager = config["Visualization Manager"]
    assert manager["Global Options"]["Fixed Frame"] == "world"
    displays = {d["Class"]: d for d in _displays(manager["Displays"])}
    assert displays["rviz_default_plugins/TF"]["Enabled"] is True
    robot = displays["rviz_default_plugins/RobotModel"]
    assert robot["Enabled"] is True
    assert robot["Description Source"] == "Topic"
    assert robot["Description Topic"]["Value"] == "/robot_description"
    assert robot["Description Topic"]["Durability Policy"] == "Transient Local"
    markers = displays["rviz_default_plugins/MarkerArray"]
    assert markers["Enabled"] is False
    assert markers["Topic"]["Value"] == "/fibril_sim/markers"
    assert markers["Topic"]["Durability Policy"] == "Transient Local"
    # The sim clock: a Time panel (RViz reads /clock when started with use_sim_time).
    assert "rviz_common/Time" in [panel["Class"] for panel in config["Panels"]]
    assert "use_sim_time:=true" in RVIZ.read_text()


def test_foxglove_layout_panels_and_topics() -> None:
    layout = json.loads(FOXGLOVE.read_text())
    configs = layout["configById"]
    kinds = sorted(panel.split("!")[0] for panel in configs)
    assert kinds == ["3D", "Plot", "RawMessages"]
    three_d = next(v for k, v in configs.items() if k.startswith("3D!"))
    assert three_d["followTf"] == "world"
    urdf_layers = [layer for layer in three_d["layers"].values()
                   if layer.get("layerId") == "foxglove.Urdf"]
    assert [(layer["sourceType"], layer["topic"]) for layer in urdf_layers] == \
        [("topic", "/robot_description")]
    assert three_d["topics"]["/tf"]["visible"] is True
    assert three_d["topics"]["/fibril_sim/markers"]["visible"] is False
    plot = next(v for k, v in configs.items() if k.startswith("Plot!"))
    assert plot["paths"] and all(p["value"].startswith("/joint_states.position[")
                                 for p in plot["paths"])
    raw = next(v for k, v in configs.items() if k.startswith("RawMessages!"))
    assert raw["topicPath"] == "/joint_states"
    # The layout tree shows exactly the configured panels.
    shown = {v for v in _values(layout["layout"]) if isinstance(v, str) and "!" in v}
    assert shown == set(configs)
