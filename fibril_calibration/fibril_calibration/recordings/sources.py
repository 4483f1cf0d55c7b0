"""Episode sources: what robots record, read as timestamped value streams.

A *source* is one recorded file: a rosbag2 folder (MCAP or sqlite3 storage), a raw ``.mcap``
or ``.db3`` file with ROS 2 schemas, or a CSV log with a header row. Calibration maps some of
its topics or columns to recorded inputs and reference signals (``mapping``); this module only
reads them:

* ``BagSource.stream(topic, field)`` (``bag_source``): every message of ``topic`` decoded with
  rosbags (the bag's own embedded definitions first, then the ROS 2 base types and
  fibril_msgs), ``field`` a path such as ``position[panda_joint3]`` (an array element named through the message's ``name``
  list, as sensor_msgs/JointState carries it), ``angular_velocity`` (a Vector3: x, y, z),
  ``pose.pose.orientation`` (a Quaternion: converted to the w, x, y, z the calibration uses) or
  ``data`` (std_msgs/Float64). Times are the bag's log time or the message's ``header.stamp``.
* ``CsvSource.stream(columns)``: columns by name; the time column is named by the request
  (``t_s`` in seconds, ``time_ns`` in nanoseconds, or any column with a declared unit).

Streams are in record order and never altered: a recording whose time goes backwards, that
holds NaN values, a missing topic or column, a field the message type does not have, all raise
``SourceError`` naming the file, topic or column and the time; nothing is guessed.

Every source describes itself (``describe() -> SourceInfo``: format, reader, warnings, what a
Franka sidecar adds) and takes the common calls (``prefetch``, ``check_window``,
``sidecar_value``) with plain defaults, so that callers never probe for attributes.

Decoded messages are kept per topic (one decode per message however many fields are used), and
the package never imports rclpy: rosbags reads bags without ROS.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import SupportsInt

import numpy as np

from .._json import JsonObject
from ..errors import LISTING_LIMIT
from .csv_columns import CsvProblem, read_cell, read_columns, read_layout
from .csv_layout import TIME_NAMES, ambiguous_time, guess_time_column, time_candidates

__all__ = [
    "MAX_VALUE",
    "SOURCE_FORMATS",
    "TIME_UNITS",
    "CsvSource",
    "Source",
    "SourceError",
    "SourceInfo",
    "Stream",
]

SOURCE_FORMATS = ("rosbag2", "mcap", "sqlite3", "csv", "franka_sysid", "franka_target")
TIME_UNITS = {"s": 1_000_000_000, "ms": 1_000_000, "us": 1_000, "ns": 1}
# Time column names whose unit is implied by the name.
_IMPLIED_UNITS = {"t_s": "s", "time_s": "s", "time_ms": "ms", "time_us": "us", "time_ns": "ns"}
MOTOR_COMMAND = "fibril_msgs/msg/MotorCommand"
# No sensor reading or command of a robot reaches this in its own units: a larger value is a
# corrupt log (it would overflow squared residuals or make the simulation unstable).
MAX_VALUE = 1e12
MOTOR_MODES = ("duty", "voltage", "torque", "velocity", "position")  # MotorCommand.MODE_* order


def listing(names: Sequence[str], what: str, path: Path, extra: str = "") -> str:
    """``its topics: a, b`` or, for a list too long for a one-line error, ``its 180 topics
    (list them: fibril_sim recording info PATH)``: never a list cut off mid-way."""
    text = ", ".join(names) or "none"
    if len(text) <= LISTING_LIMIT:
        return f"its {what}: {text}"
    return (f"its {len(names)} {what} (list them: fibril_sim recording info {str(path)!r}"
            f"{extra})")



class SourceError(ValueError):
    """A recording cannot give the requested stream; the message names file, topic/column and
    time. It is one line: a reader's multi-line reason (sqlite's) is joined with '; '."""

    def __init__(self, message: str) -> None:
        lines = [line.strip() for line in str(message).splitlines() if line.strip()]
        super().__init__("; ".join(lines))


@dataclass(frozen=True)
class Stream:
    """Timestamped values of one topic field or set of columns, in record order.

    ``times_ns`` (n,) int64 in the source's own time base (epoch ns for a bag, the time column
    for a CSV); ``values`` (n, k) float64; ``components`` names the k columns; ``label`` words
    the stream in errors ("file 'x.mcap' topic '/joint_states' field 'position[j1]'")."""

    label: str
    times_ns: np.ndarray
    values: np.ndarray
    components: tuple[str, ...]
    modes: tuple[str, ...] | None = None  # per row: a fibril_msgs/MotorCommand's mode
    origin_ns: int | None = None  # the recording's start (None: the stream's first time)
    first_line: int = 0  # a CSV log: the file's line of row 0 (0: a bag, messages counted)
    rows: np.ndarray | None = None  # each sample's row in the file (None: sample k is row k)
    offset_ns: int = 0  # added to the file's times (a source's ``offset``): stamps subtract it

    def __len__(self) -> int:
        return int(self.times_ns.shape[0])

    def index(self, k: int) -> str:
        """Sample ``k``'s line (CSV: ``line 57``) or message (bag: ``message 55``)."""
        row = int(self.rows[k]) if self.rows is not None else int(k)
        return f"line {row + self.first_line}" if self.first_line else f"message {row}"

    def place(self, k: int) -> str:
        """Where sample ``k`` is in the file: ``line 57`` (CSV) or ``message 55 at 0.12 s
        into the recording (stamp ...)`` (bag)."""
        if self.first_line:
            return self.index(k)
        origin = self.origin_ns if self.origin_ns is not None else int(self.times_ns[0])
        return f"{self.index(k)} at {self.when(self.times_ns[k], origin)}"

    def when(self, time_ns: SupportsInt, origin_ns: int | None) -> str:
        """``when`` of a time on this stream's time base: the stamp is the file's own."""
        return when(time_ns, origin_ns, offset_ns=self.offset_ns)

    def span(self, first_ns: SupportsInt, last_ns: SupportsInt, origin_ns: int) -> str:
        """``span`` of two times on this stream's time base: the stamps are the file's own."""
        return span(first_ns, last_ns, origin_ns, offset_ns=self.offset_ns)


