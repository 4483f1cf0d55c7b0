"""What a solution means: local identifiability and covariance (``identifiability``), profile
likelihood intervals (``profile_likelihood``), residual summaries (``summaries``), the fit
verdict (``verdict``) and a parameter set's scores in physical units (``scores``, with the
observations' units in ``units``).

Above ``solve`` (a profile re-optimizes), below the outcome, result and engine.

The names below are imported on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fibril_sim_core._lazy import lazy_exports

_EXPORTS: dict[str, str] = {
    **dict.fromkeys(("InformationMatrix", "LocalAnalysis"), ".identifiability"),
    **dict.fromkeys(("ParameterProfile", "ProfileLikelihood", "ProfilePoint"),
                    ".profile_likelihood"),
    **dict.fromkeys(("EpisodeSummary", "ResidualSummary", "SignalSummary"), ".summaries"),
    **dict.fromkeys(("FitCriteria", "FitVerdict"), ".verdict"),
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())

if TYPE_CHECKING:
    from .identifiability import InformationMatrix, LocalAnalysis
    from .profile_likelihood import ParameterProfile, ProfileLikelihood, ProfilePoint
    from .summaries import EpisodeSummary, ResidualSummary, SignalSummary
    from .verdict import FitCriteria, FitVerdict
