"""The columns of a CSV log, read with a typed parser: pyarrow's when installed, else numpy's.

A robot log can hold tens of millions of rows; a calibration maps a few of its columns. The
file is read in chunks of ``CHUNK_BYTES`` to count its rows and check that they are plain
enough for a typed parser to read whole: with pyarrow installed (``csv_arrow``, optional) and a
file of at least ``csv_arrow.MIN_BYTES`` (1 MiB; a smaller one is read by numpy in less time
than pyarrow takes to import) the data rows must be *simple* (ASCII, no quote, no CR but in
CRLF: Arrow checks each row's field count itself); without it *plain* (the header's number of
fields, counted per line from the comma positions, no quote, no blank line). A simple file's
wanted columns are parsed by Arrow, a plain one's by numpy's C reader over the whole file
(``usecols``: only those columns are ever held). Otherwise, or when the parser refuses a value,
the chunks are parsed one by one into preallocated arrays, a chunk numpy refuses with ``csv``
and ``float``, which name the line and column at fault. Every value is ``float(text)``
(``int(text)`` for a time in ns) bit for bit, whichever parser read it. Memory is the wanted
columns plus one chunk (Arrow: plus a few blocks, and a second copy of the columns of a file
under 64 MiB), however many columns and rows the file has. A UTF-8 byte order mark before the
header is skipped.
"""

from __future__ import annotations

import csv
import io
import warnings
from collections.abc import Iterator, Mapping, Sequence
from decimal import Decimal, InvalidOperation
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from . import csv_arrow
from .csv_layout import DELIMITERS, looks_like_data

__all__ = ["CHUNK_BYTES", "CsvLayout", "CsvProblem", "read_cell", "read_columns", "read_layout"]

CHUNK_BYTES = 4 << 20
BOM = b"\xef\xbb\xbf"


class CsvProblem(ValueError):
    """A one-line reason naming the recording, line and column; the caller's SourceError."""


@dataclass(frozen=True)
class CsvLayout:
    """Header names, where the data rows start, how many there are, and whether every row
    is plain (the header's field count, no quotes, no blank line: numpy may read it whole) or
    simple (ASCII, no quote, no lone CR: pyarrow may read it whole). With pyarrow installed
    (and a file of ``csv_arrow.MIN_BYTES`` or more) only ``simple`` is found (``plain`` stays
    False), otherwise only ``plain``."""

    path: Path
    label: str  # "recording 'x.csv'"
    header: tuple[str, ...]  # column names (of a headerless file: given, or the indices)
    data_start: int  # byte offset of the first data row
    rows: int
    plain: bool = False
    delimiter: str = ","
    first_line: int = 2  # the file's line number of the first data row (1: no header row)
    simple: bool = False


def read_layout(path: Path, label: str, *, header: bool | None = None,
                columns: Sequence[str] | Mapping[int, str] | None = None,
                delimiter: str | None = None) -> CsvLayout:
    """The header row (a BOM before it skipped), the number of data rows, whether all are
    plain. ``delimiter``: ``,`` ``;`` or tab, found from row 1 when not given. ``header``:
    None (default) expects a header row and refuses one that looks like data; False reads
    row 1 as data, its columns named by ``columns`` (a list, or {index: name}; unnamed ones
    by their 0-based index)."""
    with path.open("rb") as handle:
        first = handle.readline()
    start = len(first)
    bom = first.startswith(BOM)
    if bom:
        first = first[len(BOM):]
    try:
        text = first.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CsvProblem(f"cannot read {label} as CSV: line 1: {exc}") from None
    line = text.rstrip("\r\n")
    if delimiter is None:
        counts = {d: line.count(d) for d in DELIMITERS}
        delimiter = max(DELIMITERS, key=lambda d: counts[d]) if any(counts.values()) else ","
    try:
        row = next(csv.reader([line], delimiter=delimiter), [])
    except csv.Error as exc:
        raise CsvProblem(f"cannot read {label} as CSV: line 1: {exc}") from None
    if header is False:
        names = _headerless_names(label, len(row), columns)
        start = len(BOM) if bom else 0  # row 1 is data
    else:
        if columns is not None:
            raise CsvProblem(f"{label}: columns names the columns of a file without a header "
                             f"row (header: false); this one's row 1 is its header")
        if not row or not any(name.strip() for name in row):
            raise CsvProblem(f"{label}: expected a header row of column names")
        if looks_like_data(row):
            shown = ", ".join(c.strip() for c in row[:4]) + (", ..." if len(row) > 4 else "")
            raise CsvProblem(f"{label}: the first row looks like data: {shown}; set header: "
                             f"false (and name the columns: columns: [time_ns, q1, ...] or "
                             f"{{0: time_ns, 1: q1}})")
        names = tuple(name.strip() for name in row)
    rows = 0
    fast = csv_arrow.arrow_for(path.stat().st_size) is not None
    plain = not fast
    simple = fast
    for _, chunk, count in _chunks(path, start):
        rows += count
        plain = plain and _plain(chunk, count, len(names), delimiter)
        simple = simple and _simple(chunk)
    return CsvLayout(path, label, names, start, rows, plain, delimiter,
                     2 if header is not False else 1, simple)


