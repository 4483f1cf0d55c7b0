"""A recording source's settings (``SourceSpec``): one mapping of the request's ``sources``
or an episode's inline ``source:``, every key checked before any file is opened."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from fibril_sim_core import schema as s

from ..recordings.bag_readers import choose_reader
from ..recordings.franka_sidecar import ABORT_POLICIES, ACCEPTABLE
from ..recordings.message_types import msg_folder_types

__all__ = ["ColumnNames", "SourceSpec", "max_gap_ns", "parse_source_spec", "reader_columns"]

_SOURCE_KEYS = ("path", "format", "time", "time_column", "time_unit", "max_gap", "origin",
                "offset", "accept", "abort", "sidecar", "reader", "types", "header", "columns",
                "delimiter")
_NS = 1_000_000_000

#: A headerless CSV export's column names: in file order, or (column index, name) pairs.
ColumnNames = tuple[str, ...] | tuple[tuple[int, str], ...]

@dataclass(frozen=True)
class SourceSpec:
    """One recording source as the request gives it (``sources:`` or an episode's inline
    ``source:``), its paths resolved against the request's folder."""

    path: Path
    where: s.Where
    format: str | None
    time: str
    time_column: str | None
    time_unit: str | None
    max_gap_ns: int | None
    origin_ns: int | None
    sidecar: Path | None = None
    reader: str | None = None  # a bag's library (bag_readers): None is rosbags
    types: tuple[Path, ...] = ()  # .msg folders for types the bag does not define
    header: bool | None = None  # a CSV log: False for a headerless export
    column_names: ColumnNames | None = None
    delimiter: str | None = None
    offset_ns: int = 0  # added to its times: onto the episode's time base
    name: str | None = None  # its name in the request's sources (None: given inline)
    accept: tuple[str, ...] = ()  # franka_sysid: ring-log problems taken knowingly
    abort: str = "refuse"  # franka_sysid: an aborted run is refused, or truncated


def _franka_options(body: Mapping[str, object], where: s.Where) -> tuple[tuple[str, ...], str]:
    """``accept`` (a list of ACCEPTABLE names) and ``abort`` (an ABORT_POLICIES name) of a
    franka_sysid source (``()`` and ``refuse`` when absent)."""
    out: dict[str, object] = {}
    accept: tuple[str, ...] = ()
    abort = "refuse"
    if "accept" in body:
        at = where.key("accept")
        names = [s.string(v, at.key(i)) for i, v in enumerate(s.sequence(body["accept"], at))]
        for i, name in enumerate(names):
            if name not in ACCEPTABLE:
                raise at.key(i).fail(f"unknown {name!r}; a franka_sysid source accepts "
                                     f"{', '.join(ACCEPTABLE)}")
        out["accept"] = accept = tuple(names)
    if "abort" in body:
        policy = s.string(body["abort"], where.key("abort"))
        if policy not in ABORT_POLICIES:
            raise where.key("abort").fail(f"expected one of {', '.join(ABORT_POLICIES)}, got "
                                          f"{policy!r}")
        out["abort"] = abort = policy
    if out and body.get("format") != "franka_sysid":
        key = next(iter(out))
        raise where.key(key).fail(f"{key} is a franka_sysid source's (its sidecar's ring_log "
                                  f"and abort blocks); this source's format is "
                                  f"{body.get('format') or 'from its file name'}")
    return accept, abort


