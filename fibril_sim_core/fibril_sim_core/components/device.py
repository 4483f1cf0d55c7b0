"""Devices: virtual sensors with an acquisition period, a latency and their own noise stream."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import mujoco
import numpy as np

from .base import BuildContext, Field, ResolvedComponent

DEVICE_FIELDS: dict[str, Field] = {
    "period": Field("duration", positive=True, unit="s",
                    doc="acquisition period (a whole number of physics steps)"),
    "latency": Field("duration", 0.0, minimum=0.0, unit="s",
                     doc="acquisition → delivery (a whole number of physics steps)"),
    "frame_id": Field("str", "", doc="frame of the samples (default: the bound object's name)"),
}


@dataclass(frozen=True)
class DeviceDescriptor:
    """Immutable description of one bound device; ``create`` makes a fresh runtime object."""

    id: str
    type: str
    sample_type: str
    component_names: tuple[str, ...]
    period_ticks: int
    latency_ticks: int
    frame_id: str
    binding: Mapping[str, Any]
    config: Mapping[str, Any]
    factory: Callable[[DeviceDescriptor, np.random.Generator], Device] = field(
        repr=False, compare=False)

    def create(self, rng: np.random.Generator) -> Device:
        return self.factory(self, rng)


class Device:
    """Mutable per-instance state of a device: its random stream and the acquisition itself.

    Noise draws come from a block buffer so that the per-sample cost stays small while the
    stream consumed by each device stays the same whatever the stepping pattern.
    """

    __slots__ = ("descriptor", "rng", "_noise", "_used", "_scalars", "_data", "_sensordata")
    BLOCK = 4096
    #: ``skip`` must see the last of a run of unheard samples (its state depends on it).
    SILENT_STATE = False

    def __init__(self, descriptor: DeviceDescriptor, rng: np.random.Generator) -> None:
        self.descriptor = descriptor
        self.rng = rng
        self._noise = np.empty(0)
        self._used = 0
        self._scalars: list[float] = []
        self._data: mujoco.MjData | None = None
        self._sensordata = np.empty(0)

    def sensordata(self, data: mujoco.MjData) -> np.ndarray:
        """``data.sensordata``, the array view kept per MjData (fetching it costs more than
        reading a value from it, and a device reads it every period)."""
        if data is not self._data:
            self._data = data
            self._sensordata = data.sensordata
        return self._sensordata

    def normal(self, count: int) -> np.ndarray:
        """``count`` standard normal draws from this device's own stream."""
        if self._used + count > self._noise.shape[0]:
            self._noise = np.concatenate(
                (self._noise[self._used:], self.rng.standard_normal(max(self.BLOCK, count))))
            self._used = 0
        out = self._noise[self._used:self._used + count]
        self._used += count
        return out

    def normal1(self) -> float:
        """One standard normal draw as a Python float (cheap on the hot path)."""
        if not self._scalars:
            self._scalars = self.normal(self.BLOCK).tolist()
            self._scalars.reverse()
        return self._scalars.pop()

    def normal1_many(self, count: int) -> np.ndarray:
        """The next ``count`` draws ``normal1`` would give, at once (the same stream)."""
        scalars = self._scalars
        take = min(count, len(scalars))
        head = scalars[len(scalars) - take:]
        del scalars[len(scalars) - take:]
        head.reverse()  # kept reversed: the next draw is at the end
        if take == count:
            return np.array(head, dtype=np.float64)
        parts = [np.array(head, dtype=np.float64)]
        rest = count - take
        while rest:
            fresh = self.normal(self.BLOCK)
            used = min(rest, self.BLOCK)
            parts.append(fresh[:used].copy())
            rest -= used
            if used < self.BLOCK:  # what normal1 keeps of its last refill
                self._scalars = fresh[used:].tolist()
                self._scalars.reverse()
        return np.concatenate(parts)

    def acquire(self, model: mujoco.MjModel, data: mujoco.MjData) -> np.ndarray:
        """Sample the state whose derived quantities ``data`` holds (see instance docs)."""
        raise NotImplementedError

    def block_inputs(self) -> tuple[tuple[str, tuple[int, ...]], ...] | None:
        """What ``acquire`` reads of MjData, as (array name, indices) pairs, when it reads
        nothing else and ``acquire_block`` computes many samples from those values at once;
        None otherwise (the default). A traced run then only copies these arrays at a
        read and computes the samples when it hands them to the trace."""
        return None

    def acquire_block(self, model: mujoco.MjModel, inputs: np.ndarray) -> np.ndarray:
        """The samples of ``inputs.shape[0]`` successive reads, one row each: row ``n`` holds
        the values ``block_inputs`` names, in its order, at the n-th read. Bit for bit what
        as many ``acquire`` calls return, with the same draws and state left behind."""
        raise NotImplementedError

    def skip(self, model: mujoco.MjModel, data: mujoco.MjData) -> None:
        """A sample nobody will see (nothing listens): change the device's state and draw
        from its noise stream exactly as ``acquire`` would, without making the sample, so
        later samples are the same bit for bit. Types whose ``acquire`` is cheap or whose
        state depends on the sample keep this default."""
        self.acquire(model, data)

    def silent_draws(self) -> tuple[int, int] | None:
        """(``normal`` draws, ``normal1`` draws) that ``skip`` takes for one sample whatever
        the state, or None when that depends on the sample. With draws known, unheard
        samples need no stop at their tick: ``skip_draws`` takes the draws of many at once
        (the stream is the same however it is cut), and only the last one is skipped at its
        tick when ``SILENT_STATE``."""
        return None

    def skip_draws(self, normal: int, normal1: int) -> None:
        """Take ``normal`` draws of ``normal`` and ``normal1`` of ``normal1``, unused."""
        chunk = 64 * self.BLOCK
        while normal > 0:
            self.normal(min(normal, chunk))
            normal -= chunk
        scalars = self._scalars
        take = min(normal1, len(scalars))
        if take:  # reversed: the next draws are at the end
            del scalars[len(scalars) - take:]
            normal1 -= take
        if normal1:
            blocks, rest = divmod(normal1, self.BLOCK)
            self.skip_draws(blocks * self.BLOCK, 0)  # whole refills of normal1
            if rest:
                self._scalars = self.normal(self.BLOCK).tolist()
                self._scalars.reverse()
                del self._scalars[self.BLOCK - rest:]


def device_descriptor(component: ResolvedComponent, ctx: BuildContext, *, sample_type: str,
                      component_names: tuple[str, ...], frame_id: str,
                      binding: Mapping[str, object],
                      factory: Callable[[DeviceDescriptor, np.random.Generator], Device]
                      ) -> DeviceDescriptor:
    """Descriptor with the period and latency checked to be whole, positive tick counts."""
    config = component.config
    where = component.where.key("config")
    return DeviceDescriptor(
        id=component.id,
        type=component.type,
        sample_type=sample_type,
        component_names=component_names,
        period_ticks=ctx.ticks(config["period"], where.key("period"), minimum=1),
        latency_ticks=ctx.ticks(config["latency"], where.key("latency")),
        frame_id=config["frame_id"] or frame_id,
        binding=dict(binding),
        config=dict(config),
        factory=factory,
    )
