"""Batch serialization of trace records into MCAP message records (the writer's worker).

Records are grouped by message shape (what fixes the byte layout: a device's ids, frame and
component names, the state's array sizes, an endpoint's names, ...); each group becomes one
block of rows of its ``cdr.Layout``, the MCAP message record header included. A SampleBlock
(see ``sample_block``) gives a device's samples as columns already: its rows are made from them
without record objects.
"""

from __future__ import annotations

import functools
import json
import operator
import struct
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
import numpy.typing as npt

from ..records import (
    ActuatorApplication,
    DeviceOutput,
    EpisodeStart,
    FrameTiming,
    IngressRecord,
    StateSnapshot,
)
from ..sample_block import OTHER, STATE, STATE_FIELDS, DeviceColumns, SampleBlock
from . import msgtypes
from .cdr import Layout
from .mcap_file import MESSAGE_HEADER
from .topics import (
    EPISODES_TOPIC,
    FRAME_TIMING_TOPIC,
    INPUTS_TOPIC,
    STATE_TOPIC,
    actuator_topic,
    device_topic,
)

__all__ = ["Batch", "Columns", "Encoder", "Failures"]

#: What fixes a record's message layout and channel: its type first, then strings and sizes.
ShapeKey = tuple[Any, ...]
#: A message layout's columns: field name -> one value per record (arrays or lists).
Columns = dict[str, npt.ArrayLike]
#: Records to serialize, of any type (the encoder checks them: a misfit is a failure).
Batch = list[Any]
#: Records that did not fit their message type, with the error.
Failures = list[tuple[object, Exception]]


@dataclass(slots=True)
class _Shape:
    """One message shape: its layout (MCAP record header included) and its channel."""

    layout: Layout
    topic: str
    msgtype: str
    fill: Callable[[Batch], Columns]  # (records of the shape) -> columns
    channel: int = 0
    label: str = ""  # what its records are counted as: the device id, else the record type


class ShapeCache:
    """The message shapes met so far, least recently used first, bounded in count and in
    template bytes: records whose strings vary (rejected inputs carry client-chosen ids and
    reasons) cannot grow it without end. A shape evicted and met again is made again (the same
    layout, the same channel)."""

    def __init__(self, limit: int = 1024, budget: int = 64 << 20) -> None:
        self.limit = limit  # shapes kept at most
        self.budget = budget  # template bytes kept at most (a shape's row size)
        self.size = 0  # template bytes kept now
        self._shapes: dict[ShapeKey, _Shape] = {}

    def __len__(self) -> int:
        return len(self._shapes)

    def get(self, key: ShapeKey) -> _Shape | None:
        shape = self._shapes.pop(key, None)
        if shape is not None:
            self._shapes[key] = shape  # the most recently used is last
        return shape

    def add(self, key: ShapeKey, shape: _Shape) -> None:
        self._shapes[key] = shape
        self.size += shape.layout.size
        while len(self._shapes) > 1 and (len(self._shapes) > self.limit
                                         or self.size > self.budget):
            oldest = next(iter(self._shapes))
            self.size -= self._shapes.pop(oldest).layout.size


_DEVICE_FIELDS = {name: operator.itemgetter(index) for name, index in (
    ("log", 7), ("acquisition", 6), ("acquisition_episode_time_ns", 4),
    ("delivery_episode_time_ns", 5), ("episode", 0))}
_DEVICE_VALUES = operator.itemgetter(8)


def _device_columns(recs: list[DeviceOutput]) -> Columns:
    count = len(recs)
    cols: Columns = {name: np.fromiter(map(get, recs), dtype=np.int64, count=count)
                            for name, get in _DEVICE_FIELDS.items()}
    cols["stamp"] = cols["log"]
    values = list(map(_DEVICE_VALUES, recs))
    cols["values"] = (np.concatenate(values).reshape(count, -1)
                      if type(values[0]) is np.ndarray and values[0].ndim == 1 else values)
    return cols


def _state_columns(recs: list[StateSnapshot]) -> Columns:
    cols: Columns = {"log": [r.session_time_ns for r in recs]}
    cols["stamp"] = cols["log"]
    cols["episode"] = [r.episode for r in recs]
    cols["tick"] = [r.tick for r in recs]
    cols["episode_time_ns"] = [r.time_ns for r in recs]
    for name in ("qpos", "qvel", "act", "ctrl", "actuator_force", "sensordata", "xpos", "xquat"):
        cols[name] = [getattr(r, name) for r in recs]
    return cols


