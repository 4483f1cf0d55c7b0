"""What a SimulationInstance keeps for the trace writer between hand-overs: device samples as
columns, other records as objects, and the order in which they were all written.

Tracing a device sample this way costs the stepping thread three list appends instead of a
``DeviceOutput`` (and the trace writer's worker a few numpy passes per block instead of
picking every field out of every record): the rest of a sample (episode, times, ids, names)
is the same for every sample of a device in one block, so the worker derives it from the
acquisition tick.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["DeviceColumns", "SampleBlock", "TraceBuffer"]

#: ``SampleBlock.order`` entry of a record kept as an object (in ``others``).
OTHER = -1


@dataclass(frozen=True, slots=True)
class DeviceColumns:
    """The constant part of one device's samples (what its DeviceOutputs share)."""

    device_id: str
    sample_type: str
    component_names: tuple[str, ...]
    frame_id: str
    latency_ticks: int  # delivery tick = acquisition tick + this


@dataclass(frozen=True, slots=True)
class SampleBlock:
    """Records in write order: ``order[n]`` is the device index of the n-th record (its
    acquisition tick and values next in ``ticks[d]`` / ``values[d]``) or ``OTHER`` (the next
    record object of ``others``). All samples belong to ``episode``, whose EpisodeTime 0 is
    SessionTime ``session_offset_ns``."""

    order: list[int]
    others: list[Any]
    devices: tuple[DeviceColumns, ...]
    ticks: list[list[int]]
    values: list[list[np.ndarray]]
    episode: int
    session_offset_ns: int
    timestep_ns: int

    def __len__(self) -> int:
        return len(self.order)

    def joins(self, other: SampleBlock) -> bool:
        """Whether ``other`` can follow this block in one (same devices and episode)."""
        return (other.devices is self.devices and other.episode == self.episode
                and other.session_offset_ns == self.session_offset_ns
                and other.timestep_ns == self.timestep_ns)

    def carrying(self, record: Any) -> SampleBlock:
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
        others: list[Any] = []
        ticks: list[list[int]] = [[] for _ in first.devices]
        values: list[list[np.ndarray]] = [[] for _ in first.devices]
        for block in blocks:
            order += block.order
            others += block.others
            for d in range(len(first.devices)):
                ticks[d] += block.ticks[d]
                values[d] += block.values[d]
        return SampleBlock(order, others, first.devices, ticks, values, first.episode,
                           first.session_offset_ns, first.timestep_ns)


class TraceBuffer:
    """The stepping thread's side: append samples (``ticks[d]``, ``values[d]`` and ``order``
    directly, on the hot path) and other records (``other``); ``take`` empties it."""

    __slots__ = ("devices", "order", "others", "ticks", "values")

    def __init__(self, devices: tuple[DeviceColumns, ...]) -> None:
        self.devices = devices
        self.order: list[int] = []
        self.others: list[Any] = []
        self.ticks: list[list[int]] = [[] for _ in devices]
        self.values: list[list[np.ndarray]] = [[] for _ in devices]

    def other(self, record: Any) -> None:
        """Keep a record object (anything but an immediately delivered sample)."""
        self.order.append(OTHER)
        self.others.append(record)

    def take(self, episode: int, session_offset_ns: int, timestep_ns: int) -> SampleBlock:
        """Everything kept so far as a block; the buffer starts empty (its lists are new, so
        the block never changes after this)."""
        block = SampleBlock(self.order[:], self.others[:], self.devices,
                            [t[:] for t in self.ticks], [v[:] for v in self.values],
                            episode, session_offset_ns, timestep_ns)
        self._clear()
        return block

    @property
    def only_records(self) -> bool:
        """Everything kept is a record object (someone else listens: no sample was kept as
        columns)."""
        return len(self.others) == len(self.order)

    def take_records(self) -> list[Any]:
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
        for ticks in self.ticks:
            ticks.clear()
        for values in self.values:
            values.clear()
