"""Pre-serialized messages for the hot topics: serialize a prototype once, patch numbers in.

Building an rclpy message object and converting it to C for every sample costs about three
times the DDS write itself. The hot messages (encoder JointState, Imu, Clock, DeviceSample)
have a fixed layout once their strings and array lengths are fixed, so each gets a template:
the prototype's CDR bytes with the offsets of its numeric fields, found by serializing it with
distinct sentinel values. ``encode`` copies the template, packs the numbers and returns bytes
that ``Publisher.publish`` writes as they are (rclpy's serialized-message path).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any

from rclpy.serialization import serialize_message

_FORMATS = {"time": "<iI", "f64": "<d", "i64": "<q", "u32": "<I"}


def _sentinel(kind: str, k: int, length: int = 1) -> Any:
    if kind == "time":
        return (0x3A000000 + 0x10101 * k, 0x2B000000 + 0x10101 * k)
    if kind == "f64":
        return 1.234567891e17 + 1.0e9 * k
    if kind == "f64s":
        return [1.234567891e17 + 1.0e9 * k + 1.0e3 * j for j in range(length)]
    if kind == "i64":
        return 0x5C00000000000000 + 0x1000001 * k
    return 0x6D000000 + 0x10101 * k  # u32


def _assign(msg: Any, path: str, kind: str, value: Any) -> None:
    *parents, name = path.split(".")
    target = msg
    for parent in parents:
        target = getattr(target, parent)
    if kind == "time":
        stamp = getattr(target, name)
        stamp.sec, stamp.nanosec = value
    else:
        setattr(target, name, value)


class Template:
    """A message of fixed layout: ``fields`` are ``(attribute path, kind[, length])`` with kind
    ``time`` (builtin_interfaces/Time: pass (sec, nanosec)), ``f64``, ``i64``, ``u32`` or
    ``f64s`` (a float64 sequence of that fixed length: pass a sequence)."""

    def __init__(self, prototype: Any, fields: Sequence[tuple]) -> None:
        packers = []
        for k, field in enumerate(fields):
            path, kind = field[0], field[1]
            length = field[2] if len(field) > 2 else 1
            _assign(prototype, path, kind, _sentinel(kind, k, length))
        data = serialize_message(prototype)
        for k, field in enumerate(fields):
            path, kind = field[0], field[1]
            length = field[2] if len(field) > 2 else 1
            value = _sentinel(kind, k, length)
            if kind == "f64s":
                fmt, probe = f"<{length}d", struct.pack(f"<{length}d", *value)
            elif kind == "time":
                fmt, probe = _FORMATS[kind], struct.pack(_FORMATS[kind], *value)
            else:
                fmt, probe = _FORMATS[kind], struct.pack(_FORMATS[kind], value)
            offset = data.find(probe)
            if offset < 0 or data.find(probe, offset + 1) >= 0:
                raise ValueError(f"template: field {path!r} not found once in the layout")
            packers.append((struct.Struct(fmt).pack_into, offset, kind in ("time", "f64s")))
        self._data = data
        self._packers = packers

    def encode(self, *values: Any) -> bytes:
        buf = bytearray(self._data)
        for (pack, offset, spread), value in zip(self._packers, values):
            if spread:
                pack(buf, offset, *value)
            else:
                pack(buf, offset, value)
        return bytes(buf)
