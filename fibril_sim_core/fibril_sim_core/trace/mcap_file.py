"""The MCAP container, written and read with integrity checks (https://mcap.dev/spec).

Writing: ``McapFile`` appends whole zstd chunks, each followed by its message indexes, and on
``finish`` the data-end record, the summary (schemas, channels, statistics, chunk and metadata
indexes), summary offsets and footer. Schema and channel records also go into the data section
before the first chunk that uses them, so a file cut short (a killed process) still names its
channels. Every chunk carries the CRC-32 of its uncompressed records.

Reading: ``McapIndex`` opens a file from its summary or, when the footer or summary is missing
or damaged, by scanning the data section record by record; ``chunk_messages`` decompresses one
chunk and checks it against its CRC and message indexes. Damage is reported as ``McapDamage``
(what and where), never as a half-read chunk.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

import numpy as np
import zstandard

__all__ = ["MAGIC", "ChannelInfo", "ChunkInfo", "McapDamage", "McapFile", "McapIndex",
           "chunk_messages"]

MAGIC = b"\x89MCAP0\r\n"

OP_HEADER = 0x01
OP_FOOTER = 0x02
OP_SCHEMA = 0x03
OP_CHANNEL = 0x04
OP_MESSAGE = 0x05
OP_CHUNK = 0x06
OP_MESSAGE_INDEX = 0x07
OP_CHUNK_INDEX = 0x08
OP_STATISTICS = 0x0B
OP_METADATA = 0x0C
OP_METADATA_INDEX = 0x0D
OP_SUMMARY_OFFSET = 0x0E
OP_DATA_END = 0x0F

#: The MCAP message record header in front of the message data: opcode, record length,
#: channel id, sequence, log time, publish time.
MESSAGE_HEADER = 1 + 8 + 2 + 4 + 8 + 8
_RECORD = struct.Struct("<BQ")
_FOOTER_SIZE = 1 + 8 + 8 + 8 + 4


def _string(text: str) -> bytes:
    data = text.encode()
    return struct.pack("<I", len(data)) + data


def _map(items: dict[str, str]) -> bytes:
    body = b"".join(_string(k) + _string(v) for k, v in sorted(items.items()))
    return struct.pack("<I", len(body)) + body


def _record(opcode: int, body: bytes) -> bytes:
    return _RECORD.pack(opcode, len(body)) + body


class McapDamage(Exception):
    """Part of an MCAP file is unreadable; ``where`` says which part, ``args[0]`` why."""

    def __init__(self, reason: str, where: str = "") -> None:
        super().__init__(reason)
        self.where = where


# -- writing ----------------------------------------------------------------------------------


@dataclass(slots=True)
class _ChunkRecord:
    start: int
    end: int
    offset: int
    length: int
    index_offsets: dict[int, int]
    index_length: int
    compressed_size: int
    uncompressed_size: int


class McapFile:
    """An MCAP file being written by one thread (the trace writer's worker)."""

    def __init__(self, path: Path, *, profile: str, library: str, level: int = 1) -> None:
        self.path = path
        self._file: BinaryIO = path.open("xb")
        self._position = 0
        self._crc = 0
        self._schemas: dict[int, bytes] = {}
        self._channels: dict[int, bytes] = {}
        self._unwritten: list[bytes] = []
        self._chunks: list[_ChunkRecord] = []
        self._metadata: list[tuple[int, int, str]] = []
        self.channel_counts: dict[int, int] = {}
        self.start_time: int | None = None
        self.end_time: int | None = None
        self._compressor = zstandard.ZstdCompressor(level=level)
        self._write(MAGIC + _record(OP_HEADER, _string(profile) + _string(library)))

    def _write(self, data: bytes | memoryview) -> None:
        self._file.write(data)
        self._position += len(data)
        self._crc = zlib.crc32(data, self._crc)

    def add_schema(self, schema_id: int, name: str, encoding: str, data: bytes) -> None:
        body = struct.pack("<H", schema_id) + _string(name) + _string(encoding) + (
            struct.pack("<I", len(data)) + data)
        self._schemas[schema_id] = record = _record(OP_SCHEMA, body)
        self._unwritten.append(record)

    def add_channel(self, channel_id: int, schema_id: int, topic: str, encoding: str,
                    metadata: dict[str, str]) -> None:
        body = struct.pack("<HH", channel_id, schema_id) + _string(topic) + _string(encoding) + (
            _map(metadata))
        self._channels[channel_id] = record = _record(OP_CHANNEL, body)
        self._unwritten.append(record)
        self.channel_counts[channel_id] = 0

    def write_chunk(self, records: bytes, channels: np.ndarray, log_times: np.ndarray,
                    offsets: np.ndarray) -> None:
        """Append one chunk of message records (already laid out) and its message indexes.

        ``channels``, ``log_times`` and ``offsets`` describe each message record in ``records``.
        """
        if self._unwritten:  # channels first, so a truncated file still names them
            self._write(b"".join(self._unwritten))
            self._unwritten.clear()
        start, end = int(log_times.min()), int(log_times.max())
        compressed = self._compressor.compress(records)
        head = struct.pack("<QQQI", start, end, len(records), zlib.crc32(records)) + (
            _string("zstd") + struct.pack("<Q", len(compressed)))
        chunk_offset = self._position
        header = _RECORD.pack(OP_CHUNK, len(head) + len(compressed)) + head
        self._file.write(header)
        self._file.write(compressed)
        self._crc = zlib.crc32(compressed, zlib.crc32(header, self._crc))
        self._position += len(header) + len(compressed)
        chunk_length = self._position - chunk_offset
        # Message indexes: per channel, (log time, offset) in log-time order (stable).
        order = np.lexsort((np.arange(channels.size), log_times, channels))
        sorted_channels = channels[order]
        pairs = np.empty((order.size, 2), dtype="<u8")
        pairs[:, 0] = log_times[order]
        pairs[:, 1] = offsets[order]
        ids, firsts, counts = np.unique(sorted_channels, return_index=True, return_counts=True)
        index_offsets: dict[int, int] = {}
        parts = []
        at = self._position
        for cid, first, count in zip(ids.tolist(), firsts.tolist(), counts.tolist()):
            body = struct.pack("<HI", cid, 16 * count) + pairs[first:first + count].tobytes()
            index_offsets[cid] = at
            record = _record(OP_MESSAGE_INDEX, body)
            parts.append(record)
            at += len(record)
            self.channel_counts[cid] += count
        index = b"".join(parts)
        self._write(index)
        self._file.flush()  # whole chunks reach the OS: a killed process keeps them
        self._chunks.append(_ChunkRecord(start, end, chunk_offset, chunk_length, index_offsets,
                                         len(index), len(compressed), len(records)))
        self.start_time = start if self.start_time is None else min(self.start_time, start)
        self.end_time = end if self.end_time is None else max(self.end_time, end)

    def finish(self, metadata: dict[str, dict[str, str]]) -> None:
        """Write metadata records, data end, summary and footer; close the file."""
        if self._unwritten:
            self._write(b"".join(self._unwritten))
            self._unwritten.clear()
        for name, values in metadata.items():
            record = _record(OP_METADATA, _string(name) + _map(values))
            self._metadata.append((self._position, len(record), name))
            self._write(record)
        self._write(_record(OP_DATA_END, struct.pack("<I", self._crc)))
        summary_start = self._position
        groups: list[tuple[int, bytes]] = [
            (OP_SCHEMA, b"".join(self._schemas[k] for k in sorted(self._schemas))),
            (OP_CHANNEL, b"".join(self._channels[k] for k in sorted(self._channels))),
        ]
        counts = b"".join(struct.pack("<HQ", k, v) for k, v in sorted(self.channel_counts.items()))
        statistics = struct.pack(
            "<QHIIIIQQ", sum(self.channel_counts.values()), len(self._schemas),
            len(self._channels), 0, len(self._metadata), len(self._chunks),
            self.start_time or 0, self.end_time or 0) + struct.pack("<I", len(counts)) + counts
        groups.append((OP_STATISTICS, _record(OP_STATISTICS, statistics)))
        groups.append((OP_CHUNK_INDEX, b"".join(_record(OP_CHUNK_INDEX, self._chunk_index(c))
                                                for c in self._chunks)))
        groups.append((OP_METADATA_INDEX, b"".join(
            _record(OP_METADATA_INDEX, struct.pack("<QQ", o, n) + _string(name))
            for o, n, name in self._metadata)))
        summary = bytearray()
        offsets = bytearray()
        for opcode, data in groups:
            if data:
                offsets += _record(OP_SUMMARY_OFFSET, struct.pack(
                    "<BQQ", opcode, summary_start + len(summary), len(data)))
                summary += data
        summary_offset_start = summary_start + len(summary)
        tail = bytes(summary + offsets) + _RECORD.pack(OP_FOOTER, 20) + struct.pack(
            "<QQ", summary_start, summary_offset_start)
        self._write(tail + struct.pack("<I", zlib.crc32(tail)) + MAGIC)
        self._file.close()

    def abandon(self) -> None:
        """Close without a summary (after a write failure)."""
        self._file.close()

    @staticmethod
    def _chunk_index(c: _ChunkRecord) -> bytes:
        offsets = b"".join(struct.pack("<HQ", k, v) for k, v in sorted(c.index_offsets.items()))
        return struct.pack("<QQQQ", c.start, c.end, c.offset, c.length) + (
            struct.pack("<I", len(offsets)) + offsets + struct.pack("<Q", c.index_length)
            + _string("zstd") + struct.pack("<QQ", c.compressed_size, c.uncompressed_size))


# -- reading ----------------------------------------------------------------------------------


@dataclass(slots=True)
class ChannelInfo:
    id: int
    topic: str
    encoding: str
    schema_name: str
    metadata: dict[str, str]


@dataclass(slots=True)
class ChunkInfo:
    number: int  # position in the file, from 0
    offset: int  # of the chunk record
    length: int  # of the chunk record
    start: int  # message log times
    end: int
    index_offsets: dict[int, int] = field(default_factory=dict)
    index_length: int | None = None  # None: unknown (truncated file: read what follows)


class _Bytes:
    """A bounds-checked little-endian reader over a bytes-like object."""

    __slots__ = ("at", "data", "end")

    def __init__(self, data: bytes | memoryview, at: int = 0, end: int | None = None) -> None:
        self.data = data
        self.at = at
        self.end = len(data) if end is None else end

    def take(self, size: int) -> bytes | memoryview:
        if size < 0 or self.at + size > self.end:
            raise McapDamage("record runs past its end")
        out = self.data[self.at:self.at + size]
        self.at += size
        return out

    def unpack(self, fmt: struct.Struct) -> tuple[int, ...]:  # (integer formats only: BHIQ)
        return fmt.unpack(self.take(fmt.size))

    def string(self) -> str:
        (size,) = self.unpack(_U32)
        try:
            return bytes(self.take(size)).decode()
        except UnicodeDecodeError:
            raise McapDamage("string is not UTF-8") from None

    def bytes_(self) -> bytes:
        (size,) = self.unpack(_U32)
        return bytes(self.take(size))

    def string_map(self) -> dict[str, str]:
        (size,) = self.unpack(_U32)
        inner = _Bytes(self.data, self.at, self.at + size)
        self.take(size)
        items = {}
        while inner.at < inner.end:
            key = inner.string()
            items[key] = inner.string()
        return items

    def u64_map(self, key: struct.Struct) -> dict[int, int]:
        (size,) = self.unpack(_U32)
        raw = bytes(self.take(size))
        if size % key.size:
            raise McapDamage("map length is not a whole number of entries")
        return dict(key.iter_unpack(raw))


_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
_H_Q = struct.Struct("<HQ")
_CHUNK_HEAD = struct.Struct("<QQQI")
_MESSAGE = struct.Struct("<HIQQ")


class McapIndex:
    """Where everything is in an MCAP file: channels, schemas, chunks, statistics.

    ``complete`` is False when the file has no valid footer and summary (it was never finished
    or was cut short); the index then comes from scanning the data section, and ``truncated_at``
    is the byte offset where the readable part ends. ``summary_problem`` says why the summary
    was not used.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.size = path.stat().st_size
        self.channels: dict[int, ChannelInfo] = {}
        self.schemas: dict[int, tuple[str, str]] = {}
        self.chunks: list[ChunkInfo] = []
        self.channel_counts: dict[int, int] | None = None  # from the statistics
        self.metadata: dict[str, dict[str, str]] = {}
        self.complete = False
        self.truncated_at: int | None = None
        self.summary_problem = ""
        self.scan_problem = ""
        with path.open("rb") as f:
            if f.read(len(MAGIC)) != MAGIC:
                raise McapDamage("not an MCAP file (bad magic at the start)")
            try:
                self._read_summary(f)
                self.complete = True
            except McapDamage as exc:
                self.summary_problem = str(exc)
                self.channels.clear()
                self.schemas.clear()
                self.chunks.clear()
                self.channel_counts = None
                self.metadata.clear()
                self._scan(f)

    # -- summary ------------------------------------------------------------------------------

    def _read_summary(self, f: BinaryIO) -> None:
        if self.size < 2 * len(MAGIC) + _FOOTER_SIZE:
            raise McapDamage("no footer (file ends early)")
        f.seek(self.size - len(MAGIC) - _FOOTER_SIZE)
        tail = f.read(_FOOTER_SIZE + len(MAGIC))
        if tail[-len(MAGIC):] != MAGIC or tail[0] != OP_FOOTER:
            raise McapDamage("no footer (the file was not closed or was cut short)")
        summary_start, offsets_start, crc = struct.unpack("<QQI", tail[9:29])
        footer_start = self.size - len(MAGIC) - _FOOTER_SIZE
        if not summary_start or not len(MAGIC) <= summary_start <= footer_start:
            raise McapDamage("footer has no valid summary offset")
        f.seek(summary_start)
        summary = f.read(footer_start - summary_start)
        if crc and zlib.crc32(tail[:25], zlib.crc32(summary)) != crc:
            raise McapDamage("summary checksum mismatch")
        if offsets_start and not summary_start <= offsets_start <= footer_start:
            raise McapDamage("footer has an invalid summary offset start")
        end = (offsets_start or footer_start) - summary_start
        reader = _Bytes(summary, 0, end)
        chunk_indexes = []
        while reader.at < reader.end:
            opcode, length = reader.unpack(_RECORD)
            body = _Bytes(reader.take(length))
            if opcode == OP_SCHEMA:
                self._schema(body)
            elif opcode == OP_CHANNEL:
                self._channel(body)
            elif opcode == OP_STATISTICS:
                body.unpack(struct.Struct("<QHIIIIQQ"))
                self.channel_counts = body.u64_map(_H_Q)
            elif opcode == OP_CHUNK_INDEX:
                start, stop, offset, length = body.unpack(struct.Struct("<QQQQ"))
                offsets = body.u64_map(_H_Q)
                (index_length,) = body.unpack(_U64)
                chunk_indexes.append(ChunkInfo(0, offset, length, start, stop, offsets,
                                               index_length))
        chunk_indexes.sort(key=lambda c: c.offset)
        last = 0
        for number, chunk in enumerate(chunk_indexes):
            chunk.number = number
            if chunk.offset < last or chunk.offset + chunk.length > summary_start:
                raise McapDamage("chunk index points outside the data section")
            last = chunk.offset + chunk.length
        self.chunks = chunk_indexes
        self.metadata = self._scan_metadata(f, summary_start)

    def _scan_metadata(self, f: BinaryIO, limit: int) -> dict[str, dict[str, str]]:
        """Metadata records sit between the last chunk and the data end: read them there."""
        start = len(MAGIC)
        if self.chunks:
            last = self.chunks[-1]
            start = last.offset + last.length + (last.index_length or 0)
        f.seek(start)
        data = f.read(max(0, limit - start))
        reader = _Bytes(data)
        found: dict[str, dict[str, str]] = {}
        try:
            while reader.at < reader.end:
                opcode, length = reader.unpack(_RECORD)
                body = _Bytes(reader.take(length))
                if opcode == OP_METADATA:
                    name = body.string()
                    found[name] = body.string_map()
                elif opcode == OP_DATA_END:
                    break
        except McapDamage:
            pass  # metadata is a convenience copy of metadata.yaml
        return found

    def _schema(self, body: _Bytes) -> None:
        (schema_id,) = body.unpack(struct.Struct("<H"))
        name = body.string()
        self.schemas[schema_id] = (name, body.string())

    def _channel(self, body: _Bytes) -> None:
        channel_id, schema_id = body.unpack(struct.Struct("<HH"))
        topic = body.string()
        encoding = body.string()
        metadata = body.string_map()
        schema = self.schemas.get(schema_id, ("", ""))[0]
        self.channels[channel_id] = ChannelInfo(channel_id, topic, encoding, schema, metadata)

    # -- scanning -----------------------------------------------------------------------------

    def _scan(self, f: BinaryIO) -> None:
        """Index the data section record by record, up to the first incomplete record."""
        at = len(MAGIC)
        f.seek(at)
        size = self.size
        pending_channels: list[bytes] = []
        while True:
            head = f.read(_RECORD.size)
            if len(head) < _RECORD.size:
                break
            opcode, length = _RECORD.unpack(head)
            if at + _RECORD.size + length > size:
                break  # the last record was being written
            if opcode == OP_CHUNK:
                if length < _CHUNK_HEAD.size + 4 + 8:
                    self.scan_problem = f"invalid chunk record at byte {at}"
                    break
                raw = f.read(min(length, _CHUNK_HEAD.size + 4 + 64))
                try:
                    start, stop, _, _ = _CHUNK_HEAD.unpack_from(raw)
                except struct.error:
                    break
                self.chunks.append(ChunkInfo(len(self.chunks), at, _RECORD.size + length,
                                             start, stop))
                f.seek(at + _RECORD.size + length)
            elif opcode == OP_MESSAGE_INDEX and self.chunks:
                raw = f.read(min(length, 2))
                chunk = self.chunks[-1]
                if len(raw) == 2 and chunk.offset + chunk.length + (chunk.index_length or 0) == at:
                    chunk.index_offsets[struct.unpack("<H", raw)[0]] = at
                    chunk.index_length = (chunk.index_length or 0) + _RECORD.size + length
                f.seek(at + _RECORD.size + length)
            elif opcode in (OP_SCHEMA, OP_CHANNEL, OP_METADATA):
                body = _Bytes(f.read(length))
                try:
                    if opcode == OP_SCHEMA:
                        self._schema(body)
                    elif opcode == OP_CHANNEL:
                        pending_channels.append(bytes(body.data))
                    else:
                        name = body.string()
                        self.metadata[name] = body.string_map()
                except McapDamage:
                    self.scan_problem = f"damaged record at byte {at}"
                    break
            elif opcode == OP_DATA_END:
                at += _RECORD.size + length
                break
            else:
                f.seek(at + _RECORD.size + length)
            at += _RECORD.size + length
        for raw in pending_channels:  # schemas may follow channels in the data section
            try:
                self._channel(_Bytes(raw))
            except McapDamage:
                continue
        self.truncated_at = at


def chunk_messages(f: BinaryIO, chunk: ChunkInfo
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[bytes]]:
    """Decompress and check one chunk: (channel ids, log times, sequences, message data) in
    file order.

    Raises:
        McapDamage: the chunk does not decompress, fails its CRC, is malformed, or disagrees
            with its message indexes.
    """
    f.seek(chunk.offset)
    raw = f.read(chunk.length)
    if len(raw) != chunk.length:
        raise McapDamage("chunk record is cut short")
    reader = _Bytes(raw)
    opcode, length = reader.unpack(_RECORD)
    if opcode != OP_CHUNK or _RECORD.size + length != chunk.length:
        raise McapDamage("no chunk record where the index says")
    start, stop, size, crc = reader.unpack(_CHUNK_HEAD)
    if (start, stop) != (chunk.start, chunk.end):
        raise McapDamage("chunk header disagrees with the chunk index")
    compression = reader.string()
    (compressed_size,) = reader.unpack(_U64)
    compressed = reader.take(compressed_size)
    if compression == "zstd":
        try:
            data = zstandard.ZstdDecompressor().decompress(compressed, max_output_size=size)
        except zstandard.ZstdError as exc:
            raise McapDamage(f"zstd data does not decompress ({exc})") from None
    elif compression == "lz4":
        try:
            # optional, so imported here: only bags other tools wrote use lz4
            import lz4.frame  # type: ignore[import-untyped]  # lz4 ships no type information
        except ImportError:
            raise McapDamage("lz4-compressed chunk, but the lz4 module is not installed "
                             "(pip install lz4, or apt install python3-lz4)") from None
        try:
            data = lz4.frame.decompress(bytes(compressed))
        except Exception as exc:  # noqa: BLE001 - any lz4 failure is damage
            raise McapDamage(f"lz4 data does not decompress ({exc})") from None
    elif compression == "":
        data = bytes(compressed)
    else:
        raise McapDamage(f"unsupported chunk compression {compression!r}")
    if len(data) != size:
        raise McapDamage(f"decompressed size {len(data)} differs from the recorded {size}")
    if crc and zlib.crc32(data) != crc:
        raise McapDamage("CRC mismatch")
    channels: list[int] = []
    times: list[int] = []
    sequences: list[int] = []
    offsets: list[int] = []
    messages: list[bytes] = []
    view = memoryview(data)
    at = 0
    end = len(data)
    unpack_record = _RECORD.unpack_from
    unpack_message = _MESSAGE.unpack_from
    while at < end:
        if at + _RECORD.size > end:
            raise McapDamage(f"record header cut short at byte {at} of the chunk")
        opcode, length = unpack_record(data, at)
        body = at + _RECORD.size
        if body + length > end:
            raise McapDamage(f"record at byte {at} of the chunk runs past its end")
        if opcode == OP_MESSAGE:
            if length < _MESSAGE.size:
                raise McapDamage(f"message record at byte {at} of the chunk is too short")
            channel, sequence, log_time, _ = unpack_message(data, body)
            if not start <= log_time <= stop:
                raise McapDamage(f"message at byte {at} has a log time outside the chunk's")
            channels.append(channel)
            times.append(log_time)
            sequences.append(sequence)
            offsets.append(at)
            messages.append(bytes(view[body + _MESSAGE.size:body + length]))
        at = body + length
    channel_array = np.array(channels, dtype=np.int64)
    time_array = np.array(times, dtype=np.uint64)
    _check_indexes(f, chunk, channel_array, time_array, np.array(offsets, dtype=np.uint64))
    return channel_array, time_array, np.array(sequences, dtype=np.int64), messages


def _check_indexes(f: BinaryIO, chunk: ChunkInfo, channels: np.ndarray, times: np.ndarray,
                   offsets: np.ndarray) -> None:
    """The chunk's message index records must list exactly the messages it holds."""
    if not chunk.index_offsets:
        if chunk.index_length == 0 and channels.size:
            raise McapDamage("chunk has messages but no message index")
        return  # indexes are optional in MCAP (or lost with a truncated file's tail)
    present = set(np.unique(channels).tolist())
    if present != set(chunk.index_offsets):
        raise McapDamage("message indexes name other channels than the chunk holds")
    for channel, offset in chunk.index_offsets.items():
        f.seek(offset)
        head = f.read(_RECORD.size + 6)
        if len(head) < _RECORD.size + 6:
            raise McapDamage("message index cut short")
        opcode, length, cid, size = struct.unpack("<BQHI", head)
        if opcode != OP_MESSAGE_INDEX or cid != channel or size != length - 6 or size % 16:
            raise McapDamage(f"message index of channel {channel} is malformed")
        entries = np.frombuffer(f.read(size), dtype="<u8")
        if entries.size * 8 != size:
            raise McapDamage(f"message index of channel {channel} is cut short")
        entries = entries.reshape(-1, 2)
        mine = channels == channel
        if entries.shape[0] != int(mine.sum()):
            raise McapDamage(f"chunk holds {int(mine.sum())} messages of channel {channel}, "
                             f"its index lists {entries.shape[0]}")
        listed = entries[np.lexsort((entries[:, 0], entries[:, 1]))]
        held = np.stack((times[mine], offsets[mine]), axis=1)
        held = held[np.lexsort((held[:, 0], held[:, 1]))]
        if not np.array_equal(listed, held):
            raise McapDamage(f"message index of channel {channel} disagrees with the chunk")