def _headerless_names(label: str, width: int,
                      columns: Sequence[str] | Mapping[int, str] | None) -> tuple[str, ...]:
    names = [str(n) for n in range(width)]
    if columns is None:
        return tuple(names)
    if isinstance(columns, Mapping):
        for index, name in columns.items():
            if not 0 <= index < width:
                raise CsvProblem(f"{label}: columns names column {index}; row 1 has {width} "
                                 f"(0..{width - 1})")
            names[index] = str(name)
    else:
        if len(columns) != width:
            raise CsvProblem(f"{label}: columns names {len(columns)} column(s); row 1 has "
                             f"{width} (name them all, or use {{index: name}})")
        names = [str(c) for c in columns]
    return tuple(names)


def _chunks(path: Path, start: int) -> Iterator[tuple[int, bytes, int]]:
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
            count = _lines(chunk)
            yield row, chunk, count
            row += count


def _lines(chunk: bytes) -> int:
    """The LFs in ``chunk`` (numpy's vectorised compare: 2-3x faster than ``bytes.count``)."""
    return int(np.count_nonzero(np.frombuffer(chunk, dtype=np.uint8) == 10))


def _plain(chunk: bytes, count: int, width: int, delimiter: str = ",") -> bool:
    """No blank line, quote or lone CR, and ``width - 1`` commas per line on average; the
    parse then takes the last column too, so that a short row fails it, and with no short
    row the average means no long one either."""
    if chunk[:1] in b"\r\n" or b"\n\n" in chunk or b'"' in chunk or b"\r\n\r\n" in chunk:
        return False
    if b"\r" in chunk and chunk.count(b"\r") != chunk.count(b"\r\n"):
        return False
    return chunk.count(delimiter.encode()) == count * (width - 1)


def _simple(chunk: bytes) -> bool:
    """ASCII (so UTF-8), no quote, and a CR only before a LF: what pyarrow, reading with
    quoting off, splits into the same rows and fields as ``csv`` does. Blank lines and field
    counts are left to the parse (a conversion or field count error: the chunks then)."""
    if not chunk.isascii() or b'"' in chunk:
        return False
    return b"\r" not in chunk or chunk.count(b"\r") == chunk.count(b"\r\n")


def read_columns(layout: CsvLayout, wanted: Sequence[str], *, exact_ns: str | None = None
                 ) -> dict[str, np.ndarray]:
    """The ``wanted`` columns (header names) as float64 arrays of every data row;
    ``exact_ns`` names a column read as int64 nanoseconds from its text (decimal, rounded)."""
    index = {name: i for i, name in enumerate(layout.header)}
    names = list(dict.fromkeys(wanted))
    columns = [index[name] for name in names]
    if layout.simple:
        typed = csv_arrow.read_typed(layout.path, layout.data_start, len(layout.header),
                                     layout.delimiter, dict(zip(names, columns)), exact_ns,
                                     layout.rows)
        if typed is not None:
            return typed
    out: dict[str, np.ndarray] = {}
    if layout.plain and _whole(layout, names, columns, out, exact_ns):
        return out
    out = {name: np.empty(layout.rows, dtype=np.int64 if name == exact_ns else np.float64)
           for name in names}
    width = len(layout.header)
    for first, chunk, count in _chunks(layout.path, layout.data_start):
        if not _fast(chunk, count, width, names, columns, out, first, exact_ns,
                     layout.delimiter):
            _exact(chunk, width, names, columns, out, first, layout, exact_ns)
    return out


