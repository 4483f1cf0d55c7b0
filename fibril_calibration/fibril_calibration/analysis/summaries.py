"""Residual summaries: aggregate, per-episode and per-signal count, SSE and RMS.

``RMS = sqrt(SSE / count)`` over scalar residuals. ``training_summary`` / ``validation_summary``
summarise raw unweighted data residuals (no episode weight, loss or prior), so a prior or a
weight can never make the physical fit look better; ``optimization_summary`` summarises what
the optimizer actually minimised: robustified data contributions ``c**2 rho(r**2 / c**2)`` and
the ``__prior__`` episode (one signal per parameter with a prior).

With ``initial_state_fit`` the residuals are projected: each episode's nuisance initial states
took ``nuisance_dof`` (the rank of its sensitivity) degrees of freedom, so ``SSE / count``
underestimates the noise variance. Such summaries also give ``rms_dof_corrected = sqrt(SSE /
(count - nuisance_dof))`` (aggregate and per episode), the figure the fit verdict compares with
``max_training_rms`` / ``max_validation_rms``; ``rms`` stays ``sqrt(SSE / count)``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from .._json import JsonObject
from ..evaluation import ResidualBlock


def _rms(sse: float, count: int) -> float | None:
    return math.sqrt(sse / count) if count > 0 else None


def _corrected(sse: float, count: int, removed: int) -> float | None:
    return math.sqrt(sse / (count - removed)) if count > removed else None


def _dof_fields(sse: float, count: int, removed: int) -> JsonObject:
    if not removed:
        return {}
    return {"nuisance_degrees_of_freedom": removed,
            "rms_dof_corrected": _corrected(sse, count, removed)}


@dataclass(frozen=True)
class SignalSummary:
    signal: str
    count: int
    sse: float

    @property
    def rms(self) -> float | None:
        return _rms(self.sse, self.count)

    def to_document(self) -> JsonObject:
        return {"signal": self.signal, "count": self.count, "sse": self.sse, "rms": self.rms}


@dataclass(frozen=True)
class EpisodeSummary:
    episode: str
    count: int
    sse: float
    signals: tuple[SignalSummary, ...]
    nuisance_dof: int = 0  # initial_state_fit: the rank of the episode's sensitivity

    @property
    def rms(self) -> float | None:
        return _rms(self.sse, self.count)

    @property
    def criterion_rms(self) -> float | None:
        """The RMS the fit verdict uses: dof-corrected when nuisance states were fitted."""
        return _corrected(self.sse, self.count, self.nuisance_dof) if self.nuisance_dof \
            else self.rms

    def to_document(self) -> JsonObject:
        return {
            "episode": self.episode,
            "count": self.count,
            "sse": self.sse,
            "rms": self.rms,
            **_dof_fields(self.sse, self.count, self.nuisance_dof),
            "signals": [s.to_document() for s in self.signals],
        }


@dataclass(frozen=True)
class ResidualSummary:
    count: int
    sse: float
    episodes: tuple[EpisodeSummary, ...]
    nuisance_dof: int = 0  # initial_state_fit: degrees of freedom of the nuisance states

    @property
    def rms(self) -> float | None:
        return _rms(self.sse, self.count)

    @property
    def criterion_rms(self) -> float | None:
        """The RMS the fit verdict uses: dof-corrected when nuisance states were fitted."""
        return _corrected(self.sse, self.count, self.nuisance_dof) if self.nuisance_dof \
            else self.rms

    def episode(self, episode: str) -> EpisodeSummary:
        for summary in self.episodes:
            if summary.episode == episode:
                return summary
        raise KeyError(episode)

    @property
    def episode_ids(self) -> tuple[str, ...]:
        return tuple(e.episode for e in self.episodes)

    def to_document(self) -> JsonObject:
        return {
            "aggregate": {"count": self.count, "sse": self.sse, "rms": self.rms,
                          **_dof_fields(self.sse, self.count, self.nuisance_dof)},
            "episodes": [e.to_document() for e in self.episodes],
        }


def summarize(squares: np.ndarray, blocks: Sequence[ResidualBlock],
              nuisance_dof: Mapping[str, int] | None = None) -> ResidualSummary:
    """Summarise per-residual squared contributions by the blocks' (episode, signal).

    Episodes and signals keep their first-appearance (declaration) order; repeated
    (episode, signal) blocks merge. ``nuisance_dof``: episode id → degrees of freedom its
    nuisance initial states took (``initial_state_fit``).
    """
    removed = dict(nuisance_dof or {})
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
                int(removed.get(episode, 0)),
            )
        )
    return ResidualSummary(int(squares.size), float(np.sum(squares)), tuple(episode_summaries),
                           int(sum(e.nuisance_dof for e in episode_summaries)))
