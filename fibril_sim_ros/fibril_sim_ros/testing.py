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

import json
import math
import os
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .processes import (DEFAULT_DOMAIN_POOL, DomainLock, ManagedProcess, SimHarnessError,
                        WaitTimeout, check_alive, commanding_nodes, diagnostics, exec_main,
                        lock_domain, node_endpoints, start_process, stop_process)

# rclpy, launch and the message packages are imported where they are used: this module (and
# its pytest plugin, which every test session of a project may load) imports without ROS.
if TYPE_CHECKING:
    from rclpy.node import Node
    from rclpy.qos import QoSProfile

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

NODE_NAME = 'fibril_sim'
NODE_MODULE = 'fibril_sim_ros.sim_node'
CONTROLLER_MODULE = 'fibril_sim_ros.examples.wheel_speed_controller'
_NS = 1_000_000_000
# Wall seconds one start-up ``get_state`` waits before it is sent again.
STARTUP_ATTEMPT_WALL = 2.0


# ------------------------------------------------------------------------ parameters, commands
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
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The node's ROS parameters, typed as it declares them (paths made absolute)."""
    params: dict[str, Any] = {
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


def ros_args(parameters: Mapping[str, Any]) -> list[str]:
    """``--ros-args -p name:=value ...`` for a parameter dict (values as JSON, a YAML subset,
    so strings stay strings and floats stay floats)."""
    args = ['--ros-args']
    for name, value in parameters.items():
        args += ['-p', f'{name}:={json.dumps(value)}']
    return args


def python_node_command(module: str, parameters: Mapping[str, Any] | None = None) -> list[str]:
    """Command line running ``python -m module`` with ROS parameters, in this interpreter."""
    return [sys.executable, '-m', module, *ros_args(parameters or {})]


def example_controller_command(**parameters: Any) -> list[str]:
    """The example wheel-speed PI controller (``sil_controller``) with ROS parameters, e.g.
    ``example_controller_command(setpoint=8.0)``; it runs on sim time."""
    return python_node_command(CONTROLLER_MODULE, {'use_sim_time': True, **parameters})


# ------------------------------------------------------------------------------------ launch
def sim_launch_description(
    manifest: str | os.PathLike[str],
    *,
    controller: Sequence[str] | None = None,
    ready_to_test: bool = True,
    **options: Any,
) -> Any:
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
    entities: list[Any] = [NodeAction(
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


# -------------------------------------------------------------------------------------- harness
@dataclass
class _Stream:
    """A harness subscription and what it received since the last mark."""

    subscription: Any
    messages: list[Any] = field(default_factory=list)


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
        parameters: Mapping[str, Any] | None = None,
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
        self._context: Any = None
        self._node: Node | None = None
        self._executor: Any = None
        self._clients: dict[str, Any] = {}
        self._streams: dict[tuple[str, type], _Stream] = {}
        self._publishers: dict[tuple[str, type], Any] = {}
        self._events = 0
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
        if self._node is None:
            raise SimHarnessError('the harness is not started')
        return self._node

    def start(self) -> SimHarness:
        """Start the node, wait for its services, start the controllers, wait for them."""
        if self._node is not None:
            raise SimHarnessError('the harness is already started')
        try:
            self._start()
        except BaseException:
            self.close()
            raise
        return self

    def _start(self) -> None:
        import rclpy
        from rclpy.executors import SingleThreadedExecutor
        from rclpy.signals import SignalHandlerOptions

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

        self._context = rclpy.Context()
        rclpy.init(context=self._context, domain_id=self.domain_id,
                   signal_handler_options=SignalHandlerOptions.NO)
        self._node = rclpy.create_node(f'fibril_sim_harness_{os.getpid()}',
                                       context=self._context)
        self._executor = SingleThreadedExecutor(context=self._context)
        self._executor.add_node(self._node)

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
            if self._executor is not None:
                self._executor.shutdown(timeout_sec=1.0)
            if self._node is not None:
                self._node.destroy_node()
            if self._context is not None:
                self._context.try_shutdown()
            self._node = None
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
    def step(self, ticks: int, *, timeout_wall: float = 60.0) -> Any:
        """Advance the paused simulation exactly ``ticks`` physics ticks (``~/step``); returns
        the reply (tick, episode_time_ns, session_time_ns) after they ran."""
        from fibril_msgs.srv import Step

        reply = self._call('step', Step, Step.Request(steps=int(ticks)), timeout_wall)
        self.session_time_ns = max(self.session_time_ns, int(reply.session_time_ns))
        self._drain()
        return reply

    def reset(self, keyframe: str = '', *, seed: int | None = None,
              timeout_wall: float = 30.0) -> Any:
        """Start a new episode (``~/reset``); ``/clock`` keeps going forward."""
        from fibril_msgs.srv import Reset

        request = Reset.Request(keyframe=keyframe)
        if seed is not None:  # default: the episode keeps its seed and repeats exactly
            request.set_seed = True
            request.seed = int(seed)
        reply = self._call('reset', Reset, request, timeout_wall)
        self._drain()
        return reply

    def set_paused(self, paused: bool, *, timeout_wall: float = 30.0) -> Any:
        from fibril_msgs.srv import SetPaused

        reply = self._call('set_paused', SetPaused, SetPaused.Request(paused=bool(paused)),
                           timeout_wall)
        self.paused = bool(paused)
        return reply

    def get_state(self, *, timeout_wall: float = 30.0) -> Any:
        from fibril_msgs.srv import GetState

        reply = self._call('get_state', GetState, GetState.Request(), timeout_wall)
        self.session_time_ns = max(self.session_time_ns, int(reply.session_time_ns))
        self.paused = bool(reply.paused)
        return reply

    def _call(self, service: str, srv_type: type, request: Any, timeout_wall: float) -> Any:
        check_alive(self.processes)
        client = self._client(service, srv_type)
        future = client.call_async(request)
        deadline = time.monotonic() + timeout_wall
        while not future.done():
            if time.monotonic() > deadline:
                client.remove_pending_request(future)
                raise WaitTimeout(f'/{NODE_NAME}/{service}: no reply within {timeout_wall} s '
                                  f'of wall time{diagnostics(self.processes)}')
            self._executor.spin_once(timeout_sec=0.05)
            check_alive(self.processes)
        reply = future.result()
        if hasattr(reply, 'success') and not reply.success:
            raise SimHarnessError(f'/{NODE_NAME}/{service} failed: {reply.message}')
        return reply

    def _client(self, service: str, srv_type: type) -> Any:
        if service not in self._clients:
            self._clients[service] = self.node.create_client(srv_type, f'/{NODE_NAME}/{service}')
        return self._clients[service]

    # -- topics -------------------------------------------------------------------------------
    def publish(self, topic: str, msg: Any, *, qos: QoSProfile | None = None,
                timeout_wall: float = 10.0) -> None:
        """Publish ``msg`` on ``topic`` (reliable by default), once a subscriber is matched."""
        key = (topic, type(msg))
        if key not in self._publishers:
            publisher = self.node.create_publisher(type(msg), topic, qos or _reliable())
            self._publishers[key] = publisher
            self._spin_until(lambda: publisher.get_subscription_count() > 0, timeout_wall,
                             f'no subscriber matched {topic} within {timeout_wall} s')
            self._spin_for(0.05)  # let the subscriber's side of the match complete too
        self._publishers[key].publish(msg)

    def subscribe(self, topic: str, msg_type: type, *, qos: QoSProfile | None = None,
                  timeout_wall: float = 2.0) -> None:
        """Start buffering ``topic`` now (``wait_for`` / ``collect`` do it on first use), once
        a publisher is matched (up to ``timeout_wall`` s) so that nothing it sends next is
        missed. Subscriptions given to the constructor are made before the clock runs."""
        self._stream(topic, msg_type, qos, timeout_wall)

    def wait_for(self, topic: str, msg_type: type,
                 predicate: Callable[[Any], bool] | None = None, *,
                 timeout_sim: float = 1.0, timeout_wall: float = 60.0,
                 qos: QoSProfile | None = None) -> Any:
        """The first message on ``topic`` that satisfies ``predicate`` (any message if None),
        among those not yet consumed and those arriving while up to ``timeout_sim`` seconds of
        sim time pass; it and the messages before it are consumed. Raises WaitTimeout when
        none does (or when ``timeout_wall`` seconds of wall time pass first)."""
        stream = self._stream(topic, msg_type, qos)
        self._drain()
        checked = 0
        found: list[Any] = []

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

    def collect(self, topic: str, msg_type: type, *, duration_sim: float,
                timeout_wall: float = 120.0, qos: QoSProfile | None = None) -> list[Any]:
        """Let ``duration_sim`` seconds of sim time pass (stepping a paused simulation) and
        return every message on ``topic`` not yet consumed: since the topic was subscribed
        (``subscriptions=`` / ``subscribe``, or the first ``wait_for`` / ``collect`` of it) or
        since the last ``collect`` / ``wait_for`` consumed it."""
        stream = self._stream(topic, msg_type, qos)
        self._advance(duration_sim, timeout_wall, lambda: False, wall_error=True)
        messages = list(stream.messages)
        stream.messages.clear()
        return messages

    def _stream(self, topic: str, msg_type: type, qos: QoSProfile | None,
                match_timeout: float = 2.0) -> _Stream:
        key = (topic, msg_type)
        stream = self._streams.get(key)
        if stream is None:
            stream = _Stream(subscription=None)

            def on_message(msg: Any, messages: list[Any] = stream.messages) -> None:
                self._events += 1
                messages.append(msg)

            stream.subscription = self.node.create_subscription(
                msg_type, topic, on_message, qos or _reliable(depth=10_000))
            self._streams[key] = stream
            subscription = stream.subscription
            if self._spin_until(lambda: subscription.get_publisher_count() > 0,
                                match_timeout, None):
                self._spin_for(0.05)  # the publisher's side of the match
        return stream

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
                self._executor.spin_once(timeout_sec=0.005)
                if time.monotonic() >= poll:
                    self.get_state()
                    poll = time.monotonic() + 0.02
        # what was published up to now; while running, more keeps coming: take the backlog only
        self._drain(limit=5.0 if self.paused else 0.1)

    def spin(self, seconds: float) -> None:
        """Run the harness's callbacks for ``seconds`` of wall time (the simulation does what
        it does meanwhile: runs, or stays paused)."""
        check_alive(self.processes)
        self._spin_for(seconds)
        check_alive(self.processes)

    def _drain(self, quiet: float = 0.01, limit: float = 5.0) -> None:
        """Run callbacks until no message arrives for ``quiet`` s of wall time (what the node
        published before its last reply has landed and been taken by then)."""
        now = time.monotonic()
        end, last, seen = now + limit, now, self._events
        while now < end and now - last < quiet:
            self._executor.spin_once(timeout_sec=quiet / 4)
            now = time.monotonic()
            if self._events != seen:
                last, seen = now, self._events

    def _spin_for(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            self._executor.spin_once(timeout_sec=max(0.0, min(0.01, end - time.monotonic())))

    def _spin_until(self, condition: Callable[[], bool], timeout_wall: float,
                    error: str | None) -> bool:
        deadline = time.monotonic() + timeout_wall
        while not condition():
            if time.monotonic() > deadline:
                if error is not None:
                    raise WaitTimeout(f'{error}{diagnostics(self.processes)}')
                return False
            self._executor.spin_once(timeout_sec=0.02)
            check_alive(self.processes)
        return True

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

        clients = [self._client(name, srv_type) for name, srv_type in (
            ('get_state', GetState), ('step', Step), ('reset', Reset),
            ('set_paused', SetPaused))]
        deadline = time.monotonic() + self.startup_timeout
        self._spin_until(lambda: all(client.service_is_ready() for client in clients),
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
        self._spin_until(lambda: len(commanding_nodes(self.node, NODE_NAME)) >= wanted,
                         max(0.0, deadline - time.monotonic()),
                         f'{wanted} controller node(s) publishing on an input topic of '
                         f'{NODE_NAME} did not appear within {self.startup_timeout} s')
        topics = self.ready_topics
        for topic in topics:
            self._spin_until(partial(_has_publisher, self.node, topic),
                             max(0.0, deadline - time.monotonic()),
                             f'no publisher on {topic} within {self.startup_timeout} s')
        if topics or wanted:
            self._wait_for_settled_graph(deadline)
            self._spin_for(0.3)  # the endpoints' matching (discovery seen here is seen there)

    def _wait_for_settled_graph(self, deadline: float, quiet: float = 0.3) -> None:
        """Until the controllers' endpoints (publishers and subscriptions) stop changing for
        ``quiet`` s: a node makes them in its constructor, so by then it is built (its /clock
        subscription included), not just begun."""
        graph = self.node

        def endpoints() -> set[tuple[str, str, str]]:
            return node_endpoints(graph, commanding_nodes(graph, NODE_NAME))

        last, since = endpoints(), time.monotonic()
        while time.monotonic() - since < quiet and time.monotonic() < deadline:
            self._executor.spin_once(timeout_sec=0.05)
            check_alive(self.processes)
            now = endpoints()
            if now != last:
                last, since = now, time.monotonic()


def _reliable(depth: int = 10) -> QoSProfile:
    from rclpy.qos import HistoryPolicy, QoSProfile, ReliabilityPolicy

    return QoSProfile(depth=depth, history=HistoryPolicy.KEEP_LAST,
                      reliability=ReliabilityPolicy.RELIABLE)


def _has_publisher(node: Node, topic: str) -> bool:
    return node.count_publishers(topic) > 0


if __name__ == '__main__':  # (the launcher of earlier releases: see processes)
    sys.exit(exec_main(sys.argv[1:]))
