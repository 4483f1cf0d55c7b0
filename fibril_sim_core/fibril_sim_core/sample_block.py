"""What a SimulationInstance keeps for the trace writer between hand-overs: device samples as
columns, state snapshots as rows, other records as objects, and the order in which they were
all written.

Tracing a device sample this way costs the stepping thread its place in the order and its
tick and values in the device's columns (a block of them at once when the instance computes
the samples at hand-over) instead of a ``DeviceOutput``, and the lay-out a few numpy passes
per block instead of picking every field out of every record: the rest of a sample (episode,
times, ids, names) is the same for every sample of a device in one block, so it is derived
from the acquisition tick. A state snapshot is one row of its arrays back to back.
"""

from __future__ import annotations

from dataclasses import dataclass
import numpy as np

from .records import TraceRecord

__all__ = ["OTHER", "STATE", "STATE_FIELDS", "DeviceColumns", "SampleBlock", "StateRows",
           "TraceBuffer"]

#: ``SampleBlock.order`` entry of a record kept as an object (in ``others``).
OTHER = -1
#: ``SampleBlock.order`` entry of a state snapshot kept as a row (in ``states``).
STATE = -2
#: The arrays of a StateSnapshot in a state row, back to back in this order.
STATE_FIELDS = ("qpos", "qvel", "act", "ctrl", "actuator_force", "sensordata", "xpos", "xquat")


@dataclass(frozen=True, slots=True)
class DeviceColumns:
    """The constant part of one device's samples (what its DeviceOutputs share)."""

    device_id: str
    sample_type: str
    component_names: tuple[str, ...]
    frame_id: str
    latency_ticks: int  # delivery tick = acquisition tick + this


@dataclass(frozen=True, slots=True)
class StateRows:
    """State snapshots as rows: ``ticks[n]`` is the tick of the n-th and ``rows[n]`` its
    ``STATE_FIELDS`` arrays back to back, of ``sizes`` values each (what a StateSnapshot
    record holds, its times derived from the tick as for samples)."""

    sizes: tuple[int, ...]
    ticks: np.ndarray
    rows: np.ndarray

    def __len__(self) -> int:
        return int(self.ticks.shape[0])


@dataclass(frozen=True, slots=True)
class SampleBlock:
    """Records in write order: ``order[n]`` is the device index of the n-th record (its
    acquisition tick and values next in ``ticks[d]`` / ``values[d]``), ``OTHER`` (the next
    record object of ``others``) or ``STATE`` (the next row of ``states``). A device's
    ``values`` are a list of 1-D arrays or one 2-D array (a row per sample). All records
    belong to ``episode``, whose EpisodeTime 0 is SessionTime ``session_offset_ns``."""

    order: list[int]
    others: list[TraceRecord]
    devices: tuple[DeviceColumns, ...]
    ticks: list[list[int]]
    values: list[list[np.ndarray] | np.ndarray]
    episode: int
    session_offset_ns: int
    timestep_ns: int
    states: StateRows | None = None

    def __len__(self) -> int:
        return len(self.order)

    def joins(self, other: SampleBlock) -> bool:
        """Whether ``other`` can follow this block in one (same devices and episode)."""
        return (other.devices is self.devices and other.episode == self.episode
                and other.session_offset_ns == self.session_offset_ns
                and other.timestep_ns == self.timestep_ns
                and (self.states is None or other.states is None
                     or self.states.sizes == other.states.sizes))

    def carrying(self, record: TraceRecord) -> SampleBlock:
        """A block of ``record`` alone (as an object) that ``joins`` this one: a record
        written one by one between two blocks goes into the same lay-out."""
        return SampleBlock([OTHER], [record], self.devices, [[] for _ in self.devices],
                           [[] for _ in self.devices], self.episode, self.session_offset_ns,
                           self.timestep_ns)

    @staticmethod
    def join(blocks: list[SampleBlock]) -> SampleBlock:
        """Consecutive blocks that ``joins`` says fit together, as one."""
        first = blocks[0]
        if len(blocks) == 1:
            return first
        order: list[int] = []
        others: list[TraceRecord] = []
        ticks: list[list[int]] = [[] for _ in first.devices]
        parts: list[list[list[np.ndarray] | np.ndarray]] = [[] for _ in first.devices]
        states = [block.states for block in blocks if block.states is not None]
        for block in blocks:
            order += block.order
            others += block.others
            for d in range(len(first.devices)):
                ticks[d] += block.ticks[d]
                parts[d].append(block.values[d])
        joined_states = None
        if states:
            joined_states = StateRows(states[0].sizes,
                                      np.concatenate([s.ticks for s in states]),
                                      np.concatenate([s.rows for s in states]))
        return SampleBlock(order, others, first.devices, ticks,
                           [_joined_values(p) for p in parts], first.episode,
                           first.session_offset_ns, first.timestep_ns, joined_states)


def _joined_values(parts: list[list[np.ndarray] | np.ndarray]
                   ) -> list[np.ndarray] | np.ndarray:
    """One device's values of consecutive blocks: one 2-D array when they all are."""
    parts = [p for p in parts if len(p)]
    if parts and all(type(p) is np.ndarray for p in parts):
        return np.concatenate(parts) if len(parts) > 1 else parts[0]
    values: list[np.ndarray] = []
    for part in parts:
        values += list(part)
    return values


