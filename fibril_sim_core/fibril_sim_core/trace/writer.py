"""Trace writer: the simulation's semantic records as a rosbag2 bag (MCAP storage, zstd chunks).

One format serves every consumer: ``ros2 bag play``, Foxglove, ``mcap`` tools and the calibration
reader all read it, and writing it needs no ROS installation (rosbags does the container work).

Robustness: a run that ends by an exception or SIGINT must still leave a complete, readable
trace. Python raises ``KeyboardInterrupt`` between any two bytecodes of the main thread, so a
bag mutated there could be torn in the middle of a record. The writer therefore serializes
records on the caller's thread (cheap, stateless) and hands the bytes to one private worker
thread that alone touches the bag; ``KeyboardInterrupt`` is never raised in that thread. ``close``
drains the worker, writes the MCAP summary and ``metadata.yaml``, and keeps waiting for that
even if interrupted again. A writer that is never closed is closed at interpreter exit.
"""

from __future__ import annotations

import json
import re
import threading
import time
import weakref
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from queue import SimpleQueue
from typing import TYPE_CHECKING, Any, Final

import numpy as np
from rosbags.rosbag2 import StoragePlugin, Writer, WriterError
from rosbags.rosbag2.enums import CompressionFormat, CompressionMode

from . import _msgtypes
from ._cdr_device import DeviceTemplate, device_template, encode_device
from ..errors import TraceError
from ..records import (ActuatorApplication, DeviceOutput, EpisodeStart, FrameTiming,
                       IngressRecord, StateSnapshot)

if TYPE_CHECKING:
    from collections.abc import Callable
    from types import TracebackType

    from rosbags.interfaces import Connection

    TraceRecord = (IngressRecord | DeviceOutput | ActuatorApplication | StateSnapshot
                   | FrameTiming | EpisodeStart)

__all__ = [
    "ACTUATOR_TOPIC_PREFIX",
    "DEVICE_TOPIC_PREFIX",
    "EPISODES_TOPIC",
    "FRAME_TIMING_TOPIC",
    "INPUTS_TOPIC",
    "LAYOUT_KEY",
    "PROVENANCE_KEY",
    "STATE_TOPIC",
    "TraceError",
    "TraceWriter",
    "actuator_topic",
    "device_topic",
]


INPUTS_TOPIC: Final = "/fibril/external_inputs"
STATE_TOPIC: Final = "/fibril/state"
FRAME_TIMING_TOPIC: Final = "/fibril/frame_timing"
#: One std_msgs/String per episode: JSON {episode, seed, keyframe, session_time_ns}.
EPISODES_TOPIC: Final = "/fibril/episodes"
DEVICE_TOPIC_PREFIX: Final = "/fibril/devices/"
ACTUATOR_TOPIC_PREFIX: Final = "/fibril/actuators/"

#: Keys of the bag's ``custom_data`` (metadata.yaml and the MCAP metadata record); JSON values.
PROVENANCE_KEY: Final = "fibril_sim.provenance"
LAYOUT_KEY: Final = "fibril_sim.layout"

#: rosbag2 metadata version 8 is the newest that Jazzy's ``ros2 bag`` reads.
BAG_VERSION: Final = 8

_NS_PER_S: Final = 1_000_000_000
_INVALID_TOPIC_CHAR = re.compile(r"[^A-Za-z0-9_/]")
# Records queued for the worker before write() waits for it to catch up (bounds memory).
_MAX_BACKLOG: Final = 10_000


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


def _f64(array: Any) -> np.ndarray:
    """Flat contiguous float64 view (or copy): what the CDR serializer copies byte-wise."""
    return np.ascontiguousarray(array, dtype=np.float64).reshape(-1)


_CLOSE: Final = object()


@dataclass(slots=True)
class _WorkerState:
    """What the worker thread reports back; kept apart from the writer so it can be GC'd."""

    failure: BaseException | None = None
    connections: dict[str, Connection] = field(default_factory=dict)


