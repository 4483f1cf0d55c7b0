"""Episode sources: what robots record, read as timestamped value streams.

A *source* is one recorded file: a rosbag2 folder (MCAP or sqlite3 storage), a raw ``.mcap``
or ``.db3`` file with ROS 2 schemas, or a CSV log with a header row. Calibration maps some of
its topics or columns to recorded inputs and reference signals (``mapping``); this module only
reads them:

* ``BagSource.stream(topic, field)``: every message of ``topic`` decoded with rosbags (the bag's
  own embedded definitions first, then the ROS 2 base types and fibril_msgs), ``field`` a path
  such as ``position[panda_joint3]`` (an array element named through the message's ``name``
  list, as sensor_msgs/JointState carries it), ``angular_velocity`` (a Vector3: x, y, z),
  ``pose.pose.orientation`` (a Quaternion: converted to the w, x, y, z the calibration uses) or
  ``data`` (std_msgs/Float64). Times are the bag's log time or the message's ``header.stamp``.
* ``CsvSource.stream(columns)``: columns by name; the time column is named by the request
  (``t_s`` in seconds, ``time_ns`` in nanoseconds, or any column with a declared unit).

Streams are in record order and never altered: a recording whose time goes backwards, that
holds NaN values, a missing topic or column, a field the message type does not have, all raise
``SourceError`` naming the file, topic or column and the time; nothing is guessed.

Decoded messages are kept per topic (one decode per message however many fields are used), and
the module never imports rclpy: rosbags reads bags without ROS.
"""

from __future__ import annotations

import csv
import re
import sqlite3
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "MAX_VALUE",
    "SOURCE_FORMATS",
    "TIME_UNITS",
    "BagSource",
    "CsvSource",
    "Source",
    "SourceError",
    "Stream",
]

SOURCE_FORMATS = ("rosbag2", "mcap", "sqlite3", "csv", "franka_sysid")
TIME_UNITS = {"s": 1_000_000_000, "ms": 1_000_000, "us": 1_000, "ns": 1}
# Time column names whose unit is implied by the name.
_IMPLIED_UNITS = {"t_s": "s", "time_s": "s", "time_ms": "ms", "time_us": "us", "time_ns": "ns"}
MOTOR_COMMAND = "fibril_msgs/msg/MotorCommand"
# No sensor reading or command of a robot reaches this in its own units: a larger value is a
# corrupt log (it would overflow squared residuals or make the simulation unstable).
MAX_VALUE = 1e12
MOTOR_MODES = ("duty", "voltage", "torque", "velocity", "position")  # MotorCommand.MODE_* order


def _errors() -> tuple[tuple[type[BaseException], ...], ...]:
    from rosbags.rosbag2 import ReaderError
    from rosbags.serde import SerdeError
    from rosbags.typesys import TypesysError

    reading: tuple[type[BaseException], ...] = (ReaderError, OSError, ValueError, KeyError,
                                                EOFError, OverflowError, sqlite3.Error)
    try:  # rosbags reads sqlite3 storage with apsw: a damaged database raises its errors
        import apsw

        reading += (apsw.Error,)
    except ImportError:
        pass
    decoding = (SerdeError, ValueError, IndexError, KeyError, struct.error, TypeError)
    return reading, decoding, (TypesysError, ValueError, KeyError, IndexError)


# What rosbags raises for an unreadable bag, undecodable bytes, a bad embedded definition.
_READ_ERRORS, _DECODE_ERRORS, _TYPE_ERRORS = _errors()


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

    def __len__(self) -> int:
        return int(self.times_ns.shape[0])


class Source:
    """Common interface of the recording readers."""

    path: Path
    format: str
    tabular = False  # columns (a CSV log), not topics

    def stream(self, *, topic: str | None = None, field: str | None = None,
               columns: Sequence[str] | None = None, time: str | None = None,
               message_type: str | None = None) -> Stream:
        raise NotImplementedError

    def close(self) -> None:
        """Release the file (the decoded data stays usable)."""


# --------------------------------------------------------------------------- bags

