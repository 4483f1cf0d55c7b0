"""Typed parameter overlays: change physical parameters without copying or editing MJCF.

An overlay parameter has an id, a value and one or more typed targets: a MuJoCo field
(``mujoco:<kind>:<object>[:<index>]``, applied to the parsed MjSpec before compilation) or a
numeric scalar of a component's effective config (applied after profile composition, before
validation). The same contract serves overlay artifacts named by a manifest, experiment
variants and calibration candidates.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeGuard, Union

from .. import schema as s
from .._document import JsonValue, Node
from ..schema import Where
from ..errors import PlanError
from .mujoco_targets import KINDS, MujocoKind

ARTIFACT_FORMAT = "fibril_sim/parameter_overlay"
SCHEMA_MAJOR = 1
SCHEMA_MINORS = (0, 1)

Value = Union[float, tuple[float, float]]


class OverlayError(PlanError):
    """An overlay artifact, target or value is invalid, or targets conflict."""


@dataclass(frozen=True)
class MujocoTarget:
    """A field of a named MuJoCo object; ``component_index`` selects one element of a vector
    field; ``attribute`` names the attribute of a plugin instance."""

    kind: str
    object: str
    component_index: int = 0
    attribute: str | None = None

    @property
    def key(self) -> str:
        tail = self.attribute if self.kind == "plugin_attribute" else str(self.component_index)
        return f"mujoco:{self.kind}:{self.object}:{tail}"

    def describe(self) -> dict[str, JsonValue]:
        out: dict[str, JsonValue] = {"type": "mujoco", "kind": self.kind, "object": self.object}
        if self.kind == "plugin_attribute":
            out["attribute"] = self.attribute
        else:
            out["component_index"] = self.component_index
        return out


@dataclass(frozen=True)
class ComponentTarget:
    """A numeric scalar of a component's effective config (profile already composed)."""

    component: str
    config_path: str

    @property
    def key(self) -> str:
        return f"component_config:{self.component}:{self.config_path}"

    def describe(self) -> dict[str, JsonValue]:
        return {"type": "component_config", "component": self.component,
                "config_path": self.config_path}


OverlayTarget = Union[MujocoTarget, ComponentTarget]


@dataclass(frozen=True)
class OverlayParameter:
    """One parameter: an id, a value (a scalar, or ``(min, max)`` for range targets) and the
    targets it binds."""

    id: str
    value: Value
    targets: tuple[OverlayTarget, ...]
    unit: str | None = None
    provenance: str | None = None
    # The overlay artifact file the parameter was read from (errors name it); not part of the
    # parameter's identity or hash.
    source: str | None = field(default=None, compare=False)

    def with_value(self, value: Value) -> OverlayParameter:
        return OverlayParameter(self.id, value, self.targets, self.unit, self.provenance,
                                self.source)

    def describe(self) -> dict[str, JsonValue]:
        out: dict[str, JsonValue] = {"id": self.id, "value": _plain(self.value)}
        if self.unit is not None:
            out["unit"] = self.unit
        if self.provenance is not None:
            out["provenance"] = self.provenance
        if len(self.targets) == 1:
            out["target"] = self.targets[0].describe()
        else:
            out["targets"] = [t.describe() for t in self.targets]
        return out


@dataclass(frozen=True)
class OverlayArtifact:
    """A loaded overlay artifact file."""

    path: Path
    schema_version: tuple[int, int]
    id: str | None
    parameters: tuple[OverlayParameter, ...]
    sha256: str

    def parameter(self, parameter_id: str) -> OverlayParameter:
        for parameter in self.parameters:
            if parameter.id == parameter_id:
                return parameter
        known = ", ".join(p.id for p in self.parameters) or "none"
        raise OverlayError(f"{self.path}: no parameter {s.short(parameter_id)}; declared: {known}")


# --------------------------------------------------------------------------- parsing


def parse_target(raw: Node, where: Where, *, minor: int = SCHEMA_MINORS[-1]) -> OverlayTarget:
    """A typed target from its mapping form or its ``mujoco:<kind>:<object>[:<index>]`` form."""
    if isinstance(raw, str):
        return _parse_target_string(raw, where, minor)
    item = s.mapping(raw, where)
    kind_of = item.get("type")
    if kind_of == "component_config":
        s.keys(item, where, required=("type", "component", "config_path"))
        return ComponentTarget(s.string(item["component"], where.key("component")),
                               s.string(item["config_path"], where.key("config_path")))
    if kind_of != "mujoco":
        raise where.key("type").fail(f"expected 'mujoco' or 'component_config', "
                                     f"got {s.describe(kind_of)}")
    kind = _kind(item.get("kind"), where.key("kind"), minor)
    if kind.name == "plugin_attribute":
        s.keys(item, where, required=("type", "kind", "object", "attribute"))
        return MujocoTarget(kind.name, s.string(item["object"], where.key("object")),
                            attribute=s.string(item["attribute"], where.key("attribute")))
    s.keys(item, where, required=("type", "kind", "object"), optional=("component_index",))
    index = s.integer(item.get("component_index", 0), where.key("component_index"), minimum=0)
    target = MujocoTarget(kind.name, s.string(item["object"], where.key("object")), index)
    _check_index(kind, target, where.key("component_index"))
    return target


