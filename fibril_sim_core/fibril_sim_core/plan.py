"""SimulationBuilder → SimulationPlan: the immutable, resolved blueprint of a simulation.

Everything that can be checked before running is checked here: component types and configs,
bindings against the compiled model, periods and latencies in whole ticks, the scenario keyframe
and initial inputs. Many independent SimulationInstances come from one plan.
"""

from __future__ import annotations

import copy
import math
import sys
import threading
import weakref
from collections.abc import Collection, Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

import mujoco

from . import provenance as prov
from .components import (ActuatorDescriptor, BuildContext, ComponentRegistry,
                         DeviceDescriptor, ResolvedComponent)
from .components.base import effective_config, validate_config
from .errors import FibrilError, ManifestError, PlanError
from .instance import SimulationInstance
from .manifest import InputSpec, ScenarioSpec, SimulationManifest, load_manifest
from .overlays import compiled as compiled_overlays
from .overlays.mujoco_targets import apply_mujoco_overlays, compiled_value
from .recorded_inputs import RecordedInputs, endpoint_signature, prepare_recorded_inputs
from .overlays import (ComponentTarget, MujocoTarget, OverlayError, OverlayParameter,
                       ParameterOverlays, load_overlay_artifact, merge_layers)
from .timebase import Timebase


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
    layout: Mapping[str, Any]

    @property
    def endpoints(self) -> Mapping[str, ActuatorDescriptor]:
        return MappingProxyType({a.endpoint: a for a in self.actuators})

    @property
    def recorded_input_signature(self) -> tuple[Any, ...]:
        """What parsing recorded inputs depends on (see ``prepare_recorded_inputs``)."""
        return endpoint_signature(self.actuators)

    def prepare_recorded_inputs(self, records: Iterable[Any]) -> RecordedInputs:
        """Validate and parse recorded inputs once, to replay them into many instances (of
        this plan or of any plan with the same endpoints, e.g. calibration candidates)."""
        return prepare_recorded_inputs(self.actuators, records)

    def robot_description(self, frame_prefix: str = "") -> str:
        """The URDF of the compiled model (links named like the TF frames; see
        ``robot_description``), its mesh files resolved from the MJCF's own directories."""
        from .robot_description import urdf_from_model

        spec = mujoco.MjSpec.from_file(str(self.manifest.model))
        return urdf_from_model(self.model, spec=spec, frame_prefix=frame_prefix)

    def link_frames(self) -> tuple[Any, ...]:
        """The robot description's links that are not bodies, fixed to a body (StaticFrame,
        names without prefix): they go on /tf_static beside the fixed bodies."""
        from .robot_description import link_frames

        return link_frames(self.model)

    def geom_markers(self, frame_prefix: str = "") -> tuple[Any, ...]:
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

    def create_instance(self, seed: int = 0, *, scenario: ScenarioSpec | None = None,
                        trace: Any = None, snapshot_every: int | None = None,
                        collect: bool = True, data: mujoco.MjData | None = None,
                        rollout_context: AbstractContextManager[Any] | None = None,
                        devices: Collection[str] | None = None) -> SimulationInstance:
        """A fresh, independent run: keyframe restored and scenario inputs queued at tick 0.

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
        return SimulationInstance(self, seed=seed, scenario=scenario, trace=trace,
                                  snapshot_every=snapshot_every, collect=collect, data=data,
                                  rollout_context=rollout_context, devices=devices)

    def inspect(self) -> dict[str, Any]:
        """A JSON-able document describing the plan (``fibril_sim inspect``)."""
        tb = self.timebase
        components: list[dict[str, Any]] = []
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
                         "initial_inputs": len(self.scenario.initial_inputs)},
            "trace": {"state_every_steps": self.manifest.trace.state_every_steps,
                      "frame_timing": self.manifest.trace.frame_timing},
            "runtime": _jsonable(self.manifest.runtime.__dict__),
            "provenance": _jsonable(self.provenance),
        }


_MODEL_CACHE_ENTRIES = 8


class _Bounded(dict):  # type: ignore[type-arg]
    """A dict that forgets its oldest entry beyond ``limit`` entries."""

    def __init__(self, limit: int) -> None:
        super().__init__()
        self.limit = limit

    def __setitem__(self, key: Any, value: Any) -> None:
        super().__setitem__(key, value)
        while len(self) > self.limit:
            del self[next(iter(self))]


@dataclass(frozen=True)
class _ParsedModel:
    """A parsed model and what is known of its files, kept while their file keys are the
    same: a calibration builds one plan per candidate from the same files."""

    spec: mujoco.MjSpec
    assets: tuple[Path, ...]
    model_sha256: str
    model_files: Mapping[str, str]


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
    model_key: Any
    targets: tuple[MujocoTarget, ...]
    spec: mujoco.MjSpec
    model: mujoco.MjModel
    verified: bool | None = None
    data: mujoco.MjData | None = None
    pool: list[mujoco.MjModel] = field(default_factory=list)
    issued: weakref.WeakValueDictionary = field(default_factory=weakref.WeakValueDictionary)

    def matches(self, manifest: SimulationManifest, registry: ComponentRegistry,
                components: list[ResolvedComponent], model_key: Any,
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
        self._models: dict[Any, _ParsedModel] = {}
        self._inertials: dict[Any, Any] = _Bounded(_MODEL_CACHE_ENTRIES)
        # The components resolved last: (manifest, registry, component overlays, components).
        self._resolved: tuple[Any, ...] | None = None
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
        spec, model_key, parsed = self._parse_model(manifest)
        targets = tuple(target for _, target in overlays.mujoco)
        family = self._family
        if family is not None and not family.matches(manifest, registry, components,
                                                     model_key, targets):
            family = None
        model = self._written(family, overlays) if family is not None else None
        if model is None:
            apply_mujoco_overlays(spec, overlays.mujoco, _overlay_failure,
                                  inertials=self._inertials, model_key=model_key)
            for component in components:
                registry.get(component.type).prepare(component, spec)
            model = self._compile(manifest, spec, overlays)
            if family is not None:
                if family.verified is None:
                    self._verify(family, overlays, model)
            elif model_key is not None and compiled_overlays.writable(spec, overlays.mujoco):
                family = self._family = _CandidateFamily(
                    manifest, registry, components, model_key, targets, spec, model)
        self._check_overlays_held(model, family.spec if family is not None else spec,
                                  overlays)
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
                descriptor = registry.get(component.type).bind(component, ctx)
            except FibrilError as exc:
                raise _component_overlay_failure(exc, component.id, overlays) from None
            if isinstance(descriptor, ActuatorDescriptor):
                if descriptor.endpoint in endpoints:
                    raise component.where.key("endpoint").fail(
                        f"endpoint {descriptor.endpoint!r} is already used by component "
                        f"{endpoints[descriptor.endpoint]!r}")
                endpoints[descriptor.endpoint] = component.id
                actuators.append(descriptor)
            else:
                devices.append(descriptor)
        scenario = manifest.scenario
        keyframe_id = self._keyframe(manifest, model, scenario)
        self._check_inputs(manifest, scenario.initial_inputs, {a.endpoint: a for a in actuators})
        provenance = self._provenance(manifest, model, parsed, overlays)
        layout = prov.DeferredMapping(lambda: trace_layout(model, timebase, devices, actuators))
        plan = SimulationPlan(
            manifest=manifest, model=model, timebase=timebase, devices=tuple(devices),
            actuators=tuple(actuators), keyframe_id=keyframe_id, scenario=scenario,
            provenance=provenance, layout=layout)
        if family is not None and model is not family.model:
            with self._family_lock:
                family.issued[id(plan)] = plan
        return plan

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

    @staticmethod
    def _overlays(manifest: SimulationManifest,
                  given: ParameterOverlays | Sequence[OverlayParameter] | None
                  ) -> ParameterOverlays:
        if not manifest.parameter_overlays and isinstance(given, ParameterOverlays):
            return given  # already validated and canonical
        layers = [load_overlay_artifact(path).parameters for path in manifest.parameter_overlays]
        if isinstance(given, ParameterOverlays):
            layers.append(given.parameters)
        elif given is not None:
            layers.append(tuple(given))
        if not layers:
            return ParameterOverlays()
        return ParameterOverlays(merge_layers(layers))

    @staticmethod
    def _check_overlays_held(model: mujoco.MjModel, spec: mujoco.MjSpec,
                             overlays: ParameterOverlays) -> None:
        """Every applied value must be what the compiled model holds."""
        for parameter, target in overlays.mujoco:
            held = compiled_value(model, spec, target)
            if held is None:
                continue
            wanted = parameter.value
            pairs = zip(held, wanted) if isinstance(held, tuple) else ((held, wanted),)
            if not all(math.isclose(h, float(w), rel_tol=1e-9, abs_tol=1e-12) for h, w in pairs):
                raise _overlay_failure(parameter, target,
                                       f"the compiled model holds {held!r} instead; a compiler "
                                       f"setting or default overrides this field")

    def _registry_with_extensions(self, manifest: SimulationManifest) -> ComponentRegistry:
        if not manifest.extensions:
            return self.registry
        registry = ComponentRegistry()
        for type_id in self.registry:
            registry.register(self.registry.get(type_id))
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
        components = self._resolve_components(manifest, registry, overlays)
        self._resolved = (manifest, registry, key, components)
        return components

    def _resolve_components(self, manifest: SimulationManifest, registry: ComponentRegistry,
                            overlays: ParameterOverlays) -> list[ResolvedComponent]:
        resolved: list[ResolvedComponent] = []
        known = {c.id for c in manifest.components}
        for component_id in sorted(set(overlays.components) - known):
            pid, value = next(iter(overlays.components[component_id].values()))
            raise OverlayError(f"overlay parameter {pid!r} (value {value!r}): target component "
                               f"{component_id!r} is not in the manifest; components: "
                               f"{', '.join(sorted(known)) or 'none'}")
        for spec in manifest.components:
            kind = registry.get(spec.type)
            if kind is None:
                raise spec.where.key("type").fail(
                    f"unknown component type {spec.type!r}; known: {', '.join(registry)}")
            profile = manifest.profiles[spec.profile].config if spec.profile else None
            config = effective_config(profile, spec.config)
            overlaid = overlays.components.get(spec.id, {})
            for path, (pid, value) in overlaid.items():
                target = ComponentTarget(spec.id, path)
                field_spec = kind.fields.get(path)
                if field_spec is None or field_spec.kind not in ("float", "duration", "int"):
                    numeric = [n for n, f in kind.fields.items()
                               if f.kind in ("float", "duration", "int")]
                    raise OverlayError(f"overlay parameter {pid!r} (value {value!r}): "
                                       f"{target.key}: {spec.type} has no numeric scalar "
                                       f"config key {path!r}; numeric keys: "
                                       f"{', '.join(numeric)}")
                if field_spec.kind == "int" and float(value) != int(value):
                    raise OverlayError(f"overlay parameter {pid!r}: {target.key} takes an "
                                       f"integer, got {value!r}")
                config[path] = int(value) if field_spec.kind == "int" else value
            try:
                validated = validate_config(kind.fields, config, spec.where.key("config"))
            except FibrilError as exc:
                hit = [(p, v, k) for k, (p, v) in overlaid.items() if f".{k}:" in str(exc)]
                if not hit:
                    raise
                pid, value, path = hit[0]
                raise OverlayError(f"overlay parameter {pid!r} (value {value!r}) on "
                                   f"component_config:{spec.id}:{path}: {exc}") from None
            component = ResolvedComponent(
                id=spec.id, type=spec.type, endpoint=spec.endpoint, bind=spec.bind,
                config=MappingProxyType(validated), where=spec.where)
            if spec.endpoint is not None and kind.role != "actuator":
                raise spec.where.key("endpoint").fail(
                    f"only actuator components have an endpoint; {spec.type} is a device")
            kind.check_bind(component)
            resolved.append(component)
        return resolved

    def _parse_model(self, manifest: SimulationManifest
                     ) -> tuple[mujoco.MjSpec, Any, _ParsedModel]:
        """A fresh MjSpec of the model (a copy of a cached parse while its files are
        unchanged), the key of that parse and what is known of its files."""
        try:
            key = prov.included_file_keys(manifest.model)
        except OSError:
            key = None
        cached = self._models.get(key) if key is not None else None
        if cached is not None:
            return cached.spec.copy(), key, cached
        try:
            spec = mujoco.MjSpec.from_file(str(manifest.model))
        except Exception as exc:  # noqa: BLE001 - MuJoCo raises plain ValueError
            raise PlanError(f"{manifest.model}: cannot parse MJCF: {_one_line(exc)}") from None
        base = manifest.model.parent
        parsed = _ParsedModel(
            spec=spec.copy(), assets=tuple(prov.asset_files(spec, manifest.model)),
            model_sha256=prov.sha256_file(manifest.model),
            model_files={prov.relative(p, base): prov.sha256_file(p)
                         for p in prov.included_files(manifest.model)})
        if key is not None:
            if len(self._models) >= _MODEL_CACHE_ENTRIES:
                self._models.pop(next(iter(self._models)))
            self._models[key] = parsed
        return spec, key, parsed

    @staticmethod
    def _compile(manifest: SimulationManifest, spec: mujoco.MjSpec,
                 overlays: ParameterOverlays) -> mujoco.MjModel:
        try:
            return spec.compile()
        except Exception as exc:  # noqa: BLE001
            with_overlays = (f" (with parameter overlays {', '.join(p.id for p in overlays.parameters)})"
                             if overlays.mujoco else "")
            raise PlanError(f"{manifest.model}: cannot compile model{with_overlays}: "
                            f"{_one_line(exc)}") from None

    @staticmethod
    def _keyframe(manifest: SimulationManifest, model: mujoco.MjModel,
                  scenario: ScenarioSpec) -> int:
        if scenario.keyframe is None:
            return -1
        key = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_KEY, scenario.keyframe)
        if key < 0:
            names = [mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_KEY, i) for i in range(model.nkey)]
            known = ", ".join(n for n in names if n) or "none in the model"
            raise ManifestError(f"{manifest.path}: scenario.keyframe: no keyframe named "
                                f"{scenario.keyframe!r}; known: {known}")
        return key

    @staticmethod
    def _check_inputs(manifest: SimulationManifest, inputs: Sequence[InputSpec],
                      endpoints: Mapping[str, ActuatorDescriptor]) -> None:
        last: dict[str, int] = {}
        for i, item in enumerate(inputs):
            where = f"{manifest.path}: scenario.initial_inputs[{i}]"
            endpoint = endpoints.get(item.source_id)
            if endpoint is None:
                raise ManifestError(f"{where}.source_id: unknown source {item.source_id!r}; "
                                    f"endpoints: {', '.join(endpoints) or 'none'}")
            if item.payload_type != endpoint.payload_type:
                raise ManifestError(f"{where}.payload_type: {item.payload_type!r} is not "
                                    f"accepted by {item.source_id!r}; expected "
                                    f"{endpoint.payload_type!r}")
            try:
                endpoint.create().parse(item.payload)
            except ValueError as exc:
                raise ManifestError(f"{where}.payload: {exc}") from None
            if item.source_sequence <= last.get(item.source_id, -1):
                raise ManifestError(f"{where}.source_sequence: {item.source_sequence} does not "
                                    f"increase for source {item.source_id!r}")
            last[item.source_id] = item.source_sequence

    @staticmethod
    def _provenance(manifest: SimulationManifest, model: mujoco.MjModel, parsed: _ParsedModel,
                    overlays: ParameterOverlays) -> Mapping[str, Any]:
        """File hashes are taken now (what was built, even if a file changes later); the
        hashes of in-memory objects (manifest document, compiled model, parameters) on first
        read."""
        base = manifest.model.parent
        files = {
            "model_sha256": parsed.model_sha256,
            "model_files": dict(parsed.model_files),
            "assets": {prov.relative(p, base): prov.sha256_file(p)
                       for p in sorted(set(parsed.assets))},
            "parameter_overlays": {str(p): prov.sha256_file(p)
                                   for p in manifest.parameter_overlays},
        }
        return prov.DeferredMapping(lambda: {
            "manifest_path": str(manifest.path),
            "manifest_sha256": manifest.sha256,
            "model_path": str(manifest.model),
            "model_sha256": files["model_sha256"],
            "model_files": files["model_files"],
            "assets": files["assets"],
            "compiled_model_sha256": prov.compiled_model_sha256(model),
            "parameter_set_hash": overlays.parameter_set_hash,
            "parameter_overlays": files["parameter_overlays"],
            "parameters": overlays.describe(),
            "extensions": [{"reference": ref,
                            "version": prov.package_version(ref.partition(":")[0].split(".")[0])}
                           for ref in manifest.extensions],
            "build": prov.build_identity(),
        })


def trace_layout(model: mujoco.MjModel, timebase: Timebase,
                 devices: Sequence[DeviceDescriptor],
                 actuators: Sequence[ActuatorDescriptor]) -> dict[str, Any]:
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


def _overlay_failure(parameter: OverlayParameter, target: MujocoTarget,
                     problem: str) -> OverlayError:
    source = f"{parameter.source}: " if parameter.source else ""
    return OverlayError(f"{source}overlay parameter {parameter.id!r} (value {parameter.value!r}) "
                        f"on {target.key}: {problem}")


def _component_overlay_failure(exc: FibrilError, component_id: str,
                               overlays: ParameterOverlays) -> FibrilError:
    """Blame an overlay, not the manifest, when an overlaid config key fails to bind."""
    for path, (pid, value) in overlays.components.get(component_id, {}).items():
        if f".{path}:" in str(exc):
            return OverlayError(f"overlay parameter {pid!r} (value {value!r}) on "
                                f"component_config:{component_id}:{path}: {exc}")
    return exc


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())


def _jsonable(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if hasattr(value, "item"):
        return value.item()
    return str(value)
