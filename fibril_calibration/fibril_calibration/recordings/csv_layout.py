"""How a CSV log is laid out as robots export it: delimiter, header row, time column.

* The delimiter is the one of ``,``, ``;`` and tab that row 1 holds most often (``,`` when it
  holds none).
* Row 1 is a header unless every cell of it is a number: a headerless export's columns are
  then named by their index (``0``, ``1``, ...) unless the request names them.
* The time column is found without being named when exactly one column is called ``t_s``,
  ``time``, ``timestamp``, ``time_s``, ``time_ms``, ``time_us`` or ``time_ns``; the ones with a
  unit suffix imply their unit (``t_s``: seconds), ``time`` / ``timestamp`` take it from their
  values' size (19 digits: ns since the epoch, 16: us, 13: ms, otherwise s). Two or more such
  columns are ambiguous: the user picks one (``time_column``), every one is named.
"""

from __future__ import annotations

import csv
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = ["IMPLIED_UNITS", "TIME_NAMES", "Dialect", "ambiguous_time", "guess_time_column",
           "looks_like_data", "sniff", "time_candidates"]

IMPLIED_UNITS = {"t_s": "s", "time_s": "s", "time_ms": "ms", "time_us": "us", "time_ns": "ns"}
TIME_NAMES = ("t_s", "time", "timestamp", "time_s", "time_ms", "time_us", "time_ns")
DELIMITERS = (",", ";", "\t")


@dataclass(frozen=True)
class Dialect:
    """``names`` of the columns, ``delimiter``, whether row 1 is a ``header``, and the file's
    line number (1-based) of the first data row."""

    names: tuple[str, ...]
    delimiter: str
    header: bool
    first_data_line: int
    first_row: tuple[str, ...]

    def rows(self, path: Path) -> Iterator[list[str]]:
        """The data rows' cells (the header skipped)."""
        with path.open(encoding="utf-8-sig", newline="") as handle:
            reader = csv.reader(handle, delimiter=self.delimiter)
            if self.header:
                next(reader, None)
            yield from reader


def _number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def looks_like_data(cells: Sequence[str]) -> bool:
    """Row 1 is data, not names: every cell is a number."""
    cells = [c.strip() for c in cells]
    return bool(cells) and all(c and _number(c) for c in cells)


def sniff(path: Path, label: str, delimiter: str | None = None) -> Dialect:
    """Row 1's delimiter and whether it is a header (OSError when unreadable)."""
    with path.open("rb") as handle:
        first = handle.readline()
    text = first.decode("utf-8-sig", "replace").rstrip("\r\n")
    if delimiter is None:
        counts = {d: text.count(d) for d in DELIMITERS}
        delimiter = max(DELIMITERS, key=lambda d: counts[d]) if any(counts.values()) else ","
    cells = next(csv.reader([text], delimiter=delimiter), [])
    if looks_like_data(cells):
        names = tuple(str(n) for n in range(len(cells)))
        return Dialect(names, delimiter, False, 1, tuple(cells))
    return Dialect(tuple(c.strip() for c in cells), delimiter, True, 2, tuple(cells))


def time_candidates(names: Sequence[str]) -> tuple[str, ...]:
    """The columns whose name says they are time (one of ``TIME_NAMES``), in file order."""
    return tuple(n for n in names if n.strip().lower() in TIME_NAMES)


def guess_time_column(names: Sequence[str]) -> tuple[str | None, str | None]:
    """The column whose name says it is time (exactly one of ``TIME_NAMES``), and its unit
    when the name implies one."""
    found = time_candidates(names)
    if len(found) != 1:
        return None, None
    return found[0], IMPLIED_UNITS.get(found[0].strip().lower())


def ambiguous_time(found: Sequence[str]) -> str:
    """Several time-named columns, every one named: ``columns 'time' and 't_s' both name the
    time`` (a user picks one with ``time_column``; guessing would fit on the wrong clock)."""
    quoted = [repr(n) for n in found]
    joined = f"{', '.join(quoted[:-1])} and {quoted[-1]}"
    return f"columns {joined} {'both' if len(found) == 2 else 'all'} name the time"
