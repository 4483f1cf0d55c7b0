"""fibril_sim/digital_input: a binary input from a threshold on a signal, or from contact."""

from __future__ import annotations

import mujoco
import numpy as np

from .base import BuildContext, ComponentType, Field, ResolvedComponent, internal_name
from .device import DEVICE_FIELDS, Device, DeviceDescriptor, device_descriptor
from ._sensors import add_sensor, require_scalar_joint

SAMPLE_TYPE = "fibril_sim/digital_input_sample/v1"
COMPONENTS = ("state",)


class DigitalInputType(ComponentType):
    """Threshold mode binds ``joint`` (its position) or ``sensor`` (its first value); the state is
    1 when the value exceeds ``threshold`` (``invert`` flips it). Contact mode binds ``body`` or
    ``geom``; the state is 1 while any contact touches it.
    """

    type_id = "fibril_sim/digital_input"
    role = "device"
    bind_keys = ((), ("joint", "sensor", "body", "geom"))
    fields = {
        **DEVICE_FIELDS,
        "mode": Field("str", "threshold", choices=("threshold", "contact"),
                      doc="threshold: a joint position or sensor value above threshold; "
                          "contact: any contact on the body or geom"),
        "threshold": Field("float", 0.0, unit="joint or sensor units",
                           doc="the state is 1 above this value (threshold mode)"),
        "invert": Field("bool", False, doc="flip the state"),
    }

    def check_bind(self, component: ResolvedComponent) -> None:
        super().check_bind(component)
        allowed = ("joint", "sensor") if component.config["mode"] == "threshold" else (
            "body", "geom")
        given = sorted(component.bind)
        if len(given) != 1 or given[0] not in allowed:
            raise component.where.key("bind").fail(
                f"mode {component.config['mode']!r} needs exactly one of "
                f"{' or '.join(allowed)}, got {', '.join(given) or 'nothing'}")

    def prepare(self, component: ResolvedComponent, spec: mujoco.MjSpec) -> None:
        if "joint" in component.bind:
            joint = component.bind["joint"]
            require_scalar_joint(spec, joint, component.where.key("bind.joint"))
            add_sensor(spec, component.id, "jointpos", mujoco.mjtSensor.mjSENS_JOINTPOS,
                       mujoco.mjtObj.mjOBJ_JOINT, joint)

    def bind(self, component: ResolvedComponent, ctx: BuildContext) -> DeviceDescriptor:
        bind = component.bind
        binding: dict[str, object] = dict(bind)
        if "joint" in bind:
            binding["sensor_adr"] = ctx.sensor(internal_name(component.id, "jointpos"),
                                               component.where)[0]
        elif "sensor" in bind:
            binding["sensor_adr"] = ctx.sensor(bind["sensor"], component.where.key("bind.sensor"))[0]
        elif "body" in bind:
            binding["body_id"] = ctx.object_id(mujoco.mjtObj.mjOBJ_BODY, bind["body"],
                                               component.where.key("bind.body"), "body")
        else:
            binding["geom_id"] = ctx.object_id(mujoco.mjtObj.mjOBJ_GEOM, bind["geom"],
                                               component.where.key("bind.geom"), "geom")
        return device_descriptor(
            component, ctx, sample_type=SAMPLE_TYPE, component_names=COMPONENTS,
            frame_id=next(iter(bind.values())), binding=binding, factory=DigitalInput)


class DigitalInput(Device):
    __slots__ = ("_binding", "_threshold", "_invert")

    def __init__(self, descriptor: DeviceDescriptor, rng: np.random.Generator) -> None:
        super().__init__(descriptor, rng)
        self._binding = descriptor.binding
        self._threshold = descriptor.config["threshold"]
        self._invert = descriptor.config["invert"]

    def acquire(self, model: mujoco.MjModel, data: mujoco.MjData) -> np.ndarray:
        binding = self._binding
        if "sensor_adr" in binding:
            state = bool(data.sensordata[binding["sensor_adr"]] > self._threshold)
        elif data.ncon == 0:
            state = False
        else:
            geoms = data.contact.geom[:data.ncon]
            if "geom_id" in binding:
                state = bool((geoms == binding["geom_id"]).any())
            else:
                state = bool((model.geom_bodyid[geoms] == binding["body_id"]).any())
        return np.array((float(state != self._invert),))

    def block_inputs(self) -> tuple[tuple[str, tuple[int, ...]], ...] | None:
        adr = self._binding.get("sensor_adr")  # contacts are not an array read
        return None if adr is None else (("sensordata", (adr,)),)

    def acquire_block(self, model: mujoco.MjModel, inputs: np.ndarray) -> np.ndarray:
        state = inputs[:, :1] > self._threshold
        values: np.ndarray = (state != self._invert).astype(np.float64)
        return values

    def skip(self, model: mujoco.MjModel, data: mujoco.MjData) -> None:
        """No noise, no state: nothing to do."""

    def silent_draws(self) -> tuple[int, int]:
        return 0, 0
