"""Launch files: every one byte-compiles, and their argument -> node parameter mapping is right.

This module runs each launch file's own logic against minimal stand-ins of the few launch
classes it uses (no ROS tools needed, every argument checked): the executables, node names and
typed parameters the simulation node and the controller declare, and the one-line error of a
bad argument. The launch files themselves run for real, as processes, where `make setup`
installed the ROS 2 tools: test/integration/test_ros2_launch.py (`ros2 launch`, defaults and
the demo, SIGINT), test/integration/test_readme_ros2_commands.py and the launch_testing suites
in test/launch/.
"""

from __future__ import annotations

import importlib.util
import py_compile
import sys
import types
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LAUNCH_FILES = sorted((ROOT / 'launch').glob('*.launch.py'))
TEST_LAUNCH_FILES = sorted((ROOT / 'test' / 'launch').glob('*.py'))


@pytest.mark.parametrize('path', LAUNCH_FILES + TEST_LAUNCH_FILES, ids=lambda p: p.name)
def test_byte_compiles(path: Path, tmp_path: Path) -> None:
    py_compile.compile(str(path), cfile=str(tmp_path / 'out.pyc'), doraise=True)


def test_the_launch_files_exist() -> None:
    assert {p.name for p in LAUNCH_FILES} >= {'sim.launch.py', 'sil_demo.launch.py'}
    assert TEST_LAUNCH_FILES, 'test/launch/ has no launch_testing suites'


# --------------------------------------------------------------------------- launch stand-ins
class _Recorded:
    def __init__(self, *args: object, **kwargs: object) -> None:
        self.args, self.kwargs = args, kwargs


class _LaunchConfiguration:
    def __init__(self, name: str) -> None:
        self.name = name

    def perform(self, context: _Context) -> str:
        return context.values[self.name]


class _Context:
    def __init__(self, values: dict[str, str]) -> None:
        self.values = values


class _LaunchDescription:
    def __init__(self, entities: list[object]) -> None:
        self.entities = entities


def _install_stand_ins(monkeypatch: pytest.MonkeyPatch, share: Path) -> None:
    modules = {
        'launch': dict(LaunchDescription=_LaunchDescription),
        'launch.actions': dict(DeclareLaunchArgument=_Recorded, OpaqueFunction=_Recorded,
                               IncludeLaunchDescription=_Recorded),
        'launch.substitutions': dict(LaunchConfiguration=_LaunchConfiguration),
        'launch.launch_description_sources': dict(PythonLaunchDescriptionSource=_Recorded),
        'launch_ros.actions': dict(Node=_Recorded),
        'launch_ros': {},
        'ament_index_python.packages': dict(
            get_package_share_directory=lambda package: str(share / package)),
        'ament_index_python': {},
    }
    for name, attributes in modules.items():
        module = types.ModuleType(name)
        module.__dict__.update(attributes)
        monkeypatch.setitem(sys.modules, name, module)


def _load(path: Path) -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(path.name.replace('.', '_'), path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _run(path: Path, overrides: dict[str, str]) -> list[_Recorded]:
    """Generate the description, resolve its arguments (defaults + overrides), run its
    OpaqueFunctions and return the actions they produce."""
    description = _load(path).generate_launch_description()
    declared = {e.args[0]: e.kwargs['default_value'] for e in description.entities
                if 'default_value' in e.kwargs}
    unknown = set(overrides) - set(declared)
    assert not unknown, f'{path.name} does not declare {unknown}'
    context = _Context({**declared, **overrides})
    actions: list[_Recorded] = []
    for entity in description.entities:
        if 'function' in entity.kwargs:
            actions += entity.kwargs['function'](context)
    return actions


@pytest.fixture
def share(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    _install_stand_ins(monkeypatch, tmp_path)
    return tmp_path


def test_sim_launch_arguments_become_typed_parameters(share: Path) -> None:
    (node,) = _run(ROOT / 'launch' / 'sim.launch.py', {
        'manifest': '/robots/r.yaml', 'bridge': '/robots/bridge.yaml', 'rtf': '2.5',
        'paused': 'true', 'seed': '7', 'trace_dir': '/tmp/trace',
        'sync_topics': '/motor/command, /arm/command', 'sync_timeout': '3',
        'control_period': '0.004'})
    (parameters,) = node.kwargs['parameters']
    assert parameters == {
        'manifest': '/robots/r.yaml', 'bridge': '/robots/bridge.yaml',
        'real_time_factor': 2.5, 'start_paused': True, 'seed': 7, 'trace_dir': '/tmp/trace',
        'sync_topics': ['/motor/command', '/arm/command'], 'sync_timeout': 3.0,
        'control_period': 0.004}
    assert isinstance(parameters['sync_timeout'], float)


@pytest.mark.parametrize(('argument', 'value', 'message'), [
    ('rtf', 'fast', "argument rtf:='fast' is not a number"),
    ('seed', '1.5', "argument seed:='1.5' is not an integer"),
    ('paused', 'maybe', "argument paused:='maybe' is not true or false"),
])
def test_sim_launch_bad_argument_names_it(share: Path, argument: str, value: str,
                                          message: str) -> None:
    with pytest.raises(ValueError, match=message.replace('.', r'\.')):
        _run(ROOT / 'launch' / 'sim.launch.py', {argument: value})


def test_sil_demo_starts_sim_and_controller(share: Path) -> None:
    include, controller = _run(ROOT / 'launch' / 'sil_demo.launch.py',
                               {'setpoint': '8', 'sync': 'true', 'seed': '3',
                                'sync_timeout': '12.5'})
    (source,) = include.args
    assert source.args == (str(share / 'fibril_sim_ros' / 'launch' / 'sim.launch.py'),)
    arguments = dict(include.kwargs['launch_arguments'])
    assert arguments['sync_topics'] == '/motor/command'
    assert arguments['seed'] == '3'
    assert arguments['sync_timeout'] == '12.5'
    assert controller.kwargs['executable'] == 'sil_controller'
    assert controller.kwargs['parameters'] == [
        {'use_sim_time': True, 'setpoint': 8.0, 'kp': 0.01, 'ki': 0.7, 'rate': 500.0}]
    # every argument the demo hands to sim.launch.py is one sim.launch.py declares
    sim_arguments = {name for name, _, _ in _load(ROOT / 'launch' / 'sim.launch.py').ARGUMENTS}
    assert set(arguments) <= sim_arguments


def test_demo_gains_match_the_controller_defaults(share: Path) -> None:
    pytest.importorskip('rclpy')
    from fibril_sim_ros.examples.wheel_speed_controller import ControllerSettings

    _, controller = _run(ROOT / 'launch' / 'sil_demo.launch.py', {})
    (parameters,) = controller.kwargs['parameters']
    defaults = ControllerSettings()
    assert {k: parameters[k] for k in ('setpoint', 'kp', 'ki', 'rate')} == {
        'setpoint': defaults.setpoint, 'kp': defaults.kp, 'ki': defaults.ki,
        'rate': defaults.rate}


def test_setup_py_installs_the_controller_executable() -> None:
    text = (ROOT / 'fibril_sim_ros' / 'setup.py').read_text()
    assert "'sil_controller = fibril_sim_ros.examples.wheel_speed_controller:main'" in text
