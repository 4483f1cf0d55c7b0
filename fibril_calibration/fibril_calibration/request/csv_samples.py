"""A signal's reference samples from a CSV file (``samples_file``): header, time column, values."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import numpy as np

from fibril_sim_core import schema as s

from ..errors import CalibrationRequestError
from ..model.observations import ObservationSpec
from ..recordings.sources import MAX_VALUE


def _csv_samples(path: Path, where: s.Where,
                 observation: ObservationSpec) -> tuple[np.ndarray, np.ndarray]:
    """A CSV file: a header row starting with ``time_ns``, then one row per sample."""
    try:
        raw = path.read_bytes()
        rows = list(csv.reader(io.StringIO(raw.decode("utf-8-sig"), newline="")))  # a BOM
    except OSError as exc:
        raise where.fail(f"cannot read samples file {str(path)!r}: "
                         f"{exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise CalibrationRequestError(f"{path}: not valid UTF-8 at byte {exc.start} (line "
                                      f"{line}): {exc.reason}") from None
    except (csv.Error, ValueError) as exc:  # a NUL, a field over the csv module's limit
        raise CalibrationRequestError(f"{path}: not a readable CSV file: {exc}") from None
    file = str(path)
    if not rows or not rows[0] or rows[0][0].strip() != "time_ns":
        raise CalibrationRequestError(f"{file}: line 1: expected a header row starting with "
                                      f"'time_ns'")
    width = observation.dimension
    if len(rows[0]) != width + 1:
        raise CalibrationRequestError(
            f"{file}: line 1: observation {observation.id!r} has {width} value column(s) "
            f"({', '.join(observation.components)}) after time_ns, got {len(rows[0]) - 1}")
    data = [r for r in rows[1:]]
    if not data:
        raise CalibrationRequestError(f"{file}: expected at least one sample row")
    times = np.empty(len(data), dtype=np.int64)
    values = np.empty((len(data), width))
    previous = -1
    for i, row in enumerate(data):
        line = i + 2
        if len(row) != width + 1:
            raise CalibrationRequestError(f"{file}: line {line}: expected {width + 1} columns, "
                                          f"got {len(row)}")
        try:
            t = int(row[0])
        except ValueError:
            raise CalibrationRequestError(f"{file}: line {line}: time_ns {s.short(row[0])} is "
                                          f"not an integer") from None
        if t > s.MAX_INTEGER:
            raise CalibrationRequestError(f"{file}: line {line}: time_ns {s.short(t)} is "
                                          f"beyond int64 nanoseconds")
        if t < 0 or t <= previous:
            raise CalibrationRequestError(f"{file}: line {line}: time_ns must increase strictly "
                                          f"from 0; {t} follows {previous}")
        previous = t
        times[i] = t
        try:
            values[i] = [float(v) for v in row[1:]]
        except ValueError:
            raise CalibrationRequestError(f"{file}: line {line}: values must be numbers, got "
                                          f"{s.short(row[1:])}") from None
        if not np.all(np.isfinite(values[i])):
            raise CalibrationRequestError(f"{file}: line {line}: values must be finite, got "
                                          f"{s.short(row[1:])}")
        if np.any(np.abs(values[i]) > MAX_VALUE):
            raise CalibrationRequestError(f"{file}: line {line}: {s.short(row[1:])} cannot be "
                                          f"recorded values (beyond {MAX_VALUE:g})")
    if len(data) == 1:
        raise CalibrationRequestError(f"{file}: one sample row; a signal needs at least two "
                                      f"samples (nothing can be fitted or scored on one)")
    return times, values
