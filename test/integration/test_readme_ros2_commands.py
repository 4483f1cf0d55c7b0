"""Every ``ros2 ...`` command in README.md and in the pages of docs/ runs, as a user would type
it.

The commands are read from the README and the pages themselves (not the generated Reference):
each line of a fenced code block that the docs snippet test does not run itself (a ``text``
block, or one marked ``<!-- snippet: skip: ... -->``; see test/docs/_snippets.py) that starts with
``ros2 `` (with its ``\\`` continuations, without its ``#`` comment), and each inline code span
``ros2 ...`` of four words or more that is not the beginning of one of those (a prose mention
like ``ros2 run fibril_sim_ros sim_node`` is run as the full command it refers to). A synopsis's
optional ``[...]`` arguments are left out and its placeholders replaced (``my_robot.yaml``: the
drivetrain example, ``calibration.yaml``: its calibration request; ``/tmp/...``: a temporary
folder).

How each runs depends on what it is: a node or launch file runs until its topics are seen and
is then stopped with SIGINT as Ctrl-C sends it (exit 0 for ``ros2 launch`` and the controller,
the simulation node's documented SIGINT status 130 through ``ros2 run``); ``--help``, a
calibration, ``ros2 param set``, ``ros2 topic echo --once``, ``ros2 topic pub --once`` and
``ros2 service call`` (against a running node; a simulation_interfaces call must answer
RESULT_OK) run to completion with status 0. A command this test does not know how to run fails
it: add its runner here.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack
from pathlib import Path

import pytest

from _ros2_cli import (
    REPO,
    ROS2,
    RosProcess,
    needs_tools,
    ros2,
    ros_domain,
    ros_process,
    run_until_discovered,
    wait_for_graph,
)
from _patience import patience

sys.path.insert(0, str(REPO / 'test' / 'docs'))
import _snippets  # noqa: E402  (which blocks the docs snippet test runs itself)

README = REPO / 'README.md'
EXAMPLE = 'config/examples/drivetrain/simulation.yaml'
# The README quickstart's robot: `fibril_sim init` of the drivetrain's MJCF into my_robot/.
MY_ROBOT_MODEL = REPO / 'config/examples/drivetrain/drivetrain.xml'
MY_ROBOT_TOPICS = ['/clock', '/wheel_joint_encoder', '/drive/command']
# A synopsis's file placeholders, as the drivetrain example's files.
PLACEHOLDERS = {'my_robot.yaml': REPO / EXAMPLE,
                'my_bridge.yaml': REPO / 'config/examples/drivetrain/bridge.yaml',
                'calibration.yaml': REPO / 'config/examples/drivetrain/calibration.yaml'}
# Words of an inline mention at least this long are a command.
MIN_INLINE_WORDS = 4


def _block_commands(text: str) -> list[str]:
    commands, in_block, pending = [], False, ''
    for line in text.splitlines():
        if line.lstrip().startswith('```'):
            in_block, pending = not in_block, ''
            continue
        if not in_block:
            continue
        stripped = line.strip()
        if pending:
            pending += ' ' + stripped
        elif stripped.startswith('ros2 '):
            pending = stripped
        else:
            continue
        if pending.endswith('\\'):
            pending = pending[:-1].rstrip()
            continue
        commands.append(pending)
        pending = ''
    return [_without_comment(c) for c in commands]


def _without_comment(command: str) -> str:
    return re.sub(r'\s+#.*$', '', command).strip()


def _inline_commands(text: str) -> list[str]:
    spans = re.findall(r'`(ros2 [^`]+)`', text)
    return [' '.join(span.split()) for span in spans]


def readme_commands(text: str) -> list[str]:
    """The README's ros2 commands, each once, in order (see the module docstring)."""
    blocks = _block_commands(text)
    commands = list(dict.fromkeys(blocks))
    for span in _inline_commands(text):
        words = _synopsis(span).split()
        if len(words) < MIN_INLINE_WORDS:
            continue  # names a tool (`ros2 param`, `ros2 bag info/play`), not a command
        if any(block.split()[:len(words)] == words for block in blocks):
            continue  # the beginning of a command the README gives in full
        if span not in commands:
            commands.append(span)
    return commands


