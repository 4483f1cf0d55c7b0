"""Trace recordings as calibration episode data: recorded inputs and reference samples.

A *recording* is a fibril_sim trace: the rosbag2/MCAP folder that ``fibril_sim run --trace DIR``
(or a ``TraceWriter`` subscribed to an instance) writes. One episode of it gives a calibration
episode

* its recorded inputs: the episode's *accepted* ingress records with their recorded
  ``commit_tick`` and ``acceptance_sequence`` (rejected inputs never reached physics, so they are
  skipped), minus the scenario initial inputs that ``SimulationPlan.create_instance`` restores
  itself at tick 0 of every episode (replaying those from the trace too would apply them twice);
* reference samples: the rows of a trace query selector (``body:<name>.position``,
  ``joint:<name>.velocity``, ``device:<id>``, ... see ``fibril_sim_core.trace.query``), stamped
  at the row's EpisodeTime.

Everything here is read once while the request is validated; the calibration core only ever sees
the resulting IngressRecords and sample arrays, as for ``recorded_inputs_file`` and
``samples_file``. The module reads traces with ``rosbags`` (pure Python) and never imports rclpy.

Errors are ``TraceError`` (the trace cannot be read), ``TraceQueryError`` (a selector is malformed
or names something the trace does not have) or ``RecordingError`` (a selector's rows do not make
a reference signal); the request loader words them as request errors naming the key path.
"""

from __future__ import annotations

import json
from collections.abc import Generator, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, TypeVar

import numpy as np

from fibril_sim_core.errors import TraceError
from fibril_sim_core.records import IngressRecord

# The trace stack (its reader, rosbags, the MCAP index) loads when a trace is opened: a request
# reading a CSV log or inline samples never imports it.
if TYPE_CHECKING:
    from types import TracebackType

    from fibril_sim_core.manifest import InputSpec
    from fibril_sim_core.trace.query import QueryResult, TraceQueryError
    from fibril_sim_core.trace.reader import TraceReader

__all__ = ["Recording", "RecordingError", "Recordings", "Series", "TraceError",
           "TraceQueryError", "without_scenario_inputs"]

# Leading columns of every query row: EpisodeTime and the episode number.
_TIME, _EPISODE = 0, 1
# A device row also carries its acquisition time; it is a timestamp, never a value column.
_ACQUISITION = "acquisition_time_ns"


class _Record(Protocol):
    """A trace record as the episode scan reads it."""

    @property
    def episode(self) -> int: ...


_R = TypeVar("_R")


def __getattr__(name: str) -> type[TraceQueryError]:
    """``TraceQueryError``, from the trace stack when first asked for (PEP 562)."""
    if name == "TraceQueryError":
        from fibril_sim_core.trace.query import TraceQueryError

        return TraceQueryError
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class RecordingError(ValueError):
    """A selector's rows of one episode cannot be used as reference samples; ``key`` is the
    key path below ``samples_from`` at fault (``("columns", 1)``; empty: the selector)."""

    def __init__(self, message: str, *key: str | int) -> None:
        super().__init__(message)
        self.key = key


@dataclass(frozen=True)
class Series:
    """One selector's samples of one episode: value ``columns``, ``times_ns`` (n,) int64 and
    ``values`` (n, len(columns)) float64."""

    selector: str
    episode: int
    columns: tuple[str, ...]
    times_ns: np.ndarray
    values: np.ndarray


