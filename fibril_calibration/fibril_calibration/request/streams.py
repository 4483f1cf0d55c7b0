"""The recorded streams a recording-source entry maps (``mapping``): a bag's topic and field
or a CSV log's columns, read once, checked (validity, gaps) and moved onto the episode's time
base."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Protocol

import numpy as np

from fibril_sim_core import schema as s

from ..recordings.sources import Source, SourceError, Stream
from .source_specs import SourceSpec, max_gap_ns
from .validity import Plausible, apply_validity, parse_validity

__all__ = ["STREAM_KEYS", "EntrySource", "MappedStream", "SourceLookup", "check_gaps", "map_stream",
           "named_columns", "named_topics"]

STREAM_KEYS = ("topic", "field", "type", "time", "column", "columns", "max_gap", "source",
               "valid", "on_invalid")


class SourceLookup(Protocol):
    """The request's sources (``mapping.SourceSet``): named specs and the opened files."""

    @property
    def wanted(self) -> list[str]:
        """The columns the entry being read names (a CSV log reads them in one pass)."""
        ...

    def spec(self, value: object, where: s.Where) -> SourceSpec: ...

    def open(self, spec: SourceSpec, columns: Sequence[str] = ()) -> Source: ...


@dataclass(frozen=True)
class EntrySource:
    """The recording an entry maps (``source:``) and the request's sources, which a stream's
    own ``source:`` is taken from."""

    source: Source
    spec: SourceSpec
    sources: SourceLookup

@dataclass(frozen=True)
class MappedStream:
    """One stream the entry uses, with where it was declared and its gap tolerance."""

    stream: Stream
    where: s.Where
    max_gap_ns: int | None
    spec: SourceSpec | None = None  # the source it was read from


def map_stream(body: Mapping[str, object], where: s.Where, entry: EntrySource, *,
               field_suffix: str = "", column: str | None = None,
               plausible: Plausible | None = None) -> MappedStream:
    """The stream a mapping names: ``topic`` + ``field`` (+ ``type``, ``time``) of a bag, or
    ``column`` / ``columns`` of a CSV log; of the episode's source, or of the stream's own
    ``source`` (a name in ``sources`` or a mapping), its times moved by that source's
    ``offset`` onto the episode's time base; its invalid rows (``validity``: ``valid``,
    ``on_invalid`` and the model's ``plausible`` bounds) handled."""
    source, spec = entry.source, entry.spec
    if "source" in body:
        spec = entry.sources.spec(body["source"], where.key("source"))
        source = entry.sources.open(spec, entry.sources.wanted)
    validity = parse_validity(body, where)
    mapped = _read(body, where, source, spec, field_suffix=field_suffix, column=column,
                   check_values=validity.on_invalid == "error")
    checked = apply_validity(mapped.stream, validity, plausible, where)
    if checked is not mapped.stream:
        mapped = MappedStream(checked, mapped.where, mapped.max_gap_ns, mapped.spec)
    if spec.offset_ns:
        stream = mapped.stream
        mapped = MappedStream(replace(stream, times_ns=stream.times_ns + spec.offset_ns,
                                      origin_ns=None if stream.origin_ns is None
                                      else stream.origin_ns + spec.offset_ns,
                                      offset_ns=stream.offset_ns + spec.offset_ns),
                              mapped.where, mapped.max_gap_ns, spec)
    return mapped


def _read(body: Mapping[str, object], where: s.Where, source: Source, spec: SourceSpec, *,
          field_suffix: str = "", column: str | None = None,
          check_values: bool = True) -> MappedStream:
    try:
        if "topic" in body:
            if source.tabular:
                raise where.key("topic").fail(f"{str(source.path)!r} is a CSV log: name "
                                              f"column(s), not a topic")
            topic = s.string(body["topic"], where.key("topic"))
            field = s.string(body["field"], where.key("field")) if "field" in body else None
            if field is not None and field_suffix:
                field = f"{field}[{field_suffix}]"
            time = s.string(body["time"], where.key("time")) if "time" in body else None
            if time is not None and time not in ("log", "header"):
                raise where.key("time").fail(f"expected log or header, got {time!r}")
            kind = s.string(body["type"], where.key("type")) if "type" in body else None
            stream = source.stream(topic=topic, field=field, time=time, message_type=kind,
                                   check_values=check_values)
        else:
            if not source.tabular:
                raise where.fail(f"{str(source.path)!r} is a bag: name a topic (and field)")
            if column is not None:
                columns = [column]
            elif "column" in body:
                columns = [s.string(body["column"], where.key("column"))]
            elif "columns" in body:
                raw = s.sequence(body["columns"], where.key("columns"))
                columns = [s.string(c, where.key("columns").key(i)) for i, c in enumerate(raw)]
                if not columns:
                    raise where.key("columns").fail("expected at least one column name")
            else:
                raise where.fail("name the recorded data: topic + field (a bag) or column / "
                                 "columns (a CSV log)")
            stream = source.stream(columns=columns, check_values=check_values)
    except SourceError as exc:
        raise where.fail(str(exc)) from None
    gap = max_gap_ns(body, where)
    return MappedStream(stream, where, gap if gap is not None else spec.max_gap_ns, spec)



def named_topics(value: object) -> list[str]:
    """Every ``topic:`` string inside the entry's mappings and lists."""
    found: list[str] = []
    if isinstance(value, Mapping):
        if isinstance(value.get("topic"), str):
            found.append(value["topic"])
        for item in value.values():
            found.extend(named_topics(item))
    elif isinstance(value, (list, tuple)):
        for item in value:
            found.extend(named_topics(item))
    return found


def named_columns(value: object) -> list[str]:
    """Every CSV column name the entry's mappings may use (``column``, ``columns`` and the
    keys of ``endpoints``); a name that is no column is left for the stream to report."""
    found: list[str] = []
    if isinstance(value, Mapping):
        for key in ("column", "columns"):
            item = value.get(key)
            found.extend([item] if isinstance(item, str) else
                         [c for c in item if isinstance(c, str)] if isinstance(item, list)
                         else [])
        if isinstance(value.get("endpoints"), Mapping):
            found.extend(str(k) for k in value["endpoints"])
        for item in value.values():
            found.extend(named_columns(item))
    elif isinstance(value, (list, tuple)):
        for item in value:
            found.extend(named_columns(item))
    return found


def check_gaps(mapped: MappedStream, start: int, end: int, origin: int, label: str) -> None:
    """No two neighbouring samples of the window (its edges included) further apart than the
    stream's ``max_gap``."""
    limit = mapped.max_gap_ns
    if limit is None:
        return
    times = mapped.stream.times_ns
    first = int(np.searchsorted(times, start, "left"))
    stop = int(np.searchsorted(times, end, "right"))
    edges = np.concatenate(([start], times[first:stop], [end]))
    gaps = np.diff(edges)
    wide = np.flatnonzero(gaps > limit)
    if wide.size:
        i = int(wide[0])
        stream = mapped.stream
        ends = [("the window start" if i == 0 else stream.index(first + i - 1)),
                ("the window end" if first + i >= stop else stream.index(first + i))]
        raise mapped.where.fail(
            f"{label}: {stream.label} has a gap of {gaps[i] / 1e6:.6g} ms between {ends[0]} "
            f"and {ends[1]}, from {stream.span(edges[i], edges[i + 1], origin)}, more than "
            f"max_gap {limit / 1e6:g} ms")

