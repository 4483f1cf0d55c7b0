"""Trace reader: a fibril_sim rosbag2 trace back into the records it was written from.

The reader gives the same ``records`` dataclasses the simulation emitted, so analysis code and
the calibration observer can treat a recorded run and a live one alike.

Integrity. A trace is never read silently wrong: every chunk is checked as it is decompressed
(zstd frame, size, CRC-32, record structure, agreement with its message indexes), and each
topic read to its end is checked against the message counts of the MCAP summary. A damaged
chunk, a damaged summary or a truncated file (the writing process was killed: no footer) is a
one-line ``TraceError`` naming the file, the chunk and the session-time range affected. With
``salvage=True`` the reader instead returns everything that is intact, skips what is not, and
lists what is missing in ``problems`` (each also issued once as a ``TraceWarning``).
"""

from __future__ import annotations

import heapq
import json
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar, cast

import numpy as np
from rosbags.serde import SerdeError

from .. import schema
from .._document import Node
from ..records import (
    ActuatorApplication,
    DeviceOutput,
    EpisodeStart,
    FrameTiming,
    IngressRecord,
    StateSnapshot,
)
from . import msgtypes
from .mcap_file import ChannelInfo, ChunkInfo, McapDamage, McapIndex, chunk_messages
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
    from collections.abc import Callable, Iterator
    from types import TracebackType

__all__ = ["TraceReader", "TraceWarning"]

_NS_PER_S = 1_000_000_000


class TraceWarning(UserWarning):
    """Part of a trace was missing or damaged and was skipped (``salvage=True``)."""


_M = TypeVar("_M")  # what a message type decodes to (msgtypes.Decoded*)


def _ns(stamp: msgtypes.Stamp) -> int:
    return int(stamp.sec) * _NS_PER_S + int(stamp.nanosec)


def _seconds(ns: int) -> str:
    return f"{ns / _NS_PER_S:.6f} s"