def parse_source_spec(value: object, where: s.Where, base: Path,
                      name: str | None = None) -> SourceSpec:
    """One source mapping (``path`` relative to ``base``), every key checked; ``name`` is its
    name in the request's ``sources`` (None: an inline mapping)."""
    body = s.mapping(value, where)
    s.keys(body, where, required=("path",), optional=_SOURCE_KEYS)
    time = s.string(body.get("time", "log"), where.key("time"))
    if time not in ("log", "header"):
        raise where.key("time").fail(f"expected log (the bag's receive time) or header "
                                     f"(header.stamp), got {time!r}")
    if "reader" in body:
        try:
            choose_reader(s.string(body["reader"], where.key("reader")), "reader")
        except ValueError as exc:
            raise where.key("reader").fail(str(exc).removeprefix("reader: ")) from None
    origin = None
    if "origin" in body:
        origin = round(s.number(body["origin"], where.key("origin")) * _NS)
    offset = 0
    if "offset" in body:
        offset = round(s.number(body["offset"], where.key("offset")) * _NS)
    accept, abort = _franka_options(body, where)
    layout = _csv_layout(body, where)
    return SourceSpec(
        path=base / s.string(body["path"], where.key("path")), where=where,
        format=s.string(body["format"], where.key("format")) if "format" in body else None,
        time=time,
        time_column=(s.string(body["time_column"], where.key("time_column"))
                     if "time_column" in body else None),
        time_unit=(s.string(body["time_unit"], where.key("time_unit"))
                   if "time_unit" in body else None),
        max_gap_ns=max_gap_ns(body, where), origin_ns=origin,
        sidecar=(base / s.string(body["sidecar"], where.key("sidecar"))
                 if "sidecar" in body else None),
        reader=s.string(body["reader"], where.key("reader")) if "reader" in body else None,
        types=_types(body, where, base), header=layout.header,
        column_names=layout.column_names, delimiter=layout.delimiter,
        offset_ns=offset, name=name, accept=accept, abort=abort)


@dataclass(frozen=True)
class _CsvLayout:
    header: bool | None = None
    column_names: ColumnNames | None = None
    delimiter: str | None = None


def _csv_layout(body: Mapping[str, object], where: s.Where) -> _CsvLayout:
    """A CSV export's ``header: false``, ``columns`` ([names] or {index: name}) and
    ``delimiter`` ("," ";" or "\\t")."""
    header: bool | None = None
    column_names: ColumnNames | None = None
    delimiter: str | None = None
    if "header" in body:
        value = body["header"]
        if not isinstance(value, bool):
            raise where.key("header").fail(f"expected true or false, got {s.describe(value)}")
        header = value
    if "columns" in body:
        at = where.key("columns")
        if header is None or header:
            raise at.fail("columns names the columns of a file without a header row: give "
                          "header: false too")
        value = body["columns"]
        names: list[str]
        if isinstance(value, Mapping):
            pairs = []
            for key, name in value.items():
                if isinstance(key, bool) or not isinstance(key, int) or key < 0:
                    raise at.fail(f"expected column indices (0, 1, ...) as keys, got {key!r}")
                pairs.append((key, s.string(name, at.key(str(key)))))
            column_names = tuple(sorted(pairs))
            names = [p[1] for p in column_names]
        else:
            column_names = tuple(s.string(v, at.key(n))
                                 for n, v in enumerate(s.sequence(value, at)))
            names = list(column_names)
        if len(set(names)) != len(names):
            raise at.fail("a column is named twice")
    if "delimiter" in body:
        delimiter = s.string(body["delimiter"], where.key("delimiter"))
        if delimiter not in (",", ";", "\t"):
            raise where.key("delimiter").fail(f"expected ',', ';' or a tab, got {delimiter!r}")
    return _CsvLayout(header, column_names, delimiter)


def reader_columns(value: ColumnNames | None) -> Sequence[str] | Mapping[int, str] | None:
    """The reader's form of ``column_names``: names in order, or index → name."""
    if value is None:
        return None
    pairs = [item for item in value if isinstance(item, tuple)]
    if pairs:
        return dict(pairs)
    return [item for item in value if isinstance(item, str)]


def _types(body: Mapping[str, object], where: s.Where, base: Path) -> tuple[Path, ...]:
    """``types: [msg_dir, ...]``: folders of .msg files (``message_types``), each checked."""
    if "types" not in body:
        return ()
    at = where.key("types")
    items = body["types"]
    if not isinstance(items, list) or not items:
        raise at.fail("expected a list of folders of .msg files")
    folders = tuple(base / s.string(item, at.key(n)) for n, item in enumerate(items))
    try:
        msg_folder_types(folders)
    except ValueError as exc:
        raise at.fail(str(exc)) from None
    return folders


def max_gap_ns(body: Mapping[str, object], where: s.Where) -> int | None:
    """A source's or a stream's ``max_gap`` (s) in ns; None when absent."""
    if "max_gap" not in body:
        return None
    return round(s.number(body["max_gap"], where.key("max_gap"), positive=True) * _NS)

