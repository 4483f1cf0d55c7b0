"""``sim_node``: the live ROS 2 simulation node (node name ``fibril_sim``).

    ros2 run fibril_sim_ros sim_node --ros-args -p manifest:=PATH [-p bridge:=PATH]
        [-p real_time_factor:=1.0] [-p start_paused:=false] [-p seed:=0] [-p trace_dir:=DIR]
        [-p clock_period:=0.0] [-p sync_topics:="[/motor/command]"] [-p sync_timeout:=5.0]
        [-p control_period:=0.002] [-p server_socket:=PATH|auto]
    python -m fibril_sim_ros.sim_node --ros-args ...        (same, in the venv)

It only adapts: a SimulationRuntime steps the instance on its own host thread; subscription
callbacks (on the node's input thread, see ``inputs``) convert a message and call
``connection.submit`` (the ingress) and nothing else; the records the host delivers are
converted and written on the bridge's topics in emission order (see ``outbox``: on the host
thread, GIL-free, in real time and sync mode; through a writer thread as fast as possible),
then ``/clock`` (SessionTime) once per frame. Services: ``~/step``, ``~/reset``,
``~/set_paused``, ``~/get_state``; topic ``~/frame_timing``.

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
import importlib.util
import itertools
import math
import os
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import rclpy
from rclpy.callback_groups import CallbackGroup, MutuallyExclusiveCallbackGroup
from rclpy.exceptions import ParameterException, ParameterUninitializedException
from rclpy.executors import ExternalShutdownException, SingleThreadedExecutor
from rclpy.node import Node
from rclpy.parameter import Parameter
from rclpy.signals import SignalHandlerOptions
from rclpy.task import Future
from rcl_interfaces.msg import ParameterDescriptor, SetParametersResult
from sensor_msgs.msg import JointState
from std_msgs.msg import String

from fibril_msgs.msg import FrameTiming as FrameTimingMsg
from fibril_msgs.srv import GetState, Reset, SetPaused, Step
from fibril_sim_core import ShutdownSignals
from fibril_sim_core.entities import ENTITY_PAYLOAD_TYPE, ENTITY_SOURCE, Entities, placeable
from fibril_sim_core.errors import FibrilError, IngressError
from fibril_sim_core.manifest import real_time_factor_problem
from fibril_sim_core.ingress import external_input
from fibril_sim_core.records import DeviceOutput, FrameTiming, StateObservation

from . import messages as m
from ._rcl_publish import raw_sender
from .bridge import OUTPUT_QOS, Bridge, load_bridge
from .ground_truth import FramePublisher, JointStates, tf_available
from .inputs import InputGroup, InputThread, available as input_thread_available
from .outbox import Outbox
from .qos import CLOCK_QOS, LATCHED_QOS, profile, publisher_events, subscription_events
from .sync import SyncDriver, SyncTimeout

NODE_NAME = "fibril_sim"
EXIT_CONFIG = 2
EXIT_FAILURE = 1
REJECT_LOG_PERIOD_S = 1.0
GIL_SWITCH_INTERVAL_S = 0.0005
# How often the node asks DDS which outputs have subscribers (unsubscribed volatile outputs
# are not converted at all), checked at every frame: a new subscriber is served within this
# much wall time and a frame (as fast as possible, frames last ~FAST_FRAME_WALL_S).
LISTENERS_REFRESH_S = 0.05
# Message types converted on the publisher thread (large), not on the host thread.
HEAVY_TYPES = frozenset({"sensor_msgs/msg/Image", "sensor_msgs/msg/LaserScan"})
# As fast as possible, a frame lasts about this much wall time: frames of the manifest's
# length (10 ms of simulated time) would cost a frame's overhead (timing record, /clock, a
# writer wake-up, a host round trip) every few hundred microseconds, and services wait for the
# end of the frame. The frame doubles or halves toward it, within the bounds below.
FAST_FRAME_WALL_S = 0.02
FAST_FRAME_MAX_FACTOR = 100  # at most this many manifest frames in one fast frame


class NodeConfigError(FibrilError):
    """A parameter of the node is missing or invalid."""


# --------------------------------------------------------------------------- the node
@dataclass(slots=True)
class _Route:
    """One bridge output of a device: its converter and publishers."""

    convert: Any
    publishers: list[Any]
    topics: list[str]
    heavy: bool  # converted on the publisher thread
    latched: bool  # transient local: published even with no subscriber yet
    single: Any = None  # output -> its one message (one topic, small): the hot path
    send: Any = None  # that topic's writer
    listened: bool = True


class SimNode(Node):
    """The live simulation: a runtime, its bridge topics, /clock and control services."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(NODE_NAME, parameter_overrides=[Parameter("use_sim_time", value=True)],
                         **kwargs)
        self.exit_code: int | None = None
        self.stop_requested = threading.Event()
        self._runtime = None
        self._trace = None
        self._inputs: InputThread | None = None
        self.sync: SyncDriver | None = None
        self.outbox = Outbox(self)
        self._mode_lock = threading.Lock()
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
        # Numbers accept integers too (``-p real_time_factor:=2``); they are checked below.
        number = ParameterDescriptor(dynamic_typing=True)
        declare("manifest", "")
        declare("bridge", "")
        declare("real_time_factor", 1.0, number)
        declare("start_paused", False)
        declare("seed", 0)
        declare("trace_dir", "")
        declare("clock_period", 0.0, number)
        declare("sync_topics", Parameter.Type.STRING_ARRAY)
        declare("sync_timeout", 5.0, number)
        declare("control_period", 0.0, number)
        declare("server_socket", "")

    def _param(self, name: str) -> Any:
        try:
            return self.get_parameter(name).value
        except ParameterUninitializedException:
            return None

    def _number(self, name: str) -> float:
        value = self._param(name)
        if isinstance(value, bool) or not isinstance(value, (int, float)) \
                or not math.isfinite(value):
            raise NodeConfigError(f"parameter {name!r} must be a finite number, got {value!r}")
        return float(value)

    def _build(self) -> None:
        from fibril_sim_core.manifest import RuntimeOptions
        from fibril_sim_core.plan import SimulationBuilder
        from fibril_sim_core.runtime import SimulationRuntime

        manifest = str(self._param("manifest") or "")
        if not manifest:
            raise NodeConfigError("parameter 'manifest' is required (-p manifest:=PATH)")
        rtf = self._number("real_time_factor")
        problem = real_time_factor_problem(rtf, zero_allowed=True)
        if problem is not None:
            raise NodeConfigError(f"parameter 'real_time_factor' {problem}")
        seed = int(self._param("seed"))
        if seed < 0:
            raise NodeConfigError(f"parameter 'seed' must be >= 0, got {seed}")
        plan = SimulationBuilder().build(Path(manifest))
        self.plan = plan
        self.entities = Entities(plan.model)
        timebase = plan.timebase
        bridge_path = str(self._param("bridge") or "")
        self.bridge: Bridge = load_bridge(plan, bridge_path or None)
        fastest = min((d.period_ticks for d in plan.devices), default=0) * timebase.timestep_s
        clock_period = self._number("clock_period") or fastest
        self.clock_ticks = self._ticks("clock_period", clock_period) if clock_period > 0 else 0
        frame_s = plan.manifest.runtime.frame_duration_s
        # Fast mode keeps the manifest's frames (fewer host round trips) and publishes /clock
        # between device messages instead; paced modes make a frame of each clock period.
        self.fast_frame_ticks = max(1, timebase.ticks_ceil(frame_s))
        if self.clock_ticks:
            frame_s = min(frame_s, self.clock_ticks * timebase.timestep_s)
        self.outbox.clock_step_ns = self.clock_ticks * timebase.timestep_ns
        sync_topics = [str(t) for t in (self._param("sync_topics") or []) if str(t)]
        start_paused = bool(self._param("start_paused"))
        self.target_rtf = rtf
        if sync_topics:
            known = {e.topic for e in self.bridge.inputs}
            for topic in sync_topics:
                if topic not in known:
                    raise NodeConfigError(
                        f"parameter 'sync_topics': {topic!r} is not an input topic of the "
                        f"bridge; inputs: {', '.join(sorted(known)) or 'none'}")
            control = self._number("control_period") or clock_period or \
                timebase.timestep_s
            control_ticks = self._ticks("control_period", control)
            timeout = self._number("sync_timeout")
            if not timeout > 0:
                raise NodeConfigError(f"parameter 'sync_timeout' must be > 0, got {timeout!r}")
            self.sync = SyncDriver(self, sync_topics, timeout, control_ticks)
            self.outbox.on_frame = self.sync.on_frame
            # As fast as possible in frames of one control period, paused until resumed; the
            # host waits for the answers at the end of each frame (SyncDriver.on_frame).
            options = RuntimeOptions(mode="fast", real_time_factor=1.0,
                                     frame_duration_s=control_ticks * timebase.timestep_s,
                                     start_paused=True)
            self.mode = "sync"
        else:
            options = RuntimeOptions(mode="realtime" if rtf > 0 else "fast",
                                     real_time_factor=rtf if rtf > 0 else 1.0,
                                     frame_duration_s=frame_s, start_paused=start_paused)
            self.mode = "realtime" if rtf > 0 else "fast"
        self._apply_mode()
        trace_dir = str(self._param("trace_dir") or "")
        if trace_dir:
            from fibril_sim_core.trace import TraceWriter

            self._trace = TraceWriter(trace_dir, provenance=dict(
                plan.provenance, seed=seed, live_session=True,
                bridge=self.bridge.source), layout=dict(plan.layout))
        # A SimulationServer only when asked for (a viewer or a test harness attaching to the
        # node's simulation): its hook sees every record on the host thread.
        self._runtime = SimulationRuntime(plan, seed=seed, trace=self._trace, options=options,
                                          server=self._server_options())
        self.connection = self._runtime.connect()
        self._make_publishers()
        self._make_subscriptions()
        if isinstance(self._input_group, InputGroup):
            self._inputs = InputThread(
                self.context, list(self._subscriptions_by_topic.values()),
                [w for w in self.waitables if w.callback_group is self._input_group],
                self._input_failed)
            self._inputs.start()
            if self.sync is not None:
                self.sync.inputs = self._inputs
        else:
            self.get_logger().info("command subscriptions served by the executor (no input "
                                   "thread: FIBRIL_SIM_INPUT_THREAD=0 or rclpy without it)")
        self._make_services()
        self.add_on_set_parameters_callback(self._on_parameters)
        self.outbox.start()
        # Frame timings, and the outputs of the devices someone listens to (the simulation
        # makes no sample of the others; the filter follows the listeners).
        self.connection.on_record(self.outbox.on_record, kinds="frame_timing")
        self._heard_devices = self._listened_devices()
        self._output_subscription = self.connection.on_record(
            self.outbox.on_record, kinds="device_output", devices=self._heard_devices)
        self.paced_frame_ticks = self._runtime.host.frame_ticks
        self._apply_mode()
        self._publish_latched()
        # /clock at the start (so that nodes waiting for time do not deadlock when it starts
        # paused), before the host runs: nothing is published before it. Not in sync mode,
        # where every /clock ends a period and a controller answers each (see sync).
        if self.sync is None:
            self.outbox.clock(self._runtime.instance.session_time_ns)
        self._runtime.start()
        self._start_observations()
        self.paused = start_paused
        if self.sync is not None:
            self.sync.start(paused=start_paused)
        self.get_logger().info(
            f"simulating {plan.manifest.path} ({self.mode}"
            + (f", real-time factor {rtf:g}" if self.mode == "realtime" else "")
            + (", paused" if start_paused else "") + f", seed {seed}"
            + (f", sync on {', '.join(sync_topics)}" if sync_topics else "")
            + (f", trace {trace_dir}" if trace_dir else "")
            + (f", server {self._runtime.address}" if self._runtime.address else "")
            + f"); bridge {self.bridge.source}: "
            + ", ".join(f"{e.topic} <- {e.type.split('/')[-1]}" for e in self.bridge.inputs)
            + "; " + ", ".join(f"{e.topic} ({e.type.split('/')[-1]})"
                               for e in self.bridge.outputs))

    def _server_options(self) -> Any:
        """``server_socket``: "" none (default), ``auto`` a private directory, else a path
        (its directory must exist; the socket is made 0600)."""
        from fibril_sim_core.runtime.server import ServerOptions

        value = str(self._param("server_socket") or "").strip()
        if not value:
            return None
        if value == "auto":
            return ServerOptions()
        path = Path(value).expanduser()
        if not path.parent.is_dir():
            raise NodeConfigError(f"parameter server_socket: directory {path.parent} does not "
                                  f"exist (value {value!r})")
        return ServerOptions(socket=path)

    def _ticks(self, name: str, seconds: float) -> int:
        try:
            return self.plan.timebase.ticks(seconds, 1)
        except ValueError as exc:
            raise NodeConfigError(f"parameter {name!r}: {exc}") from None

    def _make_publishers(self) -> None:
        logger = self.get_logger()
        timestep_s = self.plan.timebase.timestep_s
        self._outputs: dict[str, Any] = {}
        self._routes: dict[str, list[_Route]] = {}  # device id -> its outputs
        self._refreshed = -math.inf
        self._output_subscription: object | None = None  # its filter follows the listeners
        self._heard_devices: frozenset[str] = frozenset()
        self._frame_listened = False
        devices = {d.id: d for d in self.plan.devices}

        def publisher(cls: type, topic: str, qos: Any) -> Any:
            return self.create_publisher(cls, topic, qos,
                                         event_callbacks=publisher_events(logger, topic, qos))

        for entry in self.bridge.outputs:
            qos = profile(entry.qos)
            self._outputs[entry.topic] = publisher(m.MESSAGE_CLASSES[entry.type],
                                                      entry.topic, qos)
            if entry.raw_topic:
                self._outputs[entry.raw_topic] = publisher(m.DeviceSample, entry.raw_topic,
                                                              qos)
            if entry.info_topic:
                self._outputs[entry.info_topic] = publisher(m.CameraInfo, entry.info_topic,
                                                               qos)
            topics = [t for t in (entry.topic, entry.raw_topic, entry.info_topic) if t]
            heavy = entry.type in HEAVY_TYPES
            message = m.main_message(entry, devices[entry.device], timestep_s)
            self._routes.setdefault(entry.device, []).append(_Route(
                m.output_converter(entry, devices[entry.device], timestep_s, message),
                [self._outputs[t] for t in topics], topics, heavy,
                entry.qos.durability == "transient_local",
                None if heavy or len(topics) > 1 else message))
        self._senders = {topic: raw_sender(p) for topic, p in self._outputs.items()}
        self._output_publishers = dict(self._outputs)
        for routes in self._routes.values():
            for route in routes:
                route.send = self._senders[route.topics[0]]
        self._clock_pub = publisher(m.Clock, "/clock", CLOCK_QOS)
        self._clock_send = raw_sender(self._clock_pub)
        self._own_time_set = -math.inf
        own = self._time_source._clock_sub  # see publish_clock
        if own is not None:
            self.destroy_subscription(own)
            self._time_source._clock_sub = None
        self._frame_pub = self.create_publisher(FrameTimingMsg, "~/frame_timing", 10)
        self._make_ground_truth(publisher)

    def _make_ground_truth(self, publisher: Any) -> None:
        """/joint_states and /tf (observation streams the host takes on the sim clock's
        grid, published from the host thread), /tf_static, robot_description and markers
        (latched, published once)."""
        from fibril_sim_core.runtime.observation import StateLayout

        bridge = self.bridge
        self._layout = StateLayout.of(self.plan.model)
        self._joint_send = self._tf_send = None
        self._observation_streams: dict[int, tuple[bool, bool]] = {}
        if bridge.joint_states is not None:
            entry = bridge.joint_states
            joint_pub = publisher(JointState, entry.topic, profile(entry.qos))
            self._joint_send = raw_sender(joint_pub)
            self._joint_states = JointStates(self._layout)
            self._output_publishers[entry.topic] = joint_pub
            self._joint_topic = entry.topic
        self._frames = None
        if bridge.tf is not None:
            if tf_available():
                from tf2_msgs.msg import TFMessage

                self._frames = FramePublisher(self._layout, bridge.tf.frame_prefix)
                tf_pub = publisher(TFMessage, "/tf", profile(OUTPUT_QOS))
                self._tf_send = raw_sender(tf_pub)
                self._output_publishers["/tf"] = tf_pub
                self._tf_static_pub = publisher(TFMessage, "/tf_static", LATCHED_QOS)
            else:
                self.get_logger().warning(
                    "no /tf: the tf2_msgs package is not installed (a ROS installation has "
                    "it; in the venv, make setup builds it from ../shared/vendor/ros2)")
        self._description = None
        if bridge.robot_description is not None or bridge.markers is not None:
            self._description = self._robot_description()

    def _robot_description(self) -> str:
        """The URDF made from the MJCF (also the node's read-only ``robot_description``
        parameter, as robot_state_publisher offers it)."""
        prefix = self.bridge.tf.frame_prefix if self.bridge.tf is not None else ""
        urdf = self.plan.robot_description(prefix)
        self.declare_parameter("robot_description", urdf,
                               ParameterDescriptor(read_only=True,
                                                   description="URDF generated from the MJCF"))
        return urdf

    def _publish_latched(self) -> None:
        """/tf_static, /robot_description and the markers, once (transient local)."""
        bridge = self.bridge
        if self._frames is not None:
            from fibril_sim_core.runtime.observation import static_frames

            frames = static_frames(self.plan.model)
            if bridge.robot_description is not None:  # its links that are no body, too
                frames += self.plan.link_frames()
            if frames:
                self._tf_static_pub.publish(self._frames.static(frames, 0))
        if bridge.robot_description is not None and self._description is not None:
            topic = self.create_publisher(String, bridge.robot_description.topic, LATCHED_QOS)
            topic.publish(String(data=self._description))
        if bridge.markers is not None:
            from .visualization import MarkerArray, marker_array

            prefix = bridge.tf.frame_prefix if bridge.tf is not None else ""
            topic = self.create_publisher(MarkerArray, bridge.markers.topic, LATCHED_QOS)
            topic.publish(marker_array(self.plan.geom_markers(prefix), 0))

    def _start_observations(self) -> None:
        """One observation stream per rate (joint states and TF share one when equal)."""
        bridge = self.bridge
        # Sync mode never skips a grid point (the controllers' answers may depend on them).
        sync = self.sync is not None
        wanted: dict[tuple[float, float], list[bool]] = {}
        if self._joint_send is not None:
            entry = bridge.joint_states
            key = (entry.rate, 0.0 if sync else entry.fast_wall_rate)
            wanted.setdefault(key, [False, False])[0] = True
        if self._tf_send is not None:
            key = (bridge.tf.rate, 0.0 if sync else bridge.tf.fast_wall_rate)
            wanted.setdefault(key, [False, False])[1] = True
        if not wanted:
            return
        self.connection.on_record(self.outbox.on_record, kinds="state_observation")
        for (rate, wall_rate), (joints, frames) in wanted.items():
            stream = self.connection.observe(rate, joints=joints, frames=frames,
                                             fast_wall_rate_hz=wall_rate)
            self._observation_streams[stream] = (joints, frames)

    def _make_subscriptions(self) -> None:
        logger = self.get_logger()
        # Served by the input thread (or else by the single-threaded executor), one callback at
        # a time: per-source sequence numbers reach the ingress in order.
        self._input_group: CallbackGroup = (InputGroup() if input_thread_available()
                                            else MutuallyExclusiveCallbackGroup())
        self._sequences: dict[str, itertools.count[int]] = {}
        self._rejections: dict[str, tuple[float, int]] = {}
        self.malformed = 0
        self._subscriptions_by_topic = {}
        for entry in self.bridge.inputs:
            qos = profile(entry.qos)
            for target in entry.targets:
                self._sequences.setdefault(target, itertools.count(1))
            callback = self._input_callback(entry, m.input_converter(entry))
            self._subscriptions_by_topic[entry.topic] = self.create_subscription(
                m.MESSAGE_CLASSES[entry.type], entry.topic, callback, qos,
                callback_group=self._input_group,
                event_callbacks=subscription_events(logger, entry.topic, qos))

    def _input_callback(self, entry: Any, convert: Any) -> Any:
        topic = entry.topic
        submit = self.connection.submit
        sequences = self._sequences
        sync = self.sync

        def deliver(payloads: list[tuple[str, Any]]) -> None:
            for endpoint, payload in payloads:
                try:
                    submit(external_input(endpoint, next(sequences[endpoint]),
                                          m.MOTOR_PAYLOAD, payload))
                except IngressError as exc:
                    self._rejected(topic, str(exc))

        def callback(msg: Any) -> None:
            try:
                payloads = convert(msg)
            except ValueError as exc:
                self.malformed += 1
                self._rejected(topic, str(exc))
                payloads = []
            if sync is None:
                deliver(payloads)
            else:  # held while a period is stepped (see sync)
                sync.receive(topic, lambda: deliver(payloads))

        return callback

    def _rejected(self, topic: str, reason: str) -> None:
        """Log a rejected command at WARN, at most once a second per topic."""
        now = time.monotonic()
        last, suppressed = self._rejections.get(topic, (-math.inf, 0))
        if now - last < REJECT_LOG_PERIOD_S:
            self._rejections[topic] = (last, suppressed + 1)
            return
        more = f" ({suppressed} more rejected since the last report)" if suppressed else ""
        self.get_logger().warning(f"rejected command on {topic}: {reason}{more}")
        self._rejections[topic] = (now, 0)

    def _make_services(self) -> None:
        for cls, name, handler in ((Step, "~/step", self._on_step),
                                   (Reset, "~/reset", self._on_reset),
                                   (SetPaused, "~/set_paused", self._on_set_paused),
                                   (GetState, "~/get_state", self._on_get_state)):
            self.create_service(cls, name, self._off_executor(handler))
        self.simulation_services = None
        if importlib.util.find_spec("simulation_interfaces") is not None:
            from .simulation_services import SimulationServices

            self.simulation_services = SimulationServices(self, _StandardControl(self))
        else:
            self.get_logger().info("no simulation_interfaces services: the package is not "
                                   "installed (a ROS installation has it; in the venv, make "
                                   "setup builds it from ../shared/vendor/ros2)")

    def _off_executor(self, handler: Any) -> Any:
        """A service callback that runs ``handler`` on a worker thread and awaits it, so that
        the (single-threaded) executor keeps serving the command topics meanwhile: a sync-mode
        ``~/step`` waits for the controllers' answers, which arrive through it."""

        async def callback(request: Any, response: Any) -> Any:
            future: Future = Future()

            def work() -> None:
                try:
                    future.set_result(handler(request, response))
                except BaseException as exc:  # noqa: BLE001 - handed to the service call
                    future.set_exception(exc)
                executor = self.executor
                if executor is not None:
                    executor.wake()

            threading.Thread(target=work, name="fibril-sim-service", daemon=True).start()
            return await future

        return callback

    # ------------------------------------------------------------------ publishing
    def publish_output(self, output: DeviceOutput) -> None:
        """On the host thread: convert and write (at once or queued), or hand a large
        message off. (Who listens is refreshed at frames, ``publish_frame``.)"""
        for route in self._routes.get(output.device_id, ()):
            if not route.listened:
                continue  # nobody listens (volatile topics): skip the conversion
            if route.single is not None:
                self.outbox.write(route.send, route.single(output), route.topics[0])
            elif route.heavy:
                self.outbox.hand_off(route.convert, output, route.topics)
            else:
                write, senders = self.outbox.write, self._senders
                for topic, msg in route.convert(output):
                    write(senders[topic], msg, topic)

    def refresh_listeners(self) -> None:
        """Which routes have subscribers (asked of DDS every LISTENERS_REFRESH_S at most)."""
        self._refreshed = time.monotonic()
        for routes in self._routes.values():
            for route in routes:
                route.listened = route.latched or any(
                    p.get_subscription_count() for p in route.publishers)
        self._frame_listened = self._frame_pub.get_subscription_count() > 0
        self.outbox.clock_listened = self._clock_pub.get_subscription_count() > 0
        heard = self._listened_devices()
        if heard != self._heard_devices and self._output_subscription is not None:
            self._heard_devices = heard
            self.connection.set_record_filter(self._output_subscription, kinds="device_output",
                                              devices=heard)

    def _listened_devices(self) -> frozenset[str]:
        return frozenset(device for device, routes in self._routes.items()
                         if any(route.listened for route in routes))

    def publish_converted(self, convert: Any, output: DeviceOutput) -> None:
        """On the writer thread: convert a large message and write it."""
        senders = self._senders
        for topic, msg in convert(output):
            senders[topic](msg)

    def publish_frame(self, frame: FrameTiming) -> None:
        if time.monotonic() - self._refreshed > LISTENERS_REFRESH_S:
            self.refresh_listeners()
        if self._frame_listened:
            self._frame_pub.publish(m.frame_timing_message(frame))
        if self.outbox.queued:
            self._adapt_fast_frame(frame.wall_step_time)

    def publish_observation(self, observation: StateObservation) -> None:
        """On the host thread: /joint_states and /tf of one observation, in emission order."""
        joints, frames = self._observation_streams.get(observation.stream, (False, False))
        if joints:
            self.outbox.write(self._joint_send, self._joint_states.message(observation),
                              self._joint_topic)
        if frames:
            message = self._frames.moving(observation)
            if message is not None:
                self.outbox.write(self._tf_send, message, "/tf")

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

    def publish_clock(self, session_time_ns: int) -> None:
        if self.sync is not None:
            self.sync.next_generation()
        self._clock_send(m.clock_message(session_time_ns))
        # This node is the source of /clock: it sets its own sim time directly (at most every
        # 5 ms of wall time) rather than receive each of its messages back through the executor.
        now = time.monotonic()
        if now - self._own_time_set > 0.005:
            self._own_time_set = now
            self._time_source.clock_callback(m.Clock(clock=m.stamp(session_time_ns)))

    def outputs_matched(self) -> bool:
        """Every subscription the ROS graph knows on an output topic is matched by its
        publisher (sync mode waits for this before the first period, so a controller's
        readers receive the first period's samples)."""
        for topic, publisher in self._output_publishers.items():
            if publisher.get_subscription_count() < self.count_subscribers(topic):
                return False
        return True

    def republish_clock(self, session_time_ns: int) -> None:
        """The same time again (no new period), for a peer that missed it."""
        self._clock_send(m.clock_message(session_time_ns))

    def clock_subscribers(self) -> int:
        return self._clock_pub.get_subscription_count()

    # ------------------------------------------------------------------ services
    # ------------------------------------------------------------------ control (services)
    def step(self, ticks: int) -> dict[str, Any]:
        """Advance ``ticks`` while paused (in sync mode, period by period with the answers);
        the outputs are published before it returns. FibrilError while running."""
        self.refresh_listeners()  # a subscriber that came while paused gets these steps
        if self.sync is not None:
            if self.sync.running:
                raise NodeConfigError("step: the simulation is running; pause it first "
                                      "(~/set_paused)")
            return self.sync.run_ticks(ticks)
        if not self.paused:
            raise NodeConfigError("step: the simulation is running; pause it first "
                                  "(~/set_paused)")
        state = self.connection.step(ticks)
        self.outbox.flush()  # its outputs are published before the reply
        return state

    def set_paused(self, paused: bool) -> dict[str, Any]:
        self.refresh_listeners()
        if self.sync is not None:  # pausing: the current period finishes first
            state = self.sync.set_running(not paused)
        else:
            state = self.connection.pause() if paused else self.connection.resume()
        self.paused = paused
        return state

    def reset(self, keyframe: str | None = None, seed: int | None = None) -> dict[str, Any]:
        """A new episode; /clock goes on (SessionTime never goes back)."""
        state = self.connection.reset(keyframe, seed)
        if self.sync is None:  # (sync mode: the next period's /clock follows)
            self.outbox.clock(state["session_time_ns"])
        return state

    def _on_step(self, request: Step.Request, response: Step.Response) -> Step.Response:
        try:
            state = self.step(int(request.steps))
            response.success = True
            response.message = f"stepped {request.steps} tick(s)"
            self._fill(response, state)
        except FibrilError as exc:
            if isinstance(exc, SyncTimeout):
                self.get_logger().error(str(exc))
            response.success = False
            response.message = str(exc)
            self._fill(response, self._state_or_empty())
        return response

    def _on_reset(self, request: Reset.Request, response: Reset.Response) -> Reset.Response:
        try:
            state = self.reset(request.keyframe or None,
                               int(request.seed) if request.set_seed else None)
            response.success = True
            response.message = f"episode {state['episode']} started"
        except FibrilError as exc:
            response.success = False
            response.message = str(exc)
            state = self._state_or_empty()
        response.episode = int(state.get("episode", 0))
        response.tick = int(state.get("tick", 0))
        response.session_time_ns = int(state.get("session_time_ns", 0))
        response.seed = int(state.get("seed", 0))
        return response

    def _on_set_paused(self, request: SetPaused.Request,
                       response: SetPaused.Response) -> SetPaused.Response:
        try:
            state = self.set_paused(bool(request.paused))
            response.success = True
            response.message = "paused" if request.paused else "running"
        except FibrilError as exc:
            response.success = False
            response.message = str(exc)
            state = self._state_or_empty()
        response.paused = self.paused
        response.tick = int(state.get("tick", 0))
        response.session_time_ns = int(state.get("session_time_ns", 0))
        return response

    def _on_get_state(self, request: GetState.Request,
                      response: GetState.Response) -> GetState.Response:
        state = self._state_or_empty()
        response.paused = self.paused
        response.episode = int(state.get("episode", 0))
        response.tick = int(state.get("tick", 0))
        response.episode_time_ns = int(state.get("episode_time_ns", 0))
        response.session_time_ns = int(state.get("session_time_ns", 0))
        response.qpos = [float(v) for v in state.get("qpos", [])]
        response.qvel = [float(v) for v in state.get("qvel", [])]
        if response.qpos:
            layout = self._layout
            response.joint_names = list(layout.joint_names)
            response.joint_positions = [response.qpos[i] for i in layout.joint_qpos]
            response.joint_velocities = [response.qvel[i] for i in layout.joint_dof]
        response.seed = int(state.get("seed", 0))
        response.mode = self.mode
        response.target_real_time_factor = float(self.target_rtf)
        # The host measures it in every mode (sync / lockstep frames included).
        response.real_time_factor = float(state.get("real_time_factor", 0.0))
        response.accepted_inputs = int(state.get("accepted_inputs", 0))
        response.rejected_inputs = int(state.get("rejected_inputs", 0)) + self.malformed
        drops = dict(self.outbox.drops)
        response.drop_topics = list(drops)
        response.drop_counts = [int(v) for v in drops.values()]
        return response

    def _fill(self, response: Step.Response, state: dict[str, Any]) -> None:
        response.tick = int(state.get("tick", 0))
        response.episode_time_ns = int(state.get("episode_time_ns", 0))
        response.session_time_ns = int(state.get("session_time_ns", 0))
        response.episode = int(state.get("episode", 0))
        response.paused = self.paused

    def _state_or_empty(self) -> dict[str, Any]:
        try:
            return self.connection.state()
        except FibrilError:
            return {}

    # ------------------------------------------------------------------ parameters
    def _on_parameters(self, parameters: list[Parameter]) -> SetParametersResult:
        for parameter in parameters:
            if parameter.name in ("manifest", "bridge", "seed", "trace_dir", "clock_period",
                                  "sync_topics", "sync_timeout", "control_period",
                                  "start_paused", "server_socket"):
                return SetParametersResult(
                    successful=False,
                    reason=f"{parameter.name} is read at start-up only; restart the node")
            if parameter.name != "real_time_factor":
                continue
            value = parameter.value
            problem = real_time_factor_problem(value, zero_allowed=True)
            if problem is not None:
                return SetParametersResult(successful=False,
                                           reason=f"real_time_factor {problem}")
            if self.sync is not None:
                return SetParametersResult(
                    successful=False, reason="real_time_factor: sync mode runs as fast as "
                                             "the controllers answer")
            try:
                if value > 0:
                    self.connection.set_real_time_factor(float(value))
                    self.connection.set_mode("realtime")
                    self.mode = "realtime"
                else:
                    self.connection.set_mode("fast")
                    self.mode = "fast"
            except FibrilError as exc:
                return SetParametersResult(successful=False, reason=str(exc))
            self._apply_mode()
            self.target_rtf = float(value)
            self.get_logger().info(f"real_time_factor set to {value:g}")
        return SetParametersResult(successful=True)

    def _apply_mode(self) -> None:
        """Fast mode: long frames (from the manifest's on, see ``_adapt_fast_frame``), /clock
        interleaved with the outputs; else a frame a clock."""
        with self._mode_lock:
            fast = self.mode == "fast"
            self.outbox.blocking = self.mode != "realtime"
            self.outbox.queued = fast
            self.outbox.interleave_clock = fast and self.outbox.clock_step_ns > 0
            if self._runtime is not None:
                self._runtime.host.frame_ticks = (self.fast_frame_ticks if fast
                                                  else self.paced_frame_ticks)

    # ------------------------------------------------------------------ lifecycle
    def fail(self, message: str) -> None:
        """A fatal runtime error (sync timeout, host failure): log it and stop with status 1."""
        self.get_logger().fatal(message)
        print(f"{NODE_NAME}: error: {message}", file=sys.stderr, flush=True)
        if self.exit_code is None:
            self.exit_code = EXIT_FAILURE
        self.stop_requested.set()

    def check_host(self) -> None:
        runtime = self._runtime
        if runtime is not None and runtime.host.failure is not None and self.exit_code is None:
            self.fail(f"the simulation host stopped: {runtime.host.failure}")

    def _input_failed(self, exc: BaseException) -> None:
        self.fail(f"the command subscriptions stopped after an error: "
                  f"{type(exc).__name__}: {exc}")

    def close(self) -> None:
        """Stop at a tick boundary, publish nothing more, close the trace complete."""
        self.stop_requested.set()
        inputs, self._inputs = self._inputs, None
        if inputs is not None:
            inputs.stop()
        started = time.monotonic()
        if self.sync is not None:
            self.sync.stop()
        services, self.simulation_services = getattr(self, "simulation_services", None), None
        if services is not None:
            services.destroy()
        runtime, self._runtime = self._runtime, None
        if runtime is not None:
            runtime.stop()
        self.outbox.stop()
        trace, self._trace = self._trace, None
        if trace is not None:
            trace.close()
        if runtime is not None:
            instance = runtime.instance
            self.get_logger().info(
                f"stopped at tick {instance.tick} of episode {instance.episode} "
                f"({instance.session_time_ns / 1e9:.3f} s simulated)"
                + (f"; trace closed complete: {trace.path}" if trace is not None else "")
                + f" ({time.monotonic() - started:.3f} s)")


