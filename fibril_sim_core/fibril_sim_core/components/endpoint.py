"""Actuator endpoints: where controller commands enter, pass a transport, and reach MuJoCo."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import mujoco

from .._document import JsonValue, Node


@dataclass(frozen=True)
class Command:
    """A validated command: the endpoint's mode and value, as the controller sent it."""

    mode: str
    value: float


@dataclass(frozen=True)
class ActuatorKind:
    """What a MuJoCo actuator is, as far as commands go, and how a command becomes its ctrl.

    ``name`` says what the actuator is ("position servo", "DC motor", ...) and ``detail`` the
    numbers that make it so (or why it takes no command); a refused mode quotes both. A
    command's value (after the endpoint's own limits) becomes ``ctrl = value × scale``, then
    clamped to ``ctrlrange`` when the actuator's ctrl is limited (None: not clamped here).
    """

    name: str
    detail: str = ""
    scale: float = 1.0
    ctrlrange: tuple[float, float] | None = None

    def describe(self) -> str:
        """``"a position servo: kp 4500, kv 450"``."""
        article = "an" if self.name[:1] in ("a", "e", "i", "o") else "a"
        return f"{article} {self.name}" + (f": {self.detail}" if self.detail else "")


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
    binding: Mapping[str, JsonValue]  # (what ``inspect`` shows)
    config: Mapping[str, Any]
    factory: Callable[[ActuatorDescriptor], Endpoint] = field(repr=False, compare=False)
    kind: ActuatorKind = ActuatorKind("actuator")

    def create(self) -> Endpoint:
        return self.factory(self)

    def describe_modes(self) -> str:
        """The modes this endpoint takes and why: ``"position (a position servo: kp 4500,
        kv 450)"``, or ``"none (a damper: ...)"``."""
        return f"{', '.join(self.modes) or 'none'} ({self.kind.describe()})"

    def refusal(self, mode: str) -> str:
        """The one-line reason ``mode`` is refused, naming the modes accepted and why."""
        return (f"mode {mode!r} is not accepted by actuator {self.actuator!r} "
                f"({self.kind.describe()}); accepted: {', '.join(self.modes) or 'none'}")


class Endpoint:
    """Per-instance driver of an endpoint: parse payloads, apply released commands."""

    def __init__(self, descriptor: ActuatorDescriptor) -> None:
        self.descriptor = descriptor

    def parse(self, payload: Mapping[str, Node]) -> Command:
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
