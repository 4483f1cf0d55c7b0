"""SyncDriver: deterministic lockstep of the simulation with its controllers (sync mode).

Step one control period, publish its outputs and ``/clock``, wait until every sync topic has
answered (a message received after that ``/clock``), so that the answers are committed at the
period's end tick on every run; a topic that does not answer within the timeout fails loudly.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from fibril_sim_core.errors import FibrilError

if TYPE_CHECKING:
    from .sim_node import SimNode

# Sync mode waits this long (or sync_timeout if longer) for its controllers to appear.
DISCOVERY_TIMEOUT_S = 10.0


class SyncTimeout(FibrilError):
    """A sync topic did not answer a control period in time."""


class SyncDriver:
    """Deterministic lockstep: step a control period, publish, wait for every sync topic."""

    def __init__(self, node: SimNode, topics: Sequence[str], timeout: float,
                 period_ticks: int) -> None:
        self.node = node
        self.topics = tuple(topics)
        self.timeout = timeout
        self.period_ticks = period_ticks
        self.generation = 0
        self.answered = dict.fromkeys(self.topics, -1)
        self.running = threading.Event()
        self.lock = threading.Lock()
        self.condition = threading.Condition()
        self.stopping = False
        self.failure: str | None = None
        self.ready = False
        self.periods = 0
        self._thread = threading.Thread(target=self._run, name="fibril-sim-sync", daemon=True)

    def start(self, paused: bool) -> None:
        if not paused:
            self.running.set()
        self._thread.start()

    def stop(self) -> None:
        self.stopping = True
        self.running.set()
        with self.condition:
            self.condition.notify_all()
        if self._thread.ident is not None and self._thread is not threading.current_thread():
            self._thread.join(1.0)

    # called before /clock of a period is published (publisher thread)
    def next_generation(self) -> None:
        with self.condition:
            self.generation += 1

    # subscription callbacks
    def answer(self, topic: str) -> None:
        if topic in self.answered:
            with self.condition:
                self.answered[topic] = self.generation
                self.condition.notify_all()

    def _wait_ready(self) -> None:
        """Before the first period: every sync topic has a publisher and someone besides this
        node listens to /clock, so that no answer of period 1 is lost to discovery."""
        node = self.node
        allowed = max(self.timeout, DISCOVERY_TIMEOUT_S)
        deadline = time.monotonic() + allowed
        while not self.stopping:
            missing = [t for t in self.topics if node.count_publishers(t) == 0]
            if not missing and node.clock_subscribers() >= 1:
                time.sleep(0.3)  # let the remaining endpoints of the controller match
                self.ready = True
                return
            if time.monotonic() > deadline:
                what = (f"no publisher on sync topic {missing[0]}" if missing
                        else "no controller subscribed to /clock")
                raise SyncTimeout(f"sync: {what} within {allowed:g} s of the start")
            time.sleep(0.02)

    def run_ticks(self, ticks: int) -> dict[str, Any]:
        """Advance ``ticks`` in control periods, waiting for the answers after each."""
        with self.lock:
            if not self.ready:
                self._wait_ready()
            state: dict[str, Any] = {}
            left = ticks
            while left > 0 and not self.stopping:
                state = self._period(min(self.period_ticks, left))
                left -= self.period_ticks
            return state or self.node.connection.state()

    def _period(self, ticks: int) -> dict[str, Any]:
        node = self.node
        state = node.connection.step(ticks)
        if node.has_heavy_outputs:
            node.outbox.flush()  # the images / scans of this period are published too
        target = self.generation
        deadline = time.monotonic() + self.timeout
        republish = time.monotonic() + 0.2
        with self.condition:
            while not self.stopping:
                late = [t for t in self.topics if self.answered[t] < target]
                if not late:
                    break
                now = time.monotonic()
                if now > deadline:
                    raise SyncTimeout(
                        f"sync: no message on {late[0]} within sync_timeout {self.timeout:g} s "
                        f"after /clock {state['session_time_ns'] / 1e9:.6f} s (tick "
                        f"{state['tick']}, episode {state['episode']})")
                if now > republish:  # a controller that missed this /clock gets it again
                    node.republish_clock(state["session_time_ns"])
                    republish = now + 0.2
                self.condition.wait(0.05)
        self.periods += 1
        return state

    def _run(self) -> None:
        while not self.stopping:
            self.running.wait()
            if self.stopping:
                return
            try:
                self.run_ticks(self.period_ticks)
            except SyncTimeout as exc:
                self.failure = str(exc)
                self.node.fail(str(exc))
                return
            except FibrilError as exc:
                if not self.stopping:
                    self.failure = str(exc)
                    self.node.fail(f"sync: {exc}")
                return
