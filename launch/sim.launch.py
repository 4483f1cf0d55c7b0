"""Launch the Fibril simulation node (``fibril_sim``) on a manifest.

    ros2 launch fibril_sim_ros sim.launch.py [manifest:=PATH] [bridge:=PATH] [rtf:=1.0]
        [paused:=false] [seed:=N] [trace_dir:=DIR] [sync_topics:=/motor/command[,...]]
        [sync_timeout:=5.0] [control_period:=0.002]

``manifest`` defaults to the installed drivetrain example; an empty ``bridge`` means the
defaults derived from the manifest, an empty ``trace_dir`` no trace, empty ``sync_topics`` no
sync mode. The node runs on sim time and publishes ``/clock``.
"""

from __future__ import annotations

import os

from ament_index_python.packages import get_package_share_directory
from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, OpaqueFunction
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node

ARGUMENTS = (
    ('manifest', None, 'SimulationManifest YAML (default: the drivetrain example)'),
    ('bridge', '', 'bridge YAML (empty: defaults derived from the manifest)'),
    ('rtf', '1.0', 'real-time factor (0: as fast as possible)'),
    ('paused', 'false', 'start paused (step with ~/step, resume with ~/set_paused)'),
    ('seed', '-1', "episode seed (-1: the manifest's scenario.seed)"),
    ('trace_dir', '', 'write the session trace into this directory (empty: no trace)'),
    ('sync_topics', '', 'comma-separated controller topics for sync mode (empty: off)'),
    ('sync_timeout', '5.0', 'sync mode: wall seconds a controller topic may take to answer'),
    ('control_period', '0.002', 'sync mode: seconds of sim time between answers'),
)


def _default_manifest() -> str:
    share = get_package_share_directory('fibril_sim_ros')
    return os.path.join(share, 'config', 'examples', 'drivetrain', 'simulation.yaml')


def _number(context, name: str, kind: type):
    text = LaunchConfiguration(name).perform(context).strip()
    try:
        return kind(text)
    except ValueError:
        raise ValueError(f'sim.launch.py: argument {name}:={text!r} is not '
                         f'{"an integer" if kind is int else "a number"}') from None


def _flag(context, name: str) -> bool:
    text = LaunchConfiguration(name).perform(context).strip().lower()
    if text not in ('true', 'false', '1', '0', 'yes', 'no'):
        raise ValueError(f'sim.launch.py: argument {name}:={text!r} is not true or false')
    return text in ('true', '1', 'yes')


def _sim_node(context, *args, **kwargs):
    parameters = {
        'manifest': LaunchConfiguration('manifest').perform(context),
        'real_time_factor': _number(context, 'rtf', float),
        'start_paused': _flag(context, 'paused'),
        'seed': _number(context, 'seed', int),
    }
    for name in ('bridge', 'trace_dir'):
        value = LaunchConfiguration(name).perform(context).strip()
        if value:
            parameters[name] = value
    sync_topics = [t.strip() for t in LaunchConfiguration('sync_topics').perform(context)
                   .split(',') if t.strip()]
    if sync_topics:
        parameters['sync_topics'] = sync_topics
        parameters['sync_timeout'] = _number(context, 'sync_timeout', float)
        parameters['control_period'] = _number(context, 'control_period', float)
    return [Node(package='fibril_sim_ros', executable='sim_node', name='fibril_sim',
                 output='screen', emulate_tty=True, parameters=[parameters])]


def generate_launch_description() -> LaunchDescription:
    declared = [
        DeclareLaunchArgument(name, default_value=_default_manifest() if default is None
                              else default, description=description)
        for name, default, description in ARGUMENTS]
    return LaunchDescription([*declared, OpaqueFunction(function=_sim_node)])
