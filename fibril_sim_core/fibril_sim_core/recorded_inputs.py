"""Recorded inputs, validated and parsed once, replayable into many instances.

Replaying a recording means committing each recorded ExternalInput at its recorded commit tick,
in recorded acceptance order, through the endpoint's own parsing and driver semantics. A
calibration replays the same recording into a fresh instance of every candidate plan, so the
parsing is done once here (``prepare_recorded_inputs``) and reused while the endpoints are the
same. When an endpoint can say which ctrl value a command becomes (``Endpoint.control``), the
replay's control trajectory is also computed once, which lets an instance step a block of
recorded commands with one ``mujoco.rollout`` call.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING

import numpy as np

from ._document import Node
from .errors import IngressError
from .ingress import AcceptedInput, Ingress, external_input
from .records import ExternalInput, IngressRecord

if TYPE_CHECKING:
    from .components import ActuatorDescriptor, Endpoint


_CONTROL_ENTRIES = 8  # control trajectories kept per recording (per actuator setup)

#: What parsing depends on, per endpoint: (name, payload type, sorted (mode, ctrl index)).
EndpointSignature = tuple[tuple[str, str, tuple[tuple[str, int], ...]], ...]
#: A replay block's ctrl table, how many recorded inputs it commits and, of those, the ones
#: released after it: (release tick, entry index). Made by ``replay.block_controls``.
BlockControls = tuple[np.ndarray, int, tuple[tuple[int, int], ...]]
#: Key of a replay block's table: (start, end, first entry, starting ctrl bytes).
BlockKey = tuple[int, int, int, bytes]
#: What a control trajectory depends on, per actuator: (endpoint, latency, config text).
_ControlsKey = tuple[tuple[str, int, str], ...]


@dataclass(frozen=True)
class ControlTrajectory:
    """Per recorded input: release tick, ctrl index and ctrl value (replay order)."""

    release_ticks: np.ndarray
    indices: np.ndarray
    values: np.ndarray
    # No two inputs write the same ctrl at the same tick (nothing to overwrite in a block).
    distinct: bool = True
    # Control tables of replay blocks, keyed by (start, end, first entry, starting ctrl):
    # every instance replaying these inputs the same way steps the same table.
    blocks: dict[BlockKey, BlockControls] = field(default_factory=dict, compare=False, repr=False)


@dataclass(frozen=True)
class RecordedInputs:
    """Accepted recorded inputs in replay order, parsed for endpoints with ``signature``."""

    entries: tuple[AcceptedInput, ...]
    signature: EndpointSignature
    _controls: dict[_ControlsKey, ControlTrajectory | None] = field(
        default_factory=dict, compare=False, repr=False)

    def __len__(self) -> int:
        return len(self.entries)

    @cached_property
    def queue(self) -> list[tuple[int, int, AcceptedInput]]:
        """``(commit tick, acceptance, entry)`` in reverse replay order (copied per replay)."""
        return [(e.commit_tick, e.acceptance_sequence, e) for e in reversed(self.entries)]

    @cached_property
    def commit_ticks(self) -> np.ndarray:
        return np.fromiter((e.commit_tick for e in self.entries), dtype=np.int64,
                           count=len(self.entries))

    @cached_property
    def acceptance_reached(self) -> np.ndarray:
        """Entry ``i``: the highest acceptance sequence among entries 0..i (what a replay
        block that committed them has used up), computed once for every replay."""
        sequences = np.fromiter((e.acceptance_sequence for e in self.entries), dtype=np.int64,
                                count=len(self.entries))
        return np.maximum.accumulate(sequences) if sequences.size else sequences

    def controls(self, actuators: Sequence[ActuatorDescriptor], endpoints: Sequence[Endpoint]
                 ) -> ControlTrajectory | None:
        """The control trajectory for these endpoints (None if one cannot say its ctrl)."""
        key = tuple((a.endpoint, a.latency_ticks, repr(sorted(a.config.items())))
                    for a in actuators)
        try:
            return self._controls[key]
        except KeyError:  # (not a get(): None is a value)
            pass
        latencies: dict[int, set[int]] = {}
        for actuator in actuators:
            for index in actuator.modes.values():
                latencies.setdefault(index, set()).add(actuator.latency_ticks)
        # Only when each ctrl has one latency is "later command wins" the commit order.
        ordered = all(len(seen) == 1 for seen in latencies.values())
        trajectory = (_control_trajectory(self.entries, actuators, endpoints)
                      if ordered else None)
        # Bounded: a calibration of an actuator's config (its latency, say) makes one key
        # per candidate, each with its trajectory and up to 16 block tables.
        # (Workers may race here: each computes the same trajectory; eviction tolerates
        # another worker's.)
        while len(self._controls) >= _CONTROL_ENTRIES:
            try:
                self._controls.pop(next(iter(self._controls)), None)
            except (RuntimeError, StopIteration):
                break
        self._controls[key] = trajectory
        return trajectory


def endpoint_signature(actuators: Sequence[ActuatorDescriptor]) -> EndpointSignature:
    """What parsing depends on: endpoint names, payload types and accepted modes."""
    return tuple((a.endpoint, a.payload_type, tuple(sorted(a.modes.items())))
                 for a in actuators)


def prepare_recorded_inputs(actuators: Sequence[ActuatorDescriptor],
                            records: Iterable[IngressRecord | Mapping[str, Node]]
                            ) -> RecordedInputs:
    """Validate and parse recorded inputs for ``actuators``; rejected records are skipped
    (they never reached physics in the recording either). Raises IngressError naming the
    record that is invalid."""
    endpoints = [a.create() for a in actuators]
    ingress = Ingress(tuple(actuators), endpoints, lambda: (0, 0))
    accepted: list[tuple[int, int, ExternalInput]] = []
    for n, record in enumerate(records):
        record = as_record(record, n)
        if not record.accepted:
            continue
        item = external_input(record.source_id, record.source_sequence, record.payload_type,
                              record.payload_json)
        accepted.append((record.commit_tick, record.acceptance_sequence, item))
    accepted.sort(key=lambda entry: (entry[0], entry[1]))
    last: dict[str, int] = {}
    entries: list[AcceptedInput] = []
    for commit_tick, acceptance, item in accepted:
        if item.source_sequence <= last.get(item.source_id, -1):
            raise IngressError(f"recorded input {item.source_id!r}: source_sequence "
                               f"{item.source_sequence} does not increase in acceptance order")
        last[item.source_id] = item.source_sequence
        index, command = ingress.parse(item)
        entries.append(AcceptedInput(acceptance, item, index, command, commit_tick))
    return RecordedInputs(tuple(entries), endpoint_signature(actuators))


def as_record(record: IngressRecord | Mapping[str, Node], n: int) -> IngressRecord:
    """An IngressRecord from a record or a mapping with the same keys (checked)."""
    if isinstance(record, IngressRecord):
        return record
    if not isinstance(record, Mapping):
        raise IngressError(f"recorded input {n}: expected a mapping, got "
                           f"{type(record).__name__}")
    missing = [key for key in ("source_id", "source_sequence", "payload_type", "payload_json",
                               "commit_tick", "acceptance_sequence") if key not in record]
    if missing:
        raise IngressError(f"recorded input {n}: missing {', '.join(missing)}")
    counts: dict[str, int] = {}
    for key in ("source_sequence", "commit_tick", "acceptance_sequence"):
        value = record[key]
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise IngressError(f"recorded input {n}: {key} must be a non-negative integer, "
                               f"got {value!r}")
        counts[key] = value
    return IngressRecord(0, str(record["source_id"]), counts["source_sequence"],
                         str(record["payload_type"]), str(record["payload_json"]),
                         bool(record.get("accepted", True)), counts["commit_tick"],
                         counts["acceptance_sequence"], "", 0)


def _control_trajectory(entries: Sequence[AcceptedInput],
                        actuators: Sequence[ActuatorDescriptor],
                        endpoints: Sequence[Endpoint]) -> ControlTrajectory | None:
    count = len(entries)
    release = np.empty(count, dtype=np.int64)
    indices = np.empty(count, dtype=np.intp)
    values = np.empty(count, dtype=np.float64)
    for i, entry in enumerate(entries):
        control = endpoints[entry.endpoint].control(entry.endpoint_command)
        if control is None:
            return None
        release[i] = entry.commit_tick + actuators[entry.endpoint].latency_ticks
        indices[i], values[i] = control
    slots = release * (int(indices.max(initial=0)) + 1) + indices
    distinct = bool(np.unique(slots).size == count)
    return ControlTrajectory(release, indices, values, distinct)
