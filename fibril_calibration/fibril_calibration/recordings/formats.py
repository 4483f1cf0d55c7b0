"""Opening a recording: its format from the name (a folder: rosbag2, ``.mcap``, ``.db3``,
``.csv``) or as given, and the reader that format takes (``sources``, ``franka``).

Apart from ``sources`` so that the Franka reader, a CSV reader itself, sits between the two:
``sources`` < ``franka`` < ``formats``, no import goes back.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from .bag_readers import choose_reader
from .franka import FrankaSource
from .sources import SOURCE_FORMATS, BagSource, CsvSource, Source, SourceError

__all__ = ["open_source"]


def open_source(path: Path, format: str | None = None, *, time: str = "log",
                time_column: str | None = None, time_unit: str | None = None,
                sidecar: Path | None = None, reader: str | None = None,
                columns: Sequence[str] = ()) -> Source:
    """Open a recording; ``format`` defaults from the path (a folder: rosbag2, ``.mcap``,
    ``.db3``, ``.csv``); ``reader`` picks a bag's library (``bag_readers``: rosbags by
    default). A CSV log's time column is read and checked here, with ``columns`` (those the
    caller will map: one pass). Raises SourceError when it is missing or unreadable."""
    if not path.exists():
        raise SourceError(f"recording {str(path)!r} does not exist")
    if format is None:
        suffix = path.suffix.lower()
        format = ("rosbag2" if path.is_dir() else
                  {".mcap": "mcap", ".db3": "sqlite3", ".csv": "csv"}.get(suffix, ""))
        if not format:
            raise SourceError(f"recording {str(path)!r}: cannot tell its format from the name; "
                              f"give format: one of {', '.join(SOURCE_FORMATS)}")
    if format not in SOURCE_FORMATS:
        raise SourceError(f"unknown recording format {format!r}; expected one of "
                          f"{', '.join(SOURCE_FORMATS)}")
    if format in ("csv", "franka_sysid") and reader is not None:
        raise SourceError(f"recording {str(path)!r}: reader {reader!r} chooses how a bag is "
                          f"read; a {format} log takes no reader")
    if format in ("csv", "franka_sysid"):
        if path.is_dir():
            raise SourceError(f"recording {str(path)!r} is a folder, not a CSV file")
        if format == "franka_sysid":
            if time_column is not None or time_unit is not None:
                raise SourceError(f"recording {str(path)!r}: the franka_sysid format takes its "
                                  f"time from seq (1 kHz ring log) or t_s; give no time_column")
            log: CsvSource = FrankaSource(path, sidecar)
        else:
            log = CsvSource(path, time_column, time_unit)
        if log.rows == 1:  # (a franka ring log's targets file may hold one target)
            raise SourceError(f"recording {str(path)!r} has one row; an episode needs at least "
                              f"two samples (nothing can be fitted or scored on one)")
        log.prefetch(columns)
        return log
    if format == "rosbag2" and not path.is_dir():
        raise SourceError(f"recording {str(path)!r}: a rosbag2 recording is a folder with "
                          f"metadata.yaml (a single file: format mcap or sqlite3)")
    if format in ("mcap", "sqlite3") and path.is_dir():
        raise SourceError(f"recording {str(path)!r} is a folder (format rosbag2), not a "
                          f"{format} file")
    try:
        chosen = choose_reader(reader or "rosbags", f"recording {str(path)!r} reader")
    except ValueError as exc:
        raise SourceError(str(exc)) from None
    return BagSource(path, format, time, reader=chosen, auto=reader == "auto")
