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

Which answer belongs to which period is decided by the node alone, never by the timing:
- only a message received while the host waits for a period's answers counts as an answer
  (``answer``); any input that arrives while a period is being stepped (a late duplicate, a
  controller that also reacts to something else) is held and submitted at that period's end
  (``receive``), so every input is committed at a period's first tick, none in the middle;
- no ``/clock`` is published outside the periods (none at start, none at reset): a controller
  answers only the clocks that end a period;
- the first period starts only once every subscription the ROS graph shows on an output
  topic is matched (``Publishing.outputs_matched``): a controller's readers get the first
  period's samples, as they get every later one (its writes reach a subscriber process in
  order, the samples before the ``/clock``); and once every publisher it shows on a sync
  topic is matched by the node's subscription (``CommandSubscriptions.matched``): a controller
  answers each ``/clock`` once (a timer on sim time fires once for a time), so an answer
  written before the match would be lost and the node would wait for it in vain;
- ``/clock`` is re-sent to a controller that has not answered only before the first answer
  (discovery), so a slow controller is not asked twice later.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Protocol

from fibril_sim_core.errors import FibrilError
from fibril_sim_core.records import FrameTiming
from fibril_sim_core.runtime import SimulationConnection

from .inputs import InputThread
from .publishing import Publishing

# Sync mode waits this long (or sync_timeout if longer) for its controllers to appear.
DISCOVERY_TIMEOUT_S = 10.0
# Before the first answer, the current /clock is sent again this often (wall seconds), for a
# controller whose clock subscription matched after it was published.
REPUBLISH_S = 1.0
# Sync mode starts once every output subscription and sync-topic publisher the graph shows is
# matched, or this long (or half sync_timeout if longer) after the controllers were seen.
UNMATCHED_GRACE_S = 3.0


class SyncTimeout(FibrilError):
    """A sync topic did not answer a control period in time."""


class MatchedInputs(Protocol):
    """The node's command subscriptions, as far as the start of sync mode asks them."""

    def matched(self, topic: str) -> bool: ...


class SyncNode(Protocol):
    """What the sync driver uses of the node (``SimNode``), once it runs."""

    @property
    def connection(self) -> SimulationConnection: ...

    @property
    def publishing(self) -> Publishing: ...

    @property
    def commands(self) -> MatchedInputs: ...

    def count_publishers(self, topic: str) -> int: ...

    def fail(self, message: str) -> None: ...


class SyncDriver:
    """Deterministic lockstep: after each control period, wait for every sync topic."""

    def __init__(self, node: SyncNode, topics: Sequence[str], timeout: float,
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
        # Inputs received while a period is stepped: submitted at its end (``receive``).
        self._held: list[Callable[[], None]] = []
        self._held_lock = threading.Lock()
        # True while the host waits for answers (on_frame) or is idle between steps (an input
        # is then committed at the next step's first tick); False while a period is stepped.
        self.accepting = True
        # The period being waited for: its wall deadline and the next /clock re-send.
        self._deadline = 0.0
        self._republish = 0.0
        # The node's InputThread (None: the executor serves the subscriptions): while the
        # simulation runs or steps in lockstep the host thread borrows its wait set and takes
        # the answers itself (``on_frame``); it is given back whenever the host goes idle.
        self.inputs: InputThread | None = None

    def start(self, paused: bool, inputs: InputThread | None) -> None:
        self.inputs = inputs
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
        """The period is stepped and its /clock is about to go out: from here on an input
        is an answer (one sent at once in reply to the clock must not be held)."""
        with self.condition:
            self.generation += 1
        self._accept(True)

    # subscription callbacks
    def receive(self, topic: str, submit: Callable[[], None]) -> None:
        """An input arrived: submit it now (the host waits for answers, or is idle between
        ~/step calls: it is committed at the next period's first tick) and count it as an
        answer, or, while a period is stepped, hold it until that period's end."""
        with self._held_lock:  # the host does not start stepping in the middle of this
            if not self.accepting:
                self._held.append(submit)
                return
            submit()
        self.answer(topic)

    def _release_held(self) -> None:
        """Submit the inputs held during the period just stepped (not answers: they arrived
        before its /clock)."""
        with self._held_lock:
            held, self._held = self._held, []
        for submit in held:
            submit()

    def _accept(self, accepting: bool) -> None:
        with self._held_lock:
            self.accepting = accepting
        if accepting:
            self._release_held()

    def answer(self, topic: str) -> None:
        if topic in self.answered:
            with self.condition:
                self.answered[topic] = self.generation
                self.condition.notify_all()

    # ------------------------------------------------------------------ control
    def set_running(self, running: bool) -> dict[str, object]:
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
            self._accept(False)  # from here on the host steps
            self._release_held()
            return connection.resume()

    def run_ticks(self, ticks: int) -> dict[str, object]:
        """Advance ``ticks`` while paused, in control periods, waiting for the answers after
        each (the host waits at each period's end, see ``on_frame``)."""
        connection = self.node.connection
        with self.lock:
            if not self.ready:
                self._wait_ready()
            state: dict[str, object] = {}
            left = ticks
            try:
                while left > 0 and not self.stopping:
                    self._stepping_failure = None
                    self._accept(False)
                    self._release_held()
                    state = connection.step(min(self.period_ticks, left))
                    if self._stepping_failure is not None:
                        raise SyncTimeout(self._stepping_failure)
                    left -= self.period_ticks
            finally:
                self._accept(True)  # idle: an input is committed at the next step's start
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
        found = None  # when the controllers were first seen
        while not self.stopping:
            missing = [t for t in self.topics if node.count_publishers(t) == 0]
            clock = node.publishing.clock_subscribers() >= 1
            if not missing and clock:
                found = time.monotonic() if found is None else found
                matched = node.publishing.outputs_matched() and all(
                    node.commands.matched(t) for t in self.topics)
                # An endpoint that never matches (a QoS it asks for and the node does not
                # offer, logged as a QoS mismatch) must not keep sync mode from starting; a
                # busy machine (a long sync_timeout) may take longer to match than a quiet one.
                if matched or time.monotonic() - found > max(UNMATCHED_GRACE_S,
                                                             0.5 * self.timeout):
                    time.sleep(0.3)  # (the controller's side of the same matches)
                    node.publishing.refresh_listeners()  # the first period is published to them all
                    self.ready = True
                    return
            else:
                found = None
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
        if now > self._republish and self.periods == 0:
            self.node.publishing.republish_clock(frame.session_time_ns)
            self._republish = now + REPUBLISH_S
        return late, min(self._deadline, self._republish) - now

    def on_frame(self, frame: FrameTiming) -> None:
        """At the end of each control period, after its outputs and /clock: wait until every
        sync topic answered. A timeout while stepping (``~/step``) fails that call; running
        free it stops the node (status 1) and the host with it, at this tick."""
        outbox = self.node.publishing.outbox
        if not outbox.idle:
            outbox.flush()  # images / scans of this period, then its /clock, are out
        target = self.generation
        now = time.monotonic()
        self._deadline = now + self.timeout
        self._republish = now + REPUBLISH_S
        self._accept(True)  # the held inputs first (committed before this period's answers)
        try:
            self._wait_answers(target, frame)
        finally:
            if self.running and not self.stopping:
                self._accept(False)  # the next period is stepped at once

    def _wait_answers(self, target: int, frame: FrameTiming) -> None:
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
