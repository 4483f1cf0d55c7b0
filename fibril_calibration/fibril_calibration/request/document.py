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
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from fibril_sim_core import _schema as s
from fibril_sim_core.errors import FibrilError
from fibril_sim_core.execution.backend import Backend, parse_backend
from fibril_sim_core.manifest import SimulationManifest, load_manifest
from fibril_sim_core.overlays import OverlayError, OverlayTarget, parse_target, parse_value

from ..errors import CalibrationRequestError
from ..losses import LOSS_TYPES, LossSpec
from ..model.decoders import CalibrationDeviceOutputDecoderRegistry
from ..model.observations import ObservationSpec, parse_observation
from ..parameters import PARAMETERIZATIONS, CalibrationParameter, Prior, parameter_problems
from ..recordings.traces import Recordings
from .canonical import canonical_sha256
from .episode_specs import (EpisodeSpec, _EpisodeTraces, _episode_hash, _open_recording,
                            _recorded_inputs, _recording_episode, _recording_inputs,
                            _run_inputs_file, _signal, signal_entries)
from .initial_states import _initial_state, initial_state_fit

if TYPE_CHECKING:
    from fibril_sim_core.plan import SimulationPlan

    from ..model.candidate_plan import CandidatePlanBuilderProtocol

SCHEMA_MAJOR = 3
SCHEMA_MINORS = (1,)
OPTIMIZER_TYPES = ("ceres", "least_squares")
OBJECTIVE_VERSION = "fibril_calibration/objective/v1"
RESERVED_EPISODE_IDS = ("__prior__",)
# Keys the result writes into its context beside the request's own context keys.
RESERVED_CONTEXT_KEYS = ("training_episode_content_sha256", "validation_episode_content_sha256",
                         "training_content_sha256", "validation_content_sha256",
                         "objective_version", "alignment_contract", "observation_spec_sha256",
                         "optimizer_id", "optimizer_option_sha256", "episode_seeds",
                         "request_sha256")

_TOP_REQUIRED = ("schema_version", "manifest", "parameters", "observations", "training")
_TOP_OPTIONAL = ("validation", "optimizer", "objective", "execution", "analysis", "fit",
                 "context", "sources", "sidecar_gains")


# --------------------------------------------------------------------------- typed request

@dataclass(frozen=True)
class OptimizerSpec:
    """``optimizer``: ``ceres`` names the spec's bound-constrained least-squares solver, which
    this implementation runs with ``scipy.optimize.least_squares`` (same as ``least_squares``)."""

    type: str = "ceres"
    max_iterations: int = 100
    function_tolerance: float | None = None
    parameter_tolerance: float | None = None
    gradient_tolerance: float | None = None
    finite_difference_relative_step: float | None = None
    jacobian: str = "central"
    # ``interior_start: {fraction: f}``: parameters whose initial value is a bound start that
    # fraction of their range inside (see ``starting_point``); None: start at ``initial``.
    interior_start_fraction: float | None = None

    def describe(self) -> dict[str, Any]:
        return {key: value for key, value in self.__dict__.items() if value is not None}


@dataclass(frozen=True)
class ObjectiveSpec:
    standardized_gaussian_residuals: bool = False
    loss: LossSpec | None = None

    def describe(self) -> dict[str, Any]:
        return {"version": OBJECTIVE_VERSION,
                "standardized_gaussian_residuals": self.standardized_gaussian_residuals,
                "loss": None if self.loss is None else {"type": self.loss.type,
                                                        "scale": self.loss.scale}}


@dataclass(frozen=True)
class ExecutionSpec:
    max_parallelism: int = 1
    cache_entries: int = 256
    #: ``local`` (rollouts on ``max_parallelism`` threads) or ``dask`` (candidate × episode
    #: tasks on a cluster: ``solve.dask_rollouts``).
    backend: Backend = Backend()
    #: Dask tasks in flight at most: the document's ``max_parallelism`` when it sets one.
    task_limit: int | None = None

    def with_max_parallelism(self, count: int) -> ExecutionSpec:
        return replace(self, max_parallelism=count, task_limit=count)


@dataclass(frozen=True)
class ProfileLikelihoodSpec:
    enabled: bool = False
    samples_per_parameter: int = 21


@dataclass(frozen=True)
class AnalysisSpec:
    profile_likelihood: ProfileLikelihoodSpec = ProfileLikelihoodSpec()
    information_matrix: bool = False


