"""What can be checked of an MCAP storage file before its messages are trusted.

An MCAP file may carry CRC32 checksums (per chunk, of the data section, of the summary); a
file with them is checked byte for byte. rosbags and other writers leave them 0, and then a
flipped bit inside a message's payload cannot be found by anyone: ``check_mcap`` says so in a
warning. Everything else is checked against the file's own redundancy, so that damage to the
structure is an error instead of a silently changed or dropped message:

* every record's length fits the file, and the records end exactly at the footer;
* every chunk's records fit its declared size, its messages lie in its declared time range;
* each message (channel, log time, offset) is in the chunk's message index, and each index
  entry names a message;
* the summary's channels and schemas equal the data section's, its statistics (message
  count, per-channel counts, chunk count) and chunk index equal what the chunks hold.

Damage raises ``McapDamage`` (a one-line reason with the byte offset); the caller names the
recording. Chunks are decompressed with rosbags' own decompressors (lz4, zstd).
"""

from __future__ import annotations

import mmap
import os
import struct
from binascii import crc32
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

__all__ = ["MAGIC", "McapDamage", "McapIntegrity", "check_mcap"]

MAGIC = b"\x89MCAP0\r\n"
_FOOTER, _SCHEMA, _CHANNEL, _MESSAGE, _CHUNK = 0x02, 0x03, 0x04, 0x05, 0x06
_MESSAGE_INDEX, _CHUNK_INDEX, _STATISTICS, _DATA_END = 0x07, 0x08, 0x0B, 0x0F
_U16, _U32, _U64 = struct.Struct("<H"), struct.Struct("<I"), struct.Struct("<Q")
_RECORD = struct.Struct("<BQ")  # opcode, length
_MESSAGE_HEAD = struct.Struct("<HIQ")  # channel id, sequence, log time


class McapDamage(ValueError):
    """The file contradicts itself (a length, an index, a count or a checksum)."""


@dataclass(frozen=True)
class McapIntegrity:
    """What the check found: counts, and whether the message bytes were checksummed."""

    messages: int
    chunks: int
    crc_checked: bool  # every message is covered by a CRC that matched
    warnings: tuple[str, ...]


class _Cursor:
    """Little-endian fields of one record's content; running past its end is damage."""

    def __init__(self, data: memoryview | bytes | mmap.mmap, start: int, end: int,
                 what: str) -> None:
        self.data, self.at, self.end, self.what = data, start, end, what

    def _take(self, size: int) -> memoryview | bytes:
        if size < 0 or self.at + size > self.end:
            raise McapDamage(f"{self.what} at byte {self.at} runs past its record")
        out = self.data[self.at:self.at + size]
        self.at += size
        return out

    def u16(self) -> int:
        return int(_U16.unpack(self._take(2))[0])

    def u32(self) -> int:
        return int(_U32.unpack(self._take(4))[0])

    def u64(self) -> int:
        return int(_U64.unpack(self._take(8))[0])

    def text(self) -> bytes:
        return bytes(self._take(self.u32()))

    def blob(self, size_bytes: int = 4) -> bytes:
        size = self.u32() if size_bytes == 4 else self.u64()
        return bytes(self._take(size))

    def rest(self) -> bytes:
        return bytes(self._take(self.end - self.at))


def _records(data: memoryview, start: int, end: int, where: str
             ) -> list[tuple[int, int, int, int]]:
    """(opcode, record start, content start, content end) of every record in [start, end)."""
    out = []
    at = start
    while at < end:
        if at + 9 > end:
            raise McapDamage(f"{where}: a record header at byte {at} is cut off")
        opcode = data[at]
        length = int(_U64.unpack(data[at + 1:at + 9])[0])
        if length > end - at - 9:
            raise McapDamage(f"{where}: the record at byte {at} (opcode {opcode:#04x}) claims "
                             f"{length} bytes, only {end - at - 9} remain")
        out.append((opcode, at, at + 9, at + 9 + length))
        at += 9 + length
    return out


