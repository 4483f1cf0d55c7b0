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
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from fibril_sim_core.records import IngressRecord

from fibril_sim_core import _schema as s

from ..recordings.formats import open_source
from ..recordings.sources import MOTOR_COMMAND, Source, SourceError, Stream
from .validity import Plausible, apply_validity, joint_plausible, parse_validity
from .windows import parse_windows

if TYPE_CHECKING:
    from fibril_sim_core.plan import SimulationPlan

    from ..model.observations import ObservationSpec
    from .episode_specs import EpisodeSpec

__all__ = ["COMMIT_POLICIES", "SourceSet", "source_episodes"]

COMMIT_POLICIES = ("next_tick", "nearest_tick")
MOTOR_PAYLOAD = "fibril_sim/motor_command/v1"
_SOURCE_KEYS = ("path", "format", "time", "time_column", "time_unit", "max_gap", "origin",
                "offset", "accept", "abort", "sidecar", "reader", "types", "header", "columns",
                "delimiter")
_STREAM_KEYS = ("topic", "field", "type", "time", "column", "columns", "max_gap", "source",
                "valid", "on_invalid")
_EPISODE_KEYS = ("episode_seed", "weight", "horizon_steps", "initial_state",
                 "initial_state_fit", "inputs", "windows", "description")
_NS = 1_000_000_000


# --------------------------------------------------------------------------- sources

@dataclass(frozen=True)
class _SourceSpec:
    path: Path
    where: s.Where
    format: str | None
    time: str
    time_column: str | None
    time_unit: str | None
    max_gap_ns: int | None
    origin_ns: int | None
    sidecar: Path | None = None
    reader: str | None = None  # a bag's library (bag_readers): None is rosbags
    types: tuple[Path, ...] = ()  # .msg folders for types the bag does not define
    header: bool | None = None  # a CSV log: False for a headerless export
    column_names: tuple[str, ...] | tuple[tuple[int, str], ...] | None = None
    delimiter: str | None = None
    offset_ns: int = 0  # added to its times: onto the episode's time base
    name: str | None = None  # its name in the request's sources (None: given inline)
    owner: Any = field(default=None, compare=False, repr=False)  # the SourceSet
    accept: tuple[str, ...] = ()  # franka_sysid: ring-log problems taken knowingly
    abort: str = "refuse"  # franka_sysid: an aborted run is refused, or truncated


def _franka_options(body: Mapping[str, Any], where: s.Where) -> dict[str, Any]:
    """``accept`` (a list of ACCEPTABLE names) and ``abort`` (an ABORT_POLICIES name) of a
    franka_sysid source."""
    from ..recordings.franka_sidecar import ABORT_POLICIES, ACCEPTABLE

    out: dict[str, Any] = {}
    if "accept" in body:
        at = where.key("accept")
        names = [s.string(v, at.key(i)) for i, v in enumerate(s.sequence(body["accept"], at))]
        for i, name in enumerate(names):
            if name not in ACCEPTABLE:
                raise at.key(i).fail(f"unknown {name!r}; a franka_sysid source accepts "
                                     f"{', '.join(ACCEPTABLE)}")
        out["accept"] = tuple(names)
    if "abort" in body:
        policy = s.string(body["abort"], where.key("abort"))
        if policy not in ABORT_POLICIES:
            raise where.key("abort").fail(f"expected one of {', '.join(ABORT_POLICIES)}, got "
                                          f"{policy!r}")
        out["abort"] = policy
    if out and body.get("format") != "franka_sysid":
        key = next(iter(out))
        raise where.key(key).fail(f"{key} is a franka_sysid source's (its sidecar's ring_log "
                                  f"and abort blocks); this source's format is "
                                  f"{body.get('format') or 'from its file name'}")
    return out


