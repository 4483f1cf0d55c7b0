"""Thread priority of the node's real-time threads (``thread_priority`` parameter).

On a busy machine the host thread waking for a due sample waits for a CPU behind every other
runnable process, and for the GIL behind the node's other Python threads. Lowering the nice
value of the threads on the delivery path (the host, the publisher and the command threads,
and the executor's) gives them a larger share of the CPU and a sooner wake-up under Linux's
scheduler, without the risk of a real-time scheduling class. The node does it in real time
only (by default, nice -10, where the process may: root, CAP_SYS_NICE, or an RLIMIT_NICE that
allows it, as ros2_control's update loop asks for a real-time class where it may), and puts the
threads back at the process's own nice value as fast as possible or in sync mode, where a
boosted host stepping flat out would crowd out everything else. Where it may not, the threads
stay as they are and the node says so.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable

MAX_BOOST = 20
# The delivery threads' nice value in real time is minus this, unless set otherwise.
DEFAULT_THREAD_PRIORITY = 10
NOT_PERMITTED = "not permitted"


def boost(threads: Iterable[threading.Thread | None], amount: int) -> str | None:
    """Run each started thread at nice ``-amount`` (1..20); returns why not, or None."""
    problem = set_nice(threads, -amount)
    if problem == NOT_PERMITTED:
        problem += f" (needs root, CAP_SYS_NICE or an RLIMIT_NICE of at least {20 + amount})"
    return None if problem is None else (f"thread_priority {amount}: {problem}; the node's "
                                         f"threads keep their priority")


def set_nice(threads: Iterable[threading.Thread | None], nice: int) -> str | None:
    """Set each started thread's nice value; returns why not, or None."""
    if not hasattr(os, "setpriority"):
        return "thread priorities need Linux (os.setpriority per thread)"
    for thread in threads:
        tid = getattr(thread, "native_id", None)
        if tid is None:
            continue
        try:
            os.setpriority(os.PRIO_PROCESS, tid, nice)  # a Linux thread id: that thread
        except PermissionError:
            return NOT_PERMITTED
        except ProcessLookupError:  # the thread ended meanwhile
            continue
    return None


class DeliveryPriority:
    """The delivery threads' nice value as the node's mode changes: -``amount`` in real time,
    the process's own otherwise and once closed. Not permitted: said once through ``say``
    (the node logs it at INFO for the default amount, at WARN for one set explicitly)."""

    def __init__(self, amount: int, say: Callable[[str], object]) -> None:
        self.amount = amount
        self._say = say
        self._threads: list[threading.Thread | None] = []
        self._process_nice = os.getpriority(os.PRIO_PROCESS, 0)
        self.boosted = 0  # the amount the threads run at now
        self._said = False

    def start(self, threads: Iterable[threading.Thread | None], real_time: bool) -> None:
        self._threads = list(threads)
        self.apply(real_time)

    def apply(self, real_time: bool) -> None:
        amount = self.amount if real_time else 0
        if amount == self.boosted or not self._threads:
            return
        if amount:
            problem = boost(self._threads, amount)
        else:
            problem = set_nice(self._threads, self._process_nice)
        if problem is None:
            self.boosted = amount
        elif not self._said:
            self._said = True
            self._say(problem)

    def close(self) -> None:
        """The threads back at the process's priority: in a process embedding the node the
        executor's thread is the caller's, and the processes it starts inherit its priority.
        (Only the live ones: an ended thread's id may belong to another thread by now.)"""
        self._threads = [t for t in self._threads if t is not None and t.is_alive()]
        self.apply(real_time=False)
