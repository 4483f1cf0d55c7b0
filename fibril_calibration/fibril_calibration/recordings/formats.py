"""Opening a recording: its format from the name (a folder: rosbag2, ``.mcap``, ``.db3``,
``.csv`` / ``.tsv``) or as given, and the reader that format takes (``sources``, ``franka``).

Apart from ``sources`` so that the readers, built on it, sit between the two: ``sources`` <
``bag_source`` / ``franka`` < ``formats``, no import goes back.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from .sources import SOURCE_FORMATS, CsvSource, Source, SourceError

# Each format's reader is imported when a recording of that format is opened: a CSV log never
# loads rosbags (its typestore, zstd, lz4, sqlite3) nor the Franka ring-log reader.

__all__ = ["open_source"]


def open_source(path: Path, format: str | None = None, *, time: str = "log",
                time_column: str | None = None, time_unit: str | None = None,
                sidecar: Path | None = None, reader: str | None = None,
                columns: Sequence[str] = (), accept: Sequence[str] = (),
                abort: str = "refuse", types: Sequence[Path] = (),
                header: bool | None = None,
                column_names: Sequence[str] | Mapping[int, str] | None = None,
                delimiter: str | None = None) -> Source:
    """Open a recording; ``format`` defaults from the path (a folder: rosbag2, ``.mcap``,
    ``.db3``, ``.csv`` / ``.tsv``); ``reader`` picks a bag's library (``bag_readers``:
    rosbags by default). A CSV log's time column is read and checked here, with ``columns``
    (those the caller will map: one pass); ``header: False`` with ``column_names`` reads a
    headerless export, ``delimiter`` (``,`` ``;`` tab) is found from row 1 when not given.
    ``accept`` / ``abort``: a franka_sysid run's ring-log problems taken knowingly and what an
    aborted run does (``FrankaSource``). Raises SourceError when it is missing or
    unreadable."""
    if not path.exists():
        raise SourceError(f"recording {str(path)!r} does not exist")
    if format is None:
        suffix = path.suffix.lower()
        format = ("rosbag2" if path.is_dir() else
                  {".mcap": "mcap", ".db3": "sqlite3", ".csv": "csv",
                   ".tsv": "csv"}.get(suffix, ""))
        if not format:
            raise SourceError(f"recording {str(path)!r}: cannot tell its format from the name; "
                              f"give format: one of {', '.join(SOURCE_FORMATS)}")
    if format not in SOURCE_FORMATS:
        raise SourceError(f"unknown recording format {format!r}; expected one of "
                          f"{', '.join(SOURCE_FORMATS)}")
    franka = format in ("franka_sysid", "franka_target")
    if (accept or abort != "refuse") and format != "franka_sysid":
        raise SourceError(f"recording {str(path)!r}: accept / abort are a franka_sysid run's "
                          f"(its sidecar's ring_log and abort blocks), not a {format}'s")
    if (format == "csv" or franka) and reader is not None:
        raise SourceError(f"recording {str(path)!r}: reader {reader!r} chooses how a bag is "
                          f"read; a {format} log takes no reader")
    if format == "csv" or franka:
        if types:
            raise SourceError(f"recording {str(path)!r}: types (message definitions) are for "
                              f"bags; a {format} log takes none")
        if path.is_dir():
            raise SourceError(f"recording {str(path)!r} is a folder, not a CSV file")
        if franka:
            from .franka import FrankaSource, FrankaTargetSource

            if time_column is not None or time_unit is not None:
                raise SourceError(f"recording {str(path)!r}: the {format} format takes its "
                                  f"time from seq (1 kHz ring log) or t_s; give no time_column")
            log: CsvSource = (FrankaSource(path, sidecar, accept=accept, abort=abort)
                              if format == "franka_sysid" else FrankaTargetSource(path, sidecar))
        else:
            log = CsvSource(path, time_column, time_unit, header=header,
                            columns=column_names, delimiter=delimiter)
        if log.rows == 1:  # (a franka ring log's targets file may hold one target)
            raise SourceError(f"recording {str(path)!r} has one row; an episode needs at least "
                              f"two samples (nothing can be fitted or scored on one)")
        log.prefetch(columns)
        return log
    if header is not None or column_names is not None or delimiter is not None:
        raise SourceError(f"recording {str(path)!r}: header, columns and delimiter describe a "
                          f"CSV log; a {format} recording takes none")
    if format == "rosbag2" and not path.is_dir():
        raise SourceError(f"recording {str(path)!r}: a rosbag2 recording is a folder with "
                          f"metadata.yaml (a single file: format mcap or sqlite3)")
    if format in ("mcap", "sqlite3") and path.is_dir():
        raise SourceError(f"recording {str(path)!r} is a folder (format rosbag2), not a "
                          f"{format} file")
    from .bag_readers import choose_reader
    from .bag_source import BagSource

    try:
        chosen = choose_reader(reader or "rosbags", f"recording {str(path)!r} reader")
    except ValueError as exc:
        raise SourceError(str(exc)) from None
    return BagSource(path, format, time, reader=chosen, auto=reader == "auto",
                     types=tuple(types))
