"""Render observations: images of a MuJoCo camera that the host takes at frame boundaries.

This is the viewer / GUI channel, not a sensor (the camera *device* component, with period,
latency and noise, is separate). The host owns the offscreen GL context (``mujoco.Renderer``)
and uses it only on its own thread; a client asks for a camera at a size and a rate in
simulated time and receives ``RenderFrame`` records. ``MUJOCO_GL=egl`` or ``osmesa`` selects the
offscreen platform as MuJoCo documents; without a usable GL context the request is refused with
an InstanceError and the simulation keeps running.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field

import mujoco
import numpy as np

from ..components.camera import GL_FAILURE
from ..errors import InstanceError
from ..records import RenderFrame
from .streams import StreamTable

RenderSink = Callable[[RenderFrame], None]
_SCENE_STATE = mujoco.mjtState.mjSTATE_INTEGRATION
FREE_CAMERA = ""


@dataclass(frozen=True, slots=True)
class RenderRequest:
    """A stream of frames of ``camera`` (an MJCF camera name; "" or None: the free camera)."""

    camera: str | None
    width: int
    height: int
    rate_hz: float
    depth: bool = False

    def checked(self, model: mujoco.MjModel) -> RenderRequest:
        camera = self.camera or FREE_CAMERA
        if camera and mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_CAMERA, camera) < 0:
            names = [mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_CAMERA, i)
                     for i in range(model.ncam)]
            raise InstanceError(f"render: no camera named {camera!r} in the model; cameras: "
                                f"{', '.join(n for n in names if n) or 'none'} (or '' for the "
                                f"free camera)")
        sizes: tuple[tuple[str, object], ...] = (("width", self.width), ("height", self.height))
        for name, value in sizes:  # (whatever a client sent)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise InstanceError(f"render: {name} must be a positive integer, got {value!r}")
        limit_w, limit_h = model.vis.global_.offwidth, model.vis.global_.offheight
        if self.width > limit_w or self.height > limit_h:
            raise InstanceError(f"render: {self.width}x{self.height} is larger than the model's "
                                f"offscreen buffer {limit_w}x{limit_h} (raise <visual><global "
                                f"offwidth=... offheight=.../> in the MJCF)")
        rate: object = self.rate_hz  # (whatever a client sent)
        if not (isinstance(rate, (int, float)) and 0 < rate < float("inf")):
            raise InstanceError(f"render: rate_hz must be > 0, got {rate!r}")
        return RenderRequest(camera, self.width, self.height, float(self.rate_hz),
                             bool(self.depth))


@dataclass
class _Stream:
    id: int
    request: RenderRequest
    sink: RenderSink
    period_ticks: int
    due: int  # session tick of the next frame
    owner: object = None


@dataclass
class RenderStreams(StreamTable[_Stream]):
    """The host's render streams and the renderers (one per image size) they share."""

    model: mujoco.MjModel
    timestep_ns: int
    streams: dict[int, _Stream] = field(default_factory=dict)
    _renderers: dict[tuple[int, int], mujoco.Renderer] = field(default_factory=dict)
    _next_id: int = 1
    _data: mujoco.MjData | None = None
    _state: np.ndarray | None = None

    def add(self, request: RenderRequest, sink: RenderSink, session_tick: int,
            owner: object = None) -> int:
        """Start a stream (host thread); its first frame is taken at the next boundary."""
        request = request.checked(self.model)
        self._renderer(request.width, request.height)  # refuse now if there is no GL
        period_ns = 1e9 / request.rate_hz
        period = max(1, round(period_ns / self.timestep_ns))
        return self._keep(_Stream(self._next_id, request, sink, period, session_tick, owner))

    def render_due(self, episode: int, tick: int, session_tick: int,
                   data: mujoco.MjData) -> None:
        scene = None
        for stream in list(self.streams.values()):
            if stream.due > session_tick:
                continue
            if scene is None:
                scene = self._scene(data)
            request = stream.request
            renderer = self._renderer(request.width, request.height)
            camera = request.camera or -1
            renderer.update_scene(scene, camera=camera)
            rgb = renderer.render()
            depth = None
            if request.depth:
                renderer.enable_depth_rendering()
                try:
                    depth = renderer.render().copy()
                finally:
                    renderer.disable_depth_rendering()
            stream.due = session_tick + stream.period_ticks
            stream.sink(RenderFrame(stream.id, request.camera or FREE_CAMERA, episode, tick,
                                    session_tick * self.timestep_ns, rgb.copy(), depth))

    def _scene(self, data: mujoco.MjData) -> mujoco.MjData:
        """A copy of the state x(t) with its kinematics, for drawing: the instance's MjData
        is left alone (its derived quantities belong to x(t-1), see instance.py)."""
        model = self.model
        if self._data is None:
            self._data = mujoco.MjData(model)
            self._state = np.empty(mujoco.mj_stateSize(model, _SCENE_STATE))
        mujoco.mj_getState(model, data, self._state, _SCENE_STATE)
        mujoco.mj_setState(model, self._data, self._state, _SCENE_STATE)
        mujoco.mj_forward(model, self._data)
        return self._data

    def close(self) -> None:
        """Free the GL contexts (host thread)."""
        self.streams.clear()
        for renderer in self._renderers.values():
            try:
                renderer.close()
            except Exception:  # noqa: BLE001 - a context that fails to free is gone anyway
                pass
        self._renderers.clear()

    def _renderer(self, width: int, height: int) -> mujoco.Renderer:
        key = (width, height)
        renderer = self._renderers.get(key)
        if renderer is None:
            # GL_FAILURE is shared with the camera device: MuJoCo aborts the process when a GL
            # context is requested again after one failed, so a failure is remembered.
            try:
                if GL_FAILURE:
                    raise RuntimeError(GL_FAILURE[0])
                renderer = mujoco.Renderer(self.model, height, width)
            except Exception as exc:  # noqa: BLE001 - no GL: refuse the request, keep running
                if not GL_FAILURE:
                    GL_FAILURE.append(str(exc))
                platform = os.environ.get("MUJOCO_GL") or "unset"
                raise InstanceError(
                    f"render: no offscreen OpenGL context (MUJOCO_GL={platform}): "
                    f"{' '.join(str(exc).split())[:200]}; set MUJOCO_GL=egl (libEGL) or "
                    f"MUJOCO_GL=osmesa (libOSMesa)") from None
            self._renderers[key] = renderer
        return renderer