def _parse(source: Path | io.BytesIO, names: list[str], columns: list[int], width: int,
           exact_ns: str | None, skiprows: int, delimiter: str = ","
           ) -> dict[str, np.ndarray] | None:
    """numpy's C reader: the wanted columns (int64 for ``exact_ns``) and the last column (so
    that a short row fails: ``_plain``); None when numpy refuses a value. All float64 in one
    2-D array when it can be (fastest); else fields of one structured array, the last column
    as one character (a text column)."""
    order = sorted(zip(columns, names))
    use = [i for i, _ in order]
    extra = width - 1 not in use
    if extra:
        use.append(width - 1)
    if exact_ns is None:
        try:
            if isinstance(source, io.BytesIO):
                source.seek(0)
            table = np.loadtxt(source, dtype=np.float64, ndmin=2, delimiter=delimiter,
                               usecols=use, comments=None, skiprows=skiprows, encoding="utf-8")
            return {name: table[:, k] for k, (_, name) in enumerate(order)}
        except (ValueError, OverflowError):  # a text last column, or a bad value
            if not extra:
                return None
    fields = [(f"f{k}", "<i8" if name == exact_ns else "<f8")
              for k, (_, name) in enumerate(order)]
    if extra:
        fields.append(("last", "U1"))
    record = np.dtype(fields)
    try:
        if isinstance(source, io.BytesIO):
            source.seek(0)
        with warnings.catch_warnings():
            # numpy < 2 reads "1.7e18" into int64 through a float (losing the last digits) and
            # only warns: refused here, so that the exact reader takes the chunk.
            warnings.simplefilter("error", DeprecationWarning)
            rows = np.loadtxt(source, dtype=record, ndmin=1, delimiter=delimiter,
                               usecols=use, comments=None, skiprows=skiprows, encoding="utf-8")
    except (ValueError, OverflowError, DeprecationWarning):  # UnicodeDecodeError included
        return None
    return {name: rows[f"f{k}"] for k, (_, name) in enumerate(order)}


def _whole(layout: CsvLayout, names: list[str], columns: list[int],
           out: dict[str, np.ndarray], exact_ns: str | None) -> bool:
    """The whole (plain) file in one parse; its columns are views of one array (no second
    copy). False: a value numpy refuses (the chunks are read again to name it)."""
    parsed = _parse(layout.path, names, columns, len(layout.header), exact_ns,
                    layout.first_line - 1, layout.delimiter)
    if parsed is None or any(v.shape[0] != layout.rows for v in parsed.values()):
        return False
    out.update(parsed)
    return True


def _fast(chunk: bytes, count: int, width: int, names: list[str], columns: list[int],
          out: dict[str, np.ndarray], first: int, exact_ns: str | None,
          delimiter: str = ",") -> bool:
    """numpy's parser over a plain chunk; False: read it exactly instead (``_exact``)."""
    if not _plain(chunk, count, width, delimiter):
        return False  # a row with another field count: _exact names it
    parsed = _parse(io.BytesIO(chunk), names, columns, width, exact_ns, 0, delimiter)
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
    at = layout.first_line  # line number of data row 0
    try:
        text = chunk.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = first + at + chunk[:exc.start].count(b"\n")
        raise CsvProblem(f"cannot read {label} as CSV: line {line}: not UTF-8 text "
                         f"({exc.reason})") from None
    lines = chunk.count(b"\n")
    n = first
    try:
        for n, row in enumerate(csv.reader(io.StringIO(text, newline=""),
                                             delimiter=layout.delimiter), start=first):
            if len(row) != width:
                raise CsvProblem(f"{label} line {n + at}: {len(row)} field(s), "
                                 f"{'the header' if at == 2 else 'row 1'} has {width}")
            for name, i in zip(names, columns):
                item = row[i]
                if name == exact_ns:
                    out[name][n] = _ns(item, f"{label} column {name!r} line {n + at}")
                    continue
                try:
                    out[name][n] = float(item)
                except ValueError:
                    raise CsvProblem(f"{label} column {name!r} line {n + at}: {item!r} is not "
                                     f"a number") from None
    except csv.Error as exc:
        raise CsvProblem(f"cannot read {label} as CSV: line {n + at}: {exc}") from None
    if n + 1 - first != lines:
        raise CsvProblem(f"{label} line {n + at}: a quoted field spans lines; a log's fields "
                         f"are numbers")


def _ns(text: str, where: str) -> int:
    """A time in ns exactly from its text (``1700000000123``, ``1.7e18``)."""
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
            fields = next(csv.reader([line], delimiter=layout.delimiter), [])
            return fields[column] if column < len(fields) else ""
    return ""
