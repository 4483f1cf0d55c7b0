"""SimulationBuilder → SimulationPlan: the immutable, resolved blueprint of a simulation.

Everything that can be checked before running is checked here: component types and configs,
bindings against the compiled model, periods and latencies in whole ticks, the scenario keyframe
and initial inputs. Many independent SimulationInstances come from one plan.
"""

from __future__ import annotations

import copy
import sys
import threading
import weakref
from collections.abc import Collection, Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, TypeVar

import mujoco
import numpy as np

from . import provenance as prov
from .build_checks import (ParsedModel, build_provenance, check_initial_inputs,
                           check_overlays_held, compile_model, component_overlay_failure,
                           merge_overlays, one_line, overlay_failure, resolve_components,
                           scenario_keyframe)
from .components import (ActuatorDescriptor, BuildContext, ComponentRegistry,
                         DeviceDescriptor, ResolvedComponent)
from .errors import FibrilError, ManifestError, PlanError
from .instance import SimulationInstance
from .manifest import ScenarioSpec, SimulationManifest, load_manifest
from .overlays import MujocoTarget, OverlayParameter, ParameterOverlays
from .overlays import compiled as compiled_overlays
from .overlays.mujoco_targets import Inertial, InertialKey, apply_mujoco_overlays
from ._document import JsonValue, Node
from .records import IngressRecord
from .recorded_inputs import (EndpointSignature, RecordedInputs, endpoint_signature,
                              prepare_recorded_inputs)
from .sinks import TraceSink
from .timebase import Timebase

if TYPE_CHECKING:
    from .robot_description import GeomMarker
    from .runtime.observation import StaticFrame


