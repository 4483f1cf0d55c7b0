"""Recording-source episodes: topics and columns of a bag or CSV log mapped to a calibration
episode's recorded inputs, reference signals and initial state, cut into time windows.

    sources:                                  # optional, shared by episodes (and windows)
      bench: {path: bags/bench-run, time: log, max_gap: 0.01}
    training:
      - id: bench
        source: bench                         # a name in `sources`, or the same mapping inline
        windows: {every: 0.2, validation_every: 4}
        inputs:
          - {topic: /joint_commands, field: effort, endpoints: {wheel_joint: motor/command},
             mode: torque, commit: next_tick}
        initial_state:
          - {type: joint, joint: wheel_joint, qvel_from: {signal: wheel_velocity}}
        signals:
          wheel_velocity: {topic: /joint_states, field: "velocity[wheel_joint]",
                           alignment: linear, residual_scale: 0.05}

Time: episode time 0 is the window start; a window's times count from the recording's
*origin* (the earliest sample of the streams the entry maps, or the source's ``origin`` in
seconds of its own time base). Inputs in ``[start, end)`` are committed at the tick their
``commit`` policy picks (``next_tick``: the first tick at or after the sample; ``nearest_tick``:
the nearest, a tie to the earlier); the last command before the start is committed at tick 0
(it was in force). How many samples moved and the largest shift are kept per episode and
reported in the result. An endpoint with a command latency applies that held command after
its latency, like any other: the first ticks of the window run without it (reported as
``held_latency_ticks``; an actuator's command state is not part of an initial state).
Reference samples in ``[start, end]`` keep their exact recorded time; the signal's alignment
policy compares them with the simulation. ``*_from`` initial-state values are the stream
linearly interpolated (a quaternion by shortest-path SLERP) at the window start (its first
sample when the window starts before the stream). ``initial_state_fit: [qpos, qvel]`` fits
those logged values per window as nuisance parameters (``initial_state_fit``); a bag source's
``reader: rosbags | rosbag2_py | auto`` picks the library that reads it (``bag_readers``).

Everything a window needs is checked when the request loads: an empty window, a gap larger
than ``max_gap`` (the source's, or the stream's own), repeated reference times, and whatever
``sources`` reports (missing topic / column, wrong message type, backwards time, NaN rows).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from fibril_sim_core.records import IngressRecord

from fibril_sim_core import schema as s

from ..recordings.formats import open_source
from .._json import JsonObject
from ..recordings.sources import Source, SourceError
from .episode_specs import (EpisodeSpec, episode_basics, episode_hash, parse_signal,
                             signal_entries)
from .initial_states import initial_state_fit, parse_initial_state
from .input_timing import InputTiming, SourceSummary
from .recorded_commands import COMMIT_POLICIES, CommandInput, parse_inputs, window_inputs
from .source_specs import SourceSpec, parse_source_spec, reader_columns
from .source_states import state_entries, state_values
from .streams import (STREAM_KEYS, EntrySource, MappedStream, check_gaps, map_stream,
                      named_columns, named_topics)
from .validity import joint_plausible
from .windows import Window, parse_windows

if TYPE_CHECKING:
    from fibril_sim_core.plan import SimulationPlan

    from ..model.observations import ObservationSpec

__all__ = ["COMMIT_POLICIES", "SourceSet", "source_episodes"]

_EPISODE_KEYS = ("episode_seed", "weight", "horizon_steps", "initial_state",
                 "initial_state_fit", "inputs", "windows", "description")
_NS = 1_000_000_000


class SourceSet:
    """The request's named ``sources`` and every opened recording (a context manager: closing
    it closes the files; decoded streams stay cached while it is open)."""

    def __init__(self, value: object, where: s.Where, base: Path) -> None:
        self.base = base
        self.where = where
        self._named: dict[str, tuple[object, s.Where]] = {}
        if value is not None:
            for name, spec in s.mapping(value, where).items():
                self._named[str(name)] = (spec, where.key(str(name)))
        self._open: dict[tuple[object, ...], Source] = {}
        self.wanted: list[str] = []  # the columns the entry being read names (one pass each)

    def spec(self, value: object, where: s.Where) -> SourceSpec:
        """``source:`` of an episode: a name in ``sources`` or an inline mapping."""
        name = None
        if isinstance(value, str):
            if value not in self._named:
                listed = ", ".join(self._named) or "none declared"
                raise where.fail(f"unknown source {value!r}; the request's sources: {listed}")
            name = value
            value, where = self._named[value]
        return parse_source_spec(value, where, self.base, name)

    def open(self, spec: SourceSpec, columns: Sequence[str] = ()) -> Source:
        """The source of ``spec`` (opened once); a CSV log reads ``columns`` with its time
        column when it is opened, in one pass."""
        key = (spec.path.resolve(), spec.format, spec.time, spec.time_column, spec.time_unit,
               spec.sidecar, spec.reader, spec.accept, spec.abort, spec.types, spec.header,
               spec.column_names, spec.delimiter)
        source = self._open.get(key)
        if source is None:
            try:
                source = open_source(spec.path, spec.format, time=spec.time,
                                     time_column=spec.time_column, time_unit=spec.time_unit,
                                     sidecar=spec.sidecar, reader=spec.reader, columns=columns,
                                     accept=spec.accept, abort=spec.abort,
                                     types=spec.types, header=spec.header,
                                     column_names=reader_columns(spec.column_names),
                                     delimiter=spec.delimiter)
            except SourceError as exc:
                raise spec.where.key("path").fail(str(exc)) from None
            except (OSError, ValueError) as exc:  # a reader's own error: still one line
                raise spec.where.key("path").fail(
                    f"cannot read recording {str(spec.path)!r}: "
                    f"{(exc.strerror if isinstance(exc, OSError) else None) or exc}") from None
            self._open[key] = source
        return source

    def close(self) -> None:
        for source in self._open.values():
            source.close()
        self._open.clear()

    def __enter__(self) -> SourceSet:  # noqa: PYI034 - final class
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass(frozen=True)
class _Entry:
    """What one ``source:`` entry declares, read once and shared by its windows."""

    id: str
    seed: int
    weight: float
    horizon: int | None
    windowed: bool  # the entry has ``windows`` (its episodes get ``/wNNN`` ids)


@dataclass(frozen=True)
class _MappedSignal:
    """One signal of the entry: its observation, its comparison settings and its stream."""

    observation: ObservationSpec
    settings: Mapping[str, object]
    where: s.Where
    mapped: MappedStream


def source_episodes(value: object, where: s.Where, scope: str,
                    observations: Mapping[str, ObservationSpec], plan: SimulationPlan,
                    sources: SourceSet) -> list[EpisodeSpec]:
    """The episodes of one ``source:`` entry: one per window (scope: the entry's, or
    validation for a ``validation_every`` window)."""
    body = s.mapping(value, where)
    entry_info = _entry(body, where)
    entry = _open_entry(body, where, sources)
    dt = plan.timebase.timestep_ns

    inputs = parse_inputs(body.get("inputs", []), where.key("inputs"), entry, plan)
    signals = _signals(body, where.key("signals"), observations, plan, entry)
    state, state_streams = state_entries(body.get("initial_state", []),
                                         where.key("initial_state"), entry,
                                         {m.observation.id: m.mapped for m in signals},
                                         plan.model)

    used = [i.mapped for i in inputs] + [m.mapped for m in signals] + state_streams
    spec = entry.spec
    origin = spec.origin_ns
    if origin is None:
        origin = min(int(m.stream.times_ns[0]) for m in used)
    _check_repeated(signals, origin)
    last = max(int(m.stream.times_ns[-1]) for m in used)
    # ``every`` windows start where every mapped stream has data (on the tick grid)
    covered = max(int(m.stream.times_ns[0]) for m in used) - origin
    windows, listed = parse_windows(body.get("windows"), where.key("windows"), last - origin,
                                    dt, max(0, -(-covered // dt) * dt),
                                    origin - spec.offset_ns)
    use = _recording_use(used, spec, windows, origin)
    if "windows" in body and scope == "validation" and any(w.validation for w in windows):
        raise where.key("windows").key("validation_every").fail(
            "validation_every splits training entries; every window of a validation entry "
            "is already a validation episode")

    out: list[EpisodeSpec] = []
    for window in windows:
        start, end = origin + window.start_ns, origin + window.end_ns
        label = (f"{entry_info.id} window {window.index} [{window.start_ns / _NS:g} s, "
                 f"{window.end_ns / _NS:g} s]")
        wid = f"{entry_info.id}/w{window.index:03d}" if entry_info.windowed else entry_info.id
        ww = where.key("windows").key(window.index) if listed else where
        source = entry.source
        problem = source.check_window(start, end)
        if problem is not None:
            raise ww.fail(f"{label}: {problem}")
        for mapped in used:
            check_gaps(mapped, start, end, origin, label)
        records, timing = window_inputs(inputs, start, end, dt)
        built = []
        for item in signals:
            mapped = item.mapped
            times = mapped.stream.times_ns
            first = int(np.searchsorted(times, start, "left"))
            stop = int(np.searchsorted(times, end, "right"))
            if stop <= first:
                raise ww.fail(f"{label}: {mapped.stream.label} has no sample in the window "
                              f"(its samples span "
                              f"{mapped.stream.span(times[0], times[-1], origin)})")
            relative = (times[first:stop] - start).astype(np.int64)
            values = np.ascontiguousarray(mapped.stream.values[first:stop], dtype=np.float64)
            signal = parse_signal(item.settings, item.where, item.observation, dt,
                                  entry_info.horizon, sources.base, None,
                                  loaded=(relative, values))
            built.append(replace(signal, source=(mapped.spec or spec).name))
        initial = state_values(state, start, origin, label, ww)
        initial_state = parse_initial_state(initial, where.key("initial_state"), plan)
        state_fit = initial_state_fit(body, where, initial_state, plan)
        last_time = max(int(sig.times_ns[-1]) for sig in built)
        needed = -(-last_time // dt)
        horizon = entry_info.horizon
        if horizon is not None and horizon < needed:
            raise where.key("horizon_steps").fail(
                f"{label}: horizon_steps {horizon} ends before the last reference sample at "
                f"{last_time} ns; it needs at least {needed} step(s)")
        content = _content_hash(episode_hash(wid, entry_info.seed, entry_info.weight, horizon,
                                             initial_state, (), built, state_fit), records)
        # Not parsed here (``prepare_recorded_inputs``): every endpoint and mode was checked
        # above, values are finite and sequences increase by construction; the first rollout
        # parses them once per endpoint signature.
        info = _source_info(source, spec, where, used, use, window, origin, start, timing,
                            _input_sources(inputs, spec))
        out.append(EpisodeSpec(
            id=wid, scope="validation" if window.validation else scope, seed=entry_info.seed,
            weight=entry_info.weight, horizon_steps=horizon, initial_state=initial_state,
            recorded_inputs=records, signals=tuple(built), content_sha256=content,
            recording=spec.path, source=info, initial_state_fit=state_fit))
    return out


def _entry(body: Mapping[str, object], where: s.Where) -> _Entry:
    """The entry's own keys: id, seed, weight, horizon (and no trace or inline inputs)."""
    s.keys(body, where, required=("id", "source", "signals"), optional=_EPISODE_KEYS)
    for key in ("recorded_inputs", "recorded_inputs_file", "recording"):
        if key in body:
            raise where.key(key).fail("an episode with a 'source' takes its inputs from "
                                      "'inputs'")
    return _Entry(*episode_basics(body, where), "windows" in body)


