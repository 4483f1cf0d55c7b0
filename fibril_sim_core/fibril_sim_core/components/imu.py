"""fibril_sim/imu: gyro and accelerometer at a site, with per-axis bias and white noise."""

from __future__ import annotations

import mujoco
import numpy as np

from .base import BuildContext, ComponentType, Field, ResolvedComponent, internal_name
from .device import DEVICE_FIELDS, Device, DeviceDescriptor, device_descriptor
from ._sensors import add_sensor, require_object

SAMPLE_TYPE = "fibril_sim/imu_sample/v1"
COMPONENTS = ("gx", "gy", "gz", "ax", "ay", "az")


class ImuType(ComponentType):
    """Sample ``[gx, gy, gz, ax, ay, az]`` in the site frame (rad/s, m/s²)."""

    type_id = "fibril_sim/imu"
    role = "device"
    bind_keys = (("site",), ())
    fields = {
        **DEVICE_FIELDS,
        "gyro_noise": Field("float", 0.0, minimum=0.0, unit="rad/s",
                            doc="gyro white noise standard deviation"),
        "accel_noise": Field("float", 0.0, minimum=0.0, unit="m/s²",
                             doc="accelerometer white noise standard deviation"),
        "gyro_bias": Field("floats", (0.0, 0.0, 0.0), unit="rad/s", doc="gyro bias [x, y, z]"),
        "accel_bias": Field("floats", (0.0, 0.0, 0.0), unit="m/s²",
                            doc="accelerometer bias [x, y, z]"),
    }

    def prepare(self, component: ResolvedComponent, spec: mujoco.MjSpec) -> None:
        site = component.bind["site"]
        require_object(spec, mujoco.mjtObj.mjOBJ_SITE, site, component.where.key("bind.site"))
        add_sensor(spec, component.id, "gyro", mujoco.mjtSensor.mjSENS_GYRO,
                   mujoco.mjtObj.mjOBJ_SITE, site)
        add_sensor(spec, component.id, "accel", mujoco.mjtSensor.mjSENS_ACCELEROMETER,
                   mujoco.mjtObj.mjOBJ_SITE, site)

    def bind(self, component: ResolvedComponent, ctx: BuildContext) -> DeviceDescriptor:
        where = component.where.key("config")
        for key in ("gyro_bias", "accel_bias"):
            if len(component.config[key]) != 3:
                raise where.key(key).fail(
                    f"expected 3 values (x, y, z), got {len(component.config[key])}")
        gyro, _ = ctx.sensor(internal_name(component.id, "gyro"), where)
        accel, _ = ctx.sensor(internal_name(component.id, "accel"), where)
        return device_descriptor(
            component, ctx, sample_type=SAMPLE_TYPE, component_names=COMPONENTS,
            frame_id=component.bind["site"],
            binding={"site": component.bind["site"], "gyro_adr": gyro, "accel_adr": accel},
            factory=Imu)


class Imu(Device):
    __slots__ = ("_both", "_bias", "_std", "_noisy")

    def __init__(self, descriptor: DeviceDescriptor, rng: np.random.Generator) -> None:
        super().__init__(descriptor, rng)
        config = descriptor.config
        g = descriptor.binding["gyro_adr"]
        a = descriptor.binding["accel_adr"]
        # The two sensors are added back to back, so one slice reads both.
        assert a == g + 3, "gyro and accelerometer sensors must be adjacent"
        self._both = slice(g, g + 6)
        self._bias = np.array(tuple(config["gyro_bias"]) + tuple(config["accel_bias"]))
        self._std = np.array([config["gyro_noise"]] * 3 + [config["accel_noise"]] * 3)
        self._noisy = bool(self._std.any())

    def acquire(self, model: mujoco.MjModel, data: mujoco.MjData) -> np.ndarray:
        values: np.ndarray = self.sensordata(data)[self._both] + self._bias
        if self._noisy:
            values += self._std * self.normal(6)
        return values

    def block_inputs(self) -> tuple[tuple[str, tuple[int, ...]], ...]:
        return (("sensordata", tuple(range(self._both.start, self._both.stop))),)

    def acquire_block(self, model: mujoco.MjModel, inputs: np.ndarray) -> np.ndarray:
        values: np.ndarray = inputs + self._bias
        if self._noisy:
            values += self._std * self.normal(6 * inputs.shape[0]).reshape(-1, 6)
        return values

    def skip(self, model: mujoco.MjModel, data: mujoco.MjData) -> None:
        if self._noisy:
            self.normal(6)

    def silent_draws(self) -> tuple[int, int]:
        return (6 if self._noisy else 0), 0