@dataclass(frozen=True)
class SimulationPlan:
    """Immutable: compiled model, component descriptors, schedule, options, provenance.

    ``model`` is shared by every instance and must be treated as read-only.
    """

    manifest: SimulationManifest
    model: mujoco.MjModel = field(repr=False)
    timebase: Timebase
    devices: tuple[DeviceDescriptor, ...]
    actuators: tuple[ActuatorDescriptor, ...]
    keyframe_id: int
    scenario: ScenarioSpec
    provenance: Mapping[str, Any]
    layout: Mapping[str, JsonValue]

    @property
    def endpoints(self) -> Mapping[str, ActuatorDescriptor]:
        return MappingProxyType({a.endpoint: a for a in self.actuators})

    @property
    def recorded_input_signature(self) -> EndpointSignature:
        """What parsing recorded inputs depends on (see ``prepare_recorded_inputs``)."""
        return endpoint_signature(self.actuators)

    def prepare_recorded_inputs(self, records: Iterable[IngressRecord | Mapping[str, Node]]
                                ) -> RecordedInputs:
        """Validate and parse recorded inputs once, to replay them into many instances (of
        this plan or of any plan with the same endpoints, e.g. calibration candidates)."""
        return prepare_recorded_inputs(self.actuators, records)

    def robot_description(self, frame_prefix: str = "") -> str:
        """The URDF of the compiled model (links named like the TF frames; see
        ``robot_description``), its mesh files resolved from the MJCF's own directories."""
        # Imported here (and below): robot_description needs only runtime.observation
        # (StaticFrame), but loading it runs runtime/__init__, whose connection and runtime
        # modules import this one at their top; a module-level import would be a circle at
        # import time (ImportError), though the source import graph shows none.
        from .robot_description import urdf_from_model

        spec = mujoco.MjSpec.from_file(str(self.manifest.model))
        return urdf_from_model(self.model, spec=spec, frame_prefix=frame_prefix)

    def link_frames(self) -> tuple[StaticFrame, ...]:
        """The robot description's links that are not bodies, fixed to a body (StaticFrame,
        names without prefix): they go on /tf_static beside the fixed bodies."""
        from .robot_description import link_frames

        return link_frames(self.model)

    def geom_markers(self, frame_prefix: str = "") -> tuple[GeomMarker, ...]:
        """The visible geoms as markers in their bodies' frames (``robot_description``)."""
        from .robot_description import geom_markers

        spec = mujoco.MjSpec.from_file(str(self.manifest.model))
        return geom_markers(self.model, frame_prefix, spec=spec)

    def device(self, device_id: str) -> DeviceDescriptor:
        for device in self.devices:
            if device.id == device_id:
                return device
        known = ", ".join(d.id for d in self.devices)
        raise PlanError(f"no device {device_id!r} in the plan; devices: {known}")

    @property
    def episode_seed(self) -> int:
        """The seed an instance starts from when its creator names none (the manifest's
        ``scenario.seed``, default 0); recorded in the provenance as ``episode_seed``."""
        return int(self.scenario.seed)

    def run_provenance(self, seed: int | None = None, **extra: JsonValue
                       ) -> dict[str, JsonValue]:
        """The provenance of one run of this plan (a trace's, a result's): the plan's with
        the episode seed the run actually starts from (``seed`` kept for older readers)."""
        chosen = self.episode_seed if seed is None else int(seed)
        return dict(self.provenance, episode_seed=chosen, seed=chosen, **extra)

    def create_instance(self, seed: int | None = None, *, scenario: ScenarioSpec | None = None,
                        trace: TraceSink | None = None, snapshot_every: int | None = None,
                        collect: bool = True, data: mujoco.MjData | None = None,
                        rollout_context: AbstractContextManager[object] | None = None,
                        devices: Collection[str] | None = None) -> SimulationInstance:
        """A fresh, independent run: keyframe restored and scenario inputs queued at tick 0.

        ``seed`` is the episode seed (default: the plan's ``episode_seed``).

        ``trace`` (a TraceWriter) receives every record; ``snapshot_every`` overrides the
        manifest's state snapshot interval (default: the manifest's when tracing, else none);
        ``collect`` keeps records for ``poll()``. ``data`` recycles the MjData of a finished
        instance of a model with the same size signature (it is fully reset): many short runs
        then skip allocating MuJoCo's arena each time. ``rollout_context`` is entered around
        every replay-block rollout (MuJoCo runs it without the GIL): a calibration worker uses
        it to hand its Python turn to another worker meanwhile. ``devices`` names the devices
        to run (default: all); one left out is never read: no outputs and no noise draws (each
        device has its own noise stream, so the others' outputs do not change), and its reads
        no longer cut replayed commands into single steps.
        """
        return SimulationInstance(self, seed=self.episode_seed if seed is None else seed,
                                  scenario=scenario, trace=trace,
                                  snapshot_every=snapshot_every, collect=collect, data=data,
                                  rollout_context=rollout_context, devices=devices)

    def inspect(self) -> dict[str, Any]:  # (JSON; cli's printer reads it by its keys)
        """A JSON-able document describing the plan (``fibril_sim inspect``)."""
        tb = self.timebase
        components: list[JsonValue] = []
        for actuator in self.actuators:
            components.append({
                "id": actuator.id, "type": actuator.type, "role": "actuator",
                "endpoint": actuator.endpoint, "payload_type": actuator.payload_type,
                "binding": dict(actuator.binding), "modes": sorted(actuator.modes),
                "command_latency": {"ticks": actuator.latency_ticks,
                                    "seconds": actuator.latency_ticks * tb.timestep_s},
                "config": _jsonable(actuator.config)})
        for device in self.devices:
            components.append({
                "id": device.id, "type": device.type, "role": "device",
                "sample_type": device.sample_type,
                "components": list(device.component_names)
                if len(device.component_names) <= 16 else
                [*device.component_names[:3], "...", device.component_names[-1]],
                "binding": _jsonable(device.binding), "frame_id": device.frame_id,
                "period": {"ticks": device.period_ticks,
                           "seconds": device.period_ticks * tb.timestep_s},
                "latency": {"ticks": device.latency_ticks,
                            "seconds": device.latency_ticks * tb.timestep_s},
                "config": _jsonable(device.config)})
        model = self.model
        return {
            "manifest": str(self.manifest.path),
            "model": {"path": str(self.manifest.model), "timestep_ns": tb.timestep_ns,
                      "nq": model.nq, "nv": model.nv, "nu": model.nu, "na": model.na,
                      "nbody": model.nbody, "njnt": model.njnt, "nsensor": model.nsensor,
                      "nkey": model.nkey},
            "components": components,
            "scenario": {"keyframe": self.scenario.keyframe,
                         "initial_inputs": len(self.scenario.initial_inputs),
                         "seed": self.episode_seed},
            "trace": {"state_every_steps": self.manifest.trace.state_every_steps,
                      "frame_timing": self.manifest.trace.frame_timing},
            "runtime": _jsonable(self.manifest.runtime.__dict__),
            "provenance": _jsonable(self.provenance),
        }


