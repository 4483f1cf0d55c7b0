"""fibril_sim/planar_lidar: N rays in the xy plane of a site, cast with mj_multiRay."""

from __future__ import annotations

import math

import mujoco
import numpy as np

from .base import BuildContext, ComponentType, Field, ResolvedComponent
from .device import DEVICE_FIELDS, Device, DeviceDescriptor, device_descriptor

SAMPLE_TYPE = "fibril_sim/planar_lidar_scan/v1"


class PlanarLidarType(ComponentType):
    """Sample: ``rays`` ranges, ray i at angle ``angle_min + i * increment`` about the site z axis.

    Rays without a return within ``max_range`` report ``max_range``. The lidar's own body is
    excluded from the cast.
    """

    type_id = "fibril_sim/planar_lidar"
    role = "device"
    bind_keys = (("site",), ())
    fields = {
        **DEVICE_FIELDS,
        "rays": Field("int", 360, minimum=1, doc="rays per scan"),
        "fov": Field("float", 2 * math.pi, positive=True, maximum=2 * math.pi, unit="rad",
                     doc="field of view, centred on the site +x axis"),
        "min_range": Field("float", 0.0, minimum=0.0, unit="m",
                           doc="returns closer than this are no return"),
        "max_range": Field("float", 10.0, positive=True, unit="m",
                           doc="farthest return; rays without one report it"),
        "noise": Field("float", 0.0, minimum=0.0, unit="m", doc="range noise standard deviation"),
    }

    def bind(self, component: ResolvedComponent, ctx: BuildContext) -> DeviceDescriptor:
        site = component.bind["site"]
        sid = ctx.object_id(mujoco.mjtObj.mjOBJ_SITE, site, component.where.key("bind.site"),
                            "site")
        config = component.config
        rays = config["rays"]
        full = math.isclose(config["fov"], 2 * math.pi)
        increment = config["fov"] / (rays if full else max(rays - 1, 1))
        angle_min = -config["fov"] / 2 if not full else -math.pi
        return device_descriptor(
            component, ctx, sample_type=SAMPLE_TYPE,
            component_names=tuple(f"range_{i}" for i in range(rays)), frame_id=site,
            binding={"site": site, "site_id": sid, "body_id": int(ctx.model.site_bodyid[sid]),
                     "angle_min": angle_min, "angle_increment": increment},
            factory=PlanarLidar)


class PlanarLidar(Device):
    __slots__ = ("_site", "_body", "_local", "_vec", "_geomid", "_dist", "_n", "_cfg")

    def __init__(self, descriptor: DeviceDescriptor, rng: np.random.Generator) -> None:
        super().__init__(descriptor, rng)
        binding = descriptor.binding
        self._cfg = descriptor.config
        self._n = self._cfg["rays"]
        self._site = binding["site_id"]
        self._body = binding["body_id"]
        angles = binding["angle_min"] + binding["angle_increment"] * np.arange(self._n)
        self._local = np.stack((np.cos(angles), np.sin(angles), np.zeros(self._n)))
        self._vec = np.empty(3 * self._n)
        self._geomid = np.empty(self._n, dtype=np.int32)
        self._dist = np.empty(self._n)

    def acquire(self, model: mujoco.MjModel, data: mujoco.MjData) -> np.ndarray:
        rotation = data.site_xmat[self._site].reshape(3, 3)
        self._vec[:] = (rotation @ self._local).T.ravel()
        mujoco.mj_multiRay(model, data, data.site_xpos[self._site], self._vec, None, True,
                           self._body, self._geomid, self._dist, None, self._n,
                           self._cfg["max_range"])
        ranges = self._dist.copy()
        miss = (self._geomid < 0) | (ranges > self._cfg["max_range"]) | (ranges < 0)
        if self._cfg["noise"]:
            ranges += self._cfg["noise"] * self.normal(self._n)
        ranges = np.clip(ranges, self._cfg["min_range"], self._cfg["max_range"])
        ranges[miss] = self._cfg["max_range"]
        return ranges

    def skip(self, model: mujoco.MjModel, data: mujoco.MjData) -> None:
        if self._cfg["noise"]:  # no rays cast: only the draws
            self.normal(self._n)

    def silent_draws(self) -> tuple[int, int]:
        return (self._n if self._cfg["noise"] else 0), 0