def _decompress(compression: str, data: bytes, size: int, at: int) -> bytes:
    if compression == "":
        return data
    try:
        from rosbags.rosbag2.storage_mcap import DECOMPRESSORS
    except ImportError:  # pragma: no cover - an older or newer rosbags layout
        raise McapDamage(f"chunk at byte {at}: cannot decompress {compression!r}") from None
    if compression not in DECOMPRESSORS:
        raise McapDamage(f"chunk at byte {at}: unknown compression {compression!r}")
    try:
        return bytes(DECOMPRESSORS[compression](data, size))
    except Exception as exc:  # noqa: BLE001 - lz4 / zstd raise their own types
        raise McapDamage(f"chunk at byte {at}: {compression} data does not decompress "
                         f"({exc})") from None


@dataclass
class _Chunk:
    start: int
    length: int
    first: int
    last: int
    compression: str
    compressed: int
    uncompressed: int
    messages: dict[int, list[tuple[int, int]]]  # channel -> (log time, offset)
    indexes: dict[int, int]  # channel -> MessageIndex record offset
    index_end: int


def check_mcap(path: Path) -> McapIntegrity:
    """Check one MCAP file (see the module docstring); raises McapDamage or OSError. The
    file is mapped, not read into memory: one chunk at a time is held."""
    with path.open("rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        if size < 2 * len(MAGIC) + 29:
            raise McapDamage(f"{size} bytes is too short for an MCAP file (a cut file)")
        with mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
            data = memoryview(mapped)
            try:
                return _check(data, size)
            finally:
                data.release()


def _check(data: memoryview, size: int) -> McapIntegrity:
    if data[:8] != MAGIC or data[size - 8:] != MAGIC:
        raise McapDamage("the MCAP magic bytes at its start or end are missing (a cut or "
                         "damaged file)")
    footer_at = size - 8 - 29
    if data[footer_at] != _FOOTER or int(_U64.unpack(data[footer_at + 1:footer_at + 9])[0]) != 20:
        raise McapDamage(f"no MCAP footer at byte {footer_at}")
    foot = _Cursor(data, footer_at + 9, footer_at + 29, "the footer")
    summary_start, _summary_offsets, summary_crc = foot.u64(), foot.u64(), foot.u32()
    if summary_start and not 8 <= summary_start <= footer_at:
        raise McapDamage(f"the footer's summary start {summary_start} is outside the file")

    schemas: dict[int, bytes] = {}
    channels: dict[int, bytes] = {}
    chunks: list[_Chunk] = []
    loose: Counter[int] = Counter()  # messages outside chunks, per channel
    unchecked_chunks = 0
    data_crc: int | None = None
    data_end_at: int | None = None
    summary: list[tuple[int, int, int, int]] = []
    in_summary = False
    for opcode, at, start, end in _records(data, 8, footer_at, "the file"):
        if summary_start and at == summary_start:
            in_summary = True
        if in_summary:
            summary.append((opcode, at, start, end))
            continue
        if opcode in (_SCHEMA, _CHANNEL):
            _declare(schemas if opcode == _SCHEMA else channels, bytes(data[start:end]),
                     "schema" if opcode == _SCHEMA else "channel", at)
        elif opcode == _MESSAGE:
            loose[_Cursor(data, start, end, "a message").u16()] += 1
        elif opcode == _CHUNK:
            chunk, crc_given = _read_chunk(data, at, start, end, schemas, channels)
            unchecked_chunks += not crc_given
            chunks.append(chunk)
        elif opcode == _MESSAGE_INDEX:
            if not chunks:
                raise McapDamage(f"a message index at byte {at} follows no chunk")
            _check_message_index(data, at, start, end, chunks[-1])
        elif opcode == _DATA_END:
            data_crc = _Cursor(data, start, end, "the data end").u32()
            data_end_at = at
    if summary_start and not in_summary:
        raise McapDamage(f"no record starts at the footer's summary start {summary_start}")
    if data_end_at is not None and data_crc:
        if crc32(data[:data_end_at]) != data_crc:
            raise McapDamage("the data section's checksum does not match its bytes")
    if summary_start and summary_crc:
        if crc32(data[summary_start:footer_at + 9 + 16]) != summary_crc:
            raise McapDamage("the summary's checksum does not match its bytes")
    indexed = any(c.indexes for c in chunks)
    counts = Counter(loose)
    for chunk in chunks:
        for channel, entries in chunk.messages.items():
            if indexed and channel not in chunk.indexes:
                raise McapDamage(f"chunk at byte {chunk.start}: {len(entries)} message(s) of "
                                 f"channel {channel}, which its message index does not list")
            counts[channel] += len(entries)
    warnings = _check_summary(data, summary, schemas, channels, chunks, counts)
    for channel in counts:
        if channel not in channels:
            raise McapDamage(f"{counts[channel]} message(s) of channel {channel}, which the "
                             f"file does not declare")
    checked = (bool(data_crc) or (unchecked_chunks == 0 and not loose))
    if not checked:
        warnings.insert(0, "it was written without checksums (chunk CRC 0, as rosbags writes), "
                           "so a damaged message payload cannot be detected; its record "
                           "lengths, message index and counts were checked")
    return McapIntegrity(sum(counts.values()), len(chunks), checked, tuple(warnings))


def _declare(known: dict[int, bytes], record: bytes, kind: str, at: int) -> None:
    """A schema or channel record (its id first); every copy of one id must be equal."""
    if len(record) < 2:
        raise McapDamage(f"the {kind} record at byte {at} is too short")
    ident = int(_U16.unpack(record[:2])[0])
    if known.setdefault(ident, record) != record:
        raise McapDamage(f"the {kind} {ident} at byte {at} differs from another copy of it")


def _read_chunk(data: memoryview, at: int, start: int, end: int, schemas: dict[int, bytes],
                channels: dict[int, bytes]) -> tuple[_Chunk, bool]:
    what = f"chunk at byte {at}"
    cursor = _Cursor(data, start, end, what)
    first, last, uncompressed, crc = cursor.u64(), cursor.u64(), cursor.u64(), cursor.u32()
    try:
        compression = cursor.text().decode()
    except UnicodeDecodeError:
        raise McapDamage(f"{what}: its compression name is not text") from None
    records = cursor.blob(8)
    if cursor.at != end:
        raise McapDamage(f"{what}: {end - cursor.at} byte(s) after its records")
    body = _decompress(compression, records, uncompressed, at)
    if len(body) != uncompressed:
        raise McapDamage(f"{what}: {len(body)} record byte(s), it declares {uncompressed}")
    if crc and crc32(body) != crc:
        raise McapDamage(f"{what}: its checksum does not match its bytes")
    messages: dict[int, list[tuple[int, int]]] = {}
    header = _RECORD.unpack_from
    fields = _MESSAGE_HEAD.unpack_from
    size = len(body)
    offset = 0
    while offset < size:  # the hot loop of a large bag: plain unpacks, no objects
        if offset + 9 > size:
            raise McapDamage(f"{what}: a record header at offset {offset} is cut off")
        opcode, length = header(body, offset)
        stop = offset + 9 + length
        if stop > size:
            raise McapDamage(f"{what}: the record at offset {offset} (opcode {opcode:#04x}) "
                             f"claims {length} bytes, only {size - offset - 9} remain")
        if opcode == _MESSAGE:
            if length < 22:
                raise McapDamage(f"{what}: the message at offset {offset} is {length} bytes, "
                                 f"shorter than its header")
            channel, _sequence, log_time = fields(body, offset + 9)
            if not first <= log_time <= last:
                raise McapDamage(f"{what}: a message at offset {offset} has log time "
                                 f"{log_time}, outside the chunk's {first}..{last}")
            found = messages.get(channel)
            if found is None:
                found = messages[channel] = []
            found.append((log_time, offset))
        elif opcode in (_SCHEMA, _CHANNEL):
            _declare(schemas if opcode == _SCHEMA else channels, body[offset + 9:stop],
                     "schema" if opcode == _SCHEMA else "channel", at)
        offset = stop
    chunk = _Chunk(at, end - at, first, last, compression, len(records), uncompressed,
                   messages, {}, end)
    return chunk, bool(crc)


def _check_message_index(data: memoryview, at: int, start: int, end: int,
                         chunk: _Chunk) -> None:
    cursor = _Cursor(data, start, end, f"the message index at byte {at}")
    channel = cursor.u16()
    length = cursor.u32()
    if length % 16 or cursor.at + length != end:
        raise McapDamage(f"the message index at byte {at}: {length} entry byte(s) do not fit "
                         f"its record")
    flat = struct.unpack_from(f"<{length // 8}Q", data, cursor.at)
    entries = sorted(zip(flat[0::2], flat[1::2]))
    held = sorted(chunk.messages.get(channel, []))
    if entries != held:
        raise McapDamage(f"the message index at byte {at} lists {len(entries)} message(s) of "
                         f"channel {channel}; the chunk at byte {chunk.start} holds "
                         f"{len(held)} that differ from it (a changed time, length or "
                         f"channel)")
    if channel in chunk.indexes:
        raise McapDamage(f"the message index at byte {at}: channel {channel} is indexed twice")
    chunk.indexes[channel] = at
    chunk.index_end = end


def _check_summary(data: memoryview, summary: list[tuple[int, int, int, int]],
                   schemas: dict[int, bytes], channels: dict[int, bytes],
                   chunks: list[_Chunk], counts: Counter[int]) -> list[str]:
    """The summary section against the data section; warnings for what it lacks."""
    if not summary:
        return ["it has no summary section, so its message counts cannot be checked"]
    statistics = None
    indexed: list[tuple[int, _Cursor]] = []
    for opcode, at, start, end in summary:
        if opcode in (_SCHEMA, _CHANNEL):
            _declare(schemas if opcode == _SCHEMA else channels, bytes(data[start:end]),
                     "schema" if opcode == _SCHEMA else "channel", at)
        elif opcode == _STATISTICS:
            statistics = _Cursor(data, start, end, f"the statistics at byte {at}")
        elif opcode == _CHUNK_INDEX:
            indexed.append((at, _Cursor(data, start, end, f"the chunk index at byte {at}")))
    warnings = []
    if statistics is None:
        warnings.append("its summary has no statistics, so its message counts cannot be "
                        "checked")
    else:
        total = statistics.u64()
        statistics.u16(), statistics.u32(), statistics.u32(), statistics.u32()
        chunk_count = statistics.u32()
        statistics.u64(), statistics.u64()
        length = statistics.u32()
        if statistics.at + length != statistics.end or length % 10:
            raise McapDamage(f"{statistics.what}: its channel counts do not fit its record")
        per_channel = {}
        for _ in range(length // 10):
            channel = statistics.u16()
            per_channel[channel] = statistics.u64()
        found = sum(counts.values())
        if total != found:
            raise McapDamage(f"the statistics count {total} message(s), the file holds {found}")
        if chunk_count != len(chunks):
            raise McapDamage(f"the statistics count {chunk_count} chunk(s), the file holds "
                             f"{len(chunks)}")
        for channel in set(per_channel) | set(counts):
            if per_channel.get(channel, 0) != counts.get(channel, 0):
                raise McapDamage(f"the statistics count {per_channel.get(channel, 0)} "
                                 f"message(s) on channel {channel}, the file holds "
                                 f"{counts.get(channel, 0)}")
    if indexed:
        by_start = {c.start: c for c in chunks}
        for at, cursor in indexed:
            first, last, offset, length = cursor.u64(), cursor.u64(), cursor.u64(), cursor.u64()
            chunk = by_start.get(offset)
            if chunk is None:
                raise McapDamage(f"{cursor.what} points at byte {offset}, where no chunk starts")
            size = cursor.u32()
            index_offsets = {}
            stop = cursor.at + size
            if size % 10 or stop > cursor.end:
                raise McapDamage(f"{cursor.what}: its index offsets do not fit its record")
            while cursor.at < stop:
                channel = cursor.u16()
                index_offsets[channel] = cursor.u64()
            cursor.u64()  # message_index_length
            compression = cursor.text().decode(errors="replace")
            compressed, uncompressed = cursor.u64(), cursor.u64()
            if ((first, last, length, compression, compressed, uncompressed, index_offsets)
                    != (chunk.first, chunk.last, chunk.length, chunk.compression,
                        chunk.compressed, chunk.uncompressed, chunk.indexes)):
                raise McapDamage(f"{cursor.what} does not describe the chunk at byte {offset} "
                                 f"(times, sizes or message index offsets differ)")
        if len(indexed) != len(chunks):
            raise McapDamage(f"the chunk index lists {len(indexed)} chunk(s), the file holds "
                             f"{len(chunks)}")
    return warnings

