"""fibril_sim/body_kinematics: world pose (wxyz) and twist of a body frame."""

from __future__ import annotations

import mujoco
import numpy as np

from .base import BuildContext, ComponentType, Field, ResolvedComponent, internal_name
from .device import DEVICE_FIELDS, Device, DeviceDescriptor, device_descriptor
from ._sensors import add_sensor, require_object

SAMPLE_TYPE = "fibril_sim/body_kinematics_sample/v1"
COMPONENTS = ("px", "py", "pz", "qw", "qx", "qy", "qz", "vx", "vy", "vz", "wx", "wy", "wz")
_PARTS = (("pos", mujoco.mjtSensor.mjSENS_FRAMEPOS, 3),
          ("quat", mujoco.mjtSensor.mjSENS_FRAMEQUAT, 4),
          ("linvel", mujoco.mjtSensor.mjSENS_FRAMELINVEL, 3),
          ("angvel", mujoco.mjtSensor.mjSENS_FRAMEANGVEL, 3))


class BodyKinematicsType(ComponentType):
    """Sample ``[px, py, pz, qw, qx, qy, qz, vx, vy, vz, wx, wy, wz]`` of the body frame in the
    world frame (velocities in world coordinates), like a motion-capture system or ground truth.
    """

    type_id = "fibril_sim/body_kinematics"
    role = "device"
    bind_keys = (("body",), ())
    fields = {
        **DEVICE_FIELDS,
        "position_noise": Field("float", 0.0, minimum=0.0, unit="m",
                                doc="position noise standard deviation"),
        "velocity_noise": Field("float", 0.0, minimum=0.0, unit="m/s",
                                doc="linear velocity noise standard deviation"),
    }

    def prepare(self, component: ResolvedComponent, spec: mujoco.MjSpec) -> None:
        body = component.bind["body"]
        require_object(spec, mujoco.mjtObj.mjOBJ_BODY, body, component.where.key("bind.body"))
        for part, sensor, _ in _PARTS:
            add_sensor(spec, component.id, part, sensor, mujoco.mjtObj.mjOBJ_XBODY, body)

    def bind(self, component: ResolvedComponent, ctx: BuildContext) -> DeviceDescriptor:
        adrs = [ctx.sensor(internal_name(component.id, part), component.where)[0]
                for part, _, _ in _PARTS]
        return device_descriptor(
            component, ctx, sample_type=SAMPLE_TYPE, component_names=COMPONENTS,
            frame_id="world",
            binding={"body": component.bind["body"], "sensor_adrs": adrs}, factory=BodyKinematics)


class BodyKinematics(Device):
    __slots__ = ("_index", "_std", "_noisy")

    def __init__(self, descriptor: DeviceDescriptor, rng: np.random.Generator) -> None:
        super().__init__(descriptor, rng)
        adrs = descriptor.binding["sensor_adrs"]
        self._index = np.concatenate([np.arange(adr, adr + width)
                                      for adr, (_, _, width) in zip(adrs, _PARTS)])
        config = descriptor.config
        self._std = np.array([config["position_noise"]] * 3 + [0.0] * 4
                             + [config["velocity_noise"]] * 6)
        self._noisy = bool(self._std.any())

    def acquire(self, model: mujoco.MjModel, data: mujoco.MjData) -> np.ndarray:
        values: np.ndarray = self.sensordata(data)[self._index]
        if self._noisy:
            values += self._std * self.normal(13)
        return values

    def block_inputs(self) -> tuple[tuple[str, tuple[int, ...]], ...]:
        return (("sensordata", tuple(self._index.tolist())),)

    def acquire_block(self, model: mujoco.MjModel, inputs: np.ndarray) -> np.ndarray:
        values = inputs.copy()
        if self._noisy:
            values += self._std * self.normal(13 * inputs.shape[0]).reshape(-1, 13)
        return values

    def skip(self, model: mujoco.MjModel, data: mujoco.MjData) -> None:
        if self._noisy:
            self.normal(13)

    def silent_draws(self) -> tuple[int, int]:
        return (13 if self._noisy else 0), 0
