"""What every component type shares: config fields, effective config, descriptors.

A component goes through three stages. At plan construction it may add MuJoCo objects to the
MjSpec (``prepare``), then binds to the compiled model (``bind``) and yields an immutable
descriptor. Each SimulationInstance asks the descriptor for its own mutable runtime object.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

import mujoco

from .. import schema as s
from .._document import Node, NodeMap
from ..timebase import Timebase

REQUIRED = object()


@dataclass(frozen=True)
class Field:
    """One config key of a component type.

    ``kind``: ``float``, ``int``, ``bool``, ``str``, ``floats`` (a list of numbers) or
    ``duration`` (seconds in YAML, whole ticks once bound). ``unit`` and ``doc`` are what the
    generated reference (docs/reference) says of the key.
    """

    kind: str
    default: object = REQUIRED
    minimum: float | None = None
    maximum: float | None = None
    positive: bool = False
    choices: tuple[str, ...] = ()
    doc: str = ""
    unit: str = ""


@dataclass(frozen=True)
class ResolvedComponent:
    """A component with its effective config (profile ⊕ instance config ⊕ overlays), validated."""

    id: str
    type: str
    endpoint: str | None
    bind: Mapping[str, Any]
    config: Mapping[str, Any]
    where: s.Where


def effective_config(profile: NodeMap | None, config: NodeMap) -> dict[str, Node]:
    """Profile defaults composed with the instance config (instance wins, nested maps merged)."""
    merged: dict[str, Node] = dict(profile or {})
    for key, value in config.items():
        base = merged.get(key)
        if isinstance(value, Mapping) and isinstance(base, Mapping):
            merged[key] = {**base, **value}
        else:
            merged[key] = value
    return merged


def validate_config(fields: Mapping[str, Field], config: NodeMap,
                    where: s.Where) -> dict[str, object]:
    """Check an effective config against a type's fields; fill defaults."""
    s.keys(config, where, optional=tuple(fields))
    result: dict[str, object] = {}
    for name, spec in fields.items():
        at = where.key(name)
        if name not in config:
            if spec.default is REQUIRED:
                raise at.fail("missing required key")
            result[name] = spec.default
            continue
        value = config[name]
        if spec.kind in ("float", "duration"):
            result[name] = s.number(value, at, minimum=spec.minimum, maximum=spec.maximum,
                                    positive=spec.positive)
        elif spec.kind == "int":
            result[name] = s.integer(value, at, minimum=None if spec.minimum is None
                                     else int(spec.minimum))
        elif spec.kind == "bool":
            result[name] = s.boolean(value, at)
        elif spec.kind == "str":
            text = s.string(value, at)
            if spec.choices and text not in spec.choices:
                raise at.fail(f"unknown value {text!r}; expected one of {', '.join(spec.choices)}")
            result[name] = text
        elif spec.kind == "floats":
            items = s.sequence(value, at)
            result[name] = tuple(s.number(v, at.key(i)) for i, v in enumerate(items))
        else:  # pragma: no cover - a programming error in a component type
            raise AssertionError(f"unknown field kind {spec.kind}")
    return result


class BuildContext:
    """What ``bind`` may look at: the compiled model and the physics timebase."""

    def __init__(self, model: mujoco.MjModel, timebase: Timebase) -> None:
        self.model = model
        self.timebase = timebase

    def object_id(self, objtype: mujoco.mjtObj, name: str, where: s.Where, kind: str) -> int:
        index: int = mujoco.mj_name2id(self.model, objtype, name)
        if index < 0:
            known = names_of(self.model, objtype)
            hint = f"; known: {', '.join(known[:12])}" + (" ..." if len(known) > 12 else "")
            raise where.fail(f"no MuJoCo {kind} named {name!r} in the model{hint if known else ''}")
        return index

    def ticks(self, seconds: float, where: s.Where, minimum: int = 0) -> int:
        try:
            return self.timebase.ticks(seconds, minimum)
        except ValueError as exc:
            raise where.fail(str(exc)) from None

    def sensor(self, name: str, where: s.Where) -> tuple[int, int]:
        """(address, dimension) of a sensor in ``sensordata``."""
        index = self.object_id(mujoco.mjtObj.mjOBJ_SENSOR, name, where, "sensor")
        return int(self.model.sensor_adr[index]), int(self.model.sensor_dim[index])


def names_of(model: mujoco.MjModel, objtype: mujoco.mjtObj) -> list[str]:
    count = {
        mujoco.mjtObj.mjOBJ_BODY: model.nbody, mujoco.mjtObj.mjOBJ_JOINT: model.njnt,
        mujoco.mjtObj.mjOBJ_GEOM: model.ngeom, mujoco.mjtObj.mjOBJ_SITE: model.nsite,
        mujoco.mjtObj.mjOBJ_ACTUATOR: model.nu, mujoco.mjtObj.mjOBJ_SENSOR: model.nsensor,
        mujoco.mjtObj.mjOBJ_CAMERA: model.ncam, mujoco.mjtObj.mjOBJ_KEY: model.nkey,
        mujoco.mjtObj.mjOBJ_TENDON: model.ntendon,
    }.get(objtype, 0)
    names = (mujoco.mj_id2name(model, objtype, i) for i in range(count))
    return [name for name in names if name]


def internal_name(component_id: str, what: str) -> str:
    """Name of a MuJoCo object a component adds to the spec; never clashes with user names."""
    return f"__fibril__{component_id}__{what}"


class Descriptor(Protocol):
    """What ``ComponentType.bind`` returns: a ``DeviceDescriptor`` (device.py) or an
    ``ActuatorDescriptor`` (endpoint.py); named by shape here because device.py imports this
    module."""

    @property
    def id(self) -> str: ...


class ComponentType(ABC):
    """A registered component type: config fields, bindings, and how to bind to a model."""

    type_id: ClassVar[str]
    role: ClassVar[str]  # "device" or "actuator"
    fields: ClassVar[dict[str, Field]]
    bind_keys: ClassVar[tuple[tuple[str, ...], tuple[str, ...]]] = ((), ())  # required, optional

    def check_bind(self, component: ResolvedComponent) -> None:
        required, optional = self.bind_keys
        s.keys(component.bind, component.where.key("bind"), required=required, optional=optional)
        for key in component.bind:
            s.string(component.bind[key], component.where.key("bind").key(key))

    def prepare(self, component: ResolvedComponent, spec: mujoco.MjSpec) -> None:
        """Add what the component needs to the model before it compiles (default: nothing)."""

    @abstractmethod
    def bind(self, component: ResolvedComponent, ctx: BuildContext
             ) -> Descriptor:
        """Resolve names against the compiled model; return an immutable descriptor."""