def _open_entry(body: Mapping[str, object], where: s.Where, sources: SourceSet) -> EntrySource:
    """The entry's source, opened, with every topic / column the entry names read in one
    pass."""
    spec = sources.spec(body["source"], where.key("source"))
    named = [body.get("inputs"), body.get("signals"), body.get("initial_state")]
    sources.wanted = named_columns(named)
    source = sources.open(spec, sources.wanted)
    try:  # a reader that reads on demand (the base class's prefetch) does nothing
        source.prefetch(named_columns(named) if source.tabular else named_topics(named))
    except SourceError as exc:
        raise spec.where.key("path").fail(str(exc)) from None
    return EntrySource(source, spec, sources)


def _signals(body: Mapping[str, object], sw: s.Where, observations: Mapping[str, ObservationSpec],
             plan: SimulationPlan, entry: EntrySource) -> list[_MappedSignal]:
    """The entry's signals in observation declaration order, each stream checked: as many
    values per sample as the observation (strictly increasing times: ``_check_repeated``,
    once the episode's origin is known)."""
    raw_signals = signal_entries(body, sw, observations, "recorded data")
    signals: list[_MappedSignal] = []
    for observation_id, observation in observations.items():
        if observation_id not in raw_signals:
            continue
        at = sw.key(observation_id)
        raw = s.mapping(raw_signals[observation_id], at)
        bounds = None
        if observation.source in ("joint_position", "joint_velocity") and observation.name:
            bounds = joint_plausible(plan.model, observation.name,
                                     observation.source.removeprefix("joint_"))
        mapped = map_stream(raw, at, entry, plausible=bounds)
        width = mapped.stream.values.shape[1]
        if width != observation.dimension:
            raise at.fail(f"{mapped.stream.label} gives {width} value(s) per sample "
                          f"({', '.join(mapped.stream.components)}); observation "
                          f"{observation_id!r} ({observation.source}) has "
                          f"{observation.dimension} ({', '.join(observation.components)})")
        settings = {k: v for k, v in raw.items() if k not in STREAM_KEYS}
        signals.append(_MappedSignal(observation, settings, at, mapped))
    return signals