MODEL_CACHE_ENTRIES = 8


K = TypeVar("K")
V = TypeVar("V")
#: A parsed model's identity: the ``file_key`` of its file and of every file it includes.
ModelKey = tuple[tuple[str, int, int], ...]


class _Bounded(dict[K, V]):
    """A dict that forgets its oldest entry beyond ``limit`` entries."""

    def __init__(self, limit: int) -> None:
        super().__init__()
        self.limit = limit

    def __setitem__(self, key: K, value: V) -> None:
        super().__setitem__(key, value)
        while len(self) > self.limit:
            del self[next(iter(self))]


_POOL_MODELS = 4  # released candidate models kept for reuse


@dataclass(eq=False)
class _CandidateFamily:
    """Plans of one manifest, model state, component set and list of MuJoCo targets, that
    differ only in target values (a calibration's candidates).

    ``model`` is the family's first full compile; its copies, with new values written in
    (``overlays.compiled``), replace the compiler once ``verified`` (a second full compile
    was bit-identical to such a copy). ``pool`` holds models of released plans for reuse;
    ``issued`` the family's plans that may be released.
    """

    manifest: SimulationManifest
    registry: ComponentRegistry
    components: list[ResolvedComponent]
    model_key: ModelKey | None
    targets: tuple[MujocoTarget, ...]
    spec: mujoco.MjSpec
    model: mujoco.MjModel
    verified: bool | None = None
    data: mujoco.MjData | None = None
    pool: list[mujoco.MjModel] = field(default_factory=list)
    issued: weakref.WeakValueDictionary[int, SimulationPlan] = field(default_factory=weakref.WeakValueDictionary)

    def matches(self, manifest: SimulationManifest, registry: ComponentRegistry,
                components: list[ResolvedComponent], model_key: ModelKey | None,
                targets: tuple[MujocoTarget, ...]) -> bool:
        return (self.manifest is manifest and self.registry is registry
                and self.components is components and self.model_key == model_key
                and self.targets == targets)


