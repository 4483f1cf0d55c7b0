"""Clean shutdown on SIGINT and SIGTERM, shared by every long-running fibril_sim command.

``ros2 launch``, systemd and containers stop a process with SIGTERM, a terminal with SIGINT;
both must leave complete traces and no half-written results. The first signal asks the command
to stop: it stops stepping at a tick boundary, closes its trace (MCAP summary, metadata.yaml)
and exits with 128 + the signal number (130 for SIGINT, 143 for SIGTERM), without writing
results it did not finish. A second signal exits at once with the same code, unless it is the
same signal within ``DUPLICATE_S`` of the first: Ctrl-C on ``ros2 launch`` in a terminal
reaches the node twice (from the terminal's process group, and from launch passing it on), and
that is one request to stop, not two.

A process started with SIGINT ignored (a background job of a non-interactive shell) keeps
ignoring it, as POSIX shells expect; SIGTERM always stops it cleanly.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable
from types import FrameType
from typing import TypeAlias

SIGNALS = (signal.SIGINT, signal.SIGTERM)
#: A signal's disposition, as ``signal.getsignal`` gives it back.
_Handler: TypeAlias = "Callable[[int, FrameType | None], object] | int | signal.Handlers | None"
DUPLICATE_S = 1.0


def exit_code(signum: int) -> int:
    """The customary exit status of a process stopped by ``signum``: 130, 143."""
    return 128 + int(signum)


class Interrupted(KeyboardInterrupt):
    """The first SIGINT or SIGTERM, raised in the main thread (a KeyboardInterrupt, so every
    ``except KeyboardInterrupt`` clean-up path handles SIGTERM too)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = int(signum)

    @property
    def exit_code(self) -> int:
        return exit_code(self.signum)

    def __reduce__(self) -> tuple[type, tuple[int]]:  # crosses process pools
        return (type(self), (self.signum,))


class ShutdownSignals:
    """Install the shutdown handlers for the duration of a ``with`` block (main thread only).

    ``raise_interrupt=True``: the first signal raises ``Interrupted`` in the main thread (for
    work that cannot poll a flag, e.g. an optimiser). ``False``: it only sets ``received``
    (and ``event``), which the command checks at its tick boundaries.
    """

    def __init__(self, *, raise_interrupt: bool = True) -> None:
        self.raise_interrupt = raise_interrupt
        self.received: int | None = None
        self.event = threading.Event()
        self._previous: dict[int, _Handler] = {}
        self._first_at = 0.0

    @property
    def exit_code(self) -> int:
        return exit_code(self.received) if self.received is not None else 0

    def __enter__(self) -> ShutdownSignals:
        if threading.current_thread() is not threading.main_thread():
            return self  # signal handlers can only be set in the main thread
        for signum in SIGNALS:
            current = signal.getsignal(signum)
            if signum == signal.SIGINT and current == signal.SIG_IGN:
                continue  # started in the background: keep ignoring Ctrl-C
            self._previous[signum] = current
            signal.signal(signum, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)
        self._previous.clear()

    def wait(self, timeout: float | None = None) -> int | None:
        """Block until a signal arrives (or ``timeout``); returns it or None."""
        self.event.wait(timeout)
        return self.received

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.received is not None:
            if signum == self.received and time.monotonic() - self._first_at < DUPLICATE_S:
                return  # the same request delivered twice (see the module docstring)
            os.write(2, f"fibril_sim: {signal.Signals(signum).name} again: exiting "
                        f"now\n".encode())
            os._exit(exit_code(signum))
        self.received = signum
        self._first_at = time.monotonic()
        self.event.set()
        if self.raise_interrupt:
            raise Interrupted(signum)


_TERMINATING: list[int] = []


def terminating() -> int | None:
    """In a worker process: the termination signal received, if any (start no new work)."""
    return _TERMINATING[0] if _TERMINATING else None


def raise_on_termination() -> None:
    """In a worker process: SIGTERM raises ``Interrupted`` so the work's ``finally`` blocks
    (trace close) run before the worker exits."""
    def handle(signum: int, frame: FrameType | None) -> None:
        # Later ones are ignored so the clean-up runs to its end (the parent kills a worker
        # that takes too long); work handed out afterwards refuses to start (terminating()).
        signal.signal(signum, signal.SIG_IGN)
        _TERMINATING.append(signum)
        raise Interrupted(signum)

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, handle)
