"""The trace writer's worker thread and what it shares with the producer (``TraceWriter``):
the queue, batching queued records for the encoder, chunking the encoded messages into the
MCAP file, and finishing the bag on close. See ``writer`` for why it is built this way."""

from __future__ import annotations

import itertools
import math
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final, cast

import numpy as np
import numpy.typing as npt

from ..errors import TraceError
from ..sample_block import SampleBlock
from .bag import Bag, dump_metadata, metadata, schema_id, write_metadata_yaml
from .encoder import Encoded, Encoder, Failures, Rows, joined

if TYPE_CHECKING:
    from collections.abc import Iterator

    from ..records import TraceRecord

#: Uncompressed bytes after which a chunk is written out.
CHUNK_BYTES: Final = 1 << 20
#: Age in seconds after which a started chunk is written out anyway (checked every ``_POLL``
#: seconds: a SIGKILL loses at most the last 0.75 s of records).
FLUSH_INTERVAL: Final = 0.5

_POLL: Final = 0.25  # seconds between the worker's looks at the queue (bigger batches: cheaper)
BATCH: Final = 32768  # records serialized at once
TRICKLE: Final = 4096  # queued records below which the worker lets the GIL go (see _pause)
_YIELD: Final = 50e-6  # seconds the worker sleeps between groups in a trickle (see _pause)


# -- the worker -------------------------------------------------------------------------------


@dataclass(slots=True)
class Shared:
    """What the producer and the worker share; kept apart from the writer so it can be GC'd."""

    # Records, SampleBlocks and EncodedBlock (each use tells them apart by type()).
    pending: deque[TraceRecord | SampleBlock | EncodedBlock] = field(default_factory=deque)
    # Batches the producer serializes in its idle time (``TraceWriter.serialize_until``),
    # OpenBatch, taken from the front of ``pending``: they go before everything in it.
    ready: deque[OpenBatch] = field(default_factory=deque)
    helped: float = -math.inf  # time.monotonic() of the producer's last idle-time offer
    # How recent an offer leaves the trickle to the producer (the writer's _HELP_WINDOW).
    help_window: float = 0.2
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
class EncodedBlock:
    """A SampleBlock already laid out (``Encoder.encode_block``'s result)."""

    result: Encoded
    records: int


_QUEUED_BLOCKS: Final = (SampleBlock, EncodedBlock)  # queue items that are not single records


def _pause() -> None:
    """Let the stepping thread in between two groups of records being encoded.

    The worker's Python holds the GIL; a thread that wants it back (the stepping thread after
    each ``mj_step``) waits until it is let go or for the switch interval (5 ms). Encoding a
    quarter second of a real-time session's records at once held it up to 8 ms: that was the
    node's publish jitter. A short sleep lets a waiting thread in (``sleep(0)`` does not
    reliably: the worker takes the GIL back before the waiter wakes)."""
    time.sleep(_YIELD)


def take(shared: Shared, encoder: Encoder, limit: int = BATCH
         ) -> tuple[Iterator[Rows], Failures, bool]:
    """Take the queue's first item, not an EncodedBlock, to serialize (the caller holds the
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
            elif type(following) is EncodedBlock:
                break
            else:  # (a record: neither block type)
                following = item.carrying(cast("TraceRecord", following))
            pending.popleft()
            joined.append(following)
            size += len(following)
        steps, failures = encoder.encode_block_steps(SampleBlock.join(joined))
        shared.taken_raw += len(joined)
        shared.unblocked += in_blocks
        return steps, failures, size < TRICKLE
    # A short queue is a real-time session's trickle; a long one is a fast run's.
    trickle = len(pending) < TRICKLE
    batch = [item]
    while pending and len(batch) < limit and type(pending[0]) not in _QUEUED_BLOCKS:
        batch.append(pending.popleft())
    steps, failures = encoder.encode_steps(batch)
    shared.taken_raw += len(batch)
    return steps, failures, trickle


@dataclass(slots=True)
class OpenBatch:
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


def run_worker(bag: Bag, shared: Shared) -> None:
    """Own the bag: serialize queued records in batches, write chunks, finish on close."""
    encoder = shared.encoder
    pending = shared.pending
    ready = shared.ready
    lock = shared.lock
    parts: list[bytes] = []
    chunk_channels: list[npt.NDArray[np.generic]] = []
    chunk_times: list[npt.NDArray[np.generic]] = []
    chunk_offsets: list[npt.NDArray[np.generic]] = []
    chunk_size = 0
    chunk_started = 0.0
    mcap = bag.mcap

    def write_chunk() -> None:
        nonlocal chunk_size
        with lock:
            announced = encoder.new_channels[:]
            encoder.new_channels.clear()
        for channel, topic, msgtype in announced:
            mcap.add_channel(channel, schema_id(bag, msgtype), topic, "cdr",
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
                    elif type(head := pending[0]) is EncodedBlock:  # laid out by the producer
                        pending.popleft()
                        shared.unblocked += head.records
                        encoded = head.result
                    elif (not closing
                          and requests == shared.flushed and len(pending) < TRICKLE
                          and time.monotonic() - shared.helped < shared.help_window):
                        break  # the producer serializes them in its idle time
                    else:
                        steps, failures, trickle = take(shared, encoder)
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
        information = metadata(bag, encoder, mcap.channel_counts, mcap.start_time,
                                mcap.end_time)
        serialized = dump_metadata(information)
        mcap.finish({"rosbag2": {"serialized_metadata": serialized.strip()}})
        write_metadata_yaml(bag.path, serialized)
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


def stop_worker(shared: Shared, thread: threading.Thread) -> None:
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

