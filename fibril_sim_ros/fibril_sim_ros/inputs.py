"""InputThread: the node's command subscriptions, served by one lean thread of their own.

A pass of rclpy's executor over the node (its services, parameter services, guard conditions,
tasks) costs a few hundred microseconds of Python before a command's callback runs; in sync
mode that is on every control period's critical path (controller answers, the host waits).
This thread waits on the command subscriptions alone (an rcl wait set, GIL released while
waiting), takes every message that arrived and runs its callback: one thread, so the
callbacks still run one at a time and per-source sequence numbers reach the ingress in order.
The subscriptions stay the node's own (``ros2 node info`` shows them); their callback group
keeps them (and their QoS event handlers, served here too) out of the executor.

In sync mode the host thread borrows the wait set while it steps in lockstep (``lend`` /
``serve`` / ``give_back``): this thread parks, and the host is woken by the controllers'
answers themselves, with no hand-off from this thread per control period.

It uses rclpy's implementation module (``WaitSet``, ``take_message``: stable since Humble).
Where that is missing, or with ``FIBRIL_SIM_INPUT_THREAD=0`` in the environment, ``available()``
is false and the node lets its executor serve the subscriptions instead (slower, same order).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Coroutine, Sequence
from contextlib import ExitStack
from types import ModuleType
from typing import TYPE_CHECKING

from rclpy.callback_groups import CallbackGroup
from rclpy.guard_condition import GuardCondition
from rclpy.subscription import Subscription

if TYPE_CHECKING:  # rclpy's type stubs (its C extension's classes)
    from rclpy.context import Context
    from rclpy.impl._rclpy_pybind11 import Subscription as SubscriptionHandle, WaitSet
    from rclpy.waitable import Waitable

_rclpy: ModuleType | None
try:
    from rclpy.impl.implementation_singleton import rclpy_implementation as _rclpy
except ImportError:  # another rclpy layout: the executor serves the subscriptions
    _rclpy = None

WAIT_NS = 200_000_000  # re-check for stop at least this often


def available() -> bool:
    """Whether an InputThread can serve the command subscriptions here."""
    if os.environ.get("FIBRIL_SIM_INPUT_THREAD", "1").strip() == "0":
        return False
    # (rclpy's C extension module: whether this build has the wait set API)
    return _rclpy is not None and hasattr(_rclpy, "WaitSet")


class InputGroup(CallbackGroup):
    """Entities in this group (the command subscriptions and their QoS event handlers) are
    served by an InputThread, never by an executor: an executor that waits on a
    subscription's events is woken by each of its messages too (the DDS listener is shared),
    which made the node's executor spin through its whole wait set once per command."""

    def can_execute(self, entity: object) -> bool:
        return False

    def beginning_execution(self, entity: object) -> bool:
        return False

    def ending_execution(self, entity: object) -> None:
        pass