class BagSource(Source):
    """A rosbag2 folder or a raw MCAP / sqlite3 storage file, decoded with rosbags.

    The messages of the topics a request names are read in one pass (``prefetch``) and kept
    as recorded bytes; they are decoded per topic when a stream needs them. A
    sensor_msgs/JointState topic whose messages all have the same layout (same names, same
    array sizes: the usual joint log) is decoded column-wise with numpy straight from the CDR
    bytes, the layout taken from the first message; any other topic goes through rosbags'
    deserializer message by message."""

    def __init__(self, path: Path, format: str, time: str = "log", *,
                 reader: str = "rosbags", auto: bool = False) -> None:
        self.path = path
        self.format = format
        self.time = time
        self.reader = reader  # the library that reads the bytes: rosbags or rosbag2_py
        # reader: auto chose rosbag2_py; it falls back to rosbags (and says why here) when
        # rosbag2_py cannot open the bag or read / decode a topic the request maps.
        self.auto = auto and reader == "rosbag2_py"
        self.reader_fallback: str | None = None
        try:
            if reader == "rosbag2_py":
                from .bag_readers import Rosbag2PyReader

                self._reader = Rosbag2PyReader(path, format)
            else:
                self._reader = self._rosbags_reader()
            self._reader.open()
        except _READ_ERRORS as exc:
            if not self.auto:
                raise SourceError(f"cannot read recording {str(path)!r}: {exc}") from None
            self._fall_back(f"rosbag2_py could not open it ({exc})", opened=False)
        self._open = True
        self._index_connections()
        # What the storage's own redundancy could not vouch for (said in the result, stderr).
        self.warnings: tuple[str, ...] = self._check_storage()
        self._typestore: Any = None
        self._raw: dict[str, tuple[np.ndarray, list[bytes]]] = {}
        self._messages: dict[str, list[Any]] = {}
        self._joints: dict[str, _JointTable | None] = {}

    def _storage_files(self) -> list[Path]:
        if self.format != "rosbag2":
            return [self.path]
        listed = getattr(self._reader, "paths", None)
        return list(listed) if listed else sorted(p for p in self.path.iterdir() if p.is_file()
                                                  and p.suffix in (".mcap", ".db3"))

    def _check_storage(self) -> tuple[str, ...]:
        """Check each storage file before its messages are read (``mcap_integrity``, sqlite's
        quick_check); damage is a SourceError, what cannot be checked a warning."""
        from .mcap_integrity import McapDamage, check_mcap

        label = f"recording {str(self.path)!r}"
        warnings: list[str] = []
        for file in self._storage_files():
            where = label if file == self.path else f"{label} file {file.name!r}"
            if file.suffix == ".mcap" or (file == self.path and self.format == "mcap"):
                try:
                    found = check_mcap(file)
                except McapDamage as exc:
                    raise SourceError(f"{where} is damaged: {exc}") from None
                except OSError as exc:
                    raise SourceError(f"cannot read {where}: {exc.strerror or exc}") from None
                warnings.extend(f"{where}: {w}" for w in found.warnings)
            elif file.suffix == ".db3" or self.format == "sqlite3":
                warnings.extend(f"{where}: {w}" for w in _check_sqlite3(file, where))
        return tuple(dict.fromkeys(warnings))

    def _rosbags_reader(self) -> Any:
        from rosbags.rosbag2 import Reader

        return Reader(self.path) if self.format == "rosbag2" else _storage_reader(self.path)

    def _index_connections(self) -> None:
        self._connections: dict[str, list[Any]] = {}
        for connection in self._reader.connections:
            self._connections.setdefault(connection.topic, []).append(connection)

    def _fall_back(self, reason: str, *, opened: bool = True) -> None:
        """reader: auto: read the bag with rosbags instead of rosbag2_py (bytes already read
        stay: they are the same CDR either way)."""
        if opened:
            self._reader.close()
        try:
            self._reader = self._rosbags_reader()
            self._reader.open()
        except _READ_ERRORS as exc:
            raise SourceError(f"cannot read recording {str(self.path)!r}: {reason}; rosbags "
                              f"neither: {exc}") from None
        self.reader = "rosbags"
        self.reader_fallback = f"auto: {reason}; read with rosbags"
        self._typestore = None
        if opened:
            self._index_connections()

    def _rosbag2_py_problem(self, topics: Sequence[str]) -> str | None:
        """Why rosbag2_py cannot give these topics: a serialization other than CDR, or a
        message type outside the known types (its API gives no embedded definitions)."""
        from fibril_sim_core.trace._msgtypes import typestore

        known = typestore().fielddefs
        for topic in topics:
            for connection in self._connections[topic]:
                fmt = getattr(connection, "serialization_format", "cdr") or "cdr"
                if fmt != "cdr":
                    return f"topic {topic!r} is serialized as {fmt!r}, not cdr"
                if connection.msgtype not in known:
                    return (f"topic {topic!r} carries {connection.msgtype}, which is not a known "
                            f"type (ROS 2 base types, fibril_msgs) and rosbag2_py gives no "
                            f"embedded definitions")
        return None

    @property
    def topics(self) -> dict[str, str]:
        """Topic → message type."""
        return {topic: found[0].msgtype for topic, found in self._connections.items()}

    def message_type(self, topic: str) -> str:
        found = self._connections.get(topic)
        if not found:
            listed = ", ".join(sorted(self._connections)) or "none"
            raise SourceError(f"recording {str(self.path)!r} has no topic {topic!r}; its "
                              f"topics: {listed}")
        types = sorted({c.msgtype for c in found})
        if len(types) > 1:
            raise SourceError(f"recording {str(self.path)!r} topic {topic!r} has several "
                              f"message types ({', '.join(types)})")
        return types[0]

    def prefetch(self, topics: Sequence[str]) -> None:
        """Read the given topics (those not read yet) in one pass over the bag; a topic the
        bag does not have is left for ``stream`` to report."""
        wanted = [t for t in dict.fromkeys(topics)
                  if t not in self._raw and t in self._connections]
        if not wanted:
            return
        for topic in wanted:
            self.message_type(topic)  # one type per topic
        if not self._open:
            raise SourceError(f"recording {str(self.path)!r} is closed")
        if self.reader == "rosbag2_py":  # checked for the topics read, not the whole bag
            problem = self._rosbag2_py_problem(wanted)
            if problem is not None and self.auto:
                self._fall_back(f"rosbag2_py cannot read it: {problem}")
            elif problem is not None:
                raise SourceError(f"recording {str(self.path)!r} (reader rosbag2_py): "
                                  f"{problem}; use reader: rosbags or auto")
        connections = [c for t in wanted for c in self._connections[t]]
        owner = {c.id: c.topic for c in connections}
        times: dict[str, list[int]] = {t: [] for t in wanted}
        raws: dict[str, list[bytes]] = {t: [] for t in wanted}
        try:
            for connection, timestamp, raw in self._reader.messages(connections=connections):
                topic = owner[connection.id]
                times[topic].append(timestamp)
                raws[topic].append(raw)
        except _READ_ERRORS as exc:
            raise SourceError(f"cannot read recording {str(self.path)!r}: "
                              f"{exc or type(exc).__name__}") from None
        for name in wanted:
            declared = sum(getattr(c, "msgcount", 0) or 0 for c in self._connections[name])
            if self.format == "rosbag2" and declared and declared != len(raws[name]):
                raise SourceError(f"recording {str(self.path)!r} topic {name!r}: "
                                  f"metadata.yaml counts {declared} message(s), the storage "
                                  f"holds {len(raws[name])} (a damaged or cut bag)")
            self._raw[name] = (np.array(times[name], dtype=np.int64), raws[name])

    def _recorded(self, topic: str) -> tuple[np.ndarray, list[bytes]]:
        if topic not in self._raw:
            self.prefetch([topic])
        return self._raw[topic]

    def messages(self, topic: str) -> tuple[np.ndarray, list[Any]]:
        """Log times (int64 ns) and decoded messages of ``topic``, in log order (cached)."""
        times, raws = self._recorded(topic)
        decoded = self._messages.get(topic)
        if decoded is None:
            msgtype = self.message_type(topic)
            if self._typestore is None:
                self._typestore = _bag_typestore(self._reader.connections)
            deserialize = self._typestore.deserialize_cdr
            decoded = []
            try:
                for raw in raws:
                    decoded.append(deserialize(raw, msgtype))
            except _DECODE_ERRORS as exc:
                index = len(decoded)
                at = int(times[index])
                raise SourceError(f"recording {str(self.path)!r} topic {topic!r}: cannot "
                                  f"decode message {index} of the topic ({msgtype}) at "
                                  f"{self._since_start(at)} (log time {_t(at)}): "
                                  f"{exc}") from None
            self._messages[topic] = decoded
        return times, decoded

    def _since_start(self, time_ns: int) -> str:
        """``12.345 s after the recording's start`` (the bag's start time, or its earliest
        message read)."""
        start = getattr(self._reader, "start_time", None)
        if not isinstance(start, int) or start > time_ns:
            firsts = [int(t[0]) for t, _ in self._raw.values() if len(t)]
            start = min(firsts, default=time_ns)
        return f"{(time_ns - start) / 1e9:.9g} s after the recording's start"

    def _joint_table(self, topic: str, msgtype: str) -> _JointTable | None:
        if topic not in self._joints:
            table = None
            if _short(msgtype) == "sensor_msgs/JointState":
                table = _joint_columns(self._recorded(topic)[1])
            self._joints[topic] = table
        return self._joints[topic]

    def stream(self, *, topic: str | None = None, field: str | None = None,
               columns: Sequence[str] | None = None, time: str | None = None,
               message_type: str | None = None) -> Stream:
        if topic is None or columns is not None:
            raise SourceError(f"recording {str(self.path)!r} is a bag: name a topic (and a "
                              f"field), not columns")
        msgtype = self.message_type(topic)
        if message_type is not None and _short(message_type) != _short(msgtype):
            raise SourceError(f"recording {str(self.path)!r} topic {topic!r} carries "
                              f"{msgtype}, not {message_type}")
        time = time or self.time
        if time not in ("log", "header"):
            raise SourceError(f"recording {str(self.path)!r} topic {topic!r}: unknown time "
                              f"{time!r}; expected log or header")
        label = f"recording {str(self.path)!r} topic {topic!r}"
        log_times, raws = self._recorded(topic)
        if not raws:
            raise SourceError(f"{label} has no messages")
        if field is None and _short(msgtype) != _short(MOTOR_COMMAND):
            raise SourceError(f"{label} ({msgtype}): name a field (e.g. data, "
                              f"position[joint_name], pose.pose.orientation)")
        table = self._joint_table(topic, msgtype)
        picked = table.pick(field) if table is not None and field is not None else None
        if picked is not None:
            times = table.header_ns if time == "header" else log_times  # type: ignore[union-attr]
            stream = Stream(f"{label} field {field!r}", times, picked[0], picked[1])
            check_stream(stream)
            return stream
        _, messages = self.messages(topic)
        if time == "header":
            stamps = []
            for message in messages:
                header = getattr(message, "header", None)
                if header is None:
                    raise SourceError(f"{label} ({msgtype}) has no header; use time: log")
                stamps.append(header.stamp.sec * 1_000_000_000 + header.stamp.nanosec)
            times = np.array(stamps, dtype=np.int64)
        else:
            times = log_times
        if field is None:  # a MotorCommand: the mode rides along
            modes = []
            for n, message in enumerate(messages):
                mode = int(message.mode)
                if not 0 <= mode < len(MOTOR_MODES):
                    raise SourceError(f"{label}: MotorCommand at time {_t(times[n])} has mode "
                                      f"{mode}; expected 0..{len(MOTOR_MODES) - 1}")
                modes.append(MOTOR_MODES[mode])
            values = np.fromiter((m.value for m in messages), dtype=np.float64,
                                 count=len(messages)).reshape(-1, 1)
            stream = Stream(label, times, values, ("value",), tuple(modes))
        else:
            label += f" field {field!r}"
            extract, components = _accessor(field, messages[0], msgtype, label)
            rows: list[Any] = []
            try:
                for message in messages:
                    rows.append(extract(message))
            except _FieldError as exc:
                n = len(rows)
                raise SourceError(f"{label}: message at time {_t(times[n])}: {exc}") from None
            values = np.array(rows, dtype=np.float64).reshape(len(rows), len(components))
            stream = Stream(label, times, values, components)
        check_stream(stream)
        return stream

    def close(self) -> None:
        if self._open:
            self._reader.close()
            self._open = False