class SimulationBuilder:
    """Resolves a manifest (and optional parameter overlays) into a SimulationPlan.

    Plans that differ from the previous ones only in the values of MuJoCo targets (a
    calibration's candidates) are not compiled again when every target kind can be written
    into a compiled model bit-identically (``overlays.compiled``): their cost no longer grows
    with the model's meshes. ``release(plan)`` lets the builder reuse a finished candidate's
    model for the next one.
    """

    def __init__(self, registry: ComponentRegistry | None = None) -> None:
        self.registry = registry or ComponentRegistry.standard()
        # Parsed models and geom-inferred inertials, keyed by the model files' identity (a
        # few each: a builder that sees its model files change keeps only the latest ones).
        self._models: dict[ModelKey, ParsedModel] = {}
        self._inertials: _Bounded[InertialKey, list[Inertial]] = _Bounded(MODEL_CACHE_ENTRIES)
        # The components resolved last: (manifest, registry, component overlays, components).
        # (manifest, registry, component overlay key, the components resolved for them)
        self._resolved: tuple[SimulationManifest, ComponentRegistry, tuple[object, ...],
                              list[ResolvedComponent]] | None = None
        # The candidate family of the latest plans (see _CandidateFamily), and its lock.
        self._family: _CandidateFamily | None = None
        self._family_lock = threading.Lock()

    def build(self, manifest: SimulationManifest | str | Path,
              overlays: ParameterOverlays | Sequence[OverlayParameter] | None = None
              ) -> SimulationPlan:
        """Resolve ``manifest``; ``overlays`` apply after the manifest's own
        ``parameter_overlays`` (a parameter with the same id replaces the manifest's)."""
        if not isinstance(manifest, SimulationManifest):
            manifest = load_manifest(manifest)
        overlays = self._overlays(manifest, overlays)
        registry = self._registry_with_extensions(manifest)
        components = self._components(manifest, registry, overlays)
        spec, model_key, parsed = self._parse_model(manifest, fresh=False)
        targets = tuple(target for _, target in overlays.mujoco)
        family = self._family
        if family is not None and not family.matches(manifest, registry, components,
                                                     model_key, targets):
            family = None
        model = self._written(family, overlays) if family is not None else None
        if model is None:
            if spec is parsed.spec:  # the cached parse itself: the overlays go into a copy
                spec = spec.copy()
            apply_mujoco_overlays(spec, overlays.mujoco, overlay_failure,
                                  inertials=self._inertials, model_key=model_key)
            for component in components:
                registry[component.type].prepare(component, spec)
            model = self._compile(manifest, spec, overlays)
            if family is not None:
                if family.verified is None:
                    self._verify(family, overlays, model)
            elif model_key is not None and compiled_overlays.writable(spec, overlays.mujoco):
                family = self._family = _CandidateFamily(
                    manifest, registry, components, model_key, targets, spec, model)
        check_overlays_held(model, family.spec if family is not None else spec, overlays)
        try:
            timebase = Timebase.from_seconds(model.opt.timestep)
        except ValueError as exc:
            raise PlanError(f"{manifest.model}: option timestep: {exc}") from None
        ctx = BuildContext(model, timebase)
        devices: list[DeviceDescriptor] = []
        actuators: list[ActuatorDescriptor] = []
        endpoints: dict[str, str] = {}
        for component in components:
            try:
                descriptor = registry[component.type].bind(component, ctx)
            except FibrilError as exc:
                raise component_overlay_failure(exc, component.id, overlays) from None
            if isinstance(descriptor, ActuatorDescriptor):
                if descriptor.endpoint in endpoints:
                    raise component.where.key("endpoint").fail(
                        f"endpoint {descriptor.endpoint!r} is already used by component "
                        f"{endpoints[descriptor.endpoint]!r}")
                endpoints[descriptor.endpoint] = component.id
                actuators.append(descriptor)
            elif isinstance(descriptor, DeviceDescriptor):
                devices.append(descriptor)
            else:
                raise PlanError(f"component {component.id!r}: type {component.type!r} bound to "
                                f"a {type(descriptor).__name__}, neither a DeviceDescriptor nor "
                                f"an ActuatorDescriptor")
        scenario = manifest.scenario
        keyframe_id = scenario_keyframe(manifest, model, scenario)
        check_initial_inputs(manifest, scenario.initial_inputs, {a.endpoint: a for a in actuators})
        provenance = build_provenance(manifest, model, parsed, overlays, scenario.seed)
        layout = prov.DeferredMapping(lambda: trace_layout(model, timebase, devices, actuators))
        plan = SimulationPlan(
            manifest=manifest, model=model, timebase=timebase, devices=tuple(devices),
            actuators=tuple(actuators), keyframe_id=keyframe_id, scenario=scenario,
            provenance=provenance, layout=layout)
        if family is not None and model is not family.model:
            with self._family_lock:
                family.issued[id(plan)] = plan
        return plan

    def model_spec(self, manifest: SimulationManifest | str | Path,
                   overlays: ParameterOverlays | Sequence[OverlayParameter] | None = None
                   ) -> mujoco.MjSpec:
        """The MjSpec ``build`` compiles for the same arguments: the model with the MuJoCo
        overlays applied and the components' additions (``mjcf_export`` writes it out)."""
        if not isinstance(manifest, SimulationManifest):
            manifest = load_manifest(manifest)
        overlays = self._overlays(manifest, overlays)
        registry = self._registry_with_extensions(manifest)
        components = self._components(manifest, registry, overlays)
        spec, model_key, _ = self._parse_model(manifest)
        apply_mujoco_overlays(spec, overlays.mujoco, overlay_failure,
                              inertials=self._inertials, model_key=model_key)
        for component in components:
            registry[component.type].prepare(component, spec)
        return spec

    def release(self, plan: SimulationPlan) -> None:
        """The caller is done with ``plan``: it keeps no reference to the plan, its instances,
        its model or arrays of that model. The builder may then write a later candidate's
        values into the same model instead of copying one (a mesh model is tens of MB). A
        model still referenced from Python when its turn comes is left alone."""
        family = self._family
        if family is None or not family.verified:
            return
        with self._family_lock:
            if family.issued.get(id(plan)) is not plan:
                return  # not this family's, or released already
            del family.issued[id(plan)]
            family.pool.append(plan.model)
            del family.pool[:-_POOL_MODELS]

    def _written(self, family: _CandidateFamily, overlays: ParameterOverlays
                 ) -> mujoco.MjModel | None:
        """The family's model with ``overlays``' values written in, without compiling; None
        until the family is verified, or when a value needs the compiler's checks."""
        if not family.verified:
            return None
        with self._family_lock:
            model = self._reusable(family)
            if model is None:
                model = copy.copy(family.model)
            if family.data is None:
                family.data = mujoco.MjData(family.model)
            if compiled_overlays.write(model, family.data, family.spec, overlays.mujoco,
                                       family.model):
                return model
            family.pool.append(model)  # untouched; still reusable
            return None

    @staticmethod
    def _reusable(family: _CandidateFamily) -> mujoco.MjModel | None:
        """A pooled model that nothing but the pool references any more."""
        pool = family.pool
        for i in range(len(pool)):  # (no enumerate: its reused tuple would hold a reference)
            if sys.getrefcount(pool[i]) <= 2:  # the pool's and getrefcount's own
                return pool.pop(i)
        return None

    def _verify(self, family: _CandidateFamily, overlays: ParameterOverlays,
                compiled: mujoco.MjModel) -> None:
        """Compare a written copy of the family's model with a full compile of the same
        values, once: the written path is used only when they are bit-identical."""
        with self._family_lock:
            if family.verified is not None:
                return
            candidate = copy.copy(family.model)
            data = mujoco.MjData(family.model)
            if not compiled_overlays.write(candidate, data, family.spec, overlays.mujoco,
                                           family.model):
                return  # a value the compiler had to check: try again with the next one
            family.data = data
            family.verified = prov.saved_model(candidate) == prov.saved_model(compiled)

    # (attributes, so that a test can count or replace them)
    _overlays = staticmethod(merge_overlays)
    _compile = staticmethod(compile_model)

    def _registry_with_extensions(self, manifest: SimulationManifest) -> ComponentRegistry:
        if not manifest.extensions:
            return self.registry
        registry = ComponentRegistry()
        for type_id in self.registry:
            registry.register(self.registry[type_id])
        for i, reference in enumerate(manifest.extensions):
            try:
                registry.load_extension(reference)
            except FibrilError:
                raise
            except Exception as exc:  # noqa: BLE001 - extension code is foreign
                raise ManifestError(f"{manifest.path}: extensions[{i}]: cannot load "
                                    f"{reference!r}: {type(exc).__name__}: {exc}") from None
        return registry

    def _components(self, manifest: SimulationManifest, registry: ComponentRegistry,
                    overlays: ParameterOverlays) -> list[ResolvedComponent]:
        """The resolved components; reused while manifest, registry and component overlays
        are the same (a calibration of MuJoCo parameters resolves them once)."""
        key = tuple((cid, tuple(sorted(paths.items())))
                    for cid, paths in sorted(overlays.components.items()))
        last = self._resolved
        if last is not None and last[0] is manifest and last[1] is registry and last[2] == key:
            return last[3]
        components = resolve_components(manifest, registry, overlays)
        self._resolved = (manifest, registry, key, components)
        return components

    def _parse_model(self, manifest: SimulationManifest, *, fresh: bool = True
                     ) -> tuple[mujoco.MjSpec, ModelKey | None, ParsedModel]:
        """A fresh MjSpec of the model (a copy of a cached parse while its files are
        unchanged), the key of that parse and what is known of its files. ``fresh=False``
        returns a cached parse itself (``parsed.spec``, to be copied before any change): a
        candidate whose values are written into a pooled model never needs the copy."""
        try:
            key = prov.included_file_keys(manifest.model)
        except OSError:
            key = None
        cached = self._models.get(key) if key is not None else None
        if cached is not None:
            return (cached.spec.copy() if fresh else cached.spec), key, cached
        try:
            spec = mujoco.MjSpec.from_file(str(manifest.model))
        except Exception as exc:  # noqa: BLE001 - MuJoCo raises plain ValueError
            raise PlanError(f"{manifest.model}: cannot parse MJCF: {one_line(exc)}") from None
        base = manifest.model.parent
        parsed = ParsedModel(
            spec=spec.copy(), assets=tuple(prov.asset_files(spec, manifest.model)),
            model_sha256=prov.sha256_file(manifest.model),
            model_files={prov.relative(p, base): prov.sha256_file(p)
                         for p in prov.included_files(manifest.model)})
        if key is not None:
            if len(self._models) >= MODEL_CACHE_ENTRIES:
                self._models.pop(next(iter(self._models)))
            self._models[key] = parsed
        return spec, key, parsed



