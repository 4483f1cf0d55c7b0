"""Who hears an instance's records: its collection, its subscribers and what they want, and its
trace. Kept apart from the stepping so that the stepping reads a few settled fields (``sinks``,
``emit_one``, ``heard``, ``hears_ingress``, ``hears_actuation``) instead of working out per
record who listens; they change only when someone subscribes, states an interest or polls.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sized

from .errors import InstanceError
from .records import ActuatorApplication, DeviceOutput, IngressRecord, StateSnapshot
from .sample_block import DeviceColumns, TraceBuffer
from .sinks import Record, RecordWriter, TraceHandoff, TraceSink

__all__ = ["Interest", "Listeners", "Sink"]

#: Something that takes records one at a time (a subscriber, a list's append).
Sink = Callable[[Record], None]

#: What the subscribers want, by record type: the ids of the devices / endpoints / sources
#: wanted (None: all of them); a type left out is wanted by nobody. None: everything.
Interest = Mapping[type, "frozenset[str] | None"]

#: The record types an instance emits to its sinks (EpisodeStart goes to every subscriber).
_MADE_HERE = (DeviceOutput, IngressRecord, ActuatorApplication, StateSnapshot)


class Listeners:
    """The sinks of one instance: ``sinks`` (the collection's append, then the subscribers
    wanting something, the trace's keeper among them), ``emit_one`` (the single sink when it
    is a list's append: the hot paths call it directly), and who hears what (``heard``: the
    indices of the devices whose samples someone takes).

    The trace is fixed for the instance's life: its ``handoff`` (a ``RecordSink`` /
    ``BlockSink``: ``trace_sink`` keeps records for it, ``kept`` says how many, and with a
    ``BlockSink`` ``trace_columns`` keeps the samples only it hears as columns) or, for a
    ``RecordWriter``, its ``write`` as one more subscriber."""

    def __init__(self, trace: TraceSink | None, collect: bool,
                 devices: tuple[DeviceColumns, ...], state_sizes: tuple[int, ...]) -> None:
        self.device_ids = tuple(d.device_id for d in devices)
        self.subscribers: list[Sink] = []
        self.collect = collect
        self.collected: list[Record] = []
        self.sinks: list[Sink] = []  # collection, then subscribers (changed in place)
        self.interest: Interest | None = None  # of the subscribers (set_interest)
        self.heard: frozenset[int] = frozenset()  # devices whose samples someone takes
        self.hears_ingress = False  # someone takes ingress records
        self.hears_actuation = False  # someone takes actuator application records
        self.handoff = None if trace is None else TraceHandoff.of(trace, devices, state_sizes)
        self.trace_columns: TraceBuffer | None = None
        self.trace_write: Sink | None = None
        self.kept: Sized = ()  # what is kept for the trace (its length: how much)
        self.trace_sink: Sink = _nobody
        if self.handoff is not None:
            self.trace_columns = self.handoff.columns
            self.kept = self.handoff.kept
            self.trace_sink = self.handoff.keep
            self.subscribers.append(self.trace_sink)
        elif isinstance(trace, RecordWriter):
            self.trace_write = trace.write
            self.subscribers.append(self.trace_write)
        elif trace is not None:
            raise InstanceError(f"create_instance: trace must have write_many or write "
                                f"(a TraceWriter), got a {type(trace).__name__}")
        # The single list sink, or None (then ``emit``; a bound method of this object kept
        # here would make it a reference cycle, freed only by the cyclic GC).
        self.emit_one: Sink | None = None
        self.update()

    def subscribe(self, callback: Sink) -> None:
        self.subscribers.append(callback)
        self.update()

    def set_interest(self, interest: Interest | None) -> None:
        self.interest = None if interest is None else dict(interest)
        self.update()

    def poll(self) -> list[Record]:
        records, self.collected = self.collected, []
        self.update()
        return records

    def emit(self, record: Record) -> None:
        for sink in self.sinks:
            sink(record)

    def update(self) -> None:
        """Work out the sinks and who hears what again (after any change of the above)."""
        # In place, like the subscriber list it mirrors: a callback that subscribes or polls
        # while a record is being emitted sees the same effect as before the sinks existed.
        interest = self.interest
        external = [s for s in self.subscribers if s is not self.trace_sink
                    and s is not self.trace_write]
        # Nobody wants anything the instance makes (a host's own records, e.g. frame timings,
        # do not count): the external sinks get nothing.
        quiet = (interest is not None and external
                 and not any(kind in interest for kind in _MADE_HERE))
        subscribers = [s for s in self.subscribers if s not in external] if quiet \
            else self.subscribers
        self.sinks[:] = ([self.collected.append] if self.collect else []) + subscribers
        # One sink that is a list's append (the collection or the trace's list): the hot
        # paths call it directly. It calls nothing back, so nobody can subscribe meanwhile.
        alone = len(self.sinks) == 1 and (not subscribers or
                                          subscribers[0] is self.trace_sink)
        self.emit_one = self.sinks[0] if alone else None
        everything = (self.collect or len(self.subscribers) > len(external)  # the trace
                      or interest is None)
        if not self.sinks:
            self.heard = frozenset()
            self.hears_ingress = self.hears_actuation = False
        elif everything or interest is None:
            self.heard = frozenset(range(len(self.device_ids)))
            self.hears_ingress = self.hears_actuation = True
        else:
            devices = interest.get(DeviceOutput, ())
            self.heard = frozenset(i for i, device_id in enumerate(self.device_ids)
                                   if devices is None or device_id in devices)
            self.hears_ingress = IngressRecord in interest
            self.hears_actuation = ActuatorApplication in interest


def _nobody(record: Record) -> None:
    """The trace sink of an instance without a RecordSink: never called (no list keeps)."""