@dataclass(frozen=True)
class _JointTable:
    """A JointState topic decoded column-wise: header stamps, names and (n, k) arrays."""

    header_ns: np.ndarray
    names: tuple[str, ...]
    arrays: dict[str, np.ndarray]

    def pick(self, field: str) -> tuple[np.ndarray, tuple[str, ...]] | None:
        """``position``, ``velocity[j]``, ``effort[2]``; None: another field (or a name the
        log does not have: the general path words the error)."""
        match = re.fullmatch(r"\s*(position|velocity|effort)\s*(?:\[([^\]]+)\])?\s*", field)
        if match is None:
            return None
        array = self.arrays[match.group(1)]
        index = match.group(2)
        if index is None:
            return array, tuple(f"{match.group(1)}[{i}]" for i in range(array.shape[1]))
        if re.fullmatch(r"-?\d+", index):
            position = int(index)
            if not -array.shape[1] <= position < array.shape[1]:
                return None
        elif index in self.names and array.shape[1] == len(self.names):
            position = self.names.index(index)
        else:
            return None
        return np.ascontiguousarray(array[:, position:position + 1] if position >= 0
                                    else array[:, [position]]), (field.strip(),)


def _joint_columns(raws: Sequence[bytes]) -> _JointTable | None:
    """Decode equal-layout little-endian CDR JointState messages with numpy (None: the
    messages differ in size, names or frame, or are not little-endian CDR)."""
    if not raws:
        return None
    first = bytes(raws[0])
    size = len(first)
    if size < 12 or first[:2] != b"\x00\x01" or any(len(r) != size for r in raws):
        return None
    body = 4  # CDR offsets count from after the 4-byte encapsulation header

    def align(position: int, to: int) -> int:
        return position + (-(position - body) % to)

    def u32(position: int) -> int:
        return int.from_bytes(first[position:position + 4], "little")

    try:
        position = body + 8  # stamp: int32 sec, uint32 nanosec
        position += 4 + u32(position)  # frame_id
        position = align(position, 4)
        count = u32(position)
        position += 4
        names = []
        for _ in range(count):
            position = align(position, 4)
            length = u32(position)
            names.append(first[position + 4:position + 3 + length].decode())
            position += 4 + length
        fixed_end = position
        offsets = {}
        counts = []
        for key in ("position", "velocity", "effort"):
            position = align(position, 4)
            counts.append(position)
            count = u32(position)
            position += 4
            if count:
                position = align(position, 8)
            offsets[key] = (position, count)
            position += 8 * count
        if position != size:
            return None
    except (UnicodeDecodeError, IndexError):
        return None
    data = np.frombuffer(b"".join(raws), dtype=np.uint8).reshape(len(raws), size)
    fixed = np.r_[body + 8:fixed_end, *[np.arange(c, c + 4) for c in counts]]
    if not (data[:, fixed] == data[0, fixed]).all():
        return None  # another frame, other names or sizes somewhere: the general path
    sec = data[:, body:body + 4].copy().view("<i4")[:, 0].astype(np.int64)
    nanosec = data[:, body + 4:body + 8].copy().view("<u4")[:, 0].astype(np.int64)
    arrays = {key: data[:, start:start + 8 * count].copy().view("<f8").reshape(len(raws), count)
              for key, (start, count) in offsets.items()}
    return _JointTable(sec * 1_000_000_000 + nanosec, tuple(names), arrays)


