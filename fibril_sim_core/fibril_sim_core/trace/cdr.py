"""Batch CDR encoding: a whole batch of same-shaped messages serialized by numpy at once.

A ROS 2 CDR message whose strings and array lengths are known is a fixed byte layout: a template
with the numeric fields at fixed offsets. ``Layout`` builds that template once per shape (e.g.
per device: its ids, frame and component names never change) and describes the numeric fields
as a numpy structured dtype over it, so encoding N records is a handful of column assignments
instead of N calls into a serializer. A layout may reserve bytes in front of the CDR data: the
trace writer puts the MCAP message record header there, so one row *is* the whole record.

The bytes are identical to rosbags' ``serialize_cdr`` (little-endian XCDR1, primitives aligned
to their size relative to the start of the data after the 4-byte encapsulation header, no
trailing padding); the unit tests compare every traced message type with it.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Iterable, Mapping, Sequence
from typing import TypeAlias, cast

import numpy as np
import numpy.typing as npt

#: A field's numpy format: a type string (``<f8``, ``S12``) or a sub-array (type, shape).
FieldFormat: TypeAlias = str | tuple[str, tuple[int, ...]]

__all__ = ["Layout", "split_ns"]

_ENCAPSULATION = b"\x00\x01\x00\x00"  # CDR, little endian
_NS_PER_S = 1_000_000_000
_INT32_MAX = 2**31 - 1
_FEW = 32  # integer columns up to this long are range-checked by Python (see _bounds)


class Layout:
    """The byte template of one message shape and the offsets of its variable fields."""

    def __init__(self, prefix: int = 0) -> None:
        self._buffer = bytearray(prefix) + _ENCAPSULATION
        self._origin = prefix + len(_ENCAPSULATION)  # CDR alignment is relative to this
        self._names: list[str] = []
        self._formats: list[FieldFormat] = []
        self._offsets: list[int] = []
        self._times: list[str] = []
        self._dtype: np.dtype | None = None
        self._template = np.empty(0, dtype=np.uint8)  # (set with _dtype)
        self._plain: list[tuple[str, np.dtype]] = []  # (name, dtype) of the untimed fields

    # -- building -----------------------------------------------------------------------------

    def _align(self, size: int) -> None:
        self._buffer += b"\x00" * (-(len(self._buffer) - self._origin) % size)

    def _field(self, name: str, fmt: FieldFormat, size: int, align: int) -> None:
        self._align(align)
        self._names.append(name)
        self._formats.append(fmt)
        self._offsets.append(len(self._buffer))
        self._buffer += b"\x00" * size

    def field(self, name: str, fmt: str) -> Layout:
        """A primitive: ``<u4``, ``<i8``, ``<u8``, ``<f8`` or ``u1`` (bool)."""
        size = np.dtype(fmt).itemsize
        self._field(name, fmt, size, size)
        return self

    def prefix_field(self, name: str, fmt: str, offset: int) -> Layout:
        """A field inside the reserved prefix (not CDR-aligned)."""
        self._names.append(name)
        self._formats.append(fmt)
        self._offsets.append(offset)
        return self

    def time(self, name: str) -> Layout:
        """``builtin_interfaces/Time`` from integer nanoseconds (column ``name``)."""
        self._field(name + ".sec", "<i4", 4, 4)
        self._field(name + ".nanosec", "<u4", 4, 4)
        self._times.append(name)
        return self

    def string(self, text: str) -> Layout:
        """A string that is the same in every record of this shape."""
        data = text.encode() + b"\x00"
        self._align(4)
        self._buffer += struct.pack("<I", len(data)) + data
        return self

    def text(self, name: str, size: int) -> Layout:
        """A string of ``size`` UTF-8 bytes that varies from record to record (column of bytes)."""
        self._align(4)
        self._buffer += struct.pack("<I", size + 1)
        if size:
            self._names.append(name)
            self._formats.append(f"S{size}")
            self._offsets.append(len(self._buffer))
        self._buffer += b"\x00" * (size + 1)
        return self

    def floats(self, name: str, count: int) -> Layout:
        """``float64[]`` of ``count`` values."""
        self._align(4)
        self._buffer += struct.pack("<I", count)
        if count:
            self._field(name, ("<f8", (count,)), 8 * count, 8)
        return self

    def strings(self, texts: Sequence[str]) -> Layout:
        """``string[]`` that is the same in every record of this shape."""
        self._align(4)
        self._buffer += struct.pack("<I", len(texts))
        for text in texts:
            self.string(text)
        return self

    def patch(self, offset: int, data: bytes) -> Layout:
        """Fix bytes of the template (e.g. the constant part of a prefix)."""
        self._buffer[offset:offset + len(data)] = data
        return self

    # -- encoding -----------------------------------------------------------------------------

    @property
    def size(self) -> int:
        """Bytes per record, prefix included."""
        return len(self._buffer)

    @property
    def data_offset(self) -> int:
        """Where the CDR data (encapsulation header first) starts in a row."""
        return self._origin - len(_ENCAPSULATION)

    def encode(self, columns: Mapping[str, npt.ArrayLike], count: int) -> np.ndarray:
        """``count`` records as a (count, size) uint8 array.

        ``columns`` maps every field name to a sequence of ``count`` values (times as integer
        nanoseconds). Raises ``OverflowError`` / ``ValueError`` when a value does not fit.
        """
        if self._dtype is None:
            dtype = np.dtype({"names": self._names, "formats": self._formats,
                              "offsets": self._offsets, "itemsize": len(self._buffer)})
            fields = dtype.fields
            assert fields is not None  # (a structured dtype)
            self._dtype = dtype
            self._template = np.frombuffer(bytes(self._buffer), dtype=np.uint8)
            self._plain = [(name, fields[name][0]) for name in self._names
                           if not name.endswith((".sec", ".nanosec"))]
        raw = np.empty((count, len(self._buffer)), dtype=np.uint8)
        raw[:] = self._template
        rows = raw.view(self._dtype).reshape(count)
        for name, dtype in self._plain:
            rows[name] = checked_column(columns[name], dtype)
        for name in self._times:
            sec, nanosec = split_ns(columns[name])
            rows[name + ".sec"] = sec
            rows[name + ".nanosec"] = nanosec
        return raw


def checked_column(values: npt.ArrayLike, dtype: np.dtype) -> np.ndarray:
    if dtype.kind in "iu":
        ints: np.ndarray
        if isinstance(values, np.ndarray):
            ints = values
        else:
            # Python ints: numpy 2 raises OverflowError out of range, numpy 1 wraps them around
            # (a deprecation warning), so the range is checked here as for arrays. As int64
            # first (fast); only values beyond it (a uint64 above 2**63, or a misfit) are
            # compared as Python ints.
            try:
                ints = np.array(values, dtype=np.int64)
            except OverflowError:
                ints = np.array(values, dtype=object)
        if ints.dtype == dtype:
            return ints  # fits by construction
        low, high = _limits(dtype)
        if ints.size:
            smallest, largest = _bounds(ints)
            if smallest < low or largest > high:
                msg = f"integer out of range for {dtype.name}"
                raise OverflowError(msg)
        return ints
    if dtype.subdtype is not None:  # float64[n]: one row of n values per record
        try:
            block = np.asarray(values, dtype=np.float64)
        except ValueError:  # arrays of one size but different shapes
            rows_of = cast("Iterable[npt.ArrayLike]", values)  # (a sequence of arrays)
            block = np.array([np.ravel(v) for v in rows_of], dtype=np.float64)
        rows: np.ndarray = block.reshape(len(block), -1)
        return rows
    column: np.ndarray = np.asarray(values, dtype=dtype)
    return column


def _bounds(values: np.ndarray) -> tuple[int, int]:
    """(min, max) of a non-empty integer array; by Python for a few values (two numpy
    reductions cost more than the whole column of a small batch)."""
    if values.size <= _FEW:
        listed = values.tolist()
        return min(listed), max(listed)
    return int(values.min()), int(values.max())


@functools.cache
def _limits(dtype: np.dtype) -> tuple[int, int]:
    info = np.iinfo(dtype)
    return int(info.min), int(info.max)


def split_ns(values: npt.ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    """Integer nanoseconds → (sec, nanosec) as ``builtin_interfaces/Time`` holds them."""
    ns = np.array(values, dtype=np.int64) if not isinstance(values, np.ndarray) else values
    if ns.size:
        smallest, largest = _bounds(ns)
        if largest >= (_INT32_MAX + 1) * _NS_PER_S or smallest < -(_INT32_MAX + 1) * _NS_PER_S:
            msg = "time does not fit builtin_interfaces/Time (int32 seconds)"
            raise OverflowError(msg)
    return np.divmod(ns, _NS_PER_S)
