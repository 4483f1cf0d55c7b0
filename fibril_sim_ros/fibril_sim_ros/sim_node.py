"""``sim_node``: the live ROS 2 simulation node (node name ``fibril_sim``).

    ros2 run fibril_sim_ros sim_node --ros-args -p manifest:=PATH [-p bridge:=PATH]
        [-p real_time_factor:=1.0] [-p start_paused:=false] [-p seed:=N] [-p trace_dir:=DIR]
        [-p clock_period:=0.0] [-p sync_topics:="[/motor/command]"] [-p sync_timeout:=5.0]
        [-p control_period:=0.002] [-p server_socket:=PATH|auto] [-p lateness_warn_ms:=10]
        [-p thread_priority:=10]
    python -m fibril_sim_ros.sim_node --ros-args ...        (same, in the venv)

It only adapts: a SimulationRuntime steps the instance on its own host thread; subscription
callbacks (on the node's input thread, see ``inputs``) convert a message and call
``connection.submit`` (the ingress) and nothing else; the records the host delivers are
converted and written on the bridge's topics in emission order (see ``outbox``: on the host
thread, GIL-free, in real time and sync mode; through a writer thread as fast as possible),
then ``/clock`` (SessionTime) once per frame. Services: ``~/step``, ``~/reset``,
``~/set_paused``, ``~/get_state``, and the standard simulation_interfaces ones when that package
is installed (SimulationServices); topic ``~/frame_timing``.

Real time: the host holds each output until its due wall time (acquisition + latency on the
paced clock); a watchdog measures how late each is written, WARNs (at most once a second)
past ``lateness_warn_ms`` with the cause it sees, and ``get_state`` reports the percentiles
(see ``watchdog`` and docs/real_time.md). In real time the delivery path's threads run at
nice -``thread_priority`` (10; 0: as the process) where the process may (see ``priority``).

Sync mode (``sync_topics`` given): the node steps one control period, publishes its outputs and
``/clock``, then waits until every sync topic has answered (a message received after that
``/clock``) before the next period, so a controller's commands land on the same commit ticks on
every run (the host waits at the end of each frame, see ``sync``). A topic that does not answer
within ``sync_timeout`` wall seconds is an error naming it: the node exits with status 1 (free
running) or the ``~/step`` call fails.

Exit status: 0 after a normal shutdown, 2 for a bad manifest / bridge / parameter (one line on
stderr), 1 for a sync timeout or a host failure, 130 / 143 after SIGINT / SIGTERM (the host stops
at a tick boundary and the trace is closed complete first).
"""

from __future__ import annotations

import gc
import os
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, TypedDict, TypeVar

import rclpy
from rclpy.exceptions import (InvalidHandle, ParameterException,
                               ParameterUninitializedException)
from rclpy.executors import ExternalShutdownException, SingleThreadedExecutor
from rclpy.node import Node
from rclpy.parameter import Parameter
from rclpy.signals import SignalHandlerOptions
from rcl_interfaces.msg import ParameterDescriptor, SetParametersResult

from fibril_msgs.srv import GetState
from fibril_sim_core import ShutdownSignals
from fibril_sim_core.entities import Entities
from fibril_sim_core.errors import FibrilError
from fibril_sim_core.manifest import real_time_factor_problem
from fibril_sim_core.plan import SimulationBuilder, SimulationPlan
from fibril_sim_core.records import FrameTiming
from fibril_sim_core.runtime import SimulationRuntime
from fibril_sim_core.trace import TraceWriter

from .bridge import Bridge, load_bridge
from .commands import CommandSubscriptions
from .node_services import NodeServices
from .outbox import OutboxMode
from .priority import DEFAULT_THREAD_PRIORITY, DeliveryPriority
from .publishing import Publishing
from .settings import (DEFAULT_LATENESS_WARN_MS, START_UP_ONLY, Mode, NodeConfigError,
                       NodeSettings, NodeTiming, finite_number, lateness_threshold)
from .sync import SyncDriver
from .watchdog import DeliveryWatchdog

