"""SIL demo: the simulation node and the example wheel-speed PI controller (``sil_controller``).

    ros2 launch fibril_sim_ros sil_demo.launch.py [setpoint:=10.0] [kp:=0.01] [ki:=0.7]
        [rate:=500.0] [sync:=false] [sync_timeout:=5.0] [rtf:=1.0] [paused:=false] [seed:=0]
        [trace_dir:=DIR] [manifest:=PATH] [bridge:=PATH]

With ``sync:=true`` the node waits for the controller's command after every 2 ms control
period (deterministic lockstep: the same seed gives the same trace on every run) and runs as
fast as that loop goes (``sync_timeout``: the wall seconds the controller may take to answer
before the node reports it); otherwise it runs at ``rtf``. Both nodes use sim time.

With ``paused:=true`` the node waits for ``~/set_paused`` (or ``~/step``) before the first tick:
a test or a recorder that subscribes after the launch sees the run from its start (the node
otherwise starts as soon as the controller is there, before a later subscriber exists).
"""

from __future__ import annotations

import os

from ament_index_python.packages import get_package_share_directory
from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, IncludeLaunchDescription, OpaqueFunction
from launch.launch_description_sources import PythonLaunchDescriptionSource
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node

CONTROLLER_ARGUMENTS = (
    ('setpoint', '10.0', 'wheel speed setpoint, rad/s'),
    ('kp', '0.01', 'proportional gain, duty per rad/s'),
    ('ki', '0.7', 'integral gain, duty per rad'),
    ('rate', '500.0', 'control rate, Hz (sim time)'),
)


def _controller(context, *args, **kwargs):
    parameters = {'use_sim_time': True}
    for name, _, _ in CONTROLLER_ARGUMENTS:
        text = LaunchConfiguration(name).perform(context).strip()
        try:
            parameters[name] = float(text)
        except ValueError:
            raise ValueError(f'sil_demo.launch.py: argument {name}:={text!r} is not a '
                             f'number') from None
    return [Node(package='fibril_sim_ros', executable='sil_controller', name='sil_controller',
                 output='screen', emulate_tty=True, parameters=[parameters])]


def _sim(context, *args, **kwargs):
    sync = LaunchConfiguration('sync').perform(context).strip().lower() in ('true', '1', 'yes')
    arguments = {name: LaunchConfiguration(name).perform(context)
                 for name in ('rtf', 'paused', 'seed', 'trace_dir', 'bridge', 'manifest',
                              'sync_timeout')}
    arguments['sync_topics'] = '/motor/command' if sync else ''
    arguments['control_period'] = '0.002'
    sim_launch = os.path.join(get_package_share_directory('fibril_sim_ros'), 'launch',
                              'sim.launch.py')
    return [IncludeLaunchDescription(PythonLaunchDescriptionSource(sim_launch),
                                     launch_arguments=arguments.items())]


def generate_launch_description() -> LaunchDescription:
    share = get_package_share_directory('fibril_sim_ros')
    manifest = os.path.join(share, 'config', 'examples', 'drivetrain', 'simulation.yaml')
    declared = [DeclareLaunchArgument(name, default_value=default, description=description)
                for name, default, description in (
                    *CONTROLLER_ARGUMENTS,
                    ('sync', 'false', 'deterministic lockstep with the controller'),
                    ('sync_timeout', '5.0', 'sync mode: wall seconds the controller may take '
                                            'to answer'),
                    ('rtf', '1.0', 'real-time factor when not in sync mode'),
                    ('paused', 'false', 'start paused (resume with ~/set_paused, or ~/step)'),
                    ('seed', '0', 'episode seed'),
                    ('trace_dir', '', 'session trace directory (empty: no trace)'),
                    ('bridge', '', 'bridge YAML (empty: defaults)'),
                    ('manifest', manifest, 'SimulationManifest YAML'))]
    return LaunchDescription([*declared, OpaqueFunction(function=_sim),
                              OpaqueFunction(function=_controller)])
