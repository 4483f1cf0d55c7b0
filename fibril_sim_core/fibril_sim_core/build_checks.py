"""What a build checks and records besides the components' configs: the parameter overlays
(merged in layers, then held by the compiled model), the compile, the components resolved with
their overlaid configs, the scenario keyframe and initial inputs, and the plan's provenance.
Plain functions of the manifest and the model, used by ``SimulationBuilder`` (plan.py)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

import mujoco

from . import provenance as prov
from .components import ActuatorDescriptor, ComponentRegistry, ResolvedComponent
from .components.base import effective_config, validate_config
from .errors import FibrilError, ManifestError, PlanError
from .manifest import InputSpec, ScenarioSpec, SimulationManifest
from .overlays import (ComponentTarget, MujocoTarget, OverlayError, OverlayParameter,
                       ParameterOverlays, load_overlay_artifact, merge_layers)
from .overlays.mujoco_targets import compiled_value


@dataclass(frozen=True)
class ParsedModel:
    """A parsed model and what is known of its files, kept while their file keys are the
    same: a calibration builds one plan per candidate from the same files."""

    spec: mujoco.MjSpec
    assets: tuple[Path, ...]
    model_sha256: str
    model_files: Mapping[str, str]


def merge_overlays(manifest: SimulationManifest,
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


def check_overlays_held(model: mujoco.MjModel, spec: mujoco.MjSpec,
                        overlays: ParameterOverlays) -> None:
    """Every applied value must be what the compiled model holds."""
    for parameter, target in overlays.mujoco:
        held = compiled_value(model, spec, target)
        if held is None:
            continue
        wanted = parameter.value  # a scalar, or (min, max) for a range target
        pairs = zip(held if isinstance(held, tuple) else (held,),
                    wanted if isinstance(wanted, tuple) else (wanted,))
        if not all(math.isclose(h, w, rel_tol=1e-9, abs_tol=1e-12) for h, w in pairs):
            raise overlay_failure(parameter, target,
                                   f"the compiled model holds {held!r} instead; a compiler "
                                   f"setting or default overrides this field")


def resolve_components(manifest: SimulationManifest, registry: ComponentRegistry,
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


def compile_model(manifest: SimulationManifest, spec: mujoco.MjSpec,
                  overlays: ParameterOverlays) -> mujoco.MjModel:
    try:
        return spec.compile()
    except Exception as exc:  # noqa: BLE001
        with_overlays = (f" (with parameter overlays {', '.join(p.id for p in overlays.parameters)})"
                         if overlays.mujoco else "")
        raise PlanError(f"{manifest.model}: cannot compile model{with_overlays}: "
                        f"{one_line(exc)}") from None


def scenario_keyframe(manifest: SimulationManifest, model: mujoco.MjModel,
                      scenario: ScenarioSpec) -> int:
    if scenario.keyframe is None:
        return -1
    key = int(mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_KEY, scenario.keyframe))
    if key < 0:
        names = [mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_KEY, i) for i in range(model.nkey)]
        known = ", ".join(n for n in names if n) or "none in the model"
        raise ManifestError(f"{manifest.path}: scenario.keyframe: no keyframe named "
                            f"{scenario.keyframe!r}; known: {known}")
    return key


def check_initial_inputs(manifest: SimulationManifest, inputs: Sequence[InputSpec],
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


def build_provenance(manifest: SimulationManifest, model: mujoco.MjModel, parsed: ParsedModel,
                     overlays: ParameterOverlays, episode_seed: int) -> Mapping[str, Any]:
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
        "episode_seed": episode_seed,
    })


def overlay_failure(parameter: OverlayParameter, target: MujocoTarget,
                    problem: str) -> OverlayError:
    source = f"{parameter.source}: " if parameter.source else ""
    return OverlayError(f"{source}overlay parameter {parameter.id!r} (value {parameter.value!r}) "
                        f"on {target.key}: {problem}")


def component_overlay_failure(exc: FibrilError, component_id: str,
                              overlays: ParameterOverlays) -> FibrilError:
    """Blame an overlay, not the manifest, when an overlaid config key fails to bind."""
    for path, (pid, value) in overlays.components.get(component_id, {}).items():
        if f".{path}:" in str(exc):
            return OverlayError(f"overlay parameter {pid!r} (value {value!r}) on "
                                f"component_config:{component_id}:{path}: {exc}")
    return exc


def one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())
