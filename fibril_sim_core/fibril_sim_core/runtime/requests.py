"""The requests a SimulationHost serves between frames, one frozen dataclass each.

A request is checked when it is made (``__post_init__``, InstanceError naming the bad value),
so the host thread only ever sees well-formed ones. What serving it does to real-time pacing
is a property of its class: ``resync`` (pacing restarts from now afterwards) and ``repace``
(the measured real-time factor starts afresh); ``advances``: it steps or resets, so an
error while serving it stops the host. The type parameter is what ``SimulationHost.request``
returns for it.

``host_request(action, argument)`` builds one from the string form (an action name and its
argument) that older callers and tests use.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, SupportsIndex, TypeVar

from ..entities import EntityState
from ..errors import InstanceError
from ..manifest import real_time_factor_problem
from ..records import RenderFrame, StateObservation
from .observation import ObservationRequest
from .render import RenderRequest

R = TypeVar("R", covariant=True)  # (a request only names its result's type)
State = dict[str, Any]  # the host's state() document (JSON-like, sent to remote clients)
MODES = ("realtime", "fast")


@dataclass(frozen=True, slots=True)
class HostRequest(Generic[R]):
    """Something the host does between frames; ``R``: what the caller gets back."""

    action: ClassVar[str] = ""  # the name errors and the string form use
    resync: ClassVar[bool] = False  # real-time pacing restarts from now after it
    repace: ClassVar[bool] = False  # the measured real-time factor counts afresh
    advances: ClassVar[bool] = False  # steps or resets: an error in it stops the host


@dataclass(frozen=True, slots=True)
class Pause(HostRequest[State]):
    action: ClassVar[str] = "pause"
    repace: ClassVar[bool] = True


@dataclass(frozen=True, slots=True)
class Resume(HostRequest[State]):
    action: ClassVar[str] = "resume"
    resync: ClassVar[bool] = True
    repace: ClassVar[bool] = True


@dataclass(frozen=True, slots=True)
class GetState(HostRequest[State]):
    action: ClassVar[str] = "state"


@dataclass(frozen=True, slots=True)
class Wake(HostRequest[None]):
    """Nothing: wakes a paused host (``stop``)."""

    action: ClassVar[str] = "wake"


@dataclass(frozen=True, slots=True)
class Step(HostRequest[State]):
    """Advance exactly ``ticks`` ticks (an integer >= 0; numpy integers pass, bools do not)."""

    ticks: int
    action: ClassVar[str] = "step"
    resync: ClassVar[bool] = True
    advances: ClassVar[bool] = True

    def __post_init__(self) -> None:
        value: object = self.ticks  # (whatever a client sent)
        ticks = None
        if isinstance(value, SupportsIndex) and not isinstance(value, bool):
            try:
                ticks = operator.index(value)
            except TypeError:
                pass
        if ticks is None:
            raise InstanceError(f"step: ticks must be an integer >= 0, got {value!r}")
        if ticks < 0:
            raise InstanceError(f"step: ticks must be >= 0, got {ticks}")
        object.__setattr__(self, "ticks", ticks)


@dataclass(frozen=True, slots=True)
class Reset(HostRequest[State]):
    """A new episode; ``keyframe`` (a name; "" means None) and ``seed`` (in [0, 2**64))
    replace the scenario's."""

    keyframe: str | None = None
    seed: int | None = None
    action: ClassVar[str] = "reset"
    resync: ClassVar[bool] = True
    advances: ClassVar[bool] = True

    def __post_init__(self) -> None:
        keyframe: object = self.keyframe
        seed: object = self.seed
        if keyframe is not None and not isinstance(keyframe, str):
            raise InstanceError(f"reset: keyframe must be a keyframe name or None, got "
                                f"{keyframe!r}")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)
                                 or not 0 <= seed < 1 << 64):
            raise InstanceError(f"reset: seed must be an integer in [0, 2**64), got {seed!r}")
        object.__setattr__(self, "keyframe", keyframe or None)


@dataclass(frozen=True, slots=True)
class SetRealTimeFactor(HostRequest[State]):
    factor: float
    action: ClassVar[str] = "rtf"
    resync: ClassVar[bool] = True
    repace: ClassVar[bool] = True

    def __post_init__(self) -> None:
        problem = real_time_factor_problem(self.factor)
        if problem is not None:
            raise InstanceError(f"real_time_factor {problem}")
        object.__setattr__(self, "factor", float(self.factor))


