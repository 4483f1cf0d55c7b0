"""QoS profiles of the bridge entries and of ``/clock``, and QoS-event logging.

A QoS incompatibility between one of our publishers or subscriptions and a peer is logged at
WARN with the topic, our QoS and the offending policy, never left silent.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rclpy.event_handler import (PublisherEventCallbacks, QoSOfferedIncompatibleQoSInfo,
                                 QoSRequestedIncompatibleQoSInfo, SubscriptionEventCallbacks)
from rclpy.qos import (DurabilityPolicy, HistoryPolicy, QoSPolicyKind, QoSProfile,
                       ReliabilityPolicy)

from .bridge import Qos

if TYPE_CHECKING:
    from rclpy.impl.rcutils_logger import RcutilsLogger

#: ``/clock``: reliable (a best-effort subscriber such as rclpy's time source still receives),
#: transient local so that a late joiner asking for it gets the current time at once (a paused
#: simulation publishes it once); depth 10 so that a reliable reader that stalls briefly still
#: gets every tick.
CLOCK_QOS = QoSProfile(depth=10, history=HistoryPolicy.KEEP_LAST,
                       reliability=ReliabilityPolicy.RELIABLE,
                       durability=DurabilityPolicy.TRANSIENT_LOCAL)

#: Published once and kept for late joiners (``/tf_static``, ``/robot_description``, markers),
#: as robot_state_publisher and tf2's static broadcaster offer them.
LATCHED_QOS = QoSProfile(depth=1, history=HistoryPolicy.KEEP_LAST,
                         reliability=ReliabilityPolicy.RELIABLE,
                         durability=DurabilityPolicy.TRANSIENT_LOCAL)


def profile(qos: Qos) -> QoSProfile:
    return QoSProfile(
        depth=qos.depth, history=HistoryPolicy.KEEP_LAST,
        reliability=(ReliabilityPolicy.RELIABLE if qos.reliability == "reliable"
                     else ReliabilityPolicy.BEST_EFFORT),
        durability=(DurabilityPolicy.TRANSIENT_LOCAL if qos.durability == "transient_local"
                    else DurabilityPolicy.VOLATILE))


def describe(profile: QoSProfile) -> str:
    return (f"{profile.reliability.name.lower()}, {profile.durability.name.lower()}, "
            f"depth {profile.depth}")


def _policy(event: QoSRequestedIncompatibleQoSInfo) -> str:
    try:
        return QoSPolicyKind(event.last_policy_kind).name
    except ValueError:
        return str(event.last_policy_kind)


def subscription_events(logger: RcutilsLogger, topic: str, profile: QoSProfile
                        ) -> SubscriptionEventCallbacks:
    def incompatible(event: QoSRequestedIncompatibleQoSInfo) -> None:
        logger.warning(f"QoS mismatch on {topic}: a publisher offers QoS incompatible with this "
                       f"subscription ({describe(profile)}); its messages are NOT received "
                       f"(policy {_policy(event)}, {event.total_count} publisher(s) so far)")

    return SubscriptionEventCallbacks(incompatible_qos=incompatible)


def publisher_events(logger: RcutilsLogger, topic: str,
                     profile: QoSProfile) -> PublisherEventCallbacks:
    def incompatible(event: QoSOfferedIncompatibleQoSInfo) -> None:
        logger.warning(f"QoS mismatch on {topic}: a subscription requests QoS this publisher "
                       f"({describe(profile)}) cannot offer; it receives NOTHING (policy "
                       f"{_policy(event)}, {event.total_count} subscription(s) so far)")

    return PublisherEventCallbacks(incompatible_qos=incompatible)
