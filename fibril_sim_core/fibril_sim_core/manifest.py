"""SimulationManifest 3.1: how a MuJoCo model is used as a simulation.

The manifest is a versioned contract, validated whole before any plan exists. It never holds the
physics timestep: MJCF ``<option timestep>`` is its single source of truth.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from . import schema as s
from ._document import Node, NodeMap
from .errors import ManifestError

SCHEMA_MAJOR = 3
SCHEMA_MINORS = (0, 1)
#: The optional top-level keys each schema minor allows (3.1 added parameter overlays).
OPTIONAL_KEYS = {
    0: ("profiles", "components", "extensions", "trace", "runtime", "scenario"),
    1: ("profiles", "components", "extensions", "trace", "runtime", "parameter_overlays",
        "scenario"),
}
#: A real-time factor paces simulated against wall time: within these bounds (0 is "as fast
#: as possible" where a caller allows it). Beyond them a frame's wall time overflows the
#: platform's timers (1e-12: an OverflowError) or pacing means nothing.
MIN_REAL_TIME_FACTOR = 1e-6
MAX_REAL_TIME_FACTOR = 1e6


def real_time_factor_problem(value: object, zero_allowed: bool = False) -> str | None:
    """Why ``value`` is not a real-time factor (None when it is one)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or \
            not math.isfinite(value):
        return f"must be a finite number, got {value!r}"
    if value == 0 and zero_allowed:
        return None
    if not MIN_REAL_TIME_FACTOR <= value <= MAX_REAL_TIME_FACTOR:
        allowed = "0 (as fast as possible) or " if zero_allowed else ""
        return (f"must be {allowed}between {MIN_REAL_TIME_FACTOR:g} and "
                f"{MAX_REAL_TIME_FACTOR:g}, got {value!r}")
    return None


RUNTIME_MODES = ("paused", "lockstep", "realtime", "fast")
#: A runtime frame (the pacing unit of a live run) is at most an hour of simulated time.
MAX_FRAME_DURATION_S = 3600.0


@dataclass(frozen=True)
class ProfileSpec:
    """Named defaults for one component type."""

    name: str
    type: str
    config: NodeMap  # (checked once composed: components.base.validate_config)


@dataclass(frozen=True)
class ComponentSpec:
    """One component as the manifest declares it (before profile composition)."""

    id: str
    type: str
    profile: str | None
    endpoint: str | None
    bind: NodeMap  # (checked by the component type's check_bind)
    config: NodeMap
    where: s.Where


@dataclass(frozen=True)
class InputSpec:
    """An ExternalInput the scenario commits at tick 0 of every episode."""

    source_id: str
    source_sequence: int
    payload_type: str
    payload: NodeMap


@dataclass(frozen=True)
class ScenarioSpec:
    """How every episode starts: keyframe, inputs committed at tick 0, and the episode seed
    an instance starts from when its creator names none (part of the plan's provenance)."""

    keyframe: str | None = None
    initial_inputs: tuple[InputSpec, ...] = ()
    seed: int = 0


@dataclass(frozen=True)
class TraceOptions:
    """What a trace holds; where it goes is the caller's choice (``--trace DIR``)."""

    state_every_steps: int = 10
    frame_timing: bool = True


@dataclass(frozen=True)
class RuntimeOptions:
    """How a live SimulationRuntime paces the instance."""

    mode: str = "realtime"
    real_time_factor: float = 1.0
    frame_duration_s: float = 0.01
    start_paused: bool = False


@dataclass(frozen=True)
class SimulationManifest:
    """A validated manifest. Paths are absolute; ``document`` is the parsed YAML."""

    path: Path
    model: Path
    profiles: Mapping[str, ProfileSpec]
    components: tuple[ComponentSpec, ...]
    extensions: tuple[str, ...]
    trace: TraceOptions
    runtime: RuntimeOptions
    parameter_overlays: tuple[Path, ...]
    scenario: ScenarioSpec
    document: NodeMap = field(repr=False)

    @property
    def canonical_json(self) -> str:
        """The manifest document in canonical JSON (sorted keys), the basis of its hash."""
        return json.dumps(self.document, sort_keys=True, separators=(",", ":"), default=str)

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.canonical_json.encode()).hexdigest()

    def component(self, component_id: str) -> ComponentSpec:
        for spec in self.components:
            if spec.id == component_id:
                return spec
        raise ManifestError(f"{self.path}: no component with id {s.short(component_id)}")


