"""Actuator endpoints: where controller commands enter, pass a transport, and reach MuJoCo."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import mujoco


@dataclass(frozen=True)
class Command:
    """A validated command: the endpoint's mode and value, as the controller sent it."""

    mode: str
    value: float


@dataclass(frozen=True)
class ActuatorDescriptor:
    """Immutable description of one bound actuator endpoint."""

    id: str
    type: str
    endpoint: str
    payload_type: str
    actuator: str
    actuator_id: int
    modes: Mapping[str, int]  # mode -> index into d.ctrl
    latency_ticks: int
    binding: Mapping[str, Any]
    config: Mapping[str, Any]
    factory: Any = field(repr=False, compare=False)

    def create(self) -> Endpoint:
        return self.factory(self)


class Endpoint:
    """Per-instance driver of an endpoint: parse payloads, apply released commands."""

    def __init__(self, descriptor: ActuatorDescriptor) -> None:
        self.descriptor = descriptor

    def parse(self, payload: Mapping[str, Any]) -> Command:
        """Validate a payload; raise ValueError with a message naming the bad field."""
        raise NotImplementedError

    def apply(self, data: mujoco.MjData, command: Command) -> float:
        """Apply driver semantics and write MuJoCo's ctrl; return the applied value."""
        raise NotImplementedError

    def control(self, command: Command) -> tuple[int, float] | None:
        """``(ctrl index, value)`` that ``apply`` would write, when that depends on nothing but
        the command and the endpoint's config (None otherwise). Such endpoints let an instance
        replay a block of recorded commands in one ``mujoco.rollout`` call."""
        return None
