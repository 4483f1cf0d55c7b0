"""Which devices an instance reads at which tick boundary, and the deferred reads of a traced
run.

Device ``i`` samples ticks 0, p_i, 2·p_i, ... and is read at the boundary after (see the
instance's time model). ``read_schedule`` tabulates those reads over the devices' common cycle;
``ReadSchedule`` follows the table of the devices an episode reads while some are heard (the
unheard batched ones are skipped in bulk); ``Deferral`` keeps the MjData values deferred
devices read so the trace's samples are computed a block at a time.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import mujoco
import numpy as np

if TYPE_CHECKING:
    from .components import Device
    from .sample_block import TraceBuffer

__all__ = ["DEFER_TICKS", "NEVER", "TRACE_HANDOFF", "Deferral", "Phase", "ReadSchedule",
           "Table", "read_schedule"]

#: A boundary never reached.
NEVER = 1 << 62
#: Records kept for the trace writer before they are handed over.
TRACE_HANDOFF = 4096
#: advance() calls this long or longer defer the reads of a traced run (computing a block at
#: hand-over costs ~50 us, what reading one by one costs in about 40 ticks).
DEFER_TICKS = 64
_MAX_CYCLE = 1 << 16

#: Per phase of the common cycle: the devices sampling it, and the gap to the next sampling.
Table = tuple[tuple[tuple[int, ...], ...], tuple[int, ...]]
#: Per phase, while reads are deferred: the ``order`` entries of its samples delivered at
#: once, the devices read now (not deferred) and whether to copy a row.
Phase = tuple[tuple[int, ...], tuple[int, ...], bool]


@functools.lru_cache(maxsize=64)  # one per device-period set: many instances share it
def read_schedule(periods: tuple[int, ...], active: tuple[bool, ...] | None = None
                  ) -> Table | None:
    """Which devices read at each phase of their common cycle, and the gap to the next read.

    Device ``i`` samples ticks 0, p_i, 2·p_i, ... (read at the boundary after), so the reads
    repeat with the least common multiple of the periods. Phase ``u`` is the acquired tick
    modulo that cycle: ``due[u]`` lists the devices sampling it (in device order) and
    ``gaps[u]`` how many ticks later the next sampling is. ``active`` (default: all) leaves
    the other devices out (indices stay those of ``periods``). None when no device is active
    or the cycle is too long to tabulate.
    """
    used = [(i, p) for i, p in enumerate(periods) if active is None or active[i]]
    if not used:
        return None
    cycle = math.lcm(*(p for _, p in used))
    if cycle > _MAX_CYCLE:
        return None
    due = tuple(tuple(i for i, p in used if u % p == 0) for u in range(cycle))
    gaps = [0] * cycle
    gap = 1
    for u in range(2 * cycle - 1, -1, -1):  # walking back: distance to the next due phase
        if u < cycle:
            gaps[u] = gap
        gap = 1 if due[u % cycle] else gap + 1
    return due, tuple(gaps)


class ReadSchedule:
    """The reads of one episode: which devices are read (``active``) while ``heard`` are
    heard, of those the ones read only to be skipped (``unheard``), the tabulated schedule
    (``table``, None when the cycle is too long: then ``read_at`` per device), the deferred
    phases of a traced run, and the silent stops (``silent_at``: boundaries where a batched
    device nobody hears must see its last sample)."""

    __slots__ = ("active", "batched", "defer_phases", "heard", "latency", "periods",
                 "read_at", "silent_at", "table", "unheard", "_known")

    def __init__(self, periods: list[int], latency: list[int], batched: tuple[int, ...]
                 ) -> None:
        self.periods = periods
        self.latency = latency
        # Devices delivering at once whose draws per sample are known: when nobody hears
        # them they are not stopped for (skip_unheard).
        self.batched = batched
        self.heard: frozenset[int] | None = None  # None: follow() not called yet
        self.table: Table | None = None
        self.active: tuple[int, ...] = ()
        self.unheard: frozenset[int] = frozenset()
        self.read_at = [1] * len(periods)
        self.defer_phases: tuple[Phase, ...] | None = None
        self.silent_at: dict[int, list[int]] = {}
        # Schedules per set of heard devices (all while listening, none while silent).
        self._known: dict[frozenset[int], tuple[Table | None, tuple[int, ...]]] = {}

    def follow(self, heard: frozenset[int], start: int, deferral: Deferral | None) -> int:
        """Follow the schedule of the devices read while ``heard`` are heard from boundary
        ``start`` on; return the next boundary with a read (``NEVER``: none)."""
        self.heard = heard
        known = self._known.get(heard)
        if known is None:
            batched = self.batched
            active = tuple(i in heard or i not in batched for i in range(len(self.periods)))
            known = self._known[heard] = (read_schedule(tuple(self.periods), active),
                                          tuple(i for i, on in enumerate(active) if on))
        self.table, active_reads = known
        self.active = active_reads
        self.unheard = frozenset(active_reads) - heard  # read, but only to be skipped
        self.defer_phases = None
        if deferral is not None and self.table is not None and not self.unheard:
            self.defer_phases = deferral.phases(self.table[0], self.latency)
        if not active_reads:
            return NEVER
        if self.table is not None:
            return start  # the reader finds the devices due there (maybe none)
        read_at, period = self.read_at, self.periods
        for i in active_reads:  # the first boundary >= start reading an acquisition tick
            read_at[i] = -(-(start - 1) // period[i]) * period[i] + 1
        return min(read_at[i] for i in active_reads)

    def due_untabulated(self, t: int) -> tuple[list[int], int]:
        """Without a table: the devices read at boundary ``t`` and the next read."""
        read_at, period = self.read_at, self.periods
        active = self.active
        indices = [i for i in active if read_at[i] == t]
        for i in indices:
            read_at[i] = t + period[i]
        return indices, min(read_at[i] for i in active)

    def skip_unheard(self, start: int, target: int, devices: Sequence[Device]) -> int:
        """Silent stepping from boundary ``start`` to ``target``: the samples of the batched
        devices nobody hears are skipped here, their draws at once (each device has its own
        stream, so taking them now or at their ticks is the same); a device whose state needs
        its last sample gets a stop there (``take_silent``). Returns the next such stop."""
        heard = self.heard or frozenset()
        for i in self.batched:
            if i in heard:
                continue
            period = self.periods[i]
            first = -(-(start - 1) // period)  # samples a·period read at boundary a·period+1
            last = (target - 1) // period
            count = last - first + 1
            if count <= 0:
                continue
            device = devices[i]
            draws = device.silent_draws()
            assert draws is not None  # batched devices say their draws
            normal, normal1 = draws
            if device.SILENT_STATE:
                count -= 1
                self.silent_at.setdefault(last * period + 1, []).append(i)
            if count and (normal or normal1):
                device.skip_draws(normal * count, normal1 * count)
        return min(self.silent_at) if self.silent_at else NEVER

    def take_silent(self, t: int) -> tuple[list[int], int]:
        """The devices to skip at silent stop ``t``, and the next stop."""
        indices = self.silent_at.pop(t)
        return indices, min(self.silent_at) if self.silent_at else NEVER


class Deferral:
    """Deferred reads of a traced run (only the trace listening): at a read, the MjData
    arrays the deferred devices take their samples from are copied into a row; at hand-over
    each device computes its samples of the block at once (``Device.acquire_block``) into
    its trace columns. A device qualifies when it delivers at once and says what it reads
    (``Device.block_inputs``); the samples are bit for bit those of reading one by one."""

    __slots__ = ("devices", "copies", "rows", "row_views", "ticks", "used", "_phases")

    def __init__(self, devices: tuple[tuple[int, np.ndarray | slice], ...],
                 copies: tuple[tuple[np.ndarray, int, int], ...], width: int) -> None:
        self.devices = devices  # (device index, its columns in a row)
        self.copies = copies  # (MjData array, first column, end column) copied at a read
        self.rows = np.empty((TRACE_HANDOFF, width))
        self.row_views = list(self.rows)  # fetched once: indexing makes a new view each time
        self.ticks = np.empty(TRACE_HANDOFF, dtype=np.int64)  # acquisition tick of a row
        self.used = 0
        # id(due) -> (due, phases); due kept so that its id stays its own
        self._phases: dict[int, tuple[tuple[tuple[int, ...], ...], tuple[Phase, ...]]] = {}

    @classmethod
    def of(cls, devices: Sequence[Device], latency: Sequence[int], data: mujoco.MjData
           ) -> Deferral | None:
        offsets: dict[str, int] = {}
        copies: list[tuple[np.ndarray, int, int]] = []
        deferred: list[tuple[int, np.ndarray | slice]] = []
        width = 0
        for i, device in enumerate(devices):
            inputs = device.block_inputs() if latency[i] <= 1 else None
            if inputs is None:
                continue
            columns: list[int] = []
            for name, indices in inputs:
                if name not in offsets:
                    # MjData field named by the device (a string from block_inputs)
                    view: np.ndarray = getattr(data, name)
                    offsets[name] = width
                    copies.append((view, width, width + view.shape[0]))
                    width += view.shape[0]
                columns.extend(offsets[name] + index for index in indices)
            contiguous = columns == list(range(columns[0], columns[0] + len(columns)))
            deferred.append((i, slice(columns[0], columns[0] + len(columns)) if contiguous
                              else np.array(columns, dtype=np.intp)))
        if not deferred:
            return None
        return cls(tuple(deferred), tuple(copies), width)

    def phases(self, due: tuple[tuple[int, ...], ...], latency: Sequence[int]
               ) -> tuple[Phase, ...]:
        """Per phase of the read schedule: the ``order`` entries of its samples delivered at
        once, the devices to read now (not deferred) and whether to copy a row. Kept per
        schedule (``read_schedule`` shares them): an episode's first advance() asks again."""
        known = self._phases.get(id(due))
        if known is None:
            deferred = {i for i, _ in self.devices}
            known = self._phases[id(due)] = (due, tuple(
                (tuple(i for i in indices if latency[i] <= 1),
                 tuple(i for i in indices if i not in deferred),
                 any(i in deferred for i in indices)) for indices in due))
        return known[1]

    def gather(self, acquired: int, model: mujoco.MjModel, devices: Sequence[Device],
               columns: TraceBuffer) -> None:
        """Copy the inputs of the reads at the boundary after tick ``acquired``."""
        used = self.used
        if used == self.ticks.shape[0]:
            self.complete(model, devices, columns)
            used = 0
        row = self.row_views[used]
        for view, first, end in self.copies:
            row[first:end] = view
        self.ticks[used] = acquired
        self.used = used + 1

    def complete(self, model: mujoco.MjModel, devices: Sequence[Device],
                 columns: TraceBuffer) -> None:
        """Compute the samples of the copied rows into ``columns`` (in acquisition order,
        as their ``order`` entries were written) and start over."""
        used = self.used
        if not used:
            return
        acquired = self.ticks[:used]
        rows = self.rows[:used]
        done = []
        for i, index in self.devices:
            device = devices[i]
            due = acquired % device.descriptor.period_ticks == 0
            ticks = acquired[due]
            if ticks.size:
                values = device.acquire_block(model, rows[due][:, index])
                done.append((i, ticks.tolist(), values))
        self.used = 0
        interrupted: BaseException | None = None
        while done:  # all of it, even through Ctrl-C (raised afterwards)
            try:
                while done:
                    columns.put(*done[-1])
                    done.pop()
            except KeyboardInterrupt as exc:
                interrupted = exc
        if interrupted is not None:
            raise interrupted