def load_manifest(path: str | Path) -> SimulationManifest:
    """Read and validate a manifest file."""
    file = Path(path).resolve()
    document = s.load_yaml(file, ManifestError)
    return parse_manifest(document, file)


def parse_manifest(document: Node, file: Path) -> SimulationManifest:
    """Validate a parsed manifest document; relative paths resolve against ``file``'s folder."""
    root = s.Where(str(file), "", ManifestError)
    doc = s.mapping(document, root)
    if "timestep" in doc:
        raise root.key("timestep").fail(
            "the physics timestep is not a manifest setting; set <option timestep=...> in the MJCF")
    if "schema_version" not in doc:
        raise root.key("schema_version").fail("missing required key")
    _, minor = s.version(doc["schema_version"], root.key("schema_version"),
                         major=SCHEMA_MAJOR, minors=SCHEMA_MINORS)
    for key in doc:
        later = [m for m in SCHEMA_MINORS if m > minor and key in OPTIONAL_KEYS[m]]
        if later and key not in OPTIONAL_KEYS[minor]:
            raise root.key(str(key)).fail(
                f"needs schema_version {SCHEMA_MAJOR}.{later[0]} or later; this manifest "
                f"declares {SCHEMA_MAJOR}.{minor}")
    s.keys(doc, root, required=("schema_version", "model"), optional=OPTIONAL_KEYS[minor])
    base = file.parent
    model = s.existing_file(base, doc["model"], root.key("model"), "model file")

    profiles = _profiles(doc.get("profiles", {}), root.key("profiles"))
    components = _components(doc.get("components", []), root.key("components"), profiles)
    extensions = tuple(
        s.string(item, root.key("extensions").key(i))
        for i, item in enumerate(s.sequence(doc.get("extensions", []), root.key("extensions"))))
    overlays_where = root.key("parameter_overlays")
    overlays = []
    for i, item in enumerate(s.sequence(doc.get("parameter_overlays", []), overlays_where)):
        overlays.append(s.existing_file(base, item, overlays_where.key(i), "overlay file"))
    return SimulationManifest(
        path=file,
        model=model,
        profiles=profiles,
        components=components,
        extensions=extensions,
        trace=_trace(doc.get("trace", {}), root.key("trace")),
        runtime=_runtime(doc.get("runtime", {}), root.key("runtime")),
        parameter_overlays=tuple(overlays),
        scenario=_scenario(doc.get("scenario", {}), root.key("scenario")),
        document=doc,
    )


def _profiles(value: Node, where: s.Where) -> dict[str, ProfileSpec]:
    profiles: dict[str, ProfileSpec] = {}
    for name, item in s.mapping(value, where).items():
        at = where.key(str(name))
        body = s.mapping(item, at)
        s.keys(body, at, required=("type",), optional=("config",))
        profiles[str(name)] = ProfileSpec(
            name=str(name),
            type=s.string(body["type"], at.key("type")),
            config=dict(s.mapping(body.get("config", {}), at.key("config"))),
        )
    return profiles


def _components(value: Node, where: s.Where,
                profiles: Mapping[str, ProfileSpec]) -> tuple[ComponentSpec, ...]:
    components: list[ComponentSpec] = []
    seen: dict[str, str] = {}
    for i, item in enumerate(s.sequence(value, where)):
        at = where.key(i)
        body = s.mapping(item, at)
        s.keys(body, at, required=("id", "type"),
               optional=("profile", "endpoint", "bind", "config"))
        component_id = s.string(body["id"], at.key("id"))
        if component_id in seen:
            raise at.key("id").fail(f"duplicate component id {s.short(component_id)} "
                                    f"(first declared at {seen[component_id]})")
        seen[component_id] = at.path
        type_id = s.string(body["type"], at.key("type"))
        profile = body.get("profile")
        if profile is not None:
            profile = s.string(profile, at.key("profile"))
            if profile not in profiles:
                known = ", ".join(sorted(profiles)) or "none declared"
                raise at.key("profile").fail(f"unknown profile {s.short(profile)}; known: {known}")
            if profiles[profile].type != type_id:
                raise at.key("profile").fail(
                    f"profile {s.short(profile)} is for type {profiles[profile].type!r}, "
                    f"not {s.short(type_id)}")
        endpoint = body.get("endpoint")
        if endpoint is not None:
            endpoint = s.string(endpoint, at.key("endpoint"))
        components.append(ComponentSpec(
            id=component_id,
            type=type_id,
            profile=profile,
            endpoint=endpoint,
            bind=dict(s.mapping(body.get("bind", {}), at.key("bind"))),
            config=dict(s.mapping(body.get("config", {}), at.key("config"))),
            where=at,
        ))
    return tuple(components)


