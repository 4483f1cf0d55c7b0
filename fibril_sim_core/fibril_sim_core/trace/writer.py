"""Trace writer: the simulation's semantic records as a rosbag2 bag (MCAP storage, zstd chunks).

One format serves every consumer: ``ros2 bag play``, Foxglove, ``mcap`` tools, rosbags and the
calibration reader all read it, and writing it needs no ROS installation.

Speed. A SimulationInstance hands its records over in ``SampleBlock``s (``write_block``): the
samples only the trace hears arrive as columns (acquisition ticks and value arrays per device,
no record objects), laid out by numpy in the caller's thread at hand-over (``_cdr.Layout``:
every message shape is a byte template, a block is a few column assignments per device), so
the worker holding the GIL never makes the stepping thread wait for it. The worker compresses
whole chunks with zstd and writes them, which like MuJoCo's stepping releases the GIL. Records
written one by one (``write``, ``write_many``) only go to a queue (well under a microsecond)
and the worker serializes them in batches, in write order with the blocks, or, in a live
real-time session, the host does in its idle time between frames (``serialize_until``: then
no Python of the worker's holds the GIL when stepping resumes). Payloads are byte
for byte what rosbags' serializer produces (tested for every message type, and the columns
against the record path).

Robustness. Python raises ``KeyboardInterrupt`` only in the main thread, so the worker, which
alone touches the files, is never torn in the middle of a record. ``metadata.yaml`` (with the
provenance and layout) is written when the trace is created; a record reaches the disk in a
complete chunk within ``FLUSH_INTERVAL`` + ``_POLL`` seconds (0.75 s; up to ``_HELP_WINDOW``
more when a real-time host stops offering its idle time), so a SIGKILLed run
leaves a trace readable up to its last chunk (``TraceReader(..., salvage=True)``). ``close`` drains the queue, writes the MCAP
summary and the final ``metadata.yaml``, and keeps waiting for that even if interrupted again.
A writer that is never closed is closed at interpreter exit.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import threading
import time
import weakref
from collections import deque
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import numpy as np
import yaml

from ..errors import TraceError
from ..records import (
    ActuatorApplication,
    DeviceOutput,
    EpisodeStart,
    FrameTiming,
    IngressRecord,
    StateSnapshot,
)
from ..sample_block import SampleBlock
from . import _msgtypes
from ._encoder import Encoded, Encoder, Failures, Rows, joined
from ._mcap import McapFile
from ._topics import (
    ACTUATOR_TOPIC_PREFIX,
    DEVICE_TOPIC_PREFIX,
    EPISODES_TOPIC,
    FRAME_TIMING_TOPIC,
    INPUTS_TOPIC,
    STATE_TOPIC,
    actuator_topic,
    device_topic,
)

if TYPE_CHECKING:
    from collections.abc import Iterator
    from types import TracebackType

    from ..records import TraceRecord

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


#: Keys of the bag's ``custom_data`` (metadata.yaml and the MCAP metadata record); JSON values.
PROVENANCE_KEY: Final = "fibril_sim.provenance"
LAYOUT_KEY: Final = "fibril_sim.layout"

#: rosbag2 metadata version 8 is the newest that Jazzy's ``ros2 bag`` reads.
BAG_VERSION: Final = 8

#: Uncompressed bytes after which a chunk is written out.
CHUNK_BYTES: Final = 1 << 20
#: Age in seconds after which a started chunk is written out anyway (checked every ``_POLL``
#: seconds: a SIGKILL loses at most the last 0.75 s of records).
FLUSH_INTERVAL: Final = 0.5

_POLL: Final = 0.25  # seconds between the worker's looks at the queue (bigger batches: cheaper)
_BATCH: Final = 32768  # records serialized at once
_TRICKLE: Final = 4096  # queued records below which the worker lets the GIL go (see _pause)
_YIELD: Final = 50e-6  # seconds the worker sleeps between groups in a trickle (see _pause)
# A producer that offered its idle time this recently serializes the trickle itself (see
# TraceWriter.serialize_until); the worker then only compresses and writes.
_HELP_WINDOW: Final = 0.2
_IDLE_MARGIN: Final = 0.15e-3  # idle seconds left over after a step of mean cost
_IDLE_RECORDS: Final = 64  # queued records worth serializing in idle time ...
_IDLE_AGE: Final = 0.1  # ... or seconds since the last time
_MAX_BACKLOG: Final = 100_000  # queued records before write() waits for the worker
_LAY_OUT_HERE: Final = 1024  # records of a SampleBlock that write_block lays out itself
_CHECK_EVERY: Final = 1024  # write() looks at failures and backlog every this many records
_KINDS: Final = (IngressRecord, DeviceOutput, ActuatorApplication, StateSnapshot, FrameTiming,
                 EpisodeStart)
_KIND_SET: Final = frozenset(_KINDS)


def _library() -> str:
    try:
        return f"fibril_sim_core-{version('fibril_sim_core')}"
    except PackageNotFoundError:
        return "fibril_sim_core"


# -- the worker -------------------------------------------------------------------------------


@dataclass(slots=True)
class _Shared:
    """What the producer and the worker share; kept apart from the writer so it can be GC'd."""

    # Records, SampleBlocks and _Encoded (each use tells them apart by type()).
    pending: deque[Any] = field(default_factory=deque)
    # Batches the producer serializes in its idle time (``TraceWriter.serialize_until``),
    # _Open, taken from the front of ``pending``: they go before everything in it.
    ready: deque[_Open] = field(default_factory=deque)
    helped: float = -math.inf  # time.monotonic() of the producer's last idle-time offer
    # The encoder, shared: SampleBlocks are laid out by the producer when nothing raw waits
    # (no GIL ping-pong with the worker, see TraceWriter.write_block), the rest by the
    # worker; ``lock`` guards it and the taking of queued items.
    encoder: Encoder = field(default_factory=Encoder)
    lock: threading.Lock = field(default_factory=threading.Lock)
    queued_raw: int = 0  # records and SampleBlocks queued unencoded (only the producer adds)
    taken_raw: int = 0  # of those, encoded by the worker (only the worker adds)
    blocked: int = 0  # records queued in SampleBlocks (only the producer adds)
    unblocked: int = 0  # of those, taken by the worker (only the worker adds)
    wake: threading.Event = field(default_factory=threading.Event)
    closing: bool = False
    failure: BaseException | None = None  # the worker stopped: sticky
    rejected: TraceError | None = None  # records left out (did not fit): reported once
    flushed: int = 0  # flush requests served
    flush_requests: int = 0
    flush_done: threading.Condition = field(default_factory=threading.Condition)