@dataclass(frozen=True)
class FitSpec:
    """Fit criteria; ``specified`` is False when the request has no ``fit`` block."""

    specified: bool = False
    max_training_rms: float | None = None
    max_validation_rms: float | None = None
    max_local_condition_number: float | None = None
    max_episode_rms_ratio: float | None = None
    reject_parameter_near_bound: bool = False
    near_bound_fraction: float | None = None


@dataclass(frozen=True)
class CalibrationRequest:
    """A validated calibration request, resolved against its nominal plan."""

    path: Path
    document: Mapping[str, Any] = field(repr=False)
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
    context: Mapping[str, Any]
    # Overlays held in every candidate plan (``sidecar_gains``: a run's impedance gains).
    fixed_overlays: tuple[Any, ...] = ()

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
        document: Any, file: Path, *,
        decoders: CalibrationDeviceOutputDecoderRegistry | None = None,
        candidate_builder: CandidateFactory | None = None) -> CalibrationRequest:
    """Validate a parsed request document; relative paths resolve against ``file``'s folder."""
    from ..model.candidate_plan import CandidatePlanBuilder

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

    parameters = _parameters(doc["parameters"], root.key("parameters"))
    from .gains import sidecar_gains

    named = doc.get("sources") if isinstance(doc.get("sources"), Mapping) else {}
    fixed = sidecar_gains(doc.get("sidecar_gains"), root.key("sidecar_gains"), base, named)
    if fixed and candidate_builder is not None:
        raise root.key("sidecar_gains").fail("the gains are fixed overlays of the standard "
                                             "CandidatePlanBuilder; a custom candidate "
                                             "builder takes them itself")
    factory = candidate_builder or CandidatePlanBuilder.holding(fixed)
    from ..recordings.time_offsets import candidate_builder as offset_aware

    candidates = offset_aware(factory, manifest, parameters)
    probes = _probe_plans(candidates, parameters, root.key("parameters"))
    nominal = probes["initial"]

    observations = _observations(doc["observations"], root.key("observations"), nominal,
                                 decoders)
    objective = _objective(doc.get("objective", {}), root.key("objective"))
    by_id = {o.id: o for o in observations}
    episode_ids: dict[str, str] = {}
    with Recordings() as recordings, _source_set(doc, root, base) as sources:
        training = _episodes(doc["training"], root.key("training"), "training", by_id, nominal,
                             base, episode_ids, recordings, required=True, sources=sources)
        validation = _episodes(doc.get("validation", []), root.key("validation"), "validation",
                               by_id, nominal, base, episode_ids, recordings, required=False,
                               sources=sources)
    training, validation = _split_windows(training, validation, root.key("training"))
    training, validation = _time_offsets(parameters, by_id, training, validation, root)
    _check_activation_states(training, root.key("training"), probes)
    _check_activation_states(validation, root.key("validation"), probes)
    if objective.standardized_gaussian_residuals:
        _check_standardized(doc, root, training + validation)
    fit = _fit(doc.get("fit"), root.key("fit"))
    if fit.max_validation_rms is not None and not validation:
        raise root.key("fit").key("max_validation_rms").fail(
            "a validation RMS criterion needs validation episodes; the request has none")

    # Every section is validated before the document is hashed: the hash needs finite numbers.
    optimizer = _optimizer(doc.get("optimizer", {}), root.key("optimizer"))
    execution = _execution(doc.get("execution", {}), root.key("execution"))
    analysis = _analysis(doc.get("analysis", {}), root.key("analysis"))
    context = _context(doc.get("context", {}), root.key("context"))
    return CalibrationRequest(
        path=file, document=doc, sha256=_document_sha256(doc, root), manifest=manifest,
        nominal_plan=nominal, parameters=parameters, observations=observations,
        training=training, validation=validation, optimizer=optimizer, objective=objective,
        execution=execution, analysis=analysis, fit=fit, context=context,
        fixed_overlays=fixed)


# --------------------------------------------------------------------------- parameters

