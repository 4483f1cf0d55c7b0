"""Every link of the robot description has a TF frame, the links between several joints of
one body included (issue 22): they go on /tf with the moving bodies, at the pose the joints
after them give (``JointChainFrame.pose``), from the observation's joint positions."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import mujoco
import numpy as np
import pytest

pytest.importorskip("rclpy")
tf2_msgs = pytest.importorskip("tf2_msgs.msg")

from rclpy.serialization import deserialize_message  # noqa: E402

from fibril_sim_core.records import StateObservation  # noqa: E402
from fibril_sim_core.robot_description import (  # noqa: E402
    joint_chain_frames,
    link_frames,
    urdf_from_model,
)
from fibril_sim_core.runtime.observation import StateLayout, static_frames  # noqa: E402
from fibril_sim_ros.ground_truth import FramePublisher  # noqa: E402

ARM_XML = """
<mujoco model="chained">
  <worldbody>
    <body name="base">
      <geom type="box" size="0.1 0.1 0.1"/>
      <body name="wrist" pos="0 0 0.5">
        <joint name="yaw" type="hinge" axis="0 0 1" pos="0 0.1 0" ref="0.2"/>
        <joint name="lift" type="slide" axis="0 0 1"/>
        <joint name="pitch" type="hinge" axis="0 1 0"/>
        <joint name="roll" type="hinge" axis="1 0 0" pos="0 0 0.05"/>
        <geom type="sphere" size="0.05"/>
      </body>
    </body>
  </worldbody>
</mujoco>
"""


def test_every_urdf_link_has_a_frame_and_the_chained_ones_follow_the_joints() -> None:
    model = mujoco.MjModel.from_xml_string(ARM_XML)
    layout = StateLayout.of(model)
    chains = joint_chain_frames(model)
    assert [(c.name, c.parent) for c in chains] == [("yaw", "wrist"), ("lift", "wrist"),
                                                   ("pitch", "wrist")]
    publisher = FramePublisher(layout, "r/", chains)
    assert publisher.needs_joints
    data = mujoco.MjData(model)
    data.qpos[:] = (0.7, 0.03, -0.4, 1.1)
    observation = StateObservation(
        0, 0, 5, 5_000_000, data.qpos[list(layout.joint_qpos)].copy(), np.zeros(0),
        np.zeros(0), np.zeros((len(layout.frame_names), 3)),
        np.tile((1.0, 0.0, 0.0, 0.0), (len(layout.frame_names), 1)))
    message = deserialize_message(publisher.moving(observation), tf2_msgs.TFMessage)
    moving = {t.child_frame_id: t for t in message.transforms}
    static = [f.name for f in static_frames(model)] + [f.name for f in link_frames(model)]
    links = {link.get("name") for link in ET.fromstring(
        urdf_from_model(model, frame_prefix="r/")).findall("link")}
    # the root has no parent; every other link is a child in /tf or /tf_static
    assert links == {"r/world"} | set(moving) | {"r/" + name for name in static}
    for chain in chains:
        sent = moving["r/" + chain.name]
        assert sent.header.frame_id == "r/wrist"
        assert (sent.header.stamp.sec, sent.header.stamp.nanosec) == (0, 5_000_000)
        position, (w, x, y, z) = chain.pose(data.qpos)
        t = sent.transform
        np.testing.assert_allclose((t.translation.x, t.translation.y, t.translation.z),
                                   position, atol=1e-12)
        np.testing.assert_allclose((t.rotation.w, t.rotation.x, t.rotation.y, t.rotation.z),
                                   (w, x, y, z), atol=1e-12)
