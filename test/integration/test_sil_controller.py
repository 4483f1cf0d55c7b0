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
