"""How a recording source's input samples were moved onto the tick grid (``commit``
policies), per episode and merged over episodes: what the result reports as input timing.
Light on purpose: the result reads it without loading the recording readers."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, TypedDict

from .._json import JsonObject

__all__ = ["InputTiming", "SourceSummary", "TimingStats", "describe_timing", "new_stats"]

_NS = 1_000_000_000


class TimingStats(TypedDict, total=False):
    """How the input samples of one commit policy were moved onto ticks (result JSON)."""

    samples: int
    moved: int
    max_shift_ns: int
    held_at_start: int
    held_latency_ticks: int
    max_shift_s: float


#: commit policy → its statistics.
InputTiming = dict[str, TimingStats]


class SourceSummary(TypedDict, total=False):
    """The ``source`` summary of an episode read from a recording source (result JSON,
    ``EpisodeSpec.source``): the file and format, the declaring entry, the window, the files
    used and how the input samples were moved onto ticks, and what the reader reported."""

    path: str
    format: str
    entry: str
    sources: list[JsonObject]
    recording_use: list[JsonObject]
    input_sources: list[str]
    reader: str | None
    window_s: list[float]
    origin_ns: int
    start_ns: int
    sidecar: str | None
    input_timing: InputTiming
    warnings: list[str]
    reader_fallback: str
    ring_targets: JsonObject
    controller: str
    ring_log: JsonObject


def new_stats() -> TimingStats:
    return {"samples": 0, "moved": 0, "max_shift_ns": 0, "held_at_start": 0,
            "held_latency_ticks": 0}


class _Sourced(Protocol):
    """An episode as read here (``EpisodeSpec``): its source summary, if any."""

    @property
    def source(self) -> SourceSummary | None: ...


def describe_timing(episodes: Sequence[_Sourced]) -> InputTiming | None:
    """Input timing of several episodes merged (None: none came from a source)."""
    merged: InputTiming = {}
    for episode in episodes:
        info = episode.source
        if not info:
            continue
        timing: InputTiming = info["input_timing"]
        for policy, stats in timing.items():
            acc = merged.setdefault(policy, new_stats())
            acc["samples"] += stats["samples"]
            acc["moved"] += stats["moved"]
            acc["held_at_start"] += stats["held_at_start"]
            acc["max_shift_ns"] = max(acc["max_shift_ns"], stats["max_shift_ns"])
            acc["held_latency_ticks"] = max(acc["held_latency_ticks"],
                                            stats["held_latency_ticks"])
    for stats in merged.values():
        stats["max_shift_s"] = stats["max_shift_ns"] / _NS
    return merged or None