@dataclass(slots=True)
class _Encoded:
    """A SampleBlock already laid out (``Encoder.encode_block``'s result)."""

    result: Encoded
    records: int


_QUEUED_BLOCKS: Final = (SampleBlock, _Encoded)  # queue items that are not single records


@dataclass(slots=True)
class _Bag:
    """Files and metadata of the bag being written."""

    path: Path
    mcap: McapFile
    custom_data: dict[str, str]
    typestore: Any
    schemas: dict[str, int] = field(default_factory=dict)  # message type -> schema id


def _metadata(bag: _Bag, encoder: Encoder | None, counts: dict[int, int],
              start: int | None, end: int | None) -> dict[str, Any]:
    """rosbag2 metadata (version 8), as ``ros2 bag`` and rosbags write it."""
    start = start or 0
    duration = max(0, (end or 0) - start)
    total = sum(counts.values())
    name = bag.mcap.path.name
    topics = []
    if encoder is not None:
        for topic, channel in encoder.channels.items():
            msgtype = encoder.msgtypes[channel]
            topics.append({
                "topic_metadata": {
                    "name": topic, "type": msgtype, "serialization_format": "cdr",
                    "offered_qos_profiles": "",
                    "type_description_hash": bag.typestore.hash_rihs01(msgtype)},
                "message_count": counts.get(channel, 0)})
    return {
        "version": BAG_VERSION,
        "storage_identifier": "mcap",
        "relative_file_paths": [name],
        "duration": {"nanoseconds": duration},
        "starting_time": {"nanoseconds_since_epoch": start},
        "message_count": total,
        "topics_with_message_count": topics,
        "compression_format": "",
        "compression_mode": "",
        "files": [{"path": name, "starting_time": {"nanoseconds_since_epoch": start},
                   "duration": {"nanoseconds": duration}, "message_count": total}],
        "custom_data": bag.custom_data,
        "ros_distro": "rosbags",
    }