def _parse_target_string(text: str, where: Where, minor: int) -> OverlayTarget:
    parts = text.split(":")
    if parts[0] != "mujoco" or len(parts) not in (3, 4) or not all(parts[1:]):
        raise where.fail(f"target {s.short(text)} is not of the form "
                         f"'mujoco:<kind>:<object>[:<index>]'")
    kind = _kind(parts[1], where, minor)
    if kind.name == "plugin_attribute":
        if len(parts) != 4:
            raise where.fail(f"target {s.short(text)}: plugin_attribute needs "
                             f"'mujoco:plugin_attribute:<instance>:<attribute>'")
        return MujocoTarget(kind.name, parts[2], attribute=parts[3])
    index = 0
    if len(parts) == 4:
        if not (parts[3].isascii() and parts[3].isdigit() and len(parts[3]) <= 18):
            raise where.fail(f"target {s.short(text)}: component index {s.short(parts[3])} "
                             f"is not a non-negative integer")
        index = int(parts[3])
    target = MujocoTarget(kind.name, parts[2], index)
    _check_index(kind, target, where)
    return target


def _kind(name: Node, where: Where, minor: int) -> MujocoKind:
    kind = KINDS.get(name) if isinstance(name, str) else None
    if kind is None:
        raise where.fail(f"unknown MuJoCo target kind {s.describe(name)}; known: "
                         f"{', '.join(sorted(KINDS))}")
    if kind.minor > minor:
        raise where.fail(f"target kind {kind.name!r} needs overlay schema 1.{kind.minor}; "
                         f"this document is 1.{minor}")
    return kind


def _check_index(kind: MujocoKind, target: MujocoTarget, where: Where) -> None:
    if target.component_index >= kind.width:
        if kind.width == 1:
            raise where.fail(f"{target.kind} on {s.short(target.object)} is a scalar target; "
                             f"component_index must be 0, got {target.component_index}")
        raise where.fail(f"{target.kind} on {s.short(target.object)} has {kind.width} components; "
                         f"component_index {target.component_index} is out of range")


def parse_value(raw: Node, targets: Sequence[OverlayTarget], where: Where,
                parameter_id: str) -> Value:
    """Check a value against its targets: count, finiteness, sign, range order."""
    ranged = {isinstance(t, MujocoTarget) and KINDS[t.kind].range for t in targets}
    if len(ranged) > 1:
        raise where.fail(f"parameter {s.short(parameter_id)} binds range and scalar targets "
                         f"at once")
    if True in ranged:
        values = s.sequence(raw, where) if not _is_number(raw) else None
        if values is None or len(values) != 2:
            raise where.fail(f"parameter {s.short(parameter_id)}: range target "
                             f"{targets[0].key} needs [min, max], got {s.describe(raw)}")
        low = s.number(values[0], where.key(0))
        high = s.number(values[1], where.key(1))
        if low > high:
            raise where.fail(f"parameter {s.short(parameter_id)}: reversed range "
                             f"[{low:g}, {high:g}] for {targets[0].key}")
        return (low, high)
    if not _is_number(raw):
        raise where.fail(f"parameter {s.short(parameter_id)}: target {targets[0].key} takes one "
                         f"number, got {s.describe(raw)}")
    try:
        value = float(raw)
    except OverflowError:
        value = math.inf
    if not math.isfinite(value):
        raise where.fail(f"parameter {s.short(parameter_id)}: value {s.short(raw)} for "
                         f"{targets[0].key} is not finite")
    for target in targets:
        kind = KINDS[target.kind] if isinstance(target, MujocoTarget) else None
        if kind is not None and kind.positive and value <= 0:
            raise where.fail(f"parameter {s.short(parameter_id)}: {target.key} must be > 0, "
                             f"got {value:g}")
        if kind is not None and kind.nonnegative and value < 0:
            raise where.fail(f"parameter {s.short(parameter_id)}: {target.key} must be >= 0, "
                             f"got {value:g}")
    return value


