"""SimulationConnection: what a client (a ROS node, a test, a GUI) may do with a running
simulation. It never exposes MjData: inputs go through the ingress, records come back through
callbacks, control goes through host requests served between frames."""

from __future__ import annotations

from typing import Any

from ..errors import InstanceError
from ..plan import SimulationPlan
from ..records import ExternalInput
from .host import RecordCallback, SimulationHost


class SimulationConnection:
    """What a client (a ROS node, a test, a GUI) may do with a running simulation."""

    def __init__(self, host: SimulationHost) -> None:
        self._host = host

    @property
    def plan(self) -> SimulationPlan:
        return self._host.instance.plan

    def submit(self, item: ExternalInput) -> int:
        """Thread-safe ingress; returns the acceptance sequence or raises IngressError."""
        return self._host.instance.enqueue(item)

    def on_record(self, callback: RecordCallback) -> None:
        """Receive every DeviceOutput, ActuatorApplication, IngressRecord, StateSnapshot and
        FrameTiming, on the host thread, as the simulation emits them."""
        self._host.add_callback(callback)

    def pause(self) -> dict[str, Any]:
        return self._host.request("pause")

    def resume(self) -> dict[str, Any]:
        return self._host.request("resume")

    def step(self, ticks: int) -> dict[str, Any]:
        """Advance exactly ``ticks`` ticks (while paused: lockstep) and return the state."""
        return self._host.request("step", ticks)

    def reset(self, keyframe: str | None = None, seed: int | None = None) -> dict[str, Any]:
        return self._host.request("reset", (keyframe, seed))

    def set_real_time_factor(self, factor: float) -> dict[str, Any]:
        if not factor > 0:
            raise InstanceError(f"real_time_factor must be > 0, got {factor!r}")
        return self._host.request("rtf", factor)

    def set_mode(self, mode: str) -> dict[str, Any]:
        if mode not in ("realtime", "fast"):
            raise InstanceError(f"mode must be 'realtime' or 'fast', got {mode!r}")
        return self._host.request("mode", mode)

    def state(self) -> dict[str, Any]:
        return self._host.request("state")
