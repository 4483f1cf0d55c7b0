"""SimulationRuntime: owns the live simulation's process boundary for one plan: a host (the
thread that steps the instance) and a server (remote connections), and hands out in-process
connections."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from .._signals import ShutdownSignals
from ..errors import InstanceError
from ..manifest import RuntimeOptions
from ..plan import SimulationPlan
from ..records import FrameTiming
from .connection import SimulationConnection
from .host import SimulationHost
from .server import ServerOptions, SimulationServer
from .subscription import RecordFilter

if TYPE_CHECKING:  # (the trace stack is the caller's; nothing here needs it at run time)
    from ..trace import TraceWriter


class SimulationRuntime:
    """Builds the instance, host and server for a plan and hands out connections.

    ``server``: where remote clients connect (default: a Unix socket in a private directory,
    see ``address``); None: in-process connections only. ``trace`` is the caller's: the
    runtime writes frame timings into it, the caller closes it after ``stop``.
    """

    def __init__(self, plan: SimulationPlan, *, seed: int | None = None, trace: TraceWriter | None = None,
                 options: RuntimeOptions | None = None,
                 server: ServerOptions | None = ServerOptions()) -> None:
        self.plan = plan
        self.instance = plan.create_instance(seed, trace=trace, collect=False)
        self.host = SimulationHost(self.instance, options or plan.manifest.runtime)
        if trace is not None and plan.manifest.trace.frame_timing:
            self.host.add_callback(
                lambda record: trace.write(record) if isinstance(record, FrameTiming) else None,
                RecordFilter.of("frame_timing"))
        if trace is not None:  # it serializes its queue in real time's idle time
            self.host.add_idle_task(trace.serialize_until)
        self.server = SimulationServer(self.host, server) if server is not None else None

    @property
    def address(self) -> str:
        """Where remote clients connect (``SimulationConnection.connect(address)``)."""
        return self.server.address if self.server is not None else ""

    def connect(self) -> SimulationConnection:
        return SimulationConnection(self.host)

    def start(self) -> SimulationRuntime:
        if self.server is not None:
            self.server.start()
        try:
            self.host.start()
        except BaseException:
            if self.server is not None:
                self.server.stop()
            raise
        return self

    def stop(self) -> None:
        """Stop at a tick boundary: the host finishes its frame, then the server closes."""
        try:
            self.host.stop()
        finally:
            if self.server is not None:
                self.server.stop()

    def run_until_signal(self, *, on_started: Callable[[SimulationRuntime], object] | None = None
                         ) -> int:
        """Start (if needed), run until SIGINT or SIGTERM, stop at a tick boundary; returns
        the exit status (130 / 143). Call from the main thread; a second signal exits at
        once. Raises InstanceError when the host stops after an error instead."""
        with ShutdownSignals(raise_interrupt=False) as signals:
            try:
                if not self.host.running:
                    self.start()
                if on_started is not None:
                    on_started(self)
                while signals.wait(0.2) is None:
                    failure = self.host.failure
                    if failure is not None:
                        raise InstanceError(f"the simulation host stopped after an error: "
                                            f"{type(failure).__name__}: {failure}")
            finally:
                self.stop()
        return signals.exit_code

    def __enter__(self) -> SimulationRuntime:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
