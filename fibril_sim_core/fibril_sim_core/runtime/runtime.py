"""SimulationRuntime: owns the live simulation's process boundary (a host and its
connections) for one plan."""

from __future__ import annotations

from typing import Any

from ..manifest import RuntimeOptions
from ..plan import SimulationPlan
from ..records import FrameTiming
from .connection import SimulationConnection
from .host import SimulationHost


class SimulationRuntime:
    """Builds the instance and host for a plan and hands out connections."""

    def __init__(self, plan: SimulationPlan, *, seed: int = 0, trace: Any = None,
                 options: RuntimeOptions | None = None) -> None:
        self.plan = plan
        self.instance = plan.create_instance(seed, trace=trace, collect=False)
        self.host = SimulationHost(self.instance, options or plan.manifest.runtime)
        if trace is not None and plan.manifest.trace.frame_timing:
            self.host.add_callback(
                lambda record: trace.write(record) if isinstance(record, FrameTiming) else None)

    def connect(self) -> SimulationConnection:
        return SimulationConnection(self.host)

    def start(self) -> SimulationRuntime:
        self.host.start()
        return self

    def stop(self) -> None:
        self.host.stop()

    def __enter__(self) -> SimulationRuntime:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