def _storage_reader(path: Path) -> Any:
    """rosbags' reader of one storage file (a raw .mcap / .db3)."""
    from rosbags.rosbag2 import Reader

    try:
        return Reader(path)
    except _READ_ERRORS as exc:
        raise SourceError(f"cannot read recording {str(path)!r}: {exc}") from None


def _check_sqlite3(path: Path, where: str) -> list[str]:
    """sqlite's own structure check of a .db3 (pages, b-trees, record lengths); its message
    blobs carry no checksum, which the returned warning says."""
    try:
        db = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
        try:
            problems = [row[0] for row in db.execute("PRAGMA quick_check")]
        finally:
            db.close()
    except sqlite3.Error as exc:
        raise SourceError(f"{where} is not a readable sqlite3 database: {exc}") from None
    if problems != ["ok"]:
        raise SourceError(f"{where} is damaged: sqlite's quick_check reports "
                          f"{problems[0]}" + (f" and {len(problems) - 1} more problem(s)"
                                              if len(problems) > 1 else ""))
    return ["sqlite3 storage keeps no checksums, so a damaged message payload cannot be "
            "detected; its database structure was checked"]


def _short(msgtype: str) -> str:
    """``pkg/msg/Name`` and ``pkg/Name`` are the same type."""
    parts = msgtype.split("/")
    return f"{parts[0]}/{parts[-1]}" if len(parts) >= 2 else msgtype


