"""Wheel-speed PI controller for the drivetrain example (executable ``sil_controller``).

A plain rclpy node, as a team would write it for the robot: it reads the wheel velocity from a
``sensor_msgs/JointState`` encoder topic and commands the motor with ``fibril_msgs/MotorCommand``
duty at a fixed rate on ROS time. It knows nothing of MuJoCo or of Fibril's Python API, so the
same node runs against the simulation (``use_sim_time``, driven by ``/clock``) and the robot.

One command per control period, computed from the encoder samples received since the previous
one (their mean: one sample per period normally, more when an update came late), is what the
simulation's sync mode waits for; until the first sample arrives the command is a duty of 0.

The default gains are tuned for the drivetrain example (1 kHz physics, encoder at 500 Hz with
1024 counts per revolution, 2 ms command latency): from rest the 50 ms average of the encoder
velocity reaches 95 % of a 10 rad/s setpoint in about 0.25 s of sim time and overshoots it by
less than 10 % (the encoder's velocity is a finite difference of quantized positions, about
3 rad/s per count at 500 Hz, so the proportional gain stays small and the integral does the
work).

Run: ``ros2 run fibril_sim_ros sil_controller --ros-args -p setpoint:=8.0`` (or
``python -m fibril_sim_ros.examples.wheel_speed_controller``).
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from pathlib import Path

import rclpy
from rcl_interfaces.msg import ParameterDescriptor
from rclpy.context import Context
from rclpy.executors import Executor, ExternalShutdownException, SingleThreadedExecutor
from rclpy.node import Node
from rclpy.parameter import Parameter
from rclpy.qos import QoSProfile, ReliabilityPolicy
from sensor_msgs.msg import JointState

from fibril_msgs.msg import MotorCommand

NODE_NAME = 'sil_controller'
EXECUTORS = ('events', 'single_threaded')
MAX_MISSED_PERIODS = 5  # the integral counts at most this many periods per update


@dataclass(frozen=True)
class ControllerSettings:
    """The node's parameters, checked."""

    kp: float = 0.01
    ki: float = 0.7
    setpoint: float = 10.0  # rad/s
    rate: float = 500.0  # Hz
    duty_limit: float = 1.0
    encoder_topic: str = '/wheel_encoder'
    command_topic: str = '/motor/command'
    joint: str = ''  # JointState entry to control; empty: the first one
    executor: str = 'events'  # events (rclpy's EventsExecutor where it exists) | single_threaded

    def check(self) -> None:
        """Raise ValueError with one line naming the parameter and value."""
        for name, value in (('kp', self.kp), ('ki', self.ki), ('setpoint', self.setpoint)):
            if not math.isfinite(value):
                raise ValueError(f'parameter {name!r} must be finite, got {value!r}')
        if self.kp < 0 or self.ki < 0:
            raise ValueError(f'parameters kp and ki must be >= 0, got kp={self.kp}, ki={self.ki}')
        if not (math.isfinite(self.rate) and self.rate > 0):
            raise ValueError(f'parameter rate must be > 0 Hz, got {self.rate!r}')
        if not 0 < self.duty_limit <= 1:
            raise ValueError(f'parameter duty_limit must be in (0, 1], got {self.duty_limit!r}')
        for name, topic in (('encoder_topic', self.encoder_topic),
                            ('command_topic', self.command_topic)):
            if not topic:
                raise ValueError(f'parameter {name!r} must not be empty')
        if self.executor not in EXECUTORS:
            raise ValueError(f"parameter 'executor' must be one of {', '.join(EXECUTORS)}, "
                             f'got {self.executor!r}')


class PiController:
    """Discrete PI with conditional integration (the integral freezes while the output is
    saturated, so a long saturation does not wind it up). ``dt`` is the sim time since the
    previous update: a controller that misses a period under load still integrates the error
    over the time that really passed, up to ``max_dt`` (one noisy sample must not stand for a
    long stall)."""

    def __init__(self, kp: float, ki: float, limit: float, max_dt: float = math.inf) -> None:
        self.kp, self.ki, self.limit, self.max_dt = kp, ki, limit, max_dt
        self.integral = 0.0

    def update(self, setpoint: float, measured: float, dt: float) -> float:
        error = setpoint - measured
        integral = self.integral + error * min(max(dt, 0.0), self.max_dt)
        output = self.kp * error + self.ki * integral
        if -self.limit < output < self.limit:
            self.integral = integral
            return output
        return max(-self.limit, min(self.limit, output))


