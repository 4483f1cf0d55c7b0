"""fibril_sim/motor: an actuator endpoint on a MuJoCo actuator with driver semantics.

Payload ``fibril_sim/motor_command/v1``: ``{"mode": duty|voltage|torque|velocity|position,
"value": number}``. Which modes an actuator accepts follows from its MuJoCo inputs: a native DC
motor with a voltage input takes duty (× supply voltage) and voltage; its controller inputs take
position / velocity setpoints and torque feedforward; a position or velocity servo takes its
setpoint; any other actuator takes torque (actuator force = gain × ctrl).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import mujoco

from .._schema import short

from .base import BuildContext, ComponentType, Field, ResolvedComponent
from .endpoint import ActuatorDescriptor, Command, Endpoint

PAYLOAD_TYPE = "fibril_sim/motor_command/v1"
MODES = ("duty", "voltage", "torque", "velocity", "position")
_INPUT_ORDER = ((1, "position"), (2, "velocity"), (4, "torque"), (8, "voltage"))


class MotorType(ComponentType):
    type_id = "fibril_sim/motor"
    role = "actuator"
    bind_keys = (("actuator",), ())
    fields = {
        "supply_voltage": Field("float", 12.0, positive=True, doc="V; duty 1.0 ↦ this voltage"),
        "duty_limit": Field("float", 1.0, positive=True, maximum=1.0),
        "torque_limit": Field("float", 0.0, minimum=0.0, doc="|torque| clamp (0: none)"),
        "velocity_limit": Field("float", 0.0, minimum=0.0, doc="|velocity| clamp (0: none)"),
        "position_limits": Field("floats", (), doc="[min, max] setpoint clamp (empty: none)"),
        "command_latency": Field("duration", 0.0, minimum=0.0,
                                 doc="commit → release, s (whole ticks)"),
    }

    def bind(self, component: ResolvedComponent, ctx: BuildContext) -> ActuatorDescriptor:
        name = component.bind["actuator"]
        model = ctx.model
        aid = ctx.object_id(mujoco.mjtObj.mjOBJ_ACTUATOR, name,
                            component.where.key("bind.actuator"), "actuator")
        limits = component.config["position_limits"]
        if limits and (len(limits) != 2 or limits[0] > limits[1]):
            raise component.where.key("config.position_limits").fail(
                f"expected [min, max] with min <= max, got {list(limits)}")
        return ActuatorDescriptor(
            id=component.id,
            type=component.type,
            endpoint=component.endpoint or component.id,
            payload_type=PAYLOAD_TYPE,
            actuator=name,
            actuator_id=aid,
            modes=actuator_modes(model, aid),
            latency_ticks=ctx.ticks(component.config["command_latency"],
                                    component.where.key("config.command_latency")),
            binding={"actuator": name, "actuator_id": aid},
            config=dict(component.config),
            factory=Motor,
        )


def actuator_modes(model: mujoco.MjModel, aid: int) -> dict[str, int]:
    """Command modes of an actuator and the ctrl index each writes."""
    spec = int(model.actuator_ctrlspec[aid])
    base = int(model.actuator_ctrladr[aid])
    if spec == 0:
        return {"torque": base}
    modes: dict[str, int] = {}
    slot = 0
    for bit, mode in _INPUT_ORDER:
        if spec & bit:
            modes[mode] = base + slot
            slot += 1
    if "voltage" in modes:
        modes["duty"] = modes["voltage"]
    if spec & 16:  # passive: no inputs
        return {}
    return modes


class Motor(Endpoint):
    def __init__(self, descriptor: ActuatorDescriptor) -> None:
        super().__init__(descriptor)
        config = descriptor.config
        self._supply = config["supply_voltage"]
        self._config = config

    def parse(self, payload: Mapping[str, Any]) -> Command:
        extra = sorted(str(k)[:60] for k in set(payload) - {"mode", "value"})
        if extra:
            raise ValueError(f"unknown payload key(s) {', '.join(extra[:5])}; expected mode, "
                             f"value")
        mode = payload.get("mode")
        if mode not in MODES:
            raise ValueError(f"payload 'mode' must be one of {', '.join(MODES)}, got {short(mode)}")
        if mode not in self.descriptor.modes:
            accepted = ", ".join(self.descriptor.modes) or "none (passive actuator)"
            raise ValueError(f"mode {mode!r} is not accepted by actuator "
                             f"{self.descriptor.actuator!r}; accepted: {accepted}")
        value = payload.get("value")
        if isinstance(value, bool) or not isinstance(value, (int, float)) \
                or not math.isfinite(value):
            raise ValueError(f"payload 'value' must be a finite number, got {short(value)}")
        return Command(mode, float(value))

    def apply(self, data: mujoco.MjData, command: Command) -> float:
        index, value = self.control(command)
        data.ctrl[index] = value
        return value

    def control(self, command: Command) -> tuple[int, float]:
        config = self._config
        value = command.value
        mode = command.mode
        if mode == "duty":
            limit = config["duty_limit"]
            value = min(max(value, -limit), limit) * self._supply
        elif mode == "voltage":
            value = min(max(value, -self._supply), self._supply)
        elif mode == "torque" and config["torque_limit"]:
            value = min(max(value, -config["torque_limit"]), config["torque_limit"])
        elif mode == "velocity" and config["velocity_limit"]:
            value = min(max(value, -config["velocity_limit"]), config["velocity_limit"])
        elif mode == "position" and config["position_limits"]:
            low, high = config["position_limits"]
            value = min(max(value, low), high)
        return self.descriptor.modes[mode], value
