"""launch_testing suite: the SIL demo as a user's regression suite would write it, with
``fibril_sim_ros.testing.sim_launch_description`` (needs a ROS 2 installation: launch,
launch_ros, launch_testing).

The node starts paused in sync mode with the example controller; the test steps 1 s of sim time
and asserts the wheel tracks its setpoint: within 5 % after 0.5 s, no more than 10 % overshoot.
"""

from __future__ import annotations

import pytest

pytest.importorskip(
    'launch_testing', reason='launch_testing comes with a ROS 2 installation; it is not '
    'installable from the package registries (test/integration/test_sil_regression.py runs '
    'the same check with SimHarness)')

import os  # noqa: E402
import unittest  # noqa: E402

import rclpy  # noqa: E402
from ament_index_python.packages import get_package_share_directory  # noqa: E402
from fibril_sim_ros.testing import (  # noqa: E402
    example_controller_command,
    sim_launch_description,
)
from sensor_msgs.msg import JointState  # noqa: E402

from fibril_msgs.srv import Step  # noqa: E402

MANIFEST = os.path.join(get_package_share_directory('fibril_sim_ros'), 'config', 'examples',
                        'drivetrain', 'simulation.yaml')
SETPOINT = 10.0


@pytest.mark.launch_test
def generate_test_description():
    return sim_launch_description(
        MANIFEST, seed=0, sync_topics=['/motor/command'], control_period=0.002,
        controller=example_controller_command(setpoint=SETPOINT))


class TestSilDemo(unittest.TestCase):
    def test_wheel_reaches_setpoint_without_overshoot(self) -> None:
        rclpy.init()
        node = rclpy.create_node('test_sil_demo')
        try:
            samples: list[JointState] = []
            node.create_subscription(JointState, '/wheel_encoder', samples.append, 1000)
            client = node.create_client(Step, '/fibril_sim/step')
            self.assertTrue(client.wait_for_service(timeout_sec=30.0))
            for _ in range(20):  # 1 s in 50 ms steps; sync mode waits for the controller
                future = client.call_async(Step.Request(steps=50))
                rclpy.spin_until_future_complete(node, future, timeout_sec=60.0)
                self.assertTrue(future.done() and future.result().success)
            for _ in range(20):
                rclpy.spin_once(node, timeout_sec=0.05)
            times = [m.header.stamp.sec + m.header.stamp.nanosec * 1e-9 for m in samples]
            positions = [m.position[0] for m in samples]
            # 50 ms average speed from the encoder angle
            speeds = [(t, (positions[i + 25] - positions[i]) / (times[i + 25] - times[i]))
                      for i, t in enumerate(times[:-25])]
            self.assertLessEqual(max(v for _, v in speeds), 1.10 * SETPOINT)
            settled = [v for t, v in speeds if t >= times[0] + 0.5]
            self.assertTrue(settled)
            self.assertTrue(all(abs(v - SETPOINT) <= 0.05 * SETPOINT for v in settled))
        finally:
            node.destroy_node()
            rclpy.shutdown()
