"""Topic names of a trace: one per record kind, one per device and per actuator endpoint."""

from __future__ import annotations

import re
from typing import Final

__all__ = ["ACTUATOR_TOPIC_PREFIX", "DEVICE_TOPIC_PREFIX", "EPISODES_TOPIC", "FRAME_TIMING_TOPIC",
           "INPUTS_TOPIC", "STATE_TOPIC", "actuator_topic", "device_topic"]

INPUTS_TOPIC: Final = "/fibril/external_inputs"
STATE_TOPIC: Final = "/fibril/state"
FRAME_TIMING_TOPIC: Final = "/fibril/frame_timing"
#: One std_msgs/String per episode: JSON {episode, seed, keyframe, session_time_ns}.
EPISODES_TOPIC: Final = "/fibril/episodes"
DEVICE_TOPIC_PREFIX: Final = "/fibril/devices/"
ACTUATOR_TOPIC_PREFIX: Final = "/fibril/actuators/"

_INVALID_TOPIC_CHAR = re.compile(r"[^A-Za-z0-9_/]")


def _topic_suffix(name: str) -> str:
    """Map an id (which may contain ``/``) to valid ROS topic name tokens.

    ROS allows ``[A-Za-z0-9_]`` tokens separated by single ``/``, none starting with a digit.
    Distinct ids may map to one topic; readers tell them apart by the id inside each message.
    """
    tokens = [t for t in _INVALID_TOPIC_CHAR.sub("_", name).split("/") if t]
    tokens = [f"_{t}" if t[0].isdigit() else t for t in tokens]
    return "/".join(tokens) or "_"


def device_topic(device_id: str) -> str:
    """Topic carrying ``fibril_msgs/msg/DeviceSample`` for one device."""
    return DEVICE_TOPIC_PREFIX + _topic_suffix(device_id)


def actuator_topic(endpoint: str) -> str:
    """Topic carrying ``fibril_msgs/msg/ActuatorApplication`` for one endpoint."""
    return ACTUATOR_TOPIC_PREFIX + _topic_suffix(endpoint)
