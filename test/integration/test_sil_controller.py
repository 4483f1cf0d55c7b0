"""The example wheel-speed PI controller on its own: control law, parameters, dependencies."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip('rclpy')

from fibril_sim_ros.examples import wheel_speed_controller as controller  # noqa: E402
from fibril_sim_ros.examples.wheel_speed_controller import (  # noqa: E402
    ControllerSettings,
    PiController,
)

SOURCE = Path(controller.__file__)


def test_the_controller_knows_nothing_of_mujoco_or_fibril() -> None:
    """A production controller: rclpy and ROS message packages only (plus the stdlib)."""
    allowed = {'rclpy', 'rcl_interfaces', 'sensor_msgs', 'std_msgs', 'fibril_msgs'}
    imported = set()
    for node in ast.walk(ast.parse(SOURCE.read_text())):
        if isinstance(node, ast.Import):
            imported |= {alias.name.split('.')[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            imported.add(node.module.split('.')[0])
    foreign = imported - allowed - set(sys.stdlib_module_names)
    assert not foreign, foreign


def test_pi_integrates_over_the_elapsed_time() -> None:
    pi = PiController(kp=0.5, ki=2.0, limit=1.0)
    assert pi.update(1.0, 0.8, 0.002) == pytest.approx(0.5 * 0.2 + 2.0 * 0.2 * 0.002)
    # a missed period: the next update integrates the 4 ms that passed
    before = pi.integral
    pi.update(1.0, 0.8, 0.004)
    assert pi.integral - before == pytest.approx(0.2 * 0.004)
    # a long stall counts as max_dt only
    capped = PiController(kp=0.5, ki=2.0, limit=1.0, max_dt=0.01)
    capped.update(1.0, 0.8, 0.5)
    assert capped.integral == pytest.approx(0.2 * 0.01)


def test_pi_does_not_wind_up_while_saturated() -> None:
    pi = PiController(kp=0.01, ki=0.7, limit=1.0)
    for _ in range(5000):  # 10 s far below a setpoint it cannot reach
        assert pi.update(1000.0, 0.0, 0.002) == 1.0
    frozen = pi.integral
    assert frozen * 0.7 < 1.0  # the integral stopped where the output saturated
    # once the wheel is above the setpoint, the output leaves saturation at once
    assert pi.update(10.0, 12.0, 0.002) < 1.0


@pytest.mark.parametrize(('changes', 'message'), [
    (dict(rate=0.0), 'parameter rate must be > 0 Hz, got 0.0'),
    (dict(kp=-1.0), 'parameters kp and ki must be >= 0'),
    (dict(setpoint=float('nan')), "parameter 'setpoint' must be finite"),
    (dict(duty_limit=1.5), 'parameter duty_limit must be in (0, 1], got 1.5'),
    (dict(encoder_topic=''), "parameter 'encoder_topic' must not be empty"),
])
def test_settings_errors_name_the_parameter(changes: dict, message: str) -> None:
    with pytest.raises(ValueError) as error:
        ControllerSettings(**changes).check()
    assert message in str(error.value)


def test_use_sim_time_defaults_to_true_unless_set(tmp_path: Path) -> None:
    params = tmp_path / 'params.yaml'
    params.write_text('sil_controller:\n  ros__parameters:\n    use_sim_time: false\n')
    assert not controller._sets_use_sim_time(['sil_controller', '--ros-args', '-p', 'kp:=1'])
    assert controller._sets_use_sim_time(['x', '--ros-args', '-p', 'use_sim_time:=false'])
    assert controller._sets_use_sim_time(['x', '--ros-args', '--params-file', str(params)])


def test_a_bad_parameter_is_one_line_and_exit_2() -> None:
    result = subprocess.run(
        [sys.executable, '-m', 'fibril_sim_ros.examples.wheel_speed_controller', '--ros-args',
         '-p', 'kp:=fast'], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert result.stderr.strip() == "sil_controller: error: parameter 'kp' must be a number, " \
                                    "got 'fast'"


def test_executor_parameter_is_checked() -> None:
    with pytest.raises(ValueError) as error:
        ControllerSettings(executor='multi').check()
    assert str(error.value) == "parameter 'executor' must be one of events, single_threaded, " \
                               "got 'multi'"


def test_events_executor_where_rclpy_has_it_else_single_threaded(monkeypatch) -> None:
    import rclpy
    from rclpy.executors import SingleThreadedExecutor

    context = rclpy.Context()
    rclpy.init(context=context)
    try:
        executor, kind = controller.make_executor('single_threaded', context)
        assert kind == 'single_threaded' and isinstance(executor, SingleThreadedExecutor)
        executor.shutdown()
        has_events = True
        try:
            from rclpy.experimental import EventsExecutor  # noqa: F401
        except ImportError:
            has_events = False
        executor, kind = controller.make_executor('events', context)
        assert kind == ('events' if has_events else 'single_threaded')
        executor.shutdown()
        monkeypatch.setitem(sys.modules, 'rclpy.experimental', None)  # an rclpy without it
        executor, kind = controller.make_executor('events', context)
        assert kind == 'single_threaded' and isinstance(executor, SingleThreadedExecutor)
        executor.shutdown()
    finally:
        context.try_shutdown()


@pytest.mark.parametrize('executor', ['events', 'single_threaded'])
def test_the_controller_commands_every_period_on_sim_time_with_either_executor(
        executor: str) -> None:
    """The control timer fires on ROS time driven by /clock, with each executor (rclpy's
    EventsExecutor.spin() hangs with such a timer; the controller spins with spin_once)."""
    import threading
    import time

    import rclpy
    from rclpy.qos import QoSProfile, ReliabilityPolicy
    from rosgraph_msgs.msg import Clock

    from fibril_msgs.msg import MotorCommand

    context = rclpy.Context()
    rclpy.init(context=context, args=['x', '--ros-args', '-p', f'executor:={executor}'])
    try:
        node = controller.WheelSpeedController(context=context)
        peer = rclpy.create_node('clock_peer', context=context)
        clock = peer.create_publisher(Clock, '/clock', 10)
        commands: list[MotorCommand] = []
        peer.create_subscription(MotorCommand, '/motor/command', commands.append,
                                 QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE))
        made, kind = controller.make_executor(node.settings.executor, context)
        assert kind == executor or executor == 'events'
        from rclpy.executors import SingleThreadedExecutor
        peer_executor = SingleThreadedExecutor(context=context)
        peer_executor.add_node(peer)
        spinning = threading.Thread(target=controller.spin, args=(node, made), daemon=True)
        spinning.start()
        deadline = time.monotonic() + 10
        while clock.get_subscription_count() == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.2)
        for k in range(1, 51):  # 100 ms of sim time in 2 ms steps
            msg = Clock()
            msg.clock.nanosec = 2_000_000 * k
            clock.publish(msg)
            end = time.monotonic() + 0.005
            while time.monotonic() < end:
                peer_executor.spin_once(timeout_sec=0.001)
        end = time.monotonic() + 0.5
        while time.monotonic() < end:
            peer_executor.spin_once(timeout_sec=0.01)
        assert 40 <= len(commands) <= 51, len(commands)
    finally:
        context.try_shutdown()
        spinning.join(2)
        made.shutdown()
        peer_executor.shutdown()
