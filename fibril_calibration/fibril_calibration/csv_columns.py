"""The columns of a CSV log, read in chunks with numpy's typed parser.

A robot log can hold tens of millions of rows; a calibration maps a few of its columns. The
file is read twice, in chunks of ``CHUNK_BYTES`` and never whole: once to count its rows (and
find its header), once to parse the wanted columns straight into preallocated float64 /
int64 arrays. Memory is the wanted columns plus one chunk, however many columns and rows the
file has.

Every row must have the header's number of fields (counted per line, from the comma
positions, without decoding); a chunk with quotes, a blank line, a wrong field count or a
value numpy's parser refuses is read again with ``csv`` and ``float``, which names the line
and column at fault exactly as before. A UTF-8 byte order mark before the header is skipped.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

__all__ = ["CHUNK_BYTES", "CsvLayout", "read_columns", "read_cell", "read_layout"]

CHUNK_BYTES = 4 << 20
BOM = b"\xef\xbb\xbf"


class CsvProblem(ValueError):
    """A one-line reason naming the recording, line and column; the caller's SourceError."""


@dataclass(frozen=True)
class CsvLayout:
    """Header names, where the data rows start and how many there are."""

    path: Path
    label: str  # "recording 'x.csv'"
    header: tuple[str, ...]
    data_start: int  # byte offset of the first data row
    rows: int


def read_layout(path: Path, label: str) -> CsvLayout:
    """The header row (a BOM before it skipped) and the number of data rows."""
    with path.open("rb") as handle:
        first = handle.readline()
        start = len(first)
        if first.startswith(BOM):
            first = first[len(BOM):]
        try:
            text = first.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise CsvProblem(f"cannot read {label} as CSV: line 1: {exc}") from None
        try:
            header = next(csv.reader([text]), [])
        except csv.Error as exc:
            raise CsvProblem(f"cannot read {label} as CSV: line 1: {exc}") from None
        rows = 0
        last = b"\n"
        while True:
            block = handle.read(CHUNK_BYTES)
            if not block:
                break
            rows += block.count(b"\n")
            last = block[-1:]
        if last != b"\n":
            rows += 1  # a last row without a line end
    if not header or not any(name.strip() for name in header):
        raise CsvProblem(f"{label}: expected a header row of column names")
    return CsvLayout(path, label, tuple(name.strip() for name in header), start, rows)


def _lines(layout: CsvLayout):  # type: ignore[no-untyped-def]
    """(first row index, chunk bytes ending at a line end) over the data rows."""
    with layout.path.open("rb") as handle:
        handle.seek(layout.data_start)
        row = 0
        rest = b""
        while True:
            block = handle.read(CHUNK_BYTES)
            if not block:
                if rest:
                    yield row, rest + b"\n"
                return
            block = rest + block
            cut = block.rfind(b"\n")
            if cut < 0:
                rest = block
                continue
            rest = block[cut + 1:]
            chunk = block[:cut + 1]
            yield row, chunk
            row += chunk.count(b"\n")


def read_columns(layout: CsvLayout, wanted: Sequence[str], *, exact_ns: str | None = None
                 ) -> dict[str, np.ndarray]:
    """The ``wanted`` columns (header names) as float64 arrays of every data row;
    ``exact_ns`` names a column read as int64 nanoseconds from its text (decimal, rounded)."""
    index = {name: i for i, name in enumerate(layout.header)}
    names = list(dict.fromkeys(wanted))
    columns = [index[name] for name in names]
    out = {name: np.empty(layout.rows, dtype=np.int64 if name == exact_ns else np.float64)
           for name in names}
    width = len(layout.header)
    for first, chunk in _lines(layout):
        count = chunk.count(b"\n")
        if not _fast(chunk, count, width, names, columns, out, first, exact_ns):
            _exact(chunk, width, names, columns, out, first, layout, exact_ns)
    return out


