"""The sim node's outbox publishes a frame's /clock after that frame's large messages.

In sync mode a controller wakes on /clock and answers from its inputs: an image or scan still
queued for the publisher thread when /clock goes out would make its answer depend on thread
timing (issue 13's reproducible lockstep).
"""

from __future__ import annotations

import threading
import time

import numpy as np

from fibril_sim_core.records import DeviceOutput, FrameTiming
from fibril_sim_ros.outbox import Outbox, OutboxMode


class _Node:
    """What the outbox calls on the node: publishing, recorded in order."""

    def __init__(self) -> None:
        self.published: list[str] = []
        self.release = threading.Event()

    def publish_converted(self, convert: object, output: DeviceOutput) -> None:
        self.release.wait(5.0)  # a slow conversion of a large message
        self.published.append(f"scan {output.acquisition_tick}")

    def publish_frame(self, record: FrameTiming) -> None:
        self.published.append("frame")

    def publish_clock(self, session_time_ns: int) -> None:
        self.published.append(f"clock {session_time_ns}")

    def get_logger(self) -> object:  # pragma: no cover - only on a failure
        raise AssertionError("no publish should fail here")


def _scan(tick: int) -> DeviceOutput:
    return DeviceOutput(0, "lidar", "fibril_sim/planar_lidar_scan/v1", tick, tick, tick, tick,
                        tick, np.zeros(3), ("a", "b", "c"))


def _frame(ns: int) -> FrameTiming:
    return FrameTiming(0, ns, ns, ns, 0.001, 1.0)


def _wait(condition, seconds: float = 5.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.001)


def test_clock_waits_for_the_frames_large_messages() -> None:
    node = _Node()
    outbox = Outbox(node)  # type: ignore[arg-type]
    outbox.start()
    try:
        outbox.hand_off(None, _scan(1), ["/scan"])
        outbox.on_record(_frame(2_000_000))
        time.sleep(0.05)
        assert node.published == ["frame"]  # the scan is still converting: no /clock yet
        node.release.set()
        _wait(lambda: len(node.published) == 3)
        assert node.published == ["frame", "scan 1", "clock 2000000"]
    finally:
        outbox.stop()


def test_clock_goes_out_at_once_when_nothing_large_waits() -> None:
    node = _Node()
    node.release.set()
    outbox = Outbox(node)  # type: ignore[arg-type]
    outbox.start()
    try:
        outbox.hand_off(None, _scan(1), ["/scan"])
        _wait(lambda: node.published == ["scan 1"] and outbox.idle)
        outbox.on_record(_frame(2_000_000))  # published on this (the host) thread
        assert node.published == ["scan 1", "frame", "clock 2000000"]
    finally:
        outbox.stop()


def test_queued_writes_go_out_in_emission_order_on_the_writer_thread() -> None:
    """As fast as possible: the host only queues; the writer thread writes everything, the
    frame's /clock last, and ``flush`` returns once all of it is out."""
    node = _Node()
    node.release.set()
    outbox = Outbox(node)  # type: ignore[arg-type]
    outbox.set_mode(OutboxMode(queued=True, blocking=True))
    threads: list[str] = []

    def send(payload: object) -> None:
        threads.append(threading.current_thread().name)
        node.published.append(str(payload))

    outbox.start()
    try:
        for k in range(200):
            outbox.write(send, f"msg {k}", "/topic")
        outbox.on_record(_frame(2_000_000))
        outbox.flush()
        assert node.published == ["frame", *(f"msg {k}" for k in range(200)), "clock 2000000"]
        assert set(threads) == {"fibril-sim-publish"}
        assert outbox.idle
    finally:
        outbox.stop()


def test_direct_writes_wait_behind_a_queued_large_message() -> None:
    """Real time: small messages go out at once, unless a large one is still with the writer
    thread; then they queue behind it (emission order is kept)."""
    node = _Node()
    outbox = Outbox(node)  # type: ignore[arg-type]
    outbox.start()
    try:
        outbox.write(node.published.append, "encoder 0", "/encoder")  # at once
        assert node.published == ["encoder 0"]
        outbox.hand_off(None, _scan(1), ["/scan"])  # converting (blocked in the stub)
        outbox.write(node.published.append, "encoder 1", "/encoder")
        time.sleep(0.05)
        assert node.published == ["encoder 0"]
        node.release.set()
        outbox.flush()
        assert node.published == ["encoder 0", "scan 1", "encoder 1"]
    finally:
        outbox.stop()


class _FastNode(_Node):
    """A node whose outputs are written on the writer thread (fast mode)."""

    def __init__(self, outbox_ref: list[Outbox]) -> None:
        super().__init__()
        self._outbox = outbox_ref

    def publish_output(self, output: DeviceOutput) -> None:
        self._outbox[0].write(self.published.append, f"out {output.session_delivery_time_ns}",
                              "/out")


def _output(ns: int) -> DeviceOutput:
    return DeviceOutput(0, "enc", "fibril_sim/encoder/v1", ns, ns, ns, ns, ns,
                        np.zeros(3), ("a", "b", "c"))


def test_fast_mode_interleaves_clock_only_while_someone_subscribes_to_it() -> None:
    """As fast as possible /clock goes between the messages at every clock period; with no
    /clock subscriber only the frame's /clock is written (its latest time stays in the
    transient-local history), and the same messages in the same order otherwise."""
    for listened, expected in (
            (True, ["clock 1000", "out 1001", "clock 2000", "out 2001", "clock 3000",
                    "out 3001", "clock 3001"]),
            (False, ["out 1001", "out 2001", "out 3001", "clock 3001"])):
        ref: list[Outbox] = []
        node = _FastNode(ref)
        node.release.set()
        outbox = Outbox(node)  # type: ignore[arg-type]
        ref.append(outbox)
        outbox.set_mode(OutboxMode(queued=True, blocking=True, clock_step_ns=1000))
        outbox.set_clock_listened(listened)
        outbox.start()
        try:
            for ns in (1001, 2001, 3001):  # delivered just after each clock period
                outbox.on_record(_output(ns))
            outbox.on_record(_frame(3001))
            outbox.flush()
            # the frame record itself is published on the host thread at once
            assert [p for p in node.published if p != "frame"] == expected, listened
        finally:
            outbox.stop()
