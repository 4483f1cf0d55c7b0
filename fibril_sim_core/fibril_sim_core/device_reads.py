"""An instance's devices and their reads: which devices sample when (``read_schedule``), what a
read makes (a ``DeviceOutput``, a sample in the trace's columns, a deferred row, or only a skip
when nobody hears it) and the queue of samples delivered later.

Kept apart from the stepping loop, which only asks when the next read is (``next_read``,
``silent_next``, ``deliveries``) and calls ``read`` / ``deliver`` there; the time model is the
instance's (a device acquiring at tick ``a`` is read at boundary ``a + 1``).
"""

from __future__ import annotations

import heapq
import zlib
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING

import mujoco
import numpy as np
import numpy.typing as npt

from .read_schedule import NEVER, Deferral, Phase, ReadSchedule
from .records import DeviceOutput

if TYPE_CHECKING:
    from .components import Device, DeviceDescriptor
    from .listeners import Listeners

__all__ = ["DeviceReads", "Read", "component_rng"]

#: A sample's values.
Values = npt.NDArray[np.float64]
#: How a device samples MjData (``Device.acquire``).
Acquire = Callable[[mujoco.MjModel, mujoco.MjData], Values]
#: What a read needs of a device, unpacked once: (acquire, id, sample type, component names,
#: frame, latency).
Read = tuple[Acquire, str, str, tuple[str, ...], str, int]


def component_rng(seed: int, component_id: str) -> np.random.Generator:
    """One stream per (episode seed, component id): adding a component changes no other's noise."""
    return np.random.default_rng(np.random.SeedSequence(
        [seed & 0xFFFFFFFF, seed >> 32, zlib.crc32(component_id.encode())]))