def _actuator_columns(recs: list[ActuatorApplication]) -> Columns:
    cols: Columns = {"log": [r.session_time_ns for r in recs]}
    cols["stamp"] = cols["log"]
    cols["episode"] = [r.episode for r in recs]
    cols["tick"] = [r.tick for r in recs]
    for name in ("commanded", "released", "applied"):
        cols[name] = [float(getattr(r, name)) for r in recs]
    return cols


def _ingress_columns(recs: list[IngressRecord]) -> Columns:
    cols: Columns = {"log": [r.session_time_ns for r in recs]}
    cols["stamp"] = cols["log"]
    for name in ("episode", "source_sequence", "commit_tick", "acceptance_sequence"):
        cols[name] = [getattr(r, name) for r in recs]
    for name in ("source_id", "payload_type", "payload_json", "reject_reason"):
        cols[name] = [getattr(r, name).encode() for r in recs]
    cols["accepted"] = [bool(r.accepted) for r in recs]
    return cols


def _timing_columns(recs: list[FrameTiming]) -> Columns:
    cols: Columns = {"log": [r.session_time_ns for r in recs]}
    cols["stamp"] = cols["log"]
    for name in ("episode", "tick", "episode_time_ns", "session_time_ns"):
        cols[name] = [getattr(r, name) for r in recs]
    for name in ("wall_step_time", "real_time_factor"):
        cols[name] = [float(getattr(r, name)) for r in recs]
    return cols


def _episode_text(record: EpisodeStart) -> bytes:
    """An episode start as the JSON text of a std_msgs/String (rare: one per episode)."""
    return json.dumps({"episode": record.episode, "seed": record.seed,
                       "keyframe": record.keyframe, "session_time_ns": record.session_time_ns},
                      sort_keys=True).encode()


def _episode_columns(recs: list[EpisodeStart]) -> Columns:
    return {"log": [r.session_time_ns for r in recs], "data": [_episode_text(r) for r in recs]}


def _shape_key(record: Any) -> ShapeKey:
    """What fixes a record's message layout (strings, array lengths) and channel."""
    kind = type(record)
    if kind is DeviceOutput:
        values = record[8]
        size = values.size if type(values) is np.ndarray else len(values)
        return (kind, record[1], record[10], record[2], tuple(record[9]), size)
    if kind is StateSnapshot:
        r = record
        return (kind, r.qpos.size, r.qvel.size, r.act.size, r.ctrl.size, r.actuator_force.size,
                r.sensordata.size, r.xpos.size, r.xquat.size)
    if kind is ActuatorApplication:
        return (kind, record.endpoint, record.actuator, record.mode)
    if kind is IngressRecord:  # its strings come from clients: their lengths only
        return (kind, len(record.source_id.encode()), len(record.payload_type.encode()),
                len(record.payload_json.encode()), len(record.reject_reason.encode()))
    if kind is EpisodeStart:
        return (kind, len(_episode_text(record)))
    return (kind,)


def _new_layout() -> Layout:
    layout = Layout(prefix=MESSAGE_HEADER)
    layout.prefix_field("sequence", "<u4", 11).prefix_field("log", "<u8", 15)
    return layout.prefix_field("publish", "<u8", 23)


def _make_shape(key: ShapeKey) -> _Shape:
    kind = key[0]
    if kind is EpisodeStart:  # std_msgs/String: no stamp
        layout = _new_layout().text("data", key[1])
        return _Shape(layout, EPISODES_TOPIC, "std_msgs/msg/String", _episode_columns)
    layout = _new_layout().time("stamp")
    if kind is DeviceOutput:
        _, device_id, frame_id, sample_type, names, count = key
        layout.string(frame_id).time("acquisition")
        layout.field("acquisition_episode_time_ns", "<i8").field("delivery_episode_time_ns", "<i8")
        layout.field("episode", "<u4").string(device_id).string(sample_type)
        layout.floats("values", count).strings(names)
        return _Shape(layout, device_topic(device_id), msgtypes.DEVICE_SAMPLE, _device_columns)
    if kind is StateSnapshot:
        layout.field("episode", "<u4").field("tick", "<i8").field("episode_time_ns", "<i8")
        for name, count in zip(("qpos", "qvel", "act", "ctrl", "actuator_force", "sensordata",
                                "xpos", "xquat"), key[1:], strict=True):
            layout.floats(name, count)
        return _Shape(layout, STATE_TOPIC, msgtypes.STATE_SNAPSHOT, _state_columns)
    if kind is ActuatorApplication:
        _, endpoint, actuator, mode = key
        layout.field("episode", "<u4").field("tick", "<i8")
        layout.string(endpoint).string(actuator).string(mode)
        layout.field("commanded", "<f8").field("released", "<f8").field("applied", "<f8")
        return _Shape(layout, actuator_topic(endpoint), msgtypes.ACTUATOR_APPLICATION,
                      _actuator_columns)
    if kind is IngressRecord:
        _, source_size, type_size, payload_size, reason_size = key
        layout.field("episode", "<u4").text("source_id", source_size)
        layout.field("source_sequence", "<u8").text("payload_type", type_size)
        layout.text("payload_json", payload_size)
        layout.field("commit_tick", "<i8").field("acceptance_sequence", "<u8")
        layout.field("accepted", "u1").text("reject_reason", reason_size)
        return _Shape(layout, INPUTS_TOPIC, msgtypes.EXTERNAL_INPUT, _ingress_columns)
    layout.field("episode", "<u4").field("tick", "<u8").field("episode_time_ns", "<i8")
    layout.field("session_time_ns", "<i8")
    layout.field("wall_step_time", "<f8").field("real_time_factor", "<f8")
    return _Shape(layout, FRAME_TIMING_TOPIC, msgtypes.FRAME_TIMING, _timing_columns)


