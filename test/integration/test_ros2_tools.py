"""The ROS 2 tools ``make setup`` installs from the vendored sources, and what they need.

- ``ros2`` in the venv's bin/ answers ``--help``; the interface packages built from their
  definitions import (composition_interfaces, which launch_ros imports, tf2_msgs,
  simulation_interfaces);
- ``import launch`` is ROS's launch package, from the repository root and from elsewhere, and no
  path the project installs offers a ``launch`` or ``config`` module (the editable install once
  put ``fibril_sim_ros/launch -> ../launch`` on sys.path, shadowing ROS's package);
- the ament index lays the project's packages out as ``ros2 pkg`` / ``ros2 run`` /
  ``ros2 launch`` expect (share/ files, lib/<pkg>/ executables);
- pytest loads launch_testing's plugin, and ``launch_test`` runs a launch_testing suite.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from _ros2_cli import BIN, REPO, ROS2, needs_tools, ros2, ros_domain

pytestmark = needs_tools


def _python(code: str, cwd: Path) -> str:
    result = subprocess.run([sys.executable, '-c', code], cwd=cwd, capture_output=True,
                            text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_ros2_help_lists_the_commands(tmp_path: Path) -> None:
    result = subprocess.run([str(ROS2), '--help'], capture_output=True, text=True, timeout=120,
                            cwd=tmp_path, check=False)
    assert result.returncode == 0, result.stderr
    for command in ('launch', 'topic', 'service', 'param', 'node', 'run', 'pkg', 'interface'):
        assert f'  {command} ' in result.stdout, (command, result.stdout)


@pytest.mark.parametrize('statement', [
    'from composition_interfaces.srv import LoadNode',
    'from tf2_msgs.msg import TFMessage',
    'from simulation_interfaces.srv import GetSimulatorFeatures',
    'from simulation_interfaces.action import SimulateSteps',
    'from visualization_msgs.msg import MarkerArray',
])
def test_interface_packages_import(statement: str, tmp_path: Path) -> None:
    _python(statement, tmp_path)


_WHERE = 'import json, launch, sys; print(json.dumps([launch.__file__, sys.path]))'


@pytest.mark.parametrize('where', ['repo-root', 'elsewhere'])
def test_import_launch_is_ros_launch(where: str, tmp_path: Path) -> None:
    cwd = REPO if where == 'repo-root' else tmp_path
    launch_file, path = json.loads(_python(_WHERE, cwd))
    environment = Path(sys.prefix).resolve()  # the venv (which may lie in the repository)
    assert 'site-packages' in Path(launch_file).parts, launch_file
    assert Path(launch_file).parent.name == 'launch'
    assert Path(launch_file).resolve().is_relative_to(environment), launch_file
    # No sys.path entry the project put there (the editable packages' folders) holds a
    # `launch` or `config` module or package; cwd ('' or the repo root with -c) is the user's.
    for entry in path:
        if not entry or Path(entry).resolve() == cwd.resolve():
            continue
        resolved = Path(entry).resolve()
        if resolved.is_relative_to(REPO) and not resolved.is_relative_to(environment):
            for name in ('launch', 'config'):
                for candidate in (Path(entry) / name, Path(entry) / f'{name}.py'):
                    assert not candidate.exists(), f'{candidate} is importable as {name}'


def test_python_m_launch_is_not_the_projects_folder(tmp_path: Path) -> None:
    result = subprocess.run([sys.executable, '-c', 'import launch.launch_service'],
                            cwd=REPO / 'fibril_sim_ros', capture_output=True, text=True,
                            timeout=120, check=False)
    assert result.returncode == 0, result.stderr


def test_ament_layout_of_the_project_packages(tmp_path: Path) -> None:
    with ros_domain(tmp_path / 'log') as env:
        listed = ros2(['pkg', 'list'], env)
        assert listed.returncode == 0, listed.stdout
        packages = set(listed.stdout.split())
        assert {'fibril_sim_ros', 'fibril_sim_core', 'fibril_calibration', 'fibril_msgs',
                'launch', 'launch_ros', 'launch_testing', 'composition_interfaces',
                'tf2_msgs', 'simulation_interfaces'} <= packages, sorted(packages)
        executables = ros2(['pkg', 'executables', 'fibril_sim_ros'], env).stdout.split('\n')
        assert {'fibril_sim_ros sim_node', 'fibril_sim_ros sil_controller'} <= set(executables)
        share = Path(ros2(['pkg', 'prefix', '--share', 'fibril_sim_ros'], env).stdout.strip())
    assert share == BIN.parent / 'share' / 'fibril_sim_ros'
    for launch_file in (REPO / 'launch').glob('*.launch.py'):
        assert (share / 'launch' / launch_file.name).resolve() == launch_file.resolve()
    for config in (REPO / 'config').rglob('*'):
        if config.is_file():
            installed = share / 'config' / config.relative_to(REPO / 'config')
            assert installed.resolve() == config.resolve(), installed
    assert (share / 'package.xml').read_text() == (REPO / 'fibril_sim_ros' /
                                                    'package.xml').read_text()


def test_pytest_loads_the_launch_testing_plugin(pytestconfig: pytest.Config) -> None:
    plugins = pytestconfig.pluginmanager
    assert plugins.hasplugin('launch_testing'), sorted(n for n, _ in plugins.list_name_plugin())
    assert 'launch_test' in '\n'.join(pytestconfig.getini('markers'))


@pytest.mark.ros
@pytest.mark.slow
def test_launch_test_runs_the_sim_launch_suite(tmp_path: Path) -> None:
    """``launch_test`` (launch_testing's own runner, not pytest) on test/launch/."""
    with ros_domain(tmp_path / 'log') as env:
        result = subprocess.run(
            [str(BIN / 'launch_test'), str(REPO / 'test' / 'launch' / 'test_sim_launch.py'),
             '--junit-xml', str(tmp_path / 'junit.xml')],
            env=env, cwd=tmp_path, capture_output=True, text=True, timeout=600, check=False)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-4000:]
    junit = (tmp_path / 'junit.xml').read_text()
    assert 'failures="0"' in junit and 'errors="0"' in junit, junit
    assert 'test_step_advances_exactly_n_ticks_and_clock_follows' in junit, junit
