"""Thread priority of the node's real-time threads (``thread_priority`` parameter).

On a busy machine the host thread waking for a due sample waits for a CPU behind every other
runnable process, and for the GIL behind the node's other Python threads. Lowering the nice
value of the threads on the delivery path (the host, the publisher and the command threads,
and the executor's) gives them a larger share of the CPU and a sooner wake-up under Linux's
scheduler, without the risk of a real-time scheduling class (a node switched to as fast as
possible would hold a CPU to itself). Needs root or CAP_SYS_NICE; without it the threads stay
as they are and the node says so.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable

MAX_BOOST = 20


def boost(threads: Iterable[threading.Thread | None], amount: int) -> str | None:
    """Run each started thread at nice ``-amount`` (1..20); returns why not, or None."""
    if not hasattr(os, "setpriority"):
        return "thread priorities need Linux (os.setpriority per thread)"
    for thread in threads:
        tid = getattr(thread, "native_id", None)
        if tid is None:
            continue
        try:
            os.setpriority(os.PRIO_PROCESS, tid, -amount)  # a Linux thread id: that thread
        except PermissionError:
            return (f"thread_priority {amount}: not permitted (needs root or CAP_SYS_NICE); "
                    f"the node's threads keep their priority")
        except ProcessLookupError:  # the thread ended meanwhile
            continue
    return None