def _parameters(value: Any, where: s.Where) -> tuple[CalibrationParameter, ...]:
    items = s.sequence(value, where)
    if not items:
        raise where.fail("expected at least one parameter to fit")
    out: list[CalibrationParameter] = []
    seen: dict[str, str] = {}
    owners: dict[str, str] = {}
    for i, item in enumerate(items):
        at = where.key(i)
        body = s.mapping(item, at)
        s.keys(body, at, required=("id", "lower", "upper", "initial"),
               optional=("unit", "provenance", "nominal", "parameterization",
                         "coordinate_scale", "prior", "target", "targets", "description"))
        pid = s.string(body["id"], at.key("id"))
        if pid in seen:
            raise at.key("id").fail(f"duplicate parameter id {pid!r} (first declared at "
                                    f"{seen[pid]})")
        if pid == "__prior__":
            raise at.key("id").fail("the id '__prior__' is reserved for prior residuals")
        seen[pid] = at.path
        lower = s.number(body["lower"], at.key("lower"))
        upper = s.number(body["upper"], at.key("upper"))
        if not lower < upper:
            raise at.key("upper").fail(f"expected upper > lower ({lower:g}), got {upper:g}")
        initial = s.number(body["initial"], at.key("initial"))
        if not lower <= initial <= upper:
            raise at.key("initial").fail(f"initial {initial:g} lies outside the bounds "
                                         f"[{lower:g}, {upper:g}]")
        nominal = s.number(body["nominal"], at.key("nominal")) if "nominal" in body else None
        parameterization = s.string(body.get("parameterization", "linear"),
                                    at.key("parameterization"))
        if parameterization not in PARAMETERIZATIONS:
            raise at.key("parameterization").fail(
                f"unknown parameterization {parameterization!r}; expected one of "
                f"{', '.join(PARAMETERIZATIONS)}")
        if parameterization == "log_positive":
            if lower <= 0:
                raise at.key("lower").fail(f"log_positive searches log(value); lower must be "
                                           f"> 0, got {lower:g}")
            if nominal is not None and nominal <= 0:
                raise at.key("nominal").fail(f"log_positive parameters need a positive "
                                             f"nominal, got {nominal:g}")
        scale = None
        if "coordinate_scale" in body:
            scale = s.number(body["coordinate_scale"], at.key("coordinate_scale"),
                             positive=True)
        prior = None
        if "prior" in body:
            pw = at.key("prior")
            raw = s.mapping(body["prior"], pw)
            s.keys(raw, pw, required=("mean", "standard_deviation"))
            prior = Prior(s.number(raw["mean"], pw.key("mean")),
                          s.number(raw["standard_deviation"], pw.key("standard_deviation"),
                                   positive=True))
        unit = s.string(body["unit"], at.key("unit")) if "unit" in body else None
        provenance = (s.string(body["provenance"], at.key("provenance"))
                      if "provenance" in body else None)
        if "description" in body:
            s.string(body["description"], at.key("description"))
        targets = _targets(body, at)
        for key, number in (("lower", lower), ("upper", upper), ("initial", initial)):
            try:
                parse_value(number, targets, at.key(key), pid)
            except OverlayError as exc:  # pragma: no cover - parse_value raises where.error
                raise at.key(key).fail(str(exc)) from None
        for target in targets:
            other = owners.get(target.key)
            if other is not None:
                raise at.key("target").fail(f"{target.key} is already bound by parameter "
                                            f"{other!r}; one field takes one parameter")
            owners[target.key] = pid
        parameter = CalibrationParameter(
            id=pid, lower=lower, upper=upper, initial=initial, nominal=nominal, unit=unit,
            provenance=provenance, parameterization=parameterization,  # type: ignore[arg-type]
            coordinate_scale=scale, prior=prior, targets=targets)
        problems = parameter_problems(parameter)
        if problems:
            raise at.fail("; ".join(problems))
        out.append(parameter)
    return tuple(out)


def _targets(body: Mapping[str, Any], at: s.Where) -> tuple[OverlayTarget, ...]:
    if ("target" in body) == ("targets" in body):
        raise at.fail("give exactly one of 'target' (one typed target) or 'targets' (a list)")
    if "target" in body:
        return (_target(body["target"], at.key("target")),)
    raw = s.sequence(body["targets"], at.key("targets"))
    if not raw:
        raise at.key("targets").fail("expected at least one target")
    targets = tuple(_target(t, at.key("targets").key(i)) for i, t in enumerate(raw))
    kinds = {type(t).__name__ == "TimeOffsetTarget" for t in targets}
    if len(kinds) > 1:
        raise at.key("targets").fail("a time_offset target cannot share a parameter with "
                                     "model targets")
    keys = [t.key for t in targets]
    if len(set(keys)) != len(keys):
        raise at.key("targets").fail("the same target is listed twice")
    return targets


