"""An episode as the request gives it (``EpisodeSpec``): its signals (reference samples inline, from
a file or a trace selector), its recorded inputs (inline or a file) and its content hash."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from fibril_sim_core import schema as s
from fibril_sim_core.errors import FibrilError
from fibril_sim_core.inputs_file import load_inputs
from fibril_sim_core.records import IngressRecord

from .._json import JsonObject
from ..alignment import ALIGNMENTS
from ..errors import CalibrationRequestError
from ..model.observations import ObservationSpec
from ..recordings.sources import MAX_VALUE
from ..recordings.traces import (Recording, RecordingError, Recordings, TraceError,
                                 without_scenario_inputs)
from .canonical import canonical_json
from .csv_samples import _csv_samples
from .inline_samples import inline_samples
from .input_timing import SourceSummary

if TYPE_CHECKING:
    from fibril_sim_core.components import Endpoint
    from fibril_sim_core.plan import SimulationPlan
    from fibril_sim_core.recorded_inputs import RecordedInputs

    from ..model.initial_state_fit import InitialStateEntry

SCALE_SEMANTICS = ("measurement_standard_deviation", "characteristic_scale", "user_scale")


# --------------------------------------------------------------------------- typed episode

@dataclass(frozen=True)
class SignalSpec:
    """The reference samples of one observation in one episode and how they are compared."""

    observation: str
    alignment: str
    residual_scales: np.ndarray = field(repr=False)  # (residual_dimension,)
    scale_semantics: str
    times_ns: np.ndarray = field(repr=False)  # (n,) int64, strictly increasing
    values: np.ndarray = field(repr=False)  # (n, dimension); orientations unit-normalized
    samples_file: str | None = None
    samples_from: str | None = None  # the trace selector the samples were read with
    # [lower, upper] of the signal's calibrated time offset in ns (``time_offsets``)
    time_offset_bounds_ns: tuple[float, float] | None = None
    time_offset_key: str | None = None  # its key in the plan's offsets (observation, source:N)
    source: str | None = None  # the named source (``sources``) its samples were read from

    @property
    def count(self) -> int:
        return int(self.times_ns.shape[0])


@dataclass(frozen=True)
class EpisodeSpec:
    """One recorded episode: seed, weight, initial state, recorded inputs and signals.

    ``signals`` follow the declaration order of ``observations`` (the residual block order).
    ``horizon_steps`` is what the request says (None: derived from the last reference time).
    """

    id: str
    scope: str  # training | validation
    seed: int
    weight: float
    horizon_steps: int | None
    initial_state: tuple[InitialStateEntry, ...]
    recorded_inputs: tuple[IngressRecord, ...]
    signals: tuple[SignalSpec, ...]
    content_sha256: str
    recording: Path | None = None  # the trace the recorded inputs came from
    recording_episode: int | None = None  # its episode number
    # An episode from a recording source (bag / CSV, see ``mapping``): path, format, declaring
    # entry, window and how the input samples were moved onto ticks.
    source: SourceSummary | None = field(default=None, compare=False)
    # ``(recorded_inputs, RecordedInputs)``: those inputs parsed once for the nominal plan's
    # endpoints, replayed into every candidate whose endpoints parse the same way.
    prepared_inputs: tuple[tuple[IngressRecord, ...], RecordedInputs] | None = field(
        default=None, compare=False, repr=False)
    # ``initial_state_fit``: the initial-state parts fitted as nuisance (``initial_state_fit``).
    initial_state_fit: tuple[str, ...] = ()

    def signal(self, observation_id: str) -> SignalSpec:
        for signal in self.signals:
            if signal.observation == observation_id:
                return signal
        raise KeyError(observation_id)


@dataclass(frozen=True)
class EpisodeTraces:
    """What ``samples_from`` of one episode resolves against: the episode's recording (if any)
    and its explicit ``recording_episode`` (None: each trace's first episode)."""

    recordings: Recordings
    base: Path
    plan: SimulationPlan
    recording: Recording | None
    recording_where: s.Where  # the episode's 'recording' key (its errors name it)
    episode: int | None
    episode_where: s.Where


def episode_basics(body: Mapping[str, object], where: s.Where
                   ) -> tuple[str, int, float, int | None]:
    """An episode entry's id, episode_seed, weight and horizon_steps (checked; description
    too): every form of episode reads them alike."""
    episode_id = s.string(body["id"], where.key("id"))
    if "description" in body:
        s.string(body["description"], where.key("description"))
    seed = s.integer(body.get("episode_seed", 0), where.key("episode_seed"), minimum=0)
    weight = s.number(body.get("weight", 1.0), where.key("weight"), positive=True)
    horizon = None
    if "horizon_steps" in body:
        horizon = s.integer(body["horizon_steps"], where.key("horizon_steps"), minimum=1)
    return episode_id, seed, weight, horizon


def open_recording(value: object, where: s.Where, recordings: Recordings, base: Path,
                    plan: SimulationPlan) -> Recording:
    """The trace named by ``value`` (relative to the request's folder), checked to share the
    plan's physics timestep (commit ticks and snapshot ticks count steps of it)."""
    path = base / s.string(value, where)
    try:
        recording = recordings.get(path)
    except TraceError as exc:
        raise where.fail(_unreadable(path, exc)) from None
    timestep = plan.timebase.timestep_ns
    if recording.timestep_ns != timestep:
        raise where.fail(f"the trace {str(path)!r} was recorded with a {recording.timestep_ns} "
                         f"ns timestep; the plan steps {timestep} ns (its ticks would not line "
                         f"up)")
    return recording


def _unreadable(path: Path, exc: Exception) -> str:
    """``cannot read the trace 'PATH': problem`` (the reader's own PATH prefix dropped)."""
    text = str(exc)
    for prefix in (f"{path}: ", f"{path.resolve()}: "):
        if text.startswith(prefix):
            text = text[len(prefix):]
            break
    return f"cannot read the trace {str(path)!r}: {text}"


def recording_episode(recording: Recording, explicit: int | None, where: s.Where,
                       episode_where: s.Where) -> int:
    """``explicit`` if the trace has it, else the trace's first episode."""
    try:
        if explicit is None:
            first = recording.first_episode()
            if first is None:
                raise where.fail(f"the trace {str(recording.path)!r} has no records")
            return first
        if recording.has_episode(explicit):
            return explicit
        episodes = recording.episodes()
    except TraceError as exc:
        raise where.fail(_unreadable(recording.path, exc)) from None
    raise episode_where.fail(f"episode {explicit} is not in the trace {str(recording.path)!r}; "
                             f"its episodes: {', '.join(map(str, episodes)) or 'none'}")


def recording_inputs(recording: Recording, number: int, where: s.Where,
                      plan: SimulationPlan) -> tuple[IngressRecord, ...]:
    """The accepted inputs of the trace's episode, validated like inline recorded inputs.

    The scenario's initial inputs are left out: ``create_instance`` restores them itself."""
    try:
        records = recording.accepted_inputs(number)
    except TraceError as exc:
        raise where.fail(_unreadable(recording.path, exc)) from None
    records = without_scenario_inputs(records, plan.scenario.initial_inputs)
    items = [{"source_id": r.source_id, "source_sequence": r.source_sequence,
              "payload_type": r.payload_type, "payload_json": r.payload_json,
              "commit_tick": r.commit_tick, "acceptance_sequence": r.acceptance_sequence}
             for r in records]
    at = s.Where(where.file, f"{where.path} ({str(recording.path)!r}, episode {number}): "
                             f"accepted input", CalibrationRequestError)
    return parse_recorded_inputs(items, at, plan, acceptance_per_tick=True)


def run_inputs_file(path: Path, plan: SimulationPlan) -> list[JsonObject]:
    """A ``fibril_sim run --inputs`` file as recorded-input mappings."""
    try:
        records = load_inputs(path, plan.timebase, plan.endpoints)
    except FibrilError as exc:
        raise CalibrationRequestError(str(exc)) from None
    return [{"source_id": r.source_id, "source_sequence": r.source_sequence,
             "payload_type": r.payload_type, "payload_json": r.payload_json,
             "commit_tick": r.commit_tick, "acceptance_sequence": r.acceptance_sequence}
            for r in records]



def signal_entries(body: Mapping[str, object], sw: s.Where,
                   observations: Mapping[str, object], what: str) -> Mapping[str, object]:
    """An episode's ``signals`` mapping: at least one, each keyed by a declared observation."""
    raw_signals = s.mapping(body["signals"], sw)
    if not raw_signals:
        raise sw.fail(f"expected at least one signal (observation id → {what})")
    unknown = [str(k) for k in raw_signals if k not in observations]
    if unknown:
        raise sw.key(unknown[0]).fail(f"unknown observation id {unknown[0]!r}; declared "
                                      f"observations: {', '.join(observations)}")
    return raw_signals


def parse_recorded_inputs(value: object, where: s.Where, plan: SimulationPlan, *,
                     acceptance_per_tick: bool = False) -> tuple[IngressRecord, ...]:
    """Validate recorded inputs. An acceptance_sequence is unique in the whole list, or, with
    ``acceptance_per_tick`` (a trace: the ingress restarts numbering for the scenario inputs
    and each recorded-input replay), unique among the inputs committed at the same tick."""
    endpoints = plan.endpoints
    records: list[tuple[int, int, IngressRecord, s.Where]] = []
    acceptances: dict[int | tuple[int, int], s.Where] = {}  # acceptance (per tick) → its key
    parsers: dict[str, Endpoint] = {}  # one per source: parsing a payload keeps no state
    for i, item in enumerate(s.sequence(value, where)):
        at = where.key(i)
        body = s.mapping(item, at)
        s.keys(body, at, required=("source_id", "source_sequence", "payload_type",
                                   "commit_tick", "acceptance_sequence"),
               optional=("payload_json", "payload", "accepted"))
        source = s.string(body["source_id"], at.key("source_id"))
        sequence = s.integer(body["source_sequence"], at.key("source_sequence"), minimum=0)
        payload_type = s.string(body["payload_type"], at.key("payload_type"))
        commit_tick = s.integer(body["commit_tick"], at.key("commit_tick"), minimum=0)
        acceptance = s.integer(body["acceptance_sequence"], at.key("acceptance_sequence"),
                               minimum=0)
        accepted = s.boolean(body.get("accepted", True), at.key("accepted"))
        if ("payload" in body) == ("payload_json" in body):
            raise at.fail("give exactly one of 'payload_json' (the recorded JSON text) or "
                          "'payload' (a mapping)")
        if "payload_json" in body:
            text = s.string(body["payload_json"], at.key("payload_json"))
            payload = s.load_json_text(text, at.key("payload_json"))
        else:
            payload = dict(s.mapping(body["payload"], at.key("payload")))
            text = json.dumps(payload, sort_keys=True, separators=(",", ":"))
        if accepted:
            key = (commit_tick, acceptance) if acceptance_per_tick else acceptance
            if key in acceptances:
                tick = f" at commit_tick {commit_tick}" if acceptance_per_tick else ""
                raise at.key("acceptance_sequence").fail(
                    f"acceptance_sequence {acceptance}{tick} is also used by "
                    f"{acceptances[key].path}")
            acceptances[key] = at
            endpoint = endpoints.get(source)
            if endpoint is None:
                raise at.key("source_id").fail(f"unknown source {source!r}; the plan's actuator "
                                               f"endpoints: {', '.join(endpoints) or 'none'}")
            if payload_type != endpoint.payload_type:
                raise at.key("payload_type").fail(f"{payload_type!r} is not accepted by "
                                                  f"{source!r}; expected "
                                                  f"{endpoint.payload_type!r}")
            if not isinstance(payload, Mapping):
                raise at.key("payload_json").fail(f"the payload must be a JSON object, got "
                                                  f"{type(payload).__name__}")
            given = "payload_json" if "payload_json" in body else "payload"
            parser = parsers.get(source)
            if parser is None:
                parser = parsers[source] = endpoint.create()
            try:
                parser.parse(payload)
            except ValueError as exc:
                raise at.key(given).fail(str(exc)) from None
            for name, number in payload.items():
                if (isinstance(number, (int, float)) and not isinstance(number, bool)
                        and abs(number) > MAX_VALUE):
                    raise at.key(given).fail(f"{name} {number!r} cannot be a recorded command "
                                           f"(beyond {MAX_VALUE:g})")
        record = IngressRecord(0, source, sequence, payload_type, text, accepted, commit_tick,
                               acceptance, "", 0)
        records.append((commit_tick, acceptance, record, at))
    last: dict[str, tuple[int, s.Where]] = {}
    for _, _, record, at in sorted((r for r in records if r[2].accepted),
                                   key=lambda r: (r[0], r[1])):
        previous = last.get(record.source_id)
        if previous is not None and record.source_sequence <= previous[0]:
            raise at.key("source_sequence").fail(
                f"source_sequence {record.source_sequence} of {record.source_id!r} does not "
                f"increase in recorded commit/acceptance order (after {previous[0]} at "
                f"{previous[1].path})")
        last[record.source_id] = (record.source_sequence, at)
    return tuple(r[2] for r in records)


def parse_signal(value: object, where: s.Where, observation: ObservationSpec, timestep: int,
            horizon: int | None, base: Path, traces: EpisodeTraces | None, *,
            loaded: tuple[np.ndarray, np.ndarray] | None = None) -> SignalSpec:
    """One signal; ``loaded`` are samples a recording source already read (``mapping``)."""
    body = s.mapping(value, where)
    s.keys(body, where, required=("alignment",),
           optional=("residual_scale", "residual_scales", "scale_semantics", "samples",
                     "samples_file", "samples_from"))
    alignment = s.string(body["alignment"], where.key("alignment"))
    if alignment not in ALIGNMENTS:
        raise where.key("alignment").fail(f"unknown alignment {alignment!r}; expected one of "
                                          f"{', '.join(ALIGNMENTS)}")
    if alignment == "linear" and observation.event_driven and horizon is None:
        raise where.key("alignment").fail(
            f"linear alignment of the event-driven {observation.source} observation "
            f"{observation.id!r} needs the episode's horizon_steps: the time of the next "
            f"simulated event cannot be derived in general")
    semantics = s.string(body.get("scale_semantics", "user_scale"), where.key("scale_semantics"))
    if semantics not in SCALE_SEMANTICS:
        raise where.key("scale_semantics").fail(f"unknown scale_semantics {semantics!r}; "
                                                f"expected one of {', '.join(SCALE_SEMANTICS)}")
    width = observation.residual_dimension
    if ("residual_scale" in body) == ("residual_scales" in body):
        raise where.fail("give exactly one of 'residual_scale' (one scale) or 'residual_scales' "
                         f"({width} per-component scales)")
    if "residual_scale" in body:
        scales = np.full(width, s.number(body["residual_scale"], where.key("residual_scale"),
                                         positive=True))
    else:
        sw = where.key("residual_scales")
        raw = s.sequence(body["residual_scales"], sw)
        if len(raw) != width:
            extra = (" (an orientation residual is a 3-D rotation vector, not the 4 quaternion "
                     "components)" if observation.quaternion else "")
            raise sw.fail(f"observation {observation.id!r} has {width} residual component(s) "
                          f"({', '.join(observation.residual_components)}), got {len(raw)} "
                          f"scale(s){extra}")
        scales = np.array([s.number(v, sw.key(i), positive=True) for i, v in enumerate(raw)])

    given = [key for key in ("samples", "samples_file", "samples_from") if key in body]
    if loaded is not None:
        if given:
            raise where.key(given[0]).fail("the signal's samples come from the episode's "
                                           "source; give no samples / samples_file / "
                                           "samples_from")
    elif len(given) != 1:
        raise where.fail("give exactly one of 'samples' (inline), 'samples_file' (a CSV file) or "
                         "'samples_from' (a trace selector)")
    samples_file = None
    selector = None
    if loaded is not None:
        times, values = loaded
    elif "samples_from" in body:
        if traces is None:  # only a recording source's signals (loaded: refused above)
            raise where.key("samples_from").fail("samples_from needs the episode's traces")
        selector, times, values = _trace_samples(body["samples_from"], where.key("samples_from"),
                                                 observation, traces)
    elif "samples" in body:
        times, values = inline_samples(body["samples"], where.key("samples"), observation)
    else:
        fw = where.key("samples_file")
        samples_file = s.string(body["samples_file"], fw)
        times, values = _csv_samples(base / samples_file, fw, observation)
    if observation.quaternion:
        norms = np.linalg.norm(values, axis=1)
        bad = np.flatnonzero(np.abs(norms - 1.0) > 1e-2)
        if bad.size:
            raise where.fail(f"sample {int(bad[0])} (time_ns {int(times[bad[0]])}) of "
                             f"orientation {observation.id!r} has norm {norms[bad[0]]:.4g}; "
                             f"expected a unit quaternion (wxyz)")
        values = values / norms[:, None]
    if not observation.event_driven and alignment == "exact":
        grid = observation.sample_every_steps * timestep
        off = np.flatnonzero(times % grid)
        if off.size:
            t = int(times[off[0]])
            below = t // grid * grid
            raise where.fail(f"exact alignment: sample {int(off[0])} at time_ns {t} is not on "
                             f"the observation grid of {observation.sample_every_steps} step(s) "
                             f"x {timestep} ns; nearest grid times: {below} or {below + grid}")
    times.setflags(write=False)
    values.setflags(write=False)
    scales.setflags(write=False)
    return SignalSpec(observation.id, alignment, scales, semantics, times, values, samples_file,
                      selector)


def _trace_samples(value: object, where: s.Where, observation: ObservationSpec,
                   traces: EpisodeTraces) -> tuple[str, np.ndarray, np.ndarray]:
    """``samples_from: {selector, recording?, columns?}``: the selector's rows of the episode.

    Times are the rows' EpisodeTime (a ``device:`` row's acquisition time when the observation
    is stamped at acquisition); values are the kept columns, as many as the observation has."""
    body = s.mapping(value, where)
    s.keys(body, where, required=("selector",), optional=("recording", "columns"))
    selector = s.string(body["selector"], where.key("selector"))
    if "recording" in body:
        rw = where.key("recording")
        recording = open_recording(body["recording"], rw, traces.recordings, traces.base,
                                    traces.plan)
    elif traces.recording is not None:
        rw = traces.recording_where
        recording = traces.recording
    else:
        raise where.key("recording").fail(
            "missing: the episode has no 'recording', so samples_from names the trace to read "
            "its selector from")
    number = recording_episode(recording, traces.episode, rw, traces.episode_where)
    columns = None
    if "columns" in body:
        columns = s.sequence(body["columns"], where.key("columns"))
    acquisition = observation.timestamp == "acquisition" and selector.startswith("device:")
    from ..recordings.traces import TraceQueryError  # the trace stack: loaded with the trace

    try:
        series = recording.series(selector, number, columns=columns,
                                  acquisition_time=acquisition)
    except TraceQueryError as exc:
        raise where.key("selector").fail(f"{exc} (trace {str(recording.path)!r})") from None
    except TraceError as exc:
        raise rw.fail(_unreadable(recording.path, exc)) from None
    except RecordingError as exc:
        at = where
        for key in exc.key:
            at = at.key(key)
        raise at.fail(f"{exc} (trace {str(recording.path)!r})") from None
    if len(series.columns) != observation.dimension:
        at = where.key("columns") if columns is not None else where.key("selector")
        hint = "" if columns is not None else "; keep the matching ones with 'columns'"
        raise at.fail(f"selector {selector!r} gives {len(series.columns)} value column(s) "
                      f"({', '.join(series.columns)}); observation {observation.id!r} "
                      f"({observation.source}) has {observation.dimension} value(s) per sample "
                      f"({', '.join(observation.components)}){hint}")
    return selector, series.times_ns.copy(), series.values.copy()


def episode_hash(episode_id: str, seed: int, weight: float, horizon: int | None,
                  initial_state: Sequence[InitialStateEntry],
                  inputs: Sequence[IngressRecord], signals: Sequence[SignalSpec],
                  initial_state_fit: Sequence[str] = ()) -> str:
    digest = hashlib.sha256()
    header = {"id": episode_id, "episode_seed": seed, "weight": weight, "horizon_steps": horizon,
              "initial_state": list(initial_state),
              "recorded_inputs": [[r.source_id, r.source_sequence, r.payload_type,
                                   r.payload_json, r.accepted, r.commit_tick,
                                   r.acceptance_sequence] for r in inputs]}
    if initial_state_fit:  # absent otherwise: the hashes of earlier requests are unchanged
        header["initial_state_fit"] = list(initial_state_fit)
    digest.update(canonical_json(header).encode())
    for signal in signals:
        digest.update(canonical_json({
            "observation": signal.observation, "alignment": signal.alignment,
            "scale_semantics": signal.scale_semantics,
            "residual_scales": signal.residual_scales.tolist()}).encode())
        digest.update(np.ascontiguousarray(signal.times_ns, dtype="<i8").tobytes())
        digest.update(np.ascontiguousarray(signal.values, dtype="<f8").tobytes())
    return digest.hexdigest()
