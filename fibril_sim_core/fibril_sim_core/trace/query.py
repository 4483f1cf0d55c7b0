"""Trace queries: one named quantity of a trace as a time series table.

A selector names what to extract, in the model's own vocabulary (the trace layout), so a user
can go from "what did the wheel joint do" to a CSV without knowing the snapshot array layout:

    body:<name>.position      x, y, z                  (snapshots' xpos)
    body:<name>.quaternion    w, x, y, z               (snapshots' xquat)
    joint:<name>.position     qpos slice (free 7, ball 4, slide/hinge 1)
    joint:<name>.velocity     qvel slice (free 6, ball 3, slide/hinge 1)
    sensor:<name>             sensordata slice
    actuator:<endpoint>.applied   value applied at each actuator application
    actuator:<endpoint>.force     snapshots' actuator_force of the endpoint's actuator
    device:<id>               device sample values (time = delivery, plus acquisition time)

Every row starts with ``time_ns`` (EpisodeTime) and ``episode``.
"""

from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass
from pathlib import Path
from collections.abc import Mapping
from typing import TYPE_CHECKING

from .._document import Node, NodeMap
from ..errors import TraceError
from .reader import TraceReader

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Sequence

    from ..records import StateSnapshot

__all__ = ["SELECTOR_KINDS", "QueryResult", "TraceQueryError", "query", "to_csv", "to_json"]


class TraceQueryError(TraceError, ValueError):
    """A selector is malformed or names something the trace does not have."""


#: One row of a query: time, episode and the selected values (plain Python numbers).
Row = tuple[int | float, ...]


@dataclass(frozen=True, slots=True)
class QueryResult:
    """A table: ``columns`` names, ``rows`` of plain Python values (JSON/CSV ready)."""

    selector: str
    columns: list[str]
    rows: list[Row]


# Kind → fields it accepts (empty: the selector has no ``.field`` part).
SELECTOR_KINDS: dict[str, tuple[str, ...]] = {
    "body": ("position", "quaternion"),
    "joint": ("position", "velocity"),
    "sensor": (),
    "actuator": ("applied", "force"),
    "device": (),
}

_JOINT_COLUMNS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "free": (("x", "y", "z", "qw", "qx", "qy", "qz"), ("vx", "vy", "vz", "wx", "wy", "wz")),
    "ball": (("qw", "qx", "qy", "qz"), ("wx", "wy", "wz")),
    "slide": (("position",), ("velocity",)),
    "hinge": (("position",), ("velocity",)),
}

_MAX_LISTED_NAMES = 40


def query(reader_or_path: TraceReader | Path | str, selector: str, *,
          salvage: bool = False) -> QueryResult:
    """Extract the series named by ``selector`` from a trace (a reader or a bag path).

    ``salvage`` (for a path) reads a damaged or truncated trace as far as it is intact; the
    reader's ``problems`` (issued as ``TraceWarning``) say what is missing.

    Raises:
        TraceQueryError: The selector is malformed or names an unknown kind, field or name;
            the message names the selector and lists the valid choices.
        TraceError: The trace cannot be read.
    """
    if isinstance(reader_or_path, TraceReader):
        return _query(reader_or_path, selector)
    with TraceReader(reader_or_path, salvage=salvage) as reader:
        return _query(reader, selector)


