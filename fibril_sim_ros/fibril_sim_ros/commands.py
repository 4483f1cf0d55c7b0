"""The sim node's command subscriptions: a message converted, handed to the ingress.

Served by the input thread (see ``inputs``; or else by the single-threaded executor), one
callback at a time: per-source sequence numbers reach the ingress in order. A rejected or
malformed command is logged at WARN, at most once a second per topic.
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable

from rclpy.callback_groups import CallbackGroup, MutuallyExclusiveCallbackGroup
from rclpy.node import Node
from rclpy.subscription import Subscription

from fibril_sim_core.errors import IngressError
from fibril_sim_core.ingress import external_input
from fibril_sim_core.runtime import SimulationConnection

from . import messages as m
from .bridge import Bridge, InputEntry
from .inputs import InputGroup, InputThread, available as input_thread_available
from .qos import profile, subscription_events
from .sync import SyncDriver

REJECT_LOG_PERIOD_S = 1.0


class CommandSubscriptions:
    """The bridge's input topics on ``node``, delivering into ``connection``."""

    def __init__(self, node: Node, bridge: Bridge, connection: SimulationConnection,
                 sync: SyncDriver | None, on_failure: Callable[[BaseException], None]) -> None:
        self._node = node
        self._submit = connection.submit
        self._sync = sync
        self._sequences: dict[str, itertools.count[int]] = {}
        self._rejections: dict[str, tuple[float, int]] = {}
        self.malformed = 0
        self.inputs: InputThread | None = None
        logger = node.get_logger()
        group: CallbackGroup = (InputGroup() if input_thread_available()
                                else MutuallyExclusiveCallbackGroup())
        subscriptions = []
        self._by_topic: dict[str, list[Subscription[object]]] = {}
        for entry in bridge.inputs:
            qos = profile(entry.qos)
            for target in entry.targets:
                self._sequences.setdefault(target, itertools.count(1))
            subscriptions.append(node.create_subscription(
                m.MESSAGE_CLASSES[entry.type], entry.topic,
                self._callback(entry, m.input_converter(entry)), qos, callback_group=group,
                event_callbacks=subscription_events(logger, entry.topic, qos)))
            self._by_topic.setdefault(entry.topic, []).append(subscriptions[-1])
        if isinstance(group, InputGroup):
            self.inputs = InputThread(
                node.context, subscriptions,
                [w for w in node.waitables if w.callback_group is group], on_failure)
            self.inputs.start()
        else:
            logger.info("command subscriptions served by the executor (no input thread: "
                        "FIBRIL_SIM_INPUT_THREAD=0 or rclpy without it)")

    def matched(self, topic: str) -> bool:
        """Every publisher the ROS graph shows on ``topic`` is matched by this node's
        subscriptions (sync mode waits for this before the first period: a controller's
        answer to it is published once, and a writer not yet matched would send it to no one)."""
        known = self._node.count_publishers(topic)
        return all(s.get_publisher_count() >= known for s in self._by_topic.get(topic, ()))

    def stop(self) -> None:
        inputs, self.inputs = self.inputs, None
        if inputs is not None:
            inputs.stop()

    def _callback(self, entry: InputEntry,
                  convert: Callable[[object], m.Payloads]) -> Callable[[object], None]:
        topic = entry.topic
        submit = self._submit
        sequences = self._sequences
        sync = self._sync

        def deliver(payloads: m.Payloads) -> None:
            for endpoint, payload in payloads:
                try:
                    submit(external_input(endpoint, next(sequences[endpoint]),
                                          m.MOTOR_PAYLOAD, payload))
                except IngressError as exc:
                    self._rejected(topic, str(exc))

        def callback(msg: object) -> None:  # (an rclpy message)
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
        self._node.get_logger().warning(f"rejected command on {topic}: {reason}{more}")
        self._rejections[topic] = (now, 0)
