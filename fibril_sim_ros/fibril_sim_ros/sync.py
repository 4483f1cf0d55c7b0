"""SyncDriver: deterministic lockstep of the simulation with its controllers (sync mode).

Step one control period, publish its outputs and ``/clock``, wait until every sync topic has
answered (a message received after that ``/clock``), so that the answers are committed at the
period's end tick on every run; a topic that does not answer within the timeout fails loudly.

The host runs as fast as possible in frames of one control period and the wait happens on the
host thread itself, at the end of each frame (``on_frame``, after the frame's ``/clock``): no
request to the host per period. While it steps in lockstep the host borrows the input thread's
wait set (``InputThread.lend``) and takes the answers itself, woken by their arrival, so no
thread hand-off either; without an input thread the callbacks (on the executor) wake it
through ``answer``. Either way the answers reach the ingress before the next frame is stepped,
so they are committed at its first tick, whatever the timing.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from fibril_sim_core.errors import FibrilError
from fibril_sim_core.records import FrameTiming

if TYPE_CHECKING:
    from .sim_node import SimNode

# Sync mode waits this long (or sync_timeout if longer) for its controllers to appear.
DISCOVERY_TIMEOUT_S = 10.0
# While waiting for an answer, the current /clock is sent again this often (wall seconds).
REPUBLISH_S = 0.2


class SyncTimeout(FibrilError):
    """A sync topic did not answer a control period in time."""


class SyncDriver:
    """Deterministic lockstep: after each control period, wait for every sync topic."""

    def __init__(self, node: SimNode, topics: Sequence[str], timeout: float,
                 period_ticks: int) -> None:
        self.node = node
        self.topics = tuple(topics)
        self.timeout = timeout
        self.period_ticks = period_ticks
        self.generation = 0
        self.answered = dict.fromkeys(self.topics, -1)
        self.running = False  # free running (resumed), as opposed to paused / stepping
        self.lock = threading.Lock()  # one ~/step or resume at a time
        self.condition = threading.Condition()
        self.stopping = False
        self.failure: str | None = None
        self.ready = False
        self.periods = 0
        self._stepping_failure: str | None = None
        # The period being waited for: its wall deadline and the next /clock re-send.
        self._deadline = 0.0
        self._republish = 0.0
        # The node's InputThread (None: the executor serves the subscriptions): while the
        # simulation runs or steps in lockstep the host thread borrows its wait set and takes
        # the answers itself (``on_frame``); it is given back whenever the host goes idle.
        self.inputs: Any = None

    def start(self, paused: bool) -> None:
        if not paused:
            threading.Thread(target=self._start_running, name="fibril-sim-sync",
                             daemon=True).start()

    def stop(self) -> None:
        """Release a host thread waiting for an answer (the node is closing)."""
        self.stopping = True
        if self.inputs is not None:
            self.inputs.wake()
        with self.condition:
            self.condition.notify_all()

    def _give_back(self) -> None:
        """The host is idle (paused, or between ~/step calls): the input thread serves the
        command topics again."""
        if self.inputs is not None and self.inputs.lent:
            self.inputs.give_back()

    # called before /clock of a period is written
    def next_generation(self) -> None:
        with self.condition:
            self.generation += 1

    # subscription callbacks, after the message reached the ingress
    def answer(self, topic: str) -> None:
        if topic in self.answered:
            with self.condition:
                self.answered[topic] = self.generation
                self.condition.notify_all()

    # ------------------------------------------------------------------ control
    def set_running(self, running: bool) -> dict[str, Any]:
        """Resume (free running in lockstep) or pause; returns the host state."""
        connection = self.node.connection
        with self.lock:
            if not running:
                self.running = False
                state = connection.pause()  # served after the current period's answers
                self._give_back()
                return state
            if not self.ready:
                self._wait_ready()
            self.running = True
            return connection.resume()

    def run_ticks(self, ticks: int) -> dict[str, Any]:
        """Advance ``ticks`` while paused, in control periods, waiting for the answers after
        each (the host waits at each period's end, see ``on_frame``)."""
        connection = self.node.connection
        with self.lock:
            if not self.ready:
                self._wait_ready()
            state: dict[str, Any] = {}
            left = ticks
            try:
                while left > 0 and not self.stopping:
                    self._stepping_failure = None
                    state = connection.step(min(self.period_ticks, left))
                    if self._stepping_failure is not None:
                        raise SyncTimeout(self._stepping_failure)
                    left -= self.period_ticks
            finally:
                self._give_back()
            return state or connection.state()

    def _start_running(self) -> None:
        try:
            self.set_running(True)
        except FibrilError as exc:
            if not self.stopping:
                self.failure = str(exc)
                self.node.fail(str(exc) if isinstance(exc, SyncTimeout) else f"sync: {exc}")

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

    # ------------------------------------------------------------------ host thread
    def _look(self, target: int, frame: FrameTiming) -> tuple[list[str], float]:
        """The sync topics that have not answered since ``target`` (none: the period is
        counted) and how long to wait for them (<= 0: timed out); re-sends /clock for a
        controller that missed it."""
        late = [t for t in self.topics if self.answered[t] < target]
        if not late:
            self.periods += 1
            return late, 0.0
        now = time.monotonic()
        if now > self._deadline:
            return late, 0.0
        if now > self._republish:
            self.node.republish_clock(frame.session_time_ns)
            self._republish = now + REPUBLISH_S
        return late, min(self._deadline, self._republish) - now

    def on_frame(self, frame: FrameTiming) -> None:
        """At the end of each control period, after its outputs and /clock: wait until every
        sync topic answered. A timeout while stepping (``~/step``) fails that call; running
        free it stops the node (status 1) and the host with it, at this tick."""
        outbox = self.node.outbox
        if not outbox.idle:
            outbox.flush()  # images / scans of this period, then its /clock, are out
        target = self.generation
        now = time.monotonic()
        self._deadline = now + self.timeout
        self._republish = now + REPUBLISH_S
        inputs = self.inputs
        if inputs is not None and inputs.lend():
            # This thread takes the answers from the wait set itself (woken by the message).
            while not self.stopping and inputs.lent:
                late, wait = self._look(target, frame)
                if not late:
                    return
                if wait <= 0.0:
                    break
                inputs.serve(int(1e9 * min(0.2, wait)))
            else:
                if self.stopping:
                    return  # closing
        with self.condition:  # (after a timeout above: one more look, then the error)
            while not self.stopping:
                late, wait = self._look(target, frame)
                if not late:
                    return
                if wait <= 0.0:
                    break
                self.condition.wait(min(0.05, wait))
            else:
                return  # closing
        message = (f"sync: no message on {late[0]} within sync_timeout {self.timeout:g} s "
                   f"after /clock {frame.session_time_ns / 1e9:.6f} s (tick {frame.tick}, "
                   f"episode {frame.episode})")
        if not self.running:
            self._stepping_failure = message  # run_ticks raises it
            return
        self.failure = message
        self.node.fail(message)
        raise SyncTimeout(message)  # stops the host here: nothing runs past the failure