def _unrun_text(page: Path) -> str:
    """The page with the bodies of the blocks the docs snippet test runs blanked out."""
    lines = page.read_text(encoding='utf-8').splitlines()
    for snippet in _snippets.extract(page):
        if 'skip' not in snippet.options:
            count = len(snippet.text.splitlines())
            lines[snippet.line:snippet.line + count] = [''] * count
    return '\n'.join(lines)


def documented_commands() -> list[str]:
    """The ros2 commands of README.md and the docs pages, each once, in order."""
    commands: list[str] = []
    for page in [README, *_snippets.pages()]:
        commands += [c for c in readme_commands(_unrun_text(page)) if c not in commands]
    words = [_synopsis(c).split() for c in commands]
    # A bare mention (`ros2 run fibril_sim_ros sim_node ...`) that begins a full command of
    # another page is that command.
    return [c for c, w in zip(commands, words)
            if len(w) > MIN_INLINE_WORDS or not any(len(o) > len(w) and o[:len(w)] == w
                                                    for o in words)]


def _synopsis(command: str) -> str:
    """Optional ``[...]`` parts and an elided ``...`` left out."""
    return ' '.join(w for w in re.sub(r'\[[^\]]*\]', ' ', command).split() if w != '...')


def _my_robot(tmp_path: Path) -> Path:
    """``fibril_sim init`` of the drivetrain's MJCF, as the README's quickstart runs it."""
    folder = tmp_path / 'my_robot'
    if not folder.is_dir():
        subprocess.run([str(ROS2.parent / 'fibril_sim'), 'init', str(MY_ROBOT_MODEL), '--output',
                        str(folder)], check=True, capture_output=True, timeout=patience(120))
    return folder


def _uses_my_robot(command: list[str]) -> bool:
    return any('my_robot/' in word or word in MY_ROBOT_TOPICS[1:] for word in command)


def _concrete(command: str, tmp_path: Path) -> list[str]:
    """The command as run here: a synopsis's options left out, placeholders filled."""
    words = shlex.split(_synopsis(command))
    concrete = []
    for word in words:
        word = re.sub(r'(^|=)/tmp/(\w+)', lambda m: m.group(1) + str(tmp_path / m.group(2)),
                      word)
        word = re.sub(r'(^|=)my_robot/', lambda m: m.group(1) + str(_my_robot(tmp_path)) + '/',
                      word)
        for placeholder, path in PLACEHOLDERS.items():
            word = re.sub(rf'(^|=){re.escape(placeholder)}$', lambda m: m.group(1) + str(path),
                          word)
        concrete.append(word)
    assert concrete[0] == 'ros2'
    return [str(ROS2), *concrete[1:]]


# ------------------------------------------------------------------------------- runners
def _run_to_completion(command: list[str], env: dict[str, str], tmp_path: Path) -> None:
    result = ros2(command[1:], env, cwd=tmp_path)  # what it writes (report/) goes there
    assert result.returncode == 0, result.stdout[-3000:]
    assert result.stdout.strip(), 'no output'


def _run_until_up(topics: list[str], nodes: list[str], status: int) -> Callable[..., None]:
    def run(command: list[str], env: dict[str, str], tmp_path: Path) -> None:
        wanted = MY_ROBOT_TOPICS if _uses_my_robot(command) else topics
        with ros_process(command, env, tmp_path / 'out.txt') as process:
            wait_for_graph(env, process, topics=wanted, nodes=nodes)
            code = process.interrupt()
            assert code == status, f'exit {code}, wanted {status}: {process.context()}'
    return run


#: The runners of commands against a running node (they take RunningNodes), not processes of
#: their own (they take the command's environment and folder): whether the node is paused and
#: whether the command changes the simulation's state.
ON_A_RUNNING_NODE: dict[Callable[..., None], tuple[bool, bool]] = {}


def _against_a_running_node(runner: Callable[..., None], *, paused: bool = False,
                            changes_state: bool = False) -> Callable[..., None]:
    ON_A_RUNNING_NODE[runner] = (paused, changes_state)
    return runner