class TraceBuffer:
    """The stepping thread's side: append samples (``ticks[d]``, ``values[d]`` and ``order``
    directly, on the hot path), blocks of samples (``put``), state rows (``state_row``,
    ``commit_state``) and other records (``other``); ``take`` empties it."""

    __slots__ = ("arrays", "devices", "order", "others", "state_rows", "state_sizes",
                 "state_ticks", "states_used", "ticks", "values")

    def __init__(self, devices: tuple[DeviceColumns, ...],
                 state_sizes: tuple[int, ...] = ()) -> None:
        self.devices = devices
        self.order: list[int] = []
        self.others: list[TraceRecord] = []
        self.ticks: list[list[int]] = [[] for _ in devices]
        self.values: list[list[np.ndarray]] = [[] for _ in devices]
        self.arrays: list[list[np.ndarray]] = [[] for _ in devices]  # put() before values
        self.state_sizes = state_sizes
        self.state_rows = np.empty((256, sum(state_sizes)))
        self.state_ticks = np.empty(256, dtype=np.int64)
        self.states_used = 0

    def other(self, record: TraceRecord) -> None:
        """Keep a record object (anything but an immediately delivered sample)."""
        self.order.append(OTHER)
        self.others.append(record)

    def put(self, device: int, ticks: list[int], values: np.ndarray) -> None:
        """Keep samples of ``device`` computed together (a 2-D array, a row each) after
        those kept so far; the caller writes their ``order`` entries."""
        self.ticks[device] += ticks
        if self.values[device]:  # one by one so far: these follow them
            self.values[device] += list(values)
        else:
            self.arrays[device].append(values)

    def state_row(self) -> np.ndarray:
        """The row the next state snapshot is written to (filled in two steps, see
        ``commit_state``)."""
        used = self.states_used
        if used == self.state_ticks.shape[0]:
            self.state_rows = np.concatenate((self.state_rows, np.empty_like(self.state_rows)))
            self.state_ticks = np.concatenate((self.state_ticks,
                                               np.empty_like(self.state_ticks)))
        row: np.ndarray = self.state_rows[used]
        return row

    def commit_state(self, tick: int) -> None:
        """Keep the filled ``state_row`` as the snapshot of ``tick``."""
        used = self.states_used
        self.state_ticks[used] = tick
        self.states_used = used + 1
        self.order.append(STATE)

    def take(self, episode: int, session_offset_ns: int, timestep_ns: int) -> SampleBlock:
        """Everything kept so far as a block; the buffer starts empty (its lists are new, so
        the block never changes after this)."""
        values: list[list[np.ndarray] | np.ndarray] = (
            [_joined_values(arrays + [listed]) for arrays, listed in
             zip(self.arrays, self.values, strict=True)] if any(self.arrays)
            else [v[:] for v in self.values])  # (read one by one: as cheap as before blocks)
        used = self.states_used
        states = None if not used else StateRows(
            self.state_sizes, self.state_ticks[:used].copy(), self.state_rows[:used].copy())
        block = SampleBlock(self.order[:], self.others[:], self.devices,
                            [t[:] for t in self.ticks], values,
                            episode, session_offset_ns, timestep_ns, states)
        self._clear()
        return block

    def settle(self) -> None:
        """Make what an interruption (Ctrl-C) left consistent before ``take``: a read cut
        short may have kept a sample without its ``order`` entry or the other way round, or a
        tick without its values. Such leftovers are the last of their kind; they are
        dropped, so the block holds every record kept whole."""
        counts: dict[int, int] = {}
        for kind in self.order:
            counts[kind] = counts.get(kind, 0) + 1
        keep: dict[int, int] = {}
        for d in range(len(self.devices)):
            listed = self.values[d]
            arrays = self.arrays[d]
            samples = sum(len(a) for a in arrays) + len(listed)
            kept = keep[d] = min(counts.get(d, 0), len(self.ticks[d]), samples)
            del self.ticks[d][kept:]
            excess = samples - kept
            dropped = min(excess, len(listed))  # the newest first: one by one after arrays
            del listed[len(listed) - dropped:]
            excess -= dropped
            while excess:
                last = arrays.pop()
                if len(last) > excess:
                    arrays.append(last[:len(last) - excess])
                    break
                excess -= len(last)
        keep[OTHER] = min(counts.get(OTHER, 0), len(self.others))
        del self.others[keep[OTHER]:]
        keep[STATE] = self.states_used = min(counts.get(STATE, 0), self.states_used)
        surplus = {kind: count - keep.get(kind, 0) for kind, count in counts.items()
                   if count > keep.get(kind, 0)}
        if not surplus:
            return
        kept_order: list[int] = []
        for kind in reversed(self.order):  # surplus entries are the last of their kind
            if surplus.get(kind):
                surplus[kind] -= 1
            else:
                kept_order.append(kind)
        kept_order.reverse()
        self.order[:] = kept_order

    @property
    def only_records(self) -> bool:
        """Everything kept is a record object (someone else listens: no sample was kept as
        columns)."""
        return len(self.others) == len(self.order)

    def take_records(self) -> list[TraceRecord]:
        """The kept records (``only_records``) as a list; the buffer starts empty."""
        records = self.others[:]
        self._clear()
        return records

    def _clear(self) -> None:
        """Empty every list; a Ctrl-C meanwhile must not leave some emptied and others not
        (it is raised once they all are)."""
        interrupted: BaseException | None = None
        while True:
            try:
                self._clear_lists()
                break
            except KeyboardInterrupt as exc:
                interrupted = exc
        if interrupted is not None:
            raise interrupted

    def _clear_lists(self) -> None:
        self.order.clear()  # in place: the stepping thread holds these lists' appends
        self.others.clear()
        self.states_used = 0
        for ticks in self.ticks:
            ticks.clear()
        for values in self.values:
            values.clear()
        for arrays in self.arrays:
            arrays.clear()