def _bag_typestore(connections: Sequence[Any]) -> Any:
    """The core's shared typestore (ROS 2 base types and fibril_msgs, its generated decoders
    reused) when every definition the bag embeds matches it; otherwise a private copy with
    the embedded definitions registered over it (those win: they describe the recorded
    bytes). The shared store is never changed."""
    from fibril_sim_core.trace._msgtypes import typestore
    from rosbags.typesys.store import Typestore

    shared = typestore()
    embedded = _embedded_types(connections)
    differing = {name: d for name, d in embedded.items() if shared.fielddefs.get(name) != d}
    if not differing:
        return shared
    store = Typestore()
    store.fielddefs.update({k: v for k, v in shared.fielddefs.items() if k not in differing})
    store.types.update({k: v for k, v in shared.types.items() if k not in differing})
    store.register(differing)
    return store


def _embedded_types(connections: Sequence[Any]) -> dict[str, Any]:
    """The message definitions a bag's connections embed (MSG or IDL), parsed; an
    unparsable one is skipped (the known types still decode)."""
    from rosbags.typesys import get_types_from_idl, get_types_from_msg

    types: dict[str, Any] = {}
    for connection in connections:
        definition = connection.msgdef
        fmt = getattr(definition.format, "name", str(definition.format))
        try:
            if fmt == "MSG" and definition.data:
                types.update(get_types_from_msg(definition.data, connection.msgtype))
            elif fmt == "IDL" and definition.data:
                separator = "=" * 80 + "\n"
                if definition.data.startswith(f"{separator}IDL: "):
                    for part in definition.data.split(separator)[1:]:
                        types.update(get_types_from_idl(part.split("\n", 1)[1]))
                else:
                    types.update(get_types_from_idl(definition.data))
        except _TYPE_ERRORS:
            pass
    return types


