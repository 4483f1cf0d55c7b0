"""The request's ``training`` and ``validation`` episodes: inline or file inputs, a trace's
accepted inputs (``recording``), or a bag / CSV recording cut into windows (``mapping``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from fibril_sim_core import schema as s
from fibril_sim_core.errors import FibrilError

from ..errors import CalibrationRequestError
from ..model.observations import ObservationSpec
from ..recordings.traces import Recordings
from .episode_specs import (EpisodeSpec, EpisodeTraces, episode_basics, episode_hash,
                            open_recording, parse_recorded_inputs, parse_signal,
                            recording_episode, recording_inputs, run_inputs_file,
                            signal_entries)
from .initial_states import initial_state_fit, parse_initial_state

if TYPE_CHECKING:
    from fibril_sim_core.plan import SimulationPlan

    from .mapping import SourceSet

__all__ = ["RESERVED_EPISODE_IDS", "check_standardized", "open_sources", "parse_episodes",
           "split_windows"]

RESERVED_EPISODE_IDS = ("__prior__",)


def parse_episodes(value: object, where: s.Where, scope: str,
                   observations: Mapping[str, ObservationSpec], plan: SimulationPlan, base: Path,
                   seen: dict[str, str], recordings: Recordings, *, required: bool,
                   sources: SourceSet | None = None) -> tuple[EpisodeSpec, ...]:
    """The episodes of one scope; ``seen`` (id → key path) spans both scopes."""
    items = s.sequence(value, where)
    if required and not items:
        raise where.fail("expected at least one training episode")
    out = []
    for i, item in enumerate(items):
        if isinstance(item, Mapping) and "source" in item and sources is not None:
            # a bag / CSV recording, maybe cut into windows (lazy: see ``open_sources``)
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


def open_sources(doc: Mapping[str, object], root: s.Where, base: Path) -> SourceSet:
    """The request's recording sources (``sources``; see ``mapping``)."""
    # Lazy: the bag / CSV / Franka readers load when a request is parsed, not when the
    # request types are imported (``result`` and ``report`` import them without parsing).
    from .mapping import SourceSet

    return SourceSet(doc.get("sources"), root.key("sources"), base)


def split_windows(training: tuple[EpisodeSpec, ...], validation: tuple[EpisodeSpec, ...],
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


def _episode(value: object, where: s.Where, scope: str,
             observations: Mapping[str, ObservationSpec], plan: SimulationPlan,
             base: Path, recordings: Recordings) -> EpisodeSpec:
    body = s.mapping(value, where)
    s.keys(body, where, required=("id", "signals"),
           optional=("episode_seed", "weight", "horizon_steps", "initial_state",
                     "initial_state_fit", "recorded_inputs", "recorded_inputs_file", "recording",
                     "recording_episode", "description"))
    if s.string(body["id"], where.key("id")) in RESERVED_EPISODE_IDS:
        raise where.key("id").fail(f"the episode id {body['id']!r} is reserved")
    episode_id, seed, weight, horizon = episode_basics(body, where)
    initial_state = parse_initial_state(body.get("initial_state", []), where.key("initial_state"),
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
        recording = open_recording(body["recording"], rw, recordings, base, plan)
        recording_number = recording_episode(recording, explicit, rw,
                                              where.key("recording_episode"))
        inputs = recording_inputs(recording, recording_number, rw, plan)
    elif "recorded_inputs_file" in body:
        fw = where.key("recorded_inputs_file")
        path = s.existing_file(base, body["recorded_inputs_file"], fw, "recorded inputs file")
        loaded = s.load_yaml(path, CalibrationRequestError)
        if isinstance(loaded, Mapping) and "inputs" in loaded:
            # The `fibril_sim run --inputs` format (times or commit ticks, file order).
            loaded, records_where = run_inputs_file(path, plan), s.Where(
                str(path), "inputs", CalibrationRequestError)
            inputs = parse_recorded_inputs(loaded, records_where, plan)
        elif isinstance(loaded, Mapping):
            inner = s.Where(str(path), "", CalibrationRequestError)
            s.keys(loaded, inner, required=("recorded_inputs",))
            records_where = inner.key("recorded_inputs")
            loaded = loaded["recorded_inputs"]
            inputs = parse_recorded_inputs(loaded, records_where, plan)
        else:
            records_where = s.Where(str(path), "", CalibrationRequestError)
            inputs = parse_recorded_inputs(loaded, records_where, plan)
    else:
        inputs = parse_recorded_inputs(body.get("recorded_inputs", []),
                                       where.key("recorded_inputs"), plan)

    sw = where.key("signals")
    raw_signals = signal_entries(body, sw, observations, "reference samples")
    if explicit is not None and recording is None and not any(
            isinstance(raw, Mapping) and "samples_from" in raw for raw in raw_signals.values()):
        raise where.key("recording_episode").fail(
            f"recording_episode {explicit} selects an episode of a trace, but the episode has "
            f"no 'recording' and no signal with 'samples_from'")
    traces = EpisodeTraces(recordings, base, plan, recording, where.key("recording"),
                            explicit, where.key("recording_episode"))
    timestep = plan.timebase.timestep_ns
    signals = []
    last_time = 0
    for observation_id, observation in observations.items():
        if observation_id not in raw_signals:
            continue
        signal = parse_signal(raw_signals[observation_id], sw.key(observation_id), observation,
                         timestep, horizon, base, traces)
        last_time = max(last_time, int(signal.times_ns[-1]))
        signals.append(signal)
    needed = -(-last_time // timestep)
    if horizon is not None and horizon < needed:
        raise where.key("horizon_steps").fail(
            f"horizon_steps {horizon} ends at {horizon * timestep} ns, before the last reference "
            f"sample at {last_time} ns; it needs at least {needed} step(s) of {timestep} ns")
    content = episode_hash(episode_id, seed, weight, horizon, initial_state, inputs, signals,
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


def check_standardized(doc: Mapping[str, object], root: s.Where,
                        episodes: Sequence[EpisodeSpec]) -> None:
    """standardized_gaussian_residuals: every signal is a measurement standard deviation and
    every weight is 1.0, in training and validation alike."""
    claim = "objective.standardized_gaussian_residuals is true"
    for episode in episodes:
        if episode.source is not None:  # a window of a recording-source entry
            at = s.Where(root.file, episode.source["entry"], CalibrationRequestError)
        else:
            entries = s.sequence(doc.get(episode.scope, []), root.key(episode.scope))  # parsed
            index = [e.get("id") for e in entries].index(episode.id)
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