if TYPE_CHECKING:
    from typing import Unpack

    from rclpy.context import Context
    from rclpy.parameter import AllowableParameterValue
    from rclpy.qos import QoSProfile

__all__ = ["EXIT_CONFIG", "EXIT_FAILURE", "NODE_NAME", "NodeConfigError", "SimNode", "main",
           "run"]

NODE_NAME = "fibril_sim"
EXIT_CONFIG = 2
EXIT_FAILURE = 1
GIL_SWITCH_INTERVAL_S = 0.0005
# As fast as possible, a frame lasts about this much wall time: frames of the manifest's
# length (10 ms of simulated time) would cost a frame's overhead (timing record, /clock, a
# writer wake-up, a host round trip) every few hundred microseconds, and services wait for the
# end of the frame. The frame doubles or halves toward it, within the bounds below.
FAST_FRAME_WALL_S = 0.02
FAST_FRAME_MAX_FACTOR = 100  # at most this many manifest frames in one fast frame
# The main thread's executor wakes at least this often to see a signal or a stop request
# (both are seen only between two spins). Each wake rebuilds rclpy's wait set in Python
# (~1.5 ms of CPU at real time with the node's services and publishers' events): at 0.05 s
# that was ~8 % of the node's CPU; a stop now takes up to this long to start.
SPIN_TIMEOUT_S = 0.2


class _NodeKeywords(TypedDict, total=False):
    """rclpy ``Node``'s keyword arguments that ``SimNode`` passes on (it sets the parameter
    overrides itself: use_sim_time)."""

    context: Context | None
    cli_args: list[str] | None
    namespace: str | None
    use_global_arguments: bool
    enable_rosout: bool
    rosout_qos_profile: QoSProfile | int
    start_parameter_services: bool
    allow_undeclared_parameters: bool
    automatically_declare_parameters_from_overrides: bool
    enable_logger_service: bool