def validate_parameter(parameter: OverlayParameter) -> OverlayParameter:
    """Check a programmatically built parameter exactly as an artifact's would be checked."""
    where = Where(f"overlay parameter {parameter.id!r}", error=OverlayError)
    if not parameter.targets:
        raise where.fail("binds no target")
    for target in parameter.targets:
        if isinstance(target, MujocoTarget):
            kind = _kind(target.kind, where, SCHEMA_MINORS[-1])
            if kind.name == "plugin_attribute":
                if not target.attribute:
                    raise where.fail(f"{target.key}: plugin_attribute needs an attribute")
            else:
                _check_index(kind, target, where.key("target"))
        elif not isinstance(target, ComponentTarget):
            raise where.fail(f"target {target!r} is neither a MujocoTarget nor a "
                             f"ComponentTarget")
    raw = list(parameter.value) if isinstance(parameter.value, (tuple, list)) \
        else parameter.value
    value = parse_value(raw, parameter.targets, where.key("value"), parameter.id)
    return parameter if value == parameter.value else parameter.with_value(value)


def _is_number(raw: Node) -> TypeGuard[int | float]:
    return isinstance(raw, (int, float)) and not isinstance(raw, bool)


def load_overlay_artifact(path: str | Path) -> OverlayArtifact:
    """Read and validate an overlay artifact (YAML or JSON, schema 1.0 / 1.1)."""
    path = Path(path)
    where = Where(str(path), error=OverlayError)
    try:
        raw_bytes = path.read_bytes()
    except OSError:
        raw_bytes = b""
    doc = s.mapping(s.load_yaml(path, OverlayError), where)
    s.keys(doc, where, required=("schema_version", "parameters"),
           optional=("format", "id", "description", "source"))
    _, minor = s.version(doc["schema_version"], where.key("schema_version"),
                         major=SCHEMA_MAJOR, minors=SCHEMA_MINORS)
    if "format" in doc and doc["format"] != ARTIFACT_FORMAT:
        raise where.key("format").fail(f"expected {ARTIFACT_FORMAT!r}, "
                                       f"got {s.describe(doc['format'])}")
    parameters: list[OverlayParameter] = []
    seen: set[str] = set()
    items = s.sequence(doc["parameters"], where.key("parameters"))
    for i, raw in enumerate(items):
        at = where.key("parameters").key(i)
        item = s.mapping(raw, at)
        s.keys(item, at, required=("id", "value"),
               optional=("unit", "provenance", "target", "targets", "description"))
        parameter_id = s.string(item["id"], at.key("id"))
        if parameter_id in seen:
            raise at.key("id").fail(f"duplicate parameter id {s.short(parameter_id)}")
        seen.add(parameter_id)
        try:
            targets = _targets(item, at, minor)
            value = parse_value(item["value"], targets, at.key("value"), parameter_id)
        except OverlayError as exc:
            if s.short(parameter_id) in str(exc):
                raise
            raise OverlayError(f"{exc} (parameter {s.short(parameter_id)})") from None
        unit = s.string(item["unit"], at.key("unit")) if "unit" in item else None
        origin = (s.string(item["provenance"], at.key("provenance"))
                  if "provenance" in item else None)
        parameters.append(OverlayParameter(parameter_id, value, targets, unit, origin,
                                           source=str(path)))
    check_conflicts(parameters, context=str(path))
    artifact_id = s.string(doc["id"], where.key("id")) if "id" in doc else None
    return OverlayArtifact(path=path, schema_version=(SCHEMA_MAJOR, minor), id=artifact_id,
                           parameters=tuple(parameters),
                           sha256=hashlib.sha256(raw_bytes).hexdigest())


def _targets(item: Mapping[str, Node], where: Where, minor: int) -> tuple[OverlayTarget, ...]:
    if ("target" in item) == ("targets" in item):
        raise where.fail("give exactly one of 'target' (one) or 'targets' (a list)")
    if "target" in item:
        return (parse_target(item["target"], where.key("target"), minor=minor),)
    raw = s.sequence(item["targets"], where.key("targets"))
    if not raw:
        raise where.key("targets").fail("expected at least one target")
    targets = tuple(parse_target(t, where.key("targets").key(i), minor=minor)
                    for i, t in enumerate(raw))
    keys = [t.key for t in targets]
    if len(set(keys)) != len(keys):
        raise where.key("targets").fail("the same target is listed twice")
    return targets


# --------------------------------------------------------------------------- resolution


def check_conflicts(parameters: Iterable[OverlayParameter], *, context: str = "overlay") -> None:
    """Reject two parameters bound to the same field (MuJoCo field or component config)."""
    owner: dict[str, str] = {}
    for parameter in parameters:
        for target in parameter.targets:
            other = owner.get(target.key)
            if other is not None and other != parameter.id:
                raise OverlayError(f"{context}: parameters {other!r} and {parameter.id!r} "
                                   f"both bind {target.key}")
            owner[target.key] = parameter.id


