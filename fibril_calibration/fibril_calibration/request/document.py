"""The calibration request (schema 3.1): loaded, validated whole, resolved against the plan.

Every inconsistency is a ``CalibrationRequestError`` naming the file, the key path, the value
and what was expected, raised before any candidate is evaluated: unknown keys, wrong versions,
duplicate or unknown ids, bounds, selectors that do not resolve on the nominal plan, signal
shapes and timestamps, alignment/horizon combinations, recorded inputs the plan's ingress would
refuse, initial states that do not fit the model, and statistical claims the request cannot
support (``standardized_gaussian_residuals`` with non-measurement scales or engineering
weights).

Relative paths (the manifest, ``samples_file``, ``recorded_inputs_file``, ``recording`` and
``samples_from.recording``) resolve against the request file's folder. A ``recording`` (a
fibril_sim trace: rosbag2/MCAP) gives an episode its recorded inputs and ``samples_from`` gives a
signal its reference samples from a trace selector; both are read here, once, through
``recordings`` (see there), so the episode content hash covers the loaded data as for files.

The nominal plan is built once at the initial parameter values (and probed at the lower and
upper bounds) so that targets and selectors are checked on a real compiled model.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from fibril_sim_core import schema as s
from fibril_sim_core.errors import FibrilError
from fibril_sim_core.manifest import SimulationManifest, load_manifest
from fibril_sim_core.overlays import OverlayParameter

from ..errors import CalibrationRequestError
from ..model.candidate_plan import CandidatePlanBuilder, CandidatePlanBuilderProtocol
from ..model.decoders import CalibrationDeviceOutputDecoderRegistry
from ..model.observations import ObservationSpec, parse_observation
from ..parameters import CalibrationParameter
from ..recordings.time_offsets import candidate_builder as offset_aware
from ..recordings.traces import Recordings
from .canonical import canonical_sha256
from .episode_list import (RESERVED_EPISODE_IDS, check_standardized, open_sources,
                           parse_episodes, split_windows)
from .episode_specs import EpisodeSpec
from .gains import sidecar_gains
from .parameter_specs import (bind_time_offsets, check_activation_states, parse_parameters,
                              probe_plans)
from .settings import (OBJECTIVE_VERSION, OPTIMIZER_TYPES, RESERVED_CONTEXT_KEYS, AnalysisSpec,
                       ContextValue, ExecutionSpec, FitSpec, ObjectiveSpec, OptimizerSpec,
                       ProfileLikelihoodSpec, parse_analysis, parse_context, parse_execution,
                       parse_fit, parse_objective, parse_optimizer)

if TYPE_CHECKING:
    from fibril_sim_core.plan import SimulationPlan



# The settings specs and the reserved names are part of this module's API (re-exported).
__all__ = ["OBJECTIVE_VERSION", "OPTIMIZER_TYPES", "RESERVED_CONTEXT_KEYS",
           "RESERVED_EPISODE_IDS", "SCHEMA_MAJOR", "SCHEMA_MINORS", "AnalysisSpec",
           "CalibrationRequest", "CandidateFactory", "ExecutionSpec", "FitSpec", "ObjectiveSpec",
           "OptimizerSpec", "ProfileLikelihoodSpec", "load_calibration_request",
           "parse_calibration_request"]

SCHEMA_MAJOR = 3
SCHEMA_MINORS = (1,)

_TOP_REQUIRED = ("schema_version", "manifest", "parameters", "observations", "training")
_TOP_OPTIONAL = ("validation", "optimizer", "objective", "execution", "analysis", "fit",
                 "context", "sources", "sidecar_gains")


# --------------------------------------------------------------------------- typed request

@dataclass(frozen=True)
class CalibrationRequest:
    """A validated calibration request, resolved against its nominal plan."""

    path: Path
    document: Mapping[str, object] = field(repr=False)  # as parsed from YAML
    sha256: str
    manifest: SimulationManifest = field(repr=False)
    nominal_plan: SimulationPlan = field(repr=False)
    parameters: tuple[CalibrationParameter, ...]
    observations: tuple[ObservationSpec, ...]
    training: tuple[EpisodeSpec, ...]
    validation: tuple[EpisodeSpec, ...]
    optimizer: OptimizerSpec
    objective: ObjectiveSpec
    execution: ExecutionSpec
    analysis: AnalysisSpec
    fit: FitSpec
    context: Mapping[str, ContextValue]
    # Overlays held in every candidate plan (``sidecar_gains``: a run's impedance gains).
    fixed_overlays: tuple[OverlayParameter, ...] = ()

    @property
    def parameter_ids(self) -> tuple[str, ...]:
        return tuple(p.id for p in self.parameters)

    @property
    def initial_values(self) -> np.ndarray:
        return np.array([p.initial for p in self.parameters], dtype=np.float64)

    def observation(self, observation_id: str) -> ObservationSpec:
        for observation in self.observations:
            if observation.id == observation_id:
                return observation
        raise KeyError(observation_id)

    def episodes(self, scope: str) -> tuple[EpisodeSpec, ...]:
        return self.training if scope == "training" else self.validation

    def observation_spec_sha256(self) -> str:
        return canonical_sha256([o.describe() for o in self.observations])


# --------------------------------------------------------------------------- loading

CandidateFactory = Callable[[SimulationManifest, Sequence[CalibrationParameter]],
                            "CandidatePlanBuilderProtocol"]


def load_calibration_request(
        path: str | Path, *, decoders: CalibrationDeviceOutputDecoderRegistry | None = None,
        candidate_builder: CandidateFactory | None = None) -> CalibrationRequest:
    """Read, validate and resolve a calibration request file.

    ``candidate_builder(manifest, parameters)`` makes the CandidatePlanBuilder (default: the
    typed-overlay one); the nominal plan it builds resolves the selectors.
    """
    file = Path(path).resolve()
    document = s.load_yaml(file, CalibrationRequestError)
    return parse_calibration_request(document, file, decoders=decoders,
                                     candidate_builder=candidate_builder)


def parse_calibration_request(
        document: object, file: Path, *,
        decoders: CalibrationDeviceOutputDecoderRegistry | None = None,
        candidate_builder: CandidateFactory | None = None) -> CalibrationRequest:
    """Validate a parsed request document; relative paths resolve against ``file``'s folder."""
    decoders = decoders or CalibrationDeviceOutputDecoderRegistry.standard()
    root = s.Where(str(file), "", CalibrationRequestError)
    doc = s.mapping(document, root)
    s.keys(doc, root, required=_TOP_REQUIRED, optional=_TOP_OPTIONAL)
    s.version(doc["schema_version"], root.key("schema_version"),
              major=SCHEMA_MAJOR, minors=SCHEMA_MINORS)
    base = file.parent

    manifest_path = base / s.string(doc["manifest"], root.key("manifest"))
    try:
        manifest = load_manifest(manifest_path)
    except FibrilError as exc:
        raise root.key("manifest").fail(str(exc)) from None

    parameters = parse_parameters(doc["parameters"], root.key("parameters"))
    named_sources = doc.get("sources")
    named = named_sources if isinstance(named_sources, Mapping) else {}
    fixed = sidecar_gains(doc.get("sidecar_gains"), root.key("sidecar_gains"), base, named)
    if fixed and candidate_builder is not None:
        raise root.key("sidecar_gains").fail("the gains are fixed overlays of the standard "
                                             "CandidatePlanBuilder; a custom candidate "
                                             "builder takes them itself")
    factory = candidate_builder or CandidatePlanBuilder.holding(fixed)
    candidates: CandidatePlanBuilderProtocol = offset_aware(factory, manifest, parameters)
    probes = probe_plans(candidates, parameters, root.key("parameters"))
    nominal = probes["initial"]

    observations = _observations(doc["observations"], root.key("observations"), nominal,
                                 decoders)
    objective = parse_objective(doc.get("objective", {}), root.key("objective"))
    by_id = {o.id: o for o in observations}
    episode_ids: dict[str, str] = {}
    with Recordings() as recordings, open_sources(doc, root, base) as sources:
        training = parse_episodes(doc["training"], root.key("training"), "training", by_id, nominal,
                             base, episode_ids, recordings, required=True, sources=sources)
        validation = parse_episodes(doc.get("validation", []), root.key("validation"), "validation",
                               by_id, nominal, base, episode_ids, recordings, required=False,
                               sources=sources)
    training, validation = split_windows(training, validation, root.key("training"))
    training, validation = bind_time_offsets(parameters, by_id, training, validation, root)
    check_activation_states(training, root.key("training"), probes)
    check_activation_states(validation, root.key("validation"), probes)
    if objective.standardized_gaussian_residuals:
        check_standardized(doc, root, training + validation)
    fit = parse_fit(doc.get("fit"), root.key("fit"))
    if fit.max_validation_rms is not None and not validation:
        raise root.key("fit").key("max_validation_rms").fail(
            "a validation RMS criterion needs validation episodes; the request has none")

    # Every section is validated before the document is hashed: the hash needs finite numbers.
    optimizer = parse_optimizer(doc.get("optimizer", {}), root.key("optimizer"))
    execution = parse_execution(doc.get("execution", {}), root.key("execution"))
    analysis = parse_analysis(doc.get("analysis", {}), root.key("analysis"))
    context = parse_context(doc.get("context", {}), root.key("context"))
    return CalibrationRequest(
        path=file, document=doc, sha256=_document_sha256(doc, root), manifest=manifest,
        nominal_plan=nominal, parameters=parameters, observations=observations,
        training=training, validation=validation, optimizer=optimizer, objective=objective,
        execution=execution, analysis=analysis, fit=fit, context=context,
        fixed_overlays=fixed)


