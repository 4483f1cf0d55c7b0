"""Regression-suite helpers: drive the simulation node from a test, assert on what a controller did.

Two ways in, same node and parameters:

- ``sim_launch_description(...)``: the simulation node (started paused by default) and
  optionally your controller as a ``launch`` description for ``launch_testing`` suites. Needs a
  ROS 2 installation (``launch``, ``launch_ros``); imported only when called.
- ``SimHarness(...)`` (context manager) and the pytest fixture ``fibril_sim`` (plugin
  ``fibril_sim_ros.testing_pytest``): no ``launch`` needed. It starts the node and your
  controller as processes on a private ROS_DOMAIN_ID with Fast DDS shared-memory transport,
  offers ``step(n)``, ``reset()``, ``wait_for(...)``, ``collect(...)``, ``publish(...)`` and kills
  every process group it started when it closes, also when the test failed.

Sim time is the node's SessionTime (what ``/clock`` carries); ``timeout_sim`` / ``duration_sim``
are seconds of it. While the simulation is paused, ``wait_for`` and ``collect`` advance it
themselves with ``~/step``; while it runs they follow it with ``~/get_state``. Wall-time limits
guard every wait.

The processes, their launcher and the domain locks are in ``processes``
(``python -m fibril_sim_ros.testing exec -- CMD...`` still runs that launcher).
"""

from __future__ import annotations

import math
import os
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from .harness_session import HarnessSession
from .node_commands import (NODE_MODULE, NODE_NAME, ParameterValue, example_controller_command,
                            python_node_command, ros_args, sim_launch_description,
                            sim_node_parameters)
from .processes import (DEFAULT_DOMAIN_POOL, DomainLock, ManagedProcess, SimHarnessError,
                        WaitTimeout, check_alive, commanding_nodes, diagnostics, exec_main,
                        lock_domain, start_process, stop_process)

# rclpy, launch and the message packages are imported where they are used: this module (and
# its pytest plugin, which every test session of a project may load) imports without ROS.
if TYPE_CHECKING:
    from fibril_msgs.srv import GetState, Reset, SetPaused, Step
    from rclpy.node import Node
    from rclpy.qos import QoSProfile

M = TypeVar('M')
_NS = 1_000_000_000
# Wall seconds one start-up ``get_state`` waits before it is sent again.
STARTUP_ATTEMPT_WALL = 2.0

__all__ = [
    'DEFAULT_DOMAIN_POOL',
    'NODE_NAME',
    'STARTUP_ATTEMPT_WALL',
    'SimHarness',
    'SimHarnessError',
    'WaitTimeout',
    'example_controller_command',
    'lock_domain',
    'python_node_command',
    'ros_args',
    'sim_launch_description',
    'sim_node_parameters',
]

