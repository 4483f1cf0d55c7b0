"""The sim node's topics: the bridge's outputs, /clock, frame timings and the ground truth.

``Publishing`` makes the publishers, converts what the host delivers (through its ``Outbox``,
in emission order) and follows who listens: the outputs of a device nobody subscribes to are
not even made by the simulation (the record filter follows the listeners).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from rclpy.node import Node
from rclpy.publisher import Publisher
from rclpy.qos import QoSProfile
from rclpy.type_support import Msg
from rosgraph_msgs.msg import Clock
from sensor_msgs.msg import CameraInfo, JointState
from std_msgs.msg import String

from fibril_msgs.msg import DeviceSample, FrameTiming as FrameTimingMsg
from fibril_sim_core.plan import SimulationPlan
from fibril_sim_core.records import DeviceOutput, FrameTiming, StateObservation
from fibril_sim_core.robot_description import joint_chain_frames
from fibril_sim_core.runtime.observation import StateLayout, static_frames
from fibril_sim_core.runtime import SimulationConnection

from . import messages as m
from .rcl_publish import Send, raw_sender
from .bridge import OUTPUT_QOS, Bridge
from .ground_truth import FramePublisher, JointStates, TFMessage, tf_available
from .outbox import Convert, Log, Outbox
from .qos import CLOCK_QOS, LATCHED_QOS, profile, publisher_events

# How often the node asks DDS which outputs have subscribers (unsubscribed volatile outputs
# are not converted at all), checked at every frame: a new subscriber is served within this
# much wall time and a frame (as fast as possible, frames last ~FAST_FRAME_WALL_S).
LISTENERS_REFRESH_S = 0.05
# Message types converted on the publisher thread (large), not on the host thread.
HEAVY_TYPES = frozenset({"sensor_msgs/msg/Image", "sensor_msgs/msg/LaserScan"})
# The node sets its own sim time from the /clock it writes at most this often (wall s): it
# costs a message and rclpy's time conversions on the host thread (~30-60 us at real time),
# and nothing of the node's own runs on its ROS clock.
OWN_TIME_PERIOD_S = 0.02


@dataclass(slots=True)
class _Route:
    """One bridge output of a device: its converter and publishers."""

    convert: Convert
    publishers: list[Publisher[Msg]]
    topics: list[str]
    heavy: bool  # converted on the publisher thread
    latched: bool  # transient local: published even with no subscriber yet
    single: Callable[[DeviceOutput], object] | None  # output -> its one message: the hot path
    send: Send  # the first topic's writer
    listened: bool = True


class Publishing:
    """The node's publishers, and the ``RecordPublisher`` its outbox writes through.

    ``after_frame`` is told every frame (host thread, after its timing is published);
    ``on_clock`` every new /clock period (sync mode counts them).
    """

    def __init__(self, node: Node, plan: SimulationPlan, bridge: Bridge,
                 connection: SimulationConnection, log: Log, on_frame: Callable[[FrameTiming], None] | None = None,
                 on_clock: Callable[[], None] | None = None,
                 after_frame: Callable[[FrameTiming], None] | None = None) -> None:
        self._node = node
        self._plan = plan
        self._bridge = bridge
        self._connection = connection
        self._on_clock = on_clock
        self._after_frame = after_frame
        self.layout = StateLayout.of(plan.model)
        self._refreshed = -math.inf
        self._output_subscription: object | None = None  # its filter follows the listeners
        self._heard_devices: frozenset[str] = frozenset()
        self._frame_listened = False
        self._own_time_set = -math.inf
        self._observation_streams: dict[int, tuple[bool, bool]] = {}
        self.outbox = Outbox(publish=self, logger=log, on_frame=on_frame)
        self._make_outputs()
        self._clock_pub = self._publisher(Clock, "/clock", CLOCK_QOS)
        self._clock_send = raw_sender(self._clock_pub)
        own = node._time_source._clock_sub  # see publish_clock
        if own is not None:
            node.destroy_subscription(own)
            node._time_source._clock_sub = None
        self._frame_pub = node.create_publisher(FrameTimingMsg, "~/frame_timing", 10)
        self._make_ground_truth()

    # ------------------------------------------------------------------ set-up
    def _publisher(self, cls: type[Msg], topic: str, qos: QoSProfile) -> Publisher[Msg]:
        logger = self._node.get_logger()
        return self._node.create_publisher(cls, topic, qos,
                                           event_callbacks=publisher_events(logger, topic, qos))

    def _make_outputs(self) -> None:
        timestep_s = self._plan.timebase.timestep_s
        publishers: dict[str, Publisher[Msg]] = {}
        self._routes: dict[str, list[_Route]] = {}  # device id -> its outputs
        self._senders: dict[str, Send] = {}
        devices = {d.id: d for d in self._plan.devices}
        for entry in self._bridge.outputs:
            qos = profile(entry.qos)
            publishers[entry.topic] = self._publisher(m.MESSAGE_CLASSES[entry.type],
                                                      entry.topic, qos)
            if entry.raw_topic:
                publishers[entry.raw_topic] = self._publisher(DeviceSample, entry.raw_topic,
                                                              qos)
            if entry.info_topic:
                publishers[entry.info_topic] = self._publisher(CameraInfo, entry.info_topic,
                                                               qos)
            topics = [t for t in (entry.topic, entry.raw_topic, entry.info_topic) if t]
            heavy = entry.type in HEAVY_TYPES
            message = m.main_message(entry, devices[entry.device], timestep_s)
            for topic in topics:
                self._senders[topic] = raw_sender(publishers[topic])
            self._routes.setdefault(entry.device, []).append(_Route(
                m.output_converter(entry, devices[entry.device], timestep_s, message),
                [publishers[t] for t in topics], topics, heavy,
                entry.qos.durability == "transient_local",
                None if heavy or len(topics) > 1 else message, self._senders[topics[0]]))
        self._output_publishers = dict(publishers)

    def _make_ground_truth(self) -> None:
        """/joint_states and /tf (observation streams the host takes on the sim clock's
        grid, published from the host thread); /tf_static is made here, written latched."""
        bridge = self._bridge
        self._joint_send: Send | None = None
        self._tf_send: Send | None = None
        self._joint_topic = ""
        self._joint_states = JointStates(self.layout)
        if bridge.joint_states is not None:
            entry = bridge.joint_states
            joint_pub = self._publisher(JointState, entry.topic, profile(entry.qos))
            self._joint_send = raw_sender(joint_pub)
            self._output_publishers[entry.topic] = joint_pub
            self._joint_topic = entry.topic
        self._frames: FramePublisher | None = None
        self._tf_static_pub: Publisher[Msg] | None = None
        if bridge.tf is not None:
            if tf_available():
                # The robot description's links between two joints of one body move with
                # the joints: on /tf beside the bodies (its fixed links: /tf_static).
                chains = (joint_chain_frames(self._plan.model)
                          if bridge.robot_description is not None else ())
                self._frames = FramePublisher(self.layout, bridge.tf.frame_prefix, chains)
                tf_pub = self._publisher(TFMessage, "/tf", profile(OUTPUT_QOS))
                self._tf_send = raw_sender(tf_pub)
                self._output_publishers["/tf"] = tf_pub
                self._tf_static_pub = self._publisher(TFMessage, "/tf_static", LATCHED_QOS)
            else:
                self._node.get_logger().warning(
                    "no /tf: the tf2_msgs package is not installed (a ROS installation has "
                    "it; in the venv, make setup builds it from ../shared/vendor/ros2)")

    def publish_latched(self, description: str | None) -> None:
        """/tf_static, /robot_description and the markers, once (transient local)."""
        bridge, plan = self._bridge, self._plan
        if self._frames is not None and self._tf_static_pub is not None:
            frames = static_frames(plan.model)
            if bridge.robot_description is not None:  # its links that are no body, too
                frames += plan.link_frames()
            if frames:
                self._tf_static_pub.publish(self._frames.static(frames, 0))
        if bridge.robot_description is not None and description is not None:
            topic = self._node.create_publisher(String, bridge.robot_description.topic,
                                                LATCHED_QOS)
            topic.publish(String(data=description))
        if bridge.markers is not None:
            # (visualization_msgs is imported only for a bridge that asks for markers.)
            from visualization_msgs.msg import MarkerArray

            from .visualization import marker_array

            prefix = bridge.tf.frame_prefix if bridge.tf is not None else ""
            topic = self._node.create_publisher(MarkerArray, bridge.markers.topic, LATCHED_QOS)
            topic.publish(marker_array(plan.geom_markers(prefix), 0))

    def subscribe(self) -> None:
        """Take the records from the host: frame timings, and the outputs of the devices
        someone listens to (the simulation makes no sample of the others)."""
        connection, outbox = self._connection, self.outbox
        connection.on_record(outbox.on_record, kinds="frame_timing")
        self._heard_devices = self._listened_devices()
        self._output_subscription = connection.on_record(
            outbox.on_record, kinds="device_output", devices=self._heard_devices)

    def observe(self, sync: bool) -> None:
        """Once the host runs: one observation stream per ground-truth rate (joint states
        and TF share one when equal). Sync mode never skips a grid point (the controllers'
        answers may depend on them)."""
        connection, bridge = self._connection, self._bridge
        wanted: dict[tuple[float, float], list[bool]] = {}
        if self._joint_send is not None and bridge.joint_states is not None:
            entry = bridge.joint_states
            key = (entry.rate, 0.0 if sync else entry.fast_wall_rate)
            wanted.setdefault(key, [False, False])[0] = True
        if self._tf_send is not None and bridge.tf is not None:
            key = (bridge.tf.rate, 0.0 if sync else bridge.tf.fast_wall_rate)
            wanted.setdefault(key, [False, False])[1] = True
        if not wanted:
            return
        connection.on_record(self.outbox.on_record, kinds="state_observation")
        chained = self._frames is not None and self._frames.needs_joints
        for (rate, wall_rate), (joints, frames) in wanted.items():
            # (the joints' positions are taken for the frames between joints too)
            stream = connection.observe(rate, joints=joints or (frames and chained),
                                        frames=frames, fast_wall_rate_hz=wall_rate)
            self._observation_streams[stream] = (joints, frames)

    # ------------------------------------------------------------------ listeners
    def refresh_listeners(self) -> None:
        """Which routes have subscribers (asked of DDS every LISTENERS_REFRESH_S at most)."""
        self._refreshed = time.monotonic()
        for routes in self._routes.values():
            for route in routes:
                route.listened = route.latched or any(
                    p.get_subscription_count() for p in route.publishers)
        self._frame_listened = self._frame_pub.get_subscription_count() > 0
        self.outbox.set_clock_listened(self._clock_pub.get_subscription_count() > 0)
        heard = self._listened_devices()
        if heard != self._heard_devices and self._output_subscription is not None:
            self._heard_devices = heard
            self._connection.set_record_filter(self._output_subscription,
                                               kinds="device_output", devices=heard)

    def _listened_devices(self) -> frozenset[str]:
        return frozenset(device for device, routes in self._routes.items()
                         if any(route.listened for route in routes))

    def outputs_matched(self) -> bool:
        """Every subscription the ROS graph knows on an output topic is matched by its
        publisher (sync mode waits for this before the first period, so a controller's
        readers receive the first period's samples)."""
        for topic, publisher in self._output_publishers.items():
            if publisher.get_subscription_count() < self._node.count_subscribers(topic):
                return False
        return True

    def clock_subscribers(self) -> int:
        return int(self._clock_pub.get_subscription_count())

    # ------------------------------------------------------------------ RecordPublisher
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

    def publish_converted(self, convert: Convert, output: DeviceOutput) -> None:
        """On the writer thread: convert a large message and write it."""
        senders = self._senders
        for topic, msg in convert(output):
            senders[topic](msg)

    def publish_frame(self, frame: FrameTiming) -> None:
        if time.monotonic() - self._refreshed > LISTENERS_REFRESH_S:
            self.refresh_listeners()
        if self._frame_listened:
            self._frame_pub.publish(m.frame_timing_message(frame))
        if self._after_frame is not None:
            self._after_frame(frame)

    def publish_observation(self, observation: StateObservation) -> None:
        """On the host thread: /joint_states and /tf of one observation, in emission order."""
        joints, frames = self._observation_streams.get(observation.stream, (False, False))
        if joints and self._joint_send is not None:
            self.outbox.write(self._joint_send, self._joint_states.message(observation),
                              self._joint_topic)
        if frames and self._frames is not None and self._tf_send is not None:
            message = self._frames.moving(observation)
            if message is not None:
                self.outbox.write(self._tf_send, message, "/tf")

    def publish_clock(self, session_time_ns: int) -> None:
        if self._on_clock is not None:
            self._on_clock()
        self._clock_send(m.clock_message(session_time_ns))
        # This node is the source of /clock: it sets its own sim time directly (at most every
        # 5 ms of wall time) rather than receive each of its messages back through the executor.
        now = time.monotonic()
        if now - self._own_time_set > OWN_TIME_PERIOD_S:
            self._own_time_set = now
            self._node._time_source.clock_callback(Clock(clock=m.stamp(session_time_ns)))

    def republish_clock(self, session_time_ns: int) -> None:
        """The same time again (no new period), for a peer that missed it."""
        self._clock_send(m.clock_message(session_time_ns))