def _trace(value: Node, where: s.Where) -> TraceOptions:
    body = s.mapping(value, where)
    s.keys(body, where, optional=("state_every_steps", "frame_timing"))
    return TraceOptions(
        state_every_steps=s.integer(body.get("state_every_steps", 10),
                                    where.key("state_every_steps"), minimum=0),
        frame_timing=s.boolean(body.get("frame_timing", True), where.key("frame_timing")),
    )


def _runtime(value: Node, where: s.Where) -> RuntimeOptions:
    body = s.mapping(value, where)
    s.keys(body, where, optional=("mode", "real_time_factor", "frame_duration", "start_paused"))
    mode = s.string(body.get("mode", "realtime"), where.key("mode"))
    if mode not in RUNTIME_MODES:
        raise where.key("mode").fail(f"unknown mode {s.short(mode)}; expected one of "
                                     f"{', '.join(RUNTIME_MODES)}")
    return RuntimeOptions(
        mode=mode,
        real_time_factor=s.number(body.get("real_time_factor", 1.0),
                                  where.key("real_time_factor"), minimum=MIN_REAL_TIME_FACTOR,
                                  maximum=MAX_REAL_TIME_FACTOR),
        frame_duration_s=s.number(body.get("frame_duration", 0.01),
                                  where.key("frame_duration"), positive=True,
                                  maximum=MAX_FRAME_DURATION_S),
        start_paused=s.boolean(body.get("start_paused", False), where.key("start_paused")),
    )


def _scenario(value: Node, where: s.Where) -> ScenarioSpec:
    body = s.mapping(value, where)
    s.keys(body, where, optional=("keyframe", "initial_inputs", "seed"))
    seed = s.integer(body.get("seed", 0), where.key("seed"), minimum=0)
    keyframe = body.get("keyframe")
    if keyframe is not None:
        keyframe = s.string(keyframe, where.key("keyframe"))
    inputs = []
    at_inputs = where.key("initial_inputs")
    for i, item in enumerate(s.sequence(body.get("initial_inputs", []), at_inputs)):
        inputs.append(parse_input_spec(item, at_inputs.key(i)))
    return ScenarioSpec(keyframe=keyframe, initial_inputs=tuple(inputs), seed=seed)


def parse_input_spec(value: Node, where: s.Where) -> InputSpec:
    """An input written as ``{source_id, source_sequence, payload_type, payload|payload_json}``."""
    body = s.mapping(value, where)
    s.keys(body, where, required=("source_id", "source_sequence", "payload_type"),
           optional=("payload", "payload_json"))
    if ("payload" in body) == ("payload_json" in body):
        raise where.fail("give exactly one of 'payload' (a mapping) or 'payload_json' (a string)")
    if "payload" in body:
        payload = dict(s.mapping(body["payload"], where.key("payload")))
    else:
        text = s.string(body["payload_json"], where.key("payload_json"))
        parsed = s.load_json_text(text, where.key("payload_json"))
        payload = dict(s.mapping(parsed, where.key("payload_json")))
    return InputSpec(
        source_id=s.string(body["source_id"], where.key("source_id")),
        source_sequence=s.integer(body["source_sequence"], where.key("source_sequence"),
                                  minimum=0),
        payload_type=s.string(body["payload_type"], where.key("payload_type")),
        payload=payload,
    )


def load_scenario(path: str | Path) -> ScenarioSpec:
    """A scenario override file: the manifest's ``scenario`` section as its own document."""
    path = Path(path)
    where = s.Where(str(path), error=ManifestError)
    return _scenario(s.load_yaml(path, ManifestError) or {}, where)