class Recording:
    """One open trace: episodes, accepted inputs and selector series (memoized per selector)."""

    def __init__(self, path: Path) -> None:
        from fibril_sim_core.trace.reader import TraceReader

        self.path = path
        self._reader: TraceReader = TraceReader(path)  # raises TraceError
        self._queries: dict[str, QueryResult] = {}
        self._episodes: tuple[int, ...] | None = None
        self._first: tuple[int | None] | None = None
        self._inputs: list[IngressRecord] | None = None

    @property
    def timestep_ns(self) -> int:
        return self._reader.timestep_ns

    def close(self) -> None:
        self._reader.close()

    # ----------------------------------------------------------------- episodes
    def _streams(self) -> Iterator[Iterator[_Record]]:
        """Every record stream of the trace, the small ones first."""
        reader = self._reader
        yield iter(self.ingress_records())
        for make in (reader.snapshots, reader.frame_timings, reader.actuator_applications,
                     reader.device_outputs):
            stream = make()
            try:
                yield stream
            finally:
                if isinstance(stream, Generator):  # a stream left half-read releases its
                    stream.close()  # bag iterator

    def first_episode(self) -> int | None:
        """The episode of the trace's earliest record (None: the trace has no records).

        Each stream is in log-time order and episodes follow each other in SessionTime, so the
        first record of each stream is enough."""
        if self._first is None:
            found = [record.episode for stream in self._streams()
                     for record in _first(stream)]
            self._first = (min(found) if found else None,)
        return self._first[0]

    def has_episode(self, episode: int) -> bool:
        """Whether any record of the trace belongs to ``episode`` (stops at the first one)."""
        if self._episodes is not None:
            return episode in self._episodes
        return any(any(r.episode == episode for r in stream) for stream in self._streams())

    def episodes(self) -> tuple[int, ...]:
        """Every episode number in the trace, ascending (reads the whole trace once)."""
        if self._episodes is None:
            self._episodes = tuple(sorted({r.episode for stream in self._streams()
                                           for r in stream}))
        return self._episodes

    # ----------------------------------------------------------------- inputs
    def ingress_records(self) -> list[IngressRecord]:
        """Every ingress record of the trace (accepted and rejected), in trace order."""
        if self._inputs is None:
            self._inputs = list(self._reader.external_inputs())
        return self._inputs

    def accepted_inputs(self, episode: int) -> list[IngressRecord]:
        """The accepted ingress records of ``episode`` in trace order (rejected: skipped)."""
        return [r for r in self.ingress_records() if r.episode == episode and r.accepted]

    # ----------------------------------------------------------------- samples
    def query(self, selector: str) -> QueryResult:
        """The selector's table over every episode (raises TraceQueryError / TraceError)."""
        from fibril_sim_core.trace.query import query

        result = self._queries.get(selector)
        if result is None:
            result = query(self._reader, selector)
            self._queries[selector] = result
        return result

    def series(self, selector: str, episode: int, *,
               columns: Sequence[str | int] | None = None,
               acquisition_time: bool = False) -> Series:
        """The selector's rows of ``episode`` as reference samples.

        ``columns`` keep some value columns (names, or 0-based indices into the value columns:
        those after ``time_ns`` and ``episode``, a device's ``acquisition_time_ns`` excluded);
        default: all of them. ``acquisition_time`` stamps a ``device:`` row at its acquisition
        time instead of its delivery time. Raises RecordingError when a column is unknown, the
        episode has no rows, times do not increase strictly or a value is not finite.
        """
        result = self.query(selector)
        names = result.columns[2:]
        device = _ACQUISITION in names and selector.startswith("device:")
        time_column = names.index(_ACQUISITION) + 2 if device and acquisition_time else _TIME
        if acquisition_time and not device:
            raise RecordingError(f"selector {selector!r} has no acquisition time (only device: "
                                 f"selectors do)", "selector")
        value_positions = [i + 2 for i, name in enumerate(names)
                           if not (device and name == _ACQUISITION)]
        value_names = [result.columns[i] for i in value_positions]
        if columns is not None:
            picked = _pick(selector, value_names, columns, device)
            value_positions = [value_positions[i] for i in picked]
            value_names = [value_names[i] for i in picked]
        rows = [row for row in result.rows if row[_EPISODE] == episode]
        if not rows:
            raise RecordingError(f"selector {selector!r} has no rows in episode {episode} of "
                                 f"the trace", "selector")
        times = np.fromiter((row[time_column] for row in rows), dtype=np.int64, count=len(rows))
        values = np.array([[row[i] for i in value_positions] for row in rows],
                          dtype=np.float64).reshape(len(rows), len(value_positions))
        if device:  # delivery order; acquisition order may differ when latencies vary
            order = np.argsort(times, kind="stable")
            times, values = times[order], values[order]
        steps = np.flatnonzero(np.diff(times) <= 0)
        if steps.size:
            i = int(steps[0]) + 1
            raise RecordingError(f"selector {selector!r}: episode {episode} row {i} is stamped "
                                 f"at time_ns {int(times[i])}, not after the previous row "
                                 f"({int(times[i - 1])}); reference times must increase "
                                 f"strictly", "selector")
        if times.size and times[0] < 0:
            raise RecordingError(f"selector {selector!r}: episode {episode} has a row at "
                                 f"negative time_ns {int(times[0])}", "selector")
        bad = np.flatnonzero(~np.all(np.isfinite(values), axis=1))
        if bad.size:
            i = int(bad[0])
            raise RecordingError(f"selector {selector!r}: episode {episode} row {i} (time_ns "
                                 f"{int(times[i])}) has non-finite values "
                                 f"{values[i].tolist()}", "selector")
        return Series(selector, episode, tuple(value_names), times, values)


