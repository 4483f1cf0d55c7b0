"""Trace writer: the simulation's semantic records as a rosbag2 bag (MCAP storage, zstd chunks).

One format serves every consumer: ``ros2 bag play``, Foxglove, ``mcap`` tools, rosbags and the
calibration reader all read it, and writing it needs no ROS installation.

Speed. A SimulationInstance hands its records over in ``SampleBlock``s (``write_block``): the
samples only the trace hears arrive as columns (acquisition ticks and value arrays per device,
no record objects), laid out by numpy in the caller's thread at hand-over (``cdr.Layout``:
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
leaves a trace readable up to its last chunk (``TraceReader(..., salvage=True)``). ``close``
drains the queue, writes the MCAP summary and the final ``metadata.yaml``, and keeps waiting
for that even if interrupted again. A writer that is never closed is closed at interpreter exit.

Modules: this one is the producer's side (``TraceWriter``); ``_worker`` the worker thread and
the queue it shares with it; ``_bag`` the bag's metadata and schemas.
"""

from __future__ import annotations

import json
import threading
import time
import weakref
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Final

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
from . import msgtypes
from .bag import Bag, dump_metadata, library, metadata, write_metadata_yaml
from .mcap_file import McapFile
from .topics import (
    ACTUATOR_TOPIC_PREFIX,
    DEVICE_TOPIC_PREFIX,
    EPISODES_TOPIC,
    FRAME_TIMING_TOPIC,
    INPUTS_TOPIC,
    STATE_TOPIC,
    actuator_topic,
    device_topic,
)
from .worker import (
    BATCH,
    CHUNK_BYTES,
    FLUSH_INTERVAL,
    EncodedBlock,
    OpenBatch,
    Shared,
    run_worker,
    stop_worker,
    take,
)

if TYPE_CHECKING:
    from types import TracebackType

    from ..records import TraceRecord

__all__ = [
    "ACTUATOR_TOPIC_PREFIX",
    "CHUNK_BYTES",
    "DEVICE_TOPIC_PREFIX",
    "EPISODES_TOPIC",
    "FLUSH_INTERVAL",
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

    def __init__(self, path: Path | str, *, provenance: Mapping[str, object],
                 layout: Mapping[str, object]) -> None:
        self.path = Path(path)
        custom_data = {PROVENANCE_KEY: self._json("provenance", provenance),
                       LAYOUT_KEY: self._json("layout", layout)}
        self._prepare_directory()
        mcap_path = self.path / f"{self.path.name}.mcap"
        try:
            mcap = McapFile(mcap_path, profile="ros2", library=library())
        except BaseException as exc:
            if not isinstance(exc, FileExistsError) and mcap_path.exists():  # made here
                mcap_path.unlink()
            if not isinstance(exc, OSError):
                raise
            msg = f"{self.path}: cannot create trace: {exc.strerror or exc}"
            raise TraceError(msg) from exc
        try:
            bag = Bag(self.path, mcap, custom_data, msgtypes.trace_typestore())
            # early, so a reader finds provenance and layout even after a SIGKILL
            write_metadata_yaml(self.path, dump_metadata(metadata(bag, None, {}, None, None)))
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
        self._shared = Shared(help_window=_HELP_WINDOW)
        self._pending = self._shared.pending
        # Daemon, so a forgotten writer never blocks interpreter exit; the finalizer below
        # (also run at exit) still finishes the bag properly before daemon threads stop.
        self._thread = threading.Thread(
            target=run_worker, args=(bag, self._shared),
            name=f"fibril-trace-writer:{self.path.name}", daemon=True)
        self._thread.start()
        self._finalizer = weakref.finalize(self, stop_worker, self._shared, self._thread)

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
        encoded: EncodedBlock | None = None
        try:
            encoded = EncodedBlock(encoder.encode_block(block), len(block))
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
                elif pending and type(pending[0]) is not EncodedBlock and (
                        raw >= _IDLE_RECORDS or now - self._served >= _IDLE_AGE):
                    steps, failures, _ = take(shared, shared.encoder, _IDLE_RECORDS)
                    open_batch = OpenBatch(steps, failures)
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
        if not isinstance(value, Mapping):  # (from callers without types: checked)
            msg = f"{self.path}: trace {what} must be a mapping, got {type(value).__name__}"
            raise TraceError(msg)
        try:
            return json.dumps(dict(value), sort_keys=True, separators=(",", ":"), allow_nan=False)
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
        elif len(self._pending) >= BATCH:
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
