"""Residual summaries: aggregate, per-episode and per-signal count, SSE and RMS.

``RMS = sqrt(SSE / count)`` over scalar residuals. ``training_summary`` / ``validation_summary``
summarise raw unweighted data residuals (no episode weight, loss or prior), so a prior or a
weight can never make the physical fit look better; ``optimization_summary`` summarises what
the optimizer actually minimised: robustified data contributions ``c**2 rho(r**2 / c**2)`` and
the ``__prior__`` episode (one signal per parameter with a prior).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .evaluation import ResidualBlock


def _rms(sse: float, count: int) -> float | None:
    return math.sqrt(sse / count) if count > 0 else None


@dataclass(frozen=True)
class SignalSummary:
    signal: str
    count: int
    sse: float

    @property
    def rms(self) -> float | None:
        return _rms(self.sse, self.count)

    def to_document(self) -> dict[str, Any]:
        return {"signal": self.signal, "count": self.count, "sse": self.sse, "rms": self.rms}


@dataclass(frozen=True)
class EpisodeSummary:
    episode: str
    count: int
    sse: float
    signals: tuple[SignalSummary, ...]

    @property
    def rms(self) -> float | None:
        return _rms(self.sse, self.count)

    def to_document(self) -> dict[str, Any]:
        return {
            "episode": self.episode,
            "count": self.count,
            "sse": self.sse,
            "rms": self.rms,
            "signals": [s.to_document() for s in self.signals],
        }


@dataclass(frozen=True)
class ResidualSummary:
    count: int
    sse: float
    episodes: tuple[EpisodeSummary, ...]

    @property
    def rms(self) -> float | None:
        return _rms(self.sse, self.count)

    def episode(self, episode: str) -> EpisodeSummary:
        for summary in self.episodes:
            if summary.episode == episode:
                return summary
        raise KeyError(episode)

    @property
    def episode_ids(self) -> tuple[str, ...]:
        return tuple(e.episode for e in self.episodes)

    def to_document(self) -> dict[str, Any]:
        return {
            "aggregate": {"count": self.count, "sse": self.sse, "rms": self.rms},
            "episodes": [e.to_document() for e in self.episodes],
        }


def summarize(squares: np.ndarray, blocks: Sequence[ResidualBlock]) -> ResidualSummary:
    """Summarise per-residual squared contributions by the blocks' (episode, signal).

    Episodes and signals keep their first-appearance (declaration) order; repeated
    (episode, signal) blocks merge.
    """
    squares = np.asarray(squares, dtype=float)
    episodes: dict[str, dict[str, list[float]]] = {}
    for block in blocks:
        signals = episodes.setdefault(block.episode, {})
        acc = signals.setdefault(block.signal, [0, 0.0])
        acc[0] += block.stop - block.start
        acc[1] += float(np.sum(squares[block.start : block.stop]))
    episode_summaries = []
    for episode, signals in episodes.items():
        signal_summaries = tuple(SignalSummary(s, int(c), float(e)) for s, (c, e) in signals.items())
        episode_summaries.append(
            EpisodeSummary(
                episode,
                sum(s.count for s in signal_summaries),
                float(sum(s.sse for s in signal_summaries)),
                signal_summaries,
            )
        )
    return ResidualSummary(int(squares.size), float(np.sum(squares)), tuple(episode_summaries))
