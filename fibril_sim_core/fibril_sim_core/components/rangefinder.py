"""fibril_sim/rangefinder: distance along a site's +z axis (MuJoCo rangefinder sensor)."""

from __future__ import annotations

import mujoco
import numpy as np

from .base import BuildContext, ComponentType, Field, ResolvedComponent, internal_name
from .device import DEVICE_FIELDS, Device, DeviceDescriptor, device_descriptor
from ._sensors import add_sensor, require_object

SAMPLE_TYPE = "fibril_sim/rangefinder_sample/v1"
COMPONENTS = ("distance", "hit")


class RangefinderType(ComponentType):
    """Sample ``[distance, hit]``; with no return in range: ``[max_range, 0]``."""

    type_id = "fibril_sim/rangefinder"
    role = "device"
    bind_keys = (("site",), ())
    fields = {
        **DEVICE_FIELDS,
        "min_range": Field("float", 0.0, minimum=0.0, unit="m",
                           doc="returns closer than this are no return"),
        "max_range": Field("float", 10.0, positive=True, unit="m",
                           doc="farthest return; no return reports [max_range, 0]"),
        "noise": Field("float", 0.0, minimum=0.0, unit="m",
                       doc="distance noise standard deviation"),
        "resolution": Field("float", 0.0, minimum=0.0, unit="m",
                            doc="distance quantum (0: none)"),
    }

    def prepare(self, component: ResolvedComponent, spec: mujoco.MjSpec) -> None:
        site = component.bind["site"]
        require_object(spec, mujoco.mjtObj.mjOBJ_SITE, site, component.where.key("bind.site"))
        add_sensor(spec, component.id, "range", mujoco.mjtSensor.mjSENS_RANGEFINDER,
                   mujoco.mjtObj.mjOBJ_SITE, site)

    def bind(self, component: ResolvedComponent, ctx: BuildContext) -> DeviceDescriptor:
        config = component.config
        if config["min_range"] >= config["max_range"]:
            raise component.where.key("config.min_range").fail(
                f"min_range {config['min_range']:g} must be below max_range "
                f"{config['max_range']:g}")
        adr, _ = ctx.sensor(internal_name(component.id, "range"), component.where)
        return device_descriptor(
            component, ctx, sample_type=SAMPLE_TYPE, component_names=COMPONENTS,
            frame_id=component.bind["site"],
            binding={"site": component.bind["site"], "sensor_adr": adr}, factory=Rangefinder)


class Rangefinder(Device):
    __slots__ = ("_adr", "_min", "_max", "_std", "_res")

    def __init__(self, descriptor: DeviceDescriptor, rng: np.random.Generator) -> None:
        super().__init__(descriptor, rng)
        config = descriptor.config
        self._adr = descriptor.binding["sensor_adr"]
        self._min, self._max = config["min_range"], config["max_range"]
        self._std, self._res = config["noise"], config["resolution"]

    def acquire(self, model: mujoco.MjModel, data: mujoco.MjData) -> np.ndarray:
        distance = self.sensordata(data).item(self._adr)
        if distance < 0 or distance > self._max or distance < self._min:
            return np.array((self._max, 0.0))
        if self._std:
            distance += self._std * float(self.normal(1)[0])
        if self._res:
            distance = round(distance / self._res) * self._res
        return np.array((min(max(distance, self._min), self._max), 1.0))

    def block_inputs(self) -> tuple[tuple[str, tuple[int, ...]], ...]:
        return (("sensordata", (self._adr,)),)

    def acquire_block(self, model: mujoco.MjModel, inputs: np.ndarray) -> np.ndarray:
        distance = inputs[:, 0].copy()
        # acquire's comparisons (a NaN is a return, as there)
        hit = ~((distance < 0) | (distance > self._max) | (distance < self._min))
        if self._std:  # a draw per return, in order
            distance[hit] += self._std * self.normal(int(np.count_nonzero(hit)))
        if self._res:  # round() to even; + 0.0 makes -0.0 the 0 that int * res gives
            distance = (np.rint(distance / self._res) + 0.0) * self._res
        # min(max(d, low), high) exactly as Python's: the first argument unless the other
        # is strictly beyond it (signed zeros and NaN as there)
        distance = np.where(self._min > distance, self._min, distance)
        distance = np.where(self._max < distance, self._max, distance)
        out = np.empty((distance.shape[0], 2))
        out[:, 0] = np.where(hit, distance, self._max)
        out[:, 1] = hit
        return out

    def skip(self, model: mujoco.MjModel, data: mujoco.MjData) -> None:
        if self._std:  # a draw only for a return in range, as in acquire
            distance = self.sensordata(data).item(self._adr)
            if not (distance < 0 or distance > self._max or distance < self._min):
                self.normal(1)

    def silent_draws(self) -> tuple[int, int] | None:
        return None if self._std else (0, 0)  # with noise a draw only for a return