def _check_repeated(signals: Sequence[_MappedSignal], origin: int) -> None:
    """Reference times increase strictly; a repeated time is named as seconds into the
    recording (the file's stamp in parentheses) with the two lines or messages."""
    for item in signals:
        stream = item.mapped.stream
        repeated = np.flatnonzero(np.diff(stream.times_ns) == 0)
        if repeated.size:
            k = int(repeated[0]) + 1
            raise item.where.fail(f"{stream.label}: two samples at "
                                  f"{stream.when(stream.times_ns[k], origin)} on "
                                  f"{stream.index(k - 1)} and {stream.index(k)}; reference "
                                  f"times must increase strictly")


def _source_info(source: Source, spec: SourceSpec, where: s.Where,
                 used: Sequence[MappedStream], use: list[JsonObject], window: Window,
                 origin: int, start: int, timing: InputTiming,
                 input_sources: list[str]) -> SourceSummary:
    """The episode's ``source`` summary (result JSON): the file, the entry, the window, how
    the inputs were moved onto ticks and what the reader reported (``Source.describe``)."""
    described = source.describe()
    info: SourceSummary = {
        "path": str(spec.path), "format": source.format, "entry": where.path,
        "sources": _used_sources(used, spec), "recording_use": use,
        # the named sources its recorded inputs come from (a fitted offset is refused)
        "input_sources": input_sources,
        "reader": described.reader,
        "window_s": window.describe(), "origin_ns": origin, "start_ns": start,
        "sidecar": None if spec.sidecar is None else str(spec.sidecar),
        "input_timing": timing}
    if described.warnings:  # what its storage could not vouch for
        info["warnings"] = list(described.warnings)
    if described.reader_fallback:  # reader: auto fell back from rosbag2_py to rosbags
        info["reader_fallback"] = described.reader_fallback
    if described.ring_targets is not None:  # franka_sysid: how <stem>_targets.csv was placed
        info["ring_targets"] = dict(described.ring_targets)
    if described.controller is not None:  # franka: the sidecar's kind
        info["controller"] = described.controller
    if described.ring_log is not None:  # franka_sysid: dropped frames, save error, abort
        info["ring_log"] = dict(described.ring_log)
    return info