@dataclass(frozen=True)
class SourceInfo:
    """What an opened recording says about itself: what an episode's summary records and
    what the mapping may ask of it. ``ring_log`` / ``ring_targets`` are a franka_sysid run's
    reports (JSON documents for the result)."""

    path: Path
    format: str
    tabular: bool  # columns (a CSV log), not topics
    reader: str | None = None  # the library that read a bag (rosbags, rosbag2_py)
    reader_fallback: str | None = None  # reader: auto fell back to rosbags, and why
    warnings: tuple[str, ...] = ()  # what the storage could not vouch for
    sidecar: bool = False  # sidecar values (``sidecar_value``): a franka_sysid run
    controller: str | None = None  # franka: the sidecar's controller kind
    ring_log: JsonObject | None = None
    ring_targets: JsonObject | None = None



class Source:
    """Common interface of the recording readers."""

    path: Path
    format: str
    tabular = False  # columns (a CSV log), not topics

    def describe(self) -> SourceInfo:
        return SourceInfo(self.path, self.format, self.tabular)

    def stream(self, *, topic: str | None = None, field: str | None = None,
               columns: Sequence[str] | None = None, time: str | None = None,
               message_type: str | None = None, check_values: bool = True) -> Stream:
        raise NotImplementedError

    def prefetch(self, names: Sequence[str]) -> None:
        """Read these topics or columns in one pass (a reader that reads on demand: nothing)."""

    def check_window(self, start_ns: int, end_ns: int) -> str | None:
        """Why the recording cannot give a window (None: it can)."""
        return None

    def sidecar_value(self, key: str, index: int | None) -> list[float]:
        """A value of the recording's sidecar (only a franka_sysid run has one)."""
        raise SourceError(f"{str(self.path)!r} has no sidecar (only the franka_sysid format "
                          f"does)")

    def close(self) -> None:
        """Release the file (the decoded data stays usable)."""