def to_csv(result: QueryResult) -> str:
    """The table as CSV text with a header row."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(result.columns)
    writer.writerows(result.rows)
    return out.getvalue()


def to_json(result: QueryResult) -> str:
    """The table as a JSON object ``{"selector", "columns", "rows"}``."""
    return json.dumps(
        {
            "selector": result.selector,
            "columns": result.columns,
            "rows": [list(r) for r in result.rows],
        }
    )


# -- selector parsing -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Selector:
    text: str
    kind: str
    name: str
    field: str


def _parse(selector: str) -> _Selector:
    grammar = "expected '<kind>:<name>' or '<kind>:<name>.<field>'"
    if ":" not in selector:
        msg = f"malformed selector {selector!r}: {grammar}; kinds: {', '.join(SELECTOR_KINDS)}"
        raise TraceQueryError(msg)
    kind, rest = selector.split(":", 1)
    fields = SELECTOR_KINDS.get(kind)
    if fields is None:
        msg = f"unknown selector kind {kind!r} in {selector!r}; valid kinds: " + (
            ", ".join(SELECTOR_KINDS)
        )
        raise TraceQueryError(msg)
    if not fields:
        name, field = rest, ""
    else:
        name, dot, field = rest.rpartition(".")
        if not dot or field not in fields:
            shown = f"field {field!r}" if dot else "no field"
            msg = f"selector {selector!r} has {shown}; {kind} selectors take " + (
                " or ".join(f"'{kind}:<name>.{f}'" for f in fields)
            )
            raise TraceQueryError(msg)
    if not name:
        msg = f"malformed selector {selector!r}: empty {kind} name; {grammar}"
        raise TraceQueryError(msg)
    return _Selector(selector, kind, name, field)


def _unknown_name(selector: _Selector, what: str, valid: Iterable[str]) -> TraceQueryError:
    # Hidden sensors the plan adds for devices stay queryable but are not advertised.
    names = sorted(name for name in valid if not name.startswith("__fibril__"))
    listed = ", ".join(names[:_MAX_LISTED_NAMES]) or "(none in this trace)"
    if len(names) > _MAX_LISTED_NAMES:
        listed += f", … ({len(names) - _MAX_LISTED_NAMES} more)"
    msg = f"unknown {what} {selector.name!r} in selector {selector.text!r}; valid: {listed}"
    return TraceQueryError(msg)


# -- per-kind extraction ----------------------------------------------------------------------


def _query(reader: TraceReader, selector: str) -> QueryResult:
    parsed = _parse(selector)
    handler: Callable[[TraceReader, _Selector], tuple[list[str], list[Row]]] = {
        "body": _body,
        "joint": _joint,
        "sensor": _sensor,
        "actuator": _actuator,
        "device": _device,
    }[parsed.kind]
    columns, rows = handler(reader, parsed)
    return QueryResult(selector, ["time_ns", "episode", *columns], rows)


def _layout_list(reader: TraceReader, key: str) -> list[Node]:
    value = reader.layout.get(key, [])
    if not isinstance(value, list):
        msg = f"{reader.path}: trace layout {key!r} is not a list"
        raise TraceError(msg)
    return value


def _layout_names(reader: TraceReader, key: str) -> list[str]:
    """A layout list of names (bodies, actuators)."""
    items = _layout_list(reader, key)
    names = [item for item in items if isinstance(item, str)]
    if len(names) != len(items):
        msg = f"{reader.path}: trace layout {key!r} is not a list of names"
        raise TraceError(msg)
    return names


def _layout_entries(reader: TraceReader, key: str) -> dict[str, NodeMap]:
    """A layout list of named objects (joints, sensors), by name."""
    entries: dict[str, NodeMap] = {}
    for entry in _layout_list(reader, key):
        if not isinstance(entry, Mapping) or not isinstance(entry.get("name"), str):
            msg = f"{reader.path}: trace layout {key!r} has an entry that is not a named object"
            raise TraceError(msg)
        entries[entry["name"]] = entry
    return entries


def _layout_map(reader: TraceReader, key: str) -> NodeMap:
    value = reader.layout.get(key, {})
    if not isinstance(value, Mapping):
        msg = f"{reader.path}: trace layout {key!r} is not an object"
        raise TraceError(msg)
    return value


def _layout_int(reader: TraceReader, entry: NodeMap, key: str) -> int:
    """An address or size of a layout entry (``int()`` of it, as written)."""
    value = entry.get(key)
    if not isinstance(value, (int, float, str)):
        msg = f"{reader.path}: trace layout entry {entry.get('name')!r} has no {key!r}"
        raise TraceError(msg)
    return int(value)


def _snapshot_rows(reader: TraceReader, pick: Callable[[StateSnapshot], Sequence[float]]
                   ) -> list[Row]:
    return [(s.time_ns, s.episode, *pick(s)) for s in reader.snapshots()]


def _body(reader: TraceReader, sel: _Selector) -> tuple[list[str], list[Row]]:
    bodies = _layout_names(reader, "bodies")
    if sel.name not in bodies:
        raise _unknown_name(sel, "body", bodies)
    index = bodies.index(sel.name)
    if sel.field == "position":
        return ["x", "y", "z"], _snapshot_rows(reader, lambda s: s.xpos[index].tolist())
    return ["w", "x", "y", "z"], _snapshot_rows(reader, lambda s: s.xquat[index].tolist())


def _joint(reader: TraceReader, sel: _Selector) -> tuple[list[str], list[Row]]:
    joints = _layout_entries(reader, "joints")
    joint = joints.get(sel.name)
    if joint is None:
        raise _unknown_name(sel, "joint", joints)
    kind = joint.get("type", "")
    widths = _JOINT_COLUMNS.get(kind) if isinstance(kind, str) else None
    if widths is None:
        msg = f"{reader.path}: joint {sel.name!r} has unknown type {joint.get('type')!r} in layout"
        raise TraceError(msg)
    if sel.field == "position":
        columns, start = widths[0], _layout_int(reader, joint, "qposadr")
        stop = start + len(columns)
        return list(columns), _snapshot_rows(reader, lambda s: s.qpos[start:stop].tolist())
    columns, start = widths[1], _layout_int(reader, joint, "dofadr")
    stop = start + len(columns)
    return list(columns), _snapshot_rows(reader, lambda s: s.qvel[start:stop].tolist())


def _sensor(reader: TraceReader, sel: _Selector) -> tuple[list[str], list[Row]]:
    sensors = _layout_entries(reader, "sensors")
    sensor = sensors.get(sel.name)
    if sensor is None:
        raise _unknown_name(sel, "sensor", sensors)
    start, dim = _layout_int(reader, sensor, "adr"), _layout_int(reader, sensor, "dim")
    stop = start + dim
    columns = ["value"] if dim == 1 else [f"value_{i}" for i in range(dim)]
    return columns, _snapshot_rows(reader, lambda s: s.sensordata[start:stop].tolist())


def _actuator(reader: TraceReader, sel: _Selector) -> tuple[list[str], list[Row]]:
    endpoints = _layout_map(reader, "endpoints")
    if sel.name not in endpoints:
        raise _unknown_name(sel, "actuator endpoint", endpoints)
    if sel.field == "applied":
        rows: list[Row] = [(a.time_ns, a.episode, a.applied)
                           for a in reader.actuator_applications(sel.name)]
        return ["applied"], rows
    actuators = _layout_names(reader, "actuators")
    actuator = endpoints[sel.name]
    if not isinstance(actuator, str) or actuator not in actuators:
        msg = f"{reader.path}: endpoint {sel.name!r} binds actuator {actuator!r}, not in layout"
        raise TraceError(msg)
    index = actuators.index(actuator)
    return ["force"], _snapshot_rows(reader, lambda s: (float(s.actuator_force[index]),))


def _device(reader: TraceReader, sel: _Selector) -> tuple[list[str], list[Row]]:
    devices = _layout_map(reader, "devices")
    if sel.name not in devices:
        raise _unknown_name(sel, "device", devices)
    device = devices[sel.name]
    listed = device.get("component_names", []) if isinstance(device, Mapping) else None
    if not isinstance(listed, (list, tuple)):
        msg = f"{reader.path}: trace layout device {sel.name!r} has no component_names list"
        raise TraceError(msg)
    names: list[str] = list(listed)
    rows: list[Row] = []
    for out in reader.device_outputs(sel.name):
        if not names:
            names = list(out.component_names)
        rows.append(
            (out.delivery_time_ns, out.episode, out.acquisition_time_ns, *out.values.tolist())
        )
    return ["acquisition_time_ns", *names], rows