def _sample_columns(block: SampleBlock, spec: DeviceColumns, ticks: list[int],
                    values: list[np.ndarray] | np.ndarray) -> Columns | None:
    """A device's samples of one block as the columns of its message layout; None unless
    the values are 1-D float arrays of one size (or a 2-D float array, a row each)."""
    if type(values) is np.ndarray:
        if values.ndim != 2 or values.dtype.kind not in "fiu":
            return None
        stacked = values.reshape(-1)
    else:
        try:
            if set(map(type, values)) != {np.ndarray} or len(set(map(len, values))) != 1:
                return None
            stacked = np.concatenate(values)
        except (TypeError, ValueError):  # 0-d arrays
            return None
        if stacked.ndim != 1:
            return None
    acquired = np.array(ticks, dtype=np.int64)
    size = len(values[0])
    dt = block.timestep_ns
    acquisition = acquired * dt
    delivery = (acquired + spec.latency_ticks) * dt
    log = delivery + block.session_offset_ns
    count = acquired.size
    return {"log": log, "stamp": log, "acquisition": acquisition + block.session_offset_ns,
            "acquisition_episode_time_ns": acquisition, "delivery_episode_time_ns": delivery,
            "episode": np.full(count, block.episode, dtype=np.int64),
            "values": stacked.reshape(count, size)}


def _samples(block: SampleBlock, spec: DeviceColumns, ticks: list[int],
             values: list[np.ndarray] | np.ndarray) -> list[DeviceOutput]:
    """A device's samples of one block as the DeviceOutputs the instance would have made."""
    dt = block.timestep_ns
    offset = block.session_offset_ns
    return [DeviceOutput(block.episode, spec.device_id, spec.sample_type, tick, tick * dt,
                         (tick + spec.latency_ticks) * dt, offset + tick * dt,
                         offset + (tick + spec.latency_ticks) * dt, value,
                         spec.component_names, spec.frame_id)
            for tick, value in zip(ticks, values, strict=True)]


def _state_columns_of(block: SampleBlock) -> Columns:
    """A block's state rows as the columns of the StateSnapshot layout."""
    states = block.states
    assert states is not None
    ticks = states.ticks
    time = ticks * block.timestep_ns
    log = time + block.session_offset_ns
    columns: Columns = {"log": log, "stamp": log, "tick": ticks, "episode_time_ns": time,
                               "episode": np.full(ticks.shape[0], block.episode, np.int64)}
    at = 0
    for name, size in zip(STATE_FIELDS, states.sizes, strict=True):
        columns[name] = states.rows[:, at:at + size]
        at += size
    return columns


def state_records(block: SampleBlock) -> list[StateSnapshot]:
    """A block's state rows as the StateSnapshots the instance would have made."""
    columns = cast("dict[str, np.ndarray]", _state_columns_of(block))  # (all arrays)
    shapes = {"xpos": (-1, 3), "xquat": (-1, 4)}  # as the instance makes them
    return [StateSnapshot(block.episode, tick, time, log,
                          *(columns[name][n].reshape(shapes.get(name, -1))
                            for name in STATE_FIELDS))
            for n, (tick, time, log) in enumerate(zip(
                columns["tick"].tolist(), columns["episode_time_ns"].tolist(),
                columns["log"].tolist(), strict=True))]


#: One shape's message records: (bytes, channel, log time and offset of each message).
Rows = tuple[bytes, np.ndarray, np.ndarray, np.ndarray]
#: Rows of a batch: (record blocks, channels, log times, offsets, failures).
Encoded = tuple[list[bytes], np.ndarray, np.ndarray, np.ndarray, Failures]


