"""The processes a test harness starts, and the ROS domains it holds (``testing``).

Every process runs in its own session through ``python -m fibril_sim_ros.processes exec --
CMD...`` (SIGINT / SIGTERM back to their defaults, a parent-death signal so a killed test run
leaves nothing behind), and is stopped with its whole process group. Each harness holds a lock
file on its ROS domain while it lives, so two harnesses on one machine never share one.
"""

from __future__ import annotations

import ctypes
import fcntl
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from rclpy.node import Node

__all__ = ['DEFAULT_DOMAIN_POOL', 'DomainLock', 'ManagedProcess', 'SimHarnessError',
           'WaitTimeout', 'check_alive', 'commanding_nodes', 'diagnostics', 'exec_main',
           'lock_domain', 'node_endpoints', 'start_process', 'stop_process']

# ROS domains the harness picks from (the upper range valid on Linux; test sessions of this
# repository use 1..100).
DEFAULT_DOMAIN_POOL = tuple(range(215, 233))
_LOCK_DIR = Path(tempfile.gettempdir())
_PARENT_ENV = 'FIBRIL_SIM_HARNESS_PID'


class SimHarnessError(RuntimeError):
    """The simulation node or a controller did not start, answer or behave."""


class WaitTimeout(SimHarnessError, TimeoutError):
    """A wait ran out of sim time (or of its wall-time guard)."""


# ----------------------------------------------------------------------------------- processes
@dataclass
class ManagedProcess:
    """One child process in its own session (process group == pid)."""

    name: str
    command: list[str]
    popen: subprocess.Popen[bytes]
    log_path: Path

    @property
    def pid(self) -> int:
        return self.popen.pid

    def log_tail(self, lines: int = 30) -> str:
        try:
            text = self.log_path.read_text(errors='replace')
        except OSError:
            return ''
        return '\n'.join(text.splitlines()[-lines:])


def start_process(name: str, command: Sequence[str], env: Mapping[str, str],
                   log_path: Path) -> ManagedProcess:
    launcher = [sys.executable, '-m', 'fibril_sim_ros.processes', 'exec', '--']
    with open(log_path, 'wb') as log:
        popen = subprocess.Popen(
            [*launcher, *command], env={**env, _PARENT_ENV: str(os.getpid())},
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True)
    return ManagedProcess(name, list(command), popen, log_path)


def stop_process(process: ManagedProcess, grace: float) -> None:
    """SIGTERM to the process group, SIGKILL to what is left after ``grace`` s; reaped."""
    group = process.pid  # start_new_session: the group id is the leader's pid
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(group, sig)
        except (ProcessLookupError, PermissionError):
            break  # no process left in the group
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            process.popen.poll()
            if process.popen.returncode is not None and not _group_alive(group):
                break
            time.sleep(0.02)
    try:
        process.popen.wait(timeout=5.0)
    except subprocess.TimeoutExpired:
        pass


def _group_alive(group: int) -> bool:
    try:
        os.killpg(group, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def exec_main(argv: list[str]) -> int:
    """``exec -- CMD...``: reset SIGINT/SIGTERM to their defaults (a suite may run with SIGINT
    ignored, and ignored signals survive exec), die with the parent, then become CMD."""
    if len(argv) < 3 or argv[0] != 'exec' or argv[1] != '--':
        print('usage: python -m fibril_sim_ros.processes exec -- CMD [ARGS...]', file=sys.stderr)
        return 2
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)
    if sys.platform.startswith('linux'):
        pr_set_pdeathsig = 1
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(pr_set_pdeathsig, int(signal.SIGTERM), 0, 0, 0)
        if str(os.getppid()) != os.environ.get(_PARENT_ENV, str(os.getppid())):
            return 1  # the harness died before prctl took effect
    try:
        os.execvp(argv[2], argv[2:])
    except OSError as exc:
        print(f'fibril_sim_ros.processes: cannot run {argv[2]!r}: {exc}', file=sys.stderr)
        return 127


# ------------------------------------------------------------------------------------- domains
@dataclass
class DomainLock:
    """A ROS domain this process holds (a lock file) until ``release``."""

    domain_id: int
    handle: TextIO | None = None

    def release(self) -> None:
        if self.handle is not None:
            self.handle.close()
            self.handle = None


def lock_domain(pool: Iterable[int]) -> DomainLock:
    """The first domain of ``pool`` no other harness on this machine holds."""
    for domain in pool:
        path = _LOCK_DIR / f'fibril_sim_ros-domain-{domain}.lock'
        handle = open(path, 'a+')  # noqa: SIM115 - held for the harness's lifetime
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            handle.close()
            continue
        return DomainLock(domain, handle)
    raise SimHarnessError(f'no free ROS domain in {list(pool)} (every one is held by another '
                          f'harness on this machine); pass domain_id=')


def check_alive(processes: Iterable[ManagedProcess]) -> None:
    """SimHarnessError naming the first of ``processes`` that has exited, with the logs."""
    processes = list(processes)
    for process in processes:
        code = process.popen.poll()
        if code is not None:
            raise SimHarnessError(f'{process.name} (pid {process.pid}) exited with code '
                                  f'{code}{diagnostics(processes)}')


def diagnostics(processes: Iterable[ManagedProcess]) -> str:
    """The tails of the processes' logs, for an error message."""
    parts = []
    for process in processes:
        tail = process.log_tail(15)
        if tail:
            parts.append(f'\n--- {process.name} ({process.log_path}) ---\n{tail}')
    return ''.join(parts)


# ------------------------------------------------------------------------------- the ROS graph
def commanding_nodes(graph: Node, node_name: str) -> set[tuple[str, str]]:
    """Nodes (name, namespace) that publish on a topic ``node_name`` subscribes to (its
    bridge inputs), i.e. controllers that are up."""
    names = graph.get_node_names_and_namespaces()
    if (node_name, '/') not in names:
        return set()
    inputs = {topic for topic, _ in graph.get_subscriber_names_and_types_by_node(
        node_name, '/')} - {'/clock', '/parameter_events'}
    found = set()
    for name, namespace in names:
        if name in (node_name, graph.get_name()):
            continue
        try:
            published = graph.get_publisher_names_and_types_by_node(name, namespace)
        except Exception:  # noqa: BLE001 - the node left the graph meanwhile
            continue
        if inputs & {topic for topic, _ in published}:
            found.add((name, namespace))
    return found


def node_endpoints(graph: Node, nodes: Iterable[tuple[str, str]]) -> set[tuple[str, str, str]]:
    """(node, 'pub' / 'sub', topic) of every publisher and subscription of ``nodes``."""
    found: set[tuple[str, str, str]] = set()
    for name, namespace in nodes:
        try:
            found |= {(name, 'pub', t) for t, _ in
                      graph.get_publisher_names_and_types_by_node(name, namespace)}
            found |= {(name, 'sub', t) for t, _ in
                      graph.get_subscriber_names_and_types_by_node(name, namespace)}
        except Exception:  # noqa: BLE001, S112 - the node left the graph meanwhile
            continue
    return found


if __name__ == '__main__':
    sys.exit(exec_main(sys.argv[1:]))