# -------------------------------------------------------------------------------------- harness
class SimHarness:
    """The simulation node and your controllers as processes, driven from a test.

    ``controller`` is one command line (``controllers`` several), started beside the node.
    start() waits until the node answers, then until ``ready_nodes`` ROS nodes publish on one
    of the simulation's input topics (default: one per controller; 0 to not wait) and each
    ``ready_topics`` topic (default: ``sync_topics``) has a publisher. Only then does the
    simulation run (``start_paused=False``); by default it stays paused at time 0 for
    ``step``. ``subscriptions`` (topic -> message type) are buffered from then on, before the
    clock runs, for ``collect`` / ``wait_for``; ``step_ticks`` is the chunk in which those
    step a paused simulation.

    Every process runs in its own session on this harness's private ROS_DOMAIN_ID with
    ``FASTDDS_BUILTIN_TRANSPORTS=SHM``; ``env`` is that environment, for processes of your
    own. Logs go to ``log_dir`` (default: a temporary directory), one ``<name>.log`` per
    process; their tails are in every start-up error.
    """

    def __init__(
        self,
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
        parameters: Mapping[str, ParameterValue] | None = None,
        controller: Sequence[str] | None = None,
        controllers: Sequence[Sequence[str]] = (),
        ready_topics: Sequence[str] | None = None,
        ready_nodes: int | None = None,
        subscriptions: Mapping[str, type] | None = None,
        domain_id: int | None = None,
        log_dir: str | os.PathLike[str] | None = None,
        node_command: Sequence[str] | None = None,
        startup_timeout: float = 30.0,
        stop_grace: float = 5.0,
        step_ticks: int = 50,
    ) -> None:
        # The node always starts paused: the clock only runs once every controller is up.
        self.parameters = sim_node_parameters(
            manifest, bridge=bridge, seed=seed, start_paused=True,
            real_time_factor=real_time_factor, trace_dir=trace_dir, sync_topics=sync_topics,
            sync_timeout=sync_timeout, control_period=control_period, extra=parameters)
        self.node_command = [*(node_command or [sys.executable, '-m', NODE_MODULE]),
                             *ros_args(self.parameters)]
        self.controller_commands = [list(c) for c in ([controller] if controller else [])]
        self.controller_commands += [list(c) for c in controllers]
        self.ready_topics = list(sync_topics if ready_topics is None else ready_topics)
        self._initial_subscriptions = dict(subscriptions or {})
        self.ready_nodes = len(self.controller_commands) if ready_nodes is None else ready_nodes
        self.startup_timeout = startup_timeout
        self.stop_grace = stop_grace
        if step_ticks < 1:
            raise ValueError(f'step_ticks must be >= 1, got {step_ticks}')
        self.step_ticks = step_ticks
        self._requested_domain = domain_id
        self._log_dir_arg = log_dir
        self._tempdir: tempfile.TemporaryDirectory[str] | None = None
        self.log_dir: Path | None = None
        self.domain_id: int | None = None
        self._domain_lock: DomainLock | None = None
        self.processes: list[ManagedProcess] = []
        self.env: dict[str, str] = {}
        self._session: HarnessSession | None = None
        self.session_time_ns = 0  # latest sim time seen in a service reply
        self.paused = True
        self._run_after_start = not start_paused
        self._closed = False

    # -- lifetime -----------------------------------------------------------------------------
    def __enter__(self) -> SimHarness:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def pids(self) -> list[int]:
        """PIDs of every process this harness started (each leads its own process group)."""
        return [process.pid for process in self.processes]

    @property
    def node(self) -> Node:
        """The harness's own rclpy node (on the private domain), for anything else."""
        return self._ros.node

    @property
    def _ros(self) -> HarnessSession:
        if self._session is None:
            raise SimHarnessError('the harness is not started')
        return self._session

    def start(self) -> SimHarness:
        """Start the node, wait for its services, start the controllers, wait for them."""
        if self._session is not None:
            raise SimHarnessError('the harness is already started')
        try:
            self._start()
        except BaseException:
            self.close()
            raise
        return self

    def _start(self) -> None:
        if self._log_dir_arg is None:
            self._tempdir = tempfile.TemporaryDirectory(prefix='fibril_sim_harness_')
            self.log_dir = Path(self._tempdir.name)
        else:
            self.log_dir = Path(self._log_dir_arg)
            self.log_dir.mkdir(parents=True, exist_ok=True)
        pool = DEFAULT_DOMAIN_POOL if self._requested_domain is None else (
            self._requested_domain,)
        self._domain_lock = lock_domain(pool)
        self.domain_id = self._domain_lock.domain_id
        os.environ.setdefault('FASTDDS_BUILTIN_TRANSPORTS', 'SHM')
        self.env = dict(os.environ, ROS_DOMAIN_ID=str(self.domain_id),
                        FASTDDS_BUILTIN_TRANSPORTS='SHM', PYTHONUNBUFFERED='1')

        self._session = HarnessSession(self.domain_id, f'fibril_sim_harness_{os.getpid()}',
                                       self.processes, NODE_NAME)

        # Controllers start beside the node (they wait for /clock like on the robot), which
        # saves their start-up time; the node starts paused, so they miss nothing.
        self._launch('fibril_sim', self.node_command)
        for index, command in enumerate(self.controller_commands):
            name = 'controller' if len(self.controller_commands) == 1 else f'controller{index}'
            self._launch(name, command)
        self._wait_for_node()
        self._wait_for_controllers()
        for topic, msg_type in self._initial_subscriptions.items():
            self.subscribe(topic, msg_type)
        if self._run_after_start:
            self.set_paused(False)

    def _launch(self, name: str, command: Sequence[str]) -> None:
        assert self.log_dir is not None
        self.processes.append(
            start_process(name, command, self.env, self.log_dir / f'{name}.log'))

    def close(self) -> None:
        """Stop every process group (SIGTERM, then SIGKILL), shut the harness's ROS context
        down, release the domain. Idempotent; safe after a failed start."""
        if self._closed:
            return
        self._closed = True
        try:
            for process in reversed(self.processes):  # controllers first, node last
                stop_process(process, self.stop_grace)
        finally:
            if self._session is not None:
                self._session.close()
            if self._domain_lock is not None:
                self._domain_lock.release()
            if self._tempdir is not None:
                self._tempdir.cleanup()

    def log(self, name: str = 'fibril_sim') -> str:
        """What process ``name`` (``fibril_sim``, ``controller``, ...) printed so far."""
        for process in self.processes:
            if process.name == name:
                return process.log_path.read_text(errors='replace')
        raise KeyError(name)

    # -- control ------------------------------------------------------------------------------
    def step(self, ticks: int, *, timeout_wall: float = 60.0) -> Step.Response:
        """Advance the paused simulation exactly ``ticks`` physics ticks (``~/step``); returns
        the reply (tick, episode_time_ns, session_time_ns) after they ran."""
        from fibril_msgs.srv import Step

        reply: Step.Response = self._ros.call('step', Step, Step.Request(steps=int(ticks)),
                                              timeout_wall)
        self.session_time_ns = max(self.session_time_ns, int(reply.session_time_ns))
        self._ros.drain()
        return reply

    def reset(self, keyframe: str = '', *, seed: int | None = None,
              timeout_wall: float = 30.0) -> Reset.Response:
        """Start a new episode (``~/reset``); ``/clock`` keeps going forward."""
        from fibril_msgs.srv import Reset

        request = Reset.Request(keyframe=keyframe)
        if seed is not None:  # default: the episode keeps its seed and repeats exactly
            request.set_seed = True
            request.seed = int(seed)
        reply: Reset.Response = self._ros.call('reset', Reset, request, timeout_wall)
        self._ros.drain()
        return reply

    def set_paused(self, paused: bool, *, timeout_wall: float = 30.0) -> SetPaused.Response:
        from fibril_msgs.srv import SetPaused

        reply: SetPaused.Response = self._ros.call(
            'set_paused', SetPaused, SetPaused.Request(paused=bool(paused)), timeout_wall)
        self.paused = bool(paused)
        return reply

    def get_state(self, *, timeout_wall: float = 30.0) -> GetState.Response:
        from fibril_msgs.srv import GetState

        reply: GetState.Response = self._ros.call('get_state', GetState, GetState.Request(),
                                                  timeout_wall)
        self.session_time_ns = max(self.session_time_ns, int(reply.session_time_ns))
        self.paused = bool(reply.paused)
        return reply

    # -- topics -------------------------------------------------------------------------------
    def publish(self, topic: str, msg: object, *, qos: QoSProfile | None = None,
                timeout_wall: float = 10.0) -> None:
        """Publish ``msg`` on ``topic`` (reliable by default), once a subscriber is matched."""
        self._ros.publish(topic, msg, qos or _reliable(), timeout_wall)

    def subscribe(self, topic: str, msg_type: type, *, qos: QoSProfile | None = None,
                  timeout_wall: float = 2.0) -> None:
        """Start buffering ``topic`` now (``wait_for`` / ``collect`` do it on first use), once
        a publisher is matched (up to ``timeout_wall`` s) so that nothing it sends next is
        missed. Subscriptions given to the constructor are made before the clock runs."""
        self._ros.stream(topic, msg_type, qos or _reliable(depth=10_000), timeout_wall)

    def wait_for(self, topic: str, msg_type: type[M],
                 predicate: Callable[[M], bool] | None = None, *,
                 timeout_sim: float = 1.0, timeout_wall: float = 60.0,
                 qos: QoSProfile | None = None) -> M:
        """The first message on ``topic`` that satisfies ``predicate`` (any message if None),
        among those not yet consumed and those arriving while up to ``timeout_sim`` seconds of
        sim time pass; it and the messages before it are consumed. Raises WaitTimeout when
        none does (or when ``timeout_wall`` seconds of wall time pass first)."""
        stream = self._ros.stream(topic, msg_type, qos or _reliable(depth=10_000), 2.0)
        self._ros.drain()
        checked = 0
        found: list[M] = []

        def satisfied() -> bool:
            nonlocal checked
            for msg in stream.messages[checked:]:
                checked += 1
                if predicate is None or predicate(msg):
                    found.append(msg)
                    return True
            return False

        self._advance(timeout_sim, timeout_wall, satisfied, wall_error=False)
        seen = checked
        del stream.messages[:checked]
        if found:
            return found[0]
        raise WaitTimeout(
            f'{topic}: no message{" satisfying the predicate" if predicate else ""} within '
            f'{timeout_sim} s of sim time ({seen} received, publishers: '
            f'{self.node.count_publishers(topic)}){diagnostics(self.processes)}')

    def collect(self, topic: str, msg_type: type[M], *, duration_sim: float,
                timeout_wall: float = 120.0, qos: QoSProfile | None = None) -> list[M]:
        """Let ``duration_sim`` seconds of sim time pass (stepping a paused simulation) and
        return every message on ``topic`` not yet consumed: since the topic was subscribed
        (``subscriptions=`` / ``subscribe``, or the first ``wait_for`` / ``collect`` of it) or
        since the last ``collect`` / ``wait_for`` consumed it."""
        stream = self._ros.stream(topic, msg_type, qos or _reliable(depth=10_000), 2.0)
        self._advance(duration_sim, timeout_wall, lambda: False, wall_error=True)
        messages = list(stream.messages)
        stream.messages.clear()
        return messages

    # -- advancing sim time -------------------------------------------------------------------
    def _advance(self, duration_sim: float, timeout_wall: float,
                 done: Callable[[], bool], *, wall_error: bool) -> None:
        """Let ``duration_sim`` s of sim time pass (stepping while paused) or stop early when
        ``done()``; a wall-time overrun returns, or raises WaitTimeout with ``wall_error``."""
        if not (math.isfinite(duration_sim) and duration_sim >= 0):
            raise ValueError(f'sim duration must be a finite number >= 0, got {duration_sim!r}')
        # Sim time comes from ~/get_state (polled while running: cheaper for this process than
        # following /clock at every frame, which would compete with the controllers for CPU).
        state = self.get_state()
        timestep = state.episode_time_ns // state.tick if state.tick else None
        start = self.session_time_ns
        poll = time.monotonic() + 0.02
        end = start + round(duration_sim * _NS)
        deadline = time.monotonic() + timeout_wall
        while not done():
            if self.session_time_ns >= end:
                break
            if time.monotonic() > deadline:
                if wall_error:
                    raise WaitTimeout(f'{duration_sim} s of sim time did not pass within '
                                      f'{timeout_wall} s of wall time{diagnostics(self.processes)}')
                return
            if self.paused:
                ticks = self.step_ticks
                if timestep:
                    ticks = max(1, min(ticks, -(-(end - self.session_time_ns) // timestep)))
                before = self.session_time_ns
                reply = self.step(ticks)
                if timestep is None and reply.tick:
                    timestep = reply.episode_time_ns // reply.tick
                if self.session_time_ns <= before:
                    raise SimHarnessError(f'~/step({ticks}) did not advance sim time')
            else:
                self._ros.spin_once(0.005)
                if time.monotonic() >= poll:
                    self.get_state()
                    poll = time.monotonic() + 0.02
        # what was published up to now; while running, more keeps coming: take the backlog only
        self._ros.drain(limit=5.0 if self.paused else 0.1)

    def spin(self, seconds: float) -> None:
        """Run the harness's callbacks for ``seconds`` of wall time (the simulation does what
        it does meanwhile: runs, or stays paused)."""
        check_alive(self.processes)
        self._ros.spin_for(seconds)
        check_alive(self.processes)

    # -- start-up -----------------------------------------------------------------------------
    def _wait_for_node(self) -> None:
        """Wait for the node's services, then for a first ``get_state`` reply.

        Every client is made here, before any call: the node can only answer a client whose
        reply reader it has discovered, and Fast DDS drops a reply it cannot deliver within
        100 ms ("failed to send response (timeout)"), so the first call of a new client can
        be lost while the node is busy starting. ``get_state`` changes nothing, so it is
        re-sent in short attempts until one is answered; by then the node knows every
        client made beside it."""
        from fibril_msgs.srv import GetState, Reset, SetPaused, Step

        clients = [self._ros.client(name, srv_type) for name, srv_type in (
            ('get_state', GetState), ('step', Step), ('reset', Reset),
            ('set_paused', SetPaused))]
        deadline = time.monotonic() + self.startup_timeout
        self._ros.spin_until(lambda: all(client.service_is_ready() for client in clients),
                         self.startup_timeout,
                         f'the services of /{NODE_NAME} did not come up within '
                         f'{self.startup_timeout} s')
        while True:
            left = deadline - time.monotonic()
            try:
                self.get_state(timeout_wall=max(0.5, min(STARTUP_ATTEMPT_WALL, left)))
                return
            except WaitTimeout:
                if left <= STARTUP_ATTEMPT_WALL:
                    raise

    def _wait_for_controllers(self) -> None:
        deadline = time.monotonic() + self.startup_timeout
        wanted = self.ready_nodes
        self._ros.spin_until(lambda: len(commanding_nodes(self.node, NODE_NAME)) >= wanted,
                         max(0.0, deadline - time.monotonic()),
                         f'{wanted} controller node(s) publishing on an input topic of '
                         f'{NODE_NAME} did not appear within {self.startup_timeout} s')
        topics = self.ready_topics
        for topic in topics:
            self._ros.spin_until(partial(_has_publisher, self.node, topic),
                             max(0.0, deadline - time.monotonic()),
                             f'no publisher on {topic} within {self.startup_timeout} s')
        if topics or wanted:
            self._ros.wait_settled_controllers(deadline)
            self._ros.spin_for(0.3)  # the endpoints' matching (discovery seen here is seen there)


def _reliable(depth: int = 10) -> QoSProfile:
    from rclpy.qos import HistoryPolicy, QoSProfile, ReliabilityPolicy

    return QoSProfile(depth=depth, history=HistoryPolicy.KEEP_LAST,
                      reliability=ReliabilityPolicy.RELIABLE)


def _has_publisher(node: Node, topic: str) -> bool:
    return node.count_publishers(topic) > 0


if __name__ == '__main__':  # (the launcher of earlier releases: see processes)
    sys.exit(exec_main(sys.argv[1:]))
