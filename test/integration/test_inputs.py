"""The node's input thread, and lending its wait set to the host thread in sync mode."""

from __future__ import annotations

import threading
import time

import pytest

rclpy = pytest.importorskip('rclpy')

from rclpy.qos import QoSProfile, ReliabilityPolicy  # noqa: E402
from std_msgs.msg import Float64  # noqa: E402

from fibril_sim_ros import inputs  # noqa: E402

pytestmark = [pytest.mark.ros,
              pytest.mark.skipif(not inputs.available(), reason='no rclpy WaitSet here')]


def _wait(condition, seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline
        time.sleep(0.005)


def test_a_lent_wait_set_is_served_on_the_borrowing_thread_until_given_back() -> None:
    context = rclpy.Context()
    rclpy.init(context=context)
    node = rclpy.create_node('inputs_test', context=context)
    qos = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE)
    seen: list[tuple[float, str]] = []

    def callback(msg: Float64) -> None:
        seen.append((msg.data, threading.current_thread().name))

    subscription = node.create_subscription(Float64, '/inputs_test', callback, qos,
                                            callback_group=inputs.InputGroup())
    publisher = node.create_publisher(Float64, '/inputs_test', qos)
    failures: list[BaseException] = []
    thread = inputs.InputThread(context, [subscription], [], failures.append)
    thread.start()
    try:
        _wait(lambda: publisher.get_subscription_count() > 0)
        publisher.publish(Float64(data=1.0))
        _wait(lambda: len(seen) == 1)
        assert seen[0] == (1.0, 'fibril-sim-inputs')

        assert thread.lend() and thread.lent
        publisher.publish(Float64(data=2.0))
        time.sleep(0.1)
        assert len(seen) == 1  # the input thread is parked: nobody took it yet
        deadline = time.monotonic() + 10
        while len(seen) < 2 and time.monotonic() < deadline:
            thread.serve(50_000_000)  # woken by the message itself
        assert seen[1] == (2.0, threading.current_thread().name)

        thread.give_back()
        assert not thread.lent
        publisher.publish(Float64(data=3.0))
        _wait(lambda: len(seen) == 3)
        assert seen[2] == (3.0, 'fibril-sim-inputs')  # in the same order, one at a time
        assert not failures
    finally:
        thread.stop()
        thread.wake()  # after stop: nothing left to wake, and no error
        thread.serve(1_000_000)  # likewise a late borrower returns at once
        node.destroy_node()
        context.try_shutdown()
    assert not thread.lend()  # stopped: nothing to lend
