"""Trace reader: a fibril_sim rosbag2 trace back into the records it was written from.

The reader gives the same ``records`` dataclasses the simulation emitted, so analysis code and
the calibration observer can treat a recorded run and a live one alike.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import yaml
from rosbags.rosbag2 import Reader, ReaderError
from rosbags.serde import SerdeError

from . import _msgtypes
from ..records import (ActuatorApplication, DeviceOutput, EpisodeStart, FrameTiming,
                       IngressRecord, StateSnapshot)
from .writer import (
    ACTUATOR_TOPIC_PREFIX,
    DEVICE_TOPIC_PREFIX,
    EPISODES_TOPIC,
    FRAME_TIMING_TOPIC,
    INPUTS_TOPIC,
    LAYOUT_KEY,
    PROVENANCE_KEY,
    STATE_TOPIC,
    TraceError,
    actuator_topic,
    device_topic,
)

if TYPE_CHECKING:
    from collections.abc import Iterator
    from types import TracebackType

    from rosbags.interfaces import Connection

__all__ = ["TraceReader"]

_NS_PER_S = 1_000_000_000


def _ns(stamp: Any) -> int:
    return stamp.sec * _NS_PER_S + stamp.nanosec


class TraceReader:
    """Open a trace bag directory written by ``TraceWriter`` (context manager).

    ``provenance`` and ``layout`` are the dicts given to the writer. Iterators yield records in
    log-time order; array fields are numpy arrays owned by the record.

    Episode tick and time are related by ``time_ns == tick * layout["timestep_ns"]``; the reader
    uses that to restore the two record fields the wire messages do not carry
    (``DeviceOutput.acquisition_tick`` and ``ActuatorApplication.time_ns``).
    """

    def __init__(self, path: Path | str) -> None:
        path = Path(path)
        if path.is_file() and (path.parent / "metadata.yaml").is_file():
            path = path.parent  # accept the bag's .mcap or metadata.yaml as well
        self.path = path
        if not path.exists():
            msg = f"{path}: trace does not exist"
            raise TraceError(msg)
        metadata_path = path / "metadata.yaml"
        if not path.is_dir() or not metadata_path.is_file():
            msg = f"{path}: not a trace (expected a rosbag2 bag directory with metadata.yaml)"
            raise TraceError(msg)
        custom = self._custom_data(metadata_path)
        self.provenance: dict = self._json_entry(custom, PROVENANCE_KEY)
        self.layout: dict = self._json_entry(custom, LAYOUT_KEY)
        timestep = self.layout.get("timestep_ns")
        if not isinstance(timestep, int) or isinstance(timestep, bool) or timestep <= 0:
            msg = f"{path}: trace layout has no positive integer 'timestep_ns' (got {timestep!r})"
            raise TraceError(msg)
        self.timestep_ns: int = timestep

        self._typestore = _msgtypes.typestore()
        self._bag = Reader(path)
        try:
            self._bag.open()
        except (ReaderError, OSError, KeyError, ValueError) as exc:
            msg = f"{path}: cannot open trace bag: {exc}"
            raise TraceError(msg) from exc
        try:
            self._check_types()
        except BaseException:
            self._bag.close()
            raise

    # -- public API ---------------------------------------------------------------------------

    @property
    def topics(self) -> dict[str, int]:
        """Topic name → message count."""
        return {name: info.msgcount for name, info in self._bag.topics.items()}

    @property
    def message_count(self) -> int:
        """Messages in the trace, all topics."""
        return self._bag.message_count

    def close(self) -> None:
        """Release the bag files; idempotent."""
        if self._bag.is_open:
            self._bag.close()

    def __enter__(self) -> TraceReader:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc_val: BaseException | None,
        exc_tb: TracebackType | None,
    ) -> None:
        self.close()

    def external_inputs(self) -> Iterator[IngressRecord]:
        """Every input the ingress saw, accepted or rejected."""
        for msg, _ in self._messages(self._connections_on(INPUTS_TOPIC)):
            yield IngressRecord(
                episode=msg.episode,
                source_id=msg.source_id,
                source_sequence=msg.source_sequence,
                payload_type=msg.payload_type,
                payload_json=msg.payload_json,
                accepted=msg.accepted,
                commit_tick=msg.commit_tick,
                acceptance_sequence=msg.acceptance_sequence,
                reject_reason=msg.reject_reason,
                session_time_ns=_ns(msg.stamp),
            )

    def device_outputs(self, device_id: str | None = None) -> Iterator[DeviceOutput]:
        """Device samples in delivery order, of one device or of all."""
        if device_id is None:
            connections = self._connections_under(DEVICE_TOPIC_PREFIX)
        else:
            connections = self._connections_on(device_topic(device_id))
        timestep = self.timestep_ns
        for msg, _ in self._messages(connections):
            if device_id is not None and msg.device_id != device_id:
                continue  # another id that sanitizes to the same topic
            yield DeviceOutput(
                episode=msg.episode,
                device_id=msg.device_id,
                sample_type=msg.sample_type,
                acquisition_tick=msg.acquisition_episode_time_ns // timestep,
                acquisition_time_ns=msg.acquisition_episode_time_ns,
                delivery_time_ns=msg.delivery_episode_time_ns,
                session_acquisition_time_ns=_ns(msg.acquisition_stamp),
                session_delivery_time_ns=_ns(msg.header.stamp),
                values=np.array(msg.values, dtype=np.float64),
                component_names=tuple(msg.component_names),
                frame_id=msg.header.frame_id,
            )

    def actuator_applications(self, endpoint: str | None = None) -> Iterator[ActuatorApplication]:
        """Actuator command paths per tick, of one endpoint or of all."""
        if endpoint is None:
            connections = self._connections_under(ACTUATOR_TOPIC_PREFIX)
        else:
            connections = self._connections_on(actuator_topic(endpoint))
        timestep = self.timestep_ns
        for msg, _ in self._messages(connections):
            if endpoint is not None and msg.endpoint != endpoint:
                continue
            yield ActuatorApplication(
                episode=msg.episode,
                tick=msg.tick,
                time_ns=msg.tick * timestep,
                session_time_ns=_ns(msg.stamp),
                endpoint=msg.endpoint,
                actuator=msg.actuator,
                mode=msg.mode,
                commanded=msg.commanded,
                released=msg.released,
                applied=msg.applied,
            )

    def snapshots(self) -> Iterator[StateSnapshot]:
        """Post-physics state snapshots; ``xpos`` is (nbody, 3) and ``xquat`` (nbody, 4)."""
        for msg, _ in self._messages(self._connections_on(STATE_TOPIC)):
            yield StateSnapshot(
                episode=msg.episode,
                tick=msg.tick,
                time_ns=msg.episode_time_ns,
                session_time_ns=_ns(msg.stamp),
                qpos=msg.qpos.copy(),
                qvel=msg.qvel.copy(),
                act=msg.act.copy(),
                ctrl=msg.ctrl.copy(),
                actuator_force=msg.actuator_force.copy(),
                sensordata=msg.sensordata.copy(),
                xpos=msg.xpos.reshape(-1, 3).copy(),
                xquat=msg.xquat.reshape(-1, 4).copy(),
            )

    def frame_timings(self) -> Iterator[FrameTiming]:
        """Host frame timings."""
        for msg, _ in self._messages(self._connections_on(FRAME_TIMING_TOPIC)):
            yield FrameTiming(
                episode=msg.episode,
                tick=msg.tick,
                episode_time_ns=msg.episode_time_ns,
                session_time_ns=msg.session_time_ns,
                wall_step_time=msg.wall_step_time,
                real_time_factor=msg.real_time_factor,
            )

    def episodes(self) -> list[EpisodeStart]:
        """The seed and keyframe of every episode in the trace, in order (empty for traces
        written before episodes were recorded: then ``provenance["seed"]`` is episode 0's)."""
        out = []
        for msg, _ in self._messages(self._connections_on(EPISODES_TOPIC)):
            try:
                item = json.loads(msg.data)
                out.append(EpisodeStart(int(item["episode"]), int(item["seed"]),
                                        str(item["keyframe"]), int(item["session_time_ns"])))
            except (TypeError, ValueError, KeyError) as exc:
                text = f"{self.path}: corrupt {EPISODES_TOPIC} record: {exc}"
                raise TraceError(text) from exc
        return out

    # -- internals ----------------------------------------------------------------------------

    def _custom_data(self, metadata_path: Path) -> dict:
        try:
            document = yaml.safe_load(metadata_path.read_text(encoding="utf-8"))
            custom = document["rosbag2_bagfile_information"].get("custom_data") or {}
        except (OSError, yaml.YAMLError, KeyError, TypeError, AttributeError) as exc:
            msg = f"{self.path}: unreadable rosbag2 metadata.yaml: {exc}"
            raise TraceError(msg) from exc
        if not isinstance(custom, dict):
            custom = {}
        return custom

    def _json_entry(self, custom: dict, key: str) -> dict:
        text = custom.get(key)
        if text is None:
            msg = f"{self.path}: not a fibril_sim trace (bag metadata has no {key!r} custom data)"
            raise TraceError(msg)
        try:
            value = json.loads(text)
        except (TypeError, ValueError) as exc:
            msg = f"{self.path}: custom data {key!r} is not valid JSON: {exc}"
            raise TraceError(msg) from exc
        if not isinstance(value, dict):
            msg = f"{self.path}: custom data {key!r} is not a JSON object"
            raise TraceError(msg)
        return value

    def _check_types(self) -> None:
        """Refuse traces whose fibril_msgs definitions differ from the ones we decode with."""
        for connection in self._bag.connections:
            if connection.msgtype not in _msgtypes.MSG_DEFINITIONS or not connection.digest:
                continue
            expected = self._typestore.hash_rihs01(connection.msgtype)
            if connection.digest != expected:
                msg = (
                    f"{self.path}: topic {connection.topic} was written with a different "
                    f"{connection.msgtype} definition ({connection.digest}, expected {expected})"
                )
                raise TraceError(msg)

    def _connections_on(self, topic: str) -> list[Connection]:
        return [c for c in self._bag.connections if c.topic == topic]

    def _connections_under(self, prefix: str) -> list[Connection]:
        return [c for c in self._bag.connections if c.topic.startswith(prefix)]

    def _messages(self, connections: list[Connection]) -> Iterator[tuple[Any, int]]:
        if not connections:
            return  # rosbags reads *every* topic when given no connections
        deserialize = self._typestore.deserialize_cdr
        try:
            for connection, log_time, data in self._bag.messages(connections=connections):
                yield deserialize(data, connection.msgtype), log_time
        except (ReaderError, SerdeError, OSError) as exc:
            msg = f"{self.path}: corrupt trace: {exc}"
            raise TraceError(msg) from exc
