"""launch_testing suite for sim.launch.py (launch, launch_ros, launch_testing: from `make setup`
or a ROS 2 installation). pytest runs it through launch_testing's plugin; also
``launch_test test/launch/test_sim_launch.py`` or colcon test.

The simulation node starts paused on the drivetrain example; ``~/step`` advances exactly the
ticks asked for, ``/clock`` follows, and the node shuts down cleanly.
"""

from __future__ import annotations

import pytest

pytest.importorskip(
    'launch_testing', reason='launch_testing is not installed: make setup installs it from '
    '../shared/vendor/ros2 (absent here), a ROS 2 installation has it')

import os  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import unittest  # noqa: E402

import launch_testing.actions  # noqa: E402
import launch_testing.asserts  # noqa: E402
import rclpy  # noqa: E402
from ament_index_python.packages import get_package_share_directory  # noqa: E402
from launch.actions import IncludeLaunchDescription  # noqa: E402
from launch.launch_description_sources import PythonLaunchDescriptionSource  # noqa: E402
from rosgraph_msgs.msg import Clock  # noqa: E402

from fibril_msgs.srv import Step  # noqa: E402
from launch import LaunchDescription  # noqa: E402

# test/ on the path when launch_test runs this file without pytest (for _patience)
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from _patience import patience  # noqa: E402

SHARE = get_package_share_directory('fibril_sim_ros')


@pytest.mark.launch_test
def generate_test_description():
    sim = IncludeLaunchDescription(
        PythonLaunchDescriptionSource(os.path.join(SHARE, 'launch', 'sim.launch.py')),
        launch_arguments={'paused': 'true', 'seed': '3'}.items())
    return LaunchDescription([sim, launch_testing.actions.ReadyToTest()])


class TestSimLaunch(unittest.TestCase):
    @classmethod
    def setUpClass(cls) -> None:
        rclpy.init()
        cls.node = rclpy.create_node('test_sim_launch')

    @classmethod
    def tearDownClass(cls) -> None:
        cls.node.destroy_node()
        rclpy.shutdown()

    def test_step_advances_exactly_n_ticks_and_clock_follows(self) -> None:
        clocks: list[int] = []
        self.node.create_subscription(
            Clock, '/clock', lambda m: clocks.append(m.clock.sec * 10**9 + m.clock.nanosec), 10)
        client = self.node.create_client(Step, '/fibril_sim/step')
        self.assertTrue(client.wait_for_service(timeout_sec=patience(30.0)))
        replies = []
        for _ in range(2):
            future = client.call_async(Step.Request(steps=250))
            rclpy.spin_until_future_complete(self.node, future, timeout_sec=patience(30.0))
            self.assertTrue(future.done())
            replies.append(future.result())
        self.assertTrue(all(r.success for r in replies))
        self.assertEqual(replies[1].tick - replies[0].tick, 250)
        self.assertEqual(replies[1].episode_time_ns, 500_000_000)
        # until the last step's /clock has arrived, then 0.5 s more: none goes past it
        deadline = time.monotonic() + patience(2.5)
        while not clocks or max(clocks) < replies[1].session_time_ns:
            rclpy.spin_once(self.node, timeout_sec=0.05)
            if time.monotonic() > deadline:
                break
        for _ in range(10):
            rclpy.spin_once(self.node, timeout_sec=0.05)
        self.assertTrue(clocks and max(clocks) == replies[1].session_time_ns)


@launch_testing.post_shutdown_test()
class TestSimShutdown(unittest.TestCase):
    def test_exit_codes(self, proc_info) -> None:
        # SIGINT from launch at shutdown: the node exits 0 or 130 (its documented status)
        launch_testing.asserts.assertExitCodes(proc_info, allowable_exit_codes=[0, 130, -2])