def _target(raw: Any, where: s.Where) -> Any:
    """A typed overlay target, or ``{type: time_offset, observation: id}`` / ``{type:
    time_offset, source: name}`` (see ``time_offsets``)."""
    if isinstance(raw, Mapping) and raw.get("type") == "time_offset":
        from ..recordings.time_offsets import TimeOffsetTarget

        if "source" in raw:
            s.keys(raw, where, required=("type", "source"))
            return TimeOffsetTarget(source=s.string(raw["source"], where.key("source")))
        s.keys(raw, where, required=("type", "observation"))
        return TimeOffsetTarget(s.string(raw["observation"], where.key("observation")))
    return parse_target(raw, where)


def _time_offsets(parameters: Sequence[CalibrationParameter],
                  observations: Mapping[str, ObservationSpec],
                  training: tuple[EpisodeSpec, ...], validation: tuple[EpisodeSpec, ...],
                  root: s.Where) -> tuple[tuple[EpisodeSpec, ...], tuple[EpisodeSpec, ...]]:
    """Bind time-offset parameters to their observations' signals: linear alignment only, and
    every sample still at or after time 0 at the upper bound."""
    import dataclasses

    from ..recordings.time_offsets import TimeOffsetTarget

    bounds: dict[str, tuple[float, float]] = {}
    by_source: dict[str, s.Where] = {}
    for i, parameter in enumerate(parameters):
        for target in parameter.targets:
            if isinstance(target, TimeOffsetTarget):
                at = root.key("parameters").key(i)
                if target.source is not None:
                    by_source[target.source] = at
                elif target.observation not in observations:
                    raise at.fail(f"time_offset names unknown observation "
                                  f"{target.observation!r}; declared: "
                                  f"{', '.join(observations)}")
                # Two offsets on one key never get here: ``_parameters`` refuses a second
                # parameter bound to the same target key (time_offset:<observation or source>).
                bounds[target.offset_key] = (parameter.lower * 1e9, parameter.upper * 1e9)
    if not bounds:
        return training, validation
    episodes = (*training, *validation)
    for name, at in by_source.items():
        feeding = [e.id for e in episodes if name in (e.source or {}).get("input_sources", ())]
        if feeding:
            raise at.fail(f"time_offset source {name!r} feeds recorded inputs (episode "
                          f"{feeding[0]!r}); its offset cannot be fitted (the inputs are cut "
                          f"once): fit the offset of the source its signals come from")
        if not any(sig.source == name for e in episodes for sig in e.signals):
            raise at.fail(f"time_offset source {name!r}: no episode compares a signal read "
                          f"from it (a name in sources, given as an episode's or a signal's "
                          f"source)")

    def bind(episode: EpisodeSpec) -> EpisodeSpec:
        signals = []
        for signal in episode.signals:
            key = signal.observation
            found = bounds.get(key)
            if signal.source is not None and f"source:{signal.source}" in bounds:
                if found is not None:
                    raise root.fail(f"{episode.scope} episode {episode.id!r} signal "
                                    f"{signal.observation!r} has two calibrated time offsets "
                                    f"(its observation's and its source {signal.source!r}'s); "
                                    f"fit one")
                key = f"source:{signal.source}"
                found = bounds[key]
            if found is not None:
                label = f"{episode.scope} episode {episode.id!r} signal {signal.observation!r}"
                if signal.alignment != "linear":
                    raise root.fail(f"{label}: a calibrated time_offset interpolates; the "
                                    f"signal needs alignment: linear, not {signal.alignment}")
                first = float(signal.times_ns[0])
                if first - found[1] < 0:
                    raise root.fail(f"{label}: its first sample at {first / 1e9:g} s would be "
                                    f"compared with the simulation before episode time 0 at "
                                    f"the time_offset upper bound {found[1] / 1e9:g} s; drop "
                                    f"the samples before {found[1] / 1e9:g} s or lower the "
                                    f"bound")
                signal = dataclasses.replace(signal, time_offset_bounds_ns=found,
                                             time_offset_key=key)
            signals.append(signal)
        return dataclasses.replace(episode, signals=tuple(signals))

    return tuple(bind(e) for e in training), tuple(bind(e) for e in validation)


def _probe_plans(candidates: Any, parameters: Sequence[CalibrationParameter],
                 where: s.Where) -> dict[str, SimulationPlan]:
    """Build the nominal plan at the initial values; probe the lower and upper bounds too."""
    probes = (("initial", [p.initial for p in parameters]),
              ("lower", [p.lower for p in parameters]),
              ("upper", [p.upper for p in parameters]))
    plans: dict[str, SimulationPlan] = {}
    for label, values in probes:
        try:
            plans[label] = candidates.build(dict(zip((p.id for p in parameters), values)))
        except FibrilError as exc:
            raise where.fail(f"the candidate plan cannot be built with every parameter at its "
                             f"{label} value: {exc}") from None
    return plans