class TraceReader:
    """Open a trace bag directory written by ``TraceWriter`` (context manager).

    ``provenance`` and ``layout`` are the dicts given to the writer. Iterators yield records in
    log-time order (write order among equal times); array fields are numpy arrays owned by the
    record. ``salvage=True`` reads damaged or truncated traces as far as they are intact and
    reports the rest in ``problems`` instead of raising.

    Episode tick and time are related by ``time_ns == tick * layout["timestep_ns"]``; the reader
    uses that to restore the two record fields the wire messages do not carry
    (``DeviceOutput.acquisition_tick`` and ``ActuatorApplication.time_ns``).
    """

    def __init__(self, path: Path | str, *, salvage: bool = False) -> None:
        path = Path(path)
        if path.is_file() and (path.suffix == ".mcap" or path.name == "metadata.yaml"):
            path = path.parent  # accept the bag's .mcap or metadata.yaml as well
        self.path = path
        self.salvage = salvage
        self._problems: list[str] = []
        if not path.exists():
            msg = f"{path}: trace does not exist"
            raise TraceError(msg)
        metadata_path = path / "metadata.yaml"
        information: dict[str, Node] | None = None
        if path.is_dir() and metadata_path.is_file():
            information = _read_metadata(metadata_path)
            mcap_path = _mcap_path(path, information)
        else:
            mcaps = sorted(path.glob("*.mcap")) if path.is_dir() else []
            if len(mcaps) != 1:
                msg = f"{path}: not a trace (expected a rosbag2 bag directory with metadata.yaml)"
                raise TraceError(msg)
            mcap_path = mcaps[0]
        self.mcap_path = mcap_path
        try:
            self._index = McapIndex(mcap_path)
        except McapDamage as exc:
            msg = f"{mcap_path}: unreadable trace: {exc}"
            raise TraceError(msg) from None
        except OSError as exc:
            msg = f"{mcap_path}: cannot read trace: {exc.strerror or exc}"
            raise TraceError(msg) from None
        if information is None:  # metadata.yaml lost: the MCAP's copy of it
            information = _embedded_metadata(path, mcap_path, self._index)
        custom = information.get("custom_data") or {}
        if not isinstance(custom, dict):
            custom = {}
        # The JSON objects the writer was given; ``query`` reads the layout by the keys
        # ``plan.trace_layout`` writes (a damaged one fails there as a TraceError or TypeError).
        self.provenance: dict[str, Node] = _json_entry(path, custom, PROVENANCE_KEY)
        self.layout: dict[str, Node] = _json_entry(path, custom, LAYOUT_KEY)
        timestep = self.layout.get("timestep_ns")
        if not isinstance(timestep, int) or isinstance(timestep, bool) or timestep <= 0:
            msg = f"{path}: trace layout has no positive integer 'timestep_ns' (got {timestep!r})"
            raise TraceError(msg)
        self.timestep_ns: int = timestep
        self._typestore = msgtypes.typestore()
        self._digests = _topic_digests(information)
        self._check_types()
        self._check_complete()
        self._file = mcap_path.open("rb")
        self._counts = self._message_counts()

    @property
    def problems(self) -> list[str]:
        """What ``salvage`` skipped so far: truncation, damaged chunks, missing messages."""
        return list(self._problems)

    @property
    def truncated(self) -> bool:
        """Whether the MCAP has no (valid) summary: a writer that never finished it."""
        return not self._index.complete

    # -- public API ---------------------------------------------------------------------------

    @property
    def topics(self) -> dict[str, int]:
        """Topic name → message count (of the readable chunks, for a truncated trace)."""
        topics: dict[str, int] = {}
        for channel in self._index.channels.values():
            topics[channel.topic] = topics.get(channel.topic, 0) + self._counts.get(channel.id, 0)
        return topics

    @property
    def message_count(self) -> int:
        """Messages in the trace, all topics."""
        return sum(self._counts.values())

    def close(self) -> None:
        """Release the bag files; idempotent."""
        self._file.close()

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
        for msg, _ in self._messages(self._connections_on(INPUTS_TOPIC),
                                     msgtypes.EXTERNAL_INPUT_SHAPE):
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
        for msg, _ in self._messages(connections, msgtypes.DEVICE_SAMPLE_SHAPE):
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
        for msg, _ in self._messages(connections, msgtypes.ACTUATOR_APPLICATION_SHAPE):
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
        for msg, _ in self._messages(self._connections_on(STATE_TOPIC),
                                     msgtypes.STATE_SNAPSHOT_SHAPE):
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
        for msg, _ in self._messages(self._connections_on(FRAME_TIMING_TOPIC),
                                     msgtypes.FRAME_TIMING_SHAPE):
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
        for msg, _ in self._messages(self._connections_on(EPISODES_TOPIC),
                                     msgtypes.STRING_SHAPE):
            try:
                item = json.loads(msg.data)
                out.append(EpisodeStart(int(item["episode"]), int(item["seed"]),
                                        str(item["keyframe"]), int(item["session_time_ns"])))
            except (TypeError, ValueError, KeyError) as exc:
                text = f"{self.path}: corrupt {EPISODES_TOPIC} record: {exc}"
                raise TraceError(text) from exc
        return out

    # -- internals ----------------------------------------------------------------------------

    def _check_types(self) -> None:
        """Refuse traces whose fibril_msgs definitions differ from the ones we decode with."""
        for channel in self._index.channels.values():
            msgtype = channel.schema_name
            digest = self._digests.get(channel.topic)
            if msgtype not in msgtypes.MSG_DEFINITIONS or not digest:
                continue
            expected = self._typestore.hash_rihs01(msgtype)
            if digest != expected:
                msg = (f"{self.path}: topic {channel.topic} was written with a different "
                       f"{msgtype} definition ({digest}, expected {expected})")
                raise TraceError(msg)

    def _problem(self, text: str, salvaged: str) -> None:
        """Fail, or (salvage) note ``text`` and what salvage does about it, and warn once."""
        if not self.salvage:
            raise TraceError(f"{text}; read what is intact with 'fibril_sim trace query "
                             "--salvage' or TraceReader(..., salvage=True)")
        text = f"{text}; {salvaged}"
        if text not in self._problems:
            self._problems.append(text)
            warnings.warn(text, TraceWarning, stacklevel=4)

    def _check_complete(self) -> None:
        index = self._index
        if index.complete:
            return
        chunks = index.chunks
        end = max((c.end for c in chunks), default=None)
        readable = f"{len(chunks)} complete chunk(s) readable"
        why = index.summary_problem
        if why.startswith("no footer"):
            what = ("trace is truncated before its first chunk" if end is None
                    else f"trace is truncated after session time {_seconds(end)}")
            text = (f"{self.mcap_path}: {what} (no footer: the writer was killed or the file "
                    f"was cut short); {readable}")
        else:
            text = f"{self.mcap_path}: MCAP summary is damaged ({why}); {readable} by scanning"
        if index.scan_problem:
            text += f"; scanning stopped: {index.scan_problem}"
        self._problem(text, "reading the complete chunks only")

    def _message_counts(self) -> dict[int, int]:
        """Per channel: the summary's statistics, or (truncated) the scanned chunks' indexes."""
        if self._index.channel_counts is not None:
            return dict(self._index.channel_counts)
        counts: dict[int, int] = {}
        f = self._file
        for chunk in self._index.chunks:
            for channel, offset in chunk.index_offsets.items():
                f.seek(offset + 9 + 2)
                raw = f.read(4)
                if len(raw) == 4:
                    counts[channel] = counts.get(channel, 0) + int.from_bytes(raw, "little") // 16
        return counts

    def _describe(self, chunk: ChunkInfo) -> str:
        return (f"chunk {chunk.number} at byte {chunk.offset} (session time "
                f"{_seconds(chunk.start)} to {_seconds(chunk.end)})")

    def _connections_on(self, topic: str) -> list[ChannelInfo]:
        return [c for c in self._index.channels.values() if c.topic == topic]

    def _connections_under(self, prefix: str) -> list[ChannelInfo]:
        return [c for c in self._index.channels.values() if c.topic.startswith(prefix)]

    def _messages(self, connections: list[ChannelInfo], shape: msgtypes.Decoded[_M]
                  ) -> Iterator[tuple[_M, int]]:
        """Decoded messages of these channels in log-time order (write order among ties);
        ``shape``: what their type decodes to."""
        if not connections:
            return
        wanted = {c.id: c for c in connections}
        chunks = [c for c in self._index.chunks
                  if c.index_length is None or not c.index_offsets
                  or any(cid in c.index_offsets for cid in wanted)]
        chunks.sort(key=lambda c: (c.start, c.number))
        # (rosbags returns its generated class, typed object: the shape the caller named)
        deserialize = cast("Callable[[bytes, str], _M]", self._typestore.deserialize_cdr)
        seen = dict.fromkeys(wanted, 0)
        skipped = False
        heap: list[tuple[int, int, int, int, bytes]] = []
        upcoming = 0
        while True:
            while upcoming < len(chunks) and (not heap or chunks[upcoming].start <= heap[0][0]):
                chunk = chunks[upcoming]
                upcoming += 1
                try:
                    channels, times, sequences, messages = chunk_messages(self._file, chunk)
                except McapDamage as exc:
                    skipped = True
                    self._problem(f"{self.mcap_path}: {self._describe(chunk)} is damaged: {exc}",
                                  "its messages are missing")
                    continue
                except OSError as exc:
                    msg = f"{self.mcap_path}: cannot read {self._describe(chunk)}: {exc}"
                    raise TraceError(msg) from None
                order = np.lexsort((sequences, times))
                for n in order.tolist():
                    cid = int(channels[n])
                    if cid in wanted:
                        heapq.heappush(heap, (int(times[n]), chunk.number, n, cid, messages[n]))
            if not heap:
                break
            log_time, _, _, cid, data = heapq.heappop(heap)
            seen[cid] += 1
            channel = wanted[cid]
            try:
                message = deserialize(data, channel.schema_name)
            except (SerdeError, KeyError, ValueError, IndexError) as exc:
                msg = (f"{self.mcap_path}: cannot decode a {channel.schema_name} message on "
                       f"{channel.topic} at session time {_seconds(log_time)}: {exc}")
                raise TraceError(msg) from None
            yield message, log_time
        if skipped or self._index.channel_counts is None:
            return
        for cid, count in seen.items():
            expected = self._index.channel_counts.get(cid, 0)
            if count != expected:
                self._problem(f"{self.mcap_path}: topic {wanted[cid].topic} has {count} "
                              f"readable messages, the summary counts {expected}",
                              f"{expected - count} message(s) missing")