_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)  # libyaml when available: 10x faster


def _dump_metadata(information: dict[str, Any]) -> str:
    """The rosbag2 metadata as YAML (block style, sorted keys, like ros2 bag's)."""
    return yaml.dump(information, Dumper=_DUMPER, default_flow_style=False, sort_keys=True)


def _write_metadata_yaml(path: Path, serialized: str) -> None:
    """Replace ``metadata.yaml`` atomically (a reader never sees half a file)."""
    body = "".join("  " + line if line.strip() else line
                   for line in serialized.splitlines(keepends=True))
    tmp = path / "metadata.yaml.tmp"
    tmp.write_text("rosbag2_bagfile_information:\n" + body, encoding="utf-8")
    os.replace(tmp, path / "metadata.yaml")


def _pause() -> None:
    """Let the stepping thread in between two groups of records being encoded.

    The worker's Python holds the GIL; a thread that wants it back (the stepping thread after
    each ``mj_step``) waits until it is let go or for the switch interval (5 ms). Encoding a
    quarter second of a real-time session's records at once held it up to 8 ms: that was the
    node's publish jitter. A short sleep lets a waiting thread in (``sleep(0)`` does not
    reliably: the worker takes the GIL back before the waiter wakes)."""
    time.sleep(_YIELD)


def _take(shared: _Shared, encoder: Encoder, limit: int = _BATCH
          ) -> tuple[Iterator[Rows], Failures, bool]:
    """Take the queue's first item, not an _Encoded, to serialize (the caller holds the
    lock): its steps (see ``Encoder.encode_steps``), their failures, and whether the queue was
    a real-time trickle. Records queued one by one are encoded in batches of up to ``limit``;
    a SampleBlock (the instance's columns) is joined with the blocks and records that follow
    it."""
    pending = shared.pending
    item = pending.popleft()
    if type(item) is SampleBlock:
        # Small ones (a runtime hands one over per frame, its FrameTiming written one by one
        # between them) are joined with the records between them: one lay-out per batch, not
        # one per frame.
        joined = [item]
        size = in_blocks = len(item)
        while pending and size < limit:
            following = pending[0]
            if type(following) is SampleBlock:
                if not item.joins(following):
                    break
                in_blocks += len(following)
            elif type(following) is _Encoded:
                break
            else:
                following = item.carrying(following)
            pending.popleft()
            joined.append(following)
            size += len(following)
        steps, failures = encoder.encode_block_steps(SampleBlock.join(joined))
        shared.taken_raw += len(joined)
        shared.unblocked += in_blocks
        return steps, failures, size < _TRICKLE
    # A short queue is a real-time session's trickle; a long one is a fast run's.
    trickle = len(pending) < _TRICKLE
    batch = [item]
    while pending and len(batch) < limit and type(pending[0]) not in _QUEUED_BLOCKS:
        batch.append(pending.popleft())
    steps, failures = encoder.encode_steps(batch)
    shared.taken_raw += len(batch)
    return steps, failures, trickle


@dataclass(slots=True)
class _Open:
    """A batch the producer serializes step by step in its idle time (see
    ``TraceWriter.serialize_until``); whoever takes it next runs the remaining steps."""

    steps: Iterator[Rows]
    failures: Failures
    done: list[Rows] = field(default_factory=list)
    finished: bool = False

    def step(self) -> bool:
        """Lay out the next shape; False when there was none left."""
        rows = next(self.steps, None)
        if rows is None:
            self.finished = True
            return False
        self.done.append(rows)
        return True


