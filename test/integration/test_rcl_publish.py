"""Serialized messages written through rcl with the GIL released arrive like rclpy's own."""

from __future__ import annotations

import ctypes
import time

import pytest

rclpy = pytest.importorskip('rclpy')

from rclpy.executors import SingleThreadedExecutor  # noqa: E402
from rclpy.qos import QoSProfile, ReliabilityPolicy  # noqa: E402
from rclpy.serialization import serialize_message  # noqa: E402
from sensor_msgs.msg import JointState  # noqa: E402

from fibril_sim_ros.rcl_publish import raw_sender  # noqa: E402

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


@pytest.mark.parametrize('batched', [True, False], ids=['c-extension', 'ctypes'])
def test_publish_many_writes_in_order_and_reports_failures(monkeypatch, batched: bool) -> None:
    from fibril_sim_ros import rcl_publish

    if batched:
        # The extension is optional for users; here (a compiler on the machine) it is built.
        assert rcl_publish._publish_batch is not None, 'fibril_sim_ros._publish_batch missing'
    else:
        monkeypatch.setattr(rcl_publish, '_publish_batch', None)
    context = rclpy.Context()
    rclpy.init(context=context)
    node = rclpy.create_node('rcl_publish_many_test', context=context)
    try:
        qos = QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE)
        publishers = [node.create_publisher(JointState, f'/rcl_publish_many_{i}', qos)
                      for i in range(2)]
        received: list[tuple[int, float]] = []
        for i in range(2):
            node.create_subscription(JointState, f'/rcl_publish_many_{i}',
                                     lambda m, i=i: received.append((i, m.position[0])), qos)
        pointers = [rcl_publish.rcl_publisher(rcl_publish.raw_sender(p)) for p in publishers]
        assert all(isinstance(p, int) for p in pointers)
        assert rcl_publish.rcl_publisher(publishers[0].publish) is None
        deadline = time.monotonic() + 10
        while (min(p.get_subscription_count() for p in publishers) == 0
               and time.monotonic() < deadline):
            time.sleep(0.05)
        # An rcl_publisher_t that was never initialized (rcl refuses it, memory-safe) in the
        # middle of the batch: reported with rcl's reason, and the batch goes on after it.
        uninitialized = ctypes.create_string_buffer(64)
        expected = [(k % 2, float(k)) for k in range(50)]
        targets = [pointers[i] for i, _ in expected]
        payloads = [serialize_message(JointState(position=[value])) for _, value in expected]
        targets.insert(20, ctypes.addressof(uninitialized))
        payloads.insert(20, serialize_message(JointState(position=[-1.0])))
        failures = rcl_publish.publish_many(targets, payloads)
        assert len(failures) == 1 and failures[0].startswith(
            f'publishing on the rcl publisher at 0x{ctypes.addressof(uninitialized):x} failed: '
            f'publisher implementation is invalid'), failures
        executor = SingleThreadedExecutor(context=context)
        executor.add_node(node)
        while len(received) < len(expected) and time.monotonic() < deadline:
            executor.spin_once(timeout_sec=0.05)
        executor.shutdown()
        # Per topic in the order written (two topics may interleave differently on arrival).
        for topic in range(2):
            assert [v for i, v in received if i == topic] == [v for i, v in expected
                                                              if i == topic]
    finally:
        node.destroy_node()
        context.try_shutdown()