class RunningNodes:
    """The README's ``ros2 run fibril_sim_ros sim_node`` on the drivetrain example (paused or
    not) or on the quickstart's ``my_robot/``, each on a ROS domain of its own, started once for
    the commands that run against a running node (ordered so that the commands of one
    configuration follow each other, see RUN_ORDER): one node start per configuration, not one
    per command. At most one runs at a time; a command that changes the simulation's state
    (pausing it) has its node stopped after it, so a later command gets a fresh one."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.key: tuple[bool, bool] | None = None
        self.stack: ExitStack | None = None
        self.env: dict[str, str] = {}
        self.process: RosProcess | None = None
        self.seen: set[str] | None = None  # the running node's topics seen on the graph
        self.starts = 0

    def node(self, *, paused: bool = False, my_robot: bool = False,
             topics: Sequence[str] = ()) -> dict[str, str]:
        """The environment of the running node of that configuration, once it shows
        ``/fibril_sim`` and ``topics`` on the graph."""
        if self.key != (paused, my_robot) or (self.process and not self.process.alive()):
            self.stop()
            self._start(paused=paused, my_robot=my_robot)
        assert self.process is not None
        if self.seen is None or not set(topics) <= self.seen:  # not yet seen on the graph
            wait_for_graph(self.env, self.process, nodes=['/fibril_sim'], topics=topics)
            self.seen = (self.seen or set()) | set(topics)
        assert self.process.alive(), self.process.context()
        return self.env

    def _start(self, *, paused: bool, my_robot: bool) -> None:
        self.starts += 1
        folder = self.folder / f'node-{self.starts}'
        folder.mkdir()
        files = [f'manifest:={EXAMPLE}']
        if my_robot:
            robot = _my_robot(self.folder)
            files = [f'manifest:={robot / "simulation.yaml"}', '-p',
                     f'bridge:={robot / "bridge.yaml"}']
        node = [str(ROS2), 'run', 'fibril_sim_ros', 'sim_node', '--ros-args', '-p', *files,
                *(['-p', 'start_paused:=true'] if paused else [])]
        self.stack = ExitStack()
        self.env = self.stack.enter_context(ros_domain(folder / 'log'))
        self.process = self.stack.enter_context(ros_process(node, self.env, folder / 'node.txt'))
        self.key = (paused, my_robot)
        self.seen = None

    def assert_survived(self) -> None:
        """The node still runs after a command (a command that ends it fails its own test; the
        next command gets a fresh node)."""
        if self.process is not None and not self.process.alive():
            context = self.process.context()
            self.stop()
            raise AssertionError(f'the node exited during the command: {context}')

    def stop(self) -> None:
        if self.stack is None:
            return
        try:
            if self.process is not None and self.process.alive():
                self.process.interrupt()
        finally:
            stack, self.stack, self.process, self.key = self.stack, None, None, None
            stack.close()


@_against_a_running_node
def _param_set_on_running_node(command: list[str], nodes: RunningNodes) -> None:
    env = nodes.node()
    result = _once_the_node_is_found(command[1:], env)
    assert result.returncode == 0 and 'Set parameter successful' in result.stdout, (
        result.stdout)
    name, value = command[-2:]
    got = _once_the_node_is_found(['param', 'get', '/fibril_sim', name], env).stdout
    assert value in got, got


def _once_the_node_is_found(args: list[str], env: dict[str, str]
                            ) -> subprocess.CompletedProcess[str]:
    """``ros2 param ...``, again while the CLI's fresh node has not discovered the node yet
    ("Node not found": each ``ros2`` command discovers the graph anew, slowly when busy)."""
    deadline = time.monotonic() + patience(30.0)
    while True:
        result = ros2(args, env)
        if 'Node not found' not in result.stdout or time.monotonic() > deadline:
            return result
        time.sleep(1.0)


@_against_a_running_node
def _echo_once_on_running_node(command: list[str], nodes: RunningNodes) -> None:
    topic = command[3]
    env = nodes.node(topics=[topic], my_robot=_uses_my_robot(command))
    output = run_until_discovered(command[1:], env)
    assert output.rstrip().endswith('---'), output


@_against_a_running_node
def _publish_once_on_running_node(command: list[str], nodes: RunningNodes) -> None:
    """``ros2 topic pub --once TOPIC TYPE MSG``: it waits for the node's subscription, publishes
    and exits 0; the node accepts the command (its accepted inputs count it)."""
    topic = command[4]
    env = nodes.node(topics=[topic], my_robot=_uses_my_robot(command))
    result = ros2(command[1:], env)
    assert result.returncode == 0 and 'publishing' in result.stdout, result.stdout


def _service_call(*, paused: bool, ok: bool = True,
                  changes_state: bool = False) -> Callable[..., None]:
    """A service call answered; a simulation_interfaces one (``ok``) with ``result: 1``
    (RESULT_OK). ``changes_state``: the node is stopped after it (a later command gets a fresh
    one)."""
    def run(command: list[str], nodes: RunningNodes) -> None:
        try:
            result = ros2(command[1:], nodes.node(paused=paused))
        finally:
            if changes_state:
                nodes.stop()
        assert result.returncode == 0 and 'response:' in result.stdout, result.stdout
        if not ok:
            return
        assert re.search(r'response:.*result=1\b', result.stdout, re.S) or re.search(
            r'result:\s+result: 1\b', result.stdout), result.stdout
    return _against_a_running_node(run, paused=paused, changes_state=changes_state)


def _resume(command: list[str], nodes: RunningNodes) -> None:
    try:
        result = ros2(command[1:], nodes.node(paused=True))
    finally:
        nodes.stop()  # (it runs now: a later command gets a fresh one)
    assert result.returncode == 0 and re.search(r'success=True.*paused=False', result.stdout,
                                                re.S), result.stdout


_resume_a_paused_node = _against_a_running_node(_resume, paused=True, changes_state=True)

SIM_TOPICS = ['/clock', '/wheel_encoder', '/motor/command']
RUNNERS: list[tuple[str, Callable[..., None]]] = [
    (r'^ros2 run \S+ \S+ --help$', _run_to_completion),
    (r'^ros2 run fibril_calibration calibrate \S+\.yaml( --[\w-]+ [^-\s]\S*)*$',
     _run_to_completion),
    (r'^ros2 run fibril_sim_ros sim_node\b', _run_until_up(SIM_TOPICS, ['/fibril_sim'], 130)),
    (r'^ros2 run fibril_sim_ros sil_controller\b',
     _run_until_up(['/motor/command'], ['/sil_controller'], 0)),
    (r'^ros2 launch fibril_sim_ros sil_demo\.launch\.py\b',
     _run_until_up(SIM_TOPICS, ['/fibril_sim', '/sil_controller'], 0)),
    (r'^ros2 launch fibril_sim_ros sim\.launch\.py\b',
     _run_until_up(SIM_TOPICS, ['/fibril_sim'], 0)),
    (r'^ros2 param set /fibril_sim \S+ \S+$', _param_set_on_running_node),
    (r'^ros2 topic echo /\S+ --once$', _echo_once_on_running_node),
    (r'^ros2 topic pub --once /\S+ \S+ ', _publish_once_on_running_node),
    (r'^ros2 service call /fibril_sim/get_state \S+$', _service_call(paused=False, ok=False)),
    # pausing a running simulation; stepping a paused one
    (r'^ros2 service call /fibril_sim/set_simulation_state \S+ ',
     _service_call(paused=False, changes_state=True)),
    (r'^ros2 service call /fibril_sim/step_simulation \S+ ', _service_call(paused=True)),
    # resuming a paused node (it answers success=True, paused=False)
    (r'^ros2 service call /fibril_sim/set_paused \S+ ', _resume_a_paused_node),
]


def _runner(command: str) -> Callable[..., None] | None:
    for pattern, runner in RUNNERS:
        if re.search(pattern, _synopsis(command)):
            return runner
    return None


COMMANDS = documented_commands()


def _begins_a_longer_calibration(command: str, commands: Sequence[str]) -> bool:
    """A calibration synopsis whose words begin another documented calibration (the bare
    ``calibrate calibration.yaml [options]`` and ``... --report report/``): the same entry point
    on the same request, so the longer command's run covers it; a calibration is the costliest
    command here (a whole fit), run once instead of twice."""
    words = _synopsis(command).split()
    if words[:4] != ['ros2', 'run', 'fibril_calibration', 'calibrate']:
        return False
    return any(len(o) > len(words) and o[:len(words)] == words
               for o in (_synopsis(c).split() for c in commands))


#: The commands run as processes (every one of COMMANDS has a runner, see below).
RUN_COMMANDS = [c for c in COMMANDS if not _begins_a_longer_calibration(c, COMMANDS)]


def test_the_readme_has_ros2_commands() -> None:
    assert len(COMMANDS) >= 8, COMMANDS


def test_a_calibration_that_begins_a_longer_one_runs_with_it() -> None:
    bare = 'ros2 run fibril_calibration calibrate calibration.yaml [options]'
    full = 'ros2 run fibril_calibration calibrate calibration.yaml --report report/'
    assert _begins_a_longer_calibration(bare, [bare, full])
    assert not _begins_a_longer_calibration(full, [bare, full])
    assert not _begins_a_longer_calibration('ros2 run fibril_sim_ros sim_node',
                                            ['ros2 run fibril_sim_ros sim_node --ros-args'])
    assert set(COMMANDS) - set(RUN_COMMANDS) == {
        c for c in COMMANDS if _begins_a_longer_calibration(c, COMMANDS)}


def test_placeholders(tmp_path: Path) -> None:
    concrete = _concrete('ros2 launch p f.py manifest:=my_robot/simulation.yaml '
                         'trace_dir:=/tmp/sil bridge:=my_bridge.yaml', tmp_path)
    assert concrete[1:4] == ['launch', 'p', 'f.py']
    assert concrete[4:] == [f'manifest:={tmp_path}/my_robot/simulation.yaml',
                            f'trace_dir:={tmp_path}/sil',
                            f'bridge:={REPO}/config/examples/drivetrain/bridge.yaml']
    assert (tmp_path / 'my_robot' / 'bridge.yaml').is_file()


def test_extraction() -> None:
    text = '\n'.join([
        'Run it (`ros2 run pkg exe`, `ros2 param`), or `ros2 param set /n a\n  1`.',
        '```bash', 'ros2 run pkg exe --ros-args \\', '    -p a:=1   # comment',
        'python -m other', '```'])
    assert readme_commands(text) == ['ros2 run pkg exe --ros-args -p a:=1',
                                     'ros2 param set /n a 1']
    assert _synopsis('ros2 launch p f.py a:=1 [b:=...] [c:=2]') == 'ros2 launch p f.py a:=1'


@pytest.mark.parametrize('command', COMMANDS)
def test_every_readme_command_has_a_runner(command: str) -> None:
    assert _runner(command) is not None, f'documented command {command!r}: no runner in this test'


def _node_order(command: str) -> tuple[int, ...]:
    """Where a command runs in RUN_ORDER: the processes of their own first, then the commands
    against a running node, grouped by the node's configuration (my_robot/ or the drivetrain
    example, paused or not), a command that changes the simulation's state last in its group."""
    runner = _runner(command)
    if runner not in ON_A_RUNNING_NODE:
        return (0,)
    paused, changes_state = ON_A_RUNNING_NODE[runner]
    return (1, _uses_my_robot(shlex.split(_synopsis(command))), paused, changes_state)