class _FieldError(Exception):
    pass


_TOKEN = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)(?:\[([^\]]+)\])?$")


def _accessor(field: str, first: Any, msgtype: str,
              label: str) -> tuple[Callable[[Any], Any], tuple[str, ...]]:
    """A function message → row of floats for ``field``, and the row's component names.

    Built from the first message; later messages go through the same steps (a named index is
    looked up again when the ``name`` list changes)."""
    steps: list[tuple[str, str | None]] = []
    for token in field.split("."):
        match = _TOKEN.match(token.strip())
        if match is None:
            raise SourceError(f"{label}: cannot parse field path {field!r} (expected names "
                              f"separated by '.', an optional [index] or [name] on the last)")
        steps.append((match.group(1), match.group(2)))
    if any(index is not None for _, index in steps[:-1]):
        raise SourceError(f"{label}: only the last part of {field!r} may have an [index]")
    names = [name for name, _ in steps]
    index = steps[-1][1]
    node = first
    parent = None
    for n, name in enumerate(names):
        if not hasattr(node, name):
            fields = ", ".join(_fields(node)) or "none"
            at = ".".join(names[:n]) or msgtype
            raise SourceError(f"{label}: {msgtype} has no field {'.'.join(names[:n + 1])!r} "
                              f"({at} has: {fields})")
        parent, node = node, getattr(node, name)
    path = tuple(names)

    def walk(message: Any) -> tuple[Any, Any]:
        parent, node = None, message
        for name in path:
            parent, node = node, getattr(node, name)
        return parent, node

    if index is not None:
        if not isinstance(node, (np.ndarray, list, tuple)):
            raise SourceError(f"{label}: {'.'.join(names)} of {msgtype} is not an array; "
                              f"it cannot take [{index}]")
        if re.fullmatch(r"-?\d+", index):
            position = int(index)
            size = len(node)
            if not -size <= position < size:
                raise SourceError(f"{label}: index {position} is out of range (the first "
                                  f"message has {size} element(s))")

            def by_position(message: Any) -> Any:
                values = walk(message)[1]
                try:
                    return (float(values[position]),)
                except IndexError:
                    raise _FieldError(f"{'.'.join(names)} has {len(values)} element(s), no "
                                      f"index {position}") from None

            return by_position, (field,)
        if not hasattr(parent, "name"):
            raise SourceError(f"{label}: [{index}] names an element, but {msgtype} has no "
                              f"'name' list beside {names[-1]!r} (use a numeric index)")
        listed = list(parent.name)
        if index not in listed:
            raise SourceError(f"{label}: no element named {index!r}; the message names: "
                              f"{', '.join(listed) or 'none'}")
        cache: dict[str, Any] = {"names": listed, "position": listed.index(index)}

        def by_name(message: Any) -> Any:
            parent, values = walk(message)
            current = parent.name
            if current != cache["names"]:
                current = list(current)
                if index not in current:
                    raise _FieldError(f"no element named {index!r} (names: "
                                      f"{', '.join(current)})")
                cache["names"], cache["position"] = current, current.index(index)
            try:
                return (float(values[cache["position"]]),)
            except IndexError:
                raise _FieldError(f"{'.'.join(names)} has {len(values)} element(s) for "
                                  f"{len(current)} name(s)") from None

        return by_name, (field,)
    return _leaf(node, walk, field, msgtype, label)


