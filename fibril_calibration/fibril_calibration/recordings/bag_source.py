"""rosbag2 folders and raw MCAP / sqlite3 storage files as streams (``BagSource``).

The messages of the topics a request names are read in one pass and kept as recorded bytes,
decoded per topic when a stream needs them: sensor_msgs/JointState column-wise with numpy
straight from the CDR bytes (``_joint_columns``), anything else with rosbags' deserializer and
a field accessor (``message_fields``). Each storage file is checked before it is read
(``mcap_integrity``, sqlite's quick_check). Never imports rclpy.
"""

from __future__ import annotations

import re
import sqlite3
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, cast

import numpy as np

from .message_fields import FieldError, Row, accessor, short_type
from .sources import MOTOR_COMMAND, MOTOR_MODES, Source, SourceError, SourceInfo, Stream, \
    check_stream, listing, when

if TYPE_CHECKING:  # rosbags loads on use
    from rosbags.rosbag2 import Reader
    from rosbags.typesys.store import Typestore

    from .bag_readers import Rosbag2PyReader

__all__ = ["BagSource"]


class _MotorCommand(Protocol):
    """A decoded fibril_msgs/MotorCommand, as far as a stream reads it."""

    mode: int
    value: float


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



class BagSource(Source):
    """A rosbag2 folder or a raw MCAP / sqlite3 storage file, decoded with rosbags.

    The messages of the topics a request names are read in one pass (``prefetch``) and kept
    as recorded bytes; they are decoded per topic when a stream needs them. A
    sensor_msgs/JointState topic whose messages all have the same layout (same names, same
    array sizes: the usual joint log) is decoded column-wise with numpy straight from the CDR
    bytes, the layout taken from the first message; any other topic goes through rosbags'
    deserializer message by message."""

    def __init__(self, path: Path, format: str, time: str = "log", *,
                 reader: str = "rosbags", auto: bool = False,
                 types: tuple[Path, ...] = ()) -> None:
        self.path = path
        self.types = types  # .msg folders for types the bag does not define
        self.format = format
        self.time = time
        self.reader = reader  # the library that reads the bytes: rosbags or rosbag2_py
        # reader: auto chose rosbag2_py; it falls back to rosbags (and says why here) when
        # rosbag2_py cannot open the bag or read / decode a topic the request maps.
        self.auto = auto and reader == "rosbag2_py"
        self.reader_fallback: str | None = None
        self._reader: Reader | Rosbag2PyReader
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
        self._typestore: Typestore | None = None
        self._raw: dict[str, tuple[np.ndarray, list[bytes]]] = {}
        # decoded ROS messages (the boundary: read by attribute, see message_fields)
        self._messages: dict[str, list[object]] = {}
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

    def _rosbags_reader(self) -> Reader:
        from rosbags.rosbag2 import Reader

        return Reader(self.path) if self.format == "rosbag2" else _storage_reader(self.path)

    def _index_connections(self) -> None:
        # (rosbags' Connection or bag_readers.Connection: each reader takes back its own)
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
        from fibril_sim_core.trace.msgtypes import typestore

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

    def describe(self) -> SourceInfo:
        return SourceInfo(self.path, self.format, False, reader=self.reader,
                          reader_fallback=self.reader_fallback, warnings=self.warnings)

    @property
    def topics(self) -> dict[str, str]:
        """Topic → message type."""
        return {topic: found[0].msgtype for topic, found in self._connections.items()}

    def message_type(self, topic: str) -> str:
        found = self._connections.get(topic)
        if not found:
            raise SourceError(f"recording {str(self.path)!r} has no topic {topic!r}; "
                              f"{listing(sorted(self._connections), 'topics', self.path)}")
        types = sorted({c.msgtype for c in found})
        if len(types) > 1:
            raise SourceError(f"recording {str(self.path)!r} topic {topic!r} has several "
                              f"message types ({', '.join(types)})")
        return str(types[0])

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
                              f"{str(exc) or type(exc).__name__}") from None
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

    def messages(self, topic: str) -> tuple[np.ndarray, list[object]]:
        """Log times (int64 ns) and decoded messages of ``topic``, in log order (cached)."""
        times, raws = self._recorded(topic)
        decoded: list[object] | None = self._messages.get(topic)
        if decoded is None:
            msgtype = self.message_type(topic)
            if self._typestore is None:
                from .message_types import bag_typestore_with

                try:
                    self._typestore = bag_typestore_with(self._reader.connections, self.types)
                except ValueError as exc:
                    raise SourceError(f"recording {str(self.path)!r}: {exc}") from None
            if msgtype not in self._typestore.fielddefs:
                from .message_types import missing_definition

                raise SourceError(missing_definition(self.path, topic, msgtype))
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
                                  f"{when(at, self.start_ns())}: {exc}") from None
            self._messages[topic] = decoded
        return times, decoded

    def start_ns(self) -> int | None:
        """The recording's start: the bag's start time, or its earliest message read."""
        start = getattr(self._reader, "start_time", None)
        firsts = [int(t[0]) for t, _ in self._raw.values() if len(t)]
        if isinstance(start, int) and (not firsts or start <= min(firsts)):
            return start
        return min(firsts, default=None)

    def _joint_table(self, topic: str, msgtype: str) -> _JointTable | None:
        if topic not in self._joints:
            table = None
            if short_type(msgtype) == "sensor_msgs/JointState":
                table = _joint_columns(self._recorded(topic)[1])
            self._joints[topic] = table
        return self._joints[topic]

    def stream(self, *, topic: str | None = None, field: str | None = None,
               columns: Sequence[str] | None = None, time: str | None = None,
               message_type: str | None = None, check_values: bool = True) -> Stream:
        if topic is None or columns is not None:
            raise SourceError(f"recording {str(self.path)!r} is a bag: name a topic (and a "
                              f"field), not columns")
        msgtype = self.message_type(topic)
        if message_type is not None and short_type(message_type) != short_type(msgtype):
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
        if field is None and short_type(msgtype) != short_type(MOTOR_COMMAND):
            raise SourceError(f"{label} ({msgtype}): name a field (e.g. data, "
                              f"position[joint_name], pose.pose.orientation)")
        table = self._joint_table(topic, msgtype)
        picked = table.pick(field) if table is not None and field is not None else None
        if table is not None and picked is not None:
            times = table.header_ns if time == "header" else log_times
            stream = Stream(f"{label} field {field!r}", times, picked[0], picked[1],
                            origin_ns=self.start_ns())
            check_stream(stream, values=check_values)
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
            commands = cast("list[_MotorCommand]", messages)  # the type was checked above
            for n, message in enumerate(commands):
                mode = int(message.mode)
                if not 0 <= mode < len(MOTOR_MODES):
                    raise SourceError(f"{label}: MotorCommand {n} at "
                                      f"{when(times[n], self.start_ns())} has mode "
                                      f"{mode}; expected 0..{len(MOTOR_MODES) - 1}")
                modes.append(MOTOR_MODES[mode])
            values = np.fromiter((m.value for m in commands), dtype=np.float64,
                                 count=len(commands)).reshape(-1, 1)
            stream = Stream(label, times, values, ("value",), tuple(modes),
                            origin_ns=self.start_ns())
        else:
            label += f" field {field!r}"
            extract, components = accessor(field, messages[0], msgtype, label, self.path,
                                            topic)
            rows: list[Row] = []
            try:
                for message in messages:
                    rows.append(extract(message))
            except FieldError as exc:
                n = len(rows)
                raise SourceError(f"{label}: message {n} at {when(times[n], self.start_ns())}: "
                                  f"{exc}") from None
            values = np.array(rows, dtype=np.float64).reshape(len(rows), len(components))
            stream = Stream(label, times, values, components, origin_ns=self.start_ns())
        check_stream(stream, values=check_values)
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


def _storage_reader(path: Path) -> Reader:
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