def _run_worker(bag: Writer, queue: SimpleQueue[Any], state: _WorkerState) -> None:
    """Own the bag: append queued messages in order, then close it on the sentinel."""
    typestore = _msgtypes.typestore()
    connections = state.connections
    get = queue.get
    while True:
        item = get()
        if item is _CLOSE:
            break
        if state.failure is not None:
            continue  # keep draining so producers never block on a dead worker
        topic, msgtype, stamp, data = item
        try:
            connection = connections.get(topic)
            if connection is None:
                connection = bag.add_connection(topic, msgtype, typestore=typestore)
                connections[topic] = connection
            bag.write(connection, stamp, data)
        except BaseException as exc:  # reported to the caller by write() and close()
            state.failure = exc
    try:
        bag.close()
    except BaseException as exc:
        if state.failure is None:
            state.failure = exc
        with suppress(Exception):  # already failing; the first error is the one reported
            bag.abort()


def _stop_worker(queue: SimpleQueue[Any], thread: threading.Thread) -> None:
    """Ask the worker to close the bag and wait for it, even through further Ctrl-C."""
    queue.put(_CLOSE)
    interrupted: BaseException | None = None
    while thread.is_alive():
        try:
            thread.join()
        except KeyboardInterrupt as exc:
            interrupted = exc
    if interrupted is not None:
        raise interrupted