def merge_layers(layers: Sequence[Sequence[OverlayParameter]]) -> tuple[OverlayParameter, ...]:
    """Apply overlay layers in order: a later parameter with the same id replaces the earlier."""
    merged: dict[str, OverlayParameter] = {}
    for layer in layers:
        for parameter in layer:
            merged.pop(parameter.id, None)
            merged[parameter.id] = parameter
    result = tuple(merged.values())
    check_conflicts(result)
    return result


@dataclass(frozen=True)
class ParameterOverlays:
    """The canonical, resolved overlay set a SimulationBuilder applies.

    Bindings are sorted by target identity, so the same parameters in any order give the same
    ``parameter_set_hash``.
    """

    parameters: tuple[OverlayParameter, ...] = ()
    mujoco: tuple[tuple[OverlayParameter, MujocoTarget], ...] = field(init=False)
    components: Mapping[str, Mapping[str, tuple[str, float]]] = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "parameters",
                           tuple(validate_parameter(p) for p in self.parameters))
        check_conflicts(self.parameters)
        bindings = [(p, t) for p in self.parameters for t in p.targets]
        mujoco = sorted(((p, t) for p, t in bindings if isinstance(t, MujocoTarget)),
                        key=lambda b: b[1].key)
        components: dict[str, dict[str, tuple[str, float]]] = {}
        for p, t in sorted(((p, t) for p, t in bindings if isinstance(t, ComponentTarget)),
                           key=lambda b: b[1].key):
            value = p.value
            if isinstance(value, tuple):  # (never: only MuJoCo targets take ranges)
                raise OverlayError(f"overlay parameter {p.id!r}: {t.key} takes one number")
            components.setdefault(t.component, {})[t.config_path] = (p.id, value)
        object.__setattr__(self, "mujoco", tuple(mujoco))
        object.__setattr__(self, "components", components)

    @property
    def identity(self) -> list[list[JsonValue]]:
        out: list[list[JsonValue]] = []
        for p, t in self.mujoco:
            detail = t.attribute if t.kind == "plugin_attribute" else t.component_index
            out.append(["mujoco", p.id, t.kind, t.object, detail, _plain(p.value)])
        for component in sorted(self.components):
            for path, (pid, value) in sorted(self.components[component].items()):
                out.append(["component_config", pid, component, path, _plain(value)])
        return out

    @property
    def parameter_set_hash(self) -> str:
        text = json.dumps(self.identity, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()

    def describe(self) -> list[dict[str, JsonValue]]:
        """Resolved typed target provenance, in canonical order."""
        return [p.describe() for p in sorted(self.parameters, key=lambda p: p.id)]

    def with_values(self, values: Mapping[str, Node]) -> ParameterOverlays:
        """The same bindings with new values for some parameters. Each value is checked
        against its targets like any other; the targets and conflicts were checked when this
        set was made, so a calibration candidate does not pay for that again."""
        known = {p.id: p for p in self.parameters}
        unknown = sorted(set(values) - set(known))
        if unknown:
            raise OverlayError(f"no overlay parameter(s) {', '.join(map(repr, unknown))}; "
                               f"parameters: {', '.join(known)}")
        replaced: dict[str, OverlayParameter] = {}
        for pid, raw in values.items():
            parameter = known[pid]
            where = Where(f"overlay parameter {pid!r}", error=OverlayError)
            raw = list(raw) if isinstance(raw, (tuple, list)) else raw
            replaced[pid] = parameter.with_value(
                parse_value(raw, parameter.targets, where.key("value"), pid))
        new = object.__new__(ParameterOverlays)
        object.__setattr__(new, "parameters",
                           tuple(replaced.get(p.id, p) for p in self.parameters))
        object.__setattr__(new, "mujoco",
                           tuple((replaced.get(p.id, p), t) for p, t in self.mujoco))
        object.__setattr__(new, "components", {
            component: {path: (pid, replaced[pid].value if pid in replaced else value)
                        for path, (pid, value) in paths.items()}
            for component, paths in self.components.items()})
        return new


def overlay_document(parameters: Sequence[OverlayParameter], *, id: str | None = None,
                     source: Mapping[str, JsonValue] | None = None) -> dict[str, JsonValue]:
    """The portable, versioned overlay artifact (loads unchanged as a manifest overlay)."""
    minor = 1 if any(isinstance(t, MujocoTarget) and KINDS[t.kind].minor > 0
                     for p in parameters for t in p.targets) else 0
    doc: dict[str, JsonValue] = {"format": ARTIFACT_FORMAT,
                           "schema_version": {"major": SCHEMA_MAJOR, "minor": minor}}
    if id is not None:
        doc["id"] = id
    if source is not None:
        doc["source"] = dict(source)
    doc["parameters"] = [p.describe() for p in parameters]
    return doc


def _plain(value: Value) -> float | list[float]:
    return [float(v) for v in value] if isinstance(value, tuple) else float(value)
