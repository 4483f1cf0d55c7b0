"""Outbox: how the records the host delivers reach their publishers, in emission order.

Small messages are converted and written on the host thread as the records arrive; large ones
(images, scans) go through a publisher thread. ``/clock`` is written here too, never backwards.
"""

from __future__ import annotations

import queue
import threading
import time
from collections import deque
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from fibril_sim_core.records import DeviceOutput, FrameTiming

if TYPE_CHECKING:
    from .sim_node import SimNode

# Messages waiting for the publisher thread before the host drops (real time) or waits (fast,
# lockstep, sync) for it.
MAX_BACKLOG = 20_000


class _Flush:
    __slots__ = ("done",)

    def __init__(self) -> None:
        self.done = threading.Event()


class _Clock:
    """A frame's /clock queued behind the large messages of that frame (see on_record)."""

    __slots__ = ("session_time_ns",)

    def __init__(self, session_time_ns: int) -> None:
        self.session_time_ns = session_time_ns


class Outbox:
    """Publishes what the host delivers, in emission order.

    Small messages (encoder, IMU, range, odometry, samples, ``/clock``) are converted and
    written on the host thread as the records arrive: a DDS write with keep-last history never
    blocks, and a second Python thread would only fight the host for the GIL (measured: it cut
    the stepping rate by more than half). Large ones (images, scans) are handed to a publisher
    thread so that their conversion never holds up stepping; when that thread falls
    ``MAX_BACKLOG`` messages behind, a real-time host drops them (counted per topic) rather
    than fall behind the clock, otherwise it waits.
    """

    def __init__(self, node: SimNode) -> None:
        self._node = node
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._handed_off = 0  # large messages queued so far, and of those published
        self._published = 0
        self.blocking = False
        self.drops: dict[str, int] = {}
        self.frames: deque[tuple[float, int]] = deque()
        self.last_clock_ns = -1
        self.clock_step_ns = 0
        self.interleave_clock = False
        self._clock_lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="fibril-sim-publish",
                                        daemon=True)
        self._stopping = False

    def start(self) -> None:
        self._thread.start()

    # host thread --------------------------------------------------------------------------
    def on_record(self, record: Any) -> None:
        cls = type(record)
        try:
            if cls is DeviceOutput:
                if self.interleave_clock:
                    # /clock at the last clock period before this delivery: every message is
                    # published before the first /clock at or past its delivery time.
                    step = self.clock_step_ns
                    due = (record.session_delivery_time_ns - 1) // step * step
                    if due > self.last_clock_ns:
                        self.clock(due)
                self._node.publish_output(record)
            elif cls is FrameTiming:
                wall = time.perf_counter()
                window = self.frames
                window.append((wall, record.session_time_ns))
                while len(window) > 2 and wall - window[1][0] > 1.0:
                    window.popleft()
                self._node.publish_frame(record)
                if self._handed_off != self._published:
                    # Images / scans of this frame are still with the publisher thread: /clock
                    # goes after them, so a controller woken by it has its inputs (sync mode).
                    self._queue.put(_Clock(record.session_time_ns))
                else:
                    self.clock(record.session_time_ns)
        except Exception as exc:  # noqa: BLE001 - a failed publish must not stop the host
            if not self._stopping:
                self._node.get_logger().error(
                    f"publishing failed: {type(exc).__name__}: {exc}", throttle_duration_sec=1.0)

    def hand_off(self, convert: Any, output: DeviceOutput, topics: Sequence[str]) -> None:
        """Queue a large message for the publisher thread."""
        if self._queue.qsize() > MAX_BACKLOG:
            if not self.blocking:
                for topic in topics:
                    self.drops[topic] = self.drops.get(topic, 0) + 1
                return
            while self._queue.qsize() > MAX_BACKLOG and not self._stopping:
                time.sleep(0.0005)
        self._handed_off += 1  # written by the host thread only; _published by the other
        self._queue.put((convert, output))

    # any thread ---------------------------------------------------------------------------
    def clock(self, session_time_ns: int) -> None:
        """Publish /clock (never backwards: SessionTime only grows)."""
        with self._clock_lock:
            if session_time_ns < self.last_clock_ns:
                return
            self.last_clock_ns = session_time_ns
            self._node.publish_clock(session_time_ns)

    def flush(self, timeout: float = 30.0) -> None:
        """Wait until everything handed off so far has been published."""
        marker = _Flush()
        self._queue.put(marker)
        marker.done.wait(timeout)

    def stop(self, timeout: float = 1.0) -> None:
        self._stopping = True
        self._queue.put(None)
        if self._thread.ident is not None:
            self._thread.join(timeout)

    # publisher thread ---------------------------------------------------------------------
    def _run(self) -> None:
        node = self._node
        get = self._queue.get
        while True:
            item = get()
            if item is None:
                return
            if type(item) is _Flush:
                item.done.set()
                continue
            if type(item) is _Clock:
                self.clock(item.session_time_ns)
                continue
            try:
                convert, output = item
                node.publish_converted(convert, output)
            except Exception as exc:  # noqa: BLE001 - a publish failure must not stop the rest
                if not self._stopping:
                    node.get_logger().error(f"publishing failed: {type(exc).__name__}: {exc}",
                                            throttle_duration_sec=1.0)
            finally:
                self._published += 1

    def measured_rtf(self) -> float:
        window = list(self.frames)
        if len(window) < 2 or time.perf_counter() - window[-1][0] > 1.0:
            return 0.0
        wall = window[-1][0] - window[0][0]
        return (window[-1][1] - window[0][1]) / 1e9 / wall if wall > 0 else 0.0