class _StandardControl:
    """The node as the standard simulation services see it (``SimulationControl``)."""

    def __init__(self, node: SimNode) -> None:
        self._node = node
        self._sequence = itertools.count(1)

    @property
    def paused(self) -> bool:
        node = self._node
        return not node.sync.running if node.sync is not None else bool(node.paused)

    @property
    def timestep_ns(self) -> int:
        return int(self._node.plan.timebase.timestep_ns)

    def set_paused(self, paused: bool) -> dict[str, Any]:
        return self._node.set_paused(paused)

    def step(self, ticks: int) -> dict[str, Any]:
        return self._node.step(ticks)

    def reset(self) -> dict[str, Any]:
        return self._node.reset()

    def state(self) -> dict[str, Any]:
        return self._node.connection.state()

    def entity_names(self) -> tuple[str, ...]:
        return self._node.entities.names

    def entity_states(self, names: list[str] | None) -> tuple[int, list[Any]]:
        return self._node.connection.entity_states(names)

    def set_entity_state(self, payload: dict[str, Any]) -> None:
        self._node.connection.submit(external_input(
            ENTITY_SOURCE, next(self._sequence), ENTITY_PAYLOAD_TYPE, payload))

    def placeable(self, name: str) -> bool:
        entities = self._node.entities
        return placeable(entities.model, entities.body_id(name))


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
            # Everything built so far lives as long as the node: keep it out of the
            # collector's full passes (long pauses of the host thread are publish jitter).
            gc.collect()
            gc.freeze()
            executor = SingleThreadedExecutor()
            executor.add_node(node)
            # One executor thread: services hand their blocking work to worker threads. The
            # main thread spins (signals are handled here between two spins) and, once asked
            # to stop, tears down with nothing else inside rclpy.
            while not node.stop_requested.is_set() and signals.received is None:
                try:
                    executor.spin_once(timeout_sec=0.05)
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