class CsvSource(Source):
    """A CSV log with a header row; columns are read on demand (``prefetch`` several in one
    pass), in chunks with numpy's typed parser (``csv_columns``): only the columns a request
    maps are held, never the file's rows."""

    format = "csv"
    tabular = True

    def __init__(self, path: Path, time_column: str | None, time_unit: str | None, *,
                 header: bool | None = None,
                 columns: Sequence[str] | Mapping[int, str] | None = None,
                 delimiter: str | None = None) -> None:
        self.path = path
        label = f"recording {str(path)!r}"
        try:
            self._layout = read_layout(path, label, header=header, columns=columns,
                                       delimiter=delimiter)
        except OSError as exc:
            raise SourceError(f"cannot read {label}: {exc.strerror or exc}") from None
        except CsvProblem as exc:
            raise SourceError(str(exc)) from None
        self.header = list(self._layout.header)
        self._index = {name: i for i, name in enumerate(self.header)}
        if len(self._index) != len(self.header):
            seen: set[str] = set()
            twice = next(n for n in self.header if n in seen or _add(seen, n))
            raise SourceError(f"{label}: column {twice!r} appears twice in the header")
        if not self._layout.rows:
            raise SourceError(f"{label} has a header but no rows")
        self._columns: dict[str, np.ndarray] = {}
        self.first_line = self._layout.first_line  # the file's line of data row 0
        if time_column is None:
            time_column, implied = guess_time_column(self.header)
            found = time_candidates(self.header)
            if len(found) > 1:
                raise SourceError(f"{label}: its time column is ambiguous: "
                                  f"{ambiguous_time(found)}; pick one with time_column: (on "
                                  f"the source)")
            if time_column is None:
                raise SourceError(f"{label}: name its time column (time_column: ...; found "
                                  f"without it only when exactly one column is called "
                                  f"{', '.join(TIME_NAMES)})")
            if time_unit is None and implied is None:
                time_unit = self._unit_from_size(time_column)
        if time_column not in self._index:
            raise SourceError(f"{label} has no time column {time_column!r}; "
                              f"{listing(self.header, 'columns', path)}")
        unit = time_unit or _IMPLIED_UNITS.get(time_column)
        if unit is None:
            raise SourceError(f"{label}: time column {time_column!r} needs a time_unit (one of "
                              f"{', '.join(TIME_UNITS)})")
        if unit not in TIME_UNITS:
            raise SourceError(f"{label}: unknown time_unit {unit!r}; expected one of "
                              f"{', '.join(TIME_UNITS)}")
        self.time_column = time_column
        self._unit = unit
        self._times: np.ndarray | None = None

    def _unit_from_size(self, name: str) -> str:
        """A ``time`` / ``timestamp`` column's unit from its first value's integer digits: 19
        (ns since the epoch), 16 (us), 13 (ms), otherwise seconds."""
        text = self.cell(0, name).strip().lstrip("+-")
        digits = len(text.split(".")[0].split("e")[0].split("E")[0])
        return "ns" if digits >= 18 else "us" if digits >= 15 else "ms" if digits >= 12 \
            else "s"

    @property
    def rows(self) -> int:
        return self._layout.rows

    @property
    def times_ns(self) -> np.ndarray:
        """The time column in int64 ns (read with the first columns asked for)."""
        if self._times is None:
            self.prefetch([])
        assert self._times is not None
        return self._times

    @times_ns.setter
    def times_ns(self, value: np.ndarray) -> None:  # a format with its own clock (franka)
        self._times = value

    def cell(self, row: int, name: str) -> str:
        """The text of data row ``row`` (0-based) in column ``name``, for error messages."""
        return read_cell(self._layout, row, name)

    def prefetch(self, names: Sequence[str]) -> None:
        """Read the named columns (those in the header, not read yet) and the time column in
        one pass over the file."""
        wanted = [n for n in dict.fromkeys(names) if n in self._index and n not in self._columns]
        exact = self.time_column if self._unit == "ns" else None
        if self._times is None:
            wanted.append(self.time_column)
        if not wanted:
            return
        try:
            read = read_columns(self._layout, wanted, exact_ns=exact)
        except OSError as exc:
            raise SourceError(f"cannot read recording {str(self.path)!r}: "
                              f"{exc.strerror or exc}") from None
        except CsvProblem as exc:
            raise SourceError(str(exc)) from None
        if self._times is None:
            raw = read.pop(self.time_column)
            if exact is None:
                self._columns[self.time_column] = raw
            self._times = self._to_ns(raw)
        for name, values in read.items():
            self._columns.setdefault(name, values)

    def _to_ns(self, raw: np.ndarray) -> np.ndarray:
        """int64 ns of the time column; a time that is not finite or beyond 64-bit ns (292
        years) is refused with its line."""
        label = f"recording {str(self.path)!r} column {self.time_column!r}"
        if raw.dtype == np.int64:
            times = raw
        else:
            scale = TIME_UNITS[self._unit]
            limit = 2.0 ** 63 - 1024
            with np.errstate(over="ignore", invalid="ignore"):  # checked just below
                scaled = raw * scale  # one temporary, rounded in place: a long log's memory
                bad = np.flatnonzero(~((scaled < limit) & (scaled > -limit)))
            if bad.size:
                n = int(bad[0])
                text = self.cell(n, self.time_column)
                reason = ("has no time" if not np.isfinite(raw[n]) else
                          "has a time beyond 64-bit nanoseconds (292 years)")
                raise SourceError(f"{label}: line {n + self.first_line} {reason} ({text!r})")
            times = np.rint(scaled, out=scaled).astype(np.int64)
            del scaled
        check_times(times, label, lines=self.first_line)
        return times

    def column(self, name: str) -> np.ndarray:
        values = self._columns.get(name)
        if values is None:
            if name not in self._index:
                raise SourceError(f"recording {str(self.path)!r} has no column {name!r}; "
                                  f"{listing(self.header, 'columns', self.path)}")
            if name == self.time_column and self._unit == "ns":
                values = self.times_ns.astype(np.float64)
                self._columns[name] = values
                return values
            self.prefetch([name])
            values = self._columns[name]
        return values

    def stream(self, *, topic: str | None = None, field: str | None = None,
               columns: Sequence[str] | None = None, time: str | None = None,
               message_type: str | None = None, check_values: bool = True) -> Stream:
        if topic is not None or field is not None or not columns:
            raise SourceError(f"recording {str(self.path)!r} is a CSV log: name columns, not a "
                              f"topic or field")
        self.prefetch(columns)
        values = np.column_stack([self.column(c) for c in columns])
        label = f"recording {str(self.path)!r} column{'s' if len(columns) > 1 else ''} " + \
            ", ".join(repr(c) for c in columns)
        stream = Stream(label, self.times_ns, values, tuple(columns),
                        first_line=self.first_line)
        check_stream(stream, lines=self.first_line, values=check_values)
        return stream


