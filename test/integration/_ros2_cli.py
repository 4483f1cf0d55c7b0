"""The ``ros2`` command and ``ros2 launch`` as processes, for the tests of the ROS 2 tools.

The tools (``ros2``, launch, launch_testing) come from ``make setup`` when the vendored sources
are beside the repository (scripts/bootstrap.sh, step 5); without them these tests skip.
Each test runs on a ROS domain of its own (the harness's lock files, so no other test session
on the machine shares it), with Fast DDS over shared memory, and never leaves a ``ros2``
daemon behind.
"""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import pytest

from _patience import patience

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
ROS2 = BIN / 'ros2'
# Wall-time limits: generous, the machine may be busy.
START_WALL = 90.0
STOP_WALL = 60.0
GRAPH_WATCH = Path(__file__).with_name('_graph_watch.py')


def tools_missing() -> str | None:
    """Why the ROS 2 tools cannot be used here, or None."""
    if not ROS2.is_file():
        return (f'{ROS2} not installed: make setup installs the ROS 2 tools from '
                f'../shared/vendor/ros2 (or FIBRIL_ROS_VENDOR), absent here')
    for module in ('launch', 'launch_ros', 'launch_testing', 'launch_testing_ros'):
        if importlib.util.find_spec(module) is None:
            return f'the {module} package is not installed (make setup, step 5)'
    return None


needs_tools = pytest.mark.skipif(tools_missing() is not None, reason=str(tools_missing()))


