"""fibril_sim/encoder: a quantizing joint encoder on a hinge or slide joint."""

from __future__ import annotations

import math

import mujoco
import numpy as np

from .base import BuildContext, ComponentType, Field, ResolvedComponent, internal_name
from .device import DEVICE_FIELDS, Device, DeviceDescriptor, device_descriptor
from ._sensors import add_sensor, require_scalar_joint

SAMPLE_TYPE = "fibril_sim/encoder_sample/v1"
COMPONENTS = ("position", "velocity", "counts")


class EncoderType(ComponentType):
    """Counts of a hinge (per revolution) or slide (per metre) joint, with offset, bias, noise.

    Sample ``[position, velocity, counts]``: position is the quantized reading in joint units,
    velocity the finite difference of quantized positions over the period.
    """

    type_id = "fibril_sim/encoder"
    role = "device"
    bind_keys = (("joint",), ())
    fields = {
        **DEVICE_FIELDS,
        "counts_per_revolution": Field("float", 4096.0, positive=True, unit="1/rev or 1/m",
                                       doc="hinge: counts per 2π rad; slide: counts per metre"),
        "offset": Field("float", 0.0, unit="rad or m",
                        doc="mounting offset added to the joint value"),
        "bias": Field("float", 0.0, unit="rad or m", doc="reading bias added to the joint value"),
        "noise_counts": Field("float", 0.0, minimum=0.0, unit="counts",
                              doc="white noise standard deviation"),
    }

    def prepare(self, component: ResolvedComponent, spec: mujoco.MjSpec) -> None:
        joint = component.bind["joint"]
        require_scalar_joint(spec, joint, component.where.key("bind.joint"))
        add_sensor(spec, component.id, "jointpos", mujoco.mjtSensor.mjSENS_JOINTPOS,
                   mujoco.mjtObj.mjOBJ_JOINT, joint)

    def bind(self, component: ResolvedComponent, ctx: BuildContext) -> DeviceDescriptor:
        where = component.where.key("bind.joint")
        joint = component.bind["joint"]
        jid = ctx.object_id(mujoco.mjtObj.mjOBJ_JOINT, joint, where, "joint")
        jtype = int(ctx.model.jnt_type[jid])
        if jtype not in (mujoco.mjtJoint.mjJNT_HINGE, mujoco.mjtJoint.mjJNT_SLIDE):
            raise where.fail(f"joint {joint!r} is not a hinge or slide joint")
        adr, _ = ctx.sensor(internal_name(component.id, "jointpos"), where)
        cpr = component.config["counts_per_revolution"]
        per_unit = cpr / (2 * math.pi) if jtype == mujoco.mjtJoint.mjJNT_HINGE else cpr
        return device_descriptor(
            component, ctx, sample_type=SAMPLE_TYPE, component_names=COMPONENTS,
            frame_id=joint,
            binding={"joint": joint, "joint_id": jid, "sensor_adr": adr,
                     "counts_per_unit": per_unit},
            factory=Encoder)


class Encoder(Device):
    __slots__ = ("_adr", "_per_unit", "_shift", "_noise_std", "_last", "_dt")
    SILENT_STATE = True  # the next velocity needs the last position

    def __init__(self, descriptor: DeviceDescriptor, rng: np.random.Generator) -> None:
        super().__init__(descriptor, rng)
        config = descriptor.config
        self._adr = descriptor.binding["sensor_adr"]
        self._per_unit = descriptor.binding["counts_per_unit"]
        self._shift = config["offset"] + config["bias"]
        self._noise_std = config["noise_counts"]
        self._last: float | None = None
        self._dt = 0.0

    def acquire(self, model: mujoco.MjModel, data: mujoco.MjData) -> np.ndarray:
        sensordata = self._sensordata if data is self._data else self.sensordata(data)
        raw = (sensordata.item(self._adr) + self._shift) * self._per_unit
        if self._noise_std:
            scalars = self._scalars  # normal1(), inlined: this runs at kHz rates
            raw += self._noise_std * (scalars.pop() if scalars else self.normal1())
        counts = float(round(raw))
        position = counts / self._per_unit
        if not self._dt:
            self._dt = self.descriptor.period_ticks * model.opt.timestep
        last = self._last
        self._last = position
        return np.array((position, 0.0 if last is None else (position - last) / self._dt,
                         counts))

    def block_inputs(self) -> tuple[tuple[str, tuple[int, ...]], ...]:
        return (("sensordata", (self._adr,)),)

    def acquire_block(self, model: mujoco.MjModel, inputs: np.ndarray) -> np.ndarray:
        raw = (inputs[:, 0] + self._shift) * self._per_unit
        if self._noise_std:
            raw += self._noise_std * self.normal1_many(raw.shape[0])
        counts = np.rint(raw)  # round() to even, as acquire's round(); + 0.0 makes -0.0 0.0
        counts += 0.0
        position = counts / self._per_unit
        if not self._dt:
            self._dt = self.descriptor.period_ticks * model.opt.timestep
        out = np.empty((raw.shape[0], 3))
        out[:, 0] = position
        out[:, 2] = counts
        if raw.shape[0]:
            out[1:, 1] = (position[1:] - position[:-1]) / self._dt
            last = self._last
            out[0, 1] = 0.0 if last is None else (position.item(0) - last) / self._dt
            self._last = position.item(-1)
        return out

    def skip(self, model: mujoco.MjModel, data: mujoco.MjData) -> None:
        """The quantized position is the encoder's state (the next velocity needs it)."""
        sensordata = self._sensordata if data is self._data else self.sensordata(data)
        raw = (sensordata.item(self._adr) + self._shift) * self._per_unit
        if self._noise_std:
            scalars = self._scalars
            raw += self._noise_std * (scalars.pop() if scalars else self.normal1())
        self._last = float(round(raw)) / self._per_unit

    def silent_draws(self) -> tuple[int, int]:
        return 0, (1 if self._noise_std else 0)
