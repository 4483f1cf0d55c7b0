"""Where an instance's records go: the shapes of trace sink it accepts, declared, and the
hand-off of what it keeps for the trace between two hand-overs.

A trace sink is one of three shapes (``TraceWriter`` is the first):

* ``BlockSink``: takes record lists and ``SampleBlock``s. While the trace alone listens a
  sample delivered at once is kept as three list appends (its columns, see ``sample_block``),
  other records as objects; they are handed over as one block.
* ``RecordSink``: takes record lists (the hot path appends to a list).
* ``RecordWriter``: takes one record at a time (it is called like a subscriber).

Either of the first two is handed what was kept at the end of every ``advance()``, before a
reset and every ``TRACE_HANDOFF`` records (the writer's checks run then).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence, Sized
from typing import Protocol, runtime_checkable

from .records import Record, TraceRecord
from .sample_block import DeviceColumns, SampleBlock, TraceBuffer

__all__ = ["BlockSink", "Record", "RecordSink", "RecordWriter", "TraceHandoff",
           "TraceSink"]



@runtime_checkable
class RecordWriter(Protocol):
    """A sink taking one record at a time."""

    def write(self, record: Record, /) -> None: ...


@runtime_checkable
class RecordSink(Protocol):
    """A sink taking records in lists, in order."""

    def write_many(self, records: Sequence[TraceRecord], /) -> None: ...


@runtime_checkable
class BlockSink(RecordSink, Protocol):
    """A sink also taking ``SampleBlock``s (samples as columns, see ``sample_block``)."""

    def write_block(self, block: SampleBlock, /) -> None: ...


TraceSink = BlockSink | RecordSink | RecordWriter


class TraceHandoff:
    """What an instance keeps for its ``RecordSink`` / ``BlockSink`` between two hand-overs.

    ``keep`` takes one record (a list's append, or the columns' ``other``); ``kept`` is what
    says how much is kept (the columns' order, or the records themselves); ``columns`` is the
    column buffer when the sink takes blocks (None otherwise)."""

    __slots__ = ("blocks", "columns", "keep", "kept", "records", "sink")

    def __init__(self, sink: RecordSink, blocks: BlockSink | None,
                 devices: tuple[DeviceColumns, ...], state_sizes: tuple[int, ...]) -> None:
        self.sink = sink
        self.blocks = blocks
        self.records: list[Record] = []
        self.columns = None if blocks is None else TraceBuffer(devices, state_sizes)
        self.kept: Sized
        self.keep: Callable[[Record], None]
        if self.columns is not None:
            self.kept = self.columns.order
            self.keep = self.columns.other
        else:
            self.kept = self.records
            self.keep = self.records.append

    @classmethod
    def of(cls, sink: TraceSink, devices: tuple[DeviceColumns, ...],
           state_sizes: tuple[int, ...]) -> TraceHandoff | None:
        """The hand-off for ``sink``; None for a ``RecordWriter`` (a plain subscriber)."""
        if isinstance(sink, BlockSink):
            return cls(sink, sink, devices, state_sizes)
        if isinstance(sink, RecordSink):
            return cls(sink, None, devices, state_sizes)
        return None

    def hand_over(self, episode: int, session_offset_ns: int, timestep_ns: int, *,
                  settle: bool = False) -> None:
        """Give the kept records to the sink (``settle``: first make whole what an interrupted
        read left, see ``TraceBuffer.settle``)."""
        columns, blocks = self.columns, self.blocks
        if columns is not None and blocks is not None:
            if settle:
                columns.settle()
            if not columns.order:
                return
            if columns.only_records:  # someone else listens: records, as a list
                self.sink.write_many(columns.take_records())
            else:
                blocks.write_block(columns.take(episode, session_offset_ns, timestep_ns))
            return
        records = self.records
        if records:
            kept = records[:]
            records.clear()  # in place: ``keep`` is this list's append
            self.sink.write_many(kept)
