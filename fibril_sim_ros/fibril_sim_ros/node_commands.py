"""The simulation node's parameters and command lines, and its launch description.

Shared by ``SimHarness`` (processes started from a test) and ``sim_launch_description``
(``launch_testing`` suites), so both start the same node with the same parameters.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

from .processes import SimHarnessError

if TYPE_CHECKING:
    from launch import LaunchDescription
    from typing import Unpack

NODE_NAME = 'fibril_sim'
NODE_MODULE = 'fibril_sim_ros.sim_node'
CONTROLLER_MODULE = 'fibril_sim_ros.examples.wheel_speed_controller'

#: A ROS parameter's value as ``--ros-args -p`` and launch take it.
ParameterValue = (bool | int | float | str | Sequence[bool] | Sequence[int] | Sequence[float]
                  | Sequence[str])


class NodeOptions(TypedDict, total=False):
    """``sim_node_parameters``' keyword options (for ``sim_launch_description``)."""

    bridge: str | os.PathLike[str] | None
    seed: int
    start_paused: bool
    real_time_factor: float
    trace_dir: str | os.PathLike[str] | None
    sync_topics: Sequence[str]
    sync_timeout: float | None
    control_period: float | None
    extra: Mapping[str, ParameterValue] | None


def sim_node_parameters(
    manifest: str | os.PathLike[str],
    *,
    bridge: str | os.PathLike[str] | None = None,
    seed: int = 0,
    start_paused: bool = True,
    real_time_factor: float = 1.0,
    trace_dir: str | os.PathLike[str] | None = None,
    sync_topics: Sequence[str] = (),
    sync_timeout: float | None = None,
    control_period: float | None = None,
    extra: Mapping[str, ParameterValue] | None = None,
) -> dict[str, ParameterValue]:
    """The node's ROS parameters, typed as it declares them (paths made absolute)."""
    params: dict[str, ParameterValue] = {
        'manifest': str(Path(manifest).resolve()),
        'seed': int(seed),
        'start_paused': bool(start_paused),
        'real_time_factor': float(real_time_factor),
    }
    if bridge is not None:
        params['bridge'] = str(Path(bridge).resolve())
    if trace_dir is not None:
        params['trace_dir'] = str(Path(trace_dir).resolve())
    if sync_topics:
        params['sync_topics'] = [str(topic) for topic in sync_topics]
    if sync_timeout is not None:
        params['sync_timeout'] = float(sync_timeout)
    if control_period is not None:
        params['control_period'] = float(control_period)
    params.update(extra or {})
    return params


def ros_args(parameters: Mapping[str, ParameterValue]) -> list[str]:
    """``--ros-args -p name:=value ...`` for a parameter dict (values as JSON, a YAML subset,
    so strings stay strings and floats stay floats)."""
    args = ['--ros-args']
    for name, value in parameters.items():
        plain = value if isinstance(value, (bool, int, float, str)) else list(value)
        args += ['-p', f'{name}:={json.dumps(plain)}']
    return args


def python_node_command(module: str,
                        parameters: Mapping[str, ParameterValue] | None = None) -> list[str]:
    """Command line running ``python -m module`` with ROS parameters, in this interpreter."""
    return [sys.executable, '-m', module, *ros_args(parameters or {})]


def example_controller_command(**parameters: ParameterValue) -> list[str]:
    """The example wheel-speed PI controller (``sil_controller``) with ROS parameters, e.g.
    ``example_controller_command(setpoint=8.0)``; it runs on sim time."""
    return python_node_command(CONTROLLER_MODULE, {'use_sim_time': True, **parameters})


def sim_launch_description(
    manifest: str | os.PathLike[str],
    *,
    controller: Sequence[str] | None = None,
    ready_to_test: bool = True,
    **options: Unpack[NodeOptions],
) -> LaunchDescription:
    """A ``launch.LaunchDescription``: the simulation node (``ros2 run fibril_sim_ros
    sim_node``, node name ``fibril_sim``) on ``manifest`` with ``sim_node_parameters(**options)``
    (started paused unless ``start_paused=False``), your ``controller`` command if given, and
    ``launch_testing.actions.ReadyToTest()`` for a ``generate_test_description``."""
    try:
        from launch import LaunchDescription
        from launch.actions import ExecuteProcess
        from launch_ros.actions import Node as NodeAction
    except ImportError as exc:
        raise SimHarnessError(
            f'sim_launch_description needs the ROS 2 launch packages (launch, launch_ros), '
            f'which come with a ROS 2 installation (source /opt/ros/<distro>/setup.bash): '
            f'{exc}; without launch use fibril_sim_ros.testing.SimHarness') from exc
    entities: list[object] = [NodeAction(
        package='fibril_sim_ros', executable='sim_node', name=NODE_NAME, output='screen',
        parameters=[sim_node_parameters(manifest, **options)])]
    if controller:
        entities.append(ExecuteProcess(cmd=list(controller), output='screen'))
    if ready_to_test:
        try:
            from launch_testing.actions import ReadyToTest
        except ImportError as exc:
            raise SimHarnessError(f'ready_to_test=True needs launch_testing: {exc}') from exc
        entities.append(ReadyToTest())
    return LaunchDescription(entities)