def _leaf(node: Any, walk: Callable[[Any], tuple[Any, Any]], field: str, msgtype: str,
          label: str) -> tuple[Callable[[Any], Any], tuple[str, ...]]:
    if isinstance(node, bool):
        return (lambda m: (float(walk(m)[1]),)), (field,)
    if isinstance(node, (int, float, np.number)):
        return (lambda m: (float(walk(m)[1]),)), (field,)
    if isinstance(node, np.ndarray) and node.dtype.kind in "fiub":
        width = int(node.size)

        def array(message: Any) -> Any:
            values = walk(message)[1]
            if values.size != width:
                raise _FieldError(f"{field} has {values.size} element(s), the first message "
                                  f"{width}")
            return values.ravel()

        return array, tuple(f"{field}[{i}]" for i in range(width))
    fields = set(_fields(node))
    if {"x", "y", "z", "w"} <= fields:  # a quaternion: calibration uses w, x, y, z
        def quaternion(message: Any) -> Any:
            q = walk(message)[1]
            return (q.w, q.x, q.y, q.z)

        return quaternion, ("w", "x", "y", "z")
    if {"x", "y", "z"} <= fields:
        def vector(message: Any) -> Any:
            v = walk(message)[1]
            return (v.x, v.y, v.z)

        return vector, ("x", "y", "z")
    if "data" in fields:
        inner = node.data
        if isinstance(inner, (int, float, np.number)) and not isinstance(inner, bool):
            return (lambda m: (float(walk(m)[1].data),)), (field,)
    raise SourceError(f"{label}: {field!r} of {msgtype} is a {type(node).__name__} with fields "
                      f"{', '.join(sorted(fields)) or 'none'}; name a numeric field, array, "
                      f"vector or quaternion")


def _fields(node: Any) -> list[str]:
    names = getattr(node, "__dataclass_fields__", None)
    if names:
        return [n for n in names if n != "__msgtype__"]
    return []


# --------------------------------------------------------------------------- CSV

