"""Traces: the simulation's semantic records as rosbag2 bags (MCAP storage), and reading them.

``writer`` writes a bag while a run goes on, ``reader`` decodes it back into records, ``query``
answers semantic selectors (``joint:wheel.velocity``, ``device:imu``) over it.
"""

from ..errors import TraceError
from .query import SELECTOR_KINDS, QueryResult, TraceQueryError, query, to_csv, to_json
from .reader import TraceReader, TraceWarning
from .writer import (ACTUATOR_TOPIC_PREFIX, DEVICE_TOPIC_PREFIX, FRAME_TIMING_TOPIC,
                     INPUTS_TOPIC, LAYOUT_KEY, PROVENANCE_KEY, STATE_TOPIC, TraceWriter,
                     actuator_topic, device_topic)

__all__ = [
    "ACTUATOR_TOPIC_PREFIX", "DEVICE_TOPIC_PREFIX", "FRAME_TIMING_TOPIC", "INPUTS_TOPIC",
    "LAYOUT_KEY", "PROVENANCE_KEY", "SELECTOR_KINDS", "STATE_TOPIC", "QueryResult",
    "TraceError", "TraceQueryError", "TraceReader", "TraceWarning", "TraceWriter",
    "actuator_topic", "device_topic", "query", "to_csv", "to_json",
]