def ros_environment(domain_id: int, log_dir: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(ROS_DOMAIN_ID=str(domain_id), FASTDDS_BUILTIN_TRANSPORTS='SHM',
               ROS_LOG_DIR=str(log_dir), PYTHONUNBUFFERED='1', RCUTILS_COLORIZED_OUTPUT='0')
    return env


@contextmanager
def ros_domain(log_dir: Path) -> Iterator[dict[str, str]]:
    """An environment on a ROS domain held by this test only; the ``ros2`` daemon a command
    may have started on it is stopped at the end."""
    from fibril_sim_ros.testing import DEFAULT_DOMAIN_POOL, lock_domain

    lock = lock_domain(DEFAULT_DOMAIN_POOL)
    env = ros_environment(lock.domain_id, log_dir)
    try:
        yield env
    finally:
        try:
            subprocess.run([str(ROS2), 'daemon', 'stop'], env=env, timeout=STOP_WALL,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
        finally:
            lock.release()


def _default_sigint() -> None:
    # The suite may run as a background job with SIGINT ignored; a child inherits that.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


class RosProcess:
    """A long-running ``ros2 ...`` command in its own session, output to a file."""

    def __init__(self, command: Sequence[str], env: dict[str, str], log: Path,
                 cwd: Path = REPO) -> None:
        self.command = [str(c) for c in command]
        self.log = log
        with open(log, 'wb') as out:
            self.popen = subprocess.Popen(
                self.command, env=env, cwd=cwd, stdin=subprocess.DEVNULL, stdout=out,
                stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=_default_sigint)

    def output(self) -> str:
        return self.log.read_text(errors='replace')

    def context(self) -> str:
        return f'{" ".join(self.command)} (exit {self.popen.poll()}):\n{self.output()[-3000:]}'

    def alive(self) -> bool:
        return self.popen.poll() is None

    def interrupt(self, timeout: float = STOP_WALL, *, group: bool = True) -> int:
        """SIGINT; the command's exit status. ``group``: to the whole process group, as Ctrl-C
        in a terminal sends it (``ros2 run`` relies on its child getting it too); else to the
        command alone, as a supervisor sends it (``ros2 launch`` forwards it to its
        processes)."""
        if group:
            os.killpg(self.popen.pid, signal.SIGINT)
        else:
            self.popen.send_signal(signal.SIGINT)
        try:
            return self.popen.wait(timeout=patience(timeout))
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f'no exit within {timeout} s of SIGINT: {self.context()}')

    def kill(self) -> None:
        """Whatever is left of the session (the command and its children)."""
        try:
            os.killpg(self.popen.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            self.popen.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass


@contextmanager
def ros_process(command: Sequence[str], env: dict[str, str], log: Path,
                cwd: Path = REPO) -> Iterator[RosProcess]:
    process = RosProcess(command, env, log, cwd)
    try:
        yield process
    finally:
        process.kill()


def ros2(args: Sequence[str], env: dict[str, str], *, timeout: float = 120.0,
         cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    """``ros2 ARGS`` to completion (stdout and stderr together)."""
    return subprocess.run([str(ROS2), *map(str, args)], env=env, cwd=cwd,
                          timeout=patience(timeout), stdin=subprocess.DEVNULL,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, check=False,
                          preexec_fn=_default_sigint)


def wait_for_graph(env: dict[str, str], process: RosProcess, *, topics: Sequence[str] = (),
                   nodes: Sequence[str] = (), timeout: float = START_WALL) -> None:
    """Until the ROS graph has shown every topic and node (the process still running): one
    watcher process (``_graph_watch.py``, an rclpy node reading the graph the ``ros2 topic
    list`` / ``ros2 node list`` tools read) answers as soon as discovery has happened, without
    a CLI start and a fixed discovery spin per poll."""
    timeout = patience(timeout)
    watcher = subprocess.Popen(
        [sys.executable, str(GRAPH_WATCH), str(timeout), *topics, '--nodes', *nodes], env=env,
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        preexec_fn=_default_sigint)
    try:
        while watcher.poll() is None:
            assert process.alive(), f'exited before it was up: {process.context()}'
            time.sleep(0.1)
    finally:
        if watcher.poll() is None:
            watcher.kill()
        output, _ = watcher.communicate()
    if watcher.returncode != 0:
        raise AssertionError(
            f'within {timeout:.0f} s: the graph showed {output.strip()[-2000:]} (wanted topics '
            f'{list(topics)}, nodes {list(nodes)}): {process.context()}')
    assert process.alive(), f'exited before it was up: {process.context()}'


def echo_once(env: dict[str, str], topic: str, msg_type: str | None = None, *,
              timeout: float = START_WALL) -> str:
    """``ros2 topic echo --once TOPIC [TYPE]``: the message as YAML. Without the type, echo
    must discover the topic first and gives up at once when it has not yet: retried, as a
    user would."""
    return run_until_discovered(['topic', 'echo', '--once', topic,
                                 *([msg_type] if msg_type else [])], env, timeout=timeout)


NOT_YET_DISCOVERED = 'does not appear to be published yet'


def run_until_discovered(args: Sequence[str], env: dict[str, str], *,
                         timeout: float = START_WALL,
                         run: Callable[[Sequence[str], dict[str, str]],
                                       subprocess.CompletedProcess[str]] | None = None) -> str:
    """``ros2 ARGS`` to a 0 exit; again while it fails because its fresh node has not yet
    discovered the topic (the graph was seen from another process).

    Once, it is also run again when it printed its whole message (``---``) and then died of a
    signal: the ``ros2`` tool itself (rclpy and Fast DDS tearing its node down) crashed so on
    exit once in CI (SIGSEGV, 2026-12-07, after printing a /clock message; not reproduced in
    180 runs beside two CPU hogs here). A second crash fails the test: a crash that repeats is
    a defect, whoever's it is."""
    if run is None:
        def run(a: Sequence[str], e: dict[str, str]) -> subprocess.CompletedProcess[str]:
            return ros2(a, e, timeout=timeout)  # ros2 scales it by patience
    deadline = time.monotonic() + patience(timeout)
    crashed: subprocess.CompletedProcess[str] | None = None
    while True:
        result = run(args, env)
        if result.returncode == 0:
            return result.stdout
        if (result.returncode < 0 and crashed is None
                and result.stdout.rstrip().endswith('---')):
            crashed = result
            warnings.warn(f'ros2 {" ".join(args)} died of signal {-result.returncode} after '
                          f'its message; run once more', stacklevel=2)
            continue
        if NOT_YET_DISCOVERED not in result.stdout or time.monotonic() > deadline:
            earlier = ('' if crashed is None else
                       f' (an earlier run died of signal {-crashed.returncode} after its message)')
            raise AssertionError(f'ros2 {" ".join(args)}: exit {result.returncode}{earlier}: '
                                 f'{result.stdout}')
        time.sleep(0.5)