def _run_worker(bag: _Bag, shared: _Shared) -> None:
    """Own the bag: serialize queued records in batches, write chunks, finish on close."""
    encoder = shared.encoder
    pending = shared.pending
    ready = shared.ready
    lock = shared.lock
    parts: list[bytes] = []
    chunk_channels: list[np.ndarray] = []
    chunk_times: list[np.ndarray] = []
    chunk_offsets: list[np.ndarray] = []
    chunk_size = 0
    chunk_started = 0.0
    mcap = bag.mcap

    def write_chunk() -> None:
        nonlocal chunk_size
        with lock:
            announced = encoder.new_channels[:]
            encoder.new_channels.clear()
        for channel, topic, msgtype in announced:
            mcap.add_channel(channel, _schema_id(bag, msgtype), topic, "cdr",
                             {"offered_qos_profiles": ""})
        mcap.write_chunk(b"".join(parts), np.concatenate(chunk_channels),
                         np.concatenate(chunk_times), np.concatenate(chunk_offsets))
        parts.clear()
        chunk_channels.clear()
        chunk_times.clear()
        chunk_offsets.clear()
        chunk_size = 0

    try:
        while True:
            shared.wake.wait(_POLL)
            shared.wake.clear()
            closing = shared.closing
            requests = shared.flush_requests
            while pending or ready:
                with lock:
                    if ready:
                        open_batch = ready.popleft()
                        encoded = joined(itertools.chain(open_batch.done, open_batch.steps),
                                         open_batch.failures)
                    elif type(pending[0]) is _Encoded:  # laid out by the producer
                        item = pending.popleft()
                        shared.unblocked += item.records
                        encoded = item.result
                    elif (not closing
                          and requests == shared.flushed and len(pending) < _TRICKLE
                          and time.monotonic() - shared.helped < _HELP_WINDOW):
                        break  # the producer serializes them in its idle time
                    else:
                        steps, failures, trickle = _take(shared, encoder)
                        # in a trickle, the GIL is let go between shapes (see _pause)
                        encoded = joined(steps, failures, _pause if trickle else None)
                blocks, channels, times, offsets, failures = encoded
                if failures and shared.rejected is None:
                    record, exc = failures[0]
                    msg = (f"{bag.path}: cannot encode {type(record).__name__} as a message: "
                           f"{exc}; {len(failures)} record(s) left out of the trace")
                    shared.rejected = TraceError(msg)
                if not blocks:
                    continue
                if not chunk_size:
                    chunk_started = time.monotonic()
                parts.extend(blocks)
                chunk_channels.append(channels)
                chunk_times.append(times)
                chunk_offsets.append(offsets + chunk_size)
                chunk_size += sum(len(b) for b in blocks)
                if chunk_size >= CHUNK_BYTES:
                    write_chunk()
            if chunk_size and (closing or requests != shared.flushed
                               or time.monotonic() - chunk_started >= FLUSH_INTERVAL):
                write_chunk()
            if requests != shared.flushed:
                with shared.flush_done:
                    shared.flushed = requests
                    shared.flush_done.notify_all()
            if closing and not pending and not ready:
                break
        information = _metadata(bag, encoder, mcap.channel_counts, mcap.start_time,
                                mcap.end_time)
        serialized = _dump_metadata(information)
        mcap.finish({"rosbag2": {"serialized_metadata": serialized.strip()}})
        _write_metadata_yaml(bag.path, serialized)
    except BaseException as exc:  # reported to the caller by write() and close()
        shared.failure = exc
        pending.clear()  # nothing will take them any more
        ready.clear()
        try:
            mcap.abandon()
        except OSError:
            pass
    finally:
        with shared.flush_done:
            shared.flushed = shared.flush_requests = -1
            shared.flush_done.notify_all()


def _schema_id(bag: _Bag, msgtype: str) -> int:
    schema = bag.schemas.get(msgtype)
    if schema is None:
        schema = bag.schemas[msgtype] = len(bag.schemas) + 1
        text, _ = bag.typestore.generate_msgdef(msgtype, ros_version=2)
        bag.mcap.add_schema(schema, msgtype, "ros2msg", text.encode())
    return schema