class TraceWriter:
    """Write semantic records of a run to a new rosbag2 bag directory.

    ``provenance`` and ``layout`` (JSON-able dicts) go into the bag's ``custom_data``; the layout
    names the model's bodies, joints, sensors, actuators, endpoints and devices so the arrays in
    ``/fibril/state`` can be interpreted without the model. Records should arrive in
    non-decreasing session time; each message's log time is its session time (the delivery time
    for device samples). Connections are created on first use of a topic.
    """

    def __init__(self, path: Path | str, *, provenance: dict, layout: dict) -> None:
        self.path = Path(path)
        provenance_json = self._json("provenance", provenance)
        layout_json = self._json("layout", layout)
        self._prepare_directory()

        bag = Writer(self.path, version=BAG_VERSION, storage_plugin=StoragePlugin.MCAP)
        # STORAGE mode = zstd-compressed MCAP chunks: what `ros2 bag record --storage mcap
        # --storage-preset-profile zstd_fast` produces; every MCAP reader handles it natively.
        bag.set_compression(CompressionMode.STORAGE, CompressionFormat.ZSTD)
        bag.set_custom_data(PROVENANCE_KEY, provenance_json)
        bag.set_custom_data(LAYOUT_KEY, layout_json)
        try:
            bag.open()
        except (WriterError, OSError) as exc:
            msg = f"{self.path}: cannot create trace: {exc}"
            raise TraceError(msg) from exc

        self._typestore = _msgtypes.typestore()
        self._serialize = self._typestore.serialize_cdr
        types = self._typestore.types
        self._Time = types["builtin_interfaces/msg/Time"]
        self._Header = types["std_msgs/msg/Header"]
        self._ExternalInput = types[_msgtypes.EXTERNAL_INPUT]
        self._DeviceSample = types[_msgtypes.DEVICE_SAMPLE]
        self._ActuatorApplication = types[_msgtypes.ACTUATOR_APPLICATION]
        self._StateSnapshot = types[_msgtypes.STATE_SNAPSHOT]
        self._FrameTiming = types[_msgtypes.FRAME_TIMING]
        self._String = types["std_msgs/msg/String"]
        self._encoders: dict[type, Callable[[Any], tuple[str, str, int, memoryview]]] = {
            IngressRecord: self._encode_ingress,
            DeviceOutput: self._encode_device,
            ActuatorApplication: self._encode_actuator,
            StateSnapshot: self._encode_state,
            FrameTiming: self._encode_frame_timing,
            EpisodeStart: self._encode_episode,
        }
        self._device_topics: dict[str, str] = {}
        self._device_templates: dict[tuple, DeviceTemplate] = {}
        self._actuator_topics: dict[str, str] = {}
        self._count = 0

        self._queue: SimpleQueue[Any] = SimpleQueue()
        self._state = _WorkerState()
        self._lock = threading.Lock()
        self._closed = False
        # Daemon, so a forgotten writer never blocks interpreter exit; the finalizer below
        # (also run at exit) still closes the bag properly before daemon threads stop.
        self._thread = threading.Thread(
            target=_run_worker,
            args=(bag, self._queue, self._state),
            name=f"fibril-trace-writer:{self.path.name}",
            daemon=True,
        )
        self._thread.start()
        self._finalizer = weakref.finalize(self, _stop_worker, self._queue, self._thread)

    # -- public API ---------------------------------------------------------------------------

    @property
    def record_count(self) -> int:
        """Records accepted by ``write`` so far."""
        return self._count

    @property
    def closed(self) -> bool:
        """Whether ``close`` has been called."""
        return self._closed

    def write(self, record: TraceRecord) -> None:
        """Serialize one record and queue it for the bag.

        Raises:
            TypeError: ``record`` is not one of the traced record types.
            TraceError: The writer is closed, the record does not fit its message type, or the
                bag could not be written.
        """
        encode = self._encoders.get(type(record))
        if encode is None:
            msg = f"{self.path}: cannot trace a {type(record).__name__}; expected one of " + (
                ", ".join(t.__name__ for t in self._encoders)
            )
            raise TypeError(msg)
        try:
            item = encode(record)
        except Exception as exc:  # e.g. struct.error for an int outside its field's range
            msg = f"{self.path}: cannot encode {type(record).__name__} as a message: {exc}"
            raise TraceError(msg) from exc
        with self._lock:
            if self._closed:
                msg = f"{self.path}: trace writer is closed"
                raise TraceError(msg)
            self._queue.put(item)
            self._count += 1
        if self._state.failure is not None:
            self._raise_failure()
        if self._queue.qsize() > _MAX_BACKLOG:
            self._wait_for_backlog()

    def close(self) -> None:
        """Finish the bag: flush queued records, write the MCAP summary and ``metadata.yaml``.

        Idempotent and safe to call from ``finally`` or exception handlers; a Ctrl-C during
        the close is deferred until the bag is complete, then re-raised.
        """
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._finalizer()
        if self._state.failure is not None:
            self._raise_failure()

    def __enter__(self) -> TraceWriter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc_val: BaseException | None,
        exc_tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- internals ----------------------------------------------------------------------------

    def _json(self, what: str, value: dict) -> str:
        if not isinstance(value, dict):
            msg = f"{self.path}: trace {what} must be a dict, got {type(value).__name__}"
            raise TraceError(msg)
        try:
            return json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False)
        except (TypeError, ValueError) as exc:
            msg = f"{self.path}: trace {what} is not JSON-serializable: {exc}"
            raise TraceError(msg) from exc

    def _prepare_directory(self) -> None:
        """Accept a missing or empty directory; never mix a new trace into existing files."""
        path = self.path
        if not path.exists():
            return
        if not path.is_dir():
            msg = f"{path}: exists and is not a directory; a trace is a new bag directory"
            raise TraceError(msg)
        if any(path.iterdir()):
            msg = f"{path}: directory is not empty; refusing to write a trace into it"
            raise TraceError(msg)
        path.rmdir()  # rosbags creates the bag directory itself

    def _raise_failure(self) -> None:
        failure = self._state.failure
        msg = f"{self.path}: writing the trace failed: {failure!r}"
        raise TraceError(msg) from failure

    def _wait_for_backlog(self) -> None:
        """Let the worker catch up so a fast producer cannot grow the queue without bound."""
        while self._queue.qsize() > _MAX_BACKLOG // 2 and self._thread.is_alive():
            time.sleep(0.001)

    def _time(self, ns: int) -> Any:
        sec, nanosec = divmod(ns, _NS_PER_S)
        return self._Time(sec, nanosec)

    def _encode_ingress(self, r: IngressRecord) -> tuple[str, str, int, memoryview]:
        msg = self._ExternalInput(
            stamp=self._time(r.session_time_ns),
            episode=r.episode,
            source_id=r.source_id,
            source_sequence=r.source_sequence,
            payload_type=r.payload_type,
            payload_json=r.payload_json,
            commit_tick=r.commit_tick,
            acceptance_sequence=r.acceptance_sequence,
            accepted=r.accepted,
            reject_reason=r.reject_reason,
        )
        data = self._serialize(msg, _msgtypes.EXTERNAL_INPUT)
        return INPUTS_TOPIC, _msgtypes.EXTERNAL_INPUT, r.session_time_ns, data

    def _encode_device(self, r: DeviceOutput) -> tuple[str, str, int, memoryview]:
        topic = self._device_topics.get(r.device_id)
        if topic is None:
            topic = self._device_topics[r.device_id] = device_topic(r.device_id)
        key = (r.device_id, r.frame_id, r.sample_type, r.component_names, len(r.values))
        template = self._device_templates.get(key)
        if template is None:
            template = self._device_templates[key] = device_template(
                r.frame_id, r.device_id, r.sample_type, tuple(r.component_names), len(r.values))
        data = encode_device(template, r.session_delivery_time_ns, r.session_acquisition_time_ns,
                             r.acquisition_time_ns, r.delivery_time_ns, r.episode, r.values)
        return topic, _msgtypes.DEVICE_SAMPLE, r.session_delivery_time_ns, memoryview(data)

    def _encode_device_generic(self, r: DeviceOutput) -> tuple[str, str, int, memoryview]:
        """The reference encoding through the typestore (kept to test the fast path)."""
        topic = device_topic(r.device_id)
        msg = self._DeviceSample(
            header=self._Header(stamp=self._time(r.session_delivery_time_ns), frame_id=r.frame_id),
            acquisition_stamp=self._time(r.session_acquisition_time_ns),
            acquisition_episode_time_ns=r.acquisition_time_ns,
            delivery_episode_time_ns=r.delivery_time_ns,
            episode=r.episode,
            device_id=r.device_id,
            sample_type=r.sample_type,
            values=_f64(r.values),
            component_names=list(r.component_names),
        )
        data = self._serialize(msg, _msgtypes.DEVICE_SAMPLE)
        return topic, _msgtypes.DEVICE_SAMPLE, r.session_delivery_time_ns, data

    def _encode_actuator(self, r: ActuatorApplication) -> tuple[str, str, int, memoryview]:
        topic = self._actuator_topics.get(r.endpoint)
        if topic is None:
            topic = self._actuator_topics[r.endpoint] = actuator_topic(r.endpoint)
        msg = self._ActuatorApplication(
            stamp=self._time(r.session_time_ns),
            episode=r.episode,
            tick=r.tick,
            endpoint=r.endpoint,
            actuator=r.actuator,
            mode=r.mode,
            commanded=float(r.commanded),
            released=float(r.released),
            applied=float(r.applied),
        )
        data = self._serialize(msg, _msgtypes.ACTUATOR_APPLICATION)
        return topic, _msgtypes.ACTUATOR_APPLICATION, r.session_time_ns, data

    def _encode_state(self, r: StateSnapshot) -> tuple[str, str, int, memoryview]:
        msg = self._StateSnapshot(
            stamp=self._time(r.session_time_ns),
            episode=r.episode,
            tick=r.tick,
            episode_time_ns=r.time_ns,
            qpos=_f64(r.qpos),
            qvel=_f64(r.qvel),
            act=_f64(r.act),
            ctrl=_f64(r.ctrl),
            actuator_force=_f64(r.actuator_force),
            sensordata=_f64(r.sensordata),
            xpos=_f64(r.xpos),
            xquat=_f64(r.xquat),
        )
        data = self._serialize(msg, _msgtypes.STATE_SNAPSHOT)
        return STATE_TOPIC, _msgtypes.STATE_SNAPSHOT, r.session_time_ns, data

    def _encode_frame_timing(self, r: FrameTiming) -> tuple[str, str, int, memoryview]:
        msg = self._FrameTiming(
            stamp=self._time(r.session_time_ns),
            episode=r.episode,
            tick=r.tick,
            episode_time_ns=r.episode_time_ns,
            session_time_ns=r.session_time_ns,
            wall_step_time=float(r.wall_step_time),
            real_time_factor=float(r.real_time_factor),
        )
        data = self._serialize(msg, _msgtypes.FRAME_TIMING)
        return FRAME_TIMING_TOPIC, _msgtypes.FRAME_TIMING, r.session_time_ns, data

    def _encode_episode(self, r: EpisodeStart) -> tuple[str, str, int, memoryview]:
        text = json.dumps({"episode": r.episode, "seed": r.seed, "keyframe": r.keyframe,
                           "session_time_ns": r.session_time_ns}, sort_keys=True)
        data = self._serialize(self._String(data=text), "std_msgs/msg/String")
        return EPISODES_TOPIC, "std_msgs/msg/String", r.session_time_ns, data
