"""Outbox: how the records the host delivers reach their publishers, in emission order.

Every write goes out in the order the host emitted it, either at once on the calling thread
(direct) or through one writer thread. ``/clock`` is written here too, never backwards.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol, cast

from fibril_sim_core.records import DeviceOutput, FrameTiming, StateObservation

from .rcl_publish import Send, publish_many, rcl_publisher

# Writes waiting for the writer thread before a real-time host drops new ones (counted per
# topic) rather than fall behind the clock.
MAX_BACKLOG = 20_000
# As fast as possible (and in sync mode) the host waits instead once this many are waiting:
# the node runs as fast as the slower of stepping and writing, a few ms of writes behind.
BLOCKING_BACKLOG = 2_000
# The host wakes the writer at every frame's end and whenever this many writes wait.
WAKE_BATCH = 64
# Serialized messages queued one behind the other are written in batches of at most this many.
WRITE_BATCH = 256

# A large output's conversion (on the writer thread): (topic, message) pairs, each message an
# rclpy message object or its serialized bytes (what a topic's ``Send`` takes).
Convert = Callable[[DeviceOutput], Iterable[tuple[str, object]]]
# Where a failed write is reported (a message; throttled by the caller's logger).
Log = Callable[[str], None]


class RecordPublisher(Protocol):
    """What the outbox hands the records to (the node's topics: ``publishing.Publishing``)."""

    def publish_output(self, output: DeviceOutput) -> None: ...

    def publish_frame(self, frame: FrameTiming) -> None: ...

    def publish_observation(self, observation: StateObservation) -> None: ...

    def publish_converted(self, convert: Convert, output: DeviceOutput) -> None: ...

    def publish_clock(self, session_time_ns: int) -> None: ...


@dataclass(frozen=True)
class OutboxMode:
    """How the outbox writes, set as one whole when the node's mode changes.

    ``queued``: as fast as possible, the host only converts and queues, the writer thread
    writes. ``blocking``: once the backlog is long the host waits instead of dropping.
    ``clock_step_ns`` (queued only): /clock interleaved with the outputs at this period.
    ``watch``: real time, told the due session time of every output written or queued.
    """

    queued: bool = False
    blocking: bool = False
    clock_step_ns: int = 0
    watch: Callable[[int], None] | None = None


_LOGGER = logging.getLogger(__name__)


class Outbox:
    """Publishes what the host delivers, in emission order.

    Direct (real time, sync): small messages (encoder, IMU, range, odometry, samples,
    ``/clock``) are converted and written on the host thread as the records arrive; the DDS
    write of pre-serialized bytes releases the GIL (``rcl_publish``) and with keep-last
    history never blocks. Large ones (images, scans) always go through the writer thread, so
    that their conversion never holds up stepping; while anything waits there, later small
    messages queue behind it (emission order is kept).

    Queued (as fast as possible, ``queued = True``): the host only converts and queues; the
    writer thread writes, GIL-free, while the host steps on (a DDS write to a subscriber in
    another process costs more than a physics tick). The host wakes the writer once per frame
    (or every ``WAKE_BATCH`` writes), not once per message.
    """

    def __init__(self, publish: RecordPublisher, logger: Log = _LOGGER.error,
                 mode: OutboxMode = OutboxMode(),
                 on_frame: Callable[[FrameTiming], None] | None = None) -> None:
        self._publish = publish
        self._log = logger
        # Each write waiting for the writer thread: a writer and its argument. Most are a
        # topic's Send and its message; the writers below take another argument (the type of
        # the pair is more than a deque can say), cast once here rather than per write.
        self._queue: deque[tuple[Send, object]] = deque()
        self._write_clock = cast(Send, publish.publish_clock)  # session time (int)
        self._write_converted = cast(Send, self._convert)  # (Convert, DeviceOutput)
        self._work = threading.Event()  # the writer has something to do
        self._room = threading.Event()  # a blocked producer may go on
        self._busy = False  # the writer is writing (an item may be in flight)
        self.drops: dict[str, int] = {}
        self.last_clock_ns = -1
        # The mode's fields as plain attributes (read for every record on the host thread).
        self._mode = mode
        self._queued = self._blocking = self._interleave_clock = False
        self._clock_step_ns = 0
        self._watch: Callable[[int], None] | None = None
        self.set_mode(mode)
        # Someone subscribes to /clock (the node refreshes it with its other listeners). With
        # nobody, fast mode writes /clock once per frame only: the latest time still lands in
        # its transient-local history for a late joiner, and from the next refresh on (50 ms)
        # it is interleaved at every clock period again.
        self._clock_listened = True
        self._on_frame = on_frame  # sync mode, host thread
        self._clock_lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="fibril-sim-publish",
                                        daemon=True)
        self._stopping = False

    def start(self) -> None:
        self._thread.start()

    def set_mode(self, mode: OutboxMode) -> None:
        """Write in ``mode`` from the next record on."""
        self._mode = mode
        self._blocking = mode.blocking
        self._queued = mode.queued
        self._clock_step_ns = mode.clock_step_ns
        self._interleave_clock = mode.queued and mode.clock_step_ns > 0
        self._watch = mode.watch

    def set_clock_listened(self, listened: bool) -> None:
        """Whether someone subscribes to /clock (see ``__init__``)."""
        self._clock_listened = listened

    @property
    def mode(self) -> OutboxMode:
        return self._mode

    @property
    def queued(self) -> bool:
        """As fast as possible: the writer thread writes everything."""
        return self._queued

    # host thread --------------------------------------------------------------------------
    def on_record(self, record: object) -> None:
        if isinstance(record, DeviceOutput):
            try:
                if self._interleave_clock and self._clock_listened:
                    # /clock at the last clock period before this delivery: every message is
                    # published before the first /clock at or past its delivery time.
                    step = self._clock_step_ns
                    due = (record.session_delivery_time_ns - 1) // step * step
                    if due > self.last_clock_ns:
                        self.clock(due, kick=False)
                self._publish.publish_output(record)
                if self._watch is not None:
                    self._watch(record.session_delivery_time_ns)
            except Exception as exc:  # noqa: BLE001 - a failed publish must not stop the host
                self._failed(exc)
        elif isinstance(record, FrameTiming):
            try:
                self._publish.publish_frame(record)
                # Behind this frame's queued messages, if any (a controller woken by /clock
                # has its inputs).
                self.clock(record.session_time_ns, kick=False)
                if self._queue:
                    self._work.set()
            except Exception as exc:  # noqa: BLE001 - a failed publish must not stop the host
                self._failed(exc)
            if self._on_frame is not None:
                self._on_frame(record)  # sync mode: may raise SyncTimeout, which stops the host
        elif isinstance(record, StateObservation):
            try:
                self._publish.publish_observation(record)
                if self._watch is not None:
                    self._watch(record.session_time_ns)
            except Exception as exc:  # noqa: BLE001 - a failed publish must not stop the host
                self._failed(exc)

    def _failed(self, exc: Exception) -> None:
        if not self._stopping:
            self._log(f"publishing failed: {type(exc).__name__}: {exc}")

    def write(self, send: Send, payload: object, topic: str) -> None:
        """Write one small message: at once, or behind what waits for the writer thread."""
        if not self._queued and not self._queue and not self._busy:
            send(payload)
            return
        self._enqueue(send, payload, (topic,))

    def hand_off(self, convert: Convert, output: DeviceOutput, topics: Sequence[str]) -> None:
        """Queue a large message: converted and written on the writer thread."""
        self._enqueue(self._write_converted, (convert, output), topics)
        self._work.set()

    def _enqueue(self, send: Send, payload: object, topics: Sequence[str]) -> None:
        queue = self._queue
        if len(queue) >= BLOCKING_BACKLOG:
            if not self._blocking:
                if len(queue) >= MAX_BACKLOG:
                    for topic in topics:
                        self.drops[topic] = self.drops.get(topic, 0) + 1
                    return
            else:
                while len(queue) >= BLOCKING_BACKLOG // 2 and not self._stopping:
                    self._room.clear()
                    self._work.set()
                    self._room.wait(0.05)
        queue.append((send, payload))
        if len(queue) % WAKE_BATCH == 0:
            self._work.set()

    # any thread ---------------------------------------------------------------------------
    def clock(self, session_time_ns: int, kick: bool = True) -> None:
        """Publish /clock (never backwards: SessionTime only grows), after everything
        emitted before it."""
        with self._clock_lock:
            if session_time_ns < self.last_clock_ns:
                return
            self.last_clock_ns = session_time_ns
            if not self._queued and not self._queue and not self._busy:
                self._publish.publish_clock(session_time_ns)
                return
            self._queue.append((self._write_clock, session_time_ns))
        if kick:
            self._work.set()

    def flush(self, timeout: float = 30.0) -> None:
        """Wait until everything queued so far has been written."""
        if not self._queue and not self._busy:
            return
        done = threading.Event()
        self._queue.append((_SET, done))
        self._work.set()
        done.wait(timeout)

    @property
    def thread(self) -> threading.Thread:
        """The writer thread."""
        return self._thread

    @property
    def backlog(self) -> int:
        """Writes waiting for the writer thread."""
        return len(self._queue)

    @property
    def idle(self) -> bool:
        return not self._queue and not self._busy

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the writer; what still waits is not published (the node is closing)."""
        self._stopping = True
        self._work.set()
        self._room.set()
        if self._thread.ident is not None:
            self._thread.join(timeout)

    # writer thread ------------------------------------------------------------------------
    def _convert(self, item: tuple[Convert, DeviceOutput]) -> None:
        convert, output = item
        self._publish.publish_converted(convert, output)

    def _run(self) -> None:
        queue, work, room = self._queue, self._work, self._room
        popleft = queue.popleft
        while not self._stopping:
            work.wait()
            work.clear()
            self._busy = True
            publishers: list[int] = []
            payloads: list[bytes] = []
            while queue and not self._stopping:
                send, payload = popleft()
                if type(payload) is bytes:
                    publisher = rcl_publisher(send)
                    if publisher is not None:
                        # Serialized messages queued one behind the other go out as one batch
                        # (the GIL released once for all: rcl_publish.publish_many).
                        publishers.append(publisher)
                        payloads.append(payload)
                        if queue and len(payloads) < WRITE_BATCH:
                            continue
                else:
                    publisher = None
                if payloads:
                    self._write_batch(publishers, payloads)
                    publishers, payloads = [], []
                if publisher is None:
                    try:
                        send(payload)
                    except Exception as exc:  # noqa: BLE001 - one failed write must not stop the rest
                        self._write_failed(f"publishing failed: {type(exc).__name__}: {exc}")
                if len(queue) < BLOCKING_BACKLOG // 2 and not room.is_set():
                    room.set()
            self._busy = False
            if not room.is_set():
                room.set()
            if queue:  # queued between the last pop and clearing busy
                work.set()

    def _write_batch(self, publishers: list[int], payloads: list[bytes]) -> None:
        for reason in publish_many(publishers, payloads):
            self._write_failed(reason)

    def _write_failed(self, message: str) -> None:
        self._log(message)


def _set(event: threading.Event) -> None:
    event.set()


_SET = cast(Send, _set)  # a flush's marker in the queue (its argument: the Event)