class DeviceReads:
    """The devices of one instance (made again each episode, ``start``) and their reads.

    The stepping loop reads ``next_read`` (the next boundary with a read), ``silent_next``
    (the next stop for a device nobody hears, see ``ReadSchedule.silent_at``) and
    ``deliveries`` (the delayed outputs, a heap of (tick, order, output)); ``deferring`` says
    whether this advance() defers the reads of a traced run (``Deferral``)."""

    def __init__(self, model: mujoco.MjModel, data: mujoco.MjData,
                 specs: tuple[DeviceDescriptor, ...], timestep_ns: int,
                 listeners: Listeners) -> None:
        self.model = model
        self.data = data
        self.specs = specs
        self.index = {d.id: i for i, d in enumerate(specs)}
        self.dt = timestep_ns
        self.listeners = listeners
        self.sinks = listeners.sinks  # (changed in place)
        self.columns = listeners.trace_columns  # (fixed: the trace is the instance's)
        self.trace_sink = listeners.trace_sink
        self.deferral: Deferral | None = None
        self.episode = 0
        self.session_offset = 0
        self.devices: list[Device] = []
        self.latency: list[int] = [d.latency_ticks for d in specs]
        self.reads: list[Read] = []
        self.skips: list[Callable[[mujoco.MjModel, mujoco.MjData], None]] = []
        self.schedule = ReadSchedule([], [], ())
        self.deferring = False  # this advance() defers (long enough: DEFER_TICKS)
        self.next_read = NEVER
        self.silent_next = NEVER
        self.deliveries: list[tuple[int, int, DeviceOutput]] = []
        self.order = 0  # tie-break of deliveries due at one tick: the order they were read

    def start(self, episode: int, session_offset_ns: int, seed: int) -> None:
        """Episode-local state: the devices and their RNG, the schedule, the queue."""
        self.episode = episode
        self.session_offset = session_offset_ns
        specs = self.specs
        self.devices = [d.create(component_rng(seed, d.id)) for d in specs]
        periods = [d.period_ticks for d in specs]
        self.latency = [d.latency_ticks for d in specs]
        self.reads = [(device.acquire, spec.id, spec.sample_type, spec.component_names,
                       spec.frame_id, spec.latency_ticks)
                      for device, spec in zip(self.devices, specs, strict=True)]
        self.skips = [device.skip for device in self.devices]
        if episode == 0:  # what the devices read is the plan's: one for all episodes
            self.deferral = (Deferral.of(self.devices, self.latency, self.data)
                             if self.columns is not None else None)
        self.deferring = False
        self.next_read = 1 if self.devices else NEVER
        # Silent stepping (nothing listens): a device delivering at once whose draws per
        # sample are known is not stopped for; its draws are taken per advance() and, when its
        # state needs it, its last sample is skipped at its tick (ReadSchedule.silent_at).
        self.schedule = ReadSchedule(periods, self.latency, tuple(
            i for i, device in enumerate(self.devices)
            if self.latency[i] <= 1 and device.silent_draws() is not None))
        self.silent_next = NEVER
        self.deliveries.clear()  # (in place: the stepping loop holds it)
        self.order = 0

    def follow(self, heard: frozenset[int], start: int) -> None:
        """Follow the schedule of the devices read while ``heard`` are heard (the others
        that are batched are skipped in bulk, see ``skip_unheard``) from boundary ``start``
        (the next unprocessed one) on."""
        self.next_read = self.schedule.follow(heard, start, self.deferral)

    def skip_unheard(self, start: int, target: int) -> None:
        """Silent stepping from ``start`` to ``target``: the samples of the batched devices
        nobody hears are skipped at once (``ReadSchedule.skip_unheard``)."""
        if start <= target:
            self.silent_next = self.schedule.skip_unheard(start, target, self.devices)

    def skip_last(self, t: int) -> None:
        """At a silent stop: the devices whose state needs their last unheard sample."""
        model, data = self.model, self.data
        indices, self.silent_next = self.schedule.take_silent(t)
        for i in indices:
            self.devices[i].skip(model, data)

    def complete(self) -> None:
        """Before a hand-over: the deferred samples computed into the trace's columns."""
        columns, deferral = self.columns, self.deferral
        if columns is not None and deferral is not None and deferral.used:
            deferral.complete(self.model, self.devices, columns)

    def deliver(self, t: int) -> None:
        """Emit the delayed device outputs due at boundary ``t``."""
        deliveries = self.deliveries
        out = self.listeners
        emit = out.emit_one or out.emit
        columns = self.columns
        if columns is not None and emit is self.trace_sink:  # only the trace: as columns
            index = self.index
            while deliveries and deliveries[0][0] <= t:
                output = heapq.heappop(deliveries)[2]
                i = index[output[1]]
                columns.ticks[i].append(output[3])
                columns.values[i].append(output[8])
                columns.order.append(i)
            return
        while deliveries and deliveries[0][0] <= t:
            emit(heapq.heappop(deliveries)[2])

    def read(self, t: int) -> None:
        """The devices due at boundary ``t`` sample tick t-1 (see the instance's time model)."""
        acquired = t - 1
        schedule = self.schedule
        table = schedule.table
        indices: Sequence[int]
        out = self.listeners
        emit_one = out.emit_one
        if table is not None:
            due, gaps = table
            phase = acquired % len(gaps)
            self.next_read = t + gaps[phase]
            phases = schedule.defer_phases
            if self.deferring and phases is not None and emit_one is self.trace_sink:
                self.read_deferred(t, phases[phase])
                return
            indices = due[phase]
        else:  # periods whose common cycle is too long for a table
            indices, self.next_read = schedule.due_untabulated(t)
        model, data = self.model, self.data
        reads = self.reads
        unheard = schedule.unheard
        if unheard:
            if not self.sinks:  # silent: every device read is unheard (no filtering)
                quiet, indices = indices, ()
            else:
                quiet = [i for i in indices if i in unheard]
                if quiet:
                    indices = [i for i in indices if i not in unheard]
            skips = self.skips
            for i in quiet:  # outputs delivered at once would go nowhere: only skip them
                read = reads[i]
                if read[5] > 1:  # delivered later: someone may listen by then
                    self.delay(t, read, read[0](model, data))
                else:  # the device's state and noise stream move on as if acquired
                    skips[i](model, data)
            if not indices:
                return
        emit = emit_one or out.emit
        columns = self.columns
        if columns is not None and emit is self.trace_sink:  # only the trace
            self.read_columns(t, indices, columns.order)
            return
        dt = self.dt
        episode = self.episode
        acquired_ns = acquired * dt
        offset = self.session_offset
        new = tuple.__new__
        for i in indices:
            read = reads[i]
            acquire, device_id, sample_type, names, frame_id, latency = read
            values = acquire(model, data)
            if latency > 1:
                self.delay(t, read, values)
            else:
                deliver_ns = (acquired + latency) * dt
                emit(new(DeviceOutput, (episode, device_id, sample_type, acquired, acquired_ns,
                                        deliver_ns, offset + acquired_ns, offset + deliver_ns,
                                        values, names, frame_id)))

    def read_deferred(self, t: int, phase: Phase) -> None:
        """The reads at boundary ``t`` while they are deferred (only the trace listens): the
        deferred devices' inputs are copied (``Deferral.gather``), their samples computed at
        hand-over; the others (``phase``'s second item) are read now."""
        entries, now, gather = phase
        columns, deferral = self.columns, self.deferral
        assert columns is not None and deferral is not None  # (deferring: both exist)
        if now:
            self.read_columns(t, now)
        if gather:
            deferral.gather(t - 1, self.model, self.devices, columns)
        columns.order.extend(entries)

    def read_columns(self, t: int, indices: Iterable[int],
                     order: list[int] | None = None) -> None:
        """Read ``indices`` at boundary ``t`` while only the trace listens: a sample delivered
        at once goes to its device's columns (see sample_block) and its entry to ``order``
        (None: the caller writes it, with the deferred ones'), a later one to the delivery
        queue."""
        model, data = self.model, self.data
        reads = self.reads
        columns = self.columns
        assert columns is not None  # (only the trace listens: as columns)
        ticks, kept = columns.ticks, columns.values
        acquired = t - 1
        for i in indices:
            read = reads[i]
            values = read[0](model, data)
            if read[5] > 1:
                self.delay(t, read, values)
            else:
                ticks[i].append(acquired)
                kept[i].append(values)
                if order is not None:
                    order.append(i)

    def delay(self, t: int, read: Read, values: Values) -> None:
        """Queue the output of a read at boundary ``t`` for its delivery tick."""
        _, device_id, sample_type, names, frame_id, latency = read
        acquired = t - 1
        dt = self.dt
        deliver_at = acquired + latency
        offset = self.session_offset
        self.order += 1
        heapq.heappush(self.deliveries, (deliver_at, self.order, tuple.__new__(DeviceOutput, (
            self.episode, device_id, sample_type, acquired, acquired * dt, deliver_at * dt,
            offset + acquired * dt, offset + deliver_at * dt, values, names, frame_id))))