def _first(stream: Iterator[_R]) -> list[_R]:
    record = next(stream, None)
    return [] if record is None else [record]


def _pick(selector: str, names: Sequence[str], columns: Sequence[str | int],
          device: bool) -> list[int]:
    listed = ", ".join(names) or "none"
    if not columns:
        raise RecordingError(f"expected at least one column of selector {selector!r} "
                             f"(value columns: {listed})", "columns")
    out: list[int] = []
    for n, column in enumerate(columns):
        if isinstance(column, bool) or not isinstance(column, (str, int)):
            raise RecordingError(f"expected a column name or index, got {column!r}",
                                 "columns", n)
        if isinstance(column, str):
            if column not in names:
                extra = (" (acquisition_time_ns is a timestamp; stamp rows with it through "
                         "the observation's timestamp: acquisition)"
                         if device and column == _ACQUISITION else "")
                raise RecordingError(f"selector {selector!r} has no value column {column!r}; "
                                     f"value columns: {listed}{extra}", "columns", n)
            index = names.index(column)
        else:
            if not 0 <= column < len(names):
                raise RecordingError(f"index {column} is out of range: selector {selector!r} "
                                     f"has {len(names)} value column(s) ({listed}), indices "
                                     f"0..{len(names) - 1}", "columns", n)
            index = column
        if index in out:
            raise RecordingError(f"column {names[index]!r} is selected twice", "columns", n)
        out.append(index)
    return out


def without_scenario_inputs(records: Sequence[IngressRecord],
                            initial_inputs: Sequence[InputSpec]) -> list[IngressRecord]:
    """Drop the records that are the scenario's initial inputs restored at tick 0.

    The lifecycle commits scenario input ``n`` at tick 0 with acceptance sequence ``n``; a record
    with that tick, acceptance, source, sequence, payload type and payload is that input.
    """
    if not initial_inputs:
        return list(records)
    expected = {n: spec for n, spec in enumerate(initial_inputs)}
    out: list[IngressRecord] = []
    for record in records:
        spec = expected.get(record.acceptance_sequence) if record.commit_tick == 0 else None
        if spec is not None and _same_input(record, spec):
            del expected[record.acceptance_sequence]
            continue
        out.append(record)
    return out


def _same_input(record: IngressRecord, spec: InputSpec) -> bool:
    if (record.source_id, record.source_sequence, record.payload_type) != \
            (spec.source_id, spec.source_sequence, spec.payload_type):
        return False
    try:
        payload = json.loads(record.payload_json)
    except ValueError:
        return False
    return isinstance(payload, Mapping) and payload == dict(spec.payload)


class Recordings:
    """Open recordings by resolved path, shared by every episode of one request (a context
    manager: closing it closes every trace)."""

    def __init__(self) -> None:
        self._open: dict[Path, Recording] = {}

    def get(self, path: Path) -> Recording:
        """The recording at ``path`` (opened once; raises TraceError)."""
        key = path.resolve()
        recording = self._open.get(key)
        if recording is None:
            recording = Recording(key)
            self._open[key] = recording
        return recording

    def __iter__(self) -> Iterator[Recording]:
        return iter(self._open.values())

    def close(self) -> None:
        for recording in self._open.values():
            recording.close()
        self._open.clear()

    def __enter__(self) -> Recordings:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
