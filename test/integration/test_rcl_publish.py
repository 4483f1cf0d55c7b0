"""Serialized messages written through rcl with the GIL released arrive like rclpy's own."""

from __future__ import annotations

import time

import pytest

rclpy = pytest.importorskip('rclpy')

from rclpy.executors import SingleThreadedExecutor  # noqa: E402
from rclpy.qos import QoSProfile, ReliabilityPolicy  # noqa: E402
from rclpy.serialization import serialize_message  # noqa: E402
from sensor_msgs.msg import JointState  # noqa: E402

from fibril_sim_ros._rcl_publish import raw_sender  # noqa: E402

pytestmark = pytest.mark.ros


def test_raw_sender_writes_bytes_and_message_objects() -> None:
    context = rclpy.Context()
    rclpy.init(context=context)
    node = rclpy.create_node('rcl_publish_test', context=context)
    try:
        qos = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE)
        publisher = node.create_publisher(JointState, '/rcl_publish_test', qos)
        received: list[JointState] = []
        node.create_subscription(JointState, '/rcl_publish_test', received.append, qos)
        send = raw_sender(publisher)
        assert send != publisher.publish  # the rcl path, not the fallback
        deadline = time.monotonic() + 10
        while publisher.get_subscription_count() == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        message = JointState(name=['wheel'], position=[1.5], velocity=[-2.0])
        send(serialize_message(message))
        send(JointState(name=['object'], position=[3.0]))  # not bytes: rclpy's publish
        executor = SingleThreadedExecutor(context=context)
        executor.add_node(node)
        while len(received) < 2 and time.monotonic() < deadline:
            executor.spin_once(timeout_sec=0.05)
        executor.shutdown()
        assert [(m.name, list(m.position), list(m.velocity)) for m in received] == [
            (['wheel'], [1.5], [-2.0]), (['object'], [3.0], [])]
    finally:
        node.destroy_node()
        context.try_shutdown()