# -- bag metadata (YAML and JSON documents) ---------------------------------------------------

def _read_metadata(metadata_path: Path) -> dict[str, Node]:
    """``rosbag2_bagfile_information`` of metadata.yaml; any defect is one line."""
    try:
        raw = metadata_path.read_bytes()
    except OSError as exc:
        msg = f"{metadata_path}: cannot read: {exc.strerror or exc}"
        raise TraceError(msg) from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        msg = f"{metadata_path}: not UTF-8 text (byte {exc.start}); the trace metadata is damaged"
        raise TraceError(msg) from None
    try:  # the project's loader: YAML 1.2, bounded, duplicate keys refused
        document = schema.load_yaml_text(text, str(metadata_path), TraceError)
    except TraceError as exc:
        raise TraceError(f"{exc}; the trace metadata is damaged") from None
    information = document.get("rosbag2_bagfile_information") if isinstance(
        document, dict) else None
    if not isinstance(information, dict):
        msg = (f"{metadata_path}: not rosbag2 metadata (no 'rosbag2_bagfile_information' "
               "mapping)")
        raise TraceError(msg)
    return information


def _mcap_path(path: Path, information: dict[str, Node]) -> Path:
    """The bag's one MCAP file, as metadata.yaml names it."""
    files = information.get("relative_file_paths")
    if not isinstance(files, list) or len(files) != 1 or not isinstance(files[0], str):
        msg = (f"{path / 'metadata.yaml'}: relative_file_paths must name one .mcap "
               f"file, got {files!r}")
        raise TraceError(msg)
    mcap = path / files[0]
    if not mcap.is_file():
        msg = f"{mcap}: the trace's MCAP file is missing"
        raise TraceError(msg)
    return mcap