# --------------------------------------------------------------------------- observations

def _observations(value: object, where: s.Where, plan: SimulationPlan,
                  decoders: CalibrationDeviceOutputDecoderRegistry
                  ) -> tuple[ObservationSpec, ...]:
    items = s.sequence(value, where)
    if not items:
        raise where.fail("expected at least one observation")
    out: list[ObservationSpec] = []
    seen: dict[str, str] = {}
    for i, item in enumerate(items):
        observation = parse_observation(item, where.key(i), plan, decoders)
        if observation.id in seen:
            raise where.key(i).key("id").fail(f"duplicate observation id {observation.id!r} "
                                              f"(first declared at {seen[observation.id]})")
        seen[observation.id] = where.key(i).path
        out.append(observation)
    return tuple(out)



def _document_sha256(doc: Mapping[str, object], root: s.Where) -> str:
    """The request hash; a non-finite number the sections let through (e.g. in a free-form
    ``description``) is an error naming its key path, never a bare ValueError."""
    try:
        return canonical_sha256(doc)
    except ValueError:
        stack: list[tuple[object, s.Where]] = [(doc, root)]
        while stack:
            value, where = stack.pop()
            if isinstance(value, float) and not math.isfinite(value):
                raise where.fail(f"expected a finite number, got {value!r}") from None
            if isinstance(value, Mapping):
                stack.extend((v, where.key(str(k))) for k, v in value.items())
            elif isinstance(value, (list, tuple)):
                stack.extend((v, where.key(i)) for i, v in enumerate(value))
        raise root.fail("the request cannot be hashed as canonical JSON") from None

