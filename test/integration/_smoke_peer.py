"""Peer process for test_ros_smoke.py (not a test module).

Hosts a fibril_msgs/srv/Step service (tick = steps * 10, episode_time_ns = steps * 1_000_000)
and publishes fibril_msgs/msg/DeviceSample on a reliable topic every 50 ms, sample k carrying
values [k, 0.5, -1.25]. Prints READY once both exist. Exits after --lifetime seconds or when its
parent goes away, so it never outlives the test.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import rclpy
from rclpy.executors import ExternalShutdownException, SingleThreadedExecutor
from rclpy.node import Node
from rclpy.qos import HistoryPolicy, QoSProfile, ReliabilityPolicy

from fibril_msgs.msg import DeviceSample
from fibril_msgs.srv import Step

RELIABLE = QoSProfile(
    depth=100, history=HistoryPolicy.KEEP_LAST, reliability=ReliabilityPolicy.RELIABLE
)


class SmokePeer(Node):
    def __init__(self, namespace: str) -> None:
        super().__init__('fibril_smoke_peer', namespace=namespace)
        self._count = 0
        self._publisher = self.create_publisher(DeviceSample, 'samples', RELIABLE)
        self._service = self.create_service(Step, 'step', self._on_step)
        self._timer = self.create_timer(0.05, self._publish)

    def _publish(self) -> None:
        msg = DeviceSample()
        msg.header.frame_id = 'smoke_frame'
        msg.header.stamp.sec = 1
        msg.header.stamp.nanosec = self._count
        msg.acquisition_episode_time_ns = 1_000_000 * self._count
        msg.delivery_episode_time_ns = 1_000_000 * self._count + 500_000
        msg.episode = 3
        msg.device_id = 'smoke_imu'
        msg.sample_type = 'fibril_sim/smoke_sample/v1'
        msg.values = [float(self._count), 0.5, -1.25]
        msg.component_names = ['seq', 'half', 'neg']
        self._publisher.publish(msg)
        self._count += 1

    def _on_step(self, request: Step.Request, response: Step.Response) -> Step.Response:
        response.success = True
        response.message = f'stepped {request.steps}'
        response.tick = request.steps * 10
        response.episode_time_ns = request.steps * 1_000_000
        response.session_time_ns = request.steps * 1_000_000 + 7
        return response


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument('--namespace', required=True)
    parser.add_argument('--lifetime', type=float, default=60.0)
    args = parser.parse_args()

    parent = os.getppid()
    rclpy.init()
    node = SmokePeer(args.namespace)
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    print('READY', flush=True)
    deadline = time.monotonic() + args.lifetime
    try:
        while time.monotonic() < deadline and os.getppid() == parent:
            executor.spin_once(timeout_sec=0.1)
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    finally:
        executor.shutdown()
        node.destroy_node()
        if rclpy.ok():
            rclpy.shutdown()
    return 0


if __name__ == '__main__':
    sys.exit(main())
