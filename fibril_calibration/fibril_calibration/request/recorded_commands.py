"""A recording source's commands (``inputs:`` of an entry): streams mapped to actuator
endpoints, checked once, then cut per window into recorded inputs on the tick grid (the
``commit`` policy) with the statistics of how far their times moved (``describe_timing``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import mujoco
import numpy as np
from fibril_sim_core.records import IngressRecord

from fibril_sim_core import schema as s
from fibril_sim_core.components.endpoint import ActuatorDescriptor

from ..recordings.sources import MOTOR_COMMAND
from .input_timing import InputTiming, new_stats
from .streams import STREAM_KEYS, EntrySource, MappedStream, map_stream
from .validity import Plausible, joint_plausible

if TYPE_CHECKING:
    from fibril_sim_core.plan import SimulationPlan

__all__ = ["COMMIT_POLICIES", "MOTOR_PAYLOAD", "CommandInput", "parse_inputs", "window_inputs"]

COMMIT_POLICIES = ("next_tick", "nearest_tick")
MOTOR_PAYLOAD = "fibril_sim/motor_command/v1"
_NS = 1_000_000_000


@dataclass(frozen=True)
class CommandInput:
    """One endpoint fed by one stream."""

    source_id: str
    mapped: MappedStream
    mode: str | None  # None: per row (a MotorCommand)
    commit: str
    latency_ticks: int = 0  # the endpoint's command latency


def parse_inputs(value: object, where: s.Where, entry: EntrySource,
                 plan: SimulationPlan) -> list[CommandInput]:
    """An entry's ``inputs``: each endpoint's stream, mode and commit policy, checked."""
    out: list[CommandInput] = []
    checked: set[tuple[str, str]] = set()
    for i, item in enumerate(s.sequence(value, where)):
        at = where.key(i)
        body = s.mapping(item, at)
        s.keys(body, at, required=("commit",),
               optional=STREAM_KEYS + ("source_id", "endpoints", "mode"))
        commit = s.string(body["commit"], at.key("commit"))
        if commit not in COMMIT_POLICIES:
            raise at.key("commit").fail(f"unknown commit policy {commit!r}; expected one of "
                                        f"{', '.join(COMMIT_POLICIES)}")
        mode = s.string(body["mode"], at.key("mode")) if "mode" in body else None
        if ("source_id" in body) == ("endpoints" in body):
            raise at.fail("give 'source_id' (one endpoint) or 'endpoints' (a mapping of joint "
                          "names or columns to endpoint source ids)")
        pairs: list[tuple[str, str | None, s.Where]] = []
        if "source_id" in body:
            pairs.append((s.string(body["source_id"], at.key("source_id")), None, at))
        else:
            ew = at.key("endpoints")
            for key, endpoint_id in s.mapping(body["endpoints"], ew).items():
                pairs.append((s.string(endpoint_id, ew.key(str(key))), str(key),
                              ew.key(str(key))))
            if not pairs:
                raise ew.fail("expected at least one name → endpoint source id")
            if "topic" in body and "field" not in body:
                raise at.key("field").fail("missing: 'endpoints' index an array field by "
                                           "name (e.g. field: effort)")
            if "topic" not in body and ("column" in body or "columns" in body):
                raise at.fail("with 'endpoints', the mapping's keys are the CSV columns; give "
                              "no column / columns")
        for source_id, name, pw in pairs:
            endpoint = plan.endpoints.get(source_id)
            if endpoint is None:
                raise pw.fail(f"unknown endpoint source id {source_id!r}; the plan's actuator "
                              f"endpoints: {', '.join(plan.endpoints) or 'none'}")
            if endpoint.payload_type != MOTOR_PAYLOAD:
                raise pw.fail(f"endpoint {source_id!r} takes {endpoint.payload_type!r}; "
                              f"recordings feed {MOTOR_PAYLOAD} endpoints")
            bounds = _endpoint_plausible(plan, endpoint, mode)
            if name is not None and "topic" in body:
                mapped = map_stream(body, at, entry, field_suffix=name, plausible=bounds)
            elif name is not None:
                mapped = map_stream(body, pw, entry, column=name, plausible=bounds)
            else:
                mapped = map_stream(body, at, entry, plausible=bounds)
            modes: tuple[str, ...]
            if mapped.stream.modes is None:
                if mode is None:
                    raise at.key("mode").fail(f"missing: the command mode of {source_id!r} "
                                              f"(one of {', '.join(endpoint.modes)})")
                modes = (mode,)
            else:
                if mode is not None:
                    raise at.key("mode").fail(f"{MOTOR_COMMAND} carries its own mode; give no "
                                              f"mode")
                modes = tuple(sorted(set(mapped.stream.modes)))
            if mapped.stream.values.shape[1] != 1:
                raise at.fail(f"{mapped.stream.label} gives {mapped.stream.values.shape[1]} "
                              f"values per sample; a command is one value")
            for m in modes:
                if (source_id, m) in checked:
                    continue
                try:
                    endpoint.create().parse({"mode": m, "value": 0.0})
                except ValueError as exc:
                    raise (at.key("mode") if "mode" in body else at).fail(
                        f"{source_id!r}: {exc}") from None
                checked.add((source_id, m))
            out.append(CommandInput(source_id, mapped, mode, commit, endpoint.latency_ticks))
    return out


def _endpoint_plausible(plan: SimulationPlan, endpoint: ActuatorDescriptor,
                        mode: str | None) -> Plausible | None:
    """A command's bounds: a position target within its joint's range (plus the margin), any
    other command within the plausible limit."""
    model = plan.model
    actuator = endpoint.actuator_id
    if int(model.actuator_trntype[actuator]) != int(mujoco.mjtTrn.mjTRN_JOINT):
        return joint_plausible(model, "", "command")
    joint = mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_JOINT,
                              int(model.actuator_trnid[actuator, 0])) or ""
    bounds = joint_plausible(model, joint, "position" if mode == "position" else "command")
    return replace(bounds, what=f"{bounds.what} for endpoint {endpoint.endpoint!r}")


def _commit_ticks(relative: np.ndarray, dt: int, policy: str) -> np.ndarray:
    if policy == "next_tick":
        ticks: np.ndarray = -(-relative // dt)
        return ticks
    k = relative // dt
    nearest: np.ndarray = k + (2 * (relative - k * dt) > dt)  # a tie to the earlier tick
    return nearest


def window_inputs(inputs: Sequence[CommandInput], start: int, end: int, dt: int
                  ) -> tuple[tuple[IngressRecord, ...], InputTiming]:
    """The recorded inputs of one window (absolute times ``[start, end)``) and how their
    sample times were moved onto ticks. Replay order: tick, then recorded time, then the
    order of the ``inputs`` mappings; the command in force at the start comes first."""
    ticks_parts, times_parts, order_parts, row_parts, value_parts = [], [], [], [], []
    timing: InputTiming = {}
    for order, item in enumerate(inputs):
        times = item.mapped.stream.times_ns
        first = int(np.searchsorted(times, start, "left"))
        stop = int(np.searchsorted(times, end, "left"))
        relative = times[first:stop] - start
        ticks = _commit_ticks(relative, dt, item.commit)
        shift = ticks * dt - relative
        stats = timing.setdefault(item.commit, new_stats())
        stats["samples"] += int(relative.shape[0])
        stats["moved"] += int(np.count_nonzero(shift))
        if shift.size:
            stats["max_shift_ns"] = max(stats["max_shift_ns"], int(np.abs(shift).max()))
        rows = np.arange(first, stop)
        stamps = times[first:stop]
        if first > 0:  # the command in force at the window start
            stats["held_at_start"] += 1
            # committed at tick 0, it acts only after the endpoint's latency: those first
            # ticks run without it (a fresh instance's actuators start from rest)
            stats["held_latency_ticks"] = max(stats["held_latency_ticks"], item.latency_ticks)
            ticks = np.concatenate(([0], ticks))
            stamps = np.concatenate(([start - 1], stamps))
            rows = np.concatenate(([first - 1], rows))
        ticks_parts.append(ticks)
        times_parts.append(stamps)
        order_parts.append(np.full(rows.shape[0], order))
        row_parts.append(rows)
        value_parts.append(item.mapped.stream.values[rows, 0])
    if not ticks_parts:
        return (), timing
    ticks = np.concatenate(ticks_parts)
    stamps = np.concatenate(times_parts)
    orders = np.concatenate(order_parts)
    rows = np.concatenate(row_parts)
    values = np.concatenate(value_parts)
    replay = np.lexsort((rows, orders, stamps, ticks))
    orders = orders[replay]
    # source_sequence counts per endpoint in replay order
    endpoint_of = np.array([sorted({i.source_id for i in inputs}).index(i.source_id)
                            for i in inputs])[orders]
    sequence = np.empty(orders.shape[0], dtype=np.int64)
    for endpoint in np.unique(endpoint_of).tolist():
        mask = endpoint_of == endpoint
        sequence[mask] = np.arange(1, int(mask.sum()) + 1)
    source_ids = [item.source_id for item in inputs]
    prefixes = {(order, mode): f'{{"mode":"{mode}","value":'
                for order, item in enumerate(inputs)
                for mode in (set(item.mapped.stream.modes) if item.mapped.stream.modes
                             else (item.mode,))}
    fixed = [prefixes[(order, item.mode)] if item.mapped.stream.modes is None else None
             for order, item in enumerate(inputs)]
    modes = [item.mapped.stream.modes or () for item in inputs]  # () where fixed
    records: list[IngressRecord] = []
    append = records.append
    for acceptance, (tick, order, row, value, number) in enumerate(zip(
            ticks[replay].tolist(), orders.tolist(), rows[replay].tolist(),
            values[replay].tolist(), sequence.tolist())):
        prefix = fixed[order] or prefixes[(order, modes[order][row])]
        append(IngressRecord(0, source_ids[order], number, MOTOR_PAYLOAD,
                             prefix + repr(value) + "}", True, tick, acceptance, "", 0))
    for stats in timing.values():
        stats["max_shift_s"] = stats["max_shift_ns"] / _NS
    return tuple(records), timing
