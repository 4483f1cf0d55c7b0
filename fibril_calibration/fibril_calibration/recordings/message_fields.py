"""A message field path as a request names it (``position[joint3]``, ``pose.pose.orientation``,
``angular_velocity``, ``data``) turned into a function from a decoded message to a row of
floats, built from the first message of a topic.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from pathlib import Path
from dataclasses import dataclass
from operator import attrgetter
from typing import Protocol, SupportsFloat

import numpy as np
import numpy.typing as npt

from .sources import SourceError, listing

__all__ = ["FieldError", "accessor", "short_type"]

#: one message's values: a tuple of floats or a flat numeric array
Row = tuple[float, ...] | npt.NDArray[np.generic]
#: a decoded message (rosbags or rclpy: a boundary, read by attribute) → its row
Accessor = Callable[[object], Row]


class _Elements(Protocol):
    """An array field of a message (a list, tuple or numpy array)."""

    def __len__(self) -> int: ...
    def __getitem__(self, index: int, /) -> SupportsFloat: ...


class _Vector(Protocol):
    x: float
    y: float
    z: float


class _Quaternion(_Vector, Protocol):
    w: float


def short_type(msgtype: str) -> str:
    """``pkg/msg/Name`` and ``pkg/Name`` are the same type."""
    parts = msgtype.split("/")
    return f"{parts[0]}/{parts[-1]}" if len(parts) >= 2 else msgtype


class FieldError(Exception):
    """A later message does not fit the accessor built from the first (worded by the caller)."""


_TOKEN = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)(?:\[([^\]]+)\])?$")


def accessor(field: str, first: object, msgtype: str, label: str, path: Path | None = None,
              topic: str = "") -> tuple[Accessor, tuple[str, ...]]:
    """A function message → row of floats for ``field``, and the row's component names.

    Built from the first message; later messages go through the same steps (a named index is
    looked up again when the ``name`` list changes)."""
    steps: list[tuple[str, str | None]] = []
    for token in field.split("."):
        match = _TOKEN.match(token.strip())
        if match is None:
            raise SourceError(f"{label}: cannot parse field path {field!r} (expected names "
                              f"separated by '.', an optional [index] or [name] on the last)")
        steps.append((match.group(1), match.group(2)))
    if any(index is not None for _, index in steps[:-1]):
        raise SourceError(f"{label}: only the last part of {field!r} may have an [index]")
    names = [name for name, _ in steps]
    index = steps[-1][1]
    node: object = first  # message fields: read by attribute
    parent: object = None
    for n, name in enumerate(names):
        if not hasattr(node, name):
            at = ".".join(names[:n]) or msgtype
            raise SourceError(f"{label}: {msgtype} has no field {'.'.join(names[:n + 1])!r} "
                              f"({at}: {_listed(_fields(node), 'fields', path, topic)})")
        parent, node = node, getattr(node, name)
    # A message is untyped (the boundary): each accessor reads its field with an attrgetter
    # of the whole path and declares what it expects there (a Protocol, an array).
    dotted = ".".join(names)

    if index is not None:
        if not isinstance(node, (np.ndarray, list, tuple)):
            raise SourceError(f"{label}: {'.'.join(names)} of {msgtype} is not an array; "
                              f"it cannot take [{index}]")
        if re.fullmatch(r"-?\d+", index):
            position = int(index)
            size = len(node)
            if not -size <= position < size:
                raise SourceError(f"{label}: index {position} is out of range (the first "
                                  f"message has {size} element(s))")

            read = attrgetter(dotted)

            def by_position(message: object) -> Row:
                values: _Elements = read(message)
                try:
                    return (float(values[position]),)
                except IndexError:
                    raise FieldError(f"{'.'.join(names)} has {len(values)} element(s), no "
                                      f"index {position}") from None

            return by_position, (field,)
        if parent is None or not hasattr(parent, "name"):
            raise SourceError(f"{label}: [{index}] names an element, but {msgtype} has no "
                              f"'name' list beside {names[-1]!r} (use a numeric index)")
        listed = list(parent.name)
        if index not in listed:
            raise SourceError(f"{label}: no element named {index!r}; the first message's "
                              f"{_listed(listed, 'names', path, topic)}")
        cache = _NamedIndex(listed, listed.index(index))
        read, read_names = attrgetter(dotted), attrgetter(".".join([*names[:-1], "name"]))

        def by_name(message: object) -> Row:
            values: _Elements = read(message)
            current: list[str] = read_names(message)
            if current != cache.names:
                current = list(current)
                if index not in current:
                    raise FieldError(f"no element named {index!r} (names: "
                                      f"{', '.join(current)})")
                cache.names, cache.position = current, current.index(index)
            try:
                return (float(values[cache.position]),)
            except IndexError:
                raise FieldError(f"{'.'.join(names)} has {len(values)} element(s) for "
                                  f"{len(current)} name(s)") from None

        return by_name, (field,)
    return _leaf(node, dotted, field, msgtype, label)


def _listed(names: Sequence[str], what: str, path: Path | None, topic: str) -> str:
    if path is None:
        return f"its {what}: {', '.join(names) or 'none'}"
    return listing(names, what, path, f" --fields {topic}")


@dataclass
class _NamedIndex:
    """The ``name`` list last seen and the position of the named element in it."""

    names: list[str]
    position: int


def _leaf(node: object, dotted: str, field: str, msgtype: str,
          label: str) -> tuple[Accessor, tuple[str, ...]]:
    """The accessor of the field at ``dotted`` (``node`` in the first message)."""
    read = attrgetter(dotted)
    if isinstance(node, bool):
        return (lambda m: (float(read(m)),)), (field,)
    if isinstance(node, (int, float, np.number)):
        return (lambda m: (float(read(m)),)), (field,)
    if isinstance(node, np.ndarray) and node.dtype.kind in "fiub":
        width = int(node.size)

        def array(message: object) -> Row:
            values: npt.NDArray[np.generic] = read(message)
            if values.size != width:
                raise FieldError(f"{field} has {values.size} element(s), the first message "
                                  f"{width}")
            return values.ravel()

        return array, tuple(f"{field}[{i}]" for i in range(width))
    fields = set(_fields(node))
    if {"x", "y", "z", "w"} <= fields:  # a quaternion: calibration uses w, x, y, z
        def quaternion(message: object) -> Row:
            q: _Quaternion = read(message)
            return (q.w, q.x, q.y, q.z)

        return quaternion, ("w", "x", "y", "z")
    if {"x", "y", "z"} <= fields:
        def vector(message: object) -> Row:
            v: _Vector = read(message)
            return (v.x, v.y, v.z)

        return vector, ("x", "y", "z")
    if "data" in fields:
        inner = getattr(node, "data")
        if isinstance(inner, (int, float, np.number)) and not isinstance(inner, bool):
            read_data = attrgetter(f"{dotted}.data")
            return (lambda m: (float(read_data(m)),)), (field,)
    raise SourceError(f"{label}: {field!r} of {msgtype} is a {type(node).__name__} with fields "
                      f"{', '.join(sorted(fields)) or 'none'}; name a numeric field, array, "
                      f"vector or quaternion")


def _fields(node: object) -> list[str]:
    names = getattr(node, "__dataclass_fields__", None)
    if names:
        return [n for n in names if n != "__msgtype__"]
    return []