def joined(steps: Iterable[Rows], failures: Failures,
           pause: Callable[[], None] | None = None) -> Encoded:
    """The Rows of a batch's steps as one Encoded (offsets from the first block's start);
    ``pause()`` after each step."""
    blocks: list[bytes] = []
    channels, times, offsets = [], [], []
    at = 0
    for block, channel, time, offset in steps:
        blocks.append(block)
        channels.append(channel)
        times.append(time)
        offsets.append(offset + at if at else offset)
        at += len(block)
        if pause is not None:
            pause()
    if not blocks:
        return [], np.empty(0, np.int64), np.empty(0, np.uint64), np.empty(0, np.uint64), \
            failures
    if len(blocks) == 1:
        return blocks, channels[0], times[0], offsets[0], failures
    return (blocks, np.concatenate(channels), np.concatenate(times), np.concatenate(offsets),
            failures)


#: (shape key, columns, positions, records) of one group of messages of one shape.
_Group = tuple[ShapeKey | None, Columns | None, Sequence[int] | npt.NDArray[np.intp],
               Callable[[], Batch] | None]


class Encoder:
    """Serializes batches of records into MCAP message records (the trace writer's: one thread
    at a time, under its lock)."""

    def __init__(self) -> None:
        self.shapes = ShapeCache()
        self.channels: dict[str, int] = {}  # topic -> channel id
        self.written = 0  # records taken so far (the next message's sequence)
        self.msgtypes: dict[int, str] = {}  # channel id -> message type
        self.new_channels: list[tuple[int, str, str]] = []  # (id, topic, msgtype) to announce
        self.counts: dict[str, int] = {}  # records laid out, by device id or record type

    def channel(self, topic: str, msgtype: str) -> int:
        channel = self.channels.get(topic)
        if channel is None:
            channel = self.channels[topic] = len(self.channels) + 1
            self.msgtypes[channel] = msgtype
            self.new_channels.append((channel, topic, msgtype))
        return channel

    def encode(self, batch: Batch) -> Encoded:
        """(record blocks, channel, log time and offset of each message, failures)

        Messages of one shape are laid out together (no per-record copying); each message's
        ``sequence`` is its position in the trace's write order, which readers use to restore
        that order among messages of equal log time. A record that does not fit its message
        type is left out and reported in failures.
        """
        steps, failures = self.encode_steps(batch)
        return joined(steps, failures)

    def encode_steps(self, batch: Batch) -> tuple[Iterator[Rows], Failures]:
        """What ``encode`` does, one shape per step (an iterator of Rows), and the list the
        failures are added to as the steps run. The batch's sequence numbers are taken at
        once: later batches may be encoded before this one's steps have all run."""
        failures: Failures = []
        groups = self._groups(batch, range(len(batch)), failures)
        return self._steps(batch, [(None, None, positions, None)
                                   for positions in groups.values()], len(batch), failures), \
            failures

    def encode_block(self, block: SampleBlock) -> Encoded:
        """What ``encode`` returns for the records of ``block`` in its order: each device's
        samples are laid out from its columns (no record objects); the rest as by
        ``encode``."""
        steps, failures = self.encode_block_steps(block)
        return joined(steps, failures)

    def encode_block_steps(self, block: SampleBlock
                           ) -> tuple[Iterator[Rows], Failures]:
        """``encode_block`` one shape per step (see ``encode_steps``)."""
        count = len(block.order)
        failures: Failures = []
        if not count:
            return iter(()), failures
        order = np.array(block.order, dtype=np.int64)
        batch: Batch = []
        groups: list[_Group] = []
        slow: list[int] = []  # positions of records laid out record by record
        if block.others:
            batch = [None] * count
            where = np.flatnonzero(order == OTHER).tolist()
            for position, record in zip(where, block.others, strict=True):
                batch[position] = record
            slow = where
        for d, ticks in enumerate(block.ticks):
            if not ticks:
                continue
            positions = np.flatnonzero(order == d)
            values = block.values[d]
            spec = block.devices[d]
            columns = _sample_columns(block, spec, ticks, values)
            if columns is None:  # values of unusual shapes: as records
                if not batch:
                    batch = [None] * count
                for position, record in zip(positions.tolist(), _samples(block, spec, ticks,
                                                                          values), strict=True):
                    batch[position] = record
                slow.extend(positions.tolist())
                continue
            key = (DeviceOutput, spec.device_id, spec.frame_id, spec.sample_type,
                   tuple(spec.component_names), len(values[0]))
            groups.append((key, columns, positions,
                           functools.partial(_samples, block, spec, ticks, values)))
        if block.states is not None and len(block.states):
            groups.append(((StateSnapshot, *block.states.sizes), _state_columns_of(block),
                           np.flatnonzero(order == STATE),
                           functools.partial(state_records, block)))
        if slow:
            slow.sort()
            groups.extend((None, None, positions, None)
                          for positions in self._groups(batch, slow, failures).values())
        return self._steps(batch, groups, count, failures), failures

    def _groups(self, batch: Batch, positions: Iterable[int],
                failures: Failures) -> dict[ShapeKey, list[int]]:
        """Positions of the records of each shape, record by record (any mix of records)."""
        groups: dict[ShapeKey, list[int]] = {}
        get = groups.get
        device = DeviceOutput
        ndarray = np.ndarray
        for i in positions:
            record = batch[i]
            try:
                if type(record) is device:  # the bulk: a cheap key, valid within this batch
                    values = record[8]
                    key = (record[1], record[10], record[2], id(record[9]),
                           values.size if type(values) is ndarray else len(values))
                else:
                    key = _shape_key(record)
            except Exception as exc:  # noqa: BLE001 - a malformed record is reported
                failures.append((record, exc))
                continue
            members = get(key)
            if members is None:
                groups[key] = [i]
            else:
                members.append(i)
        return groups

    def _steps(self, batch: Batch, groups: list[_Group], count: int,
               failures: Failures) -> Iterator[Rows]:
        """The message records of ``count`` records in groups of one shape each: (shape key,
        columns, positions, records) with the columns ready, or (None, None, positions, None)
        of records in ``batch``; a step per group. The sequence numbers are taken now."""
        first = self.written
        self.written += count
        return self._group_rows(batch, groups, first, failures)

    def _group_rows(self, batch: Batch, groups: list[_Group], first: int,
                    failures: Failures) -> Iterator[Rows]:
        """A group of columns that does not fit is laid out again record by record
        (``records()`` makes them), so failures name records either way."""
        for key, columns, positions, records in groups:
            recs: Batch | None = None
            if columns is None:
                if len(positions) == 1:
                    recs = [batch[positions[0]]]
                else:  # C speed: no Python per record
                    recs = list(operator.itemgetter(*positions)(batch))
                key = _shape_key(recs[0])
            assert key is not None  # (a group with columns has its key)
            shape = self.shapes.get(key)
            if shape is None:
                shape = self._shape(key)
                self.shapes.add(key, shape)
            sequence = np.asarray(positions, dtype=np.int64) + first
            try:
                if columns is None:
                    assert recs is not None  # (made above for a group without columns)
                    columns = shape.fill(recs)
                rows = self._rows(shape, columns, len(positions), sequence)
            except (OverflowError, ValueError, TypeError, AttributeError) as exc:
                if recs is None:
                    assert records is not None  # (a group with columns can make its records)
                    recs = records()
                rows = self._rows_one_by_one(shape, recs, sequence, failures, exc)
                if not rows.shape[0]:
                    continue
            rows_count, size = rows.shape
            self.counts[shape.label] = self.counts.get(shape.label, 0) + rows_count
            yield (rows.tobytes(), np.full(rows_count, shape.channel, dtype=np.int64),
                   rows[:, 15:23].copy().view("<u8").reshape(rows_count),
                   np.arange(0, rows_count * size, size, dtype=np.uint64))

    def _shape(self, key: ShapeKey) -> _Shape:
        shape = _make_shape(key)
        shape.channel = self.channel(shape.topic, shape.msgtype)
        shape.label = key[1] if key[0] is DeviceOutput else key[0].__name__
        layout = shape.layout  # the constant part of the MCAP message record header
        layout.patch(0, struct.pack("<BQH", 5, layout.size - 9, shape.channel))
        return shape

    def _rows(self, shape: _Shape, columns: Columns, count: int,
              sequence: np.ndarray) -> np.ndarray:
        columns["sequence"] = (sequence & 0xFFFFFFFF).astype(np.uint32)
        columns["publish"] = columns["log"]
        return shape.layout.encode(columns, count)

    def _rows_one_by_one(self, shape: _Shape, recs: Batch, sequence: np.ndarray,
                         failures: Failures, first: Exception) -> np.ndarray:
        good = []
        before = len(failures)
        for record, number in zip(recs, sequence, strict=True):
            try:
                good.append(self._rows(shape, shape.fill([record]), 1, np.array([number])))
            except (OverflowError, ValueError, TypeError, AttributeError) as exc:
                failures.append((record, exc))
        if len(failures) == before:
            failures.append((recs[0], first))
        if not good:
            return np.empty((0, shape.layout.size), np.uint8)
        return np.concatenate(good)