def _fast(chunk: bytes, count: int, width: int, names: list[str], columns: list[int],
          out: dict[str, np.ndarray], first: int, exact_ns: str | None) -> bool:
    """numpy's parser over a clean chunk; False: read it exactly instead (``_exact``)."""
    if b'"' in chunk or b"\r\n\r\n" in chunk or b"\n\n" in chunk or chunk[:1] in b"\r\n":
        return False
    data = np.frombuffer(chunk, dtype=np.uint8)
    ends = np.flatnonzero(data == 10)
    commas = np.searchsorted(np.flatnonzero(data == 44), ends)
    if commas[0] != width - 1 or (np.diff(commas) != width - 1).any():
        return False
    try:
        lines = chunk.decode("utf-8").splitlines()
    except UnicodeDecodeError:
        return False
    if len(lines) != count:  # a stray \r, \v, \f or a Unicode line separator inside a row
        return False
    stop = first + count
    try:
        floats = [i for name, i in zip(names, columns) if name != exact_ns]
        if floats:
            values = np.loadtxt(lines, delimiter=",", usecols=floats, dtype=np.float64,
                                comments=None, ndmin=2, encoding=None)
            for k, name in enumerate(n for n in names if n != exact_ns):
                out[name][first:stop] = values[:, k]
        if exact_ns is not None:
            at = columns[names.index(exact_ns)]
            out[exact_ns][first:stop] = np.loadtxt(lines, delimiter=",", usecols=[at],
                                                   dtype=np.int64, comments=None, ndmin=2,
                                                   encoding=None)[:, 0]
    except (ValueError, OverflowError):
        return False
    return True


def _exact(chunk: bytes, width: int, names: list[str], columns: list[int],
           out: dict[str, np.ndarray], first: int, layout: CsvLayout,
           exact_ns: str | None) -> None:
    """``csv`` and ``float`` line by line: the first problem, named by line and column."""
    label = layout.label
    try:
        text = chunk.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = first + 2 + chunk[:exc.start].count(b"\n")
        raise CsvProblem(f"cannot read {label} as CSV: line {line}: not UTF-8 text "
                         f"({exc.reason})") from None
    lines = chunk.count(b"\n")
    n = first
    try:
        for n, row in enumerate(csv.reader(io.StringIO(text, newline="")), start=first):
            if len(row) != width:
                raise CsvProblem(f"{label} line {n + 2}: {len(row)} field(s), the header has "
                                 f"{width}")
            for name, i in zip(names, columns):
                item = row[i]
                if name == exact_ns:
                    out[name][n] = _ns(item, f"{label} column {name!r} line {n + 2}")
                    continue
                try:
                    out[name][n] = float(item)
                except ValueError:
                    raise CsvProblem(f"{label} column {name!r} line {n + 2}: {item!r} is not "
                                     f"a number") from None
    except csv.Error as exc:
        raise CsvProblem(f"cannot read {label} as CSV: line {n + 2}: {exc}") from None
    if n + 1 - first != lines:
        raise CsvProblem(f"{label} line {n + 2}: a quoted field spans lines; a log's fields "
                         f"are numbers")


def _ns(text: str, where: str) -> int:
    """A time in ns exactly from its text (``1700000000123``, ``1.7e18``)."""
    from decimal import Decimal, InvalidOperation

    text = text.strip()
    try:
        value = int(text)
    except ValueError:
        try:
            value = int(Decimal(text).to_integral_value())
        except (InvalidOperation, ValueError, OverflowError):
            raise CsvProblem(f"{where} has no time in ns ({text!r})") from None
    if not -2 ** 63 <= value < 2 ** 63:
        raise CsvProblem(f"{where}: time {text!r} ns does not fit in 64-bit nanoseconds")
    return value


def read_cell(layout: CsvLayout, row: int, name: str) -> str:
    """The text of one cell (error messages quote it); reads up to that row."""
    column = layout.header.index(name)
    for first, chunk in _lines(layout):
        count = chunk.count(b"\n")
        if first <= row < first + count:
            line = chunk.decode("utf-8", errors="replace").split("\n")[row - first]
            fields = next(csv.reader([line]), [])
            return fields[column] if column < len(fields) else ""
    return ""