class SourceSet:
    """The request's named ``sources`` and every opened recording (a context manager: closing
    it closes the files; decoded streams stay cached while it is open)."""

    def __init__(self, value: Any, where: s.Where, base: Path) -> None:
        self.base = base
        self.where = where
        self._named: dict[str, tuple[Any, s.Where]] = {}
        if value is not None:
            for name, spec in s.mapping(value, where).items():
                self._named[str(name)] = (spec, where.key(str(name)))
        self._open: dict[tuple[Any, ...], Source] = {}
        self.wanted: list[str] = []  # the columns the entry being read names (one pass each)

    def spec(self, value: Any, where: s.Where) -> _SourceSpec:
        """``source:`` of an episode: a name in ``sources`` or an inline mapping."""
        name = None
        if isinstance(value, str):
            if value not in self._named:
                listed = ", ".join(self._named) or "none declared"
                raise where.fail(f"unknown source {value!r}; the request's sources: {listed}")
            name = value
            value, where = self._named[value]
        body = s.mapping(value, where)
        s.keys(body, where, required=("path",), optional=_SOURCE_KEYS)
        time = s.string(body.get("time", "log"), where.key("time"))
        if time not in ("log", "header"):
            raise where.key("time").fail(f"expected log (the bag's receive time) or header "
                                         f"(header.stamp), got {time!r}")
        if "reader" in body:
            from ..recordings.bag_readers import choose_reader

            try:
                choose_reader(s.string(body["reader"], where.key("reader")), "reader")
            except ValueError as exc:
                raise where.key("reader").fail(str(exc).removeprefix("reader: ")) from None
        origin = None
        if "origin" in body:
            origin = round(s.number(body["origin"], where.key("origin")) * _NS)
        offset = 0
        if "offset" in body:
            offset = round(s.number(body["offset"], where.key("offset")) * _NS)
        return _SourceSpec(
            path=self.base / s.string(body["path"], where.key("path")), where=where,
            format=s.string(body["format"], where.key("format")) if "format" in body else None,
            time=time,
            time_column=(s.string(body["time_column"], where.key("time_column"))
                         if "time_column" in body else None),
            time_unit=(s.string(body["time_unit"], where.key("time_unit"))
                       if "time_unit" in body else None),
            max_gap_ns=_gap(body, where), origin_ns=origin,
            sidecar=(self.base / s.string(body["sidecar"], where.key("sidecar"))
                     if "sidecar" in body else None),
            reader=s.string(body["reader"], where.key("reader")) if "reader" in body else None,
            types=_types(body, where, self.base), **_csv_layout(body, where),
            offset_ns=offset, name=name, owner=self, **_franka_options(body, where))

    def open(self, spec: _SourceSpec, columns: Sequence[str] = ()) -> Source:
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
                                     column_names=_names(spec.column_names),
                                     delimiter=spec.delimiter)
            except SourceError as exc:
                raise spec.where.key("path").fail(str(exc)) from None
            except (OSError, ValueError) as exc:  # a reader's own error: still one line
                raise spec.where.key("path").fail(
                    f"cannot read recording {str(spec.path)!r}: "
                    f"{getattr(exc, 'strerror', None) or exc}") from None
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


def _csv_layout(body: Mapping[str, Any], where: s.Where) -> dict[str, Any]:
    """A CSV export's ``header: false``, ``columns`` ([names] or {index: name}) and
    ``delimiter`` ("," ";" or "\\t")."""
    out: dict[str, Any] = {}
    if "header" in body:
        value = body["header"]
        if not isinstance(value, bool):
            raise where.key("header").fail(f"expected true or false, got {s.describe(value)}")
        out["header"] = value
    if "columns" in body:
        at = where.key("columns")
        if out.get("header", True):
            raise at.fail("columns names the columns of a file without a header row: give "
                          "header: false too")
        value = body["columns"]
        if isinstance(value, Mapping):
            pairs = []
            for key, name in value.items():
                if isinstance(key, bool) or not isinstance(key, int) or key < 0:
                    raise at.fail(f"expected column indices (0, 1, ...) as keys, got {key!r}")
                pairs.append((key, s.string(name, at.key(str(key)))))
            out["column_names"] = tuple(sorted(pairs))
        else:
            out["column_names"] = tuple(s.string(v, at.key(n))
                                        for n, v in enumerate(s.sequence(value, at)))
        names = [n for n in (out["column_names"] if not isinstance(value, Mapping)
                             else [p[1] for p in out["column_names"]])]
        if len(set(names)) != len(names):
            raise at.fail("a column is named twice")
    if "delimiter" in body:
        value = s.string(body["delimiter"], where.key("delimiter"))
        if value not in (",", ";", "\t"):
            raise where.key("delimiter").fail(f"expected ',', ';' or a tab, got {value!r}")
        out["delimiter"] = value
    return out


def _names(value: Any) -> Any:
    if value and isinstance(value[0], tuple):
        return dict(value)
    return value


def _types(body: Mapping[str, Any], where: s.Where, base: Path) -> tuple[Path, ...]:
    """``types: [msg_dir, ...]``: folders of .msg files (``message_types``), each checked."""
    if "types" not in body:
        return ()
    at = where.key("types")
    items = body["types"]
    if not isinstance(items, list) or not items:
        raise at.fail("expected a list of folders of .msg files")
    folders = tuple(base / s.string(item, at.key(n)) for n, item in enumerate(items))
    from ..recordings.message_types import msg_folder_types

    try:
        msg_folder_types(folders)
    except ValueError as exc:
        raise at.fail(str(exc)) from None
    return folders


def _gap(body: Mapping[str, Any], where: s.Where) -> int | None:
    if "max_gap" not in body:
        return None
    return round(s.number(body["max_gap"], where.key("max_gap"), positive=True) * _NS)


# --------------------------------------------------------------------------- streams

@dataclass(frozen=True)
class _Mapped:
    """One stream the entry uses, with where it was declared and its gap tolerance."""

    stream: Stream
    where: s.Where
    max_gap_ns: int | None
    spec: Any = None  # the _SourceSpec it was read from


