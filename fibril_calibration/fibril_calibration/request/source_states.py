"""A recording-source entry's ``initial_state``: ``*_from`` keys that take a value from a
stream or a signal at each window's start (a quaternion by shortest-path SLERP), or from a
franka_sysid sidecar (``q_init``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import mujoco
import numpy as np

from fibril_sim_core import schema as s

from ..alignment import align
from ..recordings.sources import SourceError
from .streams import STREAM_KEYS, EntrySource, MappedStream, map_stream
from .validity import joint_plausible

__all__ = ["FixedValue", "StateEntry", "state_entries", "state_values"]

_NS = 1_000_000_000

@dataclass(frozen=True)
class FixedValue:
    """A recorded constant (a sidecar's ``q_init``): the state at the run's first row."""

    values: list[float]
    where: s.Where


#: An initial_state entry (its own keys) and the ``*_from`` values it takes: key → source.
StateEntry = tuple[dict[str, object], list[tuple[str, MappedStream | FixedValue]]]

_FROM = {"joint": (("qpos_from", "qpos"), ("qvel_from", "qvel")),
         "mocap": (("pos_from", "pos"), ("quat_from", "quat"))}


def state_entries(value: object, where: s.Where, entry: EntrySource,
                  signals: Mapping[str, MappedStream], model: mujoco.MjModel | None = None
                  ) -> tuple[list[StateEntry], list[MappedStream]]:
    """``initial_state`` entries whose ``*_from`` keys name a stream or a signal."""
    source = entry.source
    out: list[StateEntry] = []
    streams: list[MappedStream] = []
    for i, item in enumerate(s.sequence(value, where)):
        at = where.key(i)
        body = dict(s.mapping(item, at))
        pairs = _FROM.get(str(body.get("type")), ())
        taken: list[tuple[str, MappedStream | FixedValue]] = []
        for from_key, key in pairs:
            if from_key not in body:
                continue
            if key in body:
                raise at.fail(f"give '{key}' or '{from_key}', not both")
            fw = at.key(from_key)
            ref = s.mapping(body.pop(from_key), fw)
            if "sidecar" in ref:
                s.keys(ref, fw, required=("sidecar",), optional=("index",))
                if not source.describe().sidecar:
                    raise fw.key("sidecar").fail(f"{str(source.path)!r} has no sidecar (only "
                                                 f"the franka_sysid format does)")
                index = (s.integer(ref["index"], fw.key("index")) if "index" in ref else None)
                try:
                    fixed = source.sidecar_value(s.string(ref["sidecar"], fw.key("sidecar")),
                                                 index)
                except SourceError as exc:
                    raise fw.fail(str(exc)) from None
                taken.append((key, FixedValue(fixed, fw)))
                continue
            if "signal" in ref:
                s.keys(ref, fw, required=("signal",))
                name = s.string(ref["signal"], fw.key("signal"))
                if name not in signals:
                    raise fw.key("signal").fail(f"no signal {name!r} in this entry; its "
                                                f"signals: {', '.join(signals) or 'none'}")
                mapped = signals[name]
            else:
                s.keys(ref, fw, optional=STREAM_KEYS)
                bounds = None
                if body.get("type") == "joint" and isinstance(body.get("joint"), str) \
                        and model is not None:
                    bounds = joint_plausible(model, body["joint"],
                                             "position" if key == "qpos" else "velocity")
                mapped = map_stream(ref, fw, entry, plausible=bounds)
                streams.append(mapped)
            taken.append((key, mapped))
        out.append((body, taken))
    return out, streams


def state_values(entries: Sequence[StateEntry], start: int, origin: int, label: str,
                 where: s.Where) -> list[dict[str, object]]:
    """The initial-state entries of a window starting at ``start`` (absolute ns)."""
    out = []
    for body, taken in entries:
        entry = dict(body)
        for key, mapped in taken:
            if isinstance(mapped, FixedValue):
                if start != origin:
                    raise mapped.where.fail(f"{label}: a sidecar value is the state at the "
                                            f"run's first row; this window starts "
                                            f"{(start - origin) / _NS:g} s later (use the "
                                            f"logged columns)")
                entry[key] = list(mapped.values)
                continue
            times, values = mapped.stream.times_ns, mapped.stream.values
            after = int(np.searchsorted(times, start, "left"))
            if after >= times.shape[0]:
                raise where.fail(f"{label}: {mapped.stream.label} has no sample at or after "
                                 f"the window start for the initial {key}")
            if times[after] == start or after == 0:
                row = values[after]
            elif key == "quat":  # shortest-path SLERP (q and -q are one orientation)
                row = align(np.array([start], dtype=np.int64), times[after - 1:after + 1],
                            values[after - 1:after + 1], "linear", quaternion=True)[0]
            else:
                t0, t1 = times[after - 1], times[after]
                w = (start - t0) / (t1 - t0)
                row = (1 - w) * values[after - 1] + w * values[after]
            entry[key] = [float(v) for v in row]
        out.append(entry)
    return out

