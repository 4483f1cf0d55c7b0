"""Sync mode starts its first period only once the controllers' writers are matched.

A controller answers each /clock once (its timer on sim time fires once for a time); an answer
it writes before its writer is matched with the node's subscription reaches no one, and the
node then waits for it until sync_timeout (seen beside two CPU hogs: "no message on
/motor/command within sync_timeout ... after /clock 0.010 s"). The ROS graph shows a publisher
before the match, so the graph's count is not enough: the node's own subscription must have
matched every publisher the graph shows.
"""

from __future__ import annotations

import threading
import time

import pytest

pytest.importorskip("rclpy", reason="the sim node's sync driver needs rclpy")

from fibril_sim_ros.sync import SyncDriver, SyncTimeout  # noqa: E402


class _Publishing:
    def __init__(self) -> None:
        self.refreshed = 0

    def clock_subscribers(self) -> int:
        return 1

    def outputs_matched(self) -> bool:
        return True

    def refresh_listeners(self) -> None:
        self.refreshed += 1


class _Node:
    """A node whose graph shows the controller's publisher at once; the subscription matches
    it only when ``match`` is set."""

    def __init__(self) -> None:
        self.publishing = _Publishing()
        self.match = threading.Event()
        self.connection = None
        self.failures: list[str] = []

    @property
    def commands(self) -> _Node:  # (the command subscriptions: ``matched``)
        return self

    def count_publishers(self, topic: str) -> int:
        return 1

    def matched(self, topic: str) -> bool:
        return self.match.is_set()

    def fail(self, message: str) -> None:
        self.failures.append(message)


def test_the_first_period_waits_for_the_sync_topics_publishers_to_be_matched() -> None:
    node = _Node()
    driver = SyncDriver(node, ["/motor/command"], timeout=20.0, period_ticks=10)  # type: ignore[arg-type]
    waiter = threading.Thread(target=driver._wait_ready)
    waiter.start()
    time.sleep(1.0)  # the graph shows the publisher; the match has not happened
    assert not driver.ready and waiter.is_alive()
    node.match.set()
    waiter.join(10.0)
    assert driver.ready and node.publishing.refreshed == 1


def test_a_publisher_that_never_matches_does_not_keep_sync_mode_from_starting() -> None:
    """(a QoS mismatch, logged as one): after the grace, half sync_timeout here."""
    node = _Node()
    driver = SyncDriver(node, ["/motor/command"], timeout=2.0, period_ticks=10)  # type: ignore[arg-type]
    start = time.monotonic()
    driver._wait_ready()
    assert driver.ready and time.monotonic() - start >= 3.0  # UNMATCHED_GRACE_S


def test_no_publisher_at_all_is_an_error_naming_the_topic() -> None:
    node = _Node()
    node.count_publishers = lambda topic: 0  # type: ignore[method-assign]
    driver = SyncDriver(node, ["/motor/command"], timeout=0.1, period_ticks=10)  # type: ignore[arg-type]
    import fibril_sim_ros.sync as sync

    saved, sync.DISCOVERY_TIMEOUT_S = sync.DISCOVERY_TIMEOUT_S, 0.2
    try:
        with pytest.raises(SyncTimeout, match="no publisher on sync topic /motor/command"):
            driver._wait_ready()
    finally:
        sync.DISCOVERY_TIMEOUT_S = saved
