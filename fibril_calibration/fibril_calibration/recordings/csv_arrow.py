"""pyarrow's CSV reader: the fast path of ``csv_columns`` when pyarrow is installed.

pyarrow is optional (``pip install fibril_calibration[fast-csv]``): it parses the mapped
columns of a log in C++ on all cores, 3-4x faster than numpy's ``loadtxt`` per CPU second.
It is used only where it gives exactly what the numpy path gives, and otherwise not at all:

* only on a *simple* file (``csv_columns``: ASCII data rows, no quote, no CR but in CRLF), read
  with quoting off and blank lines kept (a blank line is then a conversion error);
* typed columns: int64 for a time in ns (exact, 19-digit stamps included), float64 for the rest,
  with no null values; Arrow's float64 parser is correctly rounded and accepts a subset of what
  Python's ``float`` accepts (``nan``, ``inf``, exponents, surrounding blanks; not ``1_0``, not
  ``+5`` as an integer), so that every value it gives is ``float(text)`` bit for bit;
* a file of up to ``WHOLE_BYTES`` is parsed whole on all cores, a larger one streamed batch by
  batch into the arrays (its columns are never held twice);
* every refusal (a bad cell, a row with another field count, a blank line, an overflow) and
  every I/O error returns None: the numpy path then reads the file and names the line and the
  column at fault, with the messages it has always had. Arrow's own errors give no line.

pyarrow has no type stubs: the modules are loaded with ``importlib`` (a ``ModuleType``: what is
read of it is untyped, the I/O boundary) and nothing else of them leaves this module.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

__all__ = ["ENABLED", "MIN_BYTES", "arrow", "arrow_for", "read_typed"]

ENABLED = True  # False: always the numpy path (a benchmark's comparison)
# A smaller file takes the numpy path: numpy reads it in less time than pyarrow takes to import
# (tens of ms), and the values are the same.
MIN_BYTES = 1 << 20
BLOCK_BYTES = 1 << 20  # Arrow's unit of parallel parsing (its default)
# Up to this much text is parsed whole (all cores, the columns held twice for a moment);
# more is streamed batch by batch into the arrays (memory: the arrays and a few blocks).
WHOLE_BYTES = 64 << 20


@dataclass(frozen=True)
class Arrow:
    """The two pyarrow modules the reader uses."""

    pa: ModuleType  # pyarrow
    csv: ModuleType  # pyarrow.csv


@functools.lru_cache(maxsize=1)
def _load() -> Arrow | None:
    try:
        return Arrow(importlib.import_module("pyarrow"), importlib.import_module("pyarrow.csv"))
    except ImportError:
        return None


def arrow() -> Arrow | None:
    """pyarrow, or None when it is not installed (or ``ENABLED`` is off)."""
    return _load() if ENABLED else None


def arrow_for(size: int) -> Arrow | None:
    """pyarrow for a file of ``size`` bytes: None below ``MIN_BYTES`` (or as ``arrow``)."""
    return arrow() if size >= MIN_BYTES else None


def read_typed(path: Path, start: int, width: int, delimiter: str, wanted: Mapping[str, int],
               exact_ns: str | None, rows: int) -> dict[str, np.ndarray] | None:
    """The ``wanted`` columns (name: 0-based index) of the data rows from byte ``start`` on,
    float64 (int64 for ``exact_ns``); None when pyarrow is missing or refuses anything, or
    when it does not find ``rows`` rows."""
    lib = arrow()
    if lib is None or rows <= 0 or not wanted:
        return None
    pa, pcsv = lib.pa, lib.csv
    fields = [f"f{i}" for i in range(width)]  # the header's own names may repeat or be odd
    types = {fields[i]: pa.int64() if name == exact_ns else pa.float64()
             for name, i in wanted.items()}
    read = pcsv.ReadOptions(column_names=fields, use_threads=True, block_size=BLOCK_BYTES)
    parse = pcsv.ParseOptions(delimiter=delimiter, quote_char=False, double_quote=False,
                              escape_char=False, newlines_in_values=False,
                              ignore_empty_lines=False)
    convert = pcsv.ConvertOptions(column_types=types, include_columns=list(types),
                                  null_values=[], true_values=[], false_values=[],
                                  strings_can_be_null=False, quoted_strings_can_be_null=False)
    out = {name: np.empty(rows, dtype=np.int64 if name == exact_ns else np.float64)
           for name in wanted}
    done = 0
    try:
        with pa.OSFile(str(path)) as handle:  # read, not mapped: RSS holds no file pages
            handle.seek(start)
            if path.stat().st_size - start <= WHOLE_BYTES:  # parsed at once on all cores
                table = pcsv.read_csv(handle, read_options=read, parse_options=parse,
                                      convert_options=convert)
                if table.num_rows != rows:
                    return None
                batches = table.to_batches()
            else:  # batch by batch into the arrays: no second copy of the columns is held
                batches = pcsv.open_csv(handle, read_options=read, parse_options=parse,
                                        convert_options=convert)
            for batch in batches:
                n = batch.num_rows
                if done + n > rows:
                    return None
                for name, i in wanted.items():
                    if not _fill(out[name], done, batch.column(fields[i])):
                        return None
                done += n
    except (pa.ArrowException, ValueError, OSError):
        return None
    return out if done == rows else None


def _fill(values: np.ndarray, at: int, column: Any) -> bool:
    """Copy an Arrow array into ``values[at:]`` from its value buffer (not ``to_numpy``:
    that imports pandas when it is installed, ~0.5 s of CPU per process); False: it has
    nulls."""
    if column.null_count:
        return False
    n = len(column)
    values[at:at + n] = np.frombuffer(column.buffers()[1], dtype=values.dtype, count=n,
                                      offset=column.offset * values.itemsize)
    return True