# --------------------------------------------------------------------------- the node
class SimNode(Node):
    """The live simulation: a runtime, its bridge topics, /clock and control services.

    Built in order (``_build``): settings (the parameters, checked) -> plan (manifest,
    bridge, timing) -> runtime (host, trace, server) -> wiring (publishers, watchdog,
    subscriptions, services), then started (``_begin``)."""

    def __init__(self, **kwargs: Unpack[_NodeKeywords]) -> None:
        super().__init__(NODE_NAME, parameter_overrides=[Parameter("use_sim_time", value=True)],
                         **kwargs)
        self.exit_code: int | None = None
        self.stop_requested = threading.Event()
        # Wakes the executor's wait when a fatal error asks the node to stop (``fail``, on
        # any thread), rather than at the spin's timeout.
        self._stop_guard = self.create_guard_condition(lambda: None)
        self._mode_lock = threading.Lock()
        # What close() tears down, as far as it was built.
        self._runtime: SimulationRuntime | None = None
        self._trace: TraceWriter | None = None
        self.sync: SyncDriver | None = None
        # The delivery threads' priority in real time (see priority), once they run.
        self._priority: DeliveryPriority | None = None
        self._commands: CommandSubscriptions | None = None
        self._control_services: NodeServices | None = None
        self._publishing: Publishing | None = None
        self._watchdog: DeliveryWatchdog | None = None
        self._declare()
        try:
            self._build()
        except BaseException:
            self.close()
            self.destroy_node()  # nothing of a half-built node outlives the failure
            raise

    # ------------------------------------------------------------------ set-up
    def _declare(self) -> None:
        declare = self.declare_parameter
        # Numbers accept integers too (``-p real_time_factor:=2``); they are checked in
        # NodeSettings.from_parameters.
        number = ParameterDescriptor(dynamic_typing=True)
        declare("manifest", "")
        declare("bridge", "")
        declare("real_time_factor", 1.0, number)
        declare("start_paused", False)
        declare("seed", -1)  # -1: the manifest's scenario.seed (default 0)
        declare("trace_dir", "")
        declare("clock_period", 0.0, number)
        declare("sync_topics", Parameter.Type.STRING_ARRAY)
        declare("sync_timeout", 5.0, number)
        declare("control_period", 0.0, number)
        declare("server_socket", "")
        # Real time: an output written later than this after its due time is a WARN (at most
        # one a second, with the cause; see watchdog).
        declare("lateness_warn_ms", DEFAULT_LATENESS_WARN_MS, number)
        # In real time the delivery path's threads at nice -N where permitted (see priority);
        # 0: as the process.
        declare("thread_priority", DEFAULT_THREAD_PRIORITY)

    def _param(self, name: str) -> object:
        try:
            value: object = self.get_parameter(name).value
        except ParameterUninitializedException:
            return None
        return value

    _lateness_threshold = staticmethod(lateness_threshold)

    def _build(self) -> None:
        settings = NodeSettings.from_parameters(self._param)
        # plan: what is simulated, on which topics, on which time grid
        plan = SimulationBuilder().build(settings.manifest)
        self.plan: SimulationPlan = plan
        seed = plan.episode_seed if settings.seed is None else settings.seed
        self.entities = Entities(plan.model)
        self.bridge: Bridge = load_bridge(plan, settings.bridge)
        timebase = plan.timebase
        timing = NodeTiming.of(settings, timebase,
                               min((d.period_ticks for d in plan.devices), default=0),
                               plan.manifest.runtime.frame_duration_s,
                               {e.topic for e in self.bridge.inputs})
        self.fast_frame_ticks = timing.fast_frame_ticks
        self._clock_step_ns = timing.clock_ticks * timebase.timestep_ns
        self.mode: Mode = settings.mode
        self.target_rtf = settings.real_time_factor
        # runtime: the host thread (paused until _begin); a SimulationServer only when asked
        # for (a viewer or a test harness attaching to the node's simulation)
        if settings.trace_dir is not None:
            self._trace = TraceWriter(settings.trace_dir, provenance=plan.run_provenance(
                seed, live_session=True, bridge=self.bridge.source), layout=dict(plan.layout))
        self._runtime = runtime = SimulationRuntime(plan, seed=seed, trace=self._trace,
                                                    options=timing.options,
                                                    server=settings.server)
        self.connection = runtime.connect()
        self.paced_frame_ticks = runtime.host.frame_ticks
        # wiring
        if settings.sync_topics:
            self.sync = SyncDriver(self, settings.sync_topics, settings.sync_timeout_s,
                                   timing.control_ticks)
        self._publishing = self._make_publishing()
        host = runtime.host
        self._watchdog = DeliveryWatchdog(
            host, host.clock.now, self.get_logger().warning,
            lambda: self.publishing.outbox.backlog, settings.lateness_warn_s)
        self._commands = CommandSubscriptions(
            self, self.bridge, self.connection, self.sync, self._input_failed)
        self._control_services = NodeServices(self)
        self.add_on_set_parameters_callback(self._on_parameters)
        self.publishing.outbox.start()
        self._apply_mode()
        self.publishing.subscribe()
        self.publishing.publish_latched(self._robot_description())
        # /clock at the start (so that nodes waiting for time do not deadlock when it starts
        # paused), before the host runs: nothing is published before it. Not in sync mode,
        # where every /clock ends a period and a controller answers each (see sync).
        if self.sync is None:
            self.publishing.outbox.clock(runtime.instance.session_time_ns)
        runtime.start()
        self.publishing.observe(sync=self.sync is not None)
        self.paused = settings.start_paused
        self._begin(settings)
        self._log_start(settings, seed)

    def _make_publishing(self) -> Publishing:
        logger = self.get_logger()

        def log_error(message: str) -> None:
            logger.error(message, throttle_duration_sec=1.0)

        sync = self.sync
        return Publishing(self, self.plan, self.bridge, self.connection, log_error,
                          on_frame=sync.on_frame if sync is not None else None,
                          on_clock=sync.next_generation if sync is not None else None,
                          after_frame=self._after_frame)

    def _robot_description(self) -> str | None:
        """The URDF made from the MJCF (also the node's read-only ``robot_description``
        parameter, as robot_state_publisher offers it), when the bridge asks for it or for
        markers."""
        bridge = self.bridge
        if bridge.robot_description is None and bridge.markers is None:
            return None
        prefix = bridge.tf.frame_prefix if bridge.tf is not None else ""
        urdf = self.plan.robot_description(prefix)
        self.declare_parameter("robot_description", urdf,
                               ParameterDescriptor(read_only=True,
                                                   description="URDF generated from the MJCF"))
        return urdf

    def _log_start(self, settings: NodeSettings, seed: int) -> None:
        runtime, bridge = self._runtime, self.bridge
        address = runtime.address if runtime is not None else None
        self.get_logger().info(
            f"simulating {self.plan.manifest.path} ({self.mode}"
            + (f", real-time factor {settings.real_time_factor:g}"
               if self.mode == "realtime" else "")
            + (", paused" if settings.start_paused else "") + f", seed {seed}"
            + (f", sync on {', '.join(settings.sync_topics)}" if settings.sync_topics else "")
            + (f", trace {settings.trace_dir}" if settings.trace_dir else "")
            + (f", server {address}" if address else "")
            + f"); bridge {bridge.source}: "
            + ", ".join(f"{e.topic} <- {e.type.split('/')[-1]}" for e in bridge.inputs)
            + "; " + ", ".join(f"{e.topic} ({e.type.split('/')[-1]})" for e in bridge.outputs))

    def _begin(self, settings: NodeSettings) -> None:
        """Start stepping. Everything built so far lives as long as the node: it is kept out
        of the collector's passes first (``gc.freeze``; a full pass over it pauses every
        thread for tens of ms: publish lateness)."""
        gc.collect()
        gc.freeze()
        # From here on (the start-up collection above is no cause of a late output: it ended
        # before pacing began, and was named as the cause of the first outputs' lateness).
        self.watchdog.gc.install()
        if self._runtime is not None:  # (the calling thread spins the executor)
            inputs = self.commands.inputs
            log = self.get_logger()
            amount = settings.thread_priority
            self._priority = DeliveryPriority(
                amount, log.info if amount == DEFAULT_THREAD_PRIORITY else log.warning)
            self._priority.start([self._runtime.host.thread, self.publishing.outbox.thread,
                                  inputs.thread if inputs is not None else None,
                                  threading.current_thread()], self.mode == "realtime")
        if self.sync is not None:
            self.sync.start(paused=settings.start_paused, inputs=self.commands.inputs)
        elif not settings.start_paused:
            self.connection.resume()

    # The parts _build made (AttributeError before: a half-built node has none).
    @property
    def publishing(self) -> Publishing:
        return _built(self._publishing, "publishing")

    @property
    def watchdog(self) -> DeliveryWatchdog:
        return _built(self._watchdog, "watchdog")

    @property
    def commands(self) -> CommandSubscriptions:
        return _built(self._commands, "commands")

    # ------------------------------------------------------------------ control (services)
    def step(self, ticks: int) -> Mapping[str, object]:
        """Advance ``ticks`` while paused (in sync mode, period by period with the answers);
        the outputs are published before it returns. FibrilError while running."""
        self.publishing.refresh_listeners()  # a subscriber that came while paused gets these
        if self.sync is not None:
            if self.sync.running:
                raise NodeConfigError("step: the simulation is running; pause it first "
                                      "(~/set_paused)")
            return self.sync.run_ticks(ticks)
        if not self.paused:
            raise NodeConfigError("step: the simulation is running; pause it first "
                                  "(~/set_paused)")
        state = self.connection.step(ticks)
        self.publishing.outbox.flush()  # its outputs are published before the reply
        return state

    def set_paused(self, paused: bool) -> Mapping[str, object]:
        self.publishing.refresh_listeners()
        if self.sync is not None:  # pausing: the current period finishes first
            state = self.sync.set_running(not paused)
        else:
            state = self.connection.pause() if paused else self.connection.resume()
        self.paused = paused
        return state

    def reset(self, keyframe: str | None = None, seed: int | None = None
              ) -> Mapping[str, object]:
        """A new episode; /clock goes on (SessionTime never goes back)."""
        state = self.connection.reset(keyframe, seed)
        if self.sync is None:  # (sync mode: the next period's /clock follows)
            self.publishing.outbox.clock(state["session_time_ns"])
        return state

    def _on_get_state(self, request: GetState.Request,
                      response: GetState.Response) -> GetState.Response:
        """``~/get_state``'s answer (see node_services), as a call."""
        return _built(self._control_services, "control services").get_state(request, response)

    def state_or_empty(self) -> Mapping[str, object]:
        try:
            return self.connection.state()
        except FibrilError:
            return {}

    # ------------------------------------------------------------------ parameters
    def _on_parameters(self, parameters: list[Parameter[AllowableParameterValue]]
                       ) -> SetParametersResult:
        for parameter in parameters:
            if parameter.name in START_UP_ONLY:
                return SetParametersResult(
                    successful=False,
                    reason=f"{parameter.name} is read at start-up only; restart the node")
            try:
                if parameter.name == "lateness_warn_ms":
                    self.watchdog.threshold_s = lateness_threshold(parameter.value)
                elif parameter.name == "real_time_factor":
                    self._set_real_time_factor(parameter.value)
            except FibrilError as exc:
                return SetParametersResult(successful=False, reason=str(exc))
        return SetParametersResult(successful=True)

    def _set_real_time_factor(self, value: object) -> None:
        problem = real_time_factor_problem(value, zero_allowed=True)
        if problem is not None:
            raise NodeConfigError(f"real_time_factor {problem}")
        rtf = finite_number("real_time_factor", value)
        if self.sync is not None:
            raise NodeConfigError("real_time_factor: sync mode runs as fast as the "
                                  "controllers answer")
        if rtf > 0:
            self.connection.set_real_time_factor(rtf)
            self.connection.set_mode("realtime")
            self.mode = "realtime"
        else:
            self.connection.set_mode("fast")
            self.mode = "fast"
        self._apply_mode()
        self.target_rtf = rtf
        self.get_logger().info(f"real_time_factor set to {rtf:g}")

    def _apply_mode(self) -> None:
        """Fast mode: long frames (from the manifest's on, see ``_adapt_fast_frame``), /clock
        interleaved with the outputs; else a frame a clock; the delivery threads' priority."""
        if self._priority is not None:
            self._priority.apply(real_time=self.mode == "realtime")
        with self._mode_lock:
            fast = self.mode == "fast"
            self.publishing.outbox.set_mode(OutboxMode(
                queued=fast, blocking=self.mode != "realtime",
                clock_step_ns=self._clock_step_ns,
                watch=self.watchdog.delivered if self.mode == "realtime" else None))
            if self._runtime is not None:
                self._runtime.host.frame_ticks = (self.fast_frame_ticks if fast
                                                  else self.paced_frame_ticks)

    def _after_frame(self, frame: FrameTiming) -> None:
        if self.mode == "fast":
            self._adapt_fast_frame(frame.wall_step_time)

    def _adapt_fast_frame(self, wall_s: float) -> None:
        """Fast mode, host thread: the next frame's length, toward FAST_FRAME_WALL_S."""
        with self._mode_lock:  # the parameter callback may be switching modes
            if self.mode != "fast" or self._runtime is None:
                return
            host = self._runtime.host
            ticks = host.frame_ticks
            if wall_s < FAST_FRAME_WALL_S / 2:
                ticks = min(2 * ticks, FAST_FRAME_MAX_FACTOR * self.fast_frame_ticks)
            elif wall_s > 2 * FAST_FRAME_WALL_S:
                ticks = max(ticks // 2, self.fast_frame_ticks)
            host.frame_ticks = ticks

    # ------------------------------------------------------------------ lifecycle
    def fail(self, message: str) -> None:
        """A fatal runtime error (sync timeout, host failure): log it and stop with status 1."""
        self.get_logger().fatal(message)
        print(f"{NODE_NAME}: error: {message}", file=sys.stderr, flush=True)
        if self.exit_code is None:
            self.exit_code = EXIT_FAILURE
        self.stop_requested.set()
        try:
            self._stop_guard.trigger()
        except InvalidHandle:  # the node is destroyed already
            pass

    def check_host(self) -> None:
        runtime = self._runtime
        if runtime is not None and runtime.host.failure is not None and self.exit_code is None:
            self.fail(f"the simulation host stopped: {runtime.host.failure}")

    def _input_failed(self, exc: BaseException) -> None:
        self.fail(f"the command subscriptions stopped after an error: "
                  f"{type(exc).__name__}: {exc}")

    def close(self) -> None:
        """Stop at a tick boundary, publish nothing more, close the trace complete. (Safe on
        a half-built node: each part is torn down as far as it was built.)"""
        self.stop_requested.set()
        commands, self._commands = self._commands, None
        if commands is not None:
            commands.stop()
        started = time.monotonic()
        if self.sync is not None:
            self.sync.stop()
        services, self._control_services = self._control_services, None
        if services is not None:
            services.destroy()
        runtime, self._runtime = self._runtime, None
        if runtime is not None:
            runtime.stop()
        if self._publishing is not None:
            self._publishing.outbox.stop()
        watchdog, self._watchdog = self._watchdog, None
        if watchdog is not None:
            watchdog.gc.remove()
        trace, self._trace = self._trace, None
        if trace is not None:
            trace.close()
        if self._priority is not None:
            self._priority.close()
        if runtime is not None:
            instance = runtime.instance
            self.get_logger().info(
                f"stopped at tick {instance.tick} of episode {instance.episode} "
                f"({instance.session_time_ns / 1e9:.3f} s simulated)"
                + (f"; trace closed complete: {trace.path}" if trace is not None else "")
                + f" ({time.monotonic() - started:.3f} s)")


Part = TypeVar("Part")


def _built(part: Part | None, name: str) -> Part:
    if part is None:
        raise AttributeError(f"the node's {name} is not built (or the node is closed)")
    return part


# --------------------------------------------------------------------------- entry point
def main() -> None:
    """The ``sim_node`` command: run, then leave at once (everything is already closed: the
    trace, the node, the ROS context), without the interpreter's slow module teardown."""
    code = run()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def run(argv: Sequence[str] | None = None) -> int:
    """Run the node until SIGINT / SIGTERM or a fatal error; return the exit status."""
    args = list(sys.argv if argv is None else argv)
    # The host thread waking for its next frame waits for the GIL at most this long while
    # another thread (trace writer, executor) runs Python (default 5 ms: publish jitter).
    sys.setswitchinterval(GIL_SWITCH_INTERVAL_S)
    node: SimNode | None = None
    # The first SIGINT / SIGTERM asks the node to stop at a tick boundary (trace closed), a
    # second one exits at once; SIGINT stays ignored when the node was started with it ignored.
    with ShutdownSignals(raise_interrupt=False) as signals:
        rclpy.init(args=args, signal_handler_options=SignalHandlerOptions.NO)
        executor = None
        try:
            try:
                node = SimNode()
            except (FibrilError, ParameterException) as exc:
                print(f"{NODE_NAME}: error: {exc}", file=sys.stderr, flush=True)
                return EXIT_CONFIG
            # (The node froze what it built out of the collector's passes: SimNode._begin.)
            executor = SingleThreadedExecutor()
            executor.add_node(node)
            # One executor thread: services hand their blocking work to worker threads. The
            # main thread spins (signals are handled here between two spins) and, once asked
            # to stop, tears down with nothing else inside rclpy.
            while not node.stop_requested.is_set() and signals.received is None:
                try:
                    executor.spin_once(timeout_sec=SPIN_TIMEOUT_S)
                except (ExternalShutdownException, KeyboardInterrupt):
                    break
                node.check_host()
            node.close()
            if signals.received is not None:
                return signals.exit_code
            return node.exit_code or 0
        finally:
            if node is not None:
                node.close()
            if executor is not None:
                executor.shutdown(timeout_sec=1.0)
            if node is not None:
                node.destroy_node()
            rclpy.try_shutdown()


if __name__ == "__main__":
    main()
