"""``fibril_sim recording info PATH``: what a recording holds, before a request maps it.

A bag (rosbag2 folder, raw ``.mcap`` or ``.db3``) is described from what the storage keeps
about itself, not by reading every message:

* MCAP: the summary (schemas, channels, statistics, chunk index) and each chunk's message
  index (log time of every message); a file without a summary or index is scanned record by
  record instead (``method: scan``);
* sqlite3: the ``topics`` and ``message_definitions`` tables, one ``GROUP BY`` over the
  messages (count, first and last time per topic) and the intervals of blocks of consecutive
  rows spread over the table (``method: sampled``);
* a rosbag2 folder: its storage files (listed by metadata.yaml) described one by one and added.

Each topic gets its type, count, rate (median interval) and jitter (90th percentile of the
intervals' distance from the median), its time span relative to the recording's first
message, and whether its type's definition is ``embedded`` in the bag, ``known`` (ROS 2 base
types, fibril_msgs, a source's ``types`` folders) or ``missing``. ``field_tree`` lists a
topic's fields in the request's own field syntax (``position[joint1]``,
``pose.pose.orientation``), constants left out.

A CSV log is described by ``csv_info``; the field tree is ``field_tree``'s (both re-exported
here, the command's one module).
"""

from __future__ import annotations

import mmap
import sqlite3
import struct
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from .csv_info import ColumnInfo, CsvInfo, csv_info, csv_text, number_text, rate_and_jitter
from .field_tree import FieldLine, field_tree, fields_text
from .mcap_integrity import _Cursor
from .sources import SourceError

__all__ = ["BagInfo", "ColumnInfo", "CsvInfo", "FieldLine", "TopicInfo", "as_dict", "field_tree",
           "fields_text", "info_text", "recording_info"]

_NS = 1_000_000_000
_U16, _U32, _U64 = struct.Struct("<H"), struct.Struct("<I"), struct.Struct("<Q")
_MAGIC = b"\x89MCAP0\r\n"
_SCHEMA, _CHANNEL, _MESSAGE, _CHUNK = 0x03, 0x04, 0x05, 0x06
_MESSAGE_INDEX, _CHUNK_INDEX, _STATISTICS = 0x07, 0x08, 0x0B
_SAMPLE_BLOCKS, _SAMPLE_ROWS = 32, 2048  # sqlite3: intervals from 32 blocks of 2048 rows


@dataclass(frozen=True)
class TopicInfo:
    """One topic of a bag. Times are ns since the bag's first message."""

    topic: str
    type: str
    count: int
    first_s: float | None
    last_s: float | None
    rate_hz: float | None  # 1 / median interval
    jitter_s: float | None  # p90 of |interval - median interval|
    definition: str  # embedded | known | missing
    intervals: int  # how many intervals the rate and jitter come from


@dataclass(frozen=True)
class BagInfo:
    path: str
    format: str  # rosbag2 | mcap | sqlite3
    files: tuple[str, ...]
    method: str  # index (MCAP summary + message index) | scan | sampled (sqlite3)
    start_ns: int | None  # the first message's log time (absolute)
    duration_s: float
    messages: int
    topics: tuple[TopicInfo, ...]
    kind: str = "bag"



def recording_info(path: Path, *, gap_factor: float = 5.0, types: Sequence[Path] = ()
                   ) -> BagInfo | CsvInfo:
    """Describe the recording at ``path`` (SourceError when it cannot be read)."""
    if not path.exists():
        raise SourceError(f"recording {str(path)!r} does not exist")
    if path.is_dir():
        return _rosbag2_info(path, types)
    suffix = path.suffix.lower()
    if suffix == ".mcap":
        return _merge(path, "mcap", [_mcap_file(path)], types)
    if suffix == ".db3":
        return _merge(path, "sqlite3", [_sqlite_file(path)], types)
    if suffix in (".csv", ".tsv", ".txt"):
        return csv_info(path, gap_factor)
    raise SourceError(f"recording {str(path)!r}: cannot tell its format from the name (a "
                      f"rosbag2 folder, .mcap, .db3 or .csv)")


# --------------------------------------------------------------------------- bag files