def _stop_worker(shared: _Shared, thread: threading.Thread) -> None:
    """Ask the worker to finish the bag and wait for it, even through further Ctrl-C."""
    shared.closing = True
    shared.wake.set()
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
    ``/fibril/state`` can be interpreted without the model. Each message's log time is its
    session time (the delivery time for device samples); messages are stored in the order they
    were written. Connections are created on first use of a topic.

    ``write`` and ``close`` belong to one thread at a time (the simulation's owner thread).
    Records are serialized in the background: a record that does not fit its message type (an
    integer out of range) is left out, and the next ``write``, ``flush`` or ``close`` raises a
    ``TraceError`` naming it.
    """

    def __init__(self, path: Path | str, *, provenance: dict[str, Any],
                 layout: dict[str, Any]) -> None:
        self.path = Path(path)
        custom_data = {PROVENANCE_KEY: self._json("provenance", provenance),
                       LAYOUT_KEY: self._json("layout", layout)}
        self._prepare_directory()
        mcap_path = self.path / f"{self.path.name}.mcap"
        try:
            mcap = McapFile(mcap_path, profile="ros2", library=_library())
        except BaseException as exc:
            if not isinstance(exc, FileExistsError) and mcap_path.exists():  # made here
                mcap_path.unlink()
            if not isinstance(exc, OSError):
                raise
            msg = f"{self.path}: cannot create trace: {exc.strerror or exc}"
            raise TraceError(msg) from exc
        try:
            bag = _Bag(self.path, mcap, custom_data, _msgtypes.trace_typestore())
            # early, so a reader finds provenance and layout even after a SIGKILL
            _write_metadata_yaml(self.path, _dump_metadata(_metadata(bag, None, {}, None, None)))
        except BaseException as exc:
            # Not a trace yet (a signal while it is being created, a disk error): nothing is
            # left that would look like a started one.
            mcap.abandon()
            for leftover in (mcap_path, self.path / "metadata.yaml.tmp"):
                try:
                    leftover.unlink()
                except OSError:
                    pass
            if not isinstance(exc, OSError):
                raise
            msg = f"{self.path}: cannot create trace: {exc.strerror or exc}"
            raise TraceError(msg) from exc
        self._count = 0
        self._served = 0.0  # perf_counter() when serialize_until last started a batch
        self._step_cost = 0.3e-3  # seconds a step of serialize_until takes (running mean)
        self._stepped = time.perf_counter()  # when serialize_until last made a step
        self._closed = False
        self._shared = _Shared()
        self._pending = self._shared.pending
        # Daemon, so a forgotten writer never blocks interpreter exit; the finalizer below
        # (also run at exit) still finishes the bag properly before daemon threads stop.
        self._thread = threading.Thread(
            target=_run_worker, args=(bag, self._shared),
            name=f"fibril-trace-writer:{self.path.name}", daemon=True)
        self._thread.start()
        self._finalizer = weakref.finalize(self, _stop_worker, self._shared, self._thread)

    # -- public API ---------------------------------------------------------------------------

    @property
    def record_count(self) -> int:
        """Records accepted by ``write`` so far."""
        return self._count

    @property
    def counts(self) -> dict[str, int]:
        """Records in the trace by device id (samples) or record type (the others): all of
        them once ``close`` has returned, those serialized so far before."""
        with self._shared.lock:
            return dict(self._shared.encoder.counts)

    @property
    def closed(self) -> bool:
        """Whether ``close`` has been called."""
        return self._closed

    def write(self, record: TraceRecord) -> None:
        """Queue one record for the bag.

        Raises:
            TypeError: ``record`` is not one of the traced record types.
            TraceError: The writer is closed, an earlier record did not fit its message type,
                or the bag could not be written.
        """
        if self._closed:
            msg = f"{self.path}: trace writer is closed"
            raise TraceError(msg)
        if type(record) not in _KIND_SET:
            msg = f"{self.path}: cannot trace a {type(record).__name__}; expected one of " + (
                ", ".join(t.__name__ for t in _KINDS))
            raise TypeError(msg)
        self._pending.append(record)
        self._shared.queued_raw += 1
        self._count += 1
        if not self._count % _CHECK_EVERY:
            self._check()

    def write_many(self, records: list[TraceRecord]) -> None:
        """Queue records for the bag, in order (what ``write`` does for each of them)."""
        if self._closed:
            msg = f"{self.path}: trace writer is closed"
            raise TraceError(msg)
        kinds = set(map(type, records))
        if not kinds <= _KIND_SET:
            for record in records:  # the ones before the odd record are queued, as by write
                self.write(record)
            return
        before = self._count
        self._pending.extend(records)
        self._shared.queued_raw += len(records)
        self._count += len(records)
        if self._count // _CHECK_EVERY != before // _CHECK_EVERY:
            self._check()

    def write_block(self, block: SampleBlock) -> None:
        """Queue the records of a block (what ``write_many`` does for them as records): how
        a SimulationInstance hands over what it kept for the trace."""
        if self._closed:
            msg = f"{self.path}: trace writer is closed"
            raise TraceError(msg)
        if type(block) is not SampleBlock:
            msg = f"{self.path}: write_block takes a SampleBlock, got {type(block).__name__}"
            raise TypeError(msg)
        if not block.order:
            return
        others = block.others
        if others and not set(map(type, others)) <= _KIND_SET:
            odd = next(r for r in others if type(r) not in _KIND_SET)
            msg = f"{self.path}: cannot trace a {type(odd).__name__}; expected one of " + (
                ", ".join(t.__name__ for t in _KINDS))
            raise TypeError(msg)
        shared = self._shared
        if shared.failure is not None or shared.rejected is not None:
            self._raise_failure()
        pending = self._pending
        self._count += len(block)  # (queued below, by _lay_out even when interrupted)
        shared.blocked += len(block)
        if len(block) < _LAY_OUT_HERE:
            # Small blocks (a runtime hands one over per frame) are cheaper joined: the
            # worker's. Queued without the lock, which the worker holds while it encodes a
            # batch: a real-time frame must not wait for that (it did, 50-300 ms of jitter).
            pending.append(block)
            shared.queued_raw += 1
        else:
            with shared.lock:
                # Earlier records still queued go first: then the block is the worker's too.
                if shared.queued_raw != shared.taken_raw:
                    pending.append(block)
                    shared.queued_raw += 1
                else:
                    self._lay_out(block)
        if shared.blocked - shared.unblocked > _MAX_BACKLOG:  # the worker is behind: wait
            shared.wake.set()
            while shared.blocked - shared.unblocked > _MAX_BACKLOG // 2 and \
                    self._thread.is_alive():
                time.sleep(0.001)

    def _lay_out(self, block: SampleBlock) -> None:
        """Encode ``block`` here (the caller holds the lock) and queue the result. The worker
        only compresses and writes it: zstd and file writes release the GIL, so the stepping
        thread never waits for the worker's Python. Interrupted (Ctrl-C), the block is queued
        for the worker instead, so no record is lost or written twice."""
        shared = self._shared
        pending = self._pending
        encoder = shared.encoder
        before = encoder.written
        encoded: _Encoded | None = None
        try:
            encoded = _Encoded(encoder.encode_block(block), len(block))
            pending.append(encoded)
        except BaseException:
            if encoded is None or not pending or pending[-1] is not encoded:
                encoder.written = before  # its sequence numbers are still to be taken
                pending.append(block)
                shared.queued_raw += 1
            raise

    def serialize_until(self, deadline: float) -> None:
        """Serialize queued records here, in a paced producer's idle time, a message shape at
        a time while the next one still fits before ``deadline`` (``time.perf_counter()``);
        cheap when there is nothing to do.

        The live runtime's host calls it between real-time pieces. Then the worker only
        compresses and writes, which releases the GIL: its Python no longer holds the GIL
        when the stepping thread wants it back after ``mj_step`` (that was most of the live
        node's publish jitter, 2-3 ms at p99). A batch is started once ``_IDLE_RECORDS``
        records wait or ``_IDLE_AGE`` seconds after the last; a producer that stops offering
        (fast mode, paused, behind schedule) leaves the queue to the worker again within
        ``_HELP_WINDOW``. For a thread other than the main one (a Ctrl-C in the middle would
        lose the step's records)."""
        shared = self._shared
        shared.helped = time.monotonic()
        ready = shared.ready
        raw = shared.queued_raw - shared.taken_raw
        if not (raw or ready) or self._closed:
            return
        now = time.perf_counter()
        if not self._fits(deadline, now):
            return
        lock = shared.lock
        if not lock.acquire(blocking=False):  # the worker is at it
            return
        try:
            pending = self._pending
            while True:
                if ready and not ready[-1].finished:
                    open_batch = ready[-1]
                elif pending and type(pending[0]) is not _Encoded and (
                        raw >= _IDLE_RECORDS or now - self._served >= _IDLE_AGE):
                    steps, failures, _ = _take(shared, shared.encoder, _IDLE_RECORDS)
                    open_batch = _Open(steps, failures)
                    ready.append(open_batch)
                    self._served = now
                    raw = shared.queued_raw - shared.taken_raw
                else:
                    return
                if not open_batch.step():
                    continue
                end = time.perf_counter()
                self._step_cost += (min(end - now, 2e-3) - self._step_cost) * 0.2
                self._stepped = now = end
                if not self._fits(deadline, now):
                    return
        finally:
            lock.release()

    def _fits(self, deadline: float, now: float) -> bool:
        """Whether a step of serialize_until (its mean cost) fits before ``deadline``; at
        least every ``_IDLE_AGE`` one is tried anyway (the mean is learnt by trying)."""
        slack = deadline - now
        return slack >= self._step_cost + _IDLE_MARGIN or (
            slack > 0 and now - self._stepped >= _IDLE_AGE)

    def flush(self) -> None:
        """Wait until every record written so far is in a complete chunk on disk."""
        shared = self._shared
        if self._closed or not self._thread.is_alive():
            self._raise_failure()
            return
        with shared.flush_done:
            shared.flush_requests += 1
            wanted = shared.flush_requests
            shared.wake.set()
            while 0 <= shared.flushed < wanted:
                shared.flush_done.wait(0.1)
                if not self._thread.is_alive():
                    break
        self._raise_failure()

    def close(self) -> None:
        """Finish the bag: flush queued records, write the MCAP summary and ``metadata.yaml``.

        Idempotent and safe to call from ``finally`` or exception handlers; a Ctrl-C during
        the close is deferred until the bag is complete, then re-raised.
        """
        if self._closed:
            return
        self._closed = True
        self._finalizer()
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

    def _json(self, what: str, value: object) -> str:
        if not isinstance(value, dict):  # (from callers without types: checked)
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
        if path.exists():
            if not path.is_dir():
                msg = f"{path}: exists and is not a directory; a trace is a new bag directory"
                raise TraceError(msg)
            if any(path.iterdir()):
                msg = f"{path}: directory is not empty; refusing to write a trace into it"
                raise TraceError(msg)
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            msg = f"{path}: cannot create trace: {exc.strerror or exc}"
            raise TraceError(msg) from exc

    def _check(self) -> None:
        if self._shared.failure is not None or self._shared.rejected is not None:
            self._raise_failure()
        # (SampleBlocks have a backlog of their own, counted in records: see write_block)
        if len(self._pending) > _MAX_BACKLOG:
            self._shared.wake.set()
            while len(self._pending) > _MAX_BACKLOG // 2 and self._thread.is_alive():
                time.sleep(0.001)
        elif len(self._pending) >= _BATCH:
            self._shared.wake.set()

    def _raise_failure(self) -> None:
        shared = self._shared
        failure = shared.failure
        if failure is not None:  # sticky: every later write fails too
            shared.pending.clear()
            msg = f"{self.path}: writing the trace failed: {failure!r}"
            raise TraceError(msg) from failure
        rejected = shared.rejected
        if rejected is not None:
            shared.rejected = None  # reported once; the trace goes on without those records
            raise rejected