#: RUN_COMMANDS in the order they run (sorted stably by _node_order).
RUN_ORDER = sorted(RUN_COMMANDS, key=_node_order)


def test_commands_against_a_running_node_are_grouped_by_its_configuration() -> None:
    """The state-changing command (pausing) comes after every other one on the same node."""
    groups = [_node_order(c) for c in RUN_ORDER]
    assert groups == sorted(groups)
    assert (False, True) in ON_A_RUNNING_NODE.values()  # set_simulation_state is one


@pytest.fixture(scope='module')
def running_nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningNodes]:
    nodes = RunningNodes(tmp_path_factory.mktemp('running_nodes'))
    try:
        yield nodes
    finally:
        nodes.stop()


@pytest.mark.ros
@pytest.mark.slow
@needs_tools
@pytest.mark.parametrize('command', RUN_ORDER)
def test_readme_command_runs(command: str, tmp_path: Path,
                             request: pytest.FixtureRequest) -> None:
    runner = _runner(command)
    if runner is None:
        pytest.fail(f'documented command {command!r}: no runner in this test')
    if runner in ON_A_RUNNING_NODE:
        nodes = request.getfixturevalue('running_nodes')
        runner(_concrete(command, tmp_path), nodes)
        nodes.assert_survived()
        return
    with ros_domain(tmp_path / 'log') as env:
        runner(_concrete(command, tmp_path), env, tmp_path)