@dataclass
class _FileTopics:
    """What one storage file says: per topic its type, count, first/last time, intervals
    (a sample of them, or all), and the definitions it embeds."""

    types: dict[str, str] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    first: dict[str, int] = field(default_factory=dict)
    last: dict[str, int] = field(default_factory=dict)
    intervals: dict[str, list[np.ndarray]] = field(default_factory=dict)
    embedded: set[str] = field(default_factory=set)
    method: str = "index"


def _rosbag2_info(path: Path, types: Sequence[Path]) -> BagInfo:
    import yaml

    meta = path / "metadata.yaml"
    if not meta.is_file():
        raise SourceError(f"recording {str(path)!r} is a folder without metadata.yaml (not a "
                          f"rosbag2 bag)")
    try:
        doc = yaml.safe_load(meta.read_text(encoding="utf-8"))
        listed = doc["rosbag2_bagfile_information"]["relative_file_paths"]
    except (OSError, ValueError, KeyError, TypeError, yaml.YAMLError) as exc:
        raise SourceError(f"recording {str(path)!r}: cannot read metadata.yaml "
                          f"({exc})") from None
    files = [path / name for name in listed]
    parts = []
    for file in files:
        if not file.is_file():
            raise SourceError(f"recording {str(path)!r}: storage file {file.name!r} listed in "
                              f"metadata.yaml is missing")
        parts.append(_mcap_file(file) if file.suffix == ".mcap" else _sqlite_file(file))
    return _merge(path, "rosbag2", parts, types, files)


def _merge(path: Path, format: str, parts: Sequence[_FileTopics], types: Sequence[Path],
           files: Sequence[Path] = ()) -> BagInfo:
    known = _known_types(types)
    firsts = [t for part in parts for t in part.first.values()]
    lasts = [t for part in parts for t in part.last.values()]
    start = min(firsts) if firsts else None
    topics = []
    names = sorted({t for part in parts for t in part.types})
    for name in names:
        msgtype = next(p.types[name] for p in parts if name in p.types)
        count = sum(p.counts.get(name, 0) for p in parts)
        first = min((p.first[name] for p in parts if name in p.first), default=None)
        last = max((p.last[name] for p in parts if name in p.last), default=None)
        gaps = [g for p in parts for g in p.intervals.get(name, ())]
        merged = np.concatenate(gaps) if gaps else np.zeros(0, dtype=np.int64)
        rate, jitter = rate_and_jitter(merged)
        embedded = any(msgtype in p.embedded for p in parts)
        definition = ("embedded" if embedded else "known" if msgtype in known else "missing")
        topics.append(TopicInfo(
            name, msgtype, count,
            None if first is None or start is None else (first - start) / _NS,
            None if last is None or start is None else (last - start) / _NS,
            rate, jitter, definition, int(merged.size)))
    method = "sampled" if any(p.method == "sampled" for p in parts) else (
        "scan" if any(p.method == "scan" for p in parts) else "index")
    return BagInfo(str(path), format, tuple(str(f) for f in (files or [path])), method, start,
                   ((max(lasts) - start) / _NS) if start is not None else 0.0,
                   sum(t.count for t in topics), tuple(topics))


def _known_types(folders: Sequence[Path]) -> set[str]:
    from fibril_sim_core.trace.msgtypes import typestore

    known = set(typestore().fielddefs)
    if folders:
        from .message_types import msg_folder_types

        known.update(msg_folder_types(folders))
    return known


# --------------------------------------------------------------------------- MCAP

def _text(record: _Cursor) -> str:
    return record.text().decode("utf-8", "replace")


def _mcap_file(path: Path) -> _FileTopics:
    try:
        with path.open("rb") as handle:
            size = path.stat().st_size
            if size < 8 + 29 + 8:
                raise ValueError("too short for an MCAP file")
            with mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
                if data[:8] != _MAGIC:
                    raise ValueError("no MCAP magic bytes at its start")
                summary = _mcap_summary_start(data, size)
                if summary:
                    found = _mcap_indexed(data, summary, size - 8 - 29)
                    if found is not None:
                        return found
                return _mcap_scan(data, size)
    except (OSError, ValueError, IndexError, struct.error) as exc:
        raise SourceError(f"cannot read recording {str(path)!r}: {exc}") from None


#: an MCAP file's bytes: the mapped file, or a chunk decompressed from it
_Data = mmap.mmap | bytes