def _stream(body: Mapping[str, Any], where: s.Where, source: Source, spec: _SourceSpec, *,
            field_suffix: str = "", column: str | None = None,
            plausible: Plausible | None = None) -> _Mapped:
    """The stream a mapping names: ``topic`` + ``field`` (+ ``type``, ``time``) of a bag, or
    ``column`` / ``columns`` of a CSV log; of the episode's source, or of the stream's own
    ``source`` (a name in ``sources`` or a mapping), its times moved by that source's
    ``offset`` onto the episode's time base; its invalid rows (``validity``: ``valid``,
    ``on_invalid`` and the model's ``plausible`` bounds) handled."""
    if "source" in body and spec.owner is not None:
        spec = spec.owner.spec(body["source"], where.key("source"))
        source = spec.owner.open(spec, spec.owner.wanted)
    validity = parse_validity(body, where)
    mapped = _read(body, where, source, spec, field_suffix=field_suffix, column=column,
                   check_values=validity.on_invalid == "error")
    checked = apply_validity(mapped.stream, validity, plausible, where)
    if checked is not mapped.stream:
        mapped = _Mapped(checked, mapped.where, mapped.max_gap_ns, mapped.spec)
    if spec.offset_ns:
        stream = mapped.stream
        mapped = _Mapped(replace(stream, times_ns=stream.times_ns + spec.offset_ns,
                                 origin_ns=None if stream.origin_ns is None
                                 else stream.origin_ns + spec.offset_ns),
                         mapped.where, mapped.max_gap_ns, spec)
    return mapped


def _read(body: Mapping[str, Any], where: s.Where, source: Source, spec: _SourceSpec, *,
          field_suffix: str = "", column: str | None = None,
          check_values: bool = True) -> _Mapped:
    try:
        if "topic" in body:
            if source.tabular:
                raise where.key("topic").fail(f"{str(source.path)!r} is a CSV log: name "
                                              f"column(s), not a topic")
            topic = s.string(body["topic"], where.key("topic"))
            field = s.string(body["field"], where.key("field")) if "field" in body else None
            if field is not None and field_suffix:
                field = f"{field}[{field_suffix}]"
            time = s.string(body["time"], where.key("time")) if "time" in body else None
            if time is not None and time not in ("log", "header"):
                raise where.key("time").fail(f"expected log or header, got {time!r}")
            kind = s.string(body["type"], where.key("type")) if "type" in body else None
            stream = source.stream(topic=topic, field=field, time=time, message_type=kind,
                                   check_values=check_values)
        else:
            if not source.tabular:
                raise where.fail(f"{str(source.path)!r} is a bag: name a topic (and field)")
            if column is not None:
                columns = [column]
            elif "column" in body:
                columns = [s.string(body["column"], where.key("column"))]
            elif "columns" in body:
                raw = s.sequence(body["columns"], where.key("columns"))
                columns = [s.string(c, where.key("columns").key(i)) for i, c in enumerate(raw)]
                if not columns:
                    raise where.key("columns").fail("expected at least one column name")
            else:
                raise where.fail("name the recorded data: topic + field (a bag) or column / "
                                 "columns (a CSV log)")
            stream = source.stream(columns=columns, check_values=check_values)
    except SourceError as exc:
        raise where.fail(str(exc)) from None
    gap = _gap(body, where)
    return _Mapped(stream, where, gap if gap is not None else spec.max_gap_ns, spec)


# --------------------------------------------------------------------------- inputs

@dataclass(frozen=True)
class _Input:
    """One endpoint fed by one stream."""

    source_id: str
    mapped: _Mapped
    mode: str | None  # None: per row (a MotorCommand)
    commit: str
    latency_ticks: int = 0  # the endpoint's command latency