def _embedded_metadata(path: Path, mcap_path: Path, index: McapIndex) -> dict[str, Node]:
    """The copy of metadata.yaml the writer keeps in the MCAP (when metadata.yaml is lost)."""
    serialized = index.metadata.get("rosbag2", {}).get("serialized_metadata")
    if serialized is None:
        msg = (f"{path}: not a trace (no metadata.yaml, and {mcap_path.name} has no "
               "rosbag2 metadata record)")
        raise TraceError(msg)
    information: object = None
    try:
        information = schema.load_yaml_text(serialized, str(mcap_path), TraceError)
    except TraceError:
        pass
    if not isinstance(information, dict):
        msg = f"{mcap_path}: the embedded rosbag2 metadata is not a YAML mapping"
        raise TraceError(msg)
    return information


def _json_entry(path: Path, custom: dict[str, Node], key: str) -> dict[str, Node]:
    """A JSON object kept as custom data of the bag (provenance, layout)."""
    text = custom.get(key)
    if text is None:
        msg = f"{path}: not a fibril_sim trace (bag metadata has no {key!r} custom data)"
        raise TraceError(msg)
    try:
        if not isinstance(text, (str, bytes, bytearray)):  # (json.loads's own words)
            raise TypeError(f"the JSON object must be str, bytes or bytearray, not "
                            f"{type(text).__name__}")
        value = json.loads(text)
    except (TypeError, ValueError) as exc:
        msg = f"{path}: custom data {key!r} is not valid JSON: {exc}"
        raise TraceError(msg) from None
    if not isinstance(value, dict):
        msg = f"{path}: custom data {key!r} is not a JSON object"
        raise TraceError(msg)
    return value


def _topic_digests(information: dict[str, Node]) -> dict[str, str]:
    """Per topic: the type description hash the bag's metadata gives for it."""
    digests = {}
    entries = information.get("topics_with_message_count")
    for entry in entries if isinstance(entries, list) else []:
        topic = entry.get("topic_metadata") if isinstance(entry, dict) else None
        if isinstance(topic, dict) and isinstance(topic.get("type_description_hash"), str):
            digests[str(topic.get("name"))] = topic["type_description_hash"]
    return digests