def _mcap_summary_start(data: _Data, size: int) -> int:
    """The footer's summary start (0: no summary, or a cut file without footer)."""
    footer = size - 8 - 29
    if data[size - 8:] != _MAGIC or data[footer] != 0x02:
        return 0
    return int(_U64.unpack(data[footer + 9:footer + 17])[0])


def _records(data: _Data, start: int, end: int) -> Iterable[tuple[int, int, int]]:
    at = start
    while at + 9 <= end:
        opcode = data[at]
        length = int(_U64.unpack(data[at + 1:at + 9])[0])
        if at + 9 + length > end:
            raise ValueError(f"the record at byte {at} runs past the end of its section")
        yield opcode, at + 9, at + 9 + length
        at += 9 + length


def _schema_and_channel(data: _Data, opcode: int, start: int, end: int,
                        schemas: dict[int, tuple[str, bool]], channels: dict[int, tuple[str,
                                                                                       int]]
                        ) -> None:
    record = _Cursor(data, start, end, "a record")
    if opcode == _SCHEMA:
        schema_id = record.u16()
        name, encoding = _text(record), _text(record)
        content = record.u32()
        schemas[schema_id] = (name, encoding in ("ros2msg", "ros2idl") and content > 0)
    else:
        channel_id, schema_id = record.u16(), record.u16()
        channels[channel_id] = (_text(record), schema_id)


def _mcap_topics(schemas: dict[int, tuple[str, bool]],
                 channels: dict[int, tuple[str, int]]) -> tuple[_FileTopics, dict[int, str]]:
    found = _FileTopics()
    owner = {}
    for channel_id, (topic, schema_id) in channels.items():
        name, embedded = schemas.get(schema_id, ("", False))
        found.types.setdefault(topic, name)
        if embedded:
            found.embedded.add(name)
        owner[channel_id] = topic
    return found, owner