def _input_sources(inputs: Sequence[CommandInput], spec: SourceSpec) -> list[str]:
    """The named sources (``sources``) the entry's recorded inputs are read from."""
    return sorted({n for i in inputs if (n := (i.mapped.spec or spec).name)})


def _recording_use(used: Sequence[MappedStream], spec: SourceSpec, windows: Sequence[Window],
                   origin: int) -> list[JsonObject]:
    """How much of each file the entry's windows cover: its span (s after the origin) and the
    seconds and fraction of it inside some window."""
    spans: dict[str, list[int]] = {}
    for mapped in used:
        path = str((mapped.spec or spec).path)
        times = mapped.stream.times_ns
        span = spans.setdefault(path, [int(times[0]), int(times[-1])])
        span[0], span[1] = min(span[0], int(times[0])), max(span[1], int(times[-1]))
    cuts = sorted((origin + w.start_ns, origin + w.end_ns) for w in windows)
    out: list[JsonObject] = []
    for path, (first, last) in spans.items():
        covered, reach = 0, first
        for start, end in cuts:
            start, end = max(start, reach), min(end, last)
            if end > start:
                covered += end - start
                reach = end
        total = max(last - first, 1)
        out.append({"path": path, "span_s": [(first - origin) / _NS, (last - origin) / _NS],
                    "used_s": covered / _NS, "used_fraction": round(covered / total, 6)})
    return out


def _used_sources(used: Sequence[MappedStream], spec: SourceSpec) -> list[JsonObject]:
    """Every file the entry's streams came from, with its offset (s)."""
    out: dict[str, JsonObject] = {}
    for mapped in [None, *used]:
        found = spec if mapped is None else (mapped.spec or spec)
        if isinstance(found, SourceSpec):
            out.setdefault(str(found.path), {"path": str(found.path),
                                             "offset_s": found.offset_ns / _NS})
    return list(out.values())


def _content_hash(base: str, records: Sequence[IngressRecord]) -> str:
    """The episode content hash: everything but the inputs (``episode_hash``), then every
    recorded input's source, sequence, payload, commit tick and acceptance, one line each."""
    digest = hashlib.sha256(base.encode())
    digest.update("\n".join(f"{x.source_id}\t{x.source_sequence}\t{x.payload_type}\t"
                            f"{x.payload_json}\t{x.commit_tick}\t{x.acceptance_sequence}"
                            for x in records).encode())
    return digest.hexdigest()

