"""fibril_sim/camera: RGB or depth images of a MuJoCo camera through an offscreen renderer."""

from __future__ import annotations

import mujoco
import numpy as np

from ..errors import ComponentError
from .base import BuildContext, ComponentType, Field, ResolvedComponent
from .device import DEVICE_FIELDS, Device, DeviceDescriptor, device_descriptor

RGB_SAMPLE_TYPE = "fibril_sim/camera_rgb/v1"
DEPTH_SAMPLE_TYPE = "fibril_sim/camera_depth/v1"


class CameraType(ComponentType):
    """Sample: the image flattened row-major (RGB: height × width × 3 in 0..255; depth: metres).

    Rendering needs an offscreen OpenGL context (``MUJOCO_GL=egl`` or ``osmesa``); without one,
    creating an instance fails with an error naming what is missing.
    """

    type_id = "fibril_sim/camera"
    role = "device"
    bind_keys = (("camera",), ())
    fields = {
        **DEVICE_FIELDS,
        "width": Field("int", 320, minimum=1, unit="px", doc="image width"),
        "height": Field("int", 240, minimum=1, unit="px", doc="image height"),
        "depth": Field("bool", False, doc="depth image in metres instead of RGB"),
    }

    def bind(self, component: ResolvedComponent, ctx: BuildContext) -> DeviceDescriptor:
        name = component.bind["camera"]
        cid = ctx.object_id(mujoco.mjtObj.mjOBJ_CAMERA, name,
                            component.where.key("bind.camera"), "camera")
        config = component.config
        depth = config["depth"]
        size = config["width"] * config["height"] * (1 if depth else 3)
        return device_descriptor(
            component, ctx, sample_type=DEPTH_SAMPLE_TYPE if depth else RGB_SAMPLE_TYPE,
            component_names=(f"{'depth' if depth else 'rgb'}[{size}]",), frame_id=name,
            binding={"camera": name, "camera_id": cid, "model": ctx.model}, factory=Camera)


class Camera(Device):
    __slots__ = ("_renderer", "_camera")

    def __init__(self, descriptor: DeviceDescriptor, rng: np.random.Generator) -> None:
        super().__init__(descriptor, rng)
        self._renderer = open_renderer(descriptor, descriptor.binding["model"])
        self._camera = descriptor.binding["camera_id"]

    def acquire(self, model: mujoco.MjModel, data: mujoco.MjData) -> np.ndarray:
        self._renderer.update_scene(data, camera=self._camera)
        return np.asarray(self._renderer.render(), dtype=np.float64).ravel()

    def skip(self, model: mujoco.MjModel, data: mujoco.MjData) -> None:
        """No noise, no state: nothing is rendered."""

    def silent_draws(self) -> tuple[int, int]:
        return 0, 0


GL_FAILURE: list[str] = []  # a failed GL start is not retried: MuJoCo aborts on a second try


def open_renderer(descriptor: DeviceDescriptor, model: mujoco.MjModel) -> mujoco.Renderer:
    """Create the offscreen renderer, or explain which GL piece is missing."""
    config = descriptor.config
    try:
        if GL_FAILURE:
            raise RuntimeError(GL_FAILURE[0])
        renderer = mujoco.Renderer(model, height=config["height"], width=config["width"])
    except Exception as exc:  # noqa: BLE001 - any GL failure becomes one clear message
        if not GL_FAILURE:
            GL_FAILURE.append(str(exc))
        raise ComponentError(
            f"camera device {descriptor.id!r} ({descriptor.binding['camera']}): no offscreen "
            f"OpenGL context available ({type(exc).__name__}: {exc}); install EGL or OSMesa "
            f"(e.g. Debian's libegl1 or libosmesa6) and set MUJOCO_GL=egl or MUJOCO_GL=osmesa"
        ) from None
    if config["depth"]:
        renderer.enable_depth_rendering()
    return renderer