class InputThread:
    """Serves ``subscriptions`` and ``events`` (their QoS event handlers, waitables of one
    event each), created in an InputGroup, until ``stop``."""

    def __init__(self, context: Context, subscriptions: Sequence[Subscription[object]],
                 events: Sequence[Waitable[object]],
                 on_error: Callable[[BaseException], None]) -> None:
        self._context = context
        self._subscriptions = subscriptions
        self._events = events
        self._on_error = on_error
        self._guard = GuardCondition(None, None, context=context)
        self._stopping = False
        self._state = threading.Condition()
        self._serving = threading.Lock()  # held while a borrower uses the wait set
        self._want = False  # a borrower asked for the wait set
        self._lent = False  # this thread is parked; the borrower serves
        self._wait_set: WaitSet | None = None
        # (handle, message class, callback) per subscription; a callback takes the message
        # (rclpy types it as taking the message and, optionally, its info)
        self._entries: list[tuple[SubscriptionHandle[object], type[object],
                                  Callable[..., None]]] = []
        self._thread = threading.Thread(target=self._run, name="fibril-sim-inputs",
                                        daemon=True)

    @property
    def thread(self) -> threading.Thread:
        return self._thread

    def start(self) -> None:
        if self._subscriptions:
            self._thread.start()

    def stop(self, timeout: float = 2.0) -> None:
        self._stopping = True
        if self._thread.ident is not None:
            self._guard.trigger()
            with self._serving:  # a borrower's wait has ended (it sees _stopping)
                pass
            with self._state:
                self._state.notify_all()
            self._thread.join(timeout)
        self._guard.destroy()

    # ------------------------------------------------------------------ lending
    def lend(self, timeout: float = 2.0) -> bool:
        """Park this thread so that the caller serves the subscriptions itself (``serve``)
        until ``give_back``: in sync mode the host thread waits for the controllers' answers
        in the wait set, woken by the message itself rather than by this thread (one thread
        hand-off less per control period). False if the thread is not serving."""
        with self._state:
            if self._lent:
                return True
            if self._stopping or not self._thread.is_alive():
                return False
            self._want = True
        with self._serving:  # stop() destroys the guard only after taking this lock
            if not self._stopping:
                self._guard.trigger()
        with self._state:
            self._state.wait_for(lambda: self._lent or self._stopping
                                 or not self._thread.is_alive(), timeout)
            if not self._lent:
                self._want = False
            return self._lent

    @property
    def lent(self) -> bool:
        return self._lent

    def give_back(self) -> None:
        """This thread serves the subscriptions again (call when the borrower is idle)."""
        with self._state:
            self._want = False
            self._lent = False
            self._state.notify_all()

    def serve(self, timeout_ns: int) -> None:
        """While lent: wait up to ``timeout_ns`` for messages (or ``wake``) and run the
        callbacks of every message taken, on the calling thread."""
        with self._serving:  # stop() waits for this before it lets the handles go
            if not self._stopping and self._lent:
                self._serve_once(timeout_ns, drain=False)

    def wake(self) -> None:
        """End a ``serve`` wait early (the node is stopping). After ``stop`` (which woke
        every wait itself and destroys the guard condition) nothing is left to wake."""
        if not self._stopping:
            self._guard.trigger()

    # ------------------------------------------------------------------ thread
    def _run(self) -> None:
        subscriptions = self._subscriptions
        try:
            with ExitStack() as handles:
                context = self._context.handle
                assert context is not None  # (the node's context: initialised)
                handles.enter_context(context)
                for subscription in subscriptions:
                    handles.enter_context(subscription.handle)
                handles.enter_context(self._guard.handle)
                for event in self._events:
                    handles.enter_context(event)
                assert _rclpy is not None  # (an InputThread is made only when available())
                self._wait_set = _rclpy.WaitSet(len(subscriptions), 1, 0, 0, 0,
                                                len(self._events), context)
                self._entries = [(s.handle, s.msg_type, s.callback) for s in subscriptions]
                while not self._stopping:
                    if self._want:
                        with self._state:  # lent: the borrower uses the wait set meanwhile
                            self._lent = True
                            self._state.notify_all()
                            self._state.wait_for(lambda: not self._want or self._stopping)
                        continue
                    self._serve_once(WAIT_NS)
        except BaseException as exc:  # noqa: BLE001 - reported; the node decides
            if not self._stopping:
                self._on_error(exc)
        finally:
            with self._state:
                self._lent = False
                self._state.notify_all()
            with self._serving:  # the wait set holds the context: let both go with the thread
                self._wait_set = None
                self._entries = []

    def _serve_once(self, timeout_ns: int, drain: bool = True) -> None:
        """Wait, then run the QoS events and the callbacks of the messages taken: every
        message waiting (``drain``), or one per ready subscription (the host in sync mode:
        one answer per period, and no extra take that finds nothing)."""
        wait_set, entries, events = self._wait_set, self._entries, self._events
        assert wait_set is not None  # (set while the thread serves)
        wait_set.clear_entities()
        indices = [wait_set.add_subscription(h) for h, _, _ in entries]
        wait_set.add_guard_condition(self._guard.handle)
        for event in events:
            event.add_to_wait_set(wait_set)
        wait_set.wait(timeout_ns)
        if self._stopping:
            return
        for event in events:
            if event.is_ready(wait_set):
                _run(event.execute(event.take_data()))
        for index, (handle, msg_type, callback) in zip(indices, entries):
            if not wait_set.is_ready("subscription", index):
                continue
            while True:
                # (None when nothing is left: rclpy's stub says a tuple)
                taken: tuple[object, object] | None = handle.take_message(msg_type, False)
                if taken is None:
                    break
                callback(taken[0])
                if not drain:  # one each: a next wait returns at once if more arrived
                    break


def _run(coroutine: Coroutine[object, None, object]) -> None:
    """Run a waitable's ``execute`` coroutine that never suspends (a QoS event callback)."""
    try:
        coroutine.send(None)
    except StopIteration:
        return
    coroutine.close()