def _mcap_indexed(data: _Data, summary: int, footer: int) -> _FileTopics | None:
    """Topics from the summary and the chunks' message indexes (None: the file has no chunk
    index, so its messages must be scanned)."""
    schemas: dict[int, tuple[str, bool]] = {}
    channels: dict[int, tuple[str, int]] = {}
    index_spans: list[tuple[int, int]] = []
    statistics = False
    for opcode, start, end in _records(data, summary, footer):
        if opcode in (_SCHEMA, _CHANNEL):
            _schema_and_channel(data, opcode, start, end, schemas, channels)
        elif opcode == _CHUNK_INDEX:
            record = _Cursor(data, start, end, "a record")
            record._take(16)
            record.u64()  # chunk start
            record.u64()  # chunk length
            offsets = record.u32()
            map_end = record.at + offsets  # the message index offsets: channel -> offset
            entries = _Cursor(data, record.at, map_end, "a chunk index")
            starts = []
            while entries.at < map_end:
                entries.u16()
                starts.append(entries.u64())
            record.at = map_end
            length = record.u64()
            if starts:
                index_spans.append((min(starts), length))
        elif opcode == _STATISTICS:
            statistics = True
    if not index_spans and not (statistics and not channels):
        return None
    found, owner = _mcap_topics(schemas, channels)
    times: dict[int, list[np.ndarray]] = {}
    pair = np.dtype([("time", "<u8"), ("offset", "<u8")])
    for start, length in index_spans:
        for opcode, content, end in _records(data, start, start + length):
            if opcode != _MESSAGE_INDEX:
                continue
            channel = int(_U16.unpack(data[content:content + 2])[0])
            size = int(_U32.unpack(data[content + 2:content + 6])[0])
            index = np.frombuffer(data, dtype=pair, count=size // 16, offset=content + 6)
            times.setdefault(channel, []).append(index["time"].astype(np.int64))
    _fill(found, owner, times)
    return found


def _mcap_scan(data: _Data, size: int) -> _FileTopics:
    """Every record of a file without an index (chunks decompressed)."""
    from .mcap_integrity import McapDamage, _decompress

    schemas: dict[int, tuple[str, bool]] = {}
    channels: dict[int, tuple[str, int]] = {}
    times: dict[int, list[int]] = {}
    end = size - 8 - 29 if _mcap_summary_start(data, size) or data[size - 8:] == _MAGIC \
        else size

    def visit(block: _Data, start: int, stop: int) -> None:
        for opcode, content, record_end in _records(block, start, stop):
            if opcode in (_SCHEMA, _CHANNEL):
                _schema_and_channel(block, opcode, content, record_end, schemas, channels)
            elif opcode == _MESSAGE:
                channel = int(_U16.unpack(block[content:content + 2])[0])
                stamp = int(_U64.unpack(block[content + 6:content + 14])[0])
                times.setdefault(channel, []).append(stamp)
            elif opcode == _CHUNK:
                record = _Cursor(block, content, record_end, "a record")
                record._take(16)
                uncompressed = record.u64()
                record.u32()
                compression = _text(record)
                length = record.u64()
                raw = bytes(record._take(length))
                try:
                    inner = _decompress(compression, raw, uncompressed, content)
                except McapDamage as exc:
                    raise ValueError(str(exc)) from None
                visit(inner, 0, len(inner))

    try:
        visit(data, 8, end)
    except ValueError:
        if end == size:  # a cut file: what was read before the cut is what it holds
            pass
        else:
            raise
    found, owner = _mcap_topics(schemas, channels)
    found.method = "scan"
    _fill(found, owner, {c: [np.array(t, dtype=np.int64)] for c, t in times.items()})
    return found


def _fill(found: _FileTopics, owner: dict[int, str], times: dict[int, list[np.ndarray]]
          ) -> None:
    per_topic: dict[str, list[np.ndarray]] = {}
    for channel, parts in times.items():
        topic = owner.get(channel)
        if topic is not None:
            per_topic.setdefault(topic, []).extend(parts)
    for topic in found.types:
        parts = per_topic.get(topic, [])
        stamps = np.sort(np.concatenate(parts)) if parts else np.zeros(0, dtype=np.int64)
        found.counts[topic] = int(stamps.size)
        if stamps.size:
            found.first[topic], found.last[topic] = int(stamps[0]), int(stamps[-1])
        found.intervals[topic] = [np.diff(stamps)]


# --------------------------------------------------------------------------- sqlite3

def _sqlite_file(path: Path) -> _FileTopics:
    try:
        db = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    except sqlite3.Error as exc:
        raise SourceError(f"cannot read recording {str(path)!r}: {exc}") from None
    try:
        return _sqlite_topics(db)
    except sqlite3.Error as exc:
        raise SourceError(f"cannot read recording {str(path)!r} as a rosbag2 sqlite3 "
                          f"database: {exc}") from None
    finally:
        db.close()


def _sqlite_topics(db: sqlite3.Connection) -> _FileTopics:
    found = _FileTopics(method="sampled")
    names = {}
    for topic_id, name, msgtype in db.execute("SELECT id, name, type FROM topics"):
        names[topic_id] = name
        found.types[name] = msgtype
    tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    if "message_definitions" in tables:
        for msgtype, encoding, text in db.execute(
                "SELECT topic_type, encoding, encoded_message_definition "
                "FROM message_definitions"):
            if encoding in ("ros2msg", "ros2idl") and text:
                found.embedded.add(msgtype)
    indexed = "timestamp_idx" in {row[0] for row in db.execute(
        "SELECT name FROM sqlite_master WHERE type='index'")}
    counts = _stored_counts(db, tables, indexed)
    if counts is not None and indexed:
        # counts from the bag's own metadata (checked against the index's total), the first
        # and last message of each topic found through the timestamp index
        for topic_id, name in names.items():
            found.counts[name] = counts.get(name, 0)
            if not found.counts[name]:
                continue
            for order, into in (("", found.first), (" DESC", found.last)):
                row = db.execute("SELECT timestamp FROM messages INDEXED BY timestamp_idx "
                                 f"WHERE topic_id = ? ORDER BY timestamp{order} LIMIT 1",
                                 (topic_id,)).fetchone()
                if row is not None:
                    into[name] = int(row[0])
    else:  # one pass over every row (no metadata counts, or an unindexed table)
        for topic_id, count, first, last in db.execute(
                "SELECT topic_id, count(*), min(timestamp), max(timestamp) FROM messages "
                "GROUP BY topic_id"):
            name = names.get(topic_id)
            if name is not None:
                found.counts[name], found.first[name], found.last[name] = count, first, last
    # two queries: sqlite answers each of min and max from the b-tree's end, not both at once
    low = db.execute("SELECT min(id) FROM messages").fetchone()[0]
    high = db.execute("SELECT max(id) FROM messages").fetchone()[0]
    if low is None:
        return found
    span = high - low + 1
    blocks = 1 if span <= _SAMPLE_BLOCKS * _SAMPLE_ROWS else _SAMPLE_BLOCKS
    step = span // blocks
    for block in range(blocks):
        begin = low + block * step
        rows = db.execute("SELECT topic_id, timestamp FROM messages WHERE id >= ? AND id < ? "
                          "ORDER BY id", (begin, begin + (span if blocks == 1 else
                                                          _SAMPLE_ROWS))).fetchall()
        if not rows:
            continue
        table = np.array(rows, dtype=np.int64)
        for topic_id in np.unique(table[:, 0]).tolist():
            name = names.get(topic_id)
            if name is not None:
                stamps = np.sort(table[table[:, 0] == topic_id, 1])
                found.intervals.setdefault(name, []).append(np.diff(stamps))
    if blocks == 1:
        found.method = "index"  # every row was read: nothing sampled
    return found


def _stored_counts(db: sqlite3.Connection, tables: set[str], indexed: bool
                   ) -> dict[str, int] | None:
    """Per-topic counts from the ``metadata`` table rosbag2 (Iron and later) keeps in a
    single-file bag, when they add up to the number of rows (None: none, or they do not)."""
    import yaml

    if "metadata" not in tables or not indexed:
        return None
    try:
        row = db.execute("SELECT metadata FROM metadata ORDER BY id DESC LIMIT 1").fetchone()
        doc = yaml.safe_load(row[0]) if row else None
        if not isinstance(doc, dict) or len(doc.get("relative_file_paths") or []) != 1:
            return None
        counts = {str(t["topic_metadata"]["name"]): int(t["message_count"])
                  for t in doc["topics_with_message_count"]}
    except (yaml.YAMLError, KeyError, TypeError, ValueError):
        return None
    total = db.execute("SELECT count(*) FROM messages INDEXED BY timestamp_idx").fetchone()[0]
    return counts if sum(counts.values()) == total else None



# --------------------------------------------------------------------------- text

def as_dict(info: BagInfo | CsvInfo) -> dict[str, object]:
    """The JSON document of ``--json``."""
    return asdict(info)


def info_text(info: BagInfo | CsvInfo) -> str:
    if isinstance(info, CsvInfo):
        return csv_text(info)
    from .sources import _stamp

    start = "" if info.start_ns is None else f"  starts {_stamp(info.start_ns)} (epoch s)"
    lines = [f"recording  {info.path}  ({info.format}, {info.messages} messages, "
             f"{info.duration_s:.3f} s){start}",
             f"read from  {_METHODS[info.method]}"]
    width = max([len(t.topic) for t in info.topics] + [5])
    type_width = max([len(t.type) for t in info.topics] + [4])
    lines.append(f"{'topic':<{width}}  {'type':<{type_width}}  {'count':>9}  {'rate Hz':>9}  "
                 f"{'jitter ms':>9}  {'span s (from start)':<21}  definition")
    for t in info.topics:
        span = ("-" if t.first_s is None else f"{t.first_s:.3f} .. {t.last_s:.3f}")
        lines.append(f"{t.topic:<{width}}  {t.type:<{type_width}}  {t.count:>9}  "
                     f"{number_text(t.rate_hz, '.4g'):>9}  "
                     f"{number_text(None if t.jitter_s is None else t.jitter_s * 1e3, '.3g'):>9}  "
                     f"{span:<21}  {t.definition}")
    missing = sorted({t.type for t in info.topics if t.definition == "missing"})
    if missing:
        lines.append(f"no definition for {', '.join(missing)}: give the source types: "
                     f"[path/to/msg_dir, ...] (.msg files) or source a ROS installation "
                     f"(AMENT_PREFIX_PATH) that has them")
    lines.append(f"fields of a topic: fibril_sim recording info {info.path} --fields TOPIC")
    return "\n".join(lines) + "\n"


_METHODS = {"index": "the storage's summary and index (no message read)",
            "scan": "a scan of every record (the MCAP file has no index)",
            "sampled": f"the sqlite3 tables; rate and jitter from {_SAMPLE_BLOCKS} blocks of "
                       f"{_SAMPLE_ROWS} rows"}