def _inputs(value: Any, where: s.Where, source: Source, spec: _SourceSpec,
            plan: SimulationPlan) -> list[_Input]:
    out: list[_Input] = []
    checked: set[tuple[str, str]] = set()
    for i, item in enumerate(s.sequence(value, where)):
        at = where.key(i)
        body = s.mapping(item, at)
        s.keys(body, at, required=("commit",),
               optional=_STREAM_KEYS + ("source_id", "endpoints", "mode"))
        commit = s.string(body["commit"], at.key("commit"))
        if commit not in COMMIT_POLICIES:
            raise at.key("commit").fail(f"unknown commit policy {commit!r}; expected one of "
                                        f"{', '.join(COMMIT_POLICIES)}")
        mode = s.string(body["mode"], at.key("mode")) if "mode" in body else None
        if ("source_id" in body) == ("endpoints" in body):
            raise at.fail("give 'source_id' (one endpoint) or 'endpoints' (a mapping of joint "
                          "names or columns to endpoint source ids)")
        pairs: list[tuple[str, str | None, s.Where]] = []
        if "source_id" in body:
            pairs.append((s.string(body["source_id"], at.key("source_id")), None, at))
        else:
            ew = at.key("endpoints")
            for name, source_id in s.mapping(body["endpoints"], ew).items():
                pairs.append((s.string(source_id, ew.key(str(name))), str(name), ew.key(str(name))))
            if not pairs:
                raise ew.fail("expected at least one name → endpoint source id")
            if "topic" in body and "field" not in body:
                raise at.key("field").fail("missing: 'endpoints' index an array field by "
                                           "name (e.g. field: effort)")
            if "topic" not in body and ("column" in body or "columns" in body):
                raise at.fail("with 'endpoints', the mapping's keys are the CSV columns; give "
                              "no column / columns")
        for source_id, name, pw in pairs:
            endpoint = plan.endpoints.get(source_id)
            if endpoint is None:
                raise pw.fail(f"unknown endpoint source id {source_id!r}; the plan's actuator "
                              f"endpoints: {', '.join(plan.endpoints) or 'none'}")
            if endpoint.payload_type != MOTOR_PAYLOAD:
                raise pw.fail(f"endpoint {source_id!r} takes {endpoint.payload_type!r}; "
                              f"recordings feed {MOTOR_PAYLOAD} endpoints")
            bounds = _endpoint_plausible(plan, endpoint, mode)
            if name is not None and "topic" in body:
                mapped = _stream(body, at, source, spec, field_suffix=name, plausible=bounds)
            elif name is not None:
                mapped = _stream(body, pw, source, spec, column=name, plausible=bounds)
            else:
                mapped = _stream(body, at, source, spec, plausible=bounds)
            if mapped.stream.modes is None:
                if mode is None:
                    raise at.key("mode").fail(f"missing: the command mode of {source_id!r} "
                                              f"(one of {', '.join(endpoint.modes)})")
                modes = (mode,)
            else:
                if mode is not None:
                    raise at.key("mode").fail(f"{MOTOR_COMMAND} carries its own mode; give no "
                                              f"mode")
                modes = tuple(sorted(set(mapped.stream.modes)))
            if mapped.stream.values.shape[1] != 1:
                raise at.fail(f"{mapped.stream.label} gives {mapped.stream.values.shape[1]} "
                              f"values per sample; a command is one value")
            for m in modes:
                if (source_id, m) in checked:
                    continue
                try:
                    endpoint.create().parse({"mode": m, "value": 0.0})
                except ValueError as exc:
                    raise (at.key("mode") if "mode" in body else at).fail(
                        f"{source_id!r}: {exc}") from None
                checked.add((source_id, m))
            out.append(_Input(source_id, mapped, mode, commit, endpoint.latency_ticks))
    return out


def _endpoint_plausible(plan: SimulationPlan, endpoint: Any, mode: str | None
                        ) -> Plausible | None:
    """A command's bounds: a position target within its joint's range (plus the margin), any
    other command within the plausible limit."""
    import mujoco

    model = plan.model
    actuator = endpoint.actuator_id
    if int(model.actuator_trntype[actuator]) != int(mujoco.mjtTrn.mjTRN_JOINT):
        return joint_plausible(model, "", "command")
    joint = mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_JOINT,
                              int(model.actuator_trnid[actuator, 0])) or ""
    bounds = joint_plausible(model, joint, "position" if mode == "position" else "command")
    return replace(bounds, what=f"{bounds.what} for endpoint {endpoint.endpoint!r}")


