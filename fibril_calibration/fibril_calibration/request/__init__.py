"""The calibration request (schema 3.1), split by what it parses: the document and its sections
(``document``), one episode (``episode_specs``), a signal's inline or CSV samples
(``inline_samples``, ``csv_samples``), initial states (``initial_states``), recording sources
and their windows (``mapping``, ``windows``), and the canonical JSON its hashes use
(``canonical``).

Above ``recordings`` and ``model``, below ``solve``. The names below load on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fibril_sim_core._lazy import lazy_exports

_EXPORTS: dict[str, str] = {
    **dict.fromkeys(("AnalysisSpec", "CalibrationRequest", "ExecutionSpec", "FitSpec",
                     "ObjectiveSpec", "OptimizerSpec", "ProfileLikelihoodSpec",
                     "load_calibration_request", "parse_calibration_request"),
                    ".document"),
    **dict.fromkeys(("EpisodeSpec", "SignalSpec"), ".episode_specs"),
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())

if TYPE_CHECKING:
    from .document import (AnalysisSpec, CalibrationRequest, ExecutionSpec, FitSpec,
                           ObjectiveSpec, OptimizerSpec, ProfileLikelihoodSpec,
                           load_calibration_request, parse_calibration_request)
    from .episode_specs import EpisodeSpec, SignalSpec
