"""Calibrate from Python: ``calibrate(request)`` for a request built in Python, resolved, or
a request file, returning the typed ``CalibrationResult`` (``result.parameters[id].value``,
``.sd``, ``.interval``; ``result.verdict``, ``result.scores``, ``result.to_overlay()``,
``result.save(path)``)."""

from __future__ import annotations

from pathlib import Path

from .engine import CalibrationResult, run_calibration
from .request.document import CalibrationRequest as ResolvedRequest
from .request.typed import CalibrationRequest
from .solve.problem import Progress

__all__ = ["calibrate"]


def calibrate(request: CalibrationRequest | ResolvedRequest | str | Path, *,
              progress: Progress | None = None, metrics: bool = False) -> CalibrationResult:
    """Resolve the request (as the YAML loader does), fit, analyse; ``progress`` receives one
    line per stage and iteration, ``metrics`` adds the per-episode metrics documents."""
    if isinstance(request, CalibrationRequest):
        request = request.resolve()
    return run_calibration(request, progress=progress, metrics=metrics)
