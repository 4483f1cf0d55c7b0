"""launch_testing regression of the SIL example as it ships: ``sil_demo.launch.py`` (the
simulation node and the example wheel-speed controller, in sync mode) included from the
installed package, and the wheel speed it holds.

The demo runs in deterministic lockstep as fast as the controller answers. It starts paused
(``paused:=true``): the test subscribes to ``/wheel_encoder`` and resumes it with
``~/set_paused``, so it sees the run from its first tick (unpaused, the node would start as soon
as the controller is there, and the test might first hear it seconds of sim time later, when the
robot has driven into the wall). It asserts on sim time: from 1 s to 2 s the wheel speed (50 ms
average from the encoder angle, whose counts are ~1.5 % of 8 rad/s each) stays within 10 % of
the setpoint given to the launch file, its mean within 2 %. After shutdown both processes have
ended on the SIGINT launch sends them.
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
from statistics import mean  # noqa: E402

import launch_testing.actions  # noqa: E402
import launch_testing.asserts  # noqa: E402
import rclpy  # noqa: E402
from ament_index_python.packages import get_package_share_directory  # noqa: E402
from launch.actions import IncludeLaunchDescription  # noqa: E402
from launch.launch_description_sources import PythonLaunchDescriptionSource  # noqa: E402
from rclpy.qos import HistoryPolicy, QoSProfile, ReliabilityPolicy  # noqa: E402
from sensor_msgs.msg import JointState  # noqa: E402

from fibril_msgs.srv import SetPaused  # noqa: E402
from launch import LaunchDescription  # noqa: E402

# test/ on the path when launch_test runs this file without pytest (for _patience)
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from _patience import patience  # noqa: E402

SETPOINT = 8.0  # rad/s, not the controller's default: the launch argument must reach it
STEADY_FROM = 1.0  # s of sim time
SIM_SECONDS = 2.0  # collected up to this sim time
WALL_LIMIT = 240.0  # s: the lockstep runs as fast as the (possibly busy) machine allows
WINDOW = 25  # encoder samples: 50 ms at 500 Hz


@pytest.mark.launch_test
def generate_test_description():
    demo = os.path.join(get_package_share_directory('fibril_sim_ros'), 'launch',
                        'sil_demo.launch.py')
    return LaunchDescription([
        IncludeLaunchDescription(PythonLaunchDescriptionSource(demo), launch_arguments={
            'sync': 'true', 'paused': 'true', 'setpoint': str(SETPOINT), 'seed': '0',
            # (a busy machine may hold the controller's answer for seconds)
            'sync_timeout': str(patience(5.0))}.items()),
        launch_testing.actions.ReadyToTest()])


def _seconds(stamp) -> float:
    return stamp.sec + stamp.nanosec * 1e-9


class TestSilDemoHoldsTheSetpoint(unittest.TestCase):
    def test_wheel_speed_holds_the_setpoint(self) -> None:
        rclpy.init()
        node = rclpy.create_node('test_sil_demo_regression')
        try:
            samples: list[JointState] = []
            qos = QoSProfile(depth=10_000, history=HistoryPolicy.KEEP_LAST,
                             reliability=ReliabilityPolicy.RELIABLE)
            subscription = node.create_subscription(JointState, '/wheel_encoder',
                                                    samples.append, qos)
            resume = node.create_client(SetPaused, '/fibril_sim/set_paused')
            deadline = time.monotonic() + patience(WALL_LIMIT)
            self.assertTrue(resume.wait_for_service(timeout_sec=patience(30.0)))
            while not subscription.get_publisher_count():  # (the node waits for the match)
                self.assertLess(time.monotonic(), deadline, 'no /wheel_encoder publisher')
                rclpy.spin_once(node, timeout_sec=0.05)
            future = resume.call_async(SetPaused.Request(paused=False))
            rclpy.spin_until_future_complete(node, future, timeout_sec=patience(60.0))
            self.assertTrue(future.done() and future.result().success, future.result())
            while not samples or _seconds(samples[-1].header.stamp) < SIM_SECONDS:
                self.assertLess(time.monotonic(), deadline,
                                f'{SIM_SECONDS} s of sim time did not pass within {WALL_LIMIT} '
                                f's ({len(samples)} encoder samples)')
                rclpy.spin_once(node, timeout_sec=0.1)
        finally:
            node.destroy_node()
            rclpy.shutdown()
        times = [_seconds(m.header.stamp) for m in samples]
        angles = [m.position[0] for m in samples]
        speeds = [(times[i], (angles[i] - angles[i - WINDOW]) / (times[i] - times[i - WINDOW]))
                  for i in range(WINDOW, len(samples))]
        self.assertLessEqual(times[0], 0.01, 'the first encoder samples were not heard')
        steady = [v for t, v in speeds if STEADY_FROM <= t <= SIM_SECONDS]
        self.assertGreater(len(steady), 400, f'too few steady samples: {len(samples)} received')
        outside = [(round(t, 3), round(v, 2)) for t, v in speeds
                   if STEADY_FROM <= t <= SIM_SECONDS and abs(v - SETPOINT) > 0.10 * SETPOINT]
        disorder = sum(b <= a for a, b in zip(times, times[1:]))
        self.assertFalse(outside, f'wheel speed (sim s, rad/s) outside 10 % of {SETPOINT}: '
                         f'{outside[:10]} ({len(outside)} of {len(steady)}); {len(samples)} '
                         f'samples from {times[0]:.3f} to {times[-1]:.3f} s, {disorder} '
                         f'stamps not after the previous one')
        self.assertLessEqual(abs(mean(steady) - SETPOINT), 0.02 * SETPOINT, mean(steady))


@launch_testing.post_shutdown_test()
class TestSilDemoShutdown(unittest.TestCase):
    def test_both_processes_ended_on_sigint(self, proc_info) -> None:
        names = proc_info.process_names()
        self.assertEqual(len(names), 2, names)
        for name in names:
            # The node's status after SIGINT is 130. The controller's is 0, but it sometimes
            # exits 1 (rclpy's EventsExecutor.spin_once raises "RuntimeError: Unable to convert
            # call argument '0' to Python object" instead of KeyboardInterrupt): reported,
            # tolerated here.
            allowed = [0, 1, -2] if 'sil_controller' in name else [130, 0, -2]
            launch_testing.asserts.assertExitCodes(proc_info, allowable_exit_codes=allowed,
                                                   process=name)
