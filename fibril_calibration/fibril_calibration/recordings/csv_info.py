"""``recording info`` of a CSV log: columns, rows, delimiter, header, the time column guessed
from the names ``csv_layout`` knows (with its rate, jitter and gaps over a threshold, by line),
and per column the empty / NaN cells and the cells that are not numbers (with the first line).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .csv_layout import ambiguous_time, guess_time_column, sniff, time_candidates
from .sources import TIME_UNITS, SourceError

__all__ = ["ColumnInfo", "CsvInfo", "csv_info", "csv_text", "number_text", "rate_and_jitter"]

_NS = 1_000_000_000


@dataclass(frozen=True)
class ColumnInfo:
    name: str
    numeric: int  # cells that are finite numbers
    empty_or_nan: int
    non_numeric: int
    first_bad_line: int | None  # first non-numeric cell (1-based line of the file)
    first_bad_cell: str | None
    minimum: float | None
    maximum: float | None


@dataclass(frozen=True)
class CsvInfo:
    path: str
    delimiter: str
    header: bool  # row 1 names the columns
    rows: int
    columns: tuple[ColumnInfo, ...]
    time_column: str | None
    time_unit: str | None
    duration_s: float | None
    rate_hz: float | None
    jitter_s: float | None
    gap_threshold_s: float | None
    gaps: tuple[tuple[int, float, float], ...]  # (line, time into the log s, gap s)
    gap_count: int
    backwards: int  # rows whose time is before the previous row's
    kind: str = "csv"
    time_candidates: tuple[str, ...] = ()  # every time-named column (two or more: ambiguous)


def rate_and_jitter(intervals: np.ndarray) -> tuple[float | None, float | None]:
    """Rate (1 / the median interval) and jitter (90th percentile of the intervals'
    distance from the median, s) of intervals in ns."""
    if intervals.size == 0:
        return None, None
    median = float(np.median(intervals))
    jitter = float(np.percentile(np.abs(intervals - median), 90)) / _NS
    return (_NS / median if median > 0 else None), jitter


def csv_info(path: Path, gap_factor: float) -> CsvInfo:
    label = f"recording {str(path)!r}"
    try:
        dialect = sniff(path, label)
    except OSError as exc:
        raise SourceError(f"cannot read {label}: {exc.strerror or exc}") from None
    names = list(dialect.names)
    width = len(names)
    counts = np.zeros((3, width), dtype=np.int64)  # numeric, empty/NaN, non-numeric
    first_bad: list[tuple[int, str] | None] = [None] * width
    low = np.full(width, np.inf)
    high = np.full(width, -np.inf)
    time_name, unit = guess_time_column(names)
    time_at = names.index(time_name) if time_name is not None else None
    times: list[float] = []
    exact: list[int] = []
    rows = 0
    line = dialect.first_data_line - 1
    for cells in dialect.rows(path):
        line += 1
        if not cells or cells == [""]:
            continue
        rows += 1
        for column in range(width):
            text = cells[column].strip() if column < len(cells) else ""
            if not text:
                counts[1, column] += 1
                continue
            try:
                number = float(text)
            except ValueError:
                counts[2, column] += 1
                if first_bad[column] is None:
                    first_bad[column] = (line, text[:40])
                continue
            if math.isnan(number) or math.isinf(number):
                counts[1, column] += 1
                continue
            counts[0, column] += 1
            if number < low[column]:
                low[column] = number
            if number > high[column]:
                high[column] = number
        if time_at is not None:
            text = cells[time_at].strip() if time_at < len(cells) else ""
            if text.lstrip("-").isdigit():
                exact.append(int(text))
                times.append(float("nan"))
            else:
                exact.append(0)
                try:
                    times.append(float(text))
                except ValueError:
                    times.append(float("nan"))
    columns = tuple(
        ColumnInfo(name, int(counts[0, c]), int(counts[1, c]), int(counts[2, c]),
                   bad[0] if bad else None, bad[1] if bad else None,
                   float(low[c]) if counts[0, c] else None,
                   float(high[c]) if counts[0, c] else None)
        for c, (name, bad) in enumerate(zip(names, first_bad)))
    duration = rate = jitter = threshold = None
    gaps: list[tuple[int, float, float]] = []
    gap_count = backwards = 0
    if time_name is not None and rows >= 2:
        if unit is None:
            unit = _unit_from_values(np.array(exact), np.array(times))
        stamps = _stamps_ns(np.array(exact, dtype=np.int64), np.array(times), unit)
        good = np.flatnonzero(stamps != np.iinfo(np.int64).min)
        if good.size >= 2:
            t = stamps[good]
            step = np.diff(t)
            backwards = int(np.count_nonzero(step < 0))
            forward = step[step > 0]
            rate, jitter = rate_and_jitter(forward) if forward.size else (None, None)
            duration = float(t[-1] - t[0]) / _NS
            if forward.size:
                median = float(np.median(forward))
                threshold = gap_factor * median / _NS
                big = np.flatnonzero(step > gap_factor * median)
                gap_count = int(big.size)
                data_lines = dialect.first_data_line + good
                for i in big[:20].tolist():
                    gaps.append((int(data_lines[i + 1]), float(t[i] - t[0]) / _NS,
                                 float(step[i]) / _NS))
    return CsvInfo(str(path), dialect.delimiter, dialect.header, rows, columns, time_name,
                   unit, duration, rate, jitter, threshold, tuple(gaps), gap_count, backwards,
                   time_candidates=time_candidates(names))


def _unit_from_values(exact: np.ndarray, floats: np.ndarray) -> str:
    """A time column named ``time`` / ``timestamp``: its unit from the magnitude of its
    values (19 digits: ns epoch, 16: us, 13: ms; otherwise seconds)."""
    values = np.where(np.isnan(floats), exact.astype(np.float64), floats)
    top = float(np.nanmax(np.abs(values))) if values.size else 0.0
    if top >= 1e17:
        return "ns"
    if top >= 1e14:
        return "us"
    if top >= 1e11:
        return "ms"
    return "s"


def _stamps_ns(exact: np.ndarray, floats: np.ndarray, unit: str) -> np.ndarray:
    scale = TIME_UNITS[unit]
    out = np.full(exact.shape, np.iinfo(np.int64).min, dtype=np.int64)
    integer = np.isnan(floats)
    out[integer] = exact[integer] * scale if scale > 1 else exact[integer]
    finite = np.isfinite(floats)
    out[finite] = np.rint(floats[finite] * scale).astype(np.int64)
    return out


def number_text(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def csv_text(info: CsvInfo) -> str:
    delimiter = {",": "comma", ";": "semicolon", "\t": "tab"}.get(info.delimiter,
                                                                 repr(info.delimiter))
    lines = [f"recording  {info.path}  (csv, {info.rows} rows, {len(info.columns)} columns, "
             f"{delimiter}-delimited, {'header row' if info.header else 'no header row'})"]
    if len(info.time_candidates) > 1:
        lines.append(f"time       ambiguous: {ambiguous_time(info.time_candidates)}; a request "
                     f"picks one with time_column: (on its source)")
    elif info.time_column is None:
        lines.append("time       no column named t_s, time, timestamp, time_s/ms/us/ns: name "
                     "it with time_column and time_unit")
    else:
        jitter_ms = None if info.jitter_s is None else info.jitter_s * 1e3
        lines.append(f"time       {info.time_column!r} ({info.time_unit}; guessed from its "
                     f"name)  {number_text(info.duration_s, '.6g')} s, rate "
                     f"{number_text(info.rate_hz, '.4g')} Hz, jitter "
                     f"{number_text(jitter_ms, '.3g')} ms")
        if info.backwards:
            lines.append(f"           time goes backwards {info.backwards} time(s)")
        if info.gap_count:
            shown = ", ".join(f"line {line} at {at:.6g} s: {gap:.6g} s"
                              for line, at, gap in info.gaps)
            more = (f" (the first {len(info.gaps)} of {info.gap_count})"
                    if info.gap_count > len(info.gaps) else "")
            lines.append(f"gaps       {info.gap_count} over {info.gap_threshold_s:.6g} s "
                         f"(5 x the median interval){more}: {shown}")
    width = max([len(c.name) for c in info.columns] + [6])
    lines.append(f"{'column':<{width}}  {'numbers':>9}  {'empty/NaN':>9}  {'other':>7}  "
                 f"{'min':>12}  {'max':>12}  first other cell")
    for c in info.columns:
        bad = "" if c.first_bad_line is None else f"line {c.first_bad_line}: {c.first_bad_cell!r}"
        lines.append(f"{c.name:<{width}}  {c.numeric:>9}  {c.empty_or_nan:>9}  "
                     f"{c.non_numeric:>7}  {number_text(c.minimum, '.6g'):>12}  "
                     f"{number_text(c.maximum, '.6g'):>12}  {bad}")
    return "\n".join(lines) + "\n"