def _add(seen: set[str], name: str) -> bool:
    seen.add(name)
    return False


# --------------------------------------------------------------------------- checks

def when(time_ns: SupportsInt, origin_ns: int | None, *, offset_ns: int = 0) -> str:
    """A time in an error: seconds into the recording, the absolute stamp in parentheses
    (``2.5 s into the recording (stamp 1700000002.500000000 s)``). A time moved by a source's
    ``offset_ns`` (onto an episode's time base) shows the file's own stamp, ``time - offset``,
    which is what the user finds in the file."""
    t = int(time_ns)
    origin = t if origin_ns is None else int(origin_ns)
    return f"{(t - origin) / 1e9:.9g} s into the recording (stamp {_stamp(t - offset_ns)} s)"


def span(first_ns: SupportsInt, last_ns: SupportsInt, origin_ns: int, *,
         offset_ns: int = 0) -> str:
    """Two times in an error, as ``when`` gives one: ``0.3 s to 1.5 s into the recording
    (stamps 1700000000.300000000 s to 1700000001.500000000 s)``."""
    first, last = int(first_ns), int(last_ns)
    return (f"{(first - origin_ns) / 1e9:.9g} s to {(last - origin_ns) / 1e9:.9g} s into the "
            f"recording (stamps {_stamp(first - offset_ns)} s to {_stamp(last - offset_ns)} s)")


def _stamp(time_ns: int) -> str:
    sign = "-" if time_ns < 0 else ""
    sec, nsec = divmod(abs(time_ns), 1_000_000_000)
    return f"{sign}{sec}.{nsec:09d}"


def check_times(times: np.ndarray, label: str, *, lines: int = 0,
                origin_ns: int | None = None) -> None:
    """Times must not go backwards (equal neighbours are allowed here: a command topic may
    carry two messages at one time; reference signals check strict order themselves)."""
    back = np.flatnonzero(np.diff(times) < 0)
    if back.size:
        i = int(back[0]) + 1
        where = f" line {i + lines}" if lines else f" message {i}"
        origin = int(times[0]) if origin_ns is None else origin_ns
        raise SourceError(f"{label}: time goes backwards at{where} {when(times[i], origin)}, "
                          f"after {when(times[i - 1], origin)}")


def check_stream(stream: Stream, *, lines: int = 0, values: bool = True) -> None:
    """No backwards time, no NaN rows (the count and the first time are named), no value
    beyond ``MAX_VALUE`` (the column and line of a CSV log, the message of a bag)."""
    origin = stream.origin_ns
    if origin is None and len(stream):
        origin = int(stream.times_ns[0])
    check_times(stream.times_ns, stream.label, lines=lines, origin_ns=origin)
    if not values:  # the caller sorts out bad values itself (mapping's on_invalid)
        return
    data = stream.values
    bad = ~np.all(np.isfinite(data), axis=1)
    if bad.any():
        first = int(np.flatnonzero(bad)[0])
        where = f" (line {first + lines})" if lines else f" (message {first})"
        raise SourceError(f"{stream.label}: {int(bad.sum())} row(s) with NaN or infinite "
                          f"values, the first at {when(stream.times_ns[first], origin)}"
                          f"{where}")
    huge = (data > MAX_VALUE) | (data < -MAX_VALUE)  # no |values| copy of a large log
    if huge.any():
        row, col = (int(i) for i in np.argwhere(huge)[0])
        where = (f"column {stream.components[col]!r} line {row + lines}" if lines else
                 f"{stream.components[col]!r} of message {row} at "
                 f"{when(stream.times_ns[row], origin)}")
        raise SourceError(f"{stream.label}: {where}: {float(data[row, col])!r} cannot be a "
                          f"recorded value (beyond {MAX_VALUE:g}; {int(huge.sum())} such "
                          f"value(s))")
