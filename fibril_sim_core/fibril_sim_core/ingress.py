"""The ingress-only ExternalInput contract.

Any thread may enqueue; nothing here touches MjData. Accepted inputs wait until the owner thread
commits them at a tick boundary in acceptance order. A rejected input raises IngressError to the
sender and is also recorded (counted and traced) — never silently dropped.

Acceptance order is unique and strictly increasing within an episode, in commit order (exact
replay sorts by commit tick and acceptance sequence): the scenario's initial inputs take
0..n-1, a live input takes the next number when it is enqueued (``enqueue`` returns it), and a
replayed recorded input keeps its recorded number unless that is already used, in which case it
takes the next one when it is committed (after the live inputs committed at that tick).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from ._document import NodeMap
from .components import ActuatorDescriptor, Command, Endpoint
from .entities import ENTITY_PAYLOAD_TYPE, ENTITY_SOURCE, Entities, EntityCommand
from .errors import IngressError
from .records import ExternalInput, IngressRecord


@dataclass(frozen=True, slots=True)
class AcceptedInput:
    """An accepted input with its parsed command, waiting for (or given) a commit tick."""

    acceptance_sequence: int
    input: ExternalInput
    endpoint: int  # index into the instance's endpoints; ENTITY for an entity state
    command: Command | EntityCommand
    commit_tick: int = -1

    @property
    def endpoint_command(self) -> Command:
        """The command of an input to an endpoint (``endpoint`` is not ``ENTITY``)."""
        command = self.command
        if not isinstance(command, Command):
            raise TypeError(f"input {self.acceptance_sequence} sets an entity's state: it has "
                            f"no endpoint command")
        return command


#: ``AcceptedInput.endpoint`` of an entity-state input (no endpoint: see entities.py).
ENTITY = -1


class Ingress:
    """Validation, ordering and the thread-safe pending queue of one instance."""

    def __init__(self, actuators: tuple[ActuatorDescriptor, ...],
                 endpoints: list[Endpoint], clock: Callable[[], tuple[int, int]],
                 entities: Entities | None = None) -> None:
        self._index = {a.endpoint: i for i, a in enumerate(actuators)}
        if entities is not None:
            self._index[ENTITY_SOURCE] = ENTITY
        self._entities = entities
        self._actuators = actuators
        self._endpoints = endpoints
        self._clock = clock  # () -> (episode, session_time_ns), read for rejection records
        self._lock = threading.Lock()
        self._pending: list[AcceptedInput] = []
        self._rejected: list[IngressRecord] = []
        self._last_sequence: dict[str, int] = {}
        self._next_acceptance = 0
        self.accepted_count = 0
        self.rejected_count = 0

    @property
    def sources(self) -> list[str]:
        return list(self._index)

    def parse(self, item: ExternalInput) -> tuple[int, Command | EntityCommand]:
        """Check source, payload type and payload; return (endpoint index, command)."""
        index = self._index.get(item.source_id)
        if index is None:
            raise IngressError(f"unknown source_id {item.source_id!r}; known sources: "
                               f"{', '.join(self._index) or 'none'}")
        expected = ENTITY_PAYLOAD_TYPE if index == ENTITY else \
            self._actuators[index].payload_type
        if item.payload_type != expected:
            raise IngressError(f"source {item.source_id!r} accepts payload_type {expected!r}, "
                               f"got {item.payload_type!r}")
        if not isinstance(item.payload, Mapping):
            raise IngressError(f"source {item.source_id!r}: payload must be a JSON object, got "
                               f"{type(item.payload).__name__}")
        try:
            if index == ENTITY:
                entities = self._entities
                assert entities is not None  # (ENTITY is a known source only with entities)
                return index, entities.parse(item.payload)
            command = self._endpoints[index].parse(item.payload)
        except ValueError as exc:
            raise IngressError(f"source {item.source_id!r} sequence {item.source_sequence}: "
                               f"{exc}") from None
        return index, command

    def enqueue(self, item: ExternalInput) -> int:
        """Accept an input for the next tick boundary; return its acceptance sequence."""
        with self._lock:
            try:
                given: object = item.source_sequence  # (from a client: any JSON value)
                if isinstance(given, bool) or not isinstance(given, int) or given < 0:
                    raise IngressError(f"source {item.source_id!r}: source_sequence must be a "
                                       f"non-negative integer, got {item.source_sequence!r}")
                last = self._last_sequence.get(item.source_id)
                if last is not None and item.source_sequence <= last:
                    raise IngressError(f"source {item.source_id!r}: source_sequence "
                                       f"{item.source_sequence} does not increase (last "
                                       f"accepted {last})")
                index, command = self.parse(item)
            except IngressError as exc:
                self._reject(item, str(exc))
                raise
            self._last_sequence[item.source_id] = item.source_sequence
            sequence = self._next_acceptance
            self._next_acceptance += 1
            self.accepted_count += 1
            self._pending.append(AcceptedInput(sequence, item, index, command))
            return sequence

    def _reject(self, item: ExternalInput, reason: str) -> None:
        episode, session_ns = self._clock()
        self.rejected_count += 1
        self._rejected.append(IngressRecord(
            episode=episode, source_id=str(item.source_id), source_sequence=_int(item.source_sequence),
            payload_type=str(item.payload_type), payload_json=payload_text(item), accepted=False,
            commit_tick=-1, acceptance_sequence=0, reject_reason=reason,
            session_time_ns=session_ns))

    def has_work(self) -> bool:
        """Whether anything was accepted or rejected since the last ``take`` (a lock-free
        peek: the stepping loop asks at every event)."""
        return bool(self._pending or self._rejected)

    @property
    def waiting(self) -> bool:
        """``has_work()`` as a property."""
        return bool(self._pending or self._rejected)

    def start_episode(self, initial: Sequence[AcceptedInput]) -> None:
        """A new episode (owner thread): acceptance numbers restart at 0 with the scenario's
        ``initial`` inputs (numbered 0..n-1, committed first); live inputs still waiting are
        renumbered after them (they are committed in the new episode, so the number ``enqueue``
        returned no longer holds: the trace records the one they were committed under)."""
        with self._lock:
            waiting = [replace(item, acceptance_sequence=len(initial) + n)
                       for n, item in enumerate(self._pending)]
            self._pending = [*initial, *waiting]
            self._next_acceptance = len(self._pending)

    def skip_past(self, acceptance_sequence: int) -> None:
        """Recorded inputs up to ``acceptance_sequence`` were committed without ``take`` (a
        replay block): later inputs are numbered after them."""
        with self._lock:
            if acceptance_sequence >= self._next_acceptance:
                self._next_acceptance = acceptance_sequence + 1

    def take(self, recorded: Sequence[AcceptedInput] = ()
             ) -> tuple[list[AcceptedInput], list[IngressRecord]]:
        """Everything to commit now in commit order, and everything rejected since the last
        call (owner thread). ``recorded`` are the replayed inputs due now: they commit after
        the live ones, keeping their recorded acceptance number unless it is already used."""
        if not self._pending and not self._rejected and not recorded:
            return [], []
        with self._lock:
            pending, self._pending = self._pending, []
            rejected, self._rejected = self._rejected, []
            following = self._next_acceptance
            for item in recorded:
                if item.acceptance_sequence < following:
                    item = replace(item, acceptance_sequence=following)
                following = item.acceptance_sequence + 1
                pending.append(item)
            self._next_acceptance = following
        return pending, rejected


def payload_text(item: ExternalInput) -> str:
    if item.payload_json:
        return item.payload_json
    try:
        return json.dumps(item.payload, sort_keys=True, separators=(",", ":"))
    except (TypeError, ValueError):
        return repr(item.payload)


def _int(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def external_input(source_id: str, source_sequence: int, payload_type: str,
                   payload: NodeMap | str) -> ExternalInput:
    """Build an ExternalInput from a payload object or its JSON text."""
    if isinstance(payload, str):
        try:
            decoded = json.loads(payload)
        except json.JSONDecodeError as exc:
            raise IngressError(f"source {source_id!r} sequence {source_sequence}: payload_json "
                               f"is not valid JSON: {exc.msg}") from None
        except (RecursionError, ValueError) as exc:  # too deep; a 5,000-digit integer
            problem = "nested too deeply" if isinstance(exc, RecursionError) else \
                str(exc).split(":")[0]
            raise IngressError(f"source {source_id!r} sequence {source_sequence}: payload_json "
                               f"is not accepted as JSON: {problem}") from None
        return ExternalInput(source_id, source_sequence, payload_type, decoded, payload)
    return ExternalInput(source_id, source_sequence, payload_type, dict(payload),
                         json.dumps(dict(payload), sort_keys=True, separators=(",", ":")))
