"""Which records a client receives: filters by record kind and by device id.

A client that wants one IMU subscribes with ``kinds=("device_output",), devices=("imu",)`` and
never receives a camera stream. The same filter serves in-process callbacks (checked on the
host thread) and remote clients (checked by the server before anything is encoded).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from ..errors import InstanceError
from ..records import (ActuatorApplication, DeviceOutput, EpisodeStart, FrameTiming,
                       IngressRecord, RenderFrame, StateObservation, StateSnapshot)

#: Record kind name per record type (the names clients subscribe with).
RECORD_KINDS: dict[type, str] = {
    DeviceOutput: "device_output",
    ActuatorApplication: "actuator_application",
    IngressRecord: "ingress_record",
    StateSnapshot: "state_snapshot",
    FrameTiming: "frame_timing",
    EpisodeStart: "episode_start",
    RenderFrame: "render_frame",
    StateObservation: "state_observation",
}
#: Kinds a connection's own streams deliver (never through the host's dispatch).
STREAM_KINDS = frozenset({"render_frame", "state_observation"})
KIND_NAMES = frozenset(RECORD_KINDS.values())
_KIND_TYPES = {kind: cls for cls, kind in RECORD_KINDS.items()}
_UNWANTED = frozenset({"(unwanted)"})  # a type no filter passes (``wanted`` has no entry)


def record_source(record: object) -> str:
    """The id a ``devices`` filter matches: a device id, an endpoint, an input source or a
    camera; "" for records that belong to no device (frame timing, state, episode start)."""
    if type(record) is DeviceOutput:
        return record.device_id
    if type(record) is ActuatorApplication:
        return record.endpoint
    if type(record) is IngressRecord:
        return record.source_id
    if type(record) is RenderFrame:
        return record.camera
    return ""


@dataclass(frozen=True, slots=True)
class RecordFilter:
    """``kinds``: record kind names (None: every kind); ``devices``: ids of devices, endpoints,
    input sources or cameras (None: all; when given, records of no device are left out)."""

    kinds: frozenset[str] | None = None
    devices: frozenset[str] | None = None

    @classmethod
    def of(cls, kinds: Iterable[str] | str | None = None,
           devices: Iterable[str] | str | None = None) -> RecordFilter:
        """A checked filter; a single string counts as a one-element list."""
        kind_set = None if kinds is None else frozenset([kinds] if isinstance(kinds, str)
                                                       else kinds)
        if kind_set is not None:
            unknown = sorted(kind_set - KIND_NAMES)
            if unknown:
                raise InstanceError(f"on_record: unknown record kind(s) "
                                    f"{', '.join(map(repr, unknown))}; kinds: "
                                    f"{', '.join(sorted(KIND_NAMES))}")
        device_set = None if devices is None else frozenset(
            [devices] if isinstance(devices, str) else devices)
        if device_set is not None and not all(isinstance(d, str) for d in device_set):
            raise InstanceError("on_record: devices must be strings (device ids)")
        return cls(kind_set, device_set)

    def matches(self, record: object) -> bool:
        if self.kinds is not None and RECORD_KINDS.get(type(record)) not in self.kinds:
            return False
        return self.devices is None or record_source(record) in self.devices

    def document(self) -> dict[str, list[str] | None]:
        return {"kinds": None if self.kinds is None else sorted(self.kinds),
                "devices": None if self.devices is None else sorted(self.devices)}


@dataclass(frozen=True, slots=True)
class AnyOf:
    """Passes what any of ``filters`` passes (the subscriptions of a server's clients),
    checked with the per-type map ``wanted_records`` makes of them: two lookups a record."""

    filters: tuple[RecordFilter, ...]
    wanted: dict[type, frozenset[str] | None] = field(init=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "wanted", wanted_records(self.filters))

    def matches(self, record: object) -> bool:
        devices = self.wanted.get(type(record), _UNWANTED)
        if devices is _UNWANTED:
            return False
        return devices is None or record_source(record) in devices

    @property
    def passes_all(self) -> bool:
        return any(f.kinds is None and f.devices is None for f in self.filters)


def wanted_records(filters: Iterable[RecordFilter | AnyOf | None]
                   ) -> dict[type, frozenset[str] | None]:
    """What ``filters`` pass together, by record type: the ids wanted (None: every one); a
    type none of them passes is left out. Render frames and state observations are not among
    them (a connection's own streams: they never pass through the host's dispatch). The instance makes only these (``set_interest``)."""
    wanted: dict[type, set[str] | None] = {}
    flat = (f for any_of in filters
            for f in (any_of.filters if isinstance(any_of, AnyOf) else (any_of,)))
    for record_filter in flat:
        kinds = KIND_NAMES if record_filter is None or record_filter.kinds is None \
            else record_filter.kinds
        devices = None if record_filter is None else record_filter.devices
        for kind in kinds - STREAM_KINDS:
            cls = _KIND_TYPES[kind]
            if devices is None:
                wanted[cls] = None
            else:
                ids = wanted.setdefault(cls, set())
                if ids is not None:  # (None: every id already)
                    ids.update(devices)
    return {cls: None if ids is None else frozenset(ids) for cls, ids in wanted.items()}