class WheelSpeedController(Node):
    """Reads the encoder, commands the motor duty at ``rate`` Hz on ROS time."""

    def __init__(self, *, default_sim_time: bool = True, context: Context | None = None) -> None:
        overrides = [Parameter('use_sim_time', value=True)] if default_sim_time else None
        super().__init__(NODE_NAME, parameter_overrides=overrides, context=context)
        self.settings = self._declared()
        self.settings.check()
        s = self.settings
        self._pi = PiController(s.kp, s.ki, s.duty_limit, max_dt=MAX_MISSED_PERIODS / s.rate)
        self._period_ns = round(1e9 / s.rate)
        self._last_ns: int | None = None
        self._velocity: float | None = None  # mean of the samples since the last update
        self._sum, self._count = 0.0, 0
        self._setpoint = s.setpoint
        self._command = MotorCommand(mode=MotorCommand.MODE_DUTY, value=0.0)
        reliable = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE)
        self.create_subscription(JointState, s.encoder_topic, self._on_encoder, reliable)
        self.create_timer(1.0 / s.rate, self._on_timer)
        # last: once the command topic is seen, the rest of the node exists too
        self._publisher = self.create_publisher(MotorCommand, s.command_topic, reliable)
        self.get_logger().info(
            f'wheel-speed PI: setpoint {s.setpoint} rad/s, kp {s.kp}, ki {s.ki}, '
            f'{s.rate} Hz, {s.encoder_topic} -> {s.command_topic}, '
            f"use_sim_time {self.get_parameter('use_sim_time').value}")

    def _declared(self) -> ControllerSettings:
        """Every field of ControllerSettings declared as a parameter (its default the
        field's), in field order."""
        default, number, text = ControllerSettings(), self._number, self._text
        return ControllerSettings(
            kp=number('kp', default.kp), ki=number('ki', default.ki),
            setpoint=number('setpoint', default.setpoint), rate=number('rate', default.rate),
            duty_limit=number('duty_limit', default.duty_limit),
            encoder_topic=text('encoder_topic', default.encoder_topic),
            command_topic=text('command_topic', default.command_topic),
            joint=text('joint', default.joint), executor=text('executor', default.executor))

    def _text(self, name: str, default: str) -> str:
        text: object = self.declare_parameter(name, default).value
        if not isinstance(text, str):
            raise ValueError(f'parameter {name!r} must be a string, got {text!r}')
        return text

    def _number(self, name: str, default: float) -> float:
        """A number parameter: integers too (``-p kp:=1``)."""
        value: object = self.declare_parameter(
            name, default, ParameterDescriptor(dynamic_typing=True)).value
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f'parameter {name!r} must be a number, got {value!r}')
        return float(value)

    def _on_encoder(self, msg: JointState) -> None:
        if self.settings.joint:
            try:
                index = list(msg.name).index(self.settings.joint)
            except ValueError:
                self.get_logger().warn(
                    f'{self.settings.encoder_topic}: no joint {self.settings.joint!r} in '
                    f'{list(msg.name)}', throttle_duration_sec=5.0)
                return
        else:
            index = 0
        if index < len(msg.velocity):
            self._sum += float(msg.velocity[index])
            self._count += 1

    def _on_timer(self) -> None:
        now_ns = self.get_clock().now().nanoseconds
        dt_ns = self._period_ns if self._last_ns is None else now_ns - self._last_ns
        self._last_ns = now_ns
        if self._count:  # several samples when an update came late: their mean, less noise
            self._velocity = self._sum / self._count
            self._sum, self._count = 0.0, 0
        command = self._command  # one message, reused: only its value changes
        command.value = 0.0 if self._velocity is None else \
            self._pi.update(self._setpoint, self._velocity, dt_ns / 1e9)
        self._publisher.publish(command)


def make_executor(kind: str, context: Context | None = None) -> tuple[Executor, str]:
    """The executor to spin with, and its name. ``events``: rclpy's EventsExecutor (C++,
    rclpy.experimental since Jazzy), several times cheaper per callback than the
    SingleThreadedExecutor, which rebuilds its whole wait set in Python on every pass (three
    passes per control period here); where rclpy lacks it, the SingleThreadedExecutor."""
    if kind == 'events':
        try:
            # Through the package (an rclpy without it fails here); the module, as the package
            # re-exports the executor without __all__.
            from rclpy.experimental import events_executor
        except ImportError:
            pass
        else:
            return events_executor.EventsExecutor(context=context), 'events'
    return SingleThreadedExecutor(context=context), 'single_threaded'


def spin(node: Node, executor: Executor) -> None:
    """Spin until shutdown with ``spin_once`` (rclpy's EventsExecutor.spin() hangs with a
    timer on ROS time in the versions tested; spin_once serves the same callbacks)."""
    executor.add_node(node)
    context = node.context
    while context.ok():
        try:
            executor.spin_once(timeout_sec=0.1)
        except ExternalShutdownException:
            return
        except RuntimeError:
            # SIGINT shuts the context down while spin_once converts a callback's arguments
            # (rclpy raises "Unable to convert call argument"): a shutdown, not a failure.
            if context.ok():
                raise
            return


def _sets_use_sim_time(args: list[str]) -> bool:
    """True when the ROS arguments set use_sim_time (on the command line or in a params
    file); otherwise the controller defaults it to true, since it is meant to run on sim."""
    for index, arg in enumerate(args):
        if 'use_sim_time' in arg:
            return True
        if arg == '--params-file' and index + 1 < len(args):
            try:
                if 'use_sim_time' in Path(args[index + 1]).read_text(encoding='utf-8'):
                    return True
            except OSError:
                pass  # rclpy reports the unreadable file itself
    return False


def main(args: list[str] | None = None) -> int:
    argv = list(sys.argv if args is None else args)
    rclpy.init(args=argv)
    try:
        node = WheelSpeedController(default_sim_time=not _sets_use_sim_time(argv))
    except ValueError as exc:
        print(f'{NODE_NAME}: error: {exc}', file=sys.stderr)
        rclpy.try_shutdown()
        return 2
    executor, kind = make_executor(node.settings.executor, node.context)
    if kind != node.settings.executor:
        node.get_logger().info(f'executor {node.settings.executor!r} not available in this '
                               f'rclpy: using {kind}')
    try:
        spin(node, executor)
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    finally:
        executor.shutdown()
        node.destroy_node()
        rclpy.try_shutdown()
    return 0


if __name__ == '__main__':
    sys.exit(main())
