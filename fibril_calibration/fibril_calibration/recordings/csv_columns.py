"""The columns of a CSV log, read in chunks with numpy's typed parser.

A robot log can hold tens of millions of rows; a calibration maps a few of its columns. The
file is read in chunks of ``CHUNK_BYTES`` to count its rows and check that every row is
plain (the header's number of fields, counted per line from the comma positions, no quote,
no blank line); a plain file's wanted columns are then parsed by numpy's C reader over the
whole file (``usecols``: only those columns are ever held). Otherwise, or when numpy refuses a
value, the chunks are parsed one by one into preallocated arrays, a chunk numpy refuses with
``csv`` and ``float``, which name the line and column at fault. Memory is the wanted columns
plus one chunk, however many columns and rows the file has. A UTF-8 byte order mark before
the header is skipped.
"""

from __future__ import annotations

import csv
import io
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

__all__ = ["CHUNK_BYTES", "CsvLayout", "CsvProblem", "read_cell", "read_columns", "read_layout"]

CHUNK_BYTES = 4 << 20
BOM = b"\xef\xbb\xbf"


class CsvProblem(ValueError):
    """A one-line reason naming the recording, line and column; the caller's SourceError."""


@dataclass(frozen=True)
class CsvLayout:
    """Header names, where the data rows start, how many there are, and whether every row
    is plain (the header's field count, no quotes, no blank line): numpy may read it whole."""

    path: Path
    label: str  # "recording 'x.csv'"
    header: tuple[str, ...]
    data_start: int  # byte offset of the first data row
    rows: int
    plain: bool = False


def read_layout(path: Path, label: str) -> CsvLayout:
    """The header row (a BOM before it skipped), the number of data rows, whether all are
    plain."""
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
    if not header or not any(name.strip() for name in header):
        raise CsvProblem(f"{label}: expected a header row of column names")
    rows = 0
    plain = True
    for _, chunk, count in _chunks(path, start):
        rows += count
        plain = plain and _plain(chunk, count, len(header))
    return CsvLayout(path, label, tuple(name.strip() for name in header), start, rows, plain)


def _chunks(path: Path, start: int):  # type: ignore[no-untyped-def]
    """(first row index, chunk bytes ending at a line end, rows in it) from byte ``start``."""
    with path.open("rb") as handle:
        handle.seek(start)
        row = 0
        rest = b""
        while True:
            block = handle.read(CHUNK_BYTES)
            if not block:
                if rest:
                    yield row, rest + b"\n", 1
                return
            block = rest + block
            cut = block.rfind(b"\n")
            if cut < 0:
                rest = block
                continue
            rest = block[cut + 1:]
            chunk = block[:cut + 1]
            count = chunk.count(b"\n")
            yield row, chunk, count
            row += count


def _plain(chunk: bytes, count: int, width: int) -> bool:
    """No blank line, quote or lone CR, and ``width - 1`` commas per line on average; the
    parse then takes the last column too, so that a short row fails it, and with no short
    row the average means no long one either."""
    if chunk[:1] in b"\r\n" or b"\n\n" in chunk or b'"' in chunk or b"\r\n\r\n" in chunk:
        return False
    if b"\r" in chunk and chunk.count(b"\r") != chunk.count(b"\r\n"):
        return False
    return chunk.count(b",") == count * (width - 1)


def read_columns(layout: CsvLayout, wanted: Sequence[str], *, exact_ns: str | None = None
                 ) -> dict[str, np.ndarray]:
    """The ``wanted`` columns (header names) as float64 arrays of every data row;
    ``exact_ns`` names a column read as int64 nanoseconds from its text (decimal, rounded)."""
    index = {name: i for i, name in enumerate(layout.header)}
    names = list(dict.fromkeys(wanted))
    columns = [index[name] for name in names]
    out: dict[str, np.ndarray] = {}
    if layout.plain and _whole(layout, names, columns, out, exact_ns):
        return out
    out = {name: np.empty(layout.rows, dtype=np.int64 if name == exact_ns else np.float64)
           for name in names}
    width = len(layout.header)
    for first, chunk, count in _chunks(layout.path, layout.data_start):
        if not _fast(chunk, count, width, names, columns, out, first, exact_ns):
            _exact(chunk, width, names, columns, out, first, layout, exact_ns)
    return out


def _parse(source: Path | io.BytesIO, names: list[str], columns: list[int], width: int,
           exact_ns: str | None, skiprows: int) -> dict[str, np.ndarray] | None:
    """numpy's C reader: the wanted columns (int64 for ``exact_ns``) and the last column (so
    that a short row fails: ``_plain``); None when numpy refuses a value. All float64 in one
    2-D array when it can be (fastest); else fields of one structured array, the last column
    as one character (a text column)."""
    order = sorted(zip(columns, names))
    use = [i for i, _ in order]
    extra = width - 1 not in use
    if extra:
        use.append(width - 1)
    options = dict(delimiter=",", usecols=use, comments=None, skiprows=skiprows,
                   encoding="utf-8")
    if exact_ns is None:
        try:
            if isinstance(source, io.BytesIO):
                source.seek(0)
            table = np.loadtxt(source, dtype=np.float64, ndmin=2, **options)
            return {name: table[:, k] for k, (_, name) in enumerate(order)}
        except (ValueError, OverflowError):  # a text last column, or a bad value
            if not extra:
                return None
    fields = [(f"f{k}", np.int64 if name == exact_ns else np.float64)
              for k, (_, name) in enumerate(order)]
    if extra:
        fields.append(("last", "U1"))
    try:
        if isinstance(source, io.BytesIO):
            source.seek(0)
        with warnings.catch_warnings():
            # numpy < 2 reads "1.7e18" into int64 through a float (losing the last digits) and
            # only warns: refused here, so that the exact reader takes the chunk.
            warnings.simplefilter("error", DeprecationWarning)
            table = np.loadtxt(source, dtype=fields, ndmin=1, **options)
    except (ValueError, OverflowError, DeprecationWarning):  # UnicodeDecodeError included
        return None
    return {name: table[f"f{k}"] for k, (_, name) in enumerate(order)}


def _whole(layout: CsvLayout, names: list[str], columns: list[int],
           out: dict[str, np.ndarray], exact_ns: str | None) -> bool:
    """The whole (plain) file in one parse; its columns are views of one array (no second
    copy). False: a value numpy refuses (the chunks are read again to name it)."""
    parsed = _parse(layout.path, names, columns, len(layout.header), exact_ns, 1)
    if parsed is None or any(v.shape[0] != layout.rows for v in parsed.values()):
        return False
    out.update(parsed)
    return True


def _fast(chunk: bytes, count: int, width: int, names: list[str], columns: list[int],
          out: dict[str, np.ndarray], first: int, exact_ns: str | None) -> bool:
    """numpy's parser over a plain chunk; False: read it exactly instead (``_exact``)."""
    if not _plain(chunk, count, width):
        return False  # a row with another field count: _exact names it
    parsed = _parse(io.BytesIO(chunk), names, columns, width, exact_ns, 0)
    if parsed is None or any(v.shape[0] != count for v in parsed.values()):
        return False  # a value numpy refuses, or a line it skipped
    for name, values in parsed.items():
        out[name][first:first + count] = values
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
    for first, chunk, count in _chunks(layout.path, layout.data_start):
        if first <= row < first + count:
            line = chunk.decode("utf-8", errors="replace").split("\n")[row - first]
            fields = next(csv.reader([line]), [])
            return fields[column] if column < len(fields) else ""
    return ""