def _check_activation_states(episodes: Sequence[EpisodeSpec], where: s.Where,
                             probes: Mapping[str, SimulationPlan]) -> None:
    """An actuator initial_state must fit every candidate: parameters such as a DC motor's
    inductance switch an activation state on or off, so check the plans at the bounds too."""
    import mujoco

    for i, episode in enumerate(episodes):
        for j, entry in enumerate(episode.initial_state):
            if entry.get("type") != "actuator":
                continue
            name = entry["actuator"]
            for label in ("lower", "upper"):
                model = probes[label].model
                aid = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_ACTUATOR, name)
                num = int(model.actuator_actnum[aid]) if aid >= 0 else 0
                if num != len(entry["act"]):
                    raise where.key(i).key("initial_state").key(j).key("act").fail(
                        f"actuator {name!r} has {len(entry['act'])} activation value(s) in "
                        f"the nominal plan but {num} with every parameter at its {label} "
                        f"bound (a parameter switches the activation state); fit a range "
                        f"where the state exists, or drop the actuator initial_state")


# --------------------------------------------------------------------------- observations

def _observations(value: Any, where: s.Where, plan: SimulationPlan,
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


# --------------------------------------------------------------------------- episodes

def _episodes(value: Any, where: s.Where, scope: str, observations: Mapping[str, ObservationSpec],
              plan: SimulationPlan, base: Path, seen: dict[str, str], recordings: Recordings,
              *, required: bool, sources: Any = None) -> tuple[EpisodeSpec, ...]:
    items = s.sequence(value, where)
    if required and not items:
        raise where.fail("expected at least one training episode")
    out = []
    for i, item in enumerate(items):
        if isinstance(item, Mapping) and "source" in item and sources is not None:
            # a bag / CSV recording, maybe cut into windows
            from .mapping import source_episodes

            episodes = source_episodes(item, where.key(i), scope, observations, plan, sources)
        else:
            episodes = [_episode(item, where.key(i), scope, observations, plan, base,
                                 recordings)]
        for episode in episodes:
            if episode.id in seen:
                raise where.key(i).key("id").fail(f"duplicate episode id {episode.id!r} (first "
                                                  f"declared at {seen[episode.id]})")
            seen[episode.id] = where.key(i).path
            out.append(episode)
    return tuple(out)


def _source_set(doc: Mapping[str, Any], root: s.Where, base: Path) -> Any:
    """The request's recording sources (``sources``; see ``mapping``)."""
    from .mapping import SourceSet

    return SourceSet(doc.get("sources"), root.key("sources"), base)


def _split_windows(training: tuple[EpisodeSpec, ...], validation: tuple[EpisodeSpec, ...],
                   where: s.Where) -> tuple[tuple[EpisodeSpec, ...], tuple[EpisodeSpec, ...]]:
    """Windows that ``validation_every`` moved out of training entries join the validation
    episodes (after the declared ones)."""
    moved = tuple(e for e in training if e.scope == "validation")
    if not moved:
        return training, validation
    kept = tuple(e for e in training if e.scope == "training")
    if not kept:
        raise where.fail("validation_every left no training episode")
    return kept, validation + moved


def _episode(value: Any, where: s.Where, scope: str,
             observations: Mapping[str, ObservationSpec], plan: SimulationPlan,
             base: Path, recordings: Recordings) -> EpisodeSpec:
    body = s.mapping(value, where)
    s.keys(body, where, required=("id", "signals"),
           optional=("episode_seed", "weight", "horizon_steps", "initial_state",
                     "initial_state_fit", "recorded_inputs", "recorded_inputs_file", "recording",
                     "recording_episode", "description"))
    episode_id = s.string(body["id"], where.key("id"))
    if episode_id in RESERVED_EPISODE_IDS:
        raise where.key("id").fail(f"the episode id {episode_id!r} is reserved")
    if "description" in body:
        s.string(body["description"], where.key("description"))
    seed = s.integer(body.get("episode_seed", 0), where.key("episode_seed"), minimum=0)
    weight = s.number(body.get("weight", 1.0), where.key("weight"), positive=True)
    horizon = None
    if "horizon_steps" in body:
        horizon = s.integer(body["horizon_steps"], where.key("horizon_steps"), minimum=1)
    initial_state = _initial_state(body.get("initial_state", []), where.key("initial_state"),
                                   plan)
    state_fit = initial_state_fit(body, where, initial_state, plan)
    if "recorded_inputs" in body and "recorded_inputs_file" in body:
        raise where.fail("give 'recorded_inputs' or 'recorded_inputs_file', not both")
    explicit = None
    if "recording_episode" in body:
        explicit = s.integer(body["recording_episode"], where.key("recording_episode"),
                             minimum=0)
    recording = None
    recording_number = None
    if "recording" in body:
        for key in ("recorded_inputs", "recorded_inputs_file"):
            if key in body:
                raise where.fail(f"give 'recording' (a trace whose accepted inputs are replayed) "
                                 f"or '{key}', not both")
        rw = where.key("recording")
        recording = _open_recording(body["recording"], rw, recordings, base, plan)
        recording_number = _recording_episode(recording, explicit, rw,
                                              where.key("recording_episode"))
        inputs = _recording_inputs(recording, recording_number, rw, plan)
    elif "recorded_inputs_file" in body:
        fw = where.key("recorded_inputs_file")
        path = s.existing_file(base, body["recorded_inputs_file"], fw, "recorded inputs file")
        loaded = s.load_yaml(path, CalibrationRequestError)
        if isinstance(loaded, Mapping) and "inputs" in loaded:
            # The `fibril_sim run --inputs` format (times or commit ticks, file order).
            loaded, records_where = _run_inputs_file(path, plan), s.Where(
                str(path), "inputs", CalibrationRequestError)
            inputs = _recorded_inputs(loaded, records_where, plan)
        elif isinstance(loaded, Mapping):
            inner = s.Where(str(path), "", CalibrationRequestError)
            s.keys(loaded, inner, required=("recorded_inputs",))
            records_where = inner.key("recorded_inputs")
            loaded = loaded["recorded_inputs"]
            inputs = _recorded_inputs(loaded, records_where, plan)
        else:
            records_where = s.Where(str(path), "", CalibrationRequestError)
            inputs = _recorded_inputs(loaded, records_where, plan)
    else:
        inputs = _recorded_inputs(body.get("recorded_inputs", []), where.key("recorded_inputs"),
                                  plan)

    sw = where.key("signals")
    raw_signals = signal_entries(body, sw, observations, "reference samples")
    if explicit is not None and recording is None and not any(
            isinstance(raw, Mapping) and "samples_from" in raw for raw in raw_signals.values()):
        raise where.key("recording_episode").fail(
            f"recording_episode {explicit} selects an episode of a trace, but the episode has "
            f"no 'recording' and no signal with 'samples_from'")
    traces = _EpisodeTraces(recordings, base, plan, recording,
                            where.key("recording") if recording is not None else None,
                            explicit, where.key("recording_episode"))
    timestep = plan.timebase.timestep_ns
    signals = []
    last_time = 0
    for observation_id, observation in observations.items():
        if observation_id not in raw_signals:
            continue
        signal = _signal(raw_signals[observation_id], sw.key(observation_id), observation,
                         timestep, horizon, base, traces)
        last_time = max(last_time, int(signal.times_ns[-1]))
        signals.append(signal)
    needed = -(-last_time // timestep)
    if horizon is not None and horizon < needed:
        raise where.key("horizon_steps").fail(
            f"horizon_steps {horizon} ends at {horizon * timestep} ns, before the last reference "
            f"sample at {last_time} ns; it needs at least {needed} step(s) of {timestep} ns")
    content = _episode_hash(episode_id, seed, weight, horizon, initial_state, inputs, signals,
                            state_fit)
    try:
        prepared = (inputs, plan.prepare_recorded_inputs(inputs)) if inputs else None
    except FibrilError as exc:  # the checks above word the common cases with key paths
        raise where.key("recorded_inputs").fail(str(exc)) from None
    return EpisodeSpec(id=episode_id, scope=scope, seed=seed, weight=weight,
                       horizon_steps=horizon, initial_state=initial_state,
                       recorded_inputs=inputs, signals=tuple(signals), content_sha256=content,
                       recording=None if recording is None else recording.path,
                       recording_episode=recording_number, prepared_inputs=prepared,
                       initial_state_fit=state_fit)


def _check_standardized(doc: Mapping[str, Any], root: s.Where,
                        episodes: Sequence[EpisodeSpec]) -> None:
    """standardized_gaussian_residuals: every signal is a measurement standard deviation and
    every weight is 1.0, in training and validation alike."""
    claim = "objective.standardized_gaussian_residuals is true"
    for episode in episodes:
        if episode.source is not None:  # a window of a recording-source entry
            at = s.Where(root.file, episode.source["entry"], CalibrationRequestError)
        else:
            index = [e.get("id") for e in doc.get(episode.scope, [])].index(episode.id)
            at = root.key(episode.scope).key(index)
        if episode.weight != 1.0:
            raise at.key("weight").fail(
                f"{claim}, so every episode weight must be 1.0 (an engineering weight is not a "
                f"likelihood); got {episode.weight:g}")
        for signal in episode.signals:
            if signal.scale_semantics != "measurement_standard_deviation":
                raise at.key("signals").key(signal.observation).key("scale_semantics").fail(
                    f"{claim}, so every signal's scale_semantics must be "
                    f"measurement_standard_deviation; got {signal.scale_semantics}")


# --------------------------------------------------------------------------- settings

def _optimizer(value: Any, where: s.Where) -> OptimizerSpec:
    body = s.mapping(value, where)
    s.keys(body, where, optional=("type", "max_iterations", "function_tolerance",
                                  "parameter_tolerance", "gradient_tolerance",
                                  "finite_difference_relative_step", "jacobian",
                                  "interior_start"))
    kind = s.string(body.get("type", "ceres"), where.key("type"))
    if kind not in OPTIMIZER_TYPES:
        raise where.key("type").fail(f"unknown optimizer {kind!r}; expected one of "
                                     f"{', '.join(OPTIMIZER_TYPES)} (ceres runs the bound-"
                                     f"constrained least-squares solver)")

    def tolerance(key: str) -> float | None:
        return s.number(body[key], where.key(key), positive=True) if key in body else None

    jacobian = body.get("jacobian", "central")
    if jacobian not in ("central", "forward"):
        raise where.key("jacobian").fail(f"expected 'central' (the default: central inside the "
                                         f"bounds, one-sided at a bound) or 'forward', got "
                                         f"{s.describe(jacobian)}")
    step = tolerance("finite_difference_relative_step")
    if step is not None and step >= 0.5:
        raise where.key("finite_difference_relative_step").fail(
            f"expected a small relative step (< 0.5), got {step:g}")
    return OptimizerSpec(
        type=kind,
        max_iterations=s.integer(body.get("max_iterations", 100), where.key("max_iterations"),
                                 minimum=1),
        function_tolerance=tolerance("function_tolerance"),
        parameter_tolerance=tolerance("parameter_tolerance"),
        gradient_tolerance=tolerance("gradient_tolerance"),
        finite_difference_relative_step=step, jacobian=jacobian,
        interior_start_fraction=_interior_start(body.get("interior_start"),
                                                where.key("interior_start")))


def _interior_start(value: Any, where: s.Where) -> float | None:
    """``interior_start: {fraction: f}`` with 0 < f < 0.5 (absent or null: no interior start)."""
    if value is None:
        return None
    body = s.mapping(value, where)
    s.keys(body, where, required=("fraction",))
    fraction = s.number(body["fraction"], where.key("fraction"), positive=True)
    if not fraction < 0.5:
        raise where.key("fraction").fail(f"expected a fraction of the parameter range in "
                                         f"(0, 0.5), got {fraction:g}")
    return fraction


def _objective(value: Any, where: s.Where) -> ObjectiveSpec:
    body = s.mapping(value, where)
    s.keys(body, where, optional=("standardized_gaussian_residuals", "loss"))
    standardized = s.boolean(body.get("standardized_gaussian_residuals", False),
                             where.key("standardized_gaussian_residuals"))
    loss = None
    if body.get("loss") is not None:
        lw = where.key("loss")
        raw = s.mapping(body["loss"], lw)
        s.keys(raw, lw, required=("type",), optional=("scale",))
        kind = s.string(raw["type"], lw.key("type"))
        if kind not in LOSS_TYPES:
            raise lw.key("type").fail(f"unknown loss {kind!r}; expected one of "
                                      f"{', '.join(LOSS_TYPES)}")
        scale = s.number(raw.get("scale", 1.0), lw.key("scale"), positive=True)
        loss = LossSpec(kind, scale)
    return ObjectiveSpec(standardized, loss)


def _execution(value: Any, where: s.Where) -> ExecutionSpec:
    body = s.mapping(value, where)
    s.keys(body, where, optional=("max_parallelism", "cache_entries", "backend", "scheduler"))
    parallelism = s.integer(body.get("max_parallelism", 1), where.key("max_parallelism"),
                            minimum=1)
    return ExecutionSpec(
        max_parallelism=parallelism,
        cache_entries=s.integer(body.get("cache_entries", 256), where.key("cache_entries"),
                                minimum=0),
        backend=parse_backend(body, where),
        task_limit=parallelism if "max_parallelism" in body else None)


def _analysis(value: Any, where: s.Where) -> AnalysisSpec:
    body = s.mapping(value, where)
    s.keys(body, where, optional=("profile_likelihood", "information_matrix"))
    profile = ProfileLikelihoodSpec()
    if "profile_likelihood" in body:
        pw = where.key("profile_likelihood")
        raw = s.mapping(body["profile_likelihood"], pw)
        s.keys(raw, pw, optional=("enabled", "samples_per_parameter"))
        samples = s.integer(raw.get("samples_per_parameter", 21),
                            pw.key("samples_per_parameter"), minimum=3)
        profile = ProfileLikelihoodSpec(
            enabled=s.boolean(raw.get("enabled", True), pw.key("enabled")),
            samples_per_parameter=samples)
    return AnalysisSpec(profile, s.boolean(body.get("information_matrix", False),
                                           where.key("information_matrix")))


def _fit(value: Any, where: s.Where) -> FitSpec:
    if value is None:
        return FitSpec()
    body = s.mapping(value, where)
    s.keys(body, where, optional=("max_training_rms", "max_validation_rms",
                                  "max_local_condition_number", "max_episode_rms_ratio",
                                  "reject_parameter_near_bound", "near_bound_fraction"))

    def positive(key: str, minimum: float | None = None) -> float | None:
        if key not in body:
            return None
        number = s.number(body[key], where.key(key), positive=True)
        if minimum is not None and number < minimum:
            raise where.key(key).fail(f"expected a number >= {minimum:g}, got {number:g}")
        return number

    tolerance = positive("near_bound_fraction")
    if tolerance is not None and tolerance >= 0.5:
        raise where.key("near_bound_fraction").fail(
            f"expected a fraction of the parameter range below 0.5, got {tolerance:g}")
    fit = FitSpec(
        specified=True,
        max_training_rms=positive("max_training_rms"),
        max_validation_rms=positive("max_validation_rms"),
        max_local_condition_number=positive("max_local_condition_number", 1.0),
        max_episode_rms_ratio=positive("max_episode_rms_ratio", 1.0),
        reject_parameter_near_bound=s.boolean(body.get("reject_parameter_near_bound", False),
                                              where.key("reject_parameter_near_bound")),
        near_bound_fraction=tolerance)
    if tolerance is not None and not fit.reject_parameter_near_bound:
        raise where.key("near_bound_fraction").fail(
            "near_bound_fraction applies only with reject_parameter_near_bound: true")
    return fit


def _context(value: Any, where: s.Where) -> dict[str, Any]:
    """Free-form provenance keys with scalar values (``seed`` must be an integer)."""
    body = s.mapping(value, where)
    out: dict[str, Any] = {}
    for key, item in body.items():
        at = where.key(str(key))
        if not isinstance(key, str) or not key:
            raise at.fail("context keys must be non-empty strings")
        if key in RESERVED_CONTEXT_KEYS:
            raise at.fail(f"{key!r} is written by the calibration result itself; reserved "
                          f"context keys: {', '.join(RESERVED_CONTEXT_KEYS)}")
        if key == "seed":
            out[key] = s.integer(item, at, minimum=0)
        elif isinstance(item, bool) or isinstance(item, str):
            out[key] = item
        elif isinstance(item, (int, float)):
            out[key] = s.number(item, at) if isinstance(item, float) else item
        else:
            raise at.fail(f"context values must be strings, numbers or booleans, got "
                          f"{s.describe(item)}")
    return out


def _document_sha256(doc: Mapping[str, Any], root: s.Where) -> str:
    """The request hash; a non-finite number the sections let through (e.g. in a free-form
    ``description``) is an error naming its key path, never a bare ValueError."""
    try:
        return canonical_sha256(doc)
    except ValueError:
        stack: list[tuple[Any, s.Where]] = [(doc, root)]
        while stack:
            value, where = stack.pop()
            if isinstance(value, float) and not math.isfinite(value):
                raise where.fail(f"expected a finite number, got {value!r}") from None
            if isinstance(value, Mapping):
                stack.extend((v, where.key(str(k))) for k, v in value.items())
            elif isinstance(value, (list, tuple)):
                stack.extend((v, where.key(i)) for i, v in enumerate(value))
        raise root.fail("the request cannot be hashed as canonical JSON") from None