@dataclass(frozen=True, slots=True)
class SetMode(HostRequest[State]):
    mode: str  # "realtime" or "fast"
    action: ClassVar[str] = "mode"
    resync: ClassVar[bool] = True
    repace: ClassVar[bool] = True

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise InstanceError(f"mode must be 'realtime' or 'fast', got {self.mode!r}")


@dataclass(frozen=True, slots=True)
class StartRender(HostRequest[int]):
    """A render stream of ``owner`` whose frames go to ``sink``; the result is its id."""

    request: RenderRequest
    sink: Callable[[RenderFrame], None]
    owner: object
    action: ClassVar[str] = "render"

    def __post_init__(self) -> None:
        request: object = self.request
        if not isinstance(request, RenderRequest):
            raise InstanceError(f"render: not a render request: {request!r}")
        camera: object = request.camera
        if camera is not None and not isinstance(camera, str):
            raise InstanceError(f"render: camera must be a camera name, '' or None, got "
                                f"{camera!r}")


@dataclass(frozen=True, slots=True)
class StopRender(HostRequest[State]):
    """Stop render stream ``stream`` (None: every stream of ``owner``)."""

    stream: int | None
    owner: object
    action: ClassVar[str] = "stop_render"


@dataclass(frozen=True, slots=True)
class StartObserve(HostRequest[int]):
    """A state observation stream of ``owner`` whose observations go to ``sink``."""

    request: ObservationRequest
    sink: Callable[[StateObservation], None]
    owner: object
    action: ClassVar[str] = "observe"

    def __post_init__(self) -> None:
        request: object = self.request
        if not isinstance(request, ObservationRequest) or not callable(self.sink):
            raise InstanceError(f"observe: not an observation request: {request!r}")


@dataclass(frozen=True, slots=True)
class StopObserve(HostRequest[State]):
    """Stop observation stream ``stream`` (None: every stream of ``owner``)."""

    stream: int | None
    owner: object
    action: ClassVar[str] = "stop_observe"


@dataclass(frozen=True, slots=True)
class Entities(HostRequest[tuple[int, list[EntityState]]]):
    """The session time and the states of bodies ``names`` (every body when None)."""

    names: tuple[str, ...] | None = None
    action: ClassVar[str] = "entities"

    def __post_init__(self) -> None:
        names: object = self.names
        if names is not None and (not isinstance(names, (list, tuple)) or not all(
                isinstance(n, str) for n in names)):
            raise InstanceError(f"entities: names must be a list of body names, got "
                                f"{names!r}")
        object.__setattr__(self, "names", None if names is None else tuple(names))


_BARE: dict[str, type[HostRequest[object]]] = {
    cls.action: cls for cls in (Pause, Resume, GetState, Wake)}


def host_request(action: str, argument: Any = None) -> HostRequest[object]:
    """The request of the string form ``(action, argument)``: ``("step", ticks)``,
    ``("reset", (keyframe, seed))``, ``("render", (request, sink, owner))``, ...
    (``argument`` is whatever a caller passed: it is checked here)."""
    bare = _BARE.get(action)
    if bare is not None:
        return bare()
    if action == "step":
        return Step(argument)
    if action == "rtf":
        return SetRealTimeFactor(argument)
    if action == "mode":
        return SetMode(argument)
    if action == "entities":
        return Entities(argument)
    if action == "reset":
        return Reset(*_items(action, argument, 2))
    if action == "stop_render":
        return StopRender(*_items(action, argument, 2))
    if action == "stop_observe":
        return StopObserve(*_items(action, argument, 2))
    if action == "render":
        return StartRender(*_items(action, argument, 3))
    if action == "observe":
        return StartObserve(*_items(action, argument, 3))
    raise InstanceError(f"unknown host request {action!r}")


def _items(action: str, argument: object, count: int) -> tuple[Any, ...]:
    if not isinstance(argument, tuple) or len(argument) != count:
        raise InstanceError(f"{action}: bad request argument {argument!r}")
    return argument