def _commit_ticks(relative: np.ndarray, dt: int, policy: str) -> np.ndarray:
    if policy == "next_tick":
        return -(-relative // dt)
    k = relative // dt
    return k + (2 * (relative - k * dt) > dt)  # nearest; a tie to the earlier tick


def _window_inputs(inputs: Sequence[_Input], start: int, end: int, dt: int
                   ) -> tuple[tuple[IngressRecord, ...], dict[str, Any]]:
    """The recorded inputs of one window (absolute times ``[start, end)``) and how their
    sample times were moved onto ticks. Replay order: tick, then recorded time, then the
    order of the ``inputs`` mappings; the command in force at the start comes first."""
    ticks_parts, times_parts, order_parts, row_parts, value_parts = [], [], [], [], []
    timing: dict[str, dict[str, Any]] = {}
    for order, item in enumerate(inputs):
        times = item.mapped.stream.times_ns
        first = int(np.searchsorted(times, start, "left"))
        stop = int(np.searchsorted(times, end, "left"))
        relative = times[first:stop] - start
        ticks = _commit_ticks(relative, dt, item.commit)
        shift = ticks * dt - relative
        stats = timing.setdefault(item.commit, {"samples": 0, "moved": 0, "max_shift_ns": 0,
                                                "held_at_start": 0,
                                                "held_latency_ticks": 0})
        stats["samples"] += int(relative.shape[0])
        stats["moved"] += int(np.count_nonzero(shift))
        if shift.size:
            stats["max_shift_ns"] = max(stats["max_shift_ns"], int(np.abs(shift).max()))
        rows = np.arange(first, stop)
        stamps = times[first:stop]
        if first > 0:  # the command in force at the window start
            stats["held_at_start"] += 1
            # committed at tick 0, it acts only after the endpoint's latency: those first
            # ticks run without it (a fresh instance's actuators start from rest)
            stats["held_latency_ticks"] = max(stats["held_latency_ticks"], item.latency_ticks)
            ticks = np.concatenate(([0], ticks))
            stamps = np.concatenate(([start - 1], stamps))
            rows = np.concatenate(([first - 1], rows))
        ticks_parts.append(ticks)
        times_parts.append(stamps)
        order_parts.append(np.full(rows.shape[0], order))
        row_parts.append(rows)
        value_parts.append(item.mapped.stream.values[rows, 0])
    if not ticks_parts:
        return (), timing
    ticks = np.concatenate(ticks_parts)
    stamps = np.concatenate(times_parts)
    orders = np.concatenate(order_parts)
    rows = np.concatenate(row_parts)
    values = np.concatenate(value_parts)
    replay = np.lexsort((rows, orders, stamps, ticks))
    orders = orders[replay]
    # source_sequence counts per endpoint in replay order
    endpoint_of = np.array([sorted({i.source_id for i in inputs}).index(i.source_id)
                            for i in inputs])[orders]
    sequence = np.empty(orders.shape[0], dtype=np.int64)
    for endpoint in np.unique(endpoint_of).tolist():
        mask = endpoint_of == endpoint
        sequence[mask] = np.arange(1, int(mask.sum()) + 1)
    source_ids = [item.source_id for item in inputs]
    prefixes = {(order, mode): f'{{"mode":"{mode}","value":'
                for order, item in enumerate(inputs)
                for mode in (set(item.mapped.stream.modes) if item.mapped.stream.modes
                             else (item.mode,))}
    fixed = [prefixes[(order, item.mode)] if item.mapped.stream.modes is None else None
             for order, item in enumerate(inputs)]
    modes = [item.mapped.stream.modes for item in inputs]
    records = []
    append = records.append
    for acceptance, (tick, order, row, value, number) in enumerate(zip(
            ticks[replay].tolist(), orders.tolist(), rows[replay].tolist(),
            values[replay].tolist(), sequence.tolist())):
        prefix = fixed[order] or prefixes[(order, modes[order][row])]  # type: ignore[index]
        append(IngressRecord(0, source_ids[order], number, MOTOR_PAYLOAD,
                             prefix + repr(value) + "}", True, tick, acceptance, "", 0))
    for stats in timing.values():
        stats["max_shift_s"] = stats["max_shift_ns"] / _NS
    return tuple(records), timing


# --------------------------------------------------------------------------- episodes

def source_episodes(value: Any, where: s.Where, scope: str,
                    observations: Mapping[str, ObservationSpec], plan: SimulationPlan,
                    sources: SourceSet) -> list[EpisodeSpec]:
    """The episodes of one ``source:`` entry: one per window (scope: the entry's, or
    validation for a ``validation_every`` window)."""
    from . import episode_specs as r, initial_states as states

    body = s.mapping(value, where)
    s.keys(body, where, required=("id", "source", "signals"), optional=_EPISODE_KEYS)
    for key in ("recorded_inputs", "recorded_inputs_file", "recording"):
        if key in body:
            raise where.key(key).fail("an episode with a 'source' takes its inputs from "
                                      "'inputs'")
    episode_id = s.string(body["id"], where.key("id"))
    if "description" in body:
        s.string(body["description"], where.key("description"))
    seed = s.integer(body.get("episode_seed", 0), where.key("episode_seed"), minimum=0)
    weight = s.number(body.get("weight", 1.0), where.key("weight"), positive=True)
    horizon = None
    if "horizon_steps" in body:
        horizon = s.integer(body["horizon_steps"], where.key("horizon_steps"), minimum=1)
    spec = sources.spec(body["source"], where.key("source"))
    named = [body.get("inputs"), body.get("signals"), body.get("initial_state")]
    sources.wanted = _columns(named)
    source = sources.open(spec, sources.wanted)
    try:  # every topic / column the entry names in one pass
        source.prefetch(_columns(named) if source.tabular else _topics(named))
    except SourceError as exc:
        raise spec.where.key("path").fail(str(exc)) from None
    dt = plan.timebase.timestep_ns

    inputs = _inputs(body.get("inputs", []), where.key("inputs"), source, spec, plan)

    sw = where.key("signals")
    raw_signals = r.signal_entries(body, sw, observations, "recorded data")
    signals: list[tuple[ObservationSpec, Mapping[str, Any], s.Where, _Mapped]] = []
    for observation_id, observation in observations.items():
        if observation_id not in raw_signals:
            continue
        at = sw.key(observation_id)
        raw = s.mapping(raw_signals[observation_id], at)
        bounds = None
        if observation.source in ("joint_position", "joint_velocity") and observation.name:
            bounds = joint_plausible(plan.model, observation.name,
                                     observation.source.removeprefix("joint_"))
        mapped = _stream(raw, at, source, spec, plausible=bounds)
        width = mapped.stream.values.shape[1]
        if width != observation.dimension:
            raise at.fail(f"{mapped.stream.label} gives {width} value(s) per sample "
                          f"({', '.join(mapped.stream.components)}); observation "
                          f"{observation_id!r} ({observation.source}) has "
                          f"{observation.dimension} ({', '.join(observation.components)})")
        repeated = np.flatnonzero(np.diff(mapped.stream.times_ns) == 0)
        if repeated.size:
            k = int(repeated[0]) + 1
            t = int(mapped.stream.times_ns[k])
            raise at.fail(f"{mapped.stream.label}: two samples at {t / _NS:.9g} s "
                          f"({mapped.stream.place(k - 1)} and {mapped.stream.place(k)}); "
                          f"reference times must increase strictly")
        settings = {k: v for k, v in raw.items() if k not in _STREAM_KEYS}
        signals.append((observation, settings, at, mapped))

    state, state_streams = _state_entries(body.get("initial_state", []),
                                          where.key("initial_state"), source, spec,
                                          {o.id: m for o, _, _, m in signals}, plan.model)

    used = [i.mapped for i in inputs] + [m for *_, m in signals] + state_streams
    origin = spec.origin_ns
    if origin is None:
        origin = min(int(m.stream.times_ns[0]) for m in used)
    last = max(int(m.stream.times_ns[-1]) for m in used)
    # ``every`` windows start where every mapped stream has data (on the tick grid)
    covered = max(int(m.stream.times_ns[0]) for m in used) - origin
    windows, listed = parse_windows(body.get("windows"), where.key("windows"), last - origin,
                                    dt, max(0, -(-covered // dt) * dt))
    use = _recording_use(used, spec, windows, origin)
    if "windows" in body and scope == "validation" and any(w.validation for w in windows):
        raise where.key("windows").key("validation_every").fail(
            "validation_every splits training entries; every window of a validation entry "
            "is already a validation episode")

    out: list[EpisodeSpec] = []
    for window in windows:
        start, end = origin + window.start_ns, origin + window.end_ns
        label = (f"{episode_id} window {window.index} [{window.start_ns / _NS:g} s, "
                 f"{window.end_ns / _NS:g} s]")
        wid = f"{episode_id}/w{window.index:03d}" if "windows" in body else episode_id
        ww = where.key("windows").key(window.index) if listed else where
        problem = source.check_window(start, end)
        if problem is not None:
            raise ww.fail(f"{label}: {problem}")
        for mapped in used:
            _check_gaps(mapped, start, end, origin, label)
        records, timing = _window_inputs(inputs, start, end, dt)
        built = []
        for observation, settings, at, mapped in signals:
            times = mapped.stream.times_ns
            first = int(np.searchsorted(times, start, "left"))
            stop = int(np.searchsorted(times, end, "right"))
            if stop <= first:
                raise ww.fail(f"{label}: {mapped.stream.label} has no sample in the window "
                              f"(its samples span {(times[0] - origin) / _NS:g} s to "
                              f"{(times[-1] - origin) / _NS:g} s after the origin)")
            relative = (times[first:stop] - start).astype(np.int64)
            values = np.ascontiguousarray(mapped.stream.values[first:stop], dtype=np.float64)
            signal = r._signal(settings, at, observation, dt, horizon, sources.base, None,
                               loaded=(relative, values))
            built.append(replace(signal, source=(mapped.spec or spec).name))
        initial = _state_values(state, start, origin, label, ww)
        initial_state = states._initial_state(initial, where.key("initial_state"), plan)
        state_fit = states.initial_state_fit(body, where, initial_state, plan)
        last_time = max(int(sig.times_ns[-1]) for sig in built)
        needed = -(-last_time // dt)
        if horizon is not None and horizon < needed:
            raise where.key("horizon_steps").fail(
                f"{label}: horizon_steps {horizon} ends before the last reference sample at "
                f"{last_time} ns; it needs at least {needed} step(s)")
        content = _content_hash(r._episode_hash(wid, seed, weight, horizon, initial_state, (),
                                                built, state_fit), records)
        # Not parsed here (``prepare_recorded_inputs``): every endpoint and mode was checked
        # above, values are finite and sequences increase by construction; the first rollout
        # parses them once per endpoint signature.
        described = source.describe()
        info: dict[str, Any] = {
            "path": str(spec.path), "format": source.format, "entry": where.path,
            "sources": _used_sources(used, spec), "recording_use": use,
            # the named sources its recorded inputs come from (a fitted offset is refused)
            "input_sources": sorted({n for i in inputs if (n := (i.mapped.spec or spec).name)}),
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
        out.append(r.EpisodeSpec(
            id=wid, scope="validation" if window.validation else scope, seed=seed,
            weight=weight, horizon_steps=horizon, initial_state=initial_state,
            recorded_inputs=records, signals=tuple(built), content_sha256=content,
            recording=spec.path, source=info, initial_state_fit=state_fit))
    return out


def _recording_use(used: Sequence[_Mapped], spec: _SourceSpec, windows: Sequence[Any],
                   origin: int) -> list[dict[str, Any]]:
    """How much of each file the entry's windows cover: its span (s after the origin) and the
    seconds and fraction of it inside some window."""
    spans: dict[str, list[int]] = {}
    for mapped in used:
        path = str((mapped.spec or spec).path)
        times = mapped.stream.times_ns
        span = spans.setdefault(path, [int(times[0]), int(times[-1])])
        span[0], span[1] = min(span[0], int(times[0])), max(span[1], int(times[-1]))
    cuts = sorted((origin + w.start_ns, origin + w.end_ns) for w in windows)
    out = []
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


def _used_sources(used: Sequence[_Mapped], spec: _SourceSpec) -> list[dict[str, Any]]:
    """Every file the entry's streams came from, with its offset (s)."""
    out: dict[str, dict[str, Any]] = {}
    for mapped in [None, *used]:
        found = spec if mapped is None else (mapped.spec or spec)
        if isinstance(found, _SourceSpec):
            out.setdefault(str(found.path), {"path": str(found.path),
                                             "offset_s": found.offset_ns / _NS})
    return list(out.values())


def _content_hash(base: str, records: Sequence[IngressRecord]) -> str:
    """The episode content hash: everything but the inputs (``_episode_hash``), then every
    recorded input's source, sequence, payload, commit tick and acceptance, one line each."""
    digest = hashlib.sha256(base.encode())
    digest.update("\n".join(f"{x.source_id}\t{x.source_sequence}\t{x.payload_type}\t"
                            f"{x.payload_json}\t{x.commit_tick}\t{x.acceptance_sequence}"
                            for x in records).encode())
    return digest.hexdigest()


def _topics(value: Any) -> list[str]:
    """Every ``topic:`` string inside the entry's mappings and lists."""
    found: list[str] = []
    if isinstance(value, Mapping):
        if isinstance(value.get("topic"), str):
            found.append(value["topic"])
        for item in value.values():
            found.extend(_topics(item))
    elif isinstance(value, (list, tuple)):
        for item in value:
            found.extend(_topics(item))
    return found


def _columns(value: Any) -> list[str]:
    """Every CSV column name the entry's mappings may use (``column``, ``columns`` and the
    keys of ``endpoints``); a name that is no column is left for the stream to report."""
    found: list[str] = []
    if isinstance(value, Mapping):
        for key in ("column", "columns"):
            item = value.get(key)
            found.extend([item] if isinstance(item, str) else
                         [c for c in item if isinstance(c, str)] if isinstance(item, list)
                         else [])
        if isinstance(value.get("endpoints"), Mapping):
            found.extend(str(k) for k in value["endpoints"])
        for item in value.values():
            found.extend(_columns(item))
    elif isinstance(value, (list, tuple)):
        for item in value:
            found.extend(_columns(item))
    return found


def _check_gaps(mapped: _Mapped, start: int, end: int, origin: int, label: str) -> None:
    """No two neighbouring samples of the window (its edges included) further apart than the
    stream's ``max_gap``."""
    limit = mapped.max_gap_ns
    if limit is None:
        return
    times = mapped.stream.times_ns
    first = int(np.searchsorted(times, start, "left"))
    stop = int(np.searchsorted(times, end, "right"))
    edges = np.concatenate(([start], times[first:stop], [end]))
    gaps = np.diff(edges)
    wide = np.flatnonzero(gaps > limit)
    if wide.size:
        i = int(wide[0])
        stream = mapped.stream
        ends = [("the window start" if i == 0 else stream.place(first + i - 1)),
                ("the window end" if first + i >= stop else stream.place(first + i))]
        raise mapped.where.fail(
            f"{label}: {mapped.stream.label} has a gap of {gaps[i] / 1e6:.6g} ms from "
            f"{(edges[i] - origin) / _NS:.9g} s to {(edges[i + 1] - origin) / _NS:.9g} s after "
            f"the origin ({ends[0]} to {ends[1]}), more than max_gap {limit / 1e6:g} ms")


# --------------------------------------------------------------------------- initial state

_FROM = {"joint": (("qpos_from", "qpos"), ("qvel_from", "qvel")),
         "mocap": (("pos_from", "pos"), ("quat_from", "quat"))}


def _state_entries(value: Any, where: s.Where, source: Source, spec: _SourceSpec,
                   signals: Mapping[str, _Mapped], model: Any = None
                   ) -> tuple[list[tuple[dict[str, Any], list[tuple[str, _Mapped]]]],
                              list[_Mapped]]:
    """``initial_state`` entries whose ``*_from`` keys name a stream or a signal."""
    out = []
    streams: list[_Mapped] = []
    for i, item in enumerate(s.sequence(value, where)):
        at = where.key(i)
        body = dict(s.mapping(item, at))
        pairs = _FROM.get(str(body.get("type")), ())
        taken: list[tuple[str, _Mapped]] = []
        for from_key, key in pairs:
            if from_key not in body:
                continue
            if key in body:
                raise at.fail(f"give '{key}' or '{from_key}', not both")
            fw = at.key(from_key)
            ref = s.mapping(body.pop(from_key), fw)
            if "sidecar" in ref:
                s.keys(ref, fw, required=("sidecar",), optional=("index",))
                if not source.describe().sidecar:
                    raise fw.key("sidecar").fail(f"{str(source.path)!r} has no sidecar (only "
                                                 f"the franka_sysid format does)")
                index = (s.integer(ref["index"], fw.key("index")) if "index" in ref else None)
                try:
                    fixed = source.sidecar_value(s.string(ref["sidecar"], fw.key("sidecar")),
                                                 index)
                except SourceError as exc:
                    raise fw.fail(str(exc)) from None
                taken.append((key, _Fixed(fixed, fw)))  # type: ignore[arg-type]
                continue
            if "signal" in ref:
                s.keys(ref, fw, required=("signal",))
                name = s.string(ref["signal"], fw.key("signal"))
                if name not in signals:
                    raise fw.key("signal").fail(f"no signal {name!r} in this entry; its "
                                                f"signals: {', '.join(signals) or 'none'}")
                mapped = signals[name]
            else:
                s.keys(ref, fw, optional=_STREAM_KEYS)
                bounds = None
                if body.get("type") == "joint" and isinstance(body.get("joint"), str) \
                        and model is not None:
                    bounds = joint_plausible(model, body["joint"],
                                             "position" if key == "qpos" else "velocity")
                mapped = _stream(ref, fw, source, spec, plausible=bounds)
                streams.append(mapped)
            taken.append((key, mapped))
        out.append((body, taken))
    return out, streams


@dataclass(frozen=True)
class _Fixed:
    """A recorded constant (a sidecar's ``q_init``): the state at the run's first row."""

    values: list[float]
    where: s.Where


def _state_values(entries: Sequence[tuple[dict[str, Any], list[tuple[str, _Mapped]]]],
                  start: int, origin: int, label: str, where: s.Where) -> list[dict[str, Any]]:
    out = []
    for body, taken in entries:
        entry = dict(body)
        for key, mapped in taken:
            if isinstance(mapped, _Fixed):
                if start != origin:
                    raise mapped.where.fail(f"{label}: a sidecar value is the state at the "
                                            f"run's first row; this window starts "
                                            f"{(start - origin) / _NS:g} s later (use the "
                                            f"logged columns)")
                entry[key] = list(mapped.values)
                continue
            times, values = mapped.stream.times_ns, mapped.stream.values
            after = int(np.searchsorted(times, start, "left"))
            if after >= times.shape[0]:
                raise where.fail(f"{label}: {mapped.stream.label} has no sample at or after "
                                 f"the window start for the initial {key}")
            if times[after] == start or after == 0:
                row = values[after]
            elif key == "quat":  # shortest-path SLERP (q and -q are one orientation)
                from ..alignment import align

                row = align(np.array([start], dtype=np.int64), times[after - 1:after + 1],
                            values[after - 1:after + 1], "linear", quaternion=True)[0]
            else:
                t0, t1 = times[after - 1], times[after]
                w = (start - t0) / (t1 - t0)
                row = (1 - w) * values[after - 1] + w * values[after]
            entry[key] = [float(v) for v in row]
        out.append(entry)
    return out


def describe_timing(episodes: Sequence[EpisodeSpec]) -> dict[str, Any] | None:
    """Input timing of several episodes merged (None: none came from a source)."""
    merged: dict[str, dict[str, Any]] = {}
    for episode in episodes:
        info = episode.source
        if not info:
            continue
        for policy, stats in info["input_timing"].items():
            acc = merged.setdefault(policy, {"samples": 0, "moved": 0, "max_shift_ns": 0,
                                             "held_at_start": 0, "held_latency_ticks": 0})
            for key in ("samples", "moved", "held_at_start"):
                acc[key] += stats[key]
            for key in ("max_shift_ns", "held_latency_ticks"):
                acc[key] = max(acc[key], stats[key])
    for stats in merged.values():
        stats["max_shift_s"] = stats["max_shift_ns"] / _NS
    return merged or None
