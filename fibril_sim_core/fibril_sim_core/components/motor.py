"""fibril_sim/motor: an actuator endpoint on a MuJoCo actuator with driver semantics.

Payload ``fibril_sim/motor_command/v1``: ``{"mode": duty|voltage|torque|velocity|position,
"value": number}``. The modes an actuator accepts follow from what it is (``classify_actuator``):

* a native DC motor or PID actuator (gaintype dcmotor / pid) takes its declared inputs
  (``actuator_ctrlspec``): duty (× supply voltage) and voltage, position / velocity setpoints,
  torque feedforward, each written to its own ctrl as given;
* a motor (fixed gain, no bias: the ctrl is a force) takes torque, written as the ctrl (the
  actuator force is gain × ctrl; the gain is the model's, which a calibration may fit);
* a position servo (fixed gain g, affine bias ``0, -kp, -kv``: MuJoCo's ``position`` or a
  ``general`` like Menagerie's) takes position: the target, in joint / tendon units, is the
  servo's setpoint, ``ctrl = target · kp / g`` (the setpoint of a servo whose bias gain kp
  differs from g, a gripper on 0..255, say, is ctrl · g / kp);
* a velocity servo (affine bias ``0, 0, -kv``) takes velocity: ``ctrl = target · kv / g``;
* an integrated-velocity servo (``intvelocity``: integrator dynamics and a position servo's
  bias) takes velocity: the value is the rate at which its position setpoint (the activation,
  held in actrange) moves, in joint units per second, ``ctrl = rate · kp / g``; the joint
  follows the setpoint through the servo, it does not hold that velocity under any load;
* anything else (damper, cylinder, muscle, orientation servo, user gains, other biases or
  dynamics) takes no command: its ctrl is not a force or a setpoint.

The ctrl written for a motor or a servo is clamped to the actuator's ctrlrange when that is
limited (after the endpoint's own torque / velocity / position limits, in command units).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import mujoco

from .._document import Node
from ..schema import short

from .base import BuildContext, ComponentType, Field, ResolvedComponent
from .endpoint import ActuatorDescriptor, ActuatorKind, Command, Endpoint

PAYLOAD_TYPE = "fibril_sim/motor_command/v1"
MODES = ("duty", "voltage", "torque", "velocity", "position")
_INPUT_ORDER = ((1, "position"), (2, "velocity"), (4, "torque"), (8, "voltage"))
_PASSIVE = 16   # mjINPUT_NONE: a DC motor with no inputs
_PRESSURE = 32  # mjINPUT_PRESSURE: a cylinder's ctrl
_SETPOINT_DYN = (mujoco.mjtDyn.mjDYN_NONE, mujoco.mjtDyn.mjDYN_FILTER,
                 mujoco.mjtDyn.mjDYN_FILTEREXACT)


class MotorType(ComponentType):
    type_id = "fibril_sim/motor"
    role = "actuator"
    bind_keys = (("actuator",), ())
    fields = {
        "supply_voltage": Field("float", 12.0, positive=True, unit="V",
                                doc="duty 1.0 ↦ this voltage; voltage commands clamp to it"),
        "duty_limit": Field("float", 1.0, positive=True, maximum=1.0, unit="1",
                            doc="|duty| clamp"),
        "torque_limit": Field("float", 0.0, minimum=0.0, unit="N·m or N",
                              doc="|torque| command clamp (0: none)"),
        "velocity_limit": Field("float", 0.0, minimum=0.0, unit="rad/s or m/s",
                                doc="|velocity| command clamp (0: none)"),
        "position_limits": Field("floats", (), unit="rad or m",
                                 doc="[min, max] position setpoint clamp (empty: none)"),
        "command_latency": Field("duration", 0.0, minimum=0.0, unit="s",
                                 doc="commit → release (a whole number of physics steps)"),
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
        modes, kind = classify_actuator(model, aid)
        return ActuatorDescriptor(
            id=component.id,
            type=component.type,
            endpoint=component.endpoint or component.id,
            payload_type=PAYLOAD_TYPE,
            actuator=name,
            actuator_id=aid,
            modes=modes,
            latency_ticks=ctx.ticks(component.config["command_latency"],
                                    component.where.key("config.command_latency")),
            binding={"actuator": name, "actuator_id": aid},
            config=dict(component.config),
            factory=Motor,
            kind=kind,
        )


def actuator_modes(model: mujoco.MjModel, aid: int) -> dict[str, int]:
    """Command modes of an actuator and the ctrl index each writes."""
    return classify_actuator(model, aid)[0]


def classify_actuator(model: mujoco.MjModel, aid: int) -> tuple[dict[str, int], ActuatorKind]:
    """The command modes of actuator ``aid`` (mode -> ctrl index) and what it is, from its
    gain, bias and dynamics types and parameters (see the module docstring for the rules)."""
    gaintype = int(model.actuator_gaintype[aid])
    base = int(model.actuator_ctrladr[aid])
    if gaintype in (mujoco.mjtGain.mjGAIN_DCMOTOR, mujoco.mjtGain.mjGAIN_PID):
        return _declared_inputs(model, aid, gaintype)
    if gaintype == mujoco.mjtGain.mjGAIN_SO3:
        return {}, ActuatorKind("orientation servo", f"{int(model.actuator_ctrlnum[aid])} "
                                "controls make one orientation target; a command is one number")
    gain = [float(v) for v in model.actuator_gainprm[aid][:3]]
    if gaintype == mujoco.mjtGain.mjGAIN_AFFINE:
        if gain[0] == 0.0 and gain[1] == 0.0 and gain[2] < 0.0:
            return {}, ActuatorKind("damper", f"kv {-gain[2]:g}; its ctrl scales the damping, "
                                    "it is neither a force nor a setpoint")
        return {}, ActuatorKind("affine-gain actuator", f"gain {_numbers(gain)}; its ctrl is "
                                "neither a force nor a setpoint")
    if gaintype != mujoco.mjtGain.mjGAIN_FIXED:
        name = {mujoco.mjtGain.mjGAIN_MUSCLE: "muscle"}.get(gaintype, "user-defined actuator")
        return {}, ActuatorKind(name, "its ctrl is neither a force nor a setpoint")
    g = gain[0]
    biastype = int(model.actuator_biastype[aid])
    bias = [float(v) for v in model.actuator_biasprm[aid][:3]]
    dyn = int(model.actuator_dyntype[aid])
    limited = bool(model.actuator_ctrllimited[aid])
    low, high = model.actuator_ctrlrange[aid]
    ctrlrange = (float(low), float(high)) if limited else None
    if int(model.actuator_ctrlspec[aid]) & _PRESSURE:
        return {}, ActuatorKind("cylinder", f"area {g:g}; its ctrl is a pressure")
    if not (math.isfinite(g) and g > 0.0):
        return {}, ActuatorKind("actuator", f"gain {g:g}; no command moves it")
    unbiased = biastype == mujoco.mjtBias.mjBIAS_NONE or (
        biastype == mujoco.mjtBias.mjBIAS_AFFINE and bias == [0.0, 0.0, 0.0])
    filtered = "" if dyn == mujoco.mjtDyn.mjDYN_NONE else f", {_dyn_name(dyn)} dynamics"
    if unbiased and dyn in _SETPOINT_DYN:
        name = ("adhesion actuator" if int(model.actuator_trntype[aid]) ==
                mujoco.mjtTrn.mjTRN_BODY else "motor")
        return {"torque": base}, ActuatorKind(name, f"gain {g:g}{filtered}", 1.0, ctrlrange)
    if biastype == mujoco.mjtBias.mjBIAS_AFFINE and bias[0] == 0.0:
        kp, kv = 0.0 - bias[1], 0.0 - bias[2]
        servo = f"kp {kp:g}, kv {kv:g}" + (f", gain {g:g}" if kp != g and kp > 0 else "")
        if kp > 0.0 and dyn in _SETPOINT_DYN:
            return {"position": base}, ActuatorKind("position servo", servo + filtered,
                                                    kp / g, ctrlrange)
        if kp > 0.0 and dyn == mujoco.mjtDyn.mjDYN_INTEGRATOR:
            return {"velocity": base}, ActuatorKind("integrated-velocity servo", servo,
                                                    kp / g, ctrlrange)
        if kp == 0.0 and kv > 0.0 and dyn in _SETPOINT_DYN:
            detail = f"kv {kv:g}" + (f", gain {g:g}" if kv != g else "") + filtered
            return {"velocity": base}, ActuatorKind("velocity servo", detail, kv / g,
                                                    ctrlrange)
    reason = ("its ctrl drives an activation, not a force" if unbiased else
              "neither a motor nor a position or velocity servo")
    return {}, ActuatorKind("actuator", f"gain {g:g}, bias {_bias_name(biastype)} "
                            f"{_numbers(bias)}, {_dyn_name(dyn)} dynamics; {reason}")


def _declared_inputs(model: mujoco.MjModel, aid: int, gaintype: int
                     ) -> tuple[dict[str, int], ActuatorKind]:
    """A DC motor's or PID actuator's declared inputs, each on its own ctrl, as given."""
    spec = int(model.actuator_ctrlspec[aid])
    base = int(model.actuator_ctrladr[aid])
    name = "DC motor" if gaintype == mujoco.mjtGain.mjGAIN_DCMOTOR else "PID actuator"
    if spec & _PASSIVE:  # passive: no inputs
        return {}, ActuatorKind(name, "passive, declared with no inputs")
    modes: dict[str, int] = {}
    slot = 0
    for bit, mode in _INPUT_ORDER:
        if spec & bit:
            modes[mode] = base + slot
            slot += 1
    if "voltage" in modes:
        modes["duty"] = modes["voltage"]
    inputs = [mode for _, mode in _INPUT_ORDER if mode in modes]
    return modes, ActuatorKind(name, f"inputs {', '.join(inputs) or 'none'}")


def _numbers(values: list[float]) -> str:
    return " ".join(f"{v:g}" for v in values)


def _dyn_name(dyn: int) -> str:
    name: str = mujoco.mjtDyn(dyn).name
    return name.removeprefix("mjDYN_").lower()


def _bias_name(bias: int) -> str:
    name: str = mujoco.mjtBias(bias).name
    return name.removeprefix("mjBIAS_").lower()


class Motor(Endpoint):
    def __init__(self, descriptor: ActuatorDescriptor) -> None:
        super().__init__(descriptor)
        config = descriptor.config
        self._supply = config["supply_voltage"]
        self._config = config

    def parse(self, payload: Mapping[str, Node]) -> Command:
        extra = sorted(str(k)[:60] for k in set(payload) - {"mode", "value"})
        if extra:
            raise ValueError(f"unknown payload key(s) {', '.join(extra[:5])}; expected mode, "
                             f"value")
        mode = payload.get("mode")
        if not isinstance(mode, str) or mode not in MODES:  # (a tuple: == for any value)
            raise ValueError(f"payload 'mode' must be one of {', '.join(MODES)}, got {short(mode)}")
        if mode not in self.descriptor.modes:
            raise ValueError(self.descriptor.refusal(mode))
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
        """The endpoint's limits in command units, then the actuator's ctrl: ``value × scale``
        clamped to its ctrlrange (DC motors and PID actuators: as given, scale 1, no range)."""
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
        kind = self.descriptor.kind
        if kind.scale != 1.0:
            value *= kind.scale
        if kind.ctrlrange is not None:
            value = min(max(value, kind.ctrlrange[0]), kind.ctrlrange[1])
        return self.descriptor.modes[mode], value