def trace_layout(model: mujoco.MjModel, timebase: Timebase,
                 devices: Sequence[DeviceDescriptor],
                 actuators: Sequence[ActuatorDescriptor]) -> dict[str, JsonValue]:
    """Names a trace needs to answer semantic queries without the model."""
    joint_types = {0: "free", 1: "ball", 2: "slide", 3: "hinge"}
    obj = mujoco.mjtObj
    return {
        "timestep_ns": timebase.timestep_ns,
        "bodies": [mujoco.mj_id2name(model, obj.mjOBJ_BODY, i) or f"body{i}"
                   for i in range(model.nbody)],
        "joints": [{"name": mujoco.mj_id2name(model, obj.mjOBJ_JOINT, i) or f"joint{i}",
                    "type": joint_types[int(model.jnt_type[i])],
                    "qposadr": int(model.jnt_qposadr[i]), "dofadr": int(model.jnt_dofadr[i])}
                   for i in range(model.njnt)],
        "sensors": [{"name": mujoco.mj_id2name(model, obj.mjOBJ_SENSOR, i) or f"sensor{i}",
                     "adr": int(model.sensor_adr[i]), "dim": int(model.sensor_dim[i])}
                    for i in range(model.nsensor)],
        "actuators": [mujoco.mj_id2name(model, obj.mjOBJ_ACTUATOR, i) or f"actuator{i}"
                      for i in range(model.nu)],
        "endpoints": {a.endpoint: a.actuator for a in actuators},
        "devices": {d.id: {"sample_type": d.sample_type,
                           "component_names": list(d.component_names)} for d in devices},
    }


def _jsonable(value: object) -> JsonValue:
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, np.generic):  # a NumPy scalar
        item: JsonValue = value.item()
        return item
    return str(value)