class CsvSource(Source):
    """A CSV log with a header row; columns are read on demand (``prefetch`` several in one
    pass), in chunks with numpy's typed parser (``csv_columns``): only the columns a request
    maps are held, never the file's rows."""

    format = "csv"
    tabular = True

    def __init__(self, path: Path, time_column: str | None, time_unit: str | None) -> None:
        from .csv_columns import CsvProblem, read_layout

        self.path = path
        label = f"recording {str(path)!r}"
        try:
            self._layout = read_layout(path, label)
        except OSError as exc:
            raise SourceError(f"cannot read {label}: {exc.strerror or exc}") from None
        except CsvProblem as exc:
            raise SourceError(str(exc)) from None
        self.header = list(self._layout.header)
        self._index = {name: i for i, name in enumerate(self.header)}
        if len(self._index) != len(self.header):
            seen: set[str] = set()
            twice = next(n for n in self.header if n in seen or seen.add(n))  # type: ignore
            raise SourceError(f"{label}: column {twice!r} appears twice in the header")
        if not self._layout.rows:
            raise SourceError(f"{label} has a header but no rows")
        self._columns: dict[str, np.ndarray] = {}
        if time_column is None:
            raise SourceError(f"{label}: name its time column (time_column: t_s, time_ns, or a "
                              f"column with time_unit)")
        if time_column not in self._index:
            raise SourceError(f"{label} has no time column {time_column!r}; its columns: "
                              f"{', '.join(self.header)}")
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
        from .csv_columns import read_cell

        return read_cell(self._layout, row, name)

    def prefetch(self, names: Sequence[str]) -> None:
        """Read the named columns (those in the header, not read yet) and the time column in
        one pass over the file."""
        from .csv_columns import CsvProblem, read_columns

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
                raise SourceError(f"{label}: line {n + 2} {reason} ({text!r})")
            times = np.rint(scaled, out=scaled).astype(np.int64)
            del scaled
        check_times(times, label, lines=True)
        return times

    def column(self, name: str) -> np.ndarray:
        values = self._columns.get(name)
        if values is None:
            if name not in self._index:
                raise SourceError(f"recording {str(self.path)!r} has no column {name!r}; its "
                                  f"columns: {', '.join(self.header)}")
            if name == self.time_column and self._unit == "ns":
                values = self.times_ns.astype(np.float64)
                self._columns[name] = values
                return values
            self.prefetch([name])
            values = self._columns[name]
        return values

    def stream(self, *, topic: str | None = None, field: str | None = None,
               columns: Sequence[str] | None = None, time: str | None = None,
               message_type: str | None = None) -> Stream:
        if topic is not None or field is not None or not columns:
            raise SourceError(f"recording {str(self.path)!r} is a CSV log: name columns, not a "
                              f"topic or field")
        self.prefetch(columns)
        values = np.column_stack([self.column(c) for c in columns])
        label = f"recording {str(self.path)!r} column{'s' if len(columns) > 1 else ''} " + \
            ", ".join(repr(c) for c in columns)
        stream = Stream(label, self.times_ns, values, tuple(columns))
        check_stream(stream, lines=True)
        return stream


# --------------------------------------------------------------------------- checks

def _t(time_ns: Any) -> str:
    return f"{int(time_ns) / 1e9:.9g} s"


def check_times(times: np.ndarray, label: str, *, lines: bool = False) -> None:
    """Times must not go backwards (equal neighbours are allowed here: a command topic may
    carry two messages at one time; reference signals check strict order themselves)."""
    back = np.flatnonzero(np.diff(times) < 0)
    if back.size:
        i = int(back[0]) + 1
        where = f" line {i + 2}" if lines else ""
        raise SourceError(f"{label}: time goes backwards at{where} {_t(times[i])}, after "
                          f"{_t(times[i - 1])}")


def check_stream(stream: Stream, *, lines: bool = False) -> None:
    """No backwards time, no NaN rows (the count and the first time are named), no value
    beyond ``MAX_VALUE`` (the column and line of a CSV log, the message of a bag)."""
    check_times(stream.times_ns, stream.label, lines=lines)
    values = stream.values
    bad = ~np.all(np.isfinite(values), axis=1)
    if bad.any():
        first = int(np.flatnonzero(bad)[0])
        where = f" (line {first + 2})" if lines else f" (message {first})"
        raise SourceError(f"{stream.label}: {int(bad.sum())} row(s) with NaN or infinite "
                          f"values, the first at {_t(stream.times_ns[first])}{where}")
    huge = (values > MAX_VALUE) | (values < -MAX_VALUE)  # no |values| copy of a large log
    if huge.any():
        row, col = (int(i) for i in np.argwhere(huge)[0])
        where = (f"column {stream.components[col]!r} line {row + 2}" if lines else
                 f"{stream.components[col]!r} of message {row} at {_t(stream.times_ns[row])}")
        raise SourceError(f"{stream.label}: {where}: {float(values[row, col])!r} cannot be a "
                          f"recorded value (beyond {MAX_VALUE:g}; {int(huge.sum())} such "
                          f"value(s))")
